// The precision policy: which tensors of a forward graph are bfloat16 under torch.autocast's
// rules, and the casts that make them so (graph.h: applyPrecision).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/graph.h"
#include "graph/precision.h"

namespace tofu {

namespace {

// CUDA autocast's lists (PyTorch's "autocast op reference"), by the library op that computes
// each: the products and convolutions (mm, bmm, linear, conv*, conv_transpose*, the RNN
// cells, prelu) narrow their operands; pow, exp, log, reciprocal, the inverse and hyperbolic
// functions autocast lists, softplus, softmax and log-softmax, layer and group norms,
// normalize, sums, products, norms, cumulative sums and every loss run in float32.
const std::set<std::string> kLower = {
    "MatMul",        "MatMulBcastB",  "GemmNN",          "GemmNT",          "GemmTN",
    "GemmTT",        "Conv1d",        "Conv2d",          "Conv3d",          "Conv1dGrouped",
    "Conv2dGrouped", "Conv3dGrouped", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "lstm_gates",    "rnn_cell",      "gru_zr",          "gru_candidate",   "PRelu",
};
const std::set<std::string> kFloat32 = {
    // elementwise
    "Pow", "PowBcast", "Exp", "Log", "Reciprocal", "Acos", "Asin", "Cosh", "Sinh", "Tan",
    "Softplus",
    // softmax and the normalisations whose statistics autocast keeps in float32 (a batch
    // norm's come from bn_mean and bn_invstd; the op itself follows its data)
    "Softmax", "LogSoftmax", "LayerNormalization", "InstanceNormalization",
    "MeanVarianceNormalization", "LpNormalization", "bn_mean", "bn_invstd", "ln_mean", "ln_invstd",
    "in_mean", "in_invstd",
    // sums, products, norms
    "ReduceSum", "ReduceSumKeep", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
    "ReduceLogSum", "ReduceLogSumExp", "CumSum", "CumSumReverse", "CumSumExcl", "CumSumReverseExcl",
    // losses
    "softmax_cross_entropy", "softmax_cross_entropy_seq", "mse", "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss", "NllLossNone", "NllLossSum", "NllLossMean"};
// Ops whose result takes the type of their data (input 0) whatever their parameters' type,
// as PyTorch's batch norm takes float32 parameters and statistics beside bfloat16 data.
const std::set<std::string> kFollowData = {"BatchNormalization", "batch_norm_train"};
// Ops that add a bias to a product's result (autocast's linear and conv take their bias).
const std::set<std::string> kBiasAdd = {"Add", "AddBcast", "ConvBias"};
// Ops that only move a tensor's elements or broadcast them: the importer lifts a bias of
// rank 1 to the product's rank through them (Unsqueeze, ExpandAxis) before the Add; a
// Slice takes one projection's part of a packed bias (nn.MultiheadAttention's in_proj_bias,
// split into the query's and the key's and value's).
const std::set<std::string> kBroadcast = {"Unsqueeze", "ExpandAxis",   "ExpandLeading", "Identity",
                                          "Squeeze",   "ReshapeSplit", "ReshapeMerge",  "Slice"};

bool isFloat32(ElementType d) { return d == ElementType::Float32; }
bool isNarrowable(ElementType d) { return d == ElementType::Float32 || d == ElementType::BFloat16; }

/// Whether `n` is a product or convolution that runs on bfloat16 operands: a Lower op none
/// of whose inputs is float64 (autocast leaves float64 ops alone).
bool lowersToBf16(const Graph &g, const Node &n) {
  if (castClass(n.op) != CastClass::Lower)
    return false;
  for (const std::string &in : n.inputs)
    if (g.tensor(in)->dtype == ElementType::Float64)
      return false;
  return true;
}

} // namespace

const char *precisionName(Precision p) {
  switch (p) {
  case Precision::FP32:
    return "fp32";
  case Precision::BF16:
    return "bf16";
  }
  return "?";
}

std::optional<Precision> precisionNamed(const std::string &name) {
  for (Precision p : {Precision::FP32, Precision::BF16})
    if (name == precisionName(p))
      return p;
  return std::nullopt;
}

CastClass castClass(const std::string &op) {
  if (kLower.count(op))
    return CastClass::Lower;
  if (kFloat32.count(op))
    return CastClass::Float32;
  return CastClass::Promote;
}

namespace {

/// Whether `t` is a constant of the graph holding one value within 1e-6 of `value`.
bool isScalar(const Graph &g, const std::string &t, double value) {
  auto it = g.constants.find(t);
  return !g.producer(t) && it != g.constants.end() && it->second.size() == 1 &&
         std::abs(it->second[0] - value) <= 1e-6 * std::abs(value);
}

/// nn.GELU as the ONNX export (opset 17) spells it out, joined into one Gelu op: d = x /
/// sqrt(2) (or x * 1/sqrt(2)), e = erf(d), s = e + 1, a = x * s, y = a * 0.5, each of d, e,
/// s and a read by the next alone and no output. Returns how many it joined. Autocast runs
/// nn.GELU as one op, rounding once; the five ops would each round their bfloat16 result.
unsigned joinExportedGelu(Graph &g) {
  std::map<std::string, unsigned> readers;
  for (const Node &n : g.nodes())
    for (const std::string &in : n.inputs)
      ++readers[in];
  for (const std::string &o : g.outputs)
    readers[o] += 2; // an output is never an intermediate
  // The node computing `t` if it is `op` (one of `ops`) and `t` is read once.
  auto sole = [&](const std::string &t, std::initializer_list<const char *> ops) -> const Node * {
    const Node *p = g.producer(t);
    if (!p || readers[t] != 1)
      return nullptr;
    for (const char *op : ops)
      if (p->op == op)
        return p;
    return nullptr;
  };
  // `n`'s other input than a scalar constant of `value`, or "".
  auto besides = [&](const Node &n, double value) -> std::string {
    if (n.inputs.size() != 2)
      return "";
    for (unsigned k = 0; k < 2; ++k)
      if (isScalar(g, n.inputs[k], value))
        return n.inputs[1 - k];
    return "";
  };
  std::set<std::string> gone;                // nodes joined away
  std::map<std::string, std::string> joined; // the final Mul node -> x
  for (const Node &y : g.nodes()) {
    if (y.op != "MulBcast" && y.op != "Mul")
      continue;
    const std::string a = besides(y, 0.5);
    const Node *ma = a.empty() ? nullptr : sole(a, {"Mul"});
    if (!ma || ma->inputs.size() != 2)
      continue;
    for (unsigned k = 0; k < 2; ++k) {
      const std::string x = ma->inputs[k], s = ma->inputs[1 - k];
      const Node *ns = sole(s, {"AddBcast", "Add"});
      const std::string e = ns ? besides(*ns, 1.0) : "";
      const Node *ne = e.empty() ? nullptr : sole(e, {"Erf"});
      const Node *nd = ne ? sole(ne->inputs[0], {"DivBcast", "Div", "MulBcast", "Mul"}) : nullptr;
      if (!nd || nd->inputs.size() != 2 || nd->inputs[0] != x ||
          !isScalar(g, nd->inputs[1],
                    nd->op.rfind("Div", 0) == 0 ? std::sqrt(2.0) : 1 / std::sqrt(2.0)))
        continue;
      gone.insert({nd->name, ne->name, ns->name, ma->name});
      joined[y.name] = x;
      break;
    }
  }
  if (joined.empty())
    return 0;
  std::set<std::string> dropped; // the intermediates
  for (const Node &n : g.nodes())
    if (gone.count(n.name))
      dropped.insert(n.output);
  Graph out = g.withoutNodes();
  for (const TensorInfo &t : g.tensors())
    if (!dropped.count(t.name))
      if (llvm::Error e = out.addTensor(t)) {
        llvm::consumeError(std::move(e));
        return 0;
      }
  for (const Node &n : g.nodes()) {
    if (gone.count(n.name))
      continue;
    Node m = n;
    if (auto it = joined.find(n.name); it != joined.end()) {
      m.op = "Gelu";
      m.inputs = {it->second};
      m.attrs.clear();
      m.groups.clear();
    }
    if (llvm::Error e = out.addNode(std::move(m))) {
      llvm::consumeError(std::move(e));
      return 0;
    }
  }
  g = std::move(out);
  return static_cast<unsigned>(joined.size());
}

/// Float32 ops whose float32 result only products read (through their casts) and that is
/// no output of the graph: their result is stored in bfloat16 instead, rounded once as it
/// is written. Autocast would keep the float32 result and a bfloat16 copy of it, and the
/// backward pass reads both: for attention that is 6 bytes per score where float32 alone
/// takes 4 (a softmax's probabilities, which its gradient reads, and their cast, which the
/// product with V reads). Megatron's fused softmax and Apex's fused layer norm store them
/// so. A deviation from autocast, written down in docs/tofu-plan.md.
std::set<std::string> resultsStoredNarrow(const Graph &g) {
  std::set<std::string> storedNarrow;
  std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  std::map<std::string, bool> onlyProducts; // tensor -> every reader a product
  for (const Node &n : g.nodes()) {
    const bool product = lowersToBf16(g, n);
    for (const std::string &in : n.inputs) {
      auto [it, fresh] = onlyProducts.emplace(in, product);
      if (!fresh)
        it->second = it->second && product;
    }
  }
  for (const Node &n : g.nodes())
    if (castClass(n.op) == CastClass::Float32 && isFloat32(g.tensor(n.output)->dtype) &&
        !outputs.count(n.output) && onlyProducts.count(n.output) && onlyProducts[n.output])
      storedNarrow.insert(n.output);
  return storedNarrow;
}

/// Where a product's bias is cast with it, and the products fused with their bias add.
struct BiasFusions {
  std::map<std::string, unsigned> directBias; ///< add node -> its weight input, cast
  std::set<std::string> biasChainStart;       ///< nodes whose weight input is cast
  /// A product whose result only its bias add reads keeps that result float32, and the add
  /// gives bfloat16: the sum is rounded once, as autocast's linear and conv round theirs
  /// (rounding the product first, then the sum, differed in about a third of the elements).
  std::set<std::string> fusedProduct, fusedAdd;
};

/// The bias a product's result is added to (Add, AddBcast, ConvBias of a product's result
/// and a float32 weight of rank 1 at most) is cast with it, as autocast's linear and conv
/// take their bias: where the add reads the weight itself, there (the input it casts, by
/// add); where the weight reaches the add through a chain of broadcasts (an ONNX Linear on
/// a rank-3 input: MatMul, then Add of the bias unsqueezed and expanded), at the chain's
/// start, so that the chain and the add run in bfloat16 (else the add would promote the
/// product's result to float32).
BiasFusions biasFusions(const Graph &g, PrecisionSummary &summary) {
  BiasFusions f;
  std::map<std::string, unsigned> readers;
  for (const Node &n : g.nodes())
    for (const std::string &in : n.inputs)
      ++readers[in];
  auto product = [&](const std::string &t) {
    const Node *p = g.producer(t);
    return p && lowersToBf16(g, *p);
  };
  // `t` walked back through single-reader broadcasts: the tensor it broadcasts, and the
  // first node of the chain (null where `t` is no broadcast).
  auto broadcastSource = [&](std::string t) {
    const Node *start = nullptr;
    while (const Node *q = g.producer(t)) {
      if (!kBroadcast.count(q->op) || q->inputs.size() != 1 || readers[t] != 1)
        break;
      start = q;
      t = q->inputs[0];
    }
    return std::make_pair(t, start);
  };
  auto inner = [&](const std::string &t) {
    return readers[t] == 1 && std::find(g.outputs.begin(), g.outputs.end(), t) == g.outputs.end();
  };
  // torch.baddbmm(M, a, b) and torch.addmm, as the ONNX export spells them:
  // Add(Mul(MatMul(a, b), alpha), beta * M), alpha = 1 (beta * M folded into a constant
  // where M is one, then broadcast). Autocast runs them as one op, M cast to bfloat16 and
  // the sum rounded once (nn.MultiheadAttention's scores with a float attn_mask). Returns
  // the product's result where `t` is its scaling by 1.
  auto scaledProduct = [&](const std::string &t) -> std::string {
    const Node *m = g.producer(t);
    if (!m || (m->op != "Mul" && m->op != "MulBcast") || m->inputs.size() != 2 || !inner(t))
      return "";
    for (unsigned j = 0; j < 2; ++j)
      if (product(m->inputs[j]) && inner(m->inputs[j]) && isScalar(g, m->inputs[1 - j], 1.0))
        return m->inputs[j];
    return "";
  };
  for (const Node &n : g.nodes()) {
    if (!kBiasAdd.count(n.op) || n.inputs.size() != 2)
      continue;
    bool joined = false;
    for (unsigned k = 0; k < 2 && n.op != "ConvBias"; ++k) {
      const std::string p = scaledProduct(n.inputs[k]);
      if (p.empty())
        continue;
      const auto [t, start] = broadcastSource(n.inputs[1 - k]);
      if (!isNarrowable(g.tensor(t)->dtype))
        continue;
      if (isFloat32(g.tensor(t)->dtype)) {
        if (start)
          f.biasChainStart.insert(start->name);
        else
          f.directBias[n.name] = 1 - k;
      }
      f.fusedProduct.insert(p);
      f.fusedAdd.insert(n.name);
      ++summary.addmms;
      joined = true;
      break;
    }
    if (joined)
      continue;
    for (unsigned k = 0; k < 2; ++k) {
      if (!product(n.inputs[k]))
        continue;
      // Walk the other input back through single-reader broadcasts to a weight.
      const auto [t, start] = broadcastSource(n.inputs[1 - k]);
      const TensorInfo *w = g.tensor(t);
      const bool bias = !g.producer(t) && w->role == TensorRole::Weight && isFloat32(w->dtype) &&
                        w->shape.size() <= 1;
      if (bias && start)
        f.biasChainStart.insert(start->name);
      else if (bias)
        f.directBias[n.name] = 1 - k;
      if (bias && readers[n.inputs[k]] == 1 &&
          std::find(g.outputs.begin(), g.outputs.end(), n.inputs[k]) == g.outputs.end()) {
        f.fusedProduct.insert(n.inputs[k]);
        f.fusedAdd.insert(n.name);
      }
      break;
    }
  }
  return f;
}

/// The graph being made from `g`: its tensors, the nodes made so far (a node's casts before
/// it) and the bfloat16 casts of float32 tensors, each made once.
struct Casts {
  const Graph &g;
  Graph &out;
  PrecisionSummary &summary;
  std::set<std::string> used;
  std::map<std::string, std::string> narrowed; ///< float32 tensor -> its bfloat16 cast
  std::vector<Node> nodes;

