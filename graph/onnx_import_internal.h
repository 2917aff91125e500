// The ONNX importer's parts, shared by its files (users include graph/onnx_import.h; the
// importer's tests include this one too). One Importer translates one model:
// - onnx_import.cc reads the model (external data, shape inference in a child process, the
//   initializers) and runs the nodes in order;
// - onnx_fold.cc evaluates constant nodes, all one way: the interpreter runs the library ops
//   a node translates to;
// - onnx_translate.cc applies the translation table's rules (ops/onnx_mapping.json);
// - the table's handlers, where the mapping is logic, are one file per family:
//   onnx_layout.cc (reshape, slice, concat, transpose, expand, pad, tile, resize, scatter),
//   onnx_recurrent.cc (LSTM, GRU and RNN unrolled), onnx_einsum.cc and onnx_optimizers.cc
//   (the training-preview domain's optimisers);
// - onnx_control.cc expands control flow (If, Loop, Scan) where the import knows how it
//   goes, and imports the expanded model again;
// - onnx_datashape.cc evaluates ops TDL cannot describe (NonZero, Compress, Unique,
//   NonMaxSuppression, TfIdfVectorizer) where their inputs are known;
// - onnx_builder.cc is the GraphBuilder every translation adds through: each addition returns
//   its error;
// - onnx_values.cc holds the small constants, attributes and element types they all read.
#ifndef TOFU_GRAPH_ONNX_IMPORT_INTERNAL_H
#define TOFU_GRAPH_ONNX_IMPORT_INTERNAL_H

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/onnx_import.h"
#include "graph/onnx_rules.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

