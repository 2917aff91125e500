// Training graphs: backward nodes from grad clauses, gradient sums, optimiser updates.
#include <algorithm>
#include <map>
#include <set>

#include "analysis/instantiate.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/precision.h"
#include "graph/training.h"

namespace tofu {
namespace {

TensorInfo scalarInput(const std::string &name) {
  TensorInfo t;
  t.name = name;
  t.group = name;
  t.shapeKnown = true;
  t.role = TensorRole::Input;
  return t;
}

/// `op`'s grad clause for its input `i` (the last one written), or null.
const ir::Grad *gradClause(const ir::OpDef &op, unsigned i) {
  const ir::Grad *grad = nullptr;
  for (const ir::Grad &g : op.grads)
    if (g.input == i)
      grad = &g;
  return grad;
}

class TrainingBuilder {
public:
  TrainingBuilder(const Graph &fwd, const OpLibrary &lib) : fwd_(fwd), lib_(lib) {}

  llvm::Expected<Graph> run(const std::string &loss, Optimizer optimizer, bool weightDecay);

private:
  llvm::Error backward(const Node &n);
  llvm::Expected<std::string> gradientOf(const std::string &tensor);
  /// Adds the node summing two gradient contributions to `tensor`; returns the sum.
  llvm::Expected<std::string> addSum(const std::string &tensor, const std::string &a,
                                     const std::string &b);
  llvm::Error add(Node n) { return g_.addNode(std::move(n)); }
  /// A gradient's element type: bfloat16 for a bfloat16 tensor (as autograd's under
  /// autocast: applyPrecision), and for a product's float32 result in a bf16 graph (kept
  /// float32 only until its bias is added: its gradient is the bias add's, bfloat16, so
  /// the backward products keep bfloat16 operands, as autograd's do); else float32.
  ElementType gradientType(const std::string &tensor) const {
    const TensorInfo *t = g_.tensor(tensor);
    if (t->dtype == ElementType::BFloat16)
      return ElementType::BFloat16;
    if (g_.precision == Precision::BF16 && t->dtype == ElementType::Float32)
      if (const Node *p = fwd_.producer(tensor); p && castClass(p->op) == CastClass::Lower)
        return ElementType::BFloat16;
    return ElementType::Float32;
  }
  std::string fresh(const std::string &base) { return freshName(base, used_); }

