// The partitioning problem of one dataflow graph: every node analysed for its strategies
// on concrete shapes, and the cost model the search minimises (paper section 5 and its
// appendix), evaluated per worker from the analysis' regions.
#ifndef TOFU_SEARCH_PROBLEM_H
#define TOFU_SEARCH_PROBLEM_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/strategy.h"
#include "graph/graph.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A node of the graph, analysed.
struct ProblemNode {
  unsigned graphNode = 0;
  std::string name;
  std::shared_ptr<const StrategyTable> table; ///< shared by nodes of one instantiation
  Shapes shapes;
  std::vector<unsigned> inputs; ///< tensor index per op input
  unsigned output = 0;
  std::string coalesce;
  std::string group;
  /// Per input, per dimension: the variables whose ranges the input's region along that
  /// dimension depends on (shared by nodes of one instantiation; see modelCost).
  std::shared_ptr<const std::vector<std::vector<std::vector<unsigned>>>> regionVars;
  /// The reads of the table's op (collectReads; shared likewise), for inputRegions.
  std::shared_ptr<const std::vector<const ir::Read *>> reads;
};

struct ProblemTensor {
  unsigned graphTensor = 0;
  std::string name;
  std::vector<int64_t> shape;
  unsigned elementBytes = 4;
  TensorRole role = TensorRole::Activation;
  std::string group;
  int producer = -1; ///< node index, or -1 for inputs and weights
  std::vector<unsigned> consumers;
};

/// One basic partition plan (one recursion step): how every op and tensor is divided among
/// `parts` worker groups. Node choice: index into the node's strategies, or -1 when every
/// group computes the whole op. Tensor choice: the split dimension, or -1 when every group
/// holds the whole tensor.
struct StepChoice {
  unsigned parts = 1;
  std::vector<int> node;
  std::vector<int> tensor;
};

/// The objective over a machine's levels (search/topology.h): per recursion step j, the
/// weight of the bytes, and of the messages, that cross out of the worker groups the first
/// j + 1 steps make (Problem::levelCost with `cut` j + 1). Empty: communication alone.
struct PrefixWeights {
  std::vector<double> bytes;
  std::vector<double> messages; ///< empty, or one per step
  bool empty() const { return bytes.empty() && messages.empty(); }
};

class Problem {
public:
  /// Analyses every node of a checked graph (shapes known). Instantiations are analysed
  /// once and shared.
  static llvm::Expected<Problem> build(const Graph &g, const OpLibrary &lib);

  std::vector<ProblemNode> nodes;
  std::vector<ProblemTensor> tensors;
  /// Node indices in a topological order.
  std::vector<unsigned> order;

  /// A node's variable ranges for the worker at `coords` (one coordinate per step) after
  /// `steps` (the first `cut` of them): each step's chosen variable is split again into
  /// that step's parts.
  std::vector<Range> nodeRanges(unsigned node, const std::vector<StepChoice> &steps,
                                const std::vector<unsigned> &coords, size_t cut = SIZE_MAX) const;
  /// A tensor's tile for the worker at `coords` after `steps` (the first `cut` of them).
  Box tensorTile(unsigned tensor, const std::vector<StepChoice> &steps,
                 const std::vector<unsigned> &coords, size_t cut = SIZE_MAX) const;
  /// How many partial results of each output element exist after `steps` (the product of
  /// the parts of the steps that split a reduction variable of the node); with `from`, of
  /// the steps from `from` on only (those a unit of the first `from` steps computes).
  int64_t partials(unsigned node, const std::vector<StepChoice> &steps, size_t from = 0) const;
  bool isReduction(unsigned node, int strategy) const;
  /// The variable a strategy splits (-1 for -1).
  int splitVar(unsigned node, int strategy) const;
  /// A short human name: `b` (output dimension variable), `reduce ci`, `replicate`.
  std::string strategyName(unsigned node, int strategy) const;

  /// Bytes the worker at `coords` receives for node `node` under `steps`: input regions it
  /// reads but does not hold, and the partial or whole output elements it owns but did not
  /// compute in full (reductions combine partials: an owner needs every partial but its own).
  ///
  /// With `cut` < steps.size(): only what it receives from outside its unit, the workers
  /// that share its coordinates at the first `cut` steps (a machine's node, when those
  /// steps are the node level's; see search/topology.h): an input element is in the unit
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
  /// With `weights` (one per step of the finished plan; see search/topology.h) the share is
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
  int64_t modelCost(const std::vector<StepChoice> &steps, std::vector<int64_t> *perNode = nullptr) const;
  /// What every worker receives from outside its unit of the first `cut` steps
  /// (workerNodeBytes with `cut`), summed over all workers the same way: bytes, and in
  /// `messages` (when given) the fetches. modelCost at `cut` >= steps.size().
  int64_t levelCost(const std::vector<StepChoice> &steps, size_t cut,
                    int64_t *messages = nullptr) const;
  /// Σ_j (weights.bytes[j] × levelCost(steps, j + 1) + weights.messages[j] × its messages),
  /// rounded (the last step taking the weights of the steps to come); modelCost without
  /// weights. The objective stepTerms' weighted shares add up to.
  int64_t weightedCost(const std::vector<StepChoice> &steps, const PrefixWeights &weights) const;
  /// The same sum by brute force, worker by worker (nodes × k region evaluations): the
  /// oracle for modelCost.
  int64_t exactCost(const std::vector<StepChoice> &steps) const;
  /// Node `node`'s bytes summed over every worker (modelCost's terms; with `cut` and
  /// `messages` levelCost's).
  int64_t nodeCostEveryWorker(unsigned node, const std::vector<StepChoice> &steps,
                              size_t cut = SIZE_MAX, int64_t *messages = nullptr) const;
  /// The same for one node, worker by worker (exactCost's terms).
  int64_t nodeCostWorkerByWorker(unsigned node, const std::vector<StepChoice> &steps,
                                 size_t cut = SIZE_MAX, int64_t *messages = nullptr) const;

  /// Bytes of tensor tiles held by the worker at `coords` (replicated tensors whole).
  int64_t workerTensorBytes(const std::vector<StepChoice> &steps,
                            const std::vector<unsigned> &coords) const;

private:
  /// stepTerms (received bytes, every worker; from outside the units of the first `cut`
  /// steps, and the messages in `messages` when given) or stepBuffers (worker 0's buffers).
  std::vector<std::vector<int64_t>> terms(unsigned node, const std::vector<StepChoice> &steps,
                                          size_t i, unsigned parts, int s,
                                          const std::vector<std::vector<int>> &configs,
                                          bool buffers, size_t cut = SIZE_MAX,
                                          std::vector<std::vector<int64_t>> *messages = nullptr) const;

};

/// The earlier input of a node that reads the same tensor over the same region as input
/// `i` (it is fetched once, for both), or -1.
int repeatedRead(const std::vector<unsigned> &inputs, const std::vector<Box> &regions, size_t i);

/// k as k1·k2·…·km with k1 >= k2 >= … (prime factors, largest first); empty for k = 1.
std::vector<unsigned> factorWorkers(unsigned k);

/// The worker coordinates of flat worker index `w` for step parts `parts` (first step most
/// significant).
std::vector<unsigned> workerCoords(unsigned w, const std::vector<unsigned> &parts);

} // namespace tofu

#endif // TOFU_SEARCH_PROBLEM_H