namespace tofu {
namespace onnximport {

/// The most entries of a matrix the importer builds to map one axis (Resize, edge and
/// reflect Pad).
constexpr int64_t kMaxAxisMap = int64_t(1) << 24;

/// How ONNX Resize interpolates along an axis.
struct ResizeSpec {
  std::string mode = "nearest";         ///< nearest, linear or cubic
  std::string transform = "half_pixel"; ///< coordinate_transformation_mode
  std::string nearestMode = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
  /// tf_crop_and_resize: the axis's region of interest, as fractions of its extent - 1.
  double roiStart = 0, roiEnd = 1;
};

std::vector<int64_t> intsAttr(const onnx::NodeProto &n, const std::string &name,
                              std::vector<int64_t> dflt);

std::optional<int64_t> intAttr(const onnx::NodeProto &n, const std::string &name);

std::optional<float> floatAttr(const onnx::NodeProto &n, const std::string &name);

std::string stringAttr(const onnx::NodeProto &n, const std::string &name, std::string dflt);

/// The number of elements of a shape.
int64_t elementCount(const std::vector<int64_t> &shape);

/// A small constant tensor the importer evaluates itself (shape computations, scalars).
struct Const {
  std::vector<int64_t> shape;
  std::vector<double> v; ///< row-major
  bool isInt = false;
  int64_t size() const { return elementCount(shape); }
};

/// The numpy broadcast of two shapes, or nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcastShape(const std::vector<int64_t> &a,
                                                   const std::vector<int64_t> &b);

/// Reads a TensorProto's values (float, double, int32, int64, bool; raw or typed fields).
std::optional<Const> constOf(const onnx::TensorProto &t);

/// An ONNX index bound: negative counts from the end; clamped to [0, m].
int64_t bound(int64_t x, int64_t m);

/// An integer constant held as a double, saturated to int64: INT64_MAX (an open-ended
/// slice, `x[3:]`) is 2^63 as a double, which a plain conversion overflows.
int64_t asInt(double x);

/// The shape after ONNX Unsqueeze: `axes` index the output (negative from its end).
std::vector<int64_t> unsqueezed(std::vector<int64_t> shape, std::vector<int64_t> axes);

/// The shape after ONNX Squeeze: the listed axes go, or every size-1 axis when none is.
std::vector<int64_t> squeezed(const std::vector<int64_t> &shape, std::vector<int64_t> axes);

/// ONNX Reshape's target for an input of shape `from`: 0 copies the input's dimension
/// (unless `allowZero`), -1 takes the elements left (0 when the rest is empty).
std::vector<int64_t> reshapeTarget(const std::vector<int64_t> &from, std::vector<int64_t> to,
                                   bool allowZero);

/// Why a shape cannot be a tensor's (a negative extent, more elements than 64-bit byte
/// counts hold), or empty.
std::string badShape(const std::vector<int64_t> &dims);

bool isIntType(int32_t t);

/// Whether `domain` names ONNX's default operator domain ("" or "ai.onnx").
bool isDefaultDomain(const std::string &domain);

/// The model's opset of the default domain (17 when it imports none).
int defaultOpset(const onnx::ModelProto &model);

/// The bits of an ONNX integer element type (8 to 64), or 0 for any other type (bool too).
int integerBits(int32_t t);

/// Whether `perm` lists each of the axes 0 .. rank - 1 once.
bool isPermutation(std::vector<int64_t> perm, size_t rank);

/// `c` as a constant of ONNX element type `type`: integer types truncate, bool is x != 0.
void convertTo(Const &c, int32_t type);

/// What an element type Tofu's tensors cannot hold is ("strings"), or null for a number type.
const char *unholdableType(int32_t t);

/// The graph's element type for an ONNX element type (float32 for one it has not: uint16,
/// uint32, uint64, which it holds as float32).
ElementType graphElementType(int32_t t);

onnxrules::Value attrValue(const onnx::AttributeProto &a);

/// The functions the table's expressions may call beside the built-in ones: what
/// NodeEnv::call answers.
const std::set<std::string> &importerFunctions();

/// The names of the translations written in C++ (Importer::handlers), which the table's
/// "handler" fields must name.
std::set<std::string> handlerNames();

/// The table of `lib`'s directory, loaded once per directory (libraries are keyed by where
/// they were loaded from, never by address: a library freed and another loaded at its
/// address must not find the first one's table).
llvm::Expected<const onnxrules::Table *> tableFor(const OpLibrary &lib);

/// Resize's interpolation along one axis of extent `in` to `out`, as a matrix [out, in]
/// (row-major), computed as ONNX's reference computes each output (1.12,
/// onnx/backend/test/case/node/resize.py): output coordinate x maps to x_ori by the
/// coordinate transformation; the mode's n neighbours of x_ori are the n integers nearest
/// it (ties to the lower one, among those within ceil(n / 2) of the axis), each clamped onto
/// the axis (edge padding), weighted by the mode's coefficients at ratio = x_ori -
/// floor(x_ori) (1 where x_ori is an integer). `scale` is the axis's scale factor. Under
/// tf_crop_and_resize an output whose x_ori lies outside [0, in - 1] takes the
/// extrapolation value: its row is zero.
std::vector<double> resizeMatrix(int64_t in, int64_t out, double scale, const ResizeSpec &s);

/// Edge or reflect padding along an axis of extent `in` by `b` before and `e` after (either
/// negative crops), as a selection matrix [in + b + e, in].
std::vector<double> padMatrix(int64_t in, int64_t b, int64_t e, const std::string &mode);

/// The attributes of window operators (convolutions, pooling) in the ranges they have a
/// meaning in: strides, dilations and kernel extents at least 1, pads at least 0, group at
/// least 1. Named by node and attribute.
llvm::Error checkAttributes(const onnx::GraphProto &graph);

/// ONNX's shape inference, strict: a node whose inputs do not fit its operator (ranks, an
/// attribute out of range) is an error naming it, not an unknown shape.
llvm::Error inferShapes(onnx::ModelProto &model);

/// inferShapes in a child process. ONNX's inference functions trust their inputs' ranks
/// (ConvTranspose reads dimensions of its weight that a malformed model does not have:
/// a segfault), and those ranks are known only as inference reaches each node, so no check
/// before it can guard them all. The child sends the inferred model back, or the error; a
/// child killed by a signal is an error naming the signal. Where no child can be made, the
/// inference runs here.
llvm::Error inferShapesIsolated(onnx::ModelProto &model);

/// `failure`, ONNX's inference failing on `model`, at the node where it fails: the first
/// node whose prefix of the graph fails (found by bisection, each prefix inferred in its
/// own process), named with its inputs' shapes from the prefix before it, and for an
/// operator that broadcasts, whether they broadcast. `failure` as it is where no prefix
/// fails.
llvm::Error locateInferenceFailure(const onnx::ModelProto &model, llvm::Error failure);

/// Bytes per element of an ONNX element type whose raw data the importer reads, or 0.
int64_t rawElementBytes(int32_t t);

/// Reads every initializer's external data into its raw bytes. A location must be a relative
/// path that stays inside `dir` (no `..`, no link out of it); offset and length must lie
/// inside the file.
llvm::Error loadExternalData(onnx::GraphProto &graph, const std::string &dir);

/// Every initializer holds as many values as its shape says (raw bytes, or typed fields).
llvm::Error checkInitializerSizes(const onnx::GraphProto &graph);

/// Sets `lhs` to the value of `expr` (an llvm::Expected), or returns its error from the
/// enclosing function (which returns an llvm::Error or an llvm::Expected).
#define TOFU_TRY(lhs, expr)                                                                        \
  do {                                                                                             \
    auto tofuTry_ = (expr);                                                                        \
    if (!tofuTry_)                                                                                 \
      return tofuTry_.takeError();                                                                 \
    lhs = std::move(*tofuTry_);                                                                    \
  } while (false)

/// Returns the error of `expr` (an llvm::Expected whose value is not needed) from the
/// enclosing function.
#define TOFU_CHECK(expr)                                                                           \
  do {                                                                                             \
    if (llvm::Error tofuError_ = (expr).takeError())                                               \
      return tofuError_;                                                                           \
  } while (false)

/// What the translation knows of each ONNX value, shared by the importer and its builders:
/// shapes (ONNX's inference, then each added node's), element types, and the constants the
/// importer evaluated.
struct ImportFacts {
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, int32_t> types; ///< ONNX element types, where known
  std::map<std::string, Const> consts;
};

/// The graph an import builds. Each tensor and node is checked as it is added and the
/// node's output shape inferred (and recorded in the facts: later translations read it);
/// every addition returns its error, and a builder that returned one is not used again.
/// The layout helpers compose library ops (reshapes, transposes, broadcasts, slices,
/// concatenations, axis maps) from the same additions.
class GraphBuilder {
public:
  GraphBuilder(const OpLibrary &lib, ImportFacts &facts, unsigned counter = 0)
      : counter(counter), lib_(lib), facts_(facts) {}