  const Graph &fwd_;
  const OpLibrary &lib_;
  Graph g_;
  std::set<std::string> used_;
  std::set<std::string> needsGrad_;
  /// Per weight with no differentiable path to the loss: the op a gradient cannot pass.
  std::map<std::string, std::string> blockedBy_;
  std::map<std::string, std::vector<std::string>> contributions_;
  std::map<std::string, std::string> gradient_; // tensor -> its (summed) gradient
};

llvm::Expected<std::string> TrainingBuilder::gradientOf(const std::string &tensor) {
  if (auto it = gradient_.find(tensor); it != gradient_.end())
    return it->second;
  auto it = contributions_.find(tensor);
  if (it == contributions_.end() || it->second.empty())
    return stringError(fmt::format("tensor '{}' gets no gradient", tensor));
  // backward() sums the contributions as they come: one is left.
  const std::string sum = it->second.front();
  gradient_[tensor] = sum;
  return sum;
}

llvm::Expected<std::string> TrainingBuilder::addSum(const std::string &tensor, const std::string &a,
                                                    const std::string &b) {
  Node n;
  n.name = fresh("sum_d_" + tensor);
  n.group = g_.tensor(tensor)->group; // the sum belongs to the tensor's group
  n.op = "Add";
  n.inputs = {a, b};
  n.output = fresh("d_" + tensor + "_sum");
  TensorInfo t;
  t.name = n.output;
  t.group = n.group;
  t.role = TensorRole::Gradient;
  t.shape = g_.tensor(tensor)->shape;
  t.shapeKnown = true;
  t.dtype = gradientType(tensor);
  if (llvm::Error e = g_.addTensor(std::move(t)))
    return llvm::Expected<std::string>(std::move(e));
  std::string out = n.output;
  if (llvm::Error e = add(std::move(n)))
    return llvm::Expected<std::string>(std::move(e));
  return out;
}

llvm::Error TrainingBuilder::backward(const Node &n) {
  if (!needsGrad_.count(n.output) || !contributions_.count(n.output))
    return llvm::Error::success();
  const ir::OpDef *op = lib_.find(n.op);
  auto dy = gradientOf(n.output);
  if (!dy)
    return dy.takeError();
  // The forward node's instantiation: its attributes and the extents its grad clauses use.
  Instantiation inst;
  inst.attrs = n.attrs;
  inst.groups = n.groups;
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string &in : n.inputs) {
    inst.inputRanks.push_back(static_cast<unsigned>(fwd_.tensor(in)->shape.size()));
    shapes.push_back(fwd_.tensor(in)->shape);
  }
  auto fwdInst = instantiate(*op, inst);
  if (!fwdInst)
    return stringError(fmt::format("node '{}': {}", n.name, llvm::toString(fwdInst.takeError())));
  for (unsigned i = 0; i < n.inputs.size(); ++i) {
    const std::string &x = n.inputs[i];
    if (!needsGrad_.count(x))
      continue;
    const ir::Grad *grad = gradClause(*op, i);
    if (!grad) // not differentiated through this input (see run)
      continue;
    const ir::OpCall &call = *grad->call;
    Node b;
    b.name = fresh(fmt::format("{}_grad_{}", n.name, op->inputs[i].name));
    b.group = n.group.empty() ? n.name : n.group;
    if (!n.coalesce.empty())
      b.coalesce = n.coalesce + "/grad_" + op->inputs[i].name;
    b.op = call.callee->name;
    auto tensorOf = [&](const ir::TensorRef &t) -> const std::string & {
      return t.source == ir::TensorRef::Source::Input ? n.inputs[t.input]
             : t.source == ir::TensorRef::Source::Out ? n.output
                                                      : *dy;
    };
    auto calleeInst = gradCallInstantiation(call, *fwdInst, shapes, [&](const ir::TensorRef &t) {
      return static_cast<unsigned>(g_.tensor(tensorOf(t))->shape.size());
    });
    if (!calleeInst)
      return stringError(fmt::format("node '{}': the grad clause for '{}': {}", n.name,
                                     op->inputs[i].name, llvm::toString(calleeInst.takeError())));
    b.attrs = calleeInst->attrs;
    for (const ir::ExprPtr &arg : call.args)
      b.inputs.push_back(tensorOf(llvm::cast<ir::TensorRef>(*arg)));
    // Record the backward op's group lengths, so the node is explicit.
    auto calleeOp = instantiate(*call.callee, *calleeInst);
    if (!calleeOp)
      return stringError(fmt::format("node '{}': the grad clause for '{}': {}", n.name,
                                     op->inputs[i].name, llvm::toString(calleeOp.takeError())));
    for (const auto &[name, len] : calleeOp->groups)
      b.groups[name] = len;
    b.output = fresh(fmt::format("d_{}_from_{}", x, n.name));
    TensorInfo t;
    t.name = b.output;
    t.group = g_.tensor(x)->group;
    t.role = TensorRole::Gradient;
    t.shape = fwd_.tensor(x)->shape; // the gradient has the input's shape (checked below)
    t.shapeKnown = true;
    t.dtype = gradientType(x);
    if (llvm::Error e = g_.addTensor(std::move(t)))
      return e;
    contributions_[x].push_back(b.output);
    if (llvm::Error e = add(std::move(b)))
      return e;
    // Summed as they come (the same left fold, in the same order, as summing them all when
    // the gradient is read): each contribution dies at its sum. Summed at the end, every
    // contribution to a weight that many ops read (an RNN's weights, read at every step)
    // lived until the optimiser's update: RNN-10-8K at batch 512 held 400 GiB of them.
    std::vector<std::string> &cs = contributions_[x];
    if (cs.size() == 2) {
      auto sum = addSum(x, cs[0], cs[1]);
      if (!sum)
        return sum.takeError();
      cs = {*sum};
    }
  }
  return llvm::Error::success();
}

llvm::Expected<Graph> TrainingBuilder::run(const std::string &loss, Optimizer optimizer,
                                           bool weightDecay) {
  const TensorInfo *l = fwd_.tensor(loss);
  if (!l)
    return stringError(fmt::format("the loss '{}' is not a tensor of the graph", loss));
  if (!l->shapeKnown || !l->shape.empty())
    return stringError(fmt::format("the loss '{}' must be a scalar", loss));
  g_.constants = fwd_.constants;
  g_.initialValues = fwd_.initialValues;
  g_.randomInputs = fwd_.randomInputs;
  g_.precision = fwd_.precision;
  for (const TensorInfo &t : fwd_.tensors()) {
    TensorInfo copy = t;
    if (copy.group.empty())
      copy.group = copy.name;
    used_.insert(copy.name);
    if (llvm::Error e = g_.addTensor(std::move(copy)))
      return llvm::Expected<Graph>(std::move(e));
  }
  auto order = fwd_.topologicalOrder();
  if (!order)
    return order.takeError();
  for (unsigned i : *order) {
    Node n = fwd_.nodes()[i];
    if (n.group.empty())
      n.group = n.name;
    used_.insert(n.name);
    if (llvm::Error e = add(std::move(n)))
      return llvm::Expected<Graph>(std::move(e));
  }
  // Tensors that need a gradient: weights read through an input their op differentiates
  // (one it has a grad clause for), and what is computed from them through such inputs.
  // Weights read through no such input are buffers (a batch norm's running statistics): not
  // trained; inputs read through none (masks, conditions, indices) get no gradient.
  std::set<std::string> differentiated;
  for (unsigned i : *order) {
    const Node &n = fwd_.nodes()[i];
    const ir::OpDef *op = lib_.find(n.op);
    bool depends = false;
    for (unsigned k = 0; k < n.inputs.size(); ++k) {
      const std::string &in = n.inputs[k];
      if (!gradClause(*op, k))
        continue;
      if (fwd_.tensor(in)->role == TensorRole::Weight) {
        differentiated.insert(in);
        depends = true;
      }
      depends |= needsGrad_.count(in) > 0;
    }
    if (depends)
      needsGrad_.insert(n.output);
  }
  // Tensors with a differentiable path to the loss: through inputs with a grad clause.
  std::set<std::string> reach = {loss};
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    const Node &n = fwd_.nodes()[*it];
    if (!reach.count(n.output))
      continue;
    const ir::OpDef *op = lib_.find(n.op);
    for (unsigned k = 0; k < n.inputs.size(); ++k)
      if (gradClause(*op, k))
        reach.insert(n.inputs[k]);
  }
  std::map<std::string, std::vector<std::pair<const Node *, unsigned>>> readers;
  for (const Node &n : fwd_.nodes())
    for (unsigned k = 0; k < n.inputs.size(); ++k)
      readers[n.inputs[k]].push_back({&n, k});
  auto floating = [&](const std::string &tensor) {
    return isFloatType(fwd_.tensor(tensor)->dtype);
  };
  for (const TensorInfo &t : fwd_.tensors()) {
    if (t.role != TensorRole::Weight)
      continue;
    if (!differentiated.count(t.name)) {
      g_.tensor(t.name)->role = TensorRole::Input; // a buffer
      continue;
    }
    if (reach.count(t.name)) {
      needsGrad_.insert(t.name);
      continue;
    }
    // Read through a differentiable input, yet no differentiable path reaches the loss. A
    // weight all of whose paths stop at a condition or a comparison (a float tensor read
    // where the result is an integer or boolean: a causal mask through Equal into Where) is
    // a buffer; one stopped by an op that lacks a grad clause for a float result keeps the
    // error below, which names that op.
    bool natural = false;
    std::string unnatural;
    std::set<std::string> seen = {t.name};
    std::vector<std::string> todo = {t.name};
    while (!todo.empty()) {
      const std::string x = todo.back();
      todo.pop_back();
      for (const auto &[n, k] : readers[x]) {
        const ir::OpDef *op = lib_.find(n->op);
        if (gradClause(*op, k)) {
          if (seen.insert(n->output).second)
            todo.push_back(n->output);
        } else if (!floating(x) || !floating(n->output)) {
          natural = true;
        } else if (unnatural.empty()) {
          unnatural = fmt::format("node '{}' (op {}) has no grad clause for its input '{}' ('{}')",
                                  n->name, n->op, op->inputs[k].name, x);
        }
      }
    }
    if (natural && unnatural.empty()) {
      g_.tensor(t.name)->role = TensorRole::Input; // a buffer
      for (const std::string &d : seen)
        needsGrad_.erase(d);
      continue;
    }
    blockedBy_[t.name] = unnatural;
    needsGrad_.insert(t.name); // the update below reports it
  }

