// tofu-plan: builds a dataflow graph (zoo model, JSON or ONNX), optionally its training
// step, and searches for its partition across --workers workers.
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "analysis/checked.h"
#include "cli/step_flags.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "planner/explain.h"
#include "planner/memory_fit.h"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "planner/step_time.h"
#include "planner/topology.h"
#include "runtime/input_arrays.h"
#include "search/report.h"
#include "search/search.h"
#include "support/cl_choice.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/units.h"
#include "support/version.h"
#include "tofu_plan/document.h"
#include "tofu_plan/report.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

// The flags tofu-run shares (cli/step_flags.h).
using namespace tofu::cli;

cl::OptionCategory planCategory("tofu-plan options");
cl::opt<bool> train("train", cl::desc("Add the backward pass and the optimiser update"),
                    cl::cat(planCategory));
cl::opt<bool> describe("describe",
                       cl::desc("Print node and tensor counts and bytes per tensor role"),
                       cl::cat(planCategory));
cl::opt<bool> dumpJson("dump-json", cl::desc("Print the graph as JSON"), cl::cat(planCategory));
cl::opt<std::string> svgFile("svg", cl::desc("Also draw the plan's weight and activation tiles"),
                             cl::value_desc("FILE.svg"), cl::cat(planCategory));
cl::opt<bool> summary("summary",
                      cl::desc("Print the plan's summary only (no per-tensor and "
                               "per-op tables)"),
                      cl::cat(planCategory));
cl::opt<double> budget("budget",
                       cl::desc("Time budget in seconds of dp-flat and exhaustive "
                                "(default 60)"),
                       cl::init(60), cl::cat(planCategory));
cl::opt<unsigned> searchThreads(
    "search-threads",
    cl::desc("Threads of the search (default 0: the machine's cores, at most 8; the plan is "
             "the same at any count)"),
    cl::init(0), cl::value_desc("N"), cl::cat(planCategory));
cl::opt<std::string> fitBytes(
    "fit",
    cl::desc("Find the smallest number of workers (any count; on a --topology, a "
             "count that fills part of it) with a plan whose planned peak fits in BYTES "
             "per worker, and print that plan. By time (--objective time) it also plans 2x and 4x "
             "those workers while the step's worker-seconds fall, and says where they are "
             "least"),
    cl::value_desc("BYTES"), cl::cat(planCategory));
cl::opt<unsigned> maxWorkers("max-workers",
                             cl::desc("With --fit: the most workers to try (default 1024)"),
                             cl::value_desc("K"), cl::init(1024), cl::cat(planCategory));
cl::opt<std::string> topologySpec(
    "topology",
    cl::desc("The machine's levels, outermost first: COUNTS:BANDWIDTHS such as "
             "2x8:12.5GB/s@5us,150GB/s (2 nodes of 8 GPUs; each bandwidth optionally with a "
             "latency per message), or a JSON file. The search minimises the estimated "
             "communication time (each byte over the bandwidth of the level it crosses, plus the "
             "level's latency per message); the report gives bytes, messages and an estimated "
             "time per level, beside the plan of least bytes'. Sets --workers. With --fit, the "
             "counts tried are those that fill part of the machine (1 to 8, then 16, 24, ... of "
             "2x8), each searched over the levels it fills; with --memory-per-worker every plan "
             "under the budget is searched over the levels; with --stages each stage over the "
             "part its workers fill. A last item host=BANDWIDTH[@LATENCY] gives each worker's "
             "link to host memory, which --algo swap moves over (default: the device's)"),
    cl::value_desc("SPEC"), cl::cat(planCategory));
cl::opt<bool> explain(
    "explain",
    cl::desc("Also say why this plan: its estimated step split into compute, communication and "
             "a pipeline's bubble; per stage its workers, time, planned peak and heaviest ops "
             "with how each is cut; and the runner-ups planned for the same step and workers "
             "(the best Megatron-LM TP x DP, on a pipeline's stages Megatron's TP x PP, zero3, "
             "tofu without stages, tofu in pipeline stages), each with what it costs more. "
             "Each runner-up is planned in full: as long as the plan again, or longer"),
    cl::cat(planCategory));