  Graph &graph() { return g_; }
  const std::vector<int64_t> &shapeOf(const std::string &tensor) { return facts_.shapes[tensor]; }

  std::string group;    ///< the ONNX node being translated: all its TDL nodes share its group
  std::string coalesce; ///< the coalesce key of the nodes being added (unrolled recurrences)
  unsigned counter;     ///< numbers the names of added tensors

  /// Node `name` of library op `op` on `in`, its output `output` (a fresh name when empty).
  llvm::Expected<std::string> node(const std::string &name, const std::string &op,
                                   std::vector<std::string> in,
                                   std::map<std::string, int64_t> attrs = {},
                                   std::map<std::string, int64_t> groups = {},
                                   const std::string &output = "");
  /// A constant tensor of the graph (an input with its values).
  llvm::Expected<std::string> constant(const std::string &name, std::vector<int64_t> shape,
                                       std::vector<double> values, bool isInt);
  /// A constant of the facts becomes a graph input of its shape and values (once).
  llvm::Error materialize(const std::string &name);
  /// A tensor of the graph, as declared.
  llvm::Error addTensor(TensorInfo t) { return g_.addTensor(std::move(t)); }

  /// Reshape `x` (of `from`) to `to` (same element count) with split/merge/squeeze ops.
  llvm::Expected<std::string> reshape(const std::string &name, std::string x,
                                      std::vector<int64_t> from, const std::vector<int64_t> &to,
                                      const std::string &out);
  /// `x` reshaped to `to` (itself when it has that shape).
  llvm::Expected<std::string> reshaped(const std::string &name, const std::string &x,
                                       const std::vector<int64_t> &to);
  /// `in` with its axes permuted (output axis d is input axis perm[d]), by the library's
  /// Transpose_<perm> ops of ranks 2 to 4 on merged axes, or block moves at higher ranks.
  llvm::Expected<std::string> transpose(const std::string &name, const std::string &in,
                                        const std::vector<int64_t> &perm, const std::string &out);
  /// `x` broadcast numpy-style to `to` (leading axes added, size-1 axes expanded).
  llvm::Expected<std::string> broadcastTo(const std::string &name, std::string x,
                                          const std::vector<int64_t> &to,
                                          const std::string &out = "");
  /// `x` mapped linearly along `axis` by the constant matrix `m` ([rows, extent of the
  /// axis], row-major): the library's AxisMap op.
  llvm::Expected<std::string> axisMap(const std::string &name, const std::string &x, int64_t axis,
                                      int64_t rows, std::vector<double> m, const std::string &out);
  /// `parts` concatenated along `axis` by a balanced tree of Concat ops.
  llvm::Expected<std::string> concatAll(const std::string &name, std::vector<std::string> parts,
                                        int64_t axis, const std::string &out);
  /// `count` entries of `x` from `start` along `axis`.
  llvm::Expected<std::string> sliceAxis(const std::string &name, const std::string &x, int64_t axis,
                                        int64_t start, int64_t count);

private:
  const OpLibrary &lib_;
  ImportFacts &facts_;
  Graph g_;
};

/// How the import runs one control-flow node (If, Loop, Scan): onnx_control.cc.
struct Expansion {
  int node = 0;                     ///< its index among the graph's nodes
  bool thenBranch = false;          ///< If: the branch it takes
  int64_t iterations = 0;           ///< Loop and Scan: how many times the body runs
  int64_t batch = 0;                ///< Scan of opset 8: its batch entries, each scanned alone
  std::vector<int64_t> inputAxes;   ///< Scan: each scan input's axis, as the node gives it
  std::vector<bool> sequenceInputs; ///< SequenceMap: which inputs are sequences
};

/// Whether `n` is an If, a Loop or a Scan of the default domain.
bool isControlFlow(const onnx::NodeProto &n);

/// Whether `n` builds or reads a sequence or an optional (onnx_sequences.cc).
bool isSequenceOp(const onnx::NodeProto &n);

/// Whether `name` is NAME[i], an element of a sequence input as `--input` gives it, or
/// NAME[], an empty sequence or an optional holding nothing (then `base` is NAME).
bool sequenceElementName(const std::string &name, std::string *base);

/// The model with each control-flow node `expansions` names replaced by the nodes it runs:
/// an If's branch, a Loop's or Scan's body once per iteration (names made unique, scan
/// inputs sliced by Gather, scan outputs stacked by Unsqueeze and Concat).
llvm::Error expandControlFlow(onnx::ModelProto &model, const std::vector<Expansion> &expansions);

class NodeEnv;

class Importer {
public:
  Importer(const OpLibrary &lib, const onnxrules::Table &table, const OnnxImportOptions &options)
      : lib_(lib), table_(table), options_(options) {}