  TensorInfo seed = scalarInput("d_" + loss);
  seed.group = loss;
  used_.insert(seed.name);
  if (llvm::Error e = g_.addTensor(seed))
    return llvm::Expected<Graph>(std::move(e));
  contributions_[loss].push_back(seed.name);
  for (auto it = order->rbegin(); it != order->rend(); ++it)
    if (llvm::Error e = backward(fwd_.nodes()[*it]))
      return llvm::Expected<Graph>(std::move(e));

  // Optimiser updates.
  for (const std::string &h : optimizerHyperParameters(optimizer, weightDecay)) {
    if (used_.count(h))
      return stringError(fmt::format("the graph already has a tensor named '{}'", h));
    used_.insert(h);
    if (llvm::Error e = g_.addTensor(scalarInput(h)))
      return llvm::Expected<Graph>(std::move(e));
  }
  const bool adam = optimizer == Optimizer::Adam || optimizer == Optimizer::AdamW;
  for (const TensorInfo &w : fwd_.tensors()) {
    if (g_.tensor(w.name)->role != TensorRole::Weight)
      continue; // inputs and buffers
    auto gw = gradientOf(w.name);
    if (!gw) {
      llvm::consumeError(gw.takeError());
      const std::string &blocked = blockedBy_[w.name];
      return stringError(
          blocked.empty()
              ? fmt::format("weight '{}' gets no gradient (it does not reach the loss '{}')",
                            w.name, loss)
              : fmt::format("weight '{}' gets no gradient: no path from it to the loss '{}' can "
                            "be differentiated ({})",
                            w.name, loss, blocked));
    }
    std::string group = w.group.empty() ? w.name : w.group;
    // A node of the update, its result named after `output`; returns the result's name.
    auto node = [&](const std::string &name, const std::string &op, std::vector<std::string> inputs,
                    const std::string &output,
                    TensorRole role = TensorRole::OptimizerState) -> llvm::Expected<std::string> {
      TensorInfo t;
      t.name = fresh(output);
      t.group = group;
      t.role = role;
      std::string out = t.name;
      if (llvm::Error e = g_.addTensor(std::move(t)))
        return llvm::Expected<std::string>(std::move(e));
      Node n;
      n.name = fresh(name);
      n.group = group;
      n.op = op;
      n.inputs = std::move(inputs);
      n.output = out;
      if (llvm::Error e = add(std::move(n)))
        return llvm::Expected<std::string>(std::move(e));
      return out;
    };
    auto addState = [&](const std::string &name) -> llvm::Error {
      TensorInfo t;
      t.name = fresh(name);
      t.group = group;
      t.shape = w.shape;
      t.shapeKnown = true;
      t.role = TensorRole::OptimizerState;
      return g_.addTensor(std::move(t));
    };
    llvm::Error err = [&]() -> llvm::Error {
      if (optimizer == Optimizer::SGD)
        return weightDecay ? node("update_" + w.name, "sgd_weight_decay_update",
                                  {w.name, *gw, "lr", "weight_decay"}, w.name + "_updated")
                                 .takeError()
                           : node("update_" + w.name, "sgd_update", {w.name, *gw, "lr"},
                                  w.name + "_updated")
                                 .takeError();
      std::string grad = *gw; // with an L2 decay (not AdamW's), g + wd * w
      if (weightDecay && optimizer != Optimizer::AdamW) {
        auto d = node("weight_decay_" + w.name, "weight_decay_grad", {*gw, w.name, "weight_decay"},
                      "d_" + w.name + "_decayed", TensorRole::Gradient);
        if (!d)
          return d.takeError();
        grad = *d;
      }
      if (!adam) {
        const std::string v = "momentum_v_" + w.name;
        if (llvm::Error e = addState(v))
          return e;
        auto vNew = node("momentum_velocity_" + w.name, "momentum_velocity", {v, grad, "momentum"},
                         v + "_new");
        if (!vNew)
          return vNew.takeError();
        return optimizer == Optimizer::Nesterov
                   ? node("update_" + w.name, "nesterov_update",
                          {w.name, grad, *vNew, "lr", "momentum"}, w.name + "_updated")
                         .takeError()
                   : node("update_" + w.name, "momentum_update", {w.name, *vNew, "lr"},
                          w.name + "_updated")
                         .takeError();
      }
      const std::string m = "adam_m_" + w.name, v = "adam_v_" + w.name;
      for (const std::string &state : {m, v})
        if (llvm::Error e = addState(state))
          return e;
      auto mNew = node("adam_m_update_" + w.name, "adam_m", {m, grad, "adam_b1"}, m + "_new");
      if (!mNew)
        return mNew.takeError();
      auto vNew = node("adam_v_update_" + w.name, "adam_v", {v, grad, "adam_b2"}, v + "_new");
      if (!vNew)
        return vNew.takeError();
      std::vector<std::string> in = {w.name, *mNew, *vNew, "lr", "adam_c1", "adam_c2", "adam_eps"};
      if (optimizer == Optimizer::AdamW)
        in.push_back("weight_decay");
      return node("update_" + w.name,
                  optimizer == Optimizer::AdamW ? "adamw_update" : "adam_update", std::move(in),
                  w.name + "_updated")
          .takeError();
    }();
    if (err)
      return llvm::Expected<Graph>(std::move(err));
  }
  g_.outputs = fwd_.outputs;
  for (const Node &n : g_.nodes())
    if (carriesState(g_, n) &&
        std::find(g_.outputs.begin(), g_.outputs.end(), n.output) == g_.outputs.end())
      g_.outputs.push_back(n.output);
  if (llvm::Error e = checkGraph(g_, lib_))
    return stringError("the training graph does not check: " + llvm::toString(std::move(e)));
  return llvm::Expected<Graph>(std::move(g_));
}

} // namespace

