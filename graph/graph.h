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

/// How the training graph updates weights (PyTorch's torch.optim forms): plain SGD, SGD with
/// momentum (no dampening), SGD with Nesterov momentum, Adam, and AdamW (decoupled decay).
enum class Optimizer { SGD, Momentum, Nesterov, Adam, AdamW };
/// Its command-line name ("sgd", "momentum", "nesterov", "adam", "adamw").
const char *optimizerName(Optimizer o);
/// The optimiser of that name, if there is one.
std::optional<Optimizer> optimizerNamed(const std::string &name);
/// The rank-0 hyper-parameter inputs of a training graph with optimiser `o`, in order:
/// `lr`; `momentum` (Momentum, Nesterov); `adam_b1`, `adam_b2`, `adam_c1`, `adam_c2`,
/// `adam_eps` (Adam, AdamW; c1 and c2 are the step's bias corrections 1 - b^t); and
/// `weight_decay` (AdamW, and any optimiser built with weight decay).
std::vector<std::string> optimizerHyperParameters(Optimizer o, bool weightDecay);

/// Builds a training graph from a checked forward graph and its scalar loss: backward
/// nodes from the ops' grad clauses (in reverse topological order; a gradient with several
/// contributions is summed, the sum in that tensor's group), then an optimiser update for
/// every weight (ops/optim/optim.tdl). Hyper-parameters are rank-0 input tensors
/// (optimizerHyperParameters); the state is a velocity `momentum_v_<weight>` (Momentum,
/// Nesterov) or the moments `adam_m_<weight>`, `adam_v_<weight>` (Adam, AdamW). With
/// `weightDecay`, SGD, Momentum, Nesterov and Adam add `weight_decay * w` to the gradient
/// (PyTorch's weight_decay); AdamW always decays, decoupled. The loss gradient seed is the
/// input `d_<loss>`. Errors name the node whose op lacks a needed grad clause.
llvm::Expected<Graph> buildTrainingGraph(const Graph &forward, const std::string &loss,
                                         const OpLibrary &lib, Optimizer optimizer,
                                         bool weightDecay = false);

/// Whether `op` updates state from step to step: one of the optimiser updates
/// buildTrainingGraph adds (sgd_update, sgd_weight_decay_update, momentum_velocity,
/// momentum_update, nesterov_update, adam_m, adam_v, adam_update, adamw_update), or a batch
/// norm's running statistic (bn_running_mean, bn_running_var, bn_running_var_unbiased). Where
/// its first input is a weight or state (not data), its result replaces that input for the
/// next step (Problem::carriesState).
bool isStateUpdate(const std::string &op);

/// Whether node `n` of `g` carries state: a state update (isStateUpdate) whose first input is
/// a weight or state (role Weight or OptimizerState, produced by no node).
bool carriesState(const Graph &g, const Node &n);

/// Whether `op` is a batch norm's running statistic (bn_running_mean, bn_running_var,
/// bn_running_var_unbiased).
bool isRunningStatistic(const std::string &op);

/// How evaluation normalises where training normalised with the batch's statistics.
enum class EvalNorm {
  Running, ///< with the running statistics, as PyTorch's model.eval() does
  Batch,   ///< with the batch's own, as in training
};

/// The graph that evaluation and inference run, from one imported for training (the same
/// names throughout, so that a training plan restricts to it): every running-statistic
/// update that carries state and whose result nothing reads is dropped (evaluation leaves
/// the statistics as they are), and under EvalNorm::Running the batch_norm_train whose
/// statistics those were becomes BatchNormalization on them, under the same node name.
/// Returns how many batch norms changed.
llvm::Expected<unsigned> evaluationGraph(Graph &g, const OpLibrary &lib, EvalNorm norm);

/// Which loss addLoss gives an output that is not a scalar.
enum class LossKind {
  Auto,         ///< softmax cross-entropy for a rank-2 output, else the mean squared error
  CrossEntropy, ///< softmax cross-entropy over the last axis: rank 2 [batch, classes], or
                ///< rank 3 [batch, positions, classes] with a class per position
  Mse,          ///< the mean squared error
};
/// Whether `op` is one of the softmax cross-entropy losses addLoss adds (its second input
/// the labels: one per row, or one per position).
bool isCrossEntropyLoss(const std::string &op);

/// Gives a checked graph whose single output is not a scalar a loss to train against, as
/// `kind` says: softmax cross-entropy against a new integer input `labels` of the output's
/// shape without its last axis (`softmax_cross_entropy` on [batch, classes] logits,
/// `softmax_cross_entropy_seq` on [batch, positions, classes]: a language model's mean
/// per-token loss), or the mean squared error against a new input `target` of the output's
/// shape. The loss becomes the graph's output; returns its name. Cross-entropy on an output
/// of another rank is an error that says so.
llvm::Expected<std::string> addLoss(Graph &g, const OpLibrary &lib, LossKind kind = LossKind::Auto);

/// How torch.autocast(dtype=torch.bfloat16) treats an op of the library, by name.
enum class CastClass {
  Lower,   ///< runs on bfloat16 operands with float32 accumulation: products, convolutions
  Float32, ///< runs in float32 (softmax, normalisations' statistics, losses, exp, log, pow,
           ///< sums, ...): bfloat16 inputs are widened first
  Promote, ///< runs in the widest float type of its inputs (type promotion)
};
CastClass castClass(const std::string &op);

