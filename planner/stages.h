// Pipeline stages (GPipe; 1F1B, PipeDream-Flush): a training step over M microbatches
// (graph/microbatch.h) whose layers are cut into S contiguous stages, each run by its own
// group of k/S workers and partitioned over them by Tofu's search, one stage after another
// as the schedule says.
//
// - Layers are the forward graph's segments between its cuts (graph/recompute.h:
//   forwardCandidates; a transformer's residual stream between sublayers, a CNN's block
//   outputs): a stage ends at a cut, so the one tensor a stage hands the next forward (and
//   its gradient, backward) is that cut. `--stages S` balances the stages' forward work (their
//   ops' estimated time on one worker); `--stages 3,5` gives each stage's layers.
// - Every node of the step belongs to one stage and one chunk of the schedule (stage s's
//   forward or backward of microbatch m): a forward op and its backward ops to the stage of
//   its layer, a weight's gradient sums and update to where its gradients are summed, the
//   loss's mean to the last stage. The chunks are ordered by simulating the schedule
//   (backward twice a forward's time) and the nodes by their chunk, so the memory planner sees
//   each microbatch's activations live from its forward to its backward: GPipe holds all M
//   microbatches' at once, 1F1B at most S - s on stage s.
// - The execution plan is the stages' partitions side by side: stage s's workers hold the
//   tiles of its tensors as its own plan cuts them; a tensor another stage reads (the cut, a
//   weight two stages share) is fetched from the stage holding it, re-cut to the reader's
//   regions. Scalars are held by every worker. Every engine and transport runs it as any
//   plan: a worker passes over other stages' nodes, and waits only where it exchanges data.
// - The paper's operator placement (`--algo placement`, StageSpec::roundRobin) is the same
//   machinery with other layers and another order: every layer of weightLayers is a stage of
//   its own, layer l on worker group l mod S (more layers than groups: round-robin), and
//   each group runs its chunks as they become ready, every forward before any backward.
#ifndef TOFU_PLANNER_STAGES_H
#define TOFU_PLANNER_STAGES_H

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "graph/graph.h"
#include "partition/plan.h"
#include "partition/problem.h"
#include "search/search.h"
#include "support/errors.h"
#include "llvm/Support/Error.h"