  llvm::Expected<Graph> run(onnx::ModelProto &model);

  /// The control-flow nodes the last run() met and decided how to run: when there are any,
  /// run() returned an error, and the model is to be expanded (expandControlFlow) and
  /// imported again (importExpanded).
  const std::vector<Expansion> &expansions() const { return expansions_; }

  /// The translations written in C++, by the name the table's "handler" gives.
  using Handler = llvm::Error (Importer::*)(const onnx::NodeProto &, NodeEnv &);
  static const std::map<std::string, Handler> &handlers();

private:
  friend class NodeEnv;

  // run()'s phases, in order.
  /// A sequence input's elements given ahead (NAME[0], NAME[1], ...), by index.
  using GivenElements = std::map<std::string, std::map<int64_t, const OnnxGivenInput *>>;
  /// A given sequence's element names, NAME[0] to NAME[n - 1].
  using ElementNames = std::map<std::string, std::vector<std::string>>;
  /// The model against ONNX's schemas (the checker), what shape inference divides by and
  /// the translation needs (attributes, initializer sizes), and opsets this ONNX knows.
  llvm::Error checkModel(onnx::ModelProto &model);
  /// Inputs given ahead (OnnxImportOptions::givenInputs): a given shape replaces the
  /// declared one, whose static dimensions must agree; values are kept (given_). A sequence
  /// input's elements, given as NAME[0], NAME[1], ..., are returned by sequence.
  llvm::Expected<GivenElements> takeGivenInputs(onnx::GraphProto *graph,
                                                const std::set<std::string> &initialized);
  /// Each given sequence: elements 0 to n - 1, their values known like a tensor's. An
  /// optional holding a tensor is given as its element 0; one holding a sequence, as the
  /// sequence's elements.
  llvm::Expected<ElementNames> nameGivenElements(const onnx::GraphProto *graph,
                                                 const GivenElements &givenElements);
  /// Symbolic dimensions (a dynamic batch) become the batch size, or the sample's extent
  /// after the batch axis; a batch the user chose must mean something.
  llvm::Error fixSymbolicDimensions(onnx::GraphProto *graph,
                                    const std::set<std::string> &initialized);
  /// ONNX's shape inference, its shapes and element types recorded (facts_), and which
  /// values some node or output reads (consumed_).
  llvm::Error runShapeInference(onnx::ModelProto &model);
  /// Initializers: integer ones as constants, float ones as weights with initial values.
  /// Returns their names.
  llvm::Expected<std::set<std::string>> addInitializers(const onnx::GraphProto *graph);
  /// The graph inputs that are not initializers: data inputs and weights.
  llvm::Error addGraphInputs(const onnx::GraphProto *graph,
                             const std::set<std::string> &initializers,
                             const GivenElements &givenElements, const ElementNames &elementNames);
  /// Every node translated (or its control flow decided), so that one import lists every
  /// node it cannot translate.
  llvm::Error translateNodes(const onnx::GraphProto *graph);
  /// The graph's outputs, constants and frozen weights decided, and the graph checked.
  llvm::Expected<Graph> finishGraph(const onnx::GraphProto *graph,
                                    const std::set<std::string> &initializers);

