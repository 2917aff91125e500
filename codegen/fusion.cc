// Folding element-wise producers into their one reader.
#include "codegen/fusion.h"

#include <algorithm>
#include <map>
#include <set>

#include "analysis/instantiate.h"
#include "graph/training.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

/// How a body is rewritten into the fused op: variables (when `var` is set) and inputs
/// renamed; reads of the inputs in `folded` replaced by `producer`'s body, itself rewritten
/// by `inner`.
struct Rewrite {
  const std::vector<unsigned> *var = nullptr;
  std::vector<unsigned> input;
  std::set<unsigned> folded;
  const InstOp *producer = nullptr;
  const Rewrite *inner = nullptr;
  bool round = false; ///< the producer's result rounded to bfloat16 where it is read
};

void rewrite(ir::ExprPtr &e, const Rewrite &r) {
  switch (e->kind()) {
  case ir::ExprKind::Read: {
    auto &read = cast<ir::Read>(*e);
    if (r.folded.count(read.input)) {
      e = cloneExpr(*r.producer->body);
      rewrite(e, *r.inner);
      if (r.round) { // as storing it in bfloat16 and reading it back would
        auto a = std::make_unique<ir::Apply>();
        a->fn = ir::Builtin::RoundBf16;
        a->args.push_back(std::move(e));
        e = std::move(a);
      }
      return;
    }
    read.input = r.input.at(read.input);
    break;
  }
  case ir::ExprKind::VarRef:
    if (r.var)
      cast<ir::VarRef>(*e).var = r.var->at(cast<ir::VarRef>(*e).var);
    break;
  case ir::ExprKind::ExtentRef:
    cast<ir::ExtentRef>(*e).input = r.input.at(cast<ir::ExtentRef>(*e).input);
    break;
  case ir::ExprKind::TensorRef: {
    auto &t = cast<ir::TensorRef>(*e);
    if (t.source == ir::TensorRef::Source::Input)
      t.input = r.input.at(t.input);
    break;
  }
  case ir::ExprKind::Reduce:
    if (r.var)
      for (unsigned &v : cast<ir::Reduce>(*e).vars)
        v = r.var->at(v);
    break;
  default:
    break;
  }
  ir::forEachChild(*e, [&](ir::ExprPtr &c) { rewrite(c, r); });
}

/// The fused op's input order, shared by its body and its node: the consumer's inputs but
/// the folded ones, then the producer's. Per consumer input, its fused slot (-1: folded).
std::vector<int> consumerSlots(size_t inputs, const std::set<unsigned> &folded) {
  std::vector<int> slot(inputs, -1);
  int next = 0;
  for (unsigned q = 0; q < inputs; ++q)
    if (!folded.count(q))
      slot[q] = next++;
  return slot;
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

InstOp foldInto(const InstOp &producer, const InstOp &consumer, const std::vector<unsigned> &slots,
                bool roundBf16) {
  InstOp out;
  out.def = consumer.def;
  out.name = producer.name + "+" + consumer.name;
  out.attrs = consumer.attrs;
  out.groups = consumer.groups;
  out.vars = consumer.vars;
  out.outputVars = consumer.outputVars;
  Rewrite outer, inner;
  outer.folded = {slots.begin(), slots.end()};
  outer.producer = &producer;
  outer.inner = &inner;
  outer.round = roundBf16;
  const std::vector<int> slot = consumerSlots(consumer.inputs.size(), outer.folded);
  for (unsigned q = 0; q < consumer.inputs.size(); ++q) {
    outer.input.push_back(slot[q] < 0 ? 0 : static_cast<unsigned>(slot[q])); // folded: not read
    if (slot[q] >= 0)
      out.inputs.push_back(consumer.inputs[q]);
  }
  for (const InstInput &in : producer.inputs) {
    inner.input.push_back(static_cast<unsigned>(out.inputs.size()));
    out.inputs.push_back(in);
  }
  std::vector<unsigned> producerVar(producer.vars.size(), 0);
  for (size_t k = 0; k < producer.outputVars.size(); ++k)
    producerVar[producer.outputVars[k]] = consumer.outputVars.at(k);
  inner.var = &producerVar;
  out.body = cloneExpr(*consumer.body);
  rewrite(out.body, outer);
  // The shape clause is not needed: a fused node's shapes are given, never inferred.
  return out;
}

FusedPlan fuseElementwise(const Problem &p, const ExecPlan &plan,
                          const std::vector<std::string> &keep) {
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
    if (p.carriesState(n)) {
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
    // Its one reader (consumer lists follow the folds: a folded node's inputs name its
    // reader instead).
    std::set<size_t> readers;
    for (unsigned c : fp.tensors[t].consumers)
      readers.insert(position.at(c));
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
    // A bfloat16 intermediate is rounded where the reader reads it, as it would be stored:
    // the fused kernel computes what the unfused ones do (a linear's output rounded before
    // the float32 residual add that reads it).
    table->op = foldInto(prod.table->op, cons.table->op, slots,
                         fp.tensors[t].storage == ElementType::BFloat16);
    table->elementwise = table->op.isElementwise();
    ProblemNode fused = cons;
    fused.table = table;
    fused.name = prod.name + "+" + cons.name; // a chain's names, joined
    const std::vector<int> newIndex =
        consumerSlots(cons.inputs.size(), std::set<unsigned>(slots.begin(), slots.end()));
    fused.inputs.clear();
    fused.shapes.inputs.clear();
    for (unsigned q = 0; q < cons.inputs.size(); ++q)
      if (newIndex[q] >= 0) {
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
        if (newIndex[q] >= 0) {
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