llvm::Expected<Graph> buildTrainingGraph(const Graph &forward, const std::string &loss,
                                         const OpLibrary &lib, Optimizer optimizer,
                                         bool weightDecay) {
  return TrainingBuilder(forward, lib).run(loss, optimizer, weightDecay);
}

const char *optimizerName(Optimizer o) {
  switch (o) {
  case Optimizer::SGD:
    return "sgd";
  case Optimizer::Momentum:
    return "momentum";
  case Optimizer::Nesterov:
    return "nesterov";
  case Optimizer::Adam:
    return "adam";
  case Optimizer::AdamW:
    return "adamw";
  }
  return "?";
}

std::optional<Optimizer> optimizerNamed(const std::string &name) {
  for (Optimizer o : {Optimizer::SGD, Optimizer::Momentum, Optimizer::Nesterov, Optimizer::Adam,
                      Optimizer::AdamW})
    if (name == optimizerName(o))
      return o;
  return std::nullopt;
}

std::vector<std::string> optimizerHyperParameters(Optimizer o, bool weightDecay) {
  std::vector<std::string> h = {"lr"};
  if (o == Optimizer::Momentum || o == Optimizer::Nesterov)
    h.push_back("momentum");
  if (o == Optimizer::Adam || o == Optimizer::AdamW)
    h.insert(h.end(), {"adam_b1", "adam_b2", "adam_c1", "adam_c2", "adam_eps"});
  if (weightDecay || o == Optimizer::AdamW)
    h.push_back("weight_decay");
  return h;
}