  llvm::Error translate(const onnx::NodeProto &n);
  /// Constant indices checked against the axis they index (Gather's).
  llvm::Error checkConstantIndices(const onnx::NodeProto &n);
  /// The rules or the handler of `entry`, into the current graph.
  llvm::Error translateWith(const onnx::NodeProto &n, const onnxrules::Entry &entry);
  llvm::Error applyRule(const onnx::NodeProto &n, const onnxrules::Rule &rule, NodeEnv &env);
  llvm::Error runSteps(const onnx::NodeProto &n, const std::vector<onnxrules::Step> &steps,
                       NodeEnv &env, int defaultOutput, std::string prev, const std::string &suffix,
                       std::string *result);
  llvm::Expected<std::string> resolve(const onnx::NodeProto &n, const onnxrules::InputRef &r,
                                      NodeEnv &env, const std::string &prev,
                                      const std::vector<std::string> &results);
  /// The one evaluator of constants: when all inputs of `n` are constants, the library ops
  /// its entry translates it to are built in a scratch graph and run by the interpreter, and
  /// the outputs take ONNX's element types (integers truncate). False when it cannot be (a
  /// large result, an op the interpreter cannot run): the node is then translated into the
  /// graph.
  bool foldConstant(const onnx::NodeProto &n, const onnxrules::Entry &entry);

  llvm::Error reshapeOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error sliceOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error concatOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error transposeOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error expandOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error padOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error tileOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error resizeOp(const onnx::NodeProto &n, NodeEnv &env);
  /// ScatterND of any index depth: the data's indexed axes flattened into one, each index
  /// tuple made a flat index (flatIndices), then the depth-1 scatter of the reduction.
  llvm::Error scatterOp(const onnx::NodeProto &n, NodeEnv &env);
  /// GatherND of any index depth and batch_dims: the batch and indexed axes flattened into
  /// one, each index tuple made a flat index into its batch's block, then GatherND1.
  llvm::Error gatherNDOp(const onnx::NodeProto &n, NodeEnv &env);
  /// The index tuples `idx` ([..., depth]) of ScatterND and GatherND as flat indices
  /// [tuples, 1] into axes of extents `axes`, row-major, behind `batches` equal batches of
  /// tuples (batch b's offset by b blocks of the axes). Constant tuples are checked against
  /// the axes; any others are wrapped in the graph (FlatIndex counts negative components
  /// from the axis's end).
  llvm::Expected<std::string> flatIndices(const onnx::NodeProto &n, const std::string &idx,
                                          const std::vector<int64_t> &axes, int64_t batches);
  llvm::Error recurrentOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error einsumOp(const onnx::NodeProto &n, NodeEnv &env);
  /// NonZero, Compress, Unique, NonMaxSuppression and TfIdfVectorizer evaluated by the
  /// importer where every input's values are known (valueOf): their outputs become constants. False
  /// when they are not known (or for another op), an error when the values contradict the model
  /// (onnx_datashape.cc).
  llvm::Expected<bool> evaluateDataShaped(const onnx::NodeProto &n);
  /// How control-flow node `n` (the graph's node `index`) runs: an If's branch from its
  /// condition, a Loop's iterations from its trip count and condition (valueOf), a Scan's
  /// from its scan inputs' shapes. An error saying why where they are not known.
  llvm::Expected<Expansion> controlFlowDecision(const onnx::NodeProto &n, int index);
  /// The sequence and optional operators, on the lists and values the importer holds
  /// (onnx_sequences.cc).
  llvm::Error sequenceOp(const onnx::NodeProto &n);
  /// `to` stands for the value `from` (a constant, a sequence, an optional, or a tensor of
  /// the graph through an Identity node).
  llvm::Error aliasValue(const onnx::NodeProto &n, const std::string &from, const std::string &to);
  /// Input `k` of `n` as a position in a sequence of `length` (`dflt` when absent; negative
  /// counts from the end; `inclusive`: `length` itself is allowed, an insertion at the end).
  llvm::Expected<int64_t> position(const onnx::NodeProto &n, int k, int64_t length, int64_t dflt,
                                   bool inclusive);
  /// Adagrad, Momentum and Adam of the training-preview domain (onnx_optimizers.cc).
  llvm::Error optimizerOp(const onnx::NodeProto &n, NodeEnv &env);

