// Folding element-wise producers into their one reader.
#include "codegen/fusion.h"

#include <algorithm>
#include <map>
#include <set>

#include "analysis/instantiate.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

/// Renames inside a cloned producer body: its variables to the consumer's, its inputs to
/// their slots in the fused op.
void remap(ir::Expr &e, const std::vector<unsigned> &var, const std::vector<unsigned> &input) {
  switch (e.kind()) {
  case ir::ExprKind::VarRef: {
    auto &v = cast<ir::VarRef>(e);
    v.var = var.at(v.var);
    return;
  }
  case ir::ExprKind::ExtentRef: {
    auto &x = cast<ir::ExtentRef>(e);
    x.input = input.at(x.input);
    return;
  }
  case ir::ExprKind::Read: {
    auto &r = cast<ir::Read>(e);
    r.input = input.at(r.input);
    for (ir::Coord &c : r.coords)
      if (c.expr)
        remap(*c.expr, var, input);
    return;
  }
  case ir::ExprKind::Apply:
    for (ir::ExprPtr &a : cast<ir::Apply>(e).args)
      remap(*a, var, input);
    return;
  case ir::ExprKind::Neg:
    remap(*cast<ir::Neg>(e).operand, var, input);
    return;
  case ir::ExprKind::Binary:
    remap(*cast<ir::Binary>(e).lhs, var, input);
    remap(*cast<ir::Binary>(e).rhs, var, input);
    return;
  case ir::ExprKind::Reduce: {
    auto &r = cast<ir::Reduce>(e);
    for (unsigned &v : r.vars)
      v = var.at(v);
    remap(*r.body, var, input);
    return;
  }
  case ir::ExprKind::OpaqueCall: {
    auto &c = cast<ir::OpaqueCall>(e);
    for (ir::ExprPtr &a : c.args)
      remap(*a, var, input);
    for (ir::Coord &co : c.coords)
      if (co.expr)
        remap(*co.expr, var, input);
    return;
  }
  case ir::ExprKind::TensorRef: {
    auto &t = cast<ir::TensorRef>(e);
    if (t.source == ir::TensorRef::Source::Input)
      t.input = input.at(t.input);
    return;
  }
  case ir::ExprKind::Const:
  case ir::ExprKind::AttrRef:
  case ir::ExprKind::OpCall:
    return;
  }
}

/// In the consumer's cloned body: reads of a folded slot become the producer's body; other
/// inputs move to their fused slots.
void substitute(ir::ExprPtr &e, const std::set<unsigned> &slots, const std::vector<unsigned> &input,
                const InstOp &producer, const std::vector<unsigned> &producerVar,
                const std::vector<unsigned> &producerInput) {
  ir::Expr &x = *e;
  switch (x.kind()) {
  case ir::ExprKind::Read: {
    auto &r = cast<ir::Read>(x);
    if (slots.count(r.input)) {
      ir::ExprPtr body = cloneExpr(*producer.body);
      remap(*body, producerVar, producerInput);
      e = std::move(body);
      return;
    }
    r.input = input.at(r.input);
    for (ir::Coord &c : r.coords)
      if (c.expr)
        substitute(c.expr, slots, input, producer, producerVar, producerInput);
    return;
  }
  case ir::ExprKind::ExtentRef: {
    auto &t = cast<ir::ExtentRef>(x);
    t.input = input.at(t.input);
    return;
  }
  case ir::ExprKind::TensorRef: {
    auto &t = cast<ir::TensorRef>(x);
    if (t.source == ir::TensorRef::Source::Input)
      t.input = input.at(t.input);
    return;
  }
  case ir::ExprKind::Apply:
    for (ir::ExprPtr &a : cast<ir::Apply>(x).args)
      substitute(a, slots, input, producer, producerVar, producerInput);
    return;
  case ir::ExprKind::Neg:
    substitute(cast<ir::Neg>(x).operand, slots, input, producer, producerVar, producerInput);
    return;
  case ir::ExprKind::Binary:
    substitute(cast<ir::Binary>(x).lhs, slots, input, producer, producerVar, producerInput);
    substitute(cast<ir::Binary>(x).rhs, slots, input, producer, producerVar, producerInput);
    return;
  case ir::ExprKind::Reduce:
    substitute(cast<ir::Reduce>(x).body, slots, input, producer, producerVar, producerInput);
    return;
  case ir::ExprKind::OpaqueCall: {
    auto &c = cast<ir::OpaqueCall>(x);
    for (ir::ExprPtr &a : c.args)
      substitute(a, slots, input, producer, producerVar, producerInput);
    for (ir::Coord &co : c.coords)
      if (co.expr)
        substitute(co.expr, slots, input, producer, producerVar, producerInput);
    return;
  }
  case ir::ExprKind::Const:
  case ir::ExprKind::AttrRef:
  case ir::ExprKind::VarRef:
  case ir::ExprKind::OpCall:
    return;
  }
}

