// The dataflow graph IR: tensors with shapes and roles, nodes that instantiate library ops.
#ifndef TOFU_GRAPH_GRAPH_H
#define TOFU_GRAPH_GRAPH_H

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "graph/library.h"
#include "support/element_type.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The element types a step computes in (tofu-plan's --precision, the APIs' precision).
enum class Precision {
  FP32, ///< every float tensor float32
  BF16, ///< mixed, as torch.autocast(dtype=torch.bfloat16) does (applyPrecision)
};
/// Its command-line name ("fp32", "bf16").
const char *precisionName(Precision p);
/// The precision of that name, if there is one.
std::optional<Precision> precisionNamed(const std::string &name);

/// What a tensor is for; the search groups and the memory accounting use it.
enum class TensorRole { Input, Weight, Activation, Gradient, OptimizerState };
const char *roleName(TensorRole r);
std::optional<TensorRole> parseRole(const std::string &s);

/// `base`, or else the first of `base_2`, `base_3`, ... not in `used`; it joins `used`.
std::string freshName(const std::string &base, std::set<std::string> &used);

struct TensorInfo {
  std::string name;
  /// The group the search coarsens by: a tensor with its gradient (and gradient sum).
  std::string group;
  std::vector<int64_t> shape; ///< empty for a scalar; unknown shapes are inferred
  bool shapeKnown = false;
  ElementType dtype = ElementType::Float32;
  TensorRole role = TensorRole::Activation;

  int64_t elements() const;
  int64_t bytes() const; ///< elements times the dtype's size
};

/// How the values of a random input are drawn (Graph::randomInputs).
struct RandomInput {
  enum class Kind {
    Mask,    ///< 1 with probability a, else 0 (a dropout mask; evaluation uses a itself)
    Uniform, ///< uniform in [a, b)
    Normal,  ///< normal of mean a and standard deviation b
  } kind = Kind::Uniform;
  double a = 0, b = 1;
};

/// One op instantiation: `output = op<attrs>{groups}(inputs)`.
struct Node {
  std::string name;
  /// The group the search coarsens by: a forward op with its backward ops, a gradient sum
  /// with its tensor, an unrolled timestep with its cell.
  std::string group;
  /// Nodes with the same non-empty key share one partition strategy (the search coalesces
  /// them, and their output tensors): the unrolled timesteps of one RNN cell op.
  std::string coalesce;
  std::string op;
  std::map<std::string, int64_t> attrs;
  std::map<std::string, int64_t> groups;
  std::vector<std::string> inputs;
  std::string output;
};

/// A dataflow graph. Tensors and nodes are referred to by name; `checkGraph` validates it.
class Graph {
public:
  /// Adds a tensor; an existing name is an error.
  llvm::Error addTensor(TensorInfo t);
  /// Adds a node; its output tensor is created (as an activation) if it does not exist.
  llvm::Error addNode(Node n);

  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const std::vector<Node> &nodes() const { return nodes_; }
  std::vector<std::string> outputs;
  /// Values of input tensors that are constants of the model (an ONNX model's Constant
  /// nodes and folded constants that its ops read as tensors: a normalisation's epsilon,
  /// an attention scale), row-major. Runs use them instead of synthetic data.
  std::map<std::string, std::vector<double>> constants;
  /// Initial values of weights that the model carries (an ONNX model's float
  /// initializers), row-major. Training starts from them; weights without one are drawn.
  std::map<std::string, std::vector<float>> initialValues;
  /// Inputs of an imported model given ahead whose values the import took whole (empty
  /// ones, such as a reduction's empty axes): no tensor of the graph holds them.
  std::set<std::string> inputsTakenWhole;
  /// Outputs of an imported model that hold no element (an extent is 0), by name with their
  /// shapes: known whole at import, they are not tensors of the graph (nor in `outputs`).
  /// `tofu-run --infer` writes them.
  std::map<std::string, std::vector<int64_t>> emptyOutputs;
  /// Inputs the import made for random values (a training-mode Dropout's mask, ONNX's random
  /// generators): runs draw each afresh at every step.
  std::map<std::string, RandomInput> randomInputs;
  /// The precision policy applied to the graph (applyPrecision). Under BF16 a bfloat16
  /// tensor takes 2 bytes in a worker's arena (Problem's storage); a model that arrives
  /// with bfloat16 tensors of its own holds them as float32 otherwise.
  Precision precision = Precision::FP32;

  const TensorInfo *tensor(const std::string &name) const;
  TensorInfo *tensor(const std::string &name);
  /// The node producing `tensor`, or null for graph inputs and weights.
  const Node *producer(const std::string &tensor) const;

  /// This graph without its tensors and nodes: its outputs and values (constants, initial
  /// values, random inputs, ...), for a rewrite to add tensors and nodes to again.
  Graph withoutNodes() const;

  /// Node indices in a topological order; an error names a node on a cycle.
  llvm::Expected<std::vector<unsigned>> topologicalOrder() const;

private:
  std::vector<TensorInfo> tensors_;
  std::vector<Node> nodes_;
  std::map<std::string, unsigned> tensorIndex_, producerIndex_, nodeIndex_;
};

/// Validates `g` against `lib` and infers every shape it can: each node's op exists, its
/// attributes and groups are the op's, its inputs exist with ranks the op accepts, and its
/// output shape follows from the op's shape clause (and agrees with a declared one). No
/// cycles; every tensor is produced once or is an input/weight; outputs exist. Errors name
/// the node.
llvm::Error checkGraph(Graph &g, const OpLibrary &lib);

/// Checks one node whose inputs' shapes are known and infers its output's shape (what
/// checkGraph does per node, in topological order).
llvm::Error inferNode(Graph &g, const Node &n, const OpLibrary &lib);

/// Node `n`'s op instantiated with its attributes and groups for its inputs' ranks, with
/// the inputs' shapes (which must be known). Errors name the node.
struct NodeInstance {
  InstOp op;
  std::vector<std::vector<int64_t>> inputShapes;
};
llvm::Expected<NodeInstance> instantiateNode(const Graph &g, const Node &n, const OpLibrary &lib);

/// Reads the JSON form of DESIGN.md: {"tensors": [...], "nodes": [...], "outputs": [...]}.
llvm::Expected<Graph> graphFromJson(const std::string &text);
/// Writes it.
std::string graphToJson(const Graph &g);

} // namespace tofu

#endif // TOFU_GRAPH_GRAPH_H