cl::opt<bool> noCoarsen("no-coarsen",
                        cl::desc("Do not merge element-wise chains and coalesced "
                                 "timesteps"),
                        cl::cat(planCategory));

} // namespace

int main(int argc, char **argv) {
  tofu::cli::ToolDefaults defaults;
  defaults.batch = 32;
  defaults.batchWhy = "a batch one GPU of a training job takes; tofu-run's is 2, what this "
                      "machine's CPU runs in seconds";
  defaults.optimizer = tofu::Optimizer::Adam;
  defaults.optimizerWhy = "its two state tensors per weight are the memory most training plans "
                          "must hold; tofu-run's is sgd, whose learning rate its examples use";
  defaults.workersHelp = "the plan is searched for K (with --fit, for the fewest that fit)";
  defaults.inputWhen = "With --onnx";
  defaults.device = "h100";
  defaults.deviceHelp =
      "The plan's step time is estimated on it: every worker's ops (their FLOPs and bytes "
      "against the device's rates) and the plan's traffic (over the --topology levels, else the "
      "device's link), with no overlap assumed (default h100)";
  tofu::cli::initStepFlags(planCategory, defaults);
  tofu::setToolVersion("tofu-plan", "planner: partitions, pipelines, step-time estimates");
  // Bad usage exits 2, as --help says (llvm's parser would exit 1).
  const bool parsed = cl::ParseCommandLineOptions(
      argc, argv,
      "tofu-plan - build a model's dataflow graph and plan its partitioning\n\n"
      "  tofu-plan --model NAME [--batch B] [--train] --workers K [--algo A] [--format=json]\n"
      "  tofu-plan --graph FILE.json [--train] --workers K\n"
      "  tofu-plan --onnx FILE.onnx [--batch B] [--input NAME=FILE,...] [--train] --workers K\n"
      "  tofu-plan ... --workers K --memory-per-worker BYTES\n"
      "  tofu-plan ... --fit BYTES [--max-workers N]\n"
      "  tofu-plan ... --topology 2x8:12.5GB/s,150GB/s [--fit BYTES | --memory-per-worker BYTES]\n"
      "  tofu-plan (--model|--graph|--onnx) ... --describe | --dump-json\n\n" +
          tofu::zooHelp() +
          "\n\nThe plan lists, per tensor, how each dimension is cut; per op, its strategy at "
          "each\nrecursion step; the communication per step and in total; per-worker memory; the "
          "search time.\n",
      &llvm::errs());
  if (!parsed)
    return 2;
  if (int(!model.empty()) + int(!graphFile.empty()) + int(!onnxFile.empty()) != 1) {
    llvm::errs() << "tofu-plan: give exactly one of --model, --graph or --onnx (see --help)\n";
    return 2;
  }
  if (workers.getNumOccurrences() && (workers == 0 || workers > tofu::kMaxWorkers)) {
    llvm::errs() << fmt::format("tofu-plan: --workers must be 1 to {} (the search and the "
                                "execution plans are built for at most {} workers)\n",
                                tofu::kMaxWorkers, tofu::kMaxWorkers);
    return 2;
  }
  if ((maxWorkers.getNumOccurrences() && !fitBytes.getNumOccurrences()) ||
      maxWorkers > tofu::kMaxWorkers) {
    llvm::errs() << (fitBytes.getNumOccurrences()
                         ? fmt::format("tofu-plan: --max-workers must be at most {}\n",
                                       tofu::kMaxWorkers)
                         : "tofu-plan: --max-workers bounds --fit's search: give it with --fit "
                           "BYTES\n");
    return 2;
  }
  if (!std::isfinite(budget) || budget <= 0 || budget > 1e6) {
    llvm::errs() << "tofu-plan: --budget must be a number of seconds above 0 and at most "
                    "1000000\n";
    return 2;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (!svgFile.empty())
    if (llvm::Error e = tofu::checkWritable(svgFile, "a drawing of the plan")) {
      llvm::errs() << "tofu-plan: --svg: " << llvm::toString(std::move(e)) << "\n";
      return 2;
    }
  if (searchThreads > 4 * cores) {
    llvm::errs() << fmt::format("tofu-plan: --search-threads {} is more than 4 per core of this "
                                "machine ({} cores); at most {}\n",
                                unsigned(searchThreads), cores, 4 * cores);
    return 2;
  }
  if (const char *why =
          tofuplan::sourceConflict(!inputOpt.empty(), !onnxFile.empty(),
                                   batch.getNumOccurrences() > 0, !graphFile.empty())) {
    llvm::errs() << "tofu-plan: " << why << "\n";
    return 2;
  }
  if ((optimizer.getNumOccurrences() || lossOutput.getNumOccurrences() ||
       weightDecayOpt.getNumOccurrences()) &&
      !train) {
    llvm::errs() << "tofu-plan: --"
                 << (optimizer.getNumOccurrences()        ? "optimizer"
                     : weightDecayOpt.getNumOccurrences() ? "weight-decay"
                                                          : "loss-output")
                 << " applies to a training step: give --train\n";
    return 2;
  }
  std::optional<int64_t> budgetBytes;
  for (cl::opt<std::string> *o : {&memoryPerWorker, &fitBytes}) {
    if (!o->getNumOccurrences())
      continue;
    auto bytes = tofu::parseBytes(*o);
    if (!bytes) {
      llvm::errs() << "tofu-plan: --" << o->ArgStr << ": " << llvm::toString(bytes.takeError())
                   << "\n";
      return 2;
    }
    budgetBytes = *bytes;
  }
  const bool fit = fitBytes.getNumOccurrences() > 0;
  std::optional<tofu::Topology> topology;
  if (topologySpec.getNumOccurrences()) {
    auto t = tofu::parseTopology(topologySpec);
    if (!t) {
      llvm::errs() << "tofu-plan: --topology: " << llvm::toString(t.takeError()) << "\n";
      return 2;
    }
    if (fit && workers.getNumOccurrences()) {
      llvm::errs() << "tofu-plan: --fit chooses the number of workers: give it without "
                      "--workers (on a --topology it tries the counts that fill part of the "
                      "machine)\n";
      return 2;
    }
    if (workers.getNumOccurrences() && workers != t->workers()) {
      llvm::errs() << fmt::format("tofu-plan: --workers {} but the topology has {} workers\n",
                                  unsigned(workers), t->workers());
      return 2;
    }
    if (!fit)
      workers = t->workers();
    topology = std::move(*t);
  }
  if (fit && (workers.getNumOccurrences() || memoryPerWorker.getNumOccurrences())) {
    llvm::errs() << "tofu-plan: --fit chooses the number of workers: give it without --workers "
                    "and --memory-per-worker\n";
    return 2;
  }
  if (memoryPerWorker.getNumOccurrences() && workers == 0) {
    llvm::errs() << "tofu-plan: --memory-per-worker needs --workers K (--fit BYTES finds the "
                    "smallest K)\n";
    return 2;
  }
  // Recomputation: auto by default under a budget, of a training step.
  tofu::RecomputeMode recompute =
      budgetBytes && train ? tofu::RecomputeMode::Auto : tofu::RecomputeMode::None;
  if (recomputeOpt.getNumOccurrences()) {
    const tofu::RecomputeMode m = recomputeOpt;
    if (m != tofu::RecomputeMode::None && !train) {
      llvm::errs() << "tofu-plan: --recompute applies to a training step (what its backward "
                      "pass reads): give --train\n";
      return 2;
    }
    if (m == tofu::RecomputeMode::Auto && !budgetBytes) {
      llvm::errs() << "tofu-plan: --recompute auto recomputes what a memory budget needs: give "
                      "--memory-per-worker or --fit (or --recompute sqrt)\n";
      return 2;
    }
    recompute = m;
  }
  if (fit && maxWorkers == 0) {
    llvm::errs() << "tofu-plan: --max-workers must be at least 1\n";
    return 2;
  }
  if (!describe && !dumpJson && workers == 0 && !fit) {
    llvm::errs() << "tofu-plan: nothing to do: give --workers K, --fit BYTES, --describe or "
                    "--dump-json\n";
    return 2;
  }

  if (explain && (describe || dumpJson || (workers == 0 && !fit))) {
    llvm::errs() << "tofu-plan: --explain explains a plan: give --workers K or --fit BYTES "
                    "(not --describe or --dump-json)\n";
    return 2;
  }
  if (explain && (algo == tofu::Algorithm::SmallBatch || algo == tofu::Algorithm::Swap)) {
    llvm::errs() << "tofu-plan: --explain explains a partition; --algo "
                 << tofu::algorithmName(algo) << " plans none\n";
    return 2;
  }
  llvm::ExitOnError exitOnErr = tofu::exitOnError("tofu-plan");
  if (algo == tofu::Algorithm::SmallBatch || algo == tofu::Algorithm::Swap)
    exitOnErr(tofuplan::checkOneWorker(algo, train, budgetBytes.has_value(), fit,
                                       topology.has_value(), recomputeOpt.getNumOccurrences() > 0,
                                       tofu::cli::stagesOpt.getNumOccurrences() ||
                                           tofu::cli::microbatchesOpt.getNumOccurrences()));
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  const std::string ops =
      exitOnErr(tofu::asUsage(tofu::findOpsDir(opsDir, opsDir.getNumOccurrences() > 0)));
  auto lib = tofu::OpLibrary::load(ops, diags);
  if (!lib) {
    diags.print(llvm::errs());
    llvm::errs() << "tofu-plan: cannot load the operator library: "
                 << llvm::toString(lib.takeError()) << "\n";
    return 1;
  }
  tofu::PipelineOptions pipeline;
  if (train)
    pipeline.train = optimizer;
  pipeline.weightDecay = weightDecayOpt > 0;
  pipeline.lossOutput = lossOutput;
  pipeline.precision = precisionOpt;
  pipeline.until = dumpJson || (workers == 0 && !fit) ? tofu::Stage::Graph : tofu::Stage::Plan;
  pipeline.search.workers = workers;
  pipeline.stages = exitOnErr(tofu::cli::stageSpec());
  exitOnErr(tofu::cli::applyAlgorithm(pipeline.search, &pipeline.stages));
  if (!svgFile.empty() && pipeline.stages.active())
    exitOnErr(tofu::usageError("--svg draws one partition's tiles; a pipeline has one per stage"));
  pipeline.search.budgetSeconds = budget;
  pipeline.search.threads = searchThreads;
  pipeline.search.coarsen = !noCoarsen;
  if (budgetBytes)
    pipeline.memoryPerWorker = *budgetBytes;
  if (fit)
    pipeline.fitWorkersUpTo = maxWorkers;
  if (recompute != tofu::RecomputeMode::None)
    pipeline.recompute = recompute;
  pipeline.machine = topology;
  // Recomputation on a machine without a budget: the machine's plan, its memory planned anew.
  if (pipeline.recompute && topology && !budgetBytes && pipeline.until == tofu::Stage::Plan)
    pipeline.until = tofu::Stage::Execution;
  pipeline.noFitHint =
      fmt::format("; --fit {} finds how many workers it needs", std::string(memoryPerWorker));
  nlohmann::ordered_json fitJson; // --fit's scan, for --format=json
  pipeline.onCandidateSet = [&](size_t dropped, const tofu::MemoryFit &f) {
    llvm::errs() << "tofu-plan: "
                 << tofuplan::candidateSetLine(dropped, f, budgetBytes.has_value());
  };
  pipeline.onWorkerCount = [&](unsigned k, const tofu::MemoryFit &f, const tofu::RecomputePlan *r) {
    llvm::errs() << "tofu-plan: " << tofuplan::workerCountLine(k, f, r);
    if (r) // (without recomputation, the scan's counts come with its result)
      fitJson["tried"].push_back({{"workers", k}, {"closest_peak_bytes", f.peak}});
  };
  pipeline.onTimedCount = [](unsigned k, double seconds) {
    llvm::errs() << fmt::format("tofu-plan: --fit by time: {} workers, {:.3f} ms a step ({:.1f} "
                                "worker-ms)\n",
                                k, 1e3 * seconds, 1e3 * k * seconds);
  };
  pipeline.onStageCandidate = [](const tofu::StageCandidate &c) {
    llvm::errs() << "tofu-plan: --stages auto: " << tofuplan::stageCandidateText(c) << "\n";
  };
  tofu::GraphSource source = tofu::cli::graphSource();
  if (!inputOpt.empty())
    source.givenInputs =
        exitOnErr(tofu::asUsage(tofu::readInputArrays(inputItems(), tofu::SettingNames::flags())))
            .forImport();
  if (onnxFile.empty() && (!trainableOpt.empty() || !frozenOpt.empty()))
    exitOnErr(tofu::usageError("--trainable and --frozen name initializers of an --onnx model"));
  auto deviceModel = tofu::deviceModelNamed(deviceOpt);
  if (!deviceModel) {
    llvm::errs() << "tofu-plan: --device: " << llvm::toString(deviceModel.takeError()) << "\n";
    return 2;
  }
  const tofu::DeviceModel device = std::move(*deviceModel);
  pipeline.device = device; // the time objective's, and --algo megatron's grid's
  pipeline.objective = objectiveOpt;
  if (algo == tofu::Algorithm::SmallBatch || algo == tofu::Algorithm::Swap) { // no partition
    const tofuplan::Section s = exitOnErr(
        algo == tofu::Algorithm::Swap
            ? tofuplan::swapReport(source, *lib, pipeline, *budgetBytes, workers, device, topology)
            : tofuplan::smallBatchReport(source, *lib, pipeline, *budgetBytes, workers, device));
    llvm::outs() << (format == Format::Json ? s.json.dump(1) + "\n" : s.text);
    return 0;
  }
  tofu::Stage failedStage = tofu::Stage::Graph;
  auto piped = tofu::runPipeline(source, *lib, pipeline, &failedStage);
  if (!piped && fit && failedStage == tofu::Stage::Plan) {
    llvm::errs() << "tofu-plan: --fit " << fitBytes << ": " << llvm::toString(piped.takeError())
                 << "\n";
    return 1;
  }
  auto result = exitOnErr(std::move(piped));
  if (!result.lossNote.empty())
    llvm::errs() << "tofu-plan: " << result.lossNote << "\n";
  llvm::errs() << tofu::megatronGridLines(result.megatronGrid, device.name, "tofu-plan: ");
  const std::string &name = result.name;
  const std::string precisionLine = tofuplan::precisionLineOf(result, precisionOpt);
  if (dumpJson) {
    llvm::outs() << tofu::graphToJson(result.graph);
    return 0;
  }
  if (workers > 0 || fit) {
    tofuplan::DocumentOptions document;
    document.title = name + (train ? " training step" : "") +
                     (model.empty() ? std::string() : fmt::format(" (batch {})", batch));
    document.json = format == Format::Json;
    document.summary = summary;
    document.precision = precisionOpt;
    document.budget = budgetBytes;
    document.fit = fit;
    document.maxWorkers = maxWorkers;
    document.fitJson = std::move(fitJson);
    document.topology = topology;
    document.device = device;
    std::optional<tofu::Explanation> explanation;
    if (explain) {
      explanation =
          exitOnErr(tofu::explainPlan(source, *lib, pipeline, result, [](const tofu::RunnerUp &r) {
            llvm::errs() << "tofu-plan: --explain: planning " << r.plan << " (" << r.flags << ")\n";
          }));
      document.explanation = &*explanation;
    }
    llvm::outs() << exitOnErr(tofuplan::planDocument(result, document));
    if (!svgFile.empty())
      if (llvm::Error e = tofu::writeFileAtomically(
              svgFile, tofu::planSvg(*result.problem, result.plan, document.title),
              "a drawing of the plan")) {
        llvm::errs() << "tofu-plan: " << llvm::toString(std::move(e)) << "\n";
        return 1;
      }
    return 0;
  }
  llvm::outs() << tofuplan::describeTable(
      result.graph, fmt::format("{}{} (batch {})\n", name, train ? " training step" : "",
                                model.empty() ? "from the file" : std::to_string(batch)) +
                        precisionLine);
  return 0;
}