/// Whether every use of input `slot` in `op` is a read at the output coordinates (no
/// extent, whole-tensor or slice use).
bool readOnlyAtOutput(const InstOp &op, unsigned slot) {
  if (op.inputs[slot].rank != op.outputVars.size())
    return false;
  bool ok = true;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    if (const auto *r = dyn_cast<ir::Read>(&e)) {
      if (r->input != slot)
        return;
      if (r->coords.size() != op.outputVars.size()) {
        ok = false;
        return;
      }
      for (size_t d = 0; d < r->coords.size(); ++d)
        ok &= r->coords[d].kind == ir::Coord::Kind::Affine &&
              ir::exactVar(r->coords[d]) == op.outputVars[d];
    } else if (const auto *x = dyn_cast<ir::ExtentRef>(&e)) {
      ok &= x->input != slot;
    } else if (const auto *t = dyn_cast<ir::TensorRef>(&e)) {
      ok &= !(t->source == ir::TensorRef::Source::Input && t->input == slot);
    }
  });
  return ok;
}

} // namespace

bool isMap(const InstOp &op) {
  if (op.vars.size() != op.outputVars.size())
    return false;
  bool ok = true;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    ok &= !isa<ir::Reduce>(e) && !isa<ir::OpaqueCall>(e) && !isa<ir::TensorRef>(e);
  });
  return ok;
}

InstOp foldInto(const InstOp &producer, const InstOp &consumer, const std::vector<unsigned> &slots) {
  const std::set<unsigned> folded(slots.begin(), slots.end());
  InstOp out;
  out.def = consumer.def;
  out.name = producer.name + "+" + consumer.name;
  out.attrs = consumer.attrs;
  out.groups = consumer.groups;
  out.vars = consumer.vars;
  out.outputVars = consumer.outputVars;
  std::vector<unsigned> input(consumer.inputs.size(), 0);
  for (unsigned q = 0; q < consumer.inputs.size(); ++q)
    if (!folded.count(q)) {
      input[q] = static_cast<unsigned>(out.inputs.size());
      out.inputs.push_back(consumer.inputs[q]);
    }
  std::vector<unsigned> producerInput;
  for (const InstInput &in : producer.inputs) {
    producerInput.push_back(static_cast<unsigned>(out.inputs.size()));
    out.inputs.push_back(in);
  }
  std::vector<unsigned> producerVar(producer.vars.size(), 0);
  for (size_t k = 0; k < producer.outputVars.size(); ++k)
    producerVar[producer.outputVars[k]] = consumer.outputVars.at(k);
  out.body = cloneExpr(*consumer.body);
  substitute(out.body, folded, input, producer, producerVar, producerInput);
  // The shape clause is not needed: a fused node's shapes are given, never inferred.
  return out;
}