bool isStateUpdate(const std::string &op) {
  static const std::set<std::string> updates = {"sgd_update",
                                                "sgd_weight_decay_update",
                                                "momentum_velocity",
                                                "momentum_update",
                                                "nesterov_update",
                                                "adam_m",
                                                "adam_v",
                                                "adam_update",
                                                "adamw_update"};
  return updates.count(op) > 0 || isRunningStatistic(op);
}

bool isGradientSumName(const std::string &node) { return node.rfind("sum_d_", 0) == 0; }

bool isRunningStatistic(const std::string &op) {
  return op == "bn_running_mean" || op == "bn_running_var" || op == "bn_running_var_unbiased";
}

bool carriesState(const Graph &g, const Node &n) {
  if (!isStateUpdate(n.op) || n.inputs.empty())
    return false;
  const TensorInfo *t = g.tensor(n.inputs[0]);
  return t && !g.producer(n.inputs[0]) &&
         (t->role == TensorRole::Weight || t->role == TensorRole::OptimizerState);
}

llvm::Expected<unsigned> evaluationGraph(Graph &g, const OpLibrary &lib, EvalNorm norm) {
  std::set<std::string> read(g.outputs.begin(), g.outputs.end());
  for (const Node &n : g.nodes())
    read.insert(n.inputs.begin(), n.inputs.end());
  // The carried running statistics nothing reads, by the group of their batch norm (the
  // ONNX node all of its steps belong to): mean, variance.
  std::set<std::string> dropped; // node names
  std::map<std::string, std::pair<std::string, std::string>> stats;
  for (const Node &n : g.nodes())
    if (isRunningStatistic(n.op) && carriesState(g, n) && !read.count(n.output)) {
      dropped.insert(n.name);
      (n.op == "bn_running_mean" ? stats[n.group].first : stats[n.group].second) = n.inputs[0];
    }
  if (dropped.empty())
    return 0u;
  std::set<std::string> readAfter(g.outputs.begin(), g.outputs.end());
  std::vector<Node> nodes;
  unsigned changed = 0;
  for (const Node &n : g.nodes()) {
    if (dropped.count(n.name))
      continue;
    Node m = n;
    if (auto s = stats.find(n.group); norm == EvalNorm::Running && n.op == "batch_norm_train" &&
                                      s != stats.end() && !s->second.first.empty() &&
                                      !s->second.second.empty()) {
      // batch_norm_train(x, scale, B, eps) -> BatchNormalization(x, scale, B, mean, var, eps)
      m.op = "BatchNormalization";
      m.inputs = {n.inputs[0],     n.inputs[1],      n.inputs[2],
                  s->second.first, s->second.second, n.inputs[3]};
      ++changed;
    }
    readAfter.insert(m.inputs.begin(), m.inputs.end());
    nodes.push_back(std::move(m));
  }
  // Tensors only the dropped nodes made or read (their outputs, the momenta) go too.
  std::set<std::string> gone;
  for (const Node &n : g.nodes())
    if (dropped.count(n.name)) {
      gone.insert(n.output);
      for (const std::string &in : n.inputs)
        if (!readAfter.count(in) && !g.producer(in) &&
            g.tensor(in)->role != TensorRole::OptimizerState)
          gone.insert(in);
    }
  Graph out = g.withoutNodes();
  for (const TensorInfo &t : g.tensors())
    if (!gone.count(t.name))
      if (llvm::Error e = out.addTensor(t))
        return std::move(e);
  for (Node &n : nodes)
    if (llvm::Error e = out.addNode(std::move(n)))
      return std::move(e);
  for (const std::string &t : gone) {
    out.constants.erase(t);
    out.initialValues.erase(t);
  }
  if (llvm::Error e = checkGraph(out, lib))
    return stringError("the evaluation graph does not check: " + llvm::toString(std::move(e)));
  g = std::move(out);
  return changed;
}

