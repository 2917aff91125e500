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
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
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
#include "support/units.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

// The flags tofu-run shares (cli/step_flags.h).
using namespace tofu::cli;

cl::OptionCategory planCategory("tofu-plan options");
cl::opt<std::string> inputOpt(
    "input",
    cl::desc("With --onnx: NAME=FILE,... (.npy, ONNX TensorProto .pb, IDX or "
             "FILE.safetensors[:KEY]) values of data inputs: each input takes its array's shape "
             "(fixing dynamic dimensions), and an op that needs an input as a constant (a shape, "
             "axes, starts) takes its values, as tofu-run --infer --input does"),
    cl::value_desc("NAME=FILE,..."), cl::cat(planCategory));
cl::opt<bool> train("train", cl::desc("Add the backward pass and the optimiser update"),
                    cl::cat(planCategory));
cl::opt<bool> describe("describe",
                       cl::desc("Print node and tensor counts and bytes per tensor role"),
                       cl::cat(planCategory));
cl::opt<bool> dumpJson("dump-json", cl::desc("Print the graph as JSON"), cl::cat(planCategory));
cl::opt<unsigned> workers("workers", cl::desc("Search a partition for K workers (any K >= 1)"),
                          cl::value_desc("K"), cl::init(0), cl::cat(planCategory));
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
cl::opt<std::string>
    fitBytes("fit",
             cl::desc("Find the smallest number of workers (any count; on a --topology, a "
                      "count that fills part of it) with a plan whose planned peak fits in BYTES "
                      "per worker, and print that plan"),
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
             "under the budget is searched over the levels"),
    cl::value_desc("SPEC"), cl::cat(planCategory));
// cl::desc keeps a reference to its text, not a copy: the composed text lives here, not in a
// temporary (a temporary's text was freed before --help printed it).
const std::string kPlanDeviceHelp =
    std::string(tofu::kDeviceHelp) +
    ". The plan's step time is estimated on it: every worker's ops (their FLOPs and bytes "
    "against the device's rates) and the plan's traffic (over the --topology levels, else the "
    "device's link), with no overlap assumed (default h100)";
cl::opt<std::string> deviceOpt("device", cl::desc(kPlanDeviceHelp),
                               cl::value_desc("h100|a100|cpu|FILE"), cl::init("h100"),
                               cl::cat(planCategory));
cl::opt<bool> noCoarsen("no-coarsen",
                        cl::desc("Do not merge element-wise chains and coalesced "
                                 "timesteps"),
                        cl::cat(planCategory));

