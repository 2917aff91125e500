// The pipeline: model -> checked graph -> training graph -> analysis -> plan -> execution.
#include "planner/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tofu {
namespace {

/// Whether `dir` holds a .tdl file (in it or up to two folders down).
bool holdsTdl(const std::filesystem::path &dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return false;
  // Symbolic links inside are not followed and the walk stays shallow: a directory given by
  // mistake (/, a home) is answered quickly.
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tdl")
      return true;
    if (it.depth() >= 2)
      it.disable_recursion_pending();
  }
  return false;
}

} // namespace

llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave,
                                       const std::string &anchor, const std::string &label) {
  if (userGave) {
    if (!holdsTdl(given))
      return stringError(label + " " + given + ": no .tdl files there");
    return given;
  }
  std::vector<std::string> looked;
  if (const char *env = std::getenv("TOFU_OPS"); env && *env) {
    if (!holdsTdl(env))
      return stringError(std::string("TOFU_OPS=") + env + ": no .tdl files there");
    return std::string(env);
  }
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::canonical(anchor.empty() ? "/proc/self/exe" : anchor, ec);
  if (!ec) {
    // A Bazel build: the library is among the binary's runfiles.
    const std::filesystem::path runfiles = exe.string() + ".runfiles/tofu/ops";
    if (holdsTdl(runfiles))
      return runfiles.string();
    looked.push_back(runfiles.string());
  }
  if (!ec)
    for (std::filesystem::path d = exe.parent_path();; d = d.parent_path()) {
      for (const char *sub : {"share/tofu/ops", "ops"}) {
        const std::filesystem::path candidate = d / sub;
        if (holdsTdl(candidate))
          return candidate.string();
        looked.push_back(candidate.string());
      }
      if (d == d.parent_path())
        break;
    }
  if (holdsTdl("ops"))
    return std::string("ops");
  looked.push_back(std::filesystem::absolute("ops", ec).string());
  std::string list;
  std::sort(looked.begin(), looked.end());
  looked.erase(std::unique(looked.begin(), looked.end()), looked.end());
  for (const std::string &l : looked)
    list += "\n  " + l;
  return stringError("cannot find the operator library (.tdl files); give --ops DIR or set "
                     "TOFU_OPS. Looked in:" +
                     list);
}

const char kTrainableHelp[] =
    "With --onnx: float initializers to train whatever the import's rule says (by default "
    "an initializer holding a value that is not finite, or an anonymous one of one "
    "element, onnx::<op>_<n>, is a constant)";
const char *const kBf16PrecisionHelp =
    "as torch.autocast(dtype=torch.bfloat16): products and convolutions on bfloat16 operands, "
    "accumulating in float32; softmax, normalisations' statistics, losses, exp, log, pow and "
    "sums in float32; weights, gradients of weights and optimiser state float32";
const char kFrozenHelp[] =
    "With --onnx: float initializers to keep constant (not trained, not in checkpoints)";

namespace {

/// The graph a source names, not yet checked.
llvm::Expected<Graph> readGraph(const GraphSource &source, const OpLibrary &lib,
                                std::string *name) {
  if (!source.model.empty()) {
    *name = source.model;
    return buildModel(source.model, source.batch);
  }
  if (!source.onnxFile.empty()) {
    *name = source.onnxFile;
    OnnxImportOptions options;
    options.batch = source.batch;
    options.dataInputs = source.dataInputs;
    options.dataInputsExact = source.dataInputsGiven;
    options.batchExact = source.batchGiven;
    options.givenInputs = source.givenInputs;
    options.sampleShapes = source.sampleShapes;
    options.trainable = source.trainable;
    options.frozen = source.frozen;
    return importOnnx(source.onnxFile, lib, options);
  }
  *name = source.graphFile;
  auto buf = llvm::MemoryBuffer::getFile(source.graphFile);
  if (!buf)
    return stringError("cannot read " + source.graphFile + ": " + buf.getError().message());
  auto g = graphFromJson((*buf)->getBuffer().str());
  if (!g)
    return stringError(source.graphFile + ": " + llvm::toString(g.takeError()));
  return g;
}

} // namespace

llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib,
                                std::string *name) {
  auto g = readGraph(source, lib, name);
  if (!g)
    return g.takeError();
  if (llvm::Error e = checkGraph(*g, lib))
    return stringError(*name + ": " + llvm::toString(std::move(e)));
  return g;
}