/// What applyPrecision did.
struct PrecisionSummary {
  unsigned casts = 0;   ///< cast nodes added (to bfloat16 and back to float32)
  unsigned lowered = 0; ///< Lower nodes, now on bfloat16 operands
  unsigned float32 = 0; ///< Float32 nodes that read a bfloat16 tensor, widened
  /// Float32 nodes whose result only products read, stored in bfloat16
  unsigned storedNarrow = 0;
  /// Bias adds that round their product's float32 result and the bias once
  unsigned fusedBias = 0;
  /// GELUs the ONNX export spelled out in five ops, joined into one Gelu (nn.GELU rounds once)
  unsigned gelus = 0;
  /// Exported torch.baddbmm / addmm (Add(Mul(product, 1), M)) whose product and M are
  /// rounded once, M cast to bfloat16, as autocast runs them (counted in fusedBias too)
  unsigned addmms = 0;
};

/// Applies precision `p` to a checked forward graph (before buildTrainingGraph, which gives
/// every gradient its tensor's element type). FP32 changes nothing. BF16 follows PyTorch's
/// autocast to bfloat16 (CUDA's op lists, which keep more in float32 than the CPU's):
/// - a Lower op reads its float32 inputs through a CastBfloat16 node (one per tensor, shared
///   by all its Lower readers: a weight is cast once per step, as autocast caches it), and
///   its result is bfloat16;
/// - a Float32 op reads its bfloat16 inputs as they are (its kernel widens them exactly and
///   computes in float32), and its float result is float32, except where only products read
///   it and it is no output of the graph: then it is stored in bfloat16, rounded once as it
///   is written, where autocast keeps it in float32 beside a bfloat16 copy (a deviation:
///   a softmax's gradient then reads its rounded probabilities, as with Megatron's fused
///   softmax; it halves what attention keeps for the backward pass);
/// - another op's float result takes the widest float type of its float inputs, where a
///   rank-0 input does not widen a tensor of higher rank (PyTorch's promotion of 0-dim
///   tensors), a batch norm follows its data, and the bias a product's result is added to
///   (Add, AddBcast, ConvBias of a Lower op's result and a float32 weight) is cast with it,
///   as autocast's linear and conv take their bias.
/// Weights, their gradients and the optimiser's state stay float32; float64 tensors are
/// never narrowed. The graph stays checked.
llvm::Expected<PrecisionSummary> applyPrecision(Graph &g, const OpLibrary &lib, Precision p);

/// A forward tensor of a training graph that recomputation may drop (applyRecomputation): an
/// activation computed by the forward pass, not an output, not a state update's result.
struct RecomputeCandidate {
  std::string tensor, node; ///< the tensor and the node computing it
  int64_t elements = 0;
  int64_t bytes = 0;           ///< at its storage size (4, or 2 for bfloat16 under BF16)
  bool readByBackward = false; ///< kept for the backward pass unless dropped
  /// A cut of the forward pass: no forward node after this tensor's reads a candidate
  /// computed before it (a transformer's residual stream between sublayers, a CNN's block
  /// outputs). Kept, it bounds every chain of copies (applyRecomputation) at it: a dropped
  /// tensor after it is recomputed from it, never from further back.
  bool cut = false;
};
/// The candidates, in forward (topological) order.
llvm::Expected<std::vector<RecomputeCandidate>> recomputeCandidates(const Graph &g);

/// What applyRecomputation did.
struct RecomputeSummary {
  std::vector<std::string> dropped; ///< as given, sorted
  /// Per copy made: the dropped tensor and the tensor its copy computes.
  std::vector<std::pair<std::string, std::string>> copies;
  int64_t bytes = 0;    ///< of the copies' results (whole tensors, at their dtypes)
  unsigned removed = 0; ///< forward nodes gone: only the backward pass read their results
};

/// Recomputation, as a rewrite of a training graph (buildTrainingGraph's: the forward nodes,
/// then the backward): every backward reader of a tensor of `dropped` reads instead a copy of
/// its forward node (same op, attributes, inputs and groups, named `<node>_recompute`,
/// computing `<tensor>_recompute`), declared just before the first backward node that needs
/// it. A copy reads the copies of the dropped tensors its node reads, so a chain of dropped
/// tensors is recomputed from the kept ones before it (segment checkpointing). The forward
/// tensor then lives only until its last forward reader, and the copy from its recomputation
/// to its last backward reader: the memory planner sees both. A dropped tensor that only the
/// backward pass read is no longer computed by the forward pass. The copies are ordinary
/// nodes: partitioned, searched, fused and run like any other, and, running the same kernels
/// on the same values, they compute what the forward pass did, bit for bit. Errors name a
/// tensor that is not a candidate (recomputeCandidates) and why.
llvm::Expected<RecomputeSummary> applyRecomputation(Graph &g,
                                                    const std::vector<std::string> &dropped);

/// The sqrt(n) baseline (Chen et al., 2016): the candidates in forward order cut into
/// segments of ceil(sqrt(n)), each segment's last tensor kept and the others dropped.
std::vector<std::string> segmentCheckpoints(const std::vector<RecomputeCandidate> &candidates);

/// Reads the JSON form of DESIGN.md: {"tensors": [...], "nodes": [...], "outputs": [...]}.
llvm::Expected<Graph> graphFromJson(const std::string &text);
/// Writes it.
std::string graphToJson(const Graph &g);

} // namespace tofu

#endif // TOFU_GRAPH_GRAPH_H