bool isCrossEntropyLoss(const std::string &op) {
  return op == "softmax_cross_entropy" || op == "softmax_cross_entropy_seq";
}

llvm::Expected<std::string> addLoss(Graph &g, const OpLibrary &lib, LossKind kind) {
  if (g.outputs.size() != 1)
    return stringError(fmt::format(
        "a loss can be added to a graph with one output; this one has {}", g.outputs.size()));
  auto loss = addLossOf(g, lib, g.outputs[0], kind);
  if (loss)
    g.outputs = {*loss};
  return loss;
}

llvm::Expected<std::string> addLossOf(Graph &g, const OpLibrary &lib, const std::string &output,
                                      LossKind kind) {
  const TensorInfo *y = g.tensor(output);
  if (!y || !y->shapeKnown)
    return stringError(
        fmt::format("the graph's output '{}' has no known shape (check the graph first)", output));
  if (y->shape.empty())
    return output;
  const std::string out = y->name;
  const std::vector<int64_t> shape = y->shape;
  Node n;
  n.name = g.tensor("loss") || g.tensor("loss_out") ? out + "_loss" : "loss";
  n.output = n.name + "_out";
  TensorInfo extra;
  extra.shapeKnown = true;
  extra.role = TensorRole::Input;
  if (kind == LossKind::CrossEntropy && shape.size() != 2 && shape.size() != 3)
    return stringError(fmt::format(
        "a cross-entropy loss needs [batch, classes] or [batch, positions, classes] logits; "
        "the output '{}' has rank {}",
        out, shape.size()));
  if (kind == LossKind::CrossEntropy || (kind == LossKind::Auto && shape.size() == 2)) {
    extra.name = g.tensor("labels") ? out + "_labels" : "labels";
    extra.shape.assign(shape.begin(), shape.end() - 1);
    extra.dtype = ElementType::Int64;
    n.op = shape.size() == 2 ? "softmax_cross_entropy" : "softmax_cross_entropy_seq";
  } else {
    extra.name = g.tensor("target") ? out + "_target" : "target";
    extra.shape = shape;
    n.op = "mse";
    n.groups = {{"i", static_cast<int64_t>(shape.size())}};
  }
  extra.group = extra.name;
  n.inputs = {out, extra.name};
  n.group = n.name;
  if (llvm::Error e = g.addTensor(extra))
    return llvm::Expected<std::string>(std::move(e));
  std::string loss = n.output;
  if (llvm::Error e = g.addNode(n))
    return llvm::Expected<std::string>(std::move(e));
  if (llvm::Error e = inferNode(g, g.nodes().back(), lib))
    return llvm::Expected<std::string>(std::move(e));
  return loss;
}