namespace tofu {

enum class Schedule { GPipe, OneFOneB };
/// Its command-line name ("gpipe", "1f1b").
const char *scheduleName(Schedule s);
std::optional<Schedule> scheduleNamed(const std::string &name);

struct StageSpec {
  unsigned stages = 1;
  /// Per stage, its layers, where given (else balanced).
  std::vector<unsigned> layers;
  unsigned microbatches = 1;
  Schedule schedule = Schedule::OneFOneB;
  /// The paper's operator placement (--algo placement): every layer (weightLayers) its own
  /// stage, layer l on worker group l mod `stages` (`layers` unused), under GPipe's order.
  bool roundRobin = false;
  /// Data-parallel gradients reduced once a step, not every microbatch (reduceGradientsOnce),
  /// where that moves fewer bytes and shortens the estimated step and, under a budget, where
  /// the stage still fits.
  bool reduceOnce = true;
  /// `--stages auto`: the pipeline chooses the stages and microbatches by the estimated step
  /// (planner/pipeline.h: StageSearch); `stages` and `microbatches` are then unset (1).
  bool automatic = false;
  /// A stage whose problem is an earlier stage's under other names (a GPT's middle stages)
  /// takes that stage's plan rather than searching again (StageSummary::planOf). The search
  /// is deterministic, so the plan is the same either way; false searches every stage (the
  /// tests' check of that).
  bool shareSearches = true;
  bool active() const { return stages > 1 || microbatches > 1 || roundRobin; }
};

/// `--stages`' forms: a count S, the layers of each stage by commas ("3,5"), or `auto`
/// (StageSpec::automatic). Errors say which form failed.
llvm::Error parseStages(const std::string &text, StageSpec &spec);

/// The algorithm as the user chose it: a tool's --algo, --megatron, --stages and
/// --microbatches, or an API's arguments.
struct AlgorithmChoice {
  Algorithm algorithm = Algorithm::Tofu;
  bool algorithmGiven = false;
  std::string megatron; ///< "TP,PP,DP", or empty
  bool stagesGiven = false, microbatchesGiven = false;
};

/// Sets `search`'s algorithm, and with `megatron` its steps: data parallelism across DP
/// groups (the outer step), Megatron-LM's tensor parallelism over TP workers inside each, and
/// with PP > 1 PP pipeline stages into `stages` (microbatches PP unless given). Placement
/// makes each worker a stage (microbatches: the workers unless given). Errors are UsageErrors
/// naming the settings as `names` spells them: a --megatron that is not three positive
/// integers multiplying to the workers, or that contradicts the stages or the algorithm;
/// stages where the caller plans none (`stages` null).
llvm::Error applyAlgorithmChoice(const AlgorithmChoice &choice, PlanOptions &search,
                                 StageSpec *stages, const SettingNames &names);

/// The forward graph's layers: per node (by name), the layer it is in (0 on), and per layer
/// the cut that ends it (empty for the last).
struct Layers {
  std::map<std::string, unsigned> ofNode;
  std::vector<std::string> ends;
  unsigned count() const { return static_cast<unsigned>(ends.size()); }
};
llvm::Expected<Layers> forwardLayers(const Graph &forward);
/// The forward graph's layers as operator placement assigns them: the ops of one group of
/// weights (the weights some op reads together are one group: an LSTM cell's input and
/// recurrent weights, a normalisation's scale and shift), numbered by their first use. An op
/// is in the latest layer among its inputs' and its weights' (so one that reads no weight,
/// or a weight first used earlier, as tied logits do, goes with what it reads). No layer ends
/// at one cut: every `ends` is empty.
llvm::Expected<Layers> weightLayers(const Graph &forward);

/// A stage of the schedule: under placement, one layer, on the group of its layer's turn.
struct StageSummary {
  unsigned firstWorker = 0, workers = 1;
  unsigned firstLayer = 0, layers = 0;
  std::string boundary; ///< the cut it hands the next stage (empty for the last)
  unsigned nodes = 0;   ///< of the step
  PartitionPlan plan;   ///< its nodes' partition over its workers
  /// Under a memory budget (planStages' `memoryLimit`): the plans its budgeted search tried,
  /// the price of memory its plan was found with, and whether that plan's peak fitted the
  /// budget in the stage's own problem (where what it receives is held from the step's start
  /// and what it hands on to the end: at least its peak in the step's memory plan).
  unsigned searches = 1;
  double memoryWeight = 0;
  bool fits = true;
  /// The earlier stage whose problem this one's is under other names (planStages' key: ops,
  /// shapes, edges and the step's outputs alike), whose plan it took without a search of
  /// its own (`searches` and `memoryWeight` are that search's); -1: it was searched.
  int planOf = -1;
  /// The forward tensors of its layers that recomputation drops (every microbatch's).
  unsigned recomputed = 0;
};

enum class ChunkPhase { Forward, Backward };
struct Chunk {
  ChunkPhase phase = ChunkPhase::Forward;
  unsigned stage = 0, microbatch = 0;
  double start = 0; ///< in the simulated schedule (a forward takes 1, a backward 2)
};

struct StagedPlan {
  StageSpec spec;
  std::vector<StageSummary> stages;
  unsigned layers = 0;
  /// The schedule's chunks in order, and per problem node the chunk it runs in.
  std::vector<Chunk> chunks;
  std::vector<unsigned> nodeChunk;
  ExecPlan exec; ///< every worker's; nodes in the schedule's order (runPipeline moves it out)
  /// The gradients `exec` reduces once a step, not every microbatch (reduceGradientsOnce).
  unsigned reducedOnce = 0;
  /// Where some could be: the step estimated with them reduced once and every microbatch
  /// (the plan takes the shorter; 0: not estimated).
  double reduceOnceSeconds = 0, reduceEachSeconds = 0;
  /// Those left to reduce every microbatch because their accumulators took a stage over the
  /// memory budget.
  unsigned reducedEachForBudget = 0;
  /// "2 stages x 2 workers, 4 microbatches, 1f1b"; under placement "placement: 12 layers
  /// round-robin on 2 workers, 2 microbatches, gpipe".
  std::string describe() const;
};

/// The schedule's chunks for S stages and M microbatches, in the order they start.
std::vector<Chunk> scheduleChunks(Schedule s, unsigned stages, unsigned microbatches);
/// Operator placement's chunks, in the order they start: stage (layer) v on group
/// `groupOf[v]`, its forward taking `work[v]` and its backward twice that. A group runs
/// whichever of its chunks is ready first (the earliest microbatch on ties), every forward
/// before any backward, as a dataflow engine over GPipe's microbatches does.
std::vector<Chunk> placementChunks(const std::vector<unsigned> &groupOf,
                                   const std::vector<double> &work, unsigned microbatches);

/// Plans `p`, the training step of microbatchGraph's graph (or, with one microbatch, of the
/// model itself), as `spec`'s stages on `search.workers` workers (a multiple of the stages),
/// each stage searched with `search` over its workers. `microForward` is the model at the
/// microbatch's batch, with its loss (its layers name the stages' cuts); `forwardNodes` names
/// the step's forward nodes; `nodeWork`, per node of `p`, its time on one worker (what
/// balances the stages: their forward nodes' sums; under placement, orders its chunks).
/// Errors: more stages than layers (placement leaves the groups past them idle), layers that
/// do not add up, a
/// worker count the stages do not divide, placement under 1F1B.
///
/// With `memoryLimit` > 0, each stage is searched under that budget (searchWithinMemory: its
/// plan of least communication that fits, or the closest), judged in its own problem, whose
/// graph outputs are `outputs`. Not fitting is a result (StageSummary::fits), not an error.
llvm::Expected<StagedPlan> planStages(const Problem &p, const Graph &microForward,
                                      const std::set<std::string> &forwardNodes,
                                      const StageSpec &spec, const PlanOptions &search,
                                      const std::vector<double> &nodeWork, int64_t memoryLimit = 0,
                                      const std::vector<std::string> &outputs = {});

/// Each weight's gradient reduced once a step, as Megatron-LM and DDP's gradient accumulation
/// do, where the stages' plans reduce (or gather) it every microbatch. A gradient summed over
/// microbatches (graph/training.h's left fold of `sum_d_` nodes) whose every contribution
/// has the same boxes on the same workers, combined alike (partial results of a reduction
/// split, a stage's batch across its workers; or parts gathered into tiles) is rewritten in
/// `e`: each worker adds its own results into an accumulator of its result's box, and only the
/// last sum combines the workers' accumulators into the gradient's tiles. A chain is
/// rewritten only where that moves fewer bytes; each worker then holds an accumulator of its
/// box (a stage's whole weight under data parallelism) from its first microbatch's backward
/// to the last, in the gradient's type. A bfloat16 gradient (summed over the microbatches in
/// bfloat16 already) then rounds each worker's partial result where it rounded their sum, and
/// the last sum combines float32 partial results as any reduction does. Returns the chains
/// rewritten, each with what it replaced.
struct ReducedGradient {
  unsigned gradient = 0;                               ///< the summed gradient (its tensor)
  unsigned firstWorker = 0;                            ///< the first worker holding an accumulator
  std::vector<std::pair<unsigned, NodeExec>> replaced; ///< index in e.nodes, as it was
  std::vector<std::pair<unsigned, std::vector<Box>>> tiles; ///< a tensor's tiles, as they were
};
std::vector<ReducedGradient> reduceGradientsOnce(const Problem &p, ExecPlan &e);
/// Puts back what reduceGradientsOnce rewrote for `r` (its gradient reduced every
/// microbatch), keeping the rewrite in `r`: a second call puts the rewrite back.
void swapGradient(ExecPlan &e, ReducedGradient &r);

/// Per stage, the bytes its workers fetch from one another in `e` (the step's execution plan:
/// inputs and partial results of the stage's nodes). The rest of e's bytes cross between
/// groups of workers: what stages hand on, shared weights, scalars.
std::vector<int64_t> stageBytes(const Problem &p, const StagedPlan &staged, const ExecPlan &e);
/// Per stage, the largest planned peak of its workers in `memory` (the step's memory plan).
std::vector<int64_t> stagePeaks(const StagedPlan &staged, const MemoryPlan &memory);

} // namespace tofu

#endif // TOFU_PLANNER_STAGES_H