  const std::vector<int64_t> &shapeOf(const std::string &tensor) { return facts_.shapes[tensor]; }
  /// The value of `n` when the importer holds it without computing: a Constant's value, the
  /// Shape or Size of a tensor of static shape, ConstantOfShape of a known shape (a constant
  /// or an input given ahead), a reduction of an empty input (emptyReduction). False for any
  /// other node.
  llvm::Expected<bool> readConstant(const onnx::NodeProto &n);
  /// A reduction of an empty input, or a MatMul over a zero-length axis, whose result is not
  /// empty: ONNX's value over an empty set (0 for sums and norms, 1 for ReduceProd, -inf for
  /// ReduceMax and the log-sums, +inf for ReduceMin, NaN for ReduceMean) fills the result,
  /// held as a constant. False for any other node.
  llvm::Expected<bool> emptyReduction(const onnx::NodeProto &n, const std::vector<std::string> &in);
  /// Whether every output of `n` is known (ONNX's inference) to hold no element.
  bool producesOnlyEmpty(const onnx::NodeProto &n) {
    bool any = false;
    for (const std::string &o : n.output()) {
      if (o.empty())
        continue;
      auto s = facts_.shapes.find(o);
      if (s == facts_.shapes.end() || elementCount(s->second) != 0)
        return false;
      any = true;
    }
    return any;
  }
  /// Whether `name` holds an empty value the importer keeps whole (a zero extent).
  bool isEmpty(const std::string &name) const {
    const Const *c = known(name);
    return c && !c->shape.empty() && c->size() == 0;
  }
  /// Input `k` of `n` as a tensor of the graph, or an error.
  llvm::Expected<std::string> tensorInput(const onnx::NodeProto &n, int k);
  /// The values of a constant input, or an error naming what is needed.
  llvm::Expected<std::vector<int64_t>> ints(const std::string &tensor, const std::string &what);
  /// The axes of Unsqueeze, Squeeze and reductions: the `axes` attribute (opsets before
  /// 13/18) or the constant second input.
  llvm::Expected<std::vector<int64_t>> axesOf(const onnx::NodeProto &n) {
    if (n.input_size() > 1 && !n.input(1).empty())
      return ints(n.input(1), "axes");
    return intsAttr(n, "axes", {});
  }
  /// The name of `n` in messages and in the graph.
  std::string nameOf(const onnx::NodeProto &n) {
    auto it = names_.find(&n);
    if (it != names_.end())
      return it->second;
    std::string name =
        n.name().empty() ? fmt::format("{}_{}", n.op_type(), b_->counter++) : n.name();
    names_[&n] = name;
    return name;
  }
  llvm::Error where(const onnx::NodeProto &n, const std::string &msg) {
    return stringError(fmt::format("node '{}' (ONNX {}): {}", nameOf(n), n.op_type(), msg));
  }