  ElementType &dtype(const std::string &tensor) { return out.tensor(tensor)->dtype; }
  /// The bfloat16 cast of `tensor` for `reader` (reading it as input `k`).
  std::string narrow(const std::string &tensor, const Node &reader, unsigned k);
};

std::string Casts::narrow(const std::string &tensor, const Node &reader, unsigned k) {
  if (auto it = narrowed.find(tensor); it != narrowed.end())
    return it->second;
  const TensorInfo src = *out.tensor(tensor);
  const Node *producer = g.producer(tensor);
  Node c;
  c.name = freshName(tensor + "_bf16_cast", used);
  c.op = "CastBfloat16";
  // A weight's cast coarsens with the weight (and so with its gradient and update); an
  // activation's with the op that made it, or the op reading it.
  c.group = src.role == TensorRole::Weight || src.role == TensorRole::Input || !producer
                ? (src.group.empty() ? src.name : src.group)
                : (producer->group.empty() ? producer->name : producer->group);
  if (producer && !reader.coalesce.empty() && src.role == TensorRole::Activation)
    c.coalesce = fmt::format("{}/bf16_cast_{}", reader.coalesce, k);
  c.inputs = {tensor};
  c.output = freshName(tensor + "_bf16", used);
  TensorInfo t;
  t.name = c.output;
  t.group = c.group;
  t.shape = src.shape;
  t.shapeKnown = src.shapeKnown;
  t.dtype = ElementType::BFloat16;
  t.role = TensorRole::Activation;
  if (llvm::Error e = out.addTensor(std::move(t))) {
    llvm::consumeError(std::move(e));
    assert(false && "a fresh name is taken");
  }
  nodes.push_back(c);
  ++summary.casts;
  narrowed[tensor] = c.output;
  return c.output;
}

/// Node `n` under the policy: its inputs cast as its class says (in `casts`), and the type
/// of its result.
ElementType castNode(Node &n, Casts &casts, const BiasFusions &bias,
                     const std::set<std::string> &storedNarrow) {
  ElementType result = casts.dtype(n.output);
  CastClass cls = castClass(n.op);
  if (cls == CastClass::Lower && !lowersToBf16(casts.g, n)) // autocast leaves float64 ops alone
    cls = CastClass::Promote;
  switch (cls) {
  case CastClass::Lower:
    for (unsigned k = 0; k < n.inputs.size(); ++k)
      if (isFloat32(casts.dtype(n.inputs[k])))
        n.inputs[k] = casts.narrow(n.inputs[k], n, k);
    if (isNarrowable(result))
      result = bias.fusedProduct.count(n.output) ? ElementType::Float32 : ElementType::BFloat16;
    ++casts.summary.lowered;
    break;
  case CastClass::Float32: {
    bool reads16 = false;
    for (const std::string &in : n.inputs)
      reads16 |= casts.dtype(in) == ElementType::BFloat16;
    casts.summary.float32 += reads16;
    // The kernel widens its bfloat16 reads exactly, and computes in float32; the result
    // stays float32 but where only products read it.
    if (storedNarrow.count(n.output)) {
      result = ElementType::BFloat16;
      ++casts.summary.storedNarrow;
    }
    break;
  }
  case CastClass::Promote: {
    if (!isNarrowable(result))
      break;
    // A product's bias: cast with the product (above).
    if (bias.biasChainStart.count(n.name) && isFloat32(casts.dtype(n.inputs[0])))
      n.inputs[0] = casts.narrow(n.inputs[0], n, 0);
    if (auto b = bias.directBias.find(n.name); b != bias.directBias.end())
      n.inputs[b->second] = casts.narrow(n.inputs[b->second], n, b->second);
    // The widest float type of the inputs that take part in promotion.
    std::vector<const TensorInfo *> floats;
    for (unsigned k = 0; k < n.inputs.size(); ++k) {
      const TensorInfo *t = casts.out.tensor(n.inputs[k]);
      if (isFloatType(t->dtype) && (!kFollowData.count(n.op) || k == 0))
        floats.push_back(t);
    }
    bool dimensioned = false;
    for (const TensorInfo *t : floats)
      dimensioned |= !t->shape.empty();
    bool any16 = false, wider = false;
    for (const TensorInfo *t : floats) {
      if (dimensioned && t->shape.empty())
        continue; // a rank-0 tensor does not widen a tensor of higher rank
      (t->dtype == ElementType::BFloat16 ? any16 : wider) = true;
    }
    if (any16 && !wider)
      result = ElementType::BFloat16;
    break;
  }
  }
  if (bias.fusedAdd.count(n.name) && isNarrowable(result)) {
    result = ElementType::BFloat16; // the product's float32 result and the bias, rounded once
    ++casts.summary.fusedBias;
  }
  return result;
}

} // namespace

llvm::Expected<PrecisionSummary> applyPrecision(Graph &g, const OpLibrary &lib, Precision p) {
  PrecisionSummary summary;
  if (p == Precision::FP32)
    return summary;
  if (g.precision != Precision::FP32)
    return stringError(
        fmt::format("the graph already has precision {}", precisionName(g.precision)));
  summary.gelus = joinExportedGelu(g);
  auto order = g.topologicalOrder();
  if (!order)
    return order.takeError();

  Graph out = g.withoutNodes();
  out.precision = p;
  Casts casts{g, out, summary, {}, {}, {}};
  for (const TensorInfo &t : g.tensors()) {
    casts.used.insert(t.name);
    if (llvm::Error e = out.addTensor(t))
      return std::move(e);
  }
  for (const Node &n : g.nodes())
    casts.used.insert(n.name);
  const std::set<std::string> storedNarrow = resultsStoredNarrow(g);
  const BiasFusions bias = biasFusions(g, summary);
  for (unsigned i : *order) {
    Node n = g.nodes()[i];
    if (!lib.find(n.op))
      return stringError(fmt::format("node '{}': unknown op '{}'", n.name, n.op));
    // Set once the casts are made (adding a tensor moves the others).
    const ElementType result = castNode(n, casts, bias, storedNarrow);
    casts.dtype(n.output) = result;
    casts.nodes.push_back(std::move(n));
  }
  for (Node &n : casts.nodes)
    if (llvm::Error e = out.addNode(std::move(n)))
      return std::move(e);
  if (llvm::Error e = checkGraph(out, lib))
    return stringError("the graph in bf16: " + llvm::toString(std::move(e)));
  g = std::move(out);
  return summary;
}

} // namespace tofu
