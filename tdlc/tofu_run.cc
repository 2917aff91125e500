// tofu-run: runs one training step partitioned across --workers workers (the CPU reference
// executor: workers as threads, every op by the TDL interpreter) and, with --verify, the
// same step unpartitioned on the same random inputs and weights, comparing every output and
// updated weight. Reports the bytes moved against the plan's prediction and every worker's
// peak memory against the single-worker peak.
#include <chrono>
#include <fstream>
#include <string>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/cpu_executor.h"
#include "search/report.h"
#include "search/search.h"
#include "tdlc/graph_source.h"

namespace cl = llvm::cl;

namespace {

cl::OptionCategory runCategory("tofu-run options");
cl::opt<std::string> model("model", cl::desc("A zoo model (see --help); keep it small: every op "
                                              "runs in the TDL interpreter"),
                           cl::value_desc("NAME"), cl::cat(runCategory));
cl::opt<std::string> graphFile("graph", cl::desc("A graph in JSON"), cl::value_desc("FILE.json"),
                               cl::cat(runCategory));
cl::opt<std::string> onnxFile("onnx", cl::desc("An ONNX model"), cl::value_desc("FILE.onnx"),
                              cl::cat(runCategory));
cl::opt<unsigned> dataInputs("data-inputs", cl::desc("With --onnx: leading graph inputs that are "
                                                     "data (default 1)"),
                             cl::init(1), cl::cat(runCategory));
cl::opt<int64_t> batch("batch", cl::desc("Batch size for zoo and ONNX models (default 2)"),
                       cl::init(2), cl::cat(runCategory));
cl::opt<unsigned> workers("workers", cl::desc("Workers to partition across (required)"),
                          cl::value_desc("K"), cl::init(0), cl::cat(runCategory));
cl::opt<std::string> algo("algo", cl::desc("The search algorithm (default tofu)"), cl::init("tofu"),
                          cl::cat(runCategory));
cl::opt<std::string> backend("backend", cl::desc("Executor: cpu (the only one so far)"),
                             cl::init("cpu"), cl::cat(runCategory));
cl::opt<std::string> optimizer("optimizer", cl::desc("sgd (default) or adam"), cl::init("sgd"),
                               cl::cat(runCategory));
cl::opt<bool> verify("verify", cl::desc("Also run the step unpartitioned and compare"),
                     cl::cat(runCategory));
cl::opt<unsigned> seed("seed", cl::desc("Seed of the random inputs and weights (default 1)"),
                       cl::init(1), cl::cat(runCategory));
cl::opt<double> tolerance("tolerance", cl::desc("Largest relative difference --verify accepts "
                                                "(default 1e-4)"),
                          cl::init(1e-4), cl::cat(runCategory));
cl::opt<std::string> planJson("exec-plan", cl::desc("Write the execution plan as JSON"),
                              cl::value_desc("FILE.json"), cl::cat(runCategory));
cl::opt<bool> dumpPlan("dump-plan", cl::desc("Print the execution plan, one line per op instance"),
                       cl::cat(runCategory));
cl::opt<std::string> opsDir("ops", cl::desc("The operator library (default: ops)"), cl::init("ops"),
                            cl::value_desc("DIR"), cl::cat(runCategory));

int fail(const std::string &msg, int code = 1) {
  llvm::errs() << "tofu-run: " << msg << "\n";
  return code;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(runCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "tofu-run - run one training step partitioned, and check it against the unpartitioned "
      "step\n\n"
      "  tofu-run --model NAME [--batch B] --workers K [--verify]\n"
      "  tofu-run --graph FILE.json --workers K [--verify]\n"
      "  tofu-run --onnx FILE.onnx [--batch B] --workers K [--verify]\n\n" +
          tofu::zooHelp() +
          "\n\nA graph whose output is a prediction gets a loss (softmax cross-entropy for rank-2 "
          "logits, else MSE). Exit status: 0 when the step ran (and, with --verify, matched), 1 "
          "otherwise, 2 on bad usage.\n");
  if (int(!model.empty()) + int(!graphFile.empty()) + int(!onnxFile.empty()) != 1)
    return fail("give exactly one of --model, --graph or --onnx (see --help)", 2);
  if (workers == 0)
    return fail("--workers K is required (K >= 1)", 2);
  if (backend != "cpu")
    return fail("--backend " + backend + " is not available; the CPU executor is (--backend cpu)", 2);
  if (optimizer != "sgd" && optimizer != "adam")
    return fail("--optimizer must be sgd or adam", 2);
  auto algorithm = tofu::parseAlgorithm(algo);
  if (!algorithm)
    return fail("unknown --algo '" + algo + "' (one of " + tofu::algorithmNames() + ")", 2);

  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load(opsDir, diags);
  if (!lib) {
    diags.print(llvm::errs());
    return fail("cannot load the operator library: " + llvm::toString(lib.takeError()));
  }
  std::string name;
  auto g = tofu::loadGraph({model, graphFile, onnxFile, batch, dataInputs}, *lib, &name);
  if (!g)
    return fail(llvm::toString(g.takeError()));
  auto loss = tofu::addLoss(*g, *lib);
  if (!loss)
    return fail(name + ": " + llvm::toString(loss.takeError()));
  auto t = tofu::buildTrainingGraph(*g, *loss, *lib,
                                    optimizer == "sgd" ? tofu::Optimizer::SGD : tofu::Optimizer::Adam);
  if (!t)
    return fail(name + ": " + llvm::toString(t.takeError()));
  auto problem = tofu::Problem::build(*t, *lib);
  if (!problem)
    return fail(name + ": " + llvm::toString(problem.takeError()));
  const tofu::Problem &p = *problem;

  tofu::PlanOptions options;
  options.workers = workers;
  options.algorithm = *algorithm;
  auto plan = tofu::searchPlan(p, options);
  if (!plan)
    return fail(name + ": " + llvm::toString(plan.takeError()));
  tofu::ExecPlan exec = tofu::buildExecPlan(p, *plan);
  if (!planJson.empty()) {
    std::ofstream f(planJson);
    f << tofu::execPlanJson(p, exec);
    if (!f)
      return fail("cannot write " + planJson);
  }
  if (dumpPlan)
    llvm::outs() << tofu::execPlanDump(p, exec) << "\n";
  tofu::MemoryPlan memory = tofu::planMemory(p, exec, t->outputs);
  if (std::string bad = tofu::checkMemoryPlan(memory); !bad.empty())
    return fail("the memory plan is unsound: " + bad);
  tofu::PartitionPlan onePlan;
  {
    tofu::PlanOptions one;
    one.workers = 1;
    auto r = tofu::searchPlan(p, one);
    if (!r)
      return fail(llvm::toString(r.takeError()));
    onePlan = std::move(*r);
  }
  tofu::MemoryPlan single = tofu::planMemory(p, tofu::buildExecPlan(p, onePlan), t->outputs);

  auto given = tofu::randomGraphInputs(p, seed);
  auto start = std::chrono::steady_clock::now();
  auto result = tofu::runPlan(p, exec, given);
  if (!result)
    return fail(name + ": " + llvm::toString(result.takeError()));
  double runSeconds = seconds(start);
  const int64_t predicted = p.exactCost(plan->steps);

  llvm::outs() << fmt::format("{} training step ({}, batch {}): {} nodes on {} workers, algorithm "
                              "{}, CPU executor\n",
                              name, optimizer, batch, p.nodes.size(), workers, plan->algorithm);
  llvm::outs() << fmt::format("partitioned step: {:.3f} s; bytes moved {} (the plan predicts {}: "
                              "{})\n",
                              runSeconds, result->bytesMoved, predicted,
                              result->bytesMoved == predicted ? "equal" : "DIFFERENT");
  const int64_t onePeak = single.largestPeak();
  llvm::outs() << fmt::format("\n| worker | peak memory | / (single-worker peak / k) | tiles |\n"
                              "| ---: | ---: | ---: | ---: |\n");
  for (unsigned w = 0; w < workers; ++w)
    llvm::outs() << fmt::format("| {} | {} | {:.3f} | {} |\n", w,
                                tofu::humanBytes(double(memory.workers[w].peak)),
                                double(memory.workers[w].peak) * workers / double(onePeak),
                                tofu::humanBytes(double(memory.workers[w].tileBytes)));
  llvm::outs() << fmt::format("single-worker peak: {}\n", tofu::humanBytes(double(onePeak)));
  int status = result->bytesMoved == predicted ? 0 : 1;
  if (verify) {
    start = std::chrono::steady_clock::now();
    auto reference = tofu::runReference(p, given);
    if (!reference)
      return fail(name + ": the unpartitioned step: " + llvm::toString(reference.takeError()));
    llvm::outs() << fmt::format("\nunpartitioned step: {:.3f} s\n\n| tensor | role | largest "
                                "relative difference |\n| --- | --- | ---: |\n",
                                seconds(start));
    double worst = 0, worstAll = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i) {
      double e = tofu::maxRelativeError(result->tensors[i], (*reference)[i]);
      worstAll = std::max(worstAll, e);
      const tofu::ProblemTensor &pt = p.tensors[i];
      bool reported = pt.role == tofu::TensorRole::OptimizerState ||
                      std::find(t->outputs.begin(), t->outputs.end(), pt.name) != t->outputs.end();
      if (!reported || pt.producer < 0)
        continue;
      worst = std::max(worst, e);
      llvm::outs() << fmt::format("| {} | {} | {:.3g} |\n", pt.name, tofu::roleName(pt.role), e);
    }
    bool ok = worst <= tolerance && worstAll <= tolerance;
    llvm::outs() << fmt::format("\nverify: {} (largest relative difference {:.3g} over the "
                                "outputs and updated weights, {:.3g} over every tensor; "
                                "tolerance {:.0e})\n",
                                ok ? "PASSED" : "FAILED", worst, worstAll, double(tolerance));
    if (!ok)
      status = 1;
  }
  return status;
}
