// tofu-plan: builds dataflow graphs (zoo models or JSON files) and, as the search stage
// lands, plans their partitioning. Today: --describe.
#include <string>

#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

cl::OptionCategory planCategory("tofu-plan options");
cl::opt<std::string> model("model", cl::desc("A zoo model (see --help)"), cl::value_desc("NAME"),
                           cl::cat(planCategory));
cl::opt<std::string> graphFile("graph", cl::desc("A graph in JSON (DESIGN.md's format)"),
                               cl::value_desc("FILE.json"), cl::cat(planCategory));
cl::opt<std::string> onnxFile("onnx", cl::desc("An ONNX model (weights included or not)"),
                              cl::value_desc("FILE.onnx"), cl::cat(planCategory));
cl::opt<unsigned> dataInputs("data-inputs",
                             cl::desc("With --onnx, when weights are graph inputs: how many "
                                      "leading inputs are data (default 1)"),
                             cl::init(1), cl::cat(planCategory));
cl::opt<int64_t> batch("batch", cl::desc("Batch size for zoo models (default 32)"), cl::init(32),
                       cl::cat(planCategory));
cl::opt<bool> train("train", cl::desc("Add the backward pass and the optimiser update"),
                    cl::cat(planCategory));
cl::opt<std::string> optimizer("optimizer", cl::desc("sgd or adam (with --train; default adam)"),
                               cl::init("adam"), cl::cat(planCategory));
cl::opt<bool> describe("describe",
                       cl::desc("Print node and tensor counts and bytes per tensor role"),
                       cl::cat(planCategory));
cl::opt<std::string> opsDir("ops", cl::desc("The operator library (default: ops)"),
                            cl::init("ops"), cl::value_desc("DIR"), cl::cat(planCategory));
cl::opt<bool> dumpJson("dump-json", cl::desc("Print the graph as JSON"), cl::cat(planCategory));

std::string human(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(planCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "tofu-plan - build a model's dataflow graph and plan its partitioning\n\n"
      "  tofu-plan --model NAME [--batch B] [--train] --describe\n"
      "  tofu-plan --graph FILE.json [--train] --describe\n"
      "  tofu-plan --onnx FILE.onnx [--batch B] [--train] --describe\n\n" +
          tofu::zooHelp() +
          "\n\nPartition search (--workers, --algo) is not implemented yet.\n");
  if (int(!model.empty()) + int(!graphFile.empty()) + int(!onnxFile.empty()) != 1) {
    llvm::errs() << "tofu-plan: give exactly one of --model, --graph or --onnx (see --help)\n";
    return 2;
  }
  if (!describe && !dumpJson) {
    llvm::errs() << "tofu-plan: nothing to do: give --describe or --dump-json (partition search "
                    "is not implemented yet)\n";
    return 2;
  }
  if (optimizer != "sgd" && optimizer != "adam") {
    llvm::errs() << "tofu-plan: --optimizer must be sgd or adam\n";
    return 2;
  }
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load(opsDir, diags);
  if (!lib) {
    diags.print(llvm::errs());
    llvm::errs() << "tofu-plan: cannot load the operator library: "
                 << llvm::toString(lib.takeError()) << "\n";
    return 1;
  }
  llvm::Expected<tofu::Graph> g = llvm::createStringError(llvm::inconvertibleErrorCode(), "");
  llvm::consumeError(g.takeError());
  std::string name = model;
  if (!model.empty()) {
    g = tofu::buildModel(model, batch);
  } else if (!onnxFile.empty()) {
    tofu::OnnxImportOptions options;
    options.batch = batch;
    options.dataInputs = dataInputs;
    g = tofu::importOnnx(onnxFile, *lib, options);
    name = onnxFile;
  } else {
    auto buf = llvm::MemoryBuffer::getFile(graphFile);
    if (!buf) {
      llvm::errs() << "tofu-plan: cannot read " << graphFile << ": " << buf.getError().message()
                   << "\n";
      return 1;
    }
    g = tofu::graphFromJson((*buf)->getBuffer().str());
    name = graphFile;
  }
  if (!g) {
    llvm::errs() << "tofu-plan: " << llvm::toString(g.takeError()) << "\n";
    return 1;
  }
  if (llvm::Error e = tofu::checkGraph(*g, *lib)) {
    llvm::errs() << "tofu-plan: " << name << ": " << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  if (train) {
    if (g->outputs.size() != 1) {
      llvm::errs() << "tofu-plan: --train needs a graph with one output, the scalar loss\n";
      return 1;
    }
    auto t = tofu::buildTrainingGraph(*g, g->outputs[0], *lib,
                                      optimizer == "sgd" ? tofu::Optimizer::SGD
                                                         : tofu::Optimizer::Adam);
    if (!t) {
      llvm::errs() << "tofu-plan: " << llvm::toString(t.takeError()) << "\n";
      return 1;
    }
    g = std::move(t);
  }
  if (dumpJson) {
    llvm::outs() << tofu::graphToJson(*g);
    return 0;
  }
  int64_t bytes[5] = {0, 0, 0, 0, 0};
  unsigned count[5] = {0, 0, 0, 0, 0};
  for (const tofu::TensorInfo &t : g->tensors()) {
    bytes[static_cast<int>(t.role)] += t.bytes();
    ++count[static_cast<int>(t.role)];
  }
  llvm::outs() << fmt::format("{}{} (batch {})\n", name, train ? " training step" : "",
                              model.empty() ? "from the file" : std::to_string(batch));
  llvm::outs() << fmt::format("| | count | bytes (every tensor, no buffer reuse) |\n| --- | ---: | ---: |\n");
  llvm::outs() << fmt::format("| nodes | {} | |\n", g->nodes().size());
  llvm::outs() << fmt::format("| tensors | {} | |\n", g->tensors().size());
  for (auto r : {tofu::TensorRole::Weight, tofu::TensorRole::Input, tofu::TensorRole::Activation,
                 tofu::TensorRole::Gradient, tofu::TensorRole::OptimizerState})
    llvm::outs() << fmt::format("| {} tensors | {} | {} |\n", tofu::roleName(r),
                                count[static_cast<int>(r)], human(bytes[static_cast<int>(r)]));
  int64_t weights = bytes[static_cast<int>(tofu::TensorRole::Weight)] / 4;
  llvm::outs() << fmt::format("parameters: {} ({:.1f} million)\n", weights, weights / 1e6);
  return 0;
}
