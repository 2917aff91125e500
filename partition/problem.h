// The partition layer's core: a dataflow graph with every node analysed for its strategies
// on concrete shapes (the partitioning problem), one basic partition plan's choices
// (StepChoice), and the geometry a sequence of them gives each worker: the ranges of every
// node's variables, every tensor's tile, how many partial results a reduction leaves.
//
// The search (search/) prices these choices with its cost model (search/cost_model.h); the
// code generator (codegen/) turns them into every worker's program. Neither reaches into the
// other: both stand on this layer.
#ifndef TOFU_PARTITION_PROBLEM_H
#define TOFU_PARTITION_PROBLEM_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/strategy.h"
#include "graph/graph.h"
#include "graph/training.h"
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
  ElementType dtype = ElementType::Float32;
  unsigned elementBytes = 4; ///< the dtype's: what moving an element costs
  /// What an element is in a worker's arena: float32 (the engines hold every tensor so,
  /// integers exactly below 2^24), and bfloat16 for a bfloat16 tensor of a graph in bf16.
  ElementType storage = ElementType::Float32;
  unsigned storageBytes() const { return elementTypeBytes(storage); }
  /// What an element of a result costs to move to the tile's owner: the dtype's size, but a
  /// bfloat16 tensor's partial results (`partials`: reduction slices to combine) are float32,
  /// rounded once when combined (resultStorageBytes).
  unsigned resultBytes(bool partials) const {
    return partials && storage == ElementType::BFloat16 ? 4 : elementBytes;
  }
  /// What an element of a worker's result takes in its arena where it is not written into
  /// the tile: float32 (the accumulators' type) where reduction slices are combined, else
  /// the tensor's storage size.
  unsigned resultStorageBytes(bool partials) const { return partials ? 4 : storageBytes(); }
  /// The type of such an element (resultStorageBytes).
  ElementType resultStorage(bool partials) const {
    return partials ? ElementType::Float32 : storage;
  }
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

  /// Whether node `n` carries state across steps: an optimiser update or a running
  /// statistic (isStateUpdate) of a weight or state, whose result replaces that first input
  /// for the next step. The same ops on data inputs (an imported ONNX Momentum or Adam, a
  /// batch norm's statistics fed as data) are ordinary ops.
  bool carriesState(const ProblemNode &n) const {
    if (!isStateUpdate(n.table->op.def->name))
      return false;
    const TensorRole r = tensors[n.inputs[0]].role;
    return r == TensorRole::Weight || r == TensorRole::OptimizerState;
  }

  /// Bytes of tensor tiles held by the worker at `coords` (replicated tensors whole).
  int64_t workerTensorBytes(const std::vector<StepChoice> &steps,
                            const std::vector<unsigned> &coords) const;
};

/// Part `w` of `r` split into `parts` balanced parts (analysis/strategy.h: partOf, offset
/// by `r.lo`).
Range subRange(Range r, unsigned parts, unsigned w);

/// The earlier input of a node that reads the same tensor over the same region as input
/// `i` (it is fetched once, for both), or -1.
int repeatedRead(const std::vector<unsigned> &inputs, const std::vector<Box> &regions, size_t i);

/// k as k1·k2·…·km with k1 >= k2 >= … (prime factors, largest first); empty for k = 1.
std::vector<unsigned> factorWorkers(unsigned k);

/// The worker coordinates of flat worker index `w` for step parts `parts` (first step most
/// significant).
std::vector<unsigned> workerCoords(unsigned w, const std::vector<unsigned> &parts);

} // namespace tofu

#endif // TOFU_PARTITION_PROBLEM_H
