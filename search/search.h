// Partition search (paper section 5): coarsening, the per-step DP (exact variable
// elimination on the coarsened graph), recursion over k = k1·k2·…·km, and the baseline
// algorithms the paper compares with. Every algorithm's plan is costed by one model
// (search/cost_model.h).
#ifndef TOFU_SEARCH_SEARCH_H
#define TOFU_SEARCH_SEARCH_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "partition/plan.h"
#include "search/cost_model.h"

namespace tofu {

enum class Algorithm {
  Tofu,         ///< recursive: one exact DP per factor of k, largest factor first
  DpFlat,       ///< one DP over every multi-dimensional tiling at once (time budget)
  Icml18,       ///< Tofu's recursion without output-reduction strategies
  EqualChop,    ///< one DP, each tensor and op cut along one dimension into k parts
  Spartan,      ///< greedy, largest tensor first, one dimension into k parts
  AllRow,       ///< every tensor cut along its first dimension; ops choose greedily
  DataParallel, ///< activations cut by batch, weights and their state replicated
  Exhaustive,   ///< every sequence of basic plans (small graphs: the test oracle)
  Zero3,        ///< FSDP / ZeRO-3: ops split by batch, weights and their state sharded
  Megatron,     ///< Megatron-LM's tensor parallelism: column- then row-parallel weights
  SmallBatch,   ///< the paper's SmallBatch: no partition (planner/small_batch.h estimates it)
  Placement,    ///< the paper's operator placement: layers round-robin (planner/stages.h)
  Swap,         ///< the paper's Swapping: no partition (planner/swap.h estimates it)
};
/// An algorithm's name (`--algo`) and what it does: every algorithm, listed once here.
struct AlgorithmInfo {
  Algorithm algorithm;
  const char *name;
  const char *help;
};
const std::vector<AlgorithmInfo> &algorithms();
/// Gives an llvm::cl option over Algorithm (its parser `p`) every algorithm of algorithms()
/// as a value, with its help: the tools' --algo.
template <class Parser> void addAlgorithmChoices(Parser &p) {
  for (const AlgorithmInfo &a : algorithms())
    p.addLiteralOption(a.name, a.algorithm, a.help);
}
const char *algorithmName(Algorithm a);
std::optional<Algorithm> parseAlgorithm(const std::string &name);
/// "tofu, dp-flat, ..." for help texts.
std::string algorithmNames();

/// The estimated step as the search's objective (PlanOptions::time): every worker's
/// communication, as a machine's levels or one link carry it, plus every worker's compute.
/// planner/pipeline.h fills it from a device model (--objective time).
struct TimeObjective {
  /// Per node of the problem searched, the seconds its work takes on one worker: the part
  /// its workers divide among themselves (the FLOPs and bytes, not a kernel's launches). A
  /// node a step replicates computes its share of it whole in each of that step's parts.
  std::function<std::vector<double>(const Problem &)> nodeSeconds;
  /// The objective's unit: a byte received over the link (a machine's innermost level, else
  /// the device's link) takes 1 / bytesPerSecond seconds, and each second of compute counts
  /// as bytesPerSecond units. Positive.
  double bytesPerSecond = 0;
  /// Without prefix weights (no machine's levels): each message's seconds over the link,
  /// weighing every fetch as a machine's latencies do.
  double messageSeconds = 0;
};

struct PlanOptions {
  unsigned workers = 8;
  Algorithm algorithm = Algorithm::Tofu;
  /// Coarsening: merge chains of element-wise ops and nodes with one coalesce key.
  bool coarsen = true;
  /// Wall-clock budget of dp-flat and exhaustive, in seconds.
  double budgetSeconds = 60;
  /// The largest table one elimination may build.
  uint64_t maxTableEntries = uint64_t(1) << 24;
  /// Memory's price in the objective: the DP algorithms (tofu, icml18, equalchop, allrow,
  /// data-parallel, dp-flat; not spartan or exhaustive) minimise communication plus this
  /// many times worker 0's bytes of tensor tiles (replicas counted whole) and, for the nodes
  /// `pricedBuffers` marks (not dp-flat), of the buffers it needs while the node runs
  /// (CostModel::stepBuffers). 0: communication alone. The plan's reported figures
  /// (totalBytes, stepBytes) stay communication only. See planner/memory_fit.h.
  double memoryWeight = 0;
  std::vector<bool> pricedBuffers; ///< per node
  /// The recursion's steps, each a factor of `workers` in order (outermost first); empty:
  /// factorWorkers(workers). A machine's levels give them (planner/topology.h).
  std::vector<unsigned> factors;
  /// Per step of `factors`, the algorithm whose rules that step follows (Megatron-LM's
  /// TP x DP: data-parallel across the outer groups, megatron inside each); empty:
  /// `algorithm` at every step. Only the one-step algorithms' rules (equalchop, allrow,
  /// data-parallel, zero3, megatron) combine so.
  std::vector<Algorithm> stepAlgorithms;
  /// Per step, the weights of the bytes and messages that cross out of the worker groups of
  /// the steps up to it (CostModel::stepTerms); empty: communication alone. tofu, icml18 and
  /// dp-flat use it.
  PrefixWeights prefixWeights;
  /// Where given, the objective of tofu, icml18, dp-flat and exhaustive is the estimated
  /// step: communication over the prefix weights' levels (without them, over one link at
  /// TimeObjective's bandwidth and latency) plus every worker's compute, all in units of the
  /// link's bytes. Unset: communication alone, the paper's objective (--objective bytes).
  /// The plan's reported figures stay its bytes.
  std::optional<TimeObjective> time;
  /// tofu: after the single-step sweeps, the moves beyond them (pairs of steps solved
  /// jointly, merged-factor starts; within a work budget). false: the sweeps alone.
  bool jointMoves = true;
  /// Threads of the search (tofu, icml18, equalchop, allrow, data-parallel): each step's
  /// terms are looked up and computed by this many threads. 0: the machine's cores, at most
  /// 8. The plan is the same at any count.
  unsigned threads = 0;
};

/// A plan's objective, in the search's units: its bytes (over the prefix weights' levels)
/// and, where the time objective searched it (plan.objective "time"), every worker's compute
/// (o.time's). What a budgeted search compares its candidates by.
int64_t planObjective(const Problem &p, const PlanOptions &o, const PartitionPlan &plan);

/// `t` with its work per node of `p` estimated once, here: every later call of its
/// nodeSeconds (on `p`, by the searches of one problem) returns those figures.
TimeObjective withWorkOf(const TimeObjective &t, const Problem &p);

/// The time objective's compute of a plan's steps: each node's work (t.nodeSeconds of `p`)
/// times the workers that compute it whole (the parts of every step that replicates it),
/// summed, over the plan's workers: a worker's compute, on average, in seconds.
double planComputeSeconds(const Problem &p, const TimeObjective &t,
                          const std::vector<StepChoice> &steps);

/// Megatron-LM's TP x DP as the steps of `o` (factors and stepAlgorithms): data
/// parallelism across `dp` groups as the outer step, Megatron's cuts over the `tp` workers
/// of each group inside it; a factor of 1 is no step.
void setMegatronSteps(PlanOptions &o, unsigned tp, unsigned dp);

/// The error of a step of `a` (data-parallel or zero3: the algorithms that cut every op by
/// its batch) in `parts` parts where some op's batch has fewer samples; success otherwise,
/// and for other algorithms.
llvm::Error batchPartsError(const Problem &problem, unsigned parts, Algorithm a);

/// Searches `problem` for a plan on `options.workers` workers with `options.algorithm`.
/// Errors: zero workers, a DP table over the limit, a time budget exceeded, a step of
/// data-parallel or zero3 cutting the batch into more parts than some op's batch has
/// samples (batchPartsError).
llvm::Expected<PartitionPlan> searchPlan(const Problem &problem, const PlanOptions &options);

/// The coarsened graph: which nodes and tensors share one choice (union-find roots), for
/// the documentation, the report and the tests.
struct Coarsening {
  std::vector<unsigned> nodeSet;   ///< per node, its set's id
  std::vector<unsigned> tensorSet; ///< per tensor, its set's id (ids shared with nodes)
  unsigned sets = 0;
};
Coarsening coarsen(const Problem &problem, bool mergeElementwise, bool mergeCoalesced);

} // namespace tofu

#endif // TOFU_SEARCH_SEARCH_H