FusedPlan fuseElementwise(const Problem &p, const ExecPlan &plan, const std::vector<std::string> &keep) {
  FusedPlan f{p, plan, 0, {}};
  Problem &fp = f.problem;
  const unsigned k = plan.workers;
  std::set<unsigned> kept;
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    if (std::find(keep.begin(), keep.end(), pt.name) != keep.end() ||
        pt.role == TensorRole::Weight || pt.role == TensorRole::OptimizerState)
      kept.insert(t);
  }
  for (const ProblemNode &n : p.nodes) // optimiser updates and the tensors they replace
    if (n.table->op.def->name == "sgd_update" || n.table->op.def->name == "adam_update" ||
        n.table->op.def->name == "adam_m" || n.table->op.def->name == "adam_v") {
      kept.insert(n.output);
      kept.insert(n.inputs[0]);
    }
  std::map<unsigned, size_t> position; // node -> index in f.plan.nodes
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    position[plan.nodes[i].node] = i;
  std::vector<bool> removed(plan.nodes.size(), false);
  std::set<unsigned> fusedNodes;

  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const NodeExec &pe = f.plan.nodes[i];
    const ProblemNode &prod = fp.nodes[pe.node];
    const unsigned t = prod.output;
    if (kept.count(t) || !isMap(prod.table->op))
      continue;
    // Its one reader, after it in the plan.
    std::set<unsigned> readers;
    for (size_t j = i + 1; j < plan.nodes.size(); ++j)
      if (!removed[j])
        for (unsigned in : fp.nodes[f.plan.nodes[j].node].inputs)
          if (in == t)
            readers.insert(static_cast<unsigned>(j));
    if (readers.size() != 1)
      continue;
    const size_t j = *readers.begin();
    NodeExec &ce = f.plan.nodes[j];
    const ProblemNode &cons = fp.nodes[ce.node];
    std::vector<unsigned> slots;
    for (unsigned q = 0; q < cons.inputs.size(); ++q)
      if (cons.inputs[q] == t)
        slots.push_back(q);
    bool ok = true;
    for (unsigned q : slots)
      ok &= readOnlyAtOutput(cons.table->op, q);
    // On every worker: the producer computes exactly the box the reader reads of it, into
    // its own tile, and nothing of it crosses workers.
    for (unsigned w = 0; w < k && ok; ++w) {
      const OpInstance &pi = pe.workers[w], &ci = ce.workers[w];
      ok &= pi.computes == ci.computes;
      if (!ok || !pi.computes)
        continue;
      ok &= f.plan.tiles[w][t] == pi.produced;
      for (unsigned q : slots) {
        ok &= ci.inputs[q].region == pi.produced;
        for (const Fetch &part : ci.inputs[q].parts)
          ok &= part.from == w;
      }
    }
    for (const OutputAssembly &a : pe.assemble) {
      ok &= a.slices.size() == 1;
      for (const auto &slice : a.slices)
        for (const Fetch &part : slice)
          ok &= part.from == a.owner;
    }
    if (!ok)
      continue;

    // Fold: the reader's node computes both.
    auto table = std::make_shared<StrategyTable>();
    table->op = foldInto(prod.table->op, cons.table->op, slots);
    table->elementwise = table->op.isElementwise();
    ProblemNode fused = cons;
    fused.table = table;
    fused.name = prod.name + "+" + cons.name; // a chain's names, joined
    std::set<unsigned> slotSet(slots.begin(), slots.end());
    fused.inputs.clear();
    fused.shapes.inputs.clear();
    std::vector<int> newIndex(cons.inputs.size(), -1);
    for (unsigned q = 0; q < cons.inputs.size(); ++q)
      if (!slotSet.count(q)) {
        newIndex[q] = static_cast<int>(fused.inputs.size());
        fused.inputs.push_back(cons.inputs[q]);
        fused.shapes.inputs.push_back(cons.shapes.inputs[q]);
      }
    const unsigned base = static_cast<unsigned>(fused.inputs.size());
    for (unsigned q = 0; q < prod.inputs.size(); ++q) {
      fused.inputs.push_back(prod.inputs[q]);
      fused.shapes.inputs.push_back(prod.shapes.inputs[q]);
    }
    for (unsigned w = 0; w < k; ++w) {
      OpInstance &ci = ce.workers[w];
      const OpInstance &pi = pe.workers[w];
      std::vector<InputFetch> ins;
      for (unsigned q = 0; q < ci.inputs.size(); ++q)
        if (!slotSet.count(q)) {
          InputFetch in = ci.inputs[q];
          if (in.repeats >= 0)
            in.repeats = newIndex[in.repeats];
          ins.push_back(std::move(in));
        }
      for (const InputFetch &pin : pi.inputs) {
        InputFetch in = pin;
        if (in.repeats >= 0)
          in.repeats += static_cast<int>(base);
        ins.push_back(std::move(in));
      }
      ci.inputs = std::move(ins);
    }
    fp.nodes[ce.node] = std::move(fused);
    for (unsigned in : prod.inputs) { // the producer's inputs are now read by the reader
      auto &cs = fp.tensors[in].consumers;
      std::replace(cs.begin(), cs.end(), pe.node, ce.node);
    }
    fp.tensors[t].consumers.clear();
    fp.tensors[t].producer = -1;
    for (unsigned w = 0; w < k; ++w)
      f.plan.tiles[w][t] = Box(p.tensors[t].shape.size(), Range{0, 0});
    fusedNodes.insert(ce.node);
    fusedNodes.erase(pe.node);
    removed[i] = true;
    ++f.folded;
  }
  std::vector<NodeExec> kept2;
  for (size_t i = 0; i < f.plan.nodes.size(); ++i)
    if (!removed[i])
      kept2.push_back(std::move(f.plan.nodes[i]));
  f.plan.nodes = std::move(kept2);
  for (unsigned n : fusedNodes)
    f.chains.push_back(fp.nodes[n].name);
  return f;
}

} // namespace tofu
