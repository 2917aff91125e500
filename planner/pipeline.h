// The one pipeline every tool, benchmark, test fixture and the public API runs:
//
//   model (zoo, graph JSON, ONNX) -> checked graph -> training graph (a loss added to a
//   non-scalar output, backward ops, optimiser updates) -> analysis (Problem) -> partition
//   plan -> execution plan and memory plan
//
// Each stage's errors name the model or file. The internal C++ API for our own tools;
// frameworks use include/tofu/plan.h or include/tofu/tofu.h, which wrap this.
#ifndef TOFU_PLANNER_PIPELINE_H
#define TOFU_PLANNER_PIPELINE_H

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/precision.h"
#include "graph/recompute.h"
#include "graph/training.h"
#include "partition/problem.h"
#include "planner/memory_fit.h"
#include "planner/recompute.h"
#include "planner/stages.h"
#include "planner/step_time.h"
#include "planner/topology.h"
#include "search/search.h"

namespace tofu {

struct GraphSource {
  std::string model, graphFile, onnxFile; ///< exactly one set
  /// A serialized ONNX model held in memory (a framework's export), where given: onnxFile
  /// then only names it in messages.
  std::string onnxBytes;
  int64_t batch = 1;
  unsigned dataInputs = 1;      ///< with onnxFile
  bool dataInputsGiven = false; ///< the user gave dataInputs: it must not exceed the inputs
  bool batchGiven = false;      ///< the user gave batch: an ONNX model must have a batch to set
  /// With onnxFile: inputs given ahead (their shapes, and small integer values that ops
  /// need as constants).
  std::map<std::string, OnnxGivenInput> givenInputs;
  /// With onnxFile: the sample shapes of the data that will feed its inputs
  /// (OnnxImportOptions::sampleShapes).
  std::map<std::string, std::vector<int64_t>> sampleShapes;
  /// With onnxFile: initializers trained or kept constant whatever the importer's rule
  /// (OnnxImportOptions::trainable, frozen).
  std::set<std::string> trainable, frozen;
};

/// What --trainable and --frozen do (tofu-plan's and tofu-run's options, which fill
/// GraphSource::trainable and frozen).
/// --precision bf16's description, shared by tofu-plan and tofu-run.
extern const char *const kBf16PrecisionHelp;
extern const char kTrainableHelp[], kFrozenHelp[];

/// The operator library's directory, wherever the tool runs from: `given` where the user
/// gave one (--ops), else $TOFU_OPS, else the library beside `anchor` (by default the
/// running executable; the shared library passes its own file): its Bazel runfiles
/// (`<anchor>.runfiles/tofu/ops`, the build tree), else the first of `share/tofu/ops` and
/// `ops` holding .tdl files in the anchor's directory or a directory above it (an install
/// tree: PREFIX/bin/../share/tofu/ops, PREFIX/lib/../share/tofu/ops), else `ops` in the
/// working directory. Errors list every place it looked; a `given` directory without .tdl
/// files is an error that calls it `label` (the option or argument that named it).
llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave,
                                       const std::string &anchor = "",
                                       const std::string &label = "--ops");

/// Builds or reads the graph and checks it (shapes inferred). `name` gets what to call it
/// in messages (the model or the file). Errors say what failed, the file or model named.
llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib, std::string *name);

/// How far the pipeline goes.
enum class Stage {
  Graph,     ///< the checked (training) graph
  Problem,   ///< ... analysed
  Plan,      ///< ... its partition searched
  Execution, ///< ... the execution plan and every worker's memory planned
};

/// What the search minimises (--objective).
enum class PlanObjective {
  /// The estimated step on PipelineOptions::device (over `machine`'s levels where given, else
  /// the device's link): every worker's communication and compute (TimeObjective). Without a
  /// device, bytes.
  Time,
  Bytes, ///< the bytes every worker receives (over a machine's levels, their time): the paper's
};
const char *objectiveName(PlanObjective o);
std::optional<PlanObjective> objectiveNamed(const std::string &name);
/// --objective's description, shared by tofu-plan and tofu-run.
extern const char kObjectiveHelp[];

/// The time objective of the search on `device` (PlanOptions::time): each node's work on one
/// worker estimated as planner/step_time.h estimates it without its launches, in units of a
/// byte over the innermost level of `machine` (else the device's link), whose latency, without
/// a machine, each message pays.
TimeObjective stepTimeObjective(const DeviceModel &device, const std::optional<Topology> &machine);
/// Per node of `p`, its work on one worker of `device` (its ops' seconds without their
/// launches; a node an element-wise chain is folded into takes the chain's).
std::vector<double> nodeWorkSeconds(const Problem &p, const DeviceModel &device);

