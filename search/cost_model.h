// The search's cost model (paper section 5 and its appendix): what a partition plan makes
// every worker receive, priced from the analysis' regions over the partition layer's
// geometry (partition/problem.h). The search asks it for the terms of one choice at a time
// (stepTerms, stepBuffers) and for the cost of whole plans (modelCost, levelCost,
// weightedCost); the brute-force oracle (bruteForceCost) evaluates the same quantity one
// worker at a time, for the tests and the reports that check the model.
//
// The interface is this class; its implementation is cost_model.cc (the sum-products over
// the steps' coordinates) and brute_force_cost.cc (the oracle).
#ifndef TOFU_SEARCH_COST_MODEL_H
#define TOFU_SEARCH_COST_MODEL_H

#include <cstdint>
#include <vector>

#include "partition/problem.h"

namespace tofu {

/// The objective over a machine's levels (planner/topology.h): per recursion step j, the
/// weight of the bytes, and of the messages, that cross out of the worker groups the first
/// j + 1 steps make (CostModel::levelCost with `cut` j + 1). Empty: communication alone.
struct PrefixWeights {
  std::vector<double> bytes;
  std::vector<double> messages; ///< empty, or one per step
  bool empty() const { return bytes.empty() && messages.empty(); }
};

/// The communication cost of partition plans of one problem. Holds a reference: the problem
/// must outlive it.
class CostModel {
public:
  explicit CostModel(const Problem &problem) : p_(problem) {}
  const Problem &problem() const { return p_; }

  /// Bytes the worker at `coords` receives for node `node` under `steps`: input regions it
  /// reads but does not hold, and the partial or whole output elements it owns but did not
  /// compute in full (reductions combine partials: an owner needs every partial but its own).
  ///
  /// With `cut` < steps.size(): only what it receives from outside its unit, the workers
  /// that share its coordinates at the first `cut` steps (a machine's node, when those
  /// steps are the node level's; see planner/topology.h): an input element is in the unit
  /// where it lies in the tile cut by those steps alone; the unit computes each partial of
  /// the output elements it computes under those steps (the later steps' partials too).
  /// `messages`, when given, gets the fetches: one per distinct tile (or produced piece of
  /// a reduction slice) that the worker's region (or tile) overlaps outside the unit, as the
  /// execution plan fetches them (codegen/exec_plan.h).
  int64_t workerNodeBytes(unsigned node, const std::vector<StepChoice> &steps,
                          const std::vector<unsigned> &coords, size_t cut = SIZE_MAX,
                          int64_t *messages = nullptr) const;

  /// Node `node`'s share of the model cost (below) when step `i` of `steps` takes `parts`
  /// groups with the node on strategy `s` and each slot's tensor (the inputs, then the
  /// output) on each candidate configuration in `configs[slot]`; every other choice as in
  /// `steps` (`i == steps.size()` appends a step). Result: per slot, per candidate.
  ///
  /// With `weights` (one per step of the finished plan; see planner/topology.h) the share is
  /// Σ_j (bytes_j × the node's bytes + messages_j × its messages that cross out of the
  /// units of the first j + 1 steps; levelCost), rounded: the communication time over a
  /// machine's levels in units of its fastest level's bytes. While steps are still being
  /// added, the last step takes the weights of the steps to come.
  std::vector<std::vector<int64_t>> stepTerms(unsigned node, const std::vector<StepChoice> &steps,
                                              size_t i, unsigned parts, int s,
                                              const std::vector<std::vector<int>> &configs,
                                              const PrefixWeights &weights = {}) const;
  /// The same choices' buffers on worker 0 while the node runs (the memory planner's, see
  /// codegen/memory_plan.h): per input slot, the region it reads where part of it is not
  /// in its own tile (a fetch buffer; a repeated read shares the earlier one's); for the
  /// output slot, what it computes unless that is exactly its tile, whole (a partial
  /// result). Result: per slot, per candidate, bytes.
  std::vector<std::vector<int64_t>> stepBuffers(unsigned node, const std::vector<StepChoice> &steps,
                                                size_t i, unsigned parts, int s,
                                                const std::vector<std::vector<int>> &configs) const;

  /// While the groups of all steps but the last number at most this, the search's step
  /// terms (stepTerms) count every worker; beyond, group 0 of every earlier step stands for
  /// all of them (the DP's objective only: every figure a plan reports is modelCost's).
  static constexpr int64_t kExactGroups = 64;

  /// The cost of a plan: every worker's received bytes (workerNodeBytes) summed over all k
  /// workers, exactly, at any k. A node's bytes are sums of products of one-dimensional
  /// terms (region and tile extents, their overlaps, whether a variable's range is empty),
  /// each depending on the coordinates of only the steps that split what it measures; the
  /// sum over all workers is taken per connected set of such steps (a sum-product), so it
  /// costs the product of those steps' parts, not k. Per node when `perNode` is given.
  int64_t modelCost(const std::vector<StepChoice> &steps,
                    std::vector<int64_t> *perNode = nullptr) const;
  /// What every worker receives from outside its unit of the first `cut` steps
  /// (workerNodeBytes with `cut`), summed over all workers the same way: bytes, and in
  /// `messages` (when given) the fetches. modelCost at `cut` >= steps.size().
  int64_t levelCost(const std::vector<StepChoice> &steps, size_t cut,
                    int64_t *messages = nullptr) const;
  /// Σ_j (weights.bytes[j] × levelCost(steps, j + 1) + weights.messages[j] × its messages),
  /// rounded (the last step taking the weights of the steps to come); modelCost without
  /// weights. The objective stepTerms' weighted shares add up to.
  int64_t weightedCost(const std::vector<StepChoice> &steps, const PrefixWeights &weights) const;
  /// Node `node`'s bytes summed over every worker (modelCost's terms; with `cut` and
  /// `messages` levelCost's).
  int64_t nodeCostEveryWorker(unsigned node, const std::vector<StepChoice> &steps,
                              size_t cut = SIZE_MAX, int64_t *messages = nullptr) const;

  // The oracle (brute_force_cost.cc).
  /// The same sum by brute force, worker by worker (nodes × k region evaluations): the
  /// oracle for modelCost.
  int64_t bruteForceCost(const std::vector<StepChoice> &steps) const;
  /// The same for one node, worker by worker (bruteForceCost's terms; the oracle for
  /// nodeCostEveryWorker).
  int64_t nodeBruteForceCost(unsigned node, const std::vector<StepChoice> &steps,
                             size_t cut = SIZE_MAX, int64_t *messages = nullptr) const;

private:
  /// stepTerms (received bytes, every worker; from outside the units of the first `cut`
  /// steps, and the messages in `messages` when given) or stepBuffers (worker 0's buffers).
  std::vector<std::vector<int64_t>>
  terms(unsigned node, const std::vector<StepChoice> &steps, size_t i, unsigned parts, int s,
        const std::vector<std::vector<int>> &configs, bool buffers, size_t cut = SIZE_MAX,
        std::vector<std::vector<int64_t>> *messages = nullptr) const;

  const Problem &p_;
};

} // namespace tofu

#endif // TOFU_SEARCH_COST_MODEL_H