std::string human(double bytes) { return tofu::humanBytes(bytes); }

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions({&planCategory, &tofu::cli::stepCategory()});
  tofu::cli::ToolDefaults defaults;
  defaults.batch = 32;
  defaults.batchWhy = "a batch one GPU of a training job takes; tofu-run's is 2, what this "
                      "machine's CPU runs in seconds";
  defaults.optimizer = tofu::Optimizer::Adam;
  defaults.optimizerWhy = "its two state tensors per weight are the memory most training plans "
                          "must hold; tofu-run's is sgd, whose learning rate its examples use";
  tofu::cli::initStepFlags(defaults);
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
  if (maxWorkers.getNumOccurrences() && !fitBytes.getNumOccurrences()) {
    llvm::errs() << "tofu-plan: --max-workers bounds --fit's search: give it with --fit BYTES\n";
    return 2;
  }
  if (maxWorkers > tofu::kMaxWorkers) {
    llvm::errs() << fmt::format("tofu-plan: --max-workers must be at most {}\n", tofu::kMaxWorkers);
    return 2;
  }
  if (!std::isfinite(budget) || budget <= 0 || budget > 1e6) {
    llvm::errs() << "tofu-plan: --budget must be a number of seconds above 0 and at most "
                    "1000000\n";
    return 2;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (searchThreads > 4 * cores) {
    llvm::errs() << fmt::format("tofu-plan: --search-threads {} is more than 4 per core of this "
                                "machine ({} cores); at most {}\n",
                                unsigned(searchThreads), cores, 4 * cores);
    return 2;
  }
  if (!inputOpt.empty() && onnxFile.empty()) {
    llvm::errs() << "tofu-plan: --input gives values of an ONNX model's inputs (--onnx); a zoo "
                    "model's or graph JSON's shapes are its own\n";
    return 2;
  }
  if (batch.getNumOccurrences() && !graphFile.empty()) {
    llvm::errs() << "tofu-plan: --batch applies to --model and --onnx; a graph JSON's shapes "
                    "are its own\n";
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
    const std::optional<tofu::RecomputeMode> m = recomputeOpt.getValue();
    if (*m != tofu::RecomputeMode::None && !train) {
      llvm::errs() << "tofu-plan: --recompute applies to a training step (what its backward "
                      "pass reads): give --train\n";
      return 2;
    }
    if (*m == tofu::RecomputeMode::Auto && !budgetBytes) {
      llvm::errs() << "tofu-plan: --recompute auto recomputes what a memory budget needs: give "
                      "--memory-per-worker or --fit (or --recompute sqrt)\n";
      return 2;
    }
    recompute = *m;
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

  llvm::ExitOnError exitOnErr = tofu::exitOnError("tofu-plan");
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
  pipeline.search.algorithm = algo;
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
  // With recomputation and a machine but no budget, the machine's plan replaces the
  // recomputation's: its memory is planned anew.
  if (pipeline.recompute && topology && !budgetBytes && pipeline.until == tofu::Stage::Plan)
    pipeline.until = tofu::Stage::Execution;
  pipeline.noFitHint =
      fmt::format("; --fit {} finds how many workers it needs", std::string(memoryPerWorker));
  // A plan judged against the budget, as the progress lines say it.
  auto judged = [&](const tofu::MemoryFit &f) {
    return f.fits ? fmt::format("fits, planned peak {}", human(double(f.peak)))
                  : fmt::format("closest plan's peak {}, {} over", human(double(f.peak)),
                                human(double(f.peak - f.limit)));
  };
  nlohmann::ordered_json fitJson; // --fit's scan, for --format=json
  pipeline.onCandidateSet = [&](size_t dropped, const tofu::MemoryFit &f) {
    llvm::errs() << fmt::format(
        "tofu-plan: recomputing {} tensor{}: {} ({} plan{} searched, {:.1f} s)\n", dropped,
        dropped == 1 ? "" : "s",
        budgetBytes ? judged(f) : fmt::format("planned peak {}", human(double(f.peak))), f.searches,
        f.searches == 1 ? "" : "s", f.seconds);
  };
  pipeline.onWorkerCount = [&](unsigned k, const tofu::MemoryFit &f, const tofu::RecomputePlan *r) {
    if (!r) {
      llvm::errs() << fmt::format("tofu-plan: {} workers: {} ({} plan{} searched, {:.1f} s)\n", k,
                                  judged(f), f.searches, f.searches == 1 ? "" : "s", f.seconds);
      return;
    }
    llvm::errs() << fmt::format(
        "tofu-plan: {} workers: {}{}\n", k, judged(f),
        f.fits && !r->summary.copies.empty()
            ? fmt::format(", recomputing {} tensors", r->summary.dropped.size())
            : "");
    fitJson["tried"].push_back({{"workers", k}, {"closest_peak_bytes", f.peak}});
  };
  tofu::GraphSource source = tofu::cli::graphSource();
  if (!inputOpt.empty())
    source.givenInputs = exitOnErr(tofu::asUsage(tofu::readInputArrays(inputOpt))).forImport();
  if (onnxFile.empty() && (!trainableOpt.empty() || !frozenOpt.empty()))
    exitOnErr(tofu::usageError("--trainable and --frozen name initializers of an --onnx model"));
  auto deviceModel = tofu::deviceModelNamed(deviceOpt);
  if (!deviceModel) {
    llvm::errs() << "tofu-plan: --device: " << llvm::toString(deviceModel.takeError()) << "\n";
    return 2;
  }
  const tofu::DeviceModel device = std::move(*deviceModel);
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
  const std::string &name = result.name;
  const tofu::Graph *g = &result.graph;
  // What the precision policy made (before any recomputation's copies).
  const tofu::Graph &precise =
      result.withoutRecomputation ? *result.withoutRecomputation : result.graph;
  std::string precisionLine;
  const auto bf16Tensors = std::count_if(
      precise.tensors().begin(), precise.tensors().end(),
      [](const tofu::TensorInfo &t) { return t.dtype == tofu::ElementType::BFloat16; });
  if (precisionOpt == tofu::Precision::BF16) {
    const tofu::PrecisionSummary &ps = result.precision;
    precisionLine = fmt::format(
        "precision bf16 (as torch.autocast): {} product{} and convolution{} on bfloat16 "
        "operands through {} cast{} ({} rounded once with their bias); {} float32 op{} "
        "reading bfloat16, {} storing for products only in bfloat16;{}{} {} of {} tensors "
        "bfloat16\n",
        ps.lowered, ps.lowered == 1 ? "" : "s", ps.lowered == 1 ? "" : "s", ps.casts,
        ps.casts == 1 ? "" : "s", ps.fusedBias, ps.float32, ps.float32 == 1 ? "" : "s",
        ps.storedNarrow,
        ps.gelus ? fmt::format(" {} GELU{} the export spelled out in five ops joined into one "
                               "(rounding once, as nn.GELU);",
                               ps.gelus, ps.gelus == 1 ? "" : "s")
                 : std::string(),
        ps.addmms ? fmt::format(" {} exported baddbmm{} (a product plus an addend) rounded once;",
                                ps.addmms, ps.addmms == 1 ? "" : "s")
                  : std::string(),
        bf16Tensors, precise.tensors().size());
  }
  if (dumpJson) {
    llvm::outs() << tofu::graphToJson(*g);
    return 0;
  }
  if (workers > 0 || fit) {
    const tofu::Problem *problem = &*result.problem;
    const tofu::PartitionPlan *plan = &result.plan;
    double analysis = result.analysisSeconds;
    tofu::PlanReportOptions report;
    report.title = name + (train ? " training step" : "") +
                   (model.empty() ? std::string() : fmt::format(" (batch {})", batch));
    report.listTensors = report.listOps = !summary;
    std::string memoryLine;
    // With recomputation the planner rewrote the training graph (planner/recompute.h): the
    // problem, plan and memory are the rewritten graph's.
    const tofu::BudgetChoice *chosen = result.budget ? &*result.budget : nullptr;
    const tofu::RecomputePlan *recomputed =
        chosen && chosen->recompute ? &*chosen->recompute : nullptr;
    // The report's memory lines: the chosen plan's planned peak and what is live then.
    if (chosen && (recomputed || budgetBytes) && !result.memory.workers.empty()) {
      const tofu::MemoryPlan &memory = result.memory;
      const unsigned peakWorker = memory.largestPeakWorker();
      report.plannedPeak = memory.largestPeak();
      report.plannedPeakWorker = peakWorker;
      if (budgetBytes)
        report.memoryLimit = *budgetBytes;
      const tofu::LiveAtMost live = tofu::liveAtMost(memory.workers[peakWorker]);
      report.liveTiles = live.tiles;
      report.liveFetches = live.fetches;
      report.livePartials = live.partials;
      const tofu::LiveTiles byRole =
          tofu::liveTilesAt(*problem, memory.workers[peakWorker], live.time);
      report.liveInputs = byRole.inputs;
      report.liveWeights = byRole.weights;
      report.liveActivations = byRole.activations;
      report.liveGradients = byRole.gradients;
      report.liveOptimizerState = byRole.optimizerState;
      report.liveBfloat16 = byRole.bfloat16;
      report.liveLargest.clear();
      for (const auto &[t, bytes] : byRole.largest)
        report.liveLargest.emplace_back(problem->tensors[t].name, bytes);
      // Node i of the plan's order runs at times 3i and 3i + 1 (codegen/memory_plan.h).
      const size_t at = size_t(live.time / 3);
      report.peakNode = at < result.exec.nodes.size()
                            ? problem->nodes[result.exec.nodes[at].node].name
                            : std::string();
    }
    if (fit && recomputed) {
      fitJson["budget_bytes"] = chosen->limit;
      fitJson["workers"] = plan->workers;
      fitJson["lower_bound"] = 1; // recomputation may fit below the tensors' bound
      fitJson["workers_without_recomputation"] = recomputed->workersWithout;
      memoryLine = fmt::format(
          "fit: {} per worker needs {} workers with recomputation '{}' ({} without; the "
          "counts below by bisection, down to the weights' and optimiser state's bound)\n",
          human(double(chosen->limit)), plan->workers, tofu::recomputeModeName(recompute),
          recomputed->workersWithout ? std::to_string(recomputed->workersWithout)
                                     : fmt::format("more than {}", unsigned(maxWorkers)));
    } else if (fit) {
      fitJson["budget_bytes"] = chosen->limit;
      fitJson["workers"] = plan->workers;
      fitJson["lower_bound"] = chosen->lowerBound;
      fitJson["tried"] = nlohmann::ordered_json::array();
      for (const auto &[k, peak] : chosen->tried)
        fitJson["tried"].push_back({{"workers", k}, {"closest_peak_bytes", peak}});
      memoryLine = fmt::format(
          "fit: {} per worker needs {} workers (tried {} to {}; fewer than {} cannot hold the "
          "tensors the one-worker plan has live at once)\n",
          human(double(chosen->limit)), plan->workers, chosen->lowerBound, plan->workers,
          chosen->lowerBound);
    }
    if (budgetBytes && recomputed)
      memoryLine += fmt::format(
          "memory budget {} per worker: {} candidate set{} of recomputation planned in "
          "{:.3f} s; the plan chosen has memory priced at {:.3g} per byte\n",
          human(double(chosen->limit)), recomputed->tried, recomputed->tried == 1 ? "" : "s",
          recomputed->seconds, chosen->fit.memoryWeight);
    else if (budgetBytes)
      memoryLine += fmt::format(
          "memory budget {} per worker: {} plan{} searched and memory-planned "
          "in {:.3f} s; the one chosen has memory priced at {:.3g} per byte\n",
          human(double(chosen->limit)), chosen->fit.searches, chosen->fit.searches == 1 ? "" : "s",
          chosen->fit.seconds, chosen->fit.memoryWeight);
    report.exact = plan->workers <= 64;
    std::string machineText;
    nlohmann::ordered_json machineJson;
    tofu::TopologyPlan machine;
    // The part of the machine the plan runs on: all of it, or under a budget the levels its
    // worker count fills (--fit chooses the count).
    std::optional<tofu::Topology> stepMachine;
    const bool budgeted = budgetBytes.has_value();
    if (result.machine) // the machine's search, beside the plan of least bytes
      machine = *result.machine;
    // The plan chosen as the workers run it: for its traffic per level and its step time.
    const tofu::ExecPlan stepExec = tofu::buildExecPlan(*problem, *plan);
    if (topology) {
      if (budgeted) {
        stepMachine = tofu::topologyForWorkers(*topology, plan->workers);
        machine.plan = *plan;
        machine.traffic = tofu::topologyTraffic(*problem, stepExec, *stepMachine);
      } else {
        stepMachine = *topology;
      }
      const tofu::Topology &part = *stepMachine;
      const tofu::TopologyTraffic &mine = machine.traffic;
      const tofu::TopologyTraffic &other = machine.leastBytesTraffic;
      machineText =
          fmt::format("machine: {}; recursion steps {} (each level's factors, "
                      "outermost first){}\n",
                      tofu::describeTopology(part), fmt::join(tofu::topologyFactors(part), " x "),
                      budgeted ? "; every plan under the budget searched over them" : "");
      if (machine.leastBytesChosen)
        machineText += fmt::format(
            "the search weighted by the machine's levels found no plan estimated faster than "
            "the plan of least bytes ({:.3f} ms against {:.3f} ms): that plan is printed\n",
            1e3 * machine.weightedTraffic.slowestSeconds, 1e3 * other.slowestSeconds);
      machineText += budgeted ? "| level crossed | bytes received | messages |\n| --- | ---: | "
                                "---: |\n"
                              : "| level crossed | bytes received | messages | plan of least "
                                "bytes: bytes | messages |\n| --- | ---: | ---: | ---: | ---: |\n";
      machineJson["levels"] = nlohmann::ordered_json::array();
      for (size_t l = 0; l < part.levels.size(); ++l) {
        const tofu::TopologyLevel &level = part.levels[l];
        const std::string crossed =
            fmt::format("| between {}s{} | {} | {} |", level.name,
                        l == 0 ? "" : " of one " + part.levels[l - 1].name,
                        human(double(mine.levels[l].bytes)), mine.levels[l].messages);
        machineText +=
            budgeted ? crossed + "\n"
                     : crossed + fmt::format(" {} | {} |\n", human(double(other.levels[l].bytes)),
                                             other.levels[l].messages);
        nlohmann::ordered_json j = {{"name", level.name},
                                    {"count", level.count},
                                    {"bandwidth_bytes_per_second", level.bandwidth},
                                    {"latency_seconds", level.latency},
                                    {"bytes", mine.levels[l].bytes},
                                    {"messages", mine.levels[l].messages}};
        if (!budgeted) {
          j["least_bytes_plan_bytes"] = other.levels[l].bytes;
          j["least_bytes_plan_messages"] = other.levels[l].messages;
        }
        machineJson["levels"].push_back(std::move(j));
      }
      const std::string estimate =
          "an estimate: the slowest worker's received bytes over each level's bandwidth plus a "
          "latency per message";
      if (budgeted)
        machineText += fmt::format("estimated communication time per step ({}): {:.3f} ms "
                                   "(worker {})\n",
                                   estimate, 1e3 * mine.slowestSeconds, mine.slowestWorker);
      else
        machineText += fmt::format(
            "estimated communication time per step ({}): {:.3f} ms (worker {}); the plan of "
            "least bytes: {:.3f} ms (worker {}), which moves {} in all against this plan's {}\n",
            estimate, 1e3 * mine.slowestSeconds, mine.slowestWorker, 1e3 * other.slowestSeconds,
            other.slowestWorker, human(double(machine.leastBytes.totalBytes)),
            human(double(plan->totalBytes)));
      machineJson["estimated_seconds_slowest_worker"] = mine.slowestSeconds;
      machineJson["slowest_worker"] = mine.slowestWorker;
      if (!budgeted) {
        machineJson["least_bytes_plan_estimated_seconds_slowest_worker"] = other.slowestSeconds;
        machineJson["least_bytes_plan_bytes"] = machine.leastBytes.totalBytes;
        machineJson["least_bytes_plan_chosen"] = machine.leastBytesChosen;
      }
      machineJson["estimate"] = "received bytes over each level's bandwidth plus a latency per "
                                "message, on the slowest worker";
      report.exact = plan->workers <= 64;
    }
    // The estimated step time of the plan chosen, on the device.
    const tofu::StepTimeEstimate stepTime =
        exitOnErr(tofu::estimateStepTime(*problem, stepExec, g->outputs, device, stepMachine));
    // What was recomputed, what it saved and what it costs.
    std::string recomputeLine;
    nlohmann::ordered_json recomputeJson;
    if (recomputed) {
      const tofu::RecomputePlan &r = *recomputed;
      recomputeJson["mode"] = tofu::recomputeModeName(r.mode);
      recomputeJson["candidates"] = r.candidates;
      recomputeJson["dropped"] = r.summary.dropped;
      recomputeJson["copies"] = r.summary.copies.size();
      recomputeJson["recomputed_bytes"] = r.summary.bytes;
      recomputeJson["planned_peak_bytes"] = chosen->fit.peak;
      recomputeJson["planned_peak_bytes_without"] = r.peakWithout;
      recomputeJson["candidate_sets_planned"] = r.tried;
      if (r.summary.copies.empty()) {
        recomputeLine = fmt::format("recomputation ({}): none{}\n", tofu::recomputeModeName(r.mode),
                                    budgetBytes && r.fitsWithout ? " (the plan fits without)" : "");
      } else {
        double without = 0;
        if (r.problemWithout) {
          const tofu::StepTimeEstimate e = exitOnErr(tofu::estimateStepTime(
              *r.problemWithout, r.execWithout, g->outputs, device, stepMachine));
          without = e.seconds;
          recomputeJson["estimated_seconds_without"] = without;
        }
        recomputeJson["estimated_seconds"] = stepTime.seconds;
        recomputeLine = fmt::format(
            "recomputation ({}): {} of {} forward tensors dropped after the forward pass and "
            "recomputed before the backward pass by {} copies of their ops ({} of tensors, "
            "whole); planned peak {} per worker against {} without ({:+.1f}%); estimated step "
            "on {} {:.3f} ms against {:.3f} ms without ({:+.1f}%, what the recomputation "
            "costs)\n",
            tofu::recomputeModeName(r.mode), r.summary.dropped.size(), r.candidates,
            r.summary.copies.size(), human(double(r.summary.bytes)),
            human(double(chosen->fit.peak)), human(double(r.peakWithout)),
            100.0 * (double(chosen->fit.peak) / double(std::max<int64_t>(r.peakWithout, 1)) - 1),
            device.name, 1e3 * stepTime.seconds, 1e3 * without,
            without > 0 ? 100.0 * (stepTime.seconds / without - 1) : 0.0);
      }
    }
    if (format == Format::Json) {
      std::string json = tofu::planJson(*problem, *plan, report);
      {
        auto j = nlohmann::ordered_json::parse(json);
        j["step_time"] = nlohmann::ordered_json::parse(tofu::stepTimeJson(stepTime));
        if (fit)
          j["fit"] = fitJson;
        if (recomputed)
          j["recompute"] = recomputeJson;
        if (topology)
          j["topology"] = machineJson;
        if (precisionOpt != tofu::Precision::FP32) {
          const tofu::PrecisionSummary &ps = result.precision;
          j["precision"] = {{"name", tofu::precisionName(precisionOpt)},
                            {"casts", ps.casts},
                            {"lowered_ops", ps.lowered},
                            {"float32_ops_reading_bf16", ps.float32},
                            {"float32_ops_storing_bf16", ps.storedNarrow},
                            {"products_rounded_with_bias", ps.fusedBias},
                            {"gelus_joined", ps.gelus},
                            {"addmms_joined", ps.addmms},
                            {"bf16_tensors", bf16Tensors}};
        }
        json = j.dump(1) + "\n";
      }
      llvm::outs() << json;
    } else {
      if (!recomputed) // (with recomputation, each candidate set's graph was analysed)
        llvm::outs() << fmt::format("analysis of the graph's ops: {:.3f} s\n", analysis);
      llvm::outs() << memoryLine << recomputeLine << precisionLine;
      llvm::outs() << tofu::planTable(*problem, *plan, report);
      llvm::outs() << machineText;
      llvm::outs() << tofu::formatStepTime(stepTime, summary ? 0 : 10);
    }
    if (!svgFile.empty()) {
      std::ofstream f(svgFile);
      f << tofu::planSvg(*problem, *plan, report.title);
      if (!f) {
        llvm::errs() << "tofu-plan: cannot write " << svgFile << "\n";
        return 1;
      }
    }
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
  llvm::outs() << precisionLine;
  llvm::outs() << fmt::format(
      "| | count | bytes (every tensor, no buffer reuse) |\n| --- | ---: | ---: |\n");
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