/// `--stages auto` (StageSpec::automatic): the stages and microbatches chosen by the
/// estimated step. Each candidate is the whole pipeline planned with S stages of balanced
/// layers and M microbatches (under the budget where there is one): S = 1, and each power of
/// two dividing the workers (and, on a machine, its outermost level's count) with
/// M = S, 2S and 4S where the batch divides, each S's M doubled only while its step falls;
/// the least estimated step wins, ties to fewer stages. The boundaries are not searched:
/// the stages balance their forward work. A candidate that cannot be planned (more stages
/// than layers, a budget it does not fit, stages that fill no part of the machine) says why.
struct StageCandidate {
  unsigned stages = 1, microbatches = 1;
  double seconds = 0; ///< its estimated step (0 where not planned)
  std::string error;  ///< why it was not planned
};
struct StageSearch {
  std::vector<StageCandidate> candidates;
  unsigned chosen = 0; ///< its index in `candidates`
  double seconds = 0;  ///< planning every candidate
};

struct PipelineOptions {
  /// Build the training step with this optimiser. A graph whose (chosen) output is not a
  /// scalar gets a loss first (addLoss: softmax cross-entropy against a new input `labels`
  /// for a rank-2 output, else the mean squared error against a new input `target`); a
  /// scalar output is the loss.
  std::optional<Optimizer> train;
  /// With `train`: add an L2 weight decay to the gradients (AdamW always decays, decoupled);
  /// the graph then reads a rank-0 input `weight_decay`.
  bool weightDecay = false;
  /// With `train`, a graph of several outputs trains on these (lossTerms: `NAME` or
  /// `NAME:WEIGHT`, by commas; default: the first output), on the weighted sum of their
  /// losses. The others are dropped as outputs, and weights that reach none of the losses
  /// are held fixed (freezeWeightsNotReaching).
  std::string lossOutput;
  /// With `train`: the loss a graph whose output is not a scalar gets (addLoss).
  LossKind loss = LossKind::Auto;
  /// The element types the step computes in (applyPrecision, once the loss is added and
  /// before the backward ops are built).
  Precision precision = Precision::FP32;
  Stage until = Stage::Plan;
  PlanOptions search;
  /// The memory budget per worker in bytes (0: none). The plan is then the one of least
  /// communication found whose planned peak (the memory planner's) fits on every worker
  /// (planner/memory_fit.h), recomputing what `recompute` allows; where none fits, the
  /// Plan stage fails saying how close the closest came (one message for every tool).
  int64_t memoryPerWorker = 0;
  /// With a budget: the number of workers is chosen too, the smallest up to this many whose
  /// plan fits (fitWorkers, fitWorkersRecomputing); search.workers is not used. 0: the
  /// number is search.workers.
  unsigned fitWorkersUpTo = 0;
  /// With `train`: the recomputation planned (planner/recompute.h; auto needs a budget).
  /// Unset, nothing is recomputed and none is planned: a budget is met by the plan alone.
  std::optional<RecomputeMode> recompute;
  /// The machine's levels (--topology). Without a budget the plan is searchForTopology's
  /// (the machine's search beside the plan of least bytes); under one every plan is
  /// searched over its levels, and fitWorkersUpTo tries only the counts that fill part of it.
  std::optional<Topology> machine;
  /// Progress of a budgeted search, where given: each candidate set of recomputation planned
  /// (how many tensors it drops), and with fitWorkersUpTo each worker count decided (with
  /// recomputation, what it recomputes there).
  std::function<void(size_t dropped, const MemoryFit &)> onCandidateSet;
  std::function<void(unsigned workers, const MemoryFit &, const RecomputePlan *)> onWorkerCount;
  /// With fitWorkersUpTo under the time objective: each larger count planned by the scan for
  /// the least worker-seconds (FitByTime), with its estimated step.
  std::function<void(unsigned workers, double seconds)> onTimedCount;
  /// With `--stages auto`: each candidate as it is decided (StageSearch).
  std::function<void(const StageCandidate &)> onStageCandidate;
  /// What the error of a budget no plan fits adds: the driver's way to find enough workers.
  std::string noFitHint;
  /// Where given, --algo megatron without a configuration (search.factors empty) takes the
  /// best of Megatron-LM's grid, TP x DP for each TP dividing the workers, by the step
  /// estimated on this device (megatronGridPlan); else TP is every worker.
  std::optional<DeviceModel> device;
  /// What the search minimises. Time (with a `device`) sets search.time for every search the
  /// pipeline runs, unless it is set already; bytes leaves search.time as it is.
  PlanObjective objective = PlanObjective::Time;
  /// Pipeline stages (planner/stages.h), where active: the training step over
  /// `stages.microbatches` microbatches (graph/microbatch.h), its layers cut into
  /// `stages.stages` stages, each searched over its own workers (on a `machine`, over the
  /// part of it they fill: an error where they fill none). Under a budget each stage is
  /// searched under it, and auto recomputes per stage what that stage needs (the model's cuts
  /// always kept, as sqrt keeps them). With fitWorkersUpTo, the fewest workers (a multiple of
  /// the stages) whose stages fit the budget. Not with a given plan.
  StageSpec stages;
  /// With more than one microbatch: the model at the microbatch's batch (runPipeline from a
  /// GraphSource loads it).
  std::shared_ptr<const Graph> microbatchModel;
  /// Where given, replaces the search: a plan derived from elsewhere (tofu-run's evaluation
  /// graph restricts the training plan). It must be a plan of the given problem.
  std::function<llvm::Expected<PartitionPlan>(const Problem &)> plan;
  /// Where several processes run one step (tofu-run under MPI), every choice the pipeline
  /// makes (what to recompute, the plan) goes through `agree`: it returns the text that
  /// `choose` gives on the process that decides, and must not call `choose` elsewhere. An
  /// error of `choose` is returned as it is (that process then ends the job).
  std::function<llvm::Expected<std::string>(
      const std::function<llvm::Expected<std::string>()> &choose)>
      agree;
};