  /// The values of `name`: a constant the importer evaluated, else a graph input given
  /// ahead with its values (never folded into the graph: only ops that need a constant
  /// read it). Null when neither.
  const Const *known(const std::string &name) const {
    if (auto it = facts_.consts.find(name); it != facts_.consts.end())
      return &it->second;
    if (auto it = given_.find(name); it != given_.end())
      return &it->second;
    if (auto it = derived_.find(name); it != derived_.end())
      return &it->second;
    return nullptr;
  }
  /// The values of `name` as known() has them, else computed from inputs given ahead where
  /// an op needs them as a constant (a Range's bounds from a window's size): its producer is
  /// evaluated as foldConstant evaluates a node (its inputs' values derived the same way,
  /// every result at most kMaxDerived elements) and the values kept in derived_, which only
  /// ops that need a constant read: the producer itself stays a computation of the graph.
  /// Null when they cannot be.
  const Const *valueOf(const std::string &name, int depth = 0);
  static constexpr int64_t kMaxDerived = 4096;

  std::map<std::string, Const> given_;   ///< inputs given ahead with their values
  std::map<std::string, Const> derived_; ///< values computed from them (valueOf)
  std::set<std::string> underivable_;    ///< tensors valueOf could not compute
  std::map<std::string, const onnx::NodeProto *> producers_; ///< by ONNX output
  const OpLibrary &lib_;
  const onnxrules::Table &table_;
  OnnxImportOptions options_;
  int opset_ = 17;
  ImportFacts facts_;
  GraphBuilder main_{lib_, facts_}; ///< the model's graph
  GraphBuilder *b_ = &main_;        ///< where translations add: the graph, or a fold's scratch
  std::set<std::string> consumed_;  ///< tensors some node or the graph's outputs read
  std::string producer_;            ///< the model's producer_name ("pytorch": PyTorch's export)
  std::map<const onnx::NodeProto *, std::string> names_;
  std::vector<Expansion> expansions_;
  /// Sequences the importer holds, as the names of their elements.
  std::map<std::string, std::vector<std::string>> sequences_;
  /// Optionals the importer holds: the value's name, or "" for none.
  std::map<std::string, std::string> optionals_;
  /// Values given for elements of sequence inputs (NAME[i]).
  std::map<std::string, Const> elementValues_;
  /// Value `value` as the graph output `out` (a sequence's element, an optional's value):
  /// a tensor through an Identity node, a constant materialised, an empty one among the
  /// empty outputs.
  llvm::Error outputValue(const std::string &value, const std::string &out);
};

/// Imports `model`, its control flow expanded: each pass imports the model until the
/// control-flow nodes it can decide, which are then expanded (nested ones come to the top
/// level) and the model imported again; a model without control flow is imported once.
llvm::Expected<Graph> importExpanded(onnx::ModelProto &model, const OpLibrary &lib,
                                     const onnxrules::Table &table,
                                     const OnnxImportOptions &options);

/// Names and functions of the table's expressions while node `n` is translated: its
/// attributes (with the schema's defaults), the table's `let` variables, and the importer's
/// functions (importerFunctions: shapes, ranks, constants, convolution padding).
class NodeEnv : public onnxrules::Env {
public:
  using Value = onnxrules::Value;
  NodeEnv(Importer &im, const onnx::NodeProto &n) : im_(im), n_(n) {
    schema_ = onnx::OpSchemaRegistry::Schema(n.op_type(), im.opset_, "");
  }
  std::map<std::string, Value> vars;

  const std::string &input(int k) const {
    static const std::string none;
    return k >= 0 && k < n_.input_size() ? n_.input(k) : none;
  }
  bool present(int k) const { return !input(k).empty(); }
  /// The number of inputs, absent trailing ones not counted.
  int inputs() const {
    int c = n_.input_size();
    while (c > 0 && n_.input(c - 1).empty())
      --c;
    return c;
  }

  Value name(const std::string &id) override;
  std::optional<llvm::Expected<Value>> call(const std::string &fn,
                                            const std::vector<Value> &a) override;
  /// The rank of input k (undefined when absent or of unknown shape).
  Value rank(int k);
  /// The shape of tensor `t` as a list (undefined when unknown).
  Value shape(const std::string &t);
  /// Begin (`end` false) or end padding of spatial axis `d` of a convolution or pooling:
  /// auto_pad resolved, and the end padding grown to what the inferred output needs (ceil
  /// mode).
  llvm::Expected<Value> pad(int d, bool end);

private:
  Importer &im_;
  const onnx::NodeProto &n_;
  const onnx::OpSchema *schema_ = nullptr;
};

} // namespace onnximport
} // namespace tofu

#endif // TOFU_GRAPH_ONNX_IMPORT_INTERNAL_H