llvm::Expected<PipelineResult> runPipeline(Graph g, const std::string &name, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed) {
  Stage stage = Stage::Graph;
  auto fail = [&](llvm::Error e) {
    if (failed)
      *failed = stage;
    return stringError(name + ": " + llvm::toString(std::move(e)));
  };
  PipelineResult r;
  r.name = name;
  if (llvm::Error e = checkGraph(g, lib))
    return fail(std::move(e));
  if (options.train) {
    if (g.outputs.empty())
      return fail(stringError("a training step needs a graph with an output (the loss, or the "
                              "prediction a loss is added to); this one has none"));
    std::string chosen;
    if (!options.lossOutput.empty()) {
      if (std::find(g.outputs.begin(), g.outputs.end(), options.lossOutput) == g.outputs.end())
        return fail(stringError(fmt::format("the loss output '{}' is not an output of the "
                                            "graph (its outputs: {})",
                                            options.lossOutput, fmt::join(g.outputs, ", "))));
      chosen = options.lossOutput;
    } else if (g.outputs.size() > 1) {
      chosen = g.outputs[0];
      r.lossNote = fmt::format("the graph has {} outputs ({}): training on the first, '{}' "
                               "(--loss-output names another)",
                               g.outputs.size(), fmt::join(g.outputs, ", "), chosen);
    }
    if (!chosen.empty())
      g.outputs = {chosen};
    const std::string output = g.outputs[0];
    auto loss = addLoss(g, lib, options.loss);
    if (!loss)
      return fail(loss.takeError());
    // Say which loss addLoss chose and what it named its new input (from the node it added).
    if (*loss != output) {
      const Node *added = g.producer(*loss);
      r.lossNote += fmt::format("{}the output '{}' is not a scalar: training with {} against the "
                                "new input '{}'",
                                r.lossNote.empty() ? "" : "; ", output,
                                added->op == "softmax_cross_entropy" ? "softmax cross-entropy"
                                : added->op == "softmax_cross_entropy_seq"
                                    ? "softmax cross-entropy at every position"
                                    : "the mean squared error",
                                added->inputs[1]);
    }
    r.loss = *loss;
  }
  // The policy sees the loss a training step adds, and the backward ops follow its types.
  auto mixed = applyPrecision(g, lib, options.precision);
  if (!mixed)
    return fail(mixed.takeError());
  r.precision = *mixed;
  if (options.train) {
    auto t = buildTrainingGraph(g, r.loss, lib, *options.train, options.weightDecay);
    if (!t)
      return fail(t.takeError());
    g = std::move(*t);
  }
  r.graph = std::move(g);
  if (options.until == Stage::Graph)
    return llvm::Expected<PipelineResult>(std::move(r));
  stage = Stage::Problem;
  auto t0 = std::chrono::steady_clock::now();
  auto problem = Problem::build(r.graph, lib);
  if (!problem)
    return fail(problem.takeError());
  r.analysisSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.problem = std::move(*problem);
  if (options.until == Stage::Problem)
    return llvm::Expected<PipelineResult>(std::move(r));
  stage = Stage::Plan;
  auto plan = options.plan ? options.plan(*r.problem) : searchPlan(*r.problem, options.search);
  if (!plan)
    return fail(plan.takeError());
  r.plan = std::move(*plan);
  if (options.until == Stage::Plan)
    return llvm::Expected<PipelineResult>(std::move(r));
  stage = Stage::Execution;
  r.exec = buildExecPlan(*r.problem, r.plan);
  r.memory = planMemory(*r.problem, r.exec, r.graph.outputs);
  if (std::string bad = checkMemoryPlan(r.memory); !bad.empty())
    return fail(stringError("the memory plan is unsound: " + bad));
  return llvm::Expected<PipelineResult>(std::move(r));
}

llvm::Expected<PipelineResult> runPipeline(const GraphSource &source, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed) {
  std::string name;
  auto g = readGraph(source, lib, &name);
  if (!g) {
    if (failed)
      *failed = Stage::Graph;
    return g.takeError();
  }
  return runPipeline(std::move(*g), name, lib, options, failed);
}

SingleWorker singleWorker(const Problem &problem, const std::vector<std::string> &outputs) {
  SingleWorker one;
  PlanOptions o;
  o.workers = 1;
  // One worker's plan has no steps (every node whole): the search has nothing to fail on.
  one.plan = llvm::cantFail(searchPlan(problem, o));
  one.exec = buildExecPlan(problem, one.plan);
  one.memory = planMemory(problem, one.exec, outputs);
  return one;
}

} // namespace tofu