llvm::Expected<std::string> addWeightedSum(Graph &g, const OpLibrary &lib,
                                           const std::vector<std::pair<std::string, double>> &terms,
                                           const std::string &name) {
  if (terms.empty())
    return stringError("a weighted sum needs a term");
  // Names no tensor and no node of the graph has.
  std::set<std::string> taken;
  for (const Node &n : g.nodes())
    taken.insert(n.name);
  for (const TensorInfo &t : g.tensors())
    taken.insert(t.name);
  auto fresh = [&](const std::string &base) { return freshName(base, taken); };
  auto add = [&](Node n) -> llvm::Expected<std::string> {
    n.output = fresh(n.name + "_out");
    n.group = name;
    n.groups = {{"i", 0}};
    std::string out = n.output;
    if (llvm::Error e = g.addNode(std::move(n)))
      return std::move(e);
    if (llvm::Error e = inferNode(g, g.nodes().back(), lib))
      return std::move(e);
    return out;
  };
  std::string sum;
  for (const auto &[tensor, weight] : terms) {
    const TensorInfo *t = g.tensor(tensor);
    if (!t || !t->shapeKnown || !t->shape.empty())
      return stringError(fmt::format("'{}' is not a scalar of the graph", tensor));
    std::string term = tensor;
    if (weight != 1) {
      TensorInfo w;
      w.name = fresh(tensor + "_weight");
      w.group = name;
      w.shapeKnown = true;
      w.role = TensorRole::Input;
      if (llvm::Error e = g.addTensor(w))
        return std::move(e);
      g.constants[w.name] = {weight};
      Node scale;
      scale.name = fresh(tensor + "_weighted");
      scale.op = "Mul";
      scale.inputs = {tensor, w.name};
      auto scaled = add(std::move(scale));
      if (!scaled)
        return scaled.takeError();
      term = *scaled;
    }
    if (sum.empty()) {
      sum = term;
      continue;
    }
    Node plus;
    plus.name = fresh(name);
    plus.op = "Add";
    plus.inputs = {sum, term};
    auto added = add(std::move(plus));
    if (!added)
      return added.takeError();
    sum = *added;
  }
  return sum;
}

std::vector<std::string> freezeWeightsNotReaching(Graph &g, const std::string &loss) {
  std::set<std::string> reach = {loss};
  std::vector<std::string> todo = {loss};
  while (!todo.empty()) {
    const Node *n = g.producer(todo.back());
    todo.pop_back();
    if (n)
      for (const std::string &in : n->inputs)
        if (reach.insert(in).second)
          todo.push_back(in);
  }
  std::vector<std::string> frozen;
  for (const TensorInfo &t : g.tensors())
    if (t.role == TensorRole::Weight && !reach.count(t.name))
      frozen.push_back(t.name);
  for (const std::string &w : frozen)
    g.tensor(w)->role = TensorRole::Input; // keeps its initial value: a weight held fixed
  return frozen;
}

} // namespace tofu