/// How a memory budget or recomputation chose the plan (PipelineOptions::memoryPerWorker,
/// recompute). Known on the process that chose (every process, without `agree`).
struct BudgetChoice {
  int64_t limit = 0; ///< the budget per worker (0: none)
  /// The plan chosen, judged against the limit: its planned peak and the worker with it,
  /// the price of memory it was found with, the searches. Its plan, exec and memory are
  /// moved into the result's.
  MemoryFit fit;
  /// Where recomputation was planned: what the planner found (its graph, problem and fit
  /// are moved into the result's).
  std::optional<RecomputePlan> recompute;
  /// With fitWorkersUpTo and no recomputation: where the scan of counts started, and each
  /// count tried with the smallest planned peak found for it.
  unsigned lowerBound = 1;
  std::vector<std::pair<unsigned, int64_t>> tried;
  /// With fitWorkersUpTo over pipeline stages: their count. The counts tried (`tried`, each
  /// with its planned peak) are its multiples, bisected from `lowerBound`, the workers the
  /// weights and optimiser state need at the least.
  unsigned fitStages = 0;
};

/// --fit under the time objective: beside the fewest workers that fit, the count of least
/// estimated step times workers (the worker-seconds a step costs), found by doubling the
/// count within the budget while that falls, at most twice (and within fitWorkersUpTo and
/// the machine). The plan kept is the fewest workers', what --fit asks for.
struct FitByTime {
  struct Count {
    unsigned workers = 0;
    double seconds = 0; ///< the estimated step
    double workerSeconds() const { return workers * seconds; }
  };
  std::vector<Count> counts; ///< the fewest first, then each doubling planned
  unsigned least = 0;        ///< the index in `counts` of the least worker-seconds
  std::string stopped;       ///< why the scan stopped
};

/// A Megatron-LM configuration of the grid (PipelineOptions::device), its step estimated.
struct MegatronConfig {
  unsigned tp = 1, dp = 1;
  double seconds = 0; ///< the estimated step
  int64_t bytes = 0;  ///< the plan's communication
};

/// The best of Megatron-LM's grid for `search.workers` (each TP dividing them, DP the rest;
/// PP = 1): each planned (cli::applyAlgorithm's steps), its step estimated on `device`, the
/// plan of least time kept (ties to the larger TP). `grid` gets every configuration but
/// those of more data-parallel groups than some op's batch has samples.
llvm::Expected<PartitionPlan> megatronGridPlan(const Problem &p, const PlanOptions &search,
                                               const DeviceModel &device,
                                               const std::vector<std::string> &outputs,
                                               std::vector<MegatronConfig> *grid);

/// --algo megatron's grid, a line (after `prefix`) saying each configuration's estimated
/// step on `device` and the one chosen; empty where the grid was not searched.
std::string megatronGridLines(const std::vector<MegatronConfig> &grid, const std::string &device,
                              const std::string &prefix);

/// One output a training step's loss is taken on, and its weight in their sum.
struct LossTerm {
  std::string output;
  double weight = 1;
};

/// `--loss-output`'s terms: `a`, or `a,b:0.1` (each weight a positive number, 1 unless
/// given; no output twice). Empty for an empty spec: the first output then.
llvm::Expected<std::vector<LossTerm>> lossTerms(const std::string &spec);

/// Under the time objective, the plan it found against the bytes objective's, each step
/// estimated on the device: the shorter is kept (the search's objective sums every worker's
/// time and leaves launches and synchronisations out, so the plan of least bytes is at times
/// the faster).
struct ObjectiveChoice {
  double timeSeconds = 0, bytesSeconds = 0;
  bool bytesChosen = false;
};
/// searchPlan under `search.time`, and without it; the plan of the shorter step on `device`
/// (`choice` says how they compared, where the algorithm took the time objective).
llvm::Expected<PartitionPlan> timedPlan(const Problem &p, const PlanOptions &search,
                                        const DeviceModel &device,
                                        const std::vector<std::string> &outputs,
                                        std::optional<ObjectiveChoice> &choice);

struct PipelineResult {
  std::string name;           ///< the model or file, for messages
  Graph graph;                ///< checked; the training graph when trained
  std::string loss;           ///< the loss tensor (trained graphs), else empty
  std::string lossNote;       ///< how a loss was added to a non-scalar output, else empty
  PrecisionSummary precision; ///< what the precision policy changed
  std::optional<Problem> problem;
  double analysisSeconds = 0;
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
  /// Under a budget or with recomputation, on the process that chose: how (else unset).
  std::optional<BudgetChoice> budget;
  /// What the step recomputes (on every process; empty where nothing is).
  RecomputeSummary recomputed;
  /// Where something is recomputed: the training graph before (what --verify compares with).
  std::optional<Graph> withoutRecomputation;
  /// On a machine without a budget: searchForTopology's plans and traffic (`plan` is its
  /// chosen one).
  std::optional<TopologyPlan> machine;
  /// --algo megatron's grid where it was searched (on the process that chose): each TP, DP
  /// with its estimated step; the plan is the first of least time.
  std::vector<MegatronConfig> megatronGrid;
  /// With PipelineOptions::stages: the stages, their plans and the schedule. Its execution
  /// plan is moved into `exec`; `plan` names it (StagedPlan::describe), with no steps of its
  /// own and its bytes as `totalBytes`.
  std::optional<StagedPlan> staged;
  /// The objective the plan was searched by: time only where a device gave it one.
  PlanObjective objective = PlanObjective::Bytes;
  /// Without a budget, stages or a machine, under the time objective: its plan against the
  /// bytes objective's (on the process that chose).
  std::optional<ObjectiveChoice> objectiveChoice;
  /// With fitWorkersUpTo under the time objective (on one process, without `agree`).
  std::optional<FitByTime> fitByTime;
  /// With `--stages auto`: the candidates planned, and which won.
  std::optional<StageSearch> stageSearch;
};

/// The message of a budget no plan fits: the worker count and budget, the recomputation
/// allowed (`mode`, unset for none planned), and how close the closest plan came.
std::string noPlanFitsMessage(unsigned workers, int64_t limit, const MemoryFit &closest,
                              std::optional<RecomputeMode> mode);

/// Runs the pipeline on a built graph (checked here if it is not yet) up to `options.until`.
/// On failure, `failed` (where given) gets the stage that failed: Graph (reading, checking,
/// the training step), Problem (the analysis), Plan (the search) or Execution.
llvm::Expected<PipelineResult> runPipeline(Graph g, const std::string &name, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed = nullptr);
/// The same from a model, graph file or ONNX file.
llvm::Expected<PipelineResult> runPipeline(const GraphSource &source, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed = nullptr);

/// The same problem on one worker (what a partitioned plan is compared with and verified
/// against): its plan, execution plan and memory plan.
struct SingleWorker {
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
};
SingleWorker singleWorker(const Problem &problem, const std::vector<std::string> &outputs);

} // namespace tofu

#endif // TOFU_PLANNER_PIPELINE_H
