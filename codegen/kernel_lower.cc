// The kernel lowering's loop nests (codegen/kernel_lowering.h): building the loop IR, and
// placing each reduction where the schedule says (inline at a loop's start, in a temporary
// a pass fills, across a block's threads, split across threads).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "analysis/index_eval.h"
#include "analysis/reducer.h"
#include "codegen/kernel_lowering.h"
#include "fmt/format.h"

namespace tofu {
namespace kernelgen {

Lowering::Node &Lowering::add(Node n) {
  cur().push_back(std::move(n));
  return cur().back();
}

void Lowering::decl(const std::string &type,
                    std::vector<std::pair<std::string, std::string>> names) {
  add(loops::declNode(type, std::move(names)));
}

void Lowering::decl(const std::string &type, const std::string &name, const std::string &value) {
  decl(type, {{name, value}});
}

void Lowering::assign(const std::string &target, const std::string &op, const std::string &value) {
  add(loops::assignNode(target, op, value));
}

void Lowering::combine(ir::Reducer reducer, const std::string &acc, const std::string &value) {
  add(loops::combineNode(reducer, acc, value));
}

void Lowering::store(const std::string &buffer, const std::string &offset,
                     const std::string &value) {
  // Only `out` may hold another element type; temporaries and scratch are float32.
  add(loops::storeNode(buffer, offset, value,
                       buffer == "out" ? types_.output : loops::Element::F32));
}

std::string Lowering::widened(unsigned input, const std::string &load) const {
  return types_.input(input) == loops::Element::BF16 ? "tofu_from_bf16(" + load + ")" : load;
}

void Lowering::returnIf(const std::string &cond, const std::string &value) {
  Node n = loops::ifNode(cond, true);
  n.body.push_back(loops::returnNode(value));
  add(std::move(n));
}

Lowering::Node &Lowering::open(Node n) {
  Node &at = add(std::move(n));
  blocks_.push_back(&at.body);
  open_.push_back(&at);
  return at;
}

Lowering::Node &Lowering::openLoop(LoopKind kind, const std::string &var, const std::string &from,
                                   const std::string &to, const std::string &step, bool compact) {
  return open(loops::loopNode(kind, var, from, to, step, compact));
}

void Lowering::openScope(Node::Kind kind) {
  Node n;
  n.kind = kind;
  open(std::move(n));
}

void Lowering::close() {
  blocks_.pop_back();
  open_.pop_back();
}

void Lowering::emitSlot(int nest, int slot) {
  for (const Red &r : sched_.reductions)
    if (r.placement == Placement::Inline && r.nest == nest && r.slot == slot && r.fusedWith < 0)
      emitReduction(r);
}

bool Lowering::outerSlot(const Red &r) const {
  if (r.placement != Placement::Inline || r.nest != -1)
    return false;
  if (r.slot < 0)
    return true;
  for (unsigned v : op_.outputVars)
    if (r.slot == static_cast<int>(v))
      return true;
  return false;
}

size_t Lowering::slottedPrefix(int nest, const std::vector<unsigned> &vars) const {
  size_t n = 0;
  for (size_t k = 0; k < vars.size(); ++k)
    if (sched_.hasInlineAt(nest, static_cast<int>(vars[k])))
      n = k + 1;
  return n;
}

std::string Lowering::loOf(unsigned v) const {
  auto b = bounds_.find(v);
  return b != bounds_.end() ? b->second.first : fmt::format("lo{}", v);
}

std::string Lowering::hiOf(unsigned v) const {
  auto b = bounds_.find(v);
  return b != bounds_.end() ? b->second.second : fmt::format("hi{}", v);
}

void Lowering::emitBlockReduction(const Red &r) {
  const ir::Reduce &node = *r.node;
  decl("float", accumulator(r), identity(node.reducer));
  openScope();
  const size_t serial = slottedPrefix(r.nest, node.vars);
  for (size_t k = 0; k < serial; ++k) {
    const unsigned v = node.vars[k];
    openLoop(LoopKind::Serial, fmt::format("v{}", v), loOf(v), hiOf(v));
    emitSlot(r.nest, static_cast<int>(v)); // every thread is here: collective
  }
  std::string count;
  for (size_t k = serial; k < node.vars.size(); ++k) {
    const unsigned v = node.vars[k];
    count +=
        fmt::format("{0}({2} > {1} ? {2} - {1} : 0)", count.empty() ? "" : " * ", loOf(v), hiOf(v));
  }
  const std::string c = fmt::format("c{}", r.id), q = fmt::format("q{}", r.id);
  decl("const i64", c, count.empty() ? "1" : count);
  openLoop(LoopKind::BlockThreads, fmt::format("u{}", r.id), "", c);
  decl("i64", q, fmt::format("u{}", r.id));
  for (size_t k = node.vars.size(); k-- > serial;) {
    const unsigned v = node.vars[k];
    decl("const i64", fmt::format("v{}", v),
         fmt::format("{0} + {2} % ({1} - {0})", loOf(v), hiOf(v), q));
    if (k > serial)
      assign(q, "/=", fmt::format("{} - {}", hiOf(v), loOf(v)));
  }
  const bool outer = collective_;
  collective_ = false; // each thread its own terms: nothing nested is placed here
  combine(node.reducer, accumulator(r), value(*node.body));
  collective_ = outer;
  close();
  for (size_t k = 0; k < serial; ++k)
    close();
  add(loops::blockCombineNode(node.reducer, accumulator(r)));
  close();
}

void Lowering::emitReduction(const Red &r) {
  if (block_ && collective_)
    return emitBlockReduction(r);
  const bool wasCollective = collective_;
  collective_ = false; // what is nested inside runs serially in each thread
  emitSerialReduction(r);
  collective_ = wasCollective;
}

void Lowering::openReductionLoop(const Red &r, unsigned v, const Binding &how) {
  const std::string name = fmt::format("v{}", v);
  const StridedVar *sv = nullptr;
  for (const StridedVar &x : r.strides)
    if (x.var == v)
      sv = &x;
  for (const PickedVar &p : r.picks)
    if (p.var == v) {
      // One position: the value's, when it is an integer in range; the first, when it is
      // NaN (the condition then gives the sum its NaN); none otherwise.
      const std::string e = fmt::format("e{}", v), from = fmt::format("from{}", v),
                        to = fmt::format("to{}", v), lo = fmt::format("lo{}", v),
                        hi = fmt::format("hi{}", v);
      decl("const float", e, value(*p.value));
      decl("i64", {{from, hi}, {to, hi}});
      openIf(fmt::format("{0} != {0}", e));
      assign(from, "=", lo);
      assign(to, "=", lo + " + 1");
      elseBranch();
      openIf(fmt::format("{0} >= (float){1} && {0} < (float){2} && (float)(i64){0} == {0}", e, lo,
                         hi));
      assign(from, "=", "(i64)" + e);
      assign(to, "=", from + " + 1");
      close();
      close();
      bindLoop(openLoop(how.kind, name, from, to), how);
      return;
    }
  if (!sv) {
    // (a strided loop runs a few window positions: not worth vectors)
    bindLoop(openLoop(how.kind, name, loOf(v), hiOf(v)), how);
    return;
  }
  // offset + c * v == 0 (mod s): with g = gcd(c, s), solutions exist when g divides the
  // offset, and are v == (-offset / g) * inverse(c / g) modulo s / g.
  const int64_t c = sv->coefficient, s = sv->modulus;
  int64_t g = std::gcd(c < 0 ? -c : c, s), step = s / g;
  int64_t cr = ((c / g) % step + step) % step, inv = 0;
  for (int64_t k = 0; k < step; ++k)
    if ((cr * k) % step == 1 % step) {
      inv = k;
      break;
    }
  zero_ = static_cast<int>(v);
  const std::string offset = index(*sv->offset);
  zero_ = -1;
  exact_.emplace_back(index(*sv->offset), fmt::format("((i64){})", s));
  const std::string a = fmt::format("a{}", v), from = fmt::format("from{}", v);
  decl("const i64", a, offset);
  decl("i64", from, fmt::format("hi{}", v));
  openIf(fmt::format("tofu_imodp({}, {}) == 0", a, g), true);
  assign(from, "=",
         fmt::format("lo{0} + tofu_imodp(tofu_imodp(-({1} / {2}) * {3}, {4}) - lo{0}, {4})", v, a,
                     g, inv, step));
  close();
  openLoop(LoopKind::Serial, name, from, fmt::format("hi{}", v), std::to_string(step));
}

void Lowering::bindLoop(Node &loop, const Binding &how) {
  loop.accumulators = how.accumulators;
  loop.reducer = how.reducer;
}

bool Lowering::flatReads(const ir::Expr &e, unsigned a, unsigned b,
                         std::vector<const ir::Read *> &reads) const {
  if (const auto *r = dyn_cast<ir::Reduce>(&e)) {
    const Red *s = &sched_.resolved(sched_.of(r));
    const auto uses = [&](const std::vector<unsigned> &vs) {
      return std::find(vs.begin(), vs.end(), a) != vs.end() ||
             std::find(vs.begin(), vs.end(), b) != vs.end();
    };
    switch (s->placement) {
    case Placement::Count:
      return true;
    case Placement::Temporary:
      return !uses(s->depends);
    case Placement::Inline:
      return !uses(s->depends) && !uses(s->loops);
    case Placement::Alias:
      return false;
    }
    return false;
  }
  if (const auto *r = dyn_cast<ir::Read>(&e)) {
    const size_t n = r->coords.size();
    // (A read with a data-dependent coordinate goes through the checked loader, which
    // takes a and b by name: it cannot be flat.)
    const bool affine = std::all_of(r->coords.begin(), r->coords.end(), [](const ir::Coord &c) {
      return c.kind == ir::Coord::Kind::Affine;
    });
    if (affine && n >= 2 && ir::exactVar(r->coords[n - 2]) == a &&
        ir::exactVar(r->coords[n - 1]) == b) {
      for (size_t d = 0; d + 2 < n; ++d)
        if (r->coords[d].expr && !flatReads(*r->coords[d].expr, a, b, reads))
          return false;
      reads.push_back(r);
      return true;
    }
  }
  if (const auto *v = dyn_cast<ir::VarRef>(&e))
    return v->var != a && v->var != b;
  if (llvm::isa<ir::OpaqueCall>(e))
    return false;
  bool ok = true;
  ir::forEachChildExpr(e, [&](const ir::Expr &c) { ok = ok && flatReads(c, a, b, reads); });
  return ok;
}

std::string Lowering::flatConditions(unsigned b, const std::vector<const ir::Read *> &reads) const {
  std::string c;
  std::set<unsigned> seen;
  for (const ir::Read *r : reads) {
    if (!seen.insert(r->input).second)
      continue;
    const size_t d = r->coords.size() - 1;
    c += fmt::format(" && lo{0} == o{1}_{2} && hi{0} - lo{0} == e{1}_{2}", b, r->input, d);
  }
  return "true" + c;
}

void Lowering::emitSerialReduction(const Red &r) {
  const std::vector<const Red *> group = sched_.fusedGroup(r.id);
  const ir::Reduce &node = *r.node;
  for (const Red *m : group)
    decl("float", accumulator(*m), identity(m->node->reducer));
  // Nothing is computed at the start of the innermost reduction loop.
  const bool innermostFree =
      node.vars.empty() || !sched_.hasInlineAt(r.nest, static_cast<int>(node.vars.back()));
  // The last two loops as one flat loop when the rows they read are whole (a batch norm's
  // 8 x 8 maps: one loop of 64, not 8 loops of 8).
  std::vector<const ir::Read *> reads;
  bool flat = fast_ && !flat_ && dialect_ == KernelDialect::Cpp && node.vars.size() >= 2 &&
              innermostFree && bounds_.empty() && r.strides.empty() && r.picks.empty() &&
              !sched_.hasInlineAt(r.nest, static_cast<int>(node.vars[node.vars.size() - 2]));
  for (const Red *m : group) {
    const size_t nv = m->node->vars.size();
    flat = flat && flatReads(*m->node->body, m->node->vars[nv - 2], m->node->vars[nv - 1], reads);
  }
  if (flat && !reads.empty()) {
    openIf(flatConditions(node.vars.back(), reads));
    flat_ = FlatPair{node.vars[node.vars.size() - 2], node.vars.back()};
    emitReductionLoops(r, group, node.vars.size() - 2, true);
    flat_.reset();
    elseBranch();
    emitReductionLoops(r, group, node.vars.size(), false);
    close();
  } else {
    emitReductionLoops(r, group, node.vars.size(), false);
  }
  knownTrue_.clear();
  exact_.clear();
}

void Lowering::emitReductionLoops(const Red &r, const std::vector<const Red *> &group, size_t loops,
                                  bool flat) {
  const ir::Reduce &node = *r.node;
  const bool innermostFree =
      node.vars.empty() || !sched_.hasInlineAt(r.nest, static_cast<int>(node.vars.back()));
  Binding simd{LoopKind::Vector, {}, node.reducer};
  for (const Red *m : group)
    simd.accumulators.push_back(accumulator(*m));
  if (flat) {
    for (size_t k = 0; k < loops; ++k) {
      openReductionLoop(r, node.vars[k], {});
      emitSlot(r.nest, static_cast<int>(node.vars[k]));
    }
    const unsigned a = flat_->outer, b = flat_->inner;
    bindLoop(openLoop(LoopKind::Vector, "fl", "0",
                      fmt::format("(hi{0} - lo{0}) * (hi{1} - lo{1})", a, b)),
             simd);
    emitCombines(group, node);
    close();
    for (size_t k = 0; k < loops; ++k)
      close();
    return;
  }
  for (size_t k = 0; k < node.vars.size(); ++k) {
    const unsigned v = node.vars[k];
    openReductionLoop(r, v, k + 1 == node.vars.size() && innermostFree ? simd : Binding{});
    emitSlot(r.nest, static_cast<int>(v));
  }
  for (const StridedVar &sv : r.strides)
    knownTrue_.insert(sv.guard);
  emitCombines(group, node);
  for (size_t k = 0; k < node.vars.size(); ++k)
    close();
}

void Lowering::emitCombines(const std::vector<const Red *> &group, const ir::Reduce &node) {
  for (const Red *m : group) {
    for (size_t k = 0; k < node.vars.size(); ++k)
      if (m->node->vars[k] != node.vars[k])
        rename_[m->node->vars[k]] = node.vars[k];
    combine(m->node->reducer, accumulator(*m), value(*m->node->body));
    rename_.clear();
  }
}

unsigned Lowering::inputBase(unsigned input) const {
  unsigned base = 2 * static_cast<unsigned>(op_.vars.size());
  for (unsigned i = 0; i < input; ++i)
    base += 3 * op_.inputs[i].rank;
  return base;
}

void Lowering::emitLocals() {
  decl("const i64 *", "I", "a->ints");
  for (unsigned v = 0; v < op_.vars.size(); ++v)
    decl("const i64", {{fmt::format("lo{}", v), fmt::format("I[{}]", 2 * v)},
                       {fmt::format("hi{}", v), fmt::format("I[{}]", 2 * v + 1)}});
  for (unsigned i = 0; i < op_.inputs.size(); ++i) {
    unsigned base = inputBase(i), rank = op_.inputs[i].rank;
    for (unsigned d = 0; d < rank; ++d)
      decl("const i64", {{fmt::format("s{}_{}", i, d), fmt::format("I[{}]", base + 3 * d)},
                         {fmt::format("o{}_{}", i, d), fmt::format("I[{}]", base + 3 * d + 1)},
                         {fmt::format("e{}_{}", i, d), fmt::format("I[{}]", base + 3 * d + 2)}});
    for (unsigned d = rank; d-- > 0;)
      decl("const i64", fmt::format("st{}_{}", i, d),
           d + 1 == rank ? std::string("1") : fmt::format("st{0}_{1} * e{0}_{1}", i, d + 1));
    const loops::Element e = types_.input(i);
    decl(fmt::format("const {} *__restrict__", loops::elementCType(e)), fmt::format("in{}", i),
         e == loops::Element::F32
             ? fmt::format("a->in[{}]", i)
             : fmt::format("(const {} *)a->in[{}]", loops::elementCType(e), i));
    if (rank == 0) // a scalar input (a learning rate, a loss's gradient): read once
      decl("const float", fmt::format("x{}", i), widened(i, fmt::format("in{}[0]", i)));
  }
  decl(fmt::format("{} *__restrict__", loops::elementCType(types_.output)), "out",
       types_.output == loops::Element::F32
           ? std::string("a->out")
           : fmt::format("({} *)a->out", loops::elementCType(types_.output)));
  // Counting sums: the product of their extents, once per call (a value the loops then
  // read as an invariant, with no branch in them).
  for (const Red &r : sched_.reductions)
    if (r.placement == Placement::Count) {
      std::string n = floatLiteral(r.countScale);
      for (unsigned v : r.node->vars)
        n += fmt::format(" * (float)(hi{0} > lo{0} ? hi{0} - lo{0} : 0)", v);
      decl("const float", fmt::format("k{}", r.id), n);
    }
  for (unsigned v : op_.outputVars) {
    decl("const i64", fmt::format("n{}", v), fmt::format("hi{0} - lo{0}", v));
    returnIf(fmt::format("n{} <= 0", v), "");
  }
  use("I");
}

std::string Lowering::outputOffset() const {
  std::string off;
  const size_t n = op_.outputVars.size();
  if (flat_ && n >= 2 && flat_->inner == op_.outputVars.back()) {
    for (size_t k = 0; k + 2 < n; ++k) {
      unsigned v = op_.outputVars[k];
      off = k == 0 ? fmt::format("(v{0} - lo{0})", v)
                   : fmt::format("({}) * n{} + (v{} - lo{})", off, v, v, v);
    }
    const unsigned a = flat_->outer, b = flat_->inner;
    return off.empty() ? "fl" : fmt::format("({}) * n{} * n{} + fl", off, a, b);
  }
  for (unsigned k = 0; k < n; ++k) {
    unsigned v = op_.outputVars[k];
    off = k == 0 ? fmt::format("(v{0} - lo{0})", v)
                 : fmt::format("({}) * n{} + (v{} - lo{})", off, v, v, v);
  }
  return off.empty() ? "0" : off;
}

void Lowering::beginFunction(loops::Function::Kind kind, const std::string &name,
                             const std::string &params) {
  loops::Function f;
  f.kind = kind;
  f.name = name;
  f.params = params;
  kernel_.functions.push_back(std::move(f));
  blocks_.assign(1, &kernel_.functions.back().body);
  open_.clear();
}

void Lowering::emitLoaders() {
  for (unsigned i = 0; i < op_.inputs.size(); ++i) {
    unsigned rank = op_.inputs[i].rank;
    if (rank == 0)
      continue;
    std::string params =
        fmt::format("const {} *p, const i64 *q", loops::elementCType(types_.input(i)));
    for (unsigned d = 0; d < rank; ++d)
      params += fmt::format(", i64 c{}", d);
    beginFunction(loops::Function::Kind::Helper, fmt::format("{}_ld{}", kNameToken, i), params);
    std::string outside, region, off;
    for (unsigned d = 0; d < rank; ++d) {
      outside += fmt::format("{0}c{1} < 0 || c{1} >= q[{2}]", d ? " || " : "", d, 3 * d);
      decl("const i64", fmt::format("r{}", d), fmt::format("c{} - q[{}]", d, 3 * d + 1));
      region += fmt::format("{0}r{1} < 0 || r{1} >= q[{2}]", d ? " || " : "", d, 3 * d + 2);
      off = d == 0 ? "r0" : fmt::format("({}) * q[{}] + r{}", off, 3 * d + 2, d);
    }
    returnIf(outside, "0.0f");
    returnIf(region, "TOFU_NAN");
    add(loops::returnNode(widened(i, "p[" + off + "]")));
  }
}

void Lowering::emitTemporaryPass(const Red &t) {
  const std::vector<const Red *> group = sched_.fusedGroup(t.id);
  openScope();
  for (const Red *m : group)
    emitSlot(m->nest, -1);
  openLoop(LoopKind::Parallel, "f", "0", rangeProduct(t.depends));
  decodeRanges(t.depends, "f");
  for (const Red *m : group)
    for (unsigned v : t.depends)
      emitSlot(m->nest, static_cast<int>(v));
  emitSerialReduction(t);
  for (const Red *m : group)
    store(fmt::format("t{}", m->id), "f", accumulator(*m));
  close();
  close();
}

bool Lowering::splitAcrossThreads(const Red &r) const {
  if (dialect_ != KernelDialect::Cpp || !op_.outputVars.empty() ||
      r.placement != Placement::Inline || r.nest != -1 || r.slot != -1 || r.fusedWith >= 0 ||
      r.node->vars.empty() || sched_.fusedGroup(r.id).size() != 1 || opaqueSites() > 0)
    return false;
  const unsigned v = r.node->vars.front();
  for (const StridedVar &x : r.strides)
    if (x.var == v)
      return false;
  for (const PickedVar &x : r.picks)
    if (x.var == v)
      return false;
  return true;
}

void Lowering::emitSplitReduction(const Red &r) {
  const unsigned v = r.node->vars.front();
  decl("float", accumulator(r), identity(r.node->reducer));
  openScope();
  decl("const i64", "parts",
       fmt::format("a->threads > 1 ? (a->threads < {0} ? a->threads : {0}) : 1", kMaxParts));
  decl("float", fmt::format("part[{}]", kMaxParts), "");
  decl("const i64", "span", fmt::format("hi{0} > lo{0} ? hi{0} - lo{0} : 0", v));
  Node &parts = openLoop(LoopKind::Parallel, "t", "0", "parts");
  parts.chunk = 1;
  decl("const i64", {{"plo", fmt::format("lo{} + span * t / parts", v)},
                     {"phi", fmt::format("lo{} + span * (t + 1) / parts", v)}});
  bounds_[v] = {"plo", "phi"};
  emitSerialReduction(r);
  bounds_.clear();
  store("part", "t", accumulator(r));
  close();
  openLoop(LoopKind::Serial, "t", "0", "parts", "", true);
  combine(r.node->reducer, accumulator(r), "part[t]");
  close();
  close();
}

void Lowering::emitCppNest() {
  for (const Red &r : sched_.reductions)
    if (r.placement == Placement::Temporary && r.fusedWith < 0)
      emitTemporaryPass(r);
  const std::vector<unsigned> &ov = op_.outputVars;
  const size_t n = ov.size();
  for (const Red &r : sched_.reductions)
    if (r.placement == Placement::Inline && r.nest == -1 && r.slot == -1 && r.fusedWith < 0) {
      if (splitAcrossThreads(r))
        emitSplitReduction(r);
      else
        emitReduction(r);
    }
  if (n == 0) {
    store("out", "0", value(*op_.body));
    return;
  }
  if (n == 1 && sched_.interchange) {
    // A reduction over the rows of a column (a bias or scale gradient): blocks of the
    // output in parallel, each accumulated row by row.
    const unsigned v = ov[0];
    decl("const i64", "blocks", fmt::format("(n{} + {} - 1) / {}", v, kRowBlock, kRowBlock));
    openLoop(LoopKind::Parallel, "b", "0", "blocks");
    decl("const i64", {{"rlo", fmt::format("lo{} + b * {}", v, kRowBlock)},
                       {"rhi", fmt::format("std::min(hi{}, rlo + {})", v, kRowBlock)}});
    emitInterchanged(*op_.topReduce(), "rlo", "rhi");
    close();
    return;
  }
  if (fast_ && n >= 2 && !sched_.interchange && sched_.vectorInnermost && opaqueSites() == 0 &&
      sched_.parallelLoops + 2 >= n) {
    // The two innermost output loops as one flat loop when the rows read are whole (an
    // element-wise op on 8 x 8 maps: one SIMD loop of 64, not 8 of 8).
    const unsigned a = ov[n - 2], b = ov[n - 1];
    std::vector<const ir::Read *> reads;
    if (!sched_.hasInlineAt(-1, static_cast<int>(a)) && flatReads(*op_.body, a, b, reads)) {
      openIf(flatConditions(b, reads));
      flat_ = FlatPair{a, b};
      emitMainLoops(n - 2);
      flat_.reset();
      elseBranch();
      emitMainLoops(sched_.parallelLoops);
      close();
      return;
    }
  }
  emitMainLoops(sched_.parallelLoops);
}

void Lowering::emitMainLoops(size_t m) {
  const std::vector<unsigned> &ov = op_.outputVars;
  const size_t n = ov.size();
  const size_t rows = flat_ ? n - 2 : n; // output loops before the flat pair
  if (flat_ && m == 0) {
    openLoop(LoopKind::ParallelVector, "fl", "0",
             fmt::format("n{} * n{}", flat_->outer, flat_->inner), "", true);
    store("out", outputOffset(), value(*op_.body));
    close();
    return;
  }
  std::string total;
  for (size_t k = 0; k < m; ++k)
    total += fmt::format("{}n{}", k ? " * " : "", ov[k]);
  const unsigned sites = opaqueSites();
  LoopKind outer = n == 1 && sched_.vectorInnermost ? LoopKind::ParallelVector : LoopKind::Parallel;
  if (sites > 0) { // each thread its own memos
    openScope(Node::Kind::Region);
    decl("TofuOpqMemo", fmt::format("memo[{}]", sites), "");
    outer = LoopKind::Shared;
  }
  openLoop(outer, "f", "0", total);
  if (m == 1) {
    decl("const i64", fmt::format("v{}", ov[0]), fmt::format("lo{} + f", ov[0]));
  } else {
    decl("i64", "rest", "f");
    for (size_t k = m; k-- > 0;) {
      decl("const i64", fmt::format("v{}", ov[k]), fmt::format("lo{0} + rest % n{0}", ov[k]));
      if (k)
        assign("rest", "/=", fmt::format("n{}", ov[k]));
    }
  }
  for (size_t k = 0; k < m; ++k)
    emitSlot(-1, static_cast<int>(ov[k]));
  const bool interchange = sched_.interchange;
  const size_t plain = interchange ? n - 1 : rows; // loops nested as written
  for (size_t k = m; k < plain; ++k) {
    openLoop(k + 1 == n && sched_.vectorInnermost ? LoopKind::Vector : LoopKind::Serial,
             fmt::format("v{}", ov[k]), fmt::format("lo{}", ov[k]), fmt::format("hi{}", ov[k]));
    emitSlot(-1, static_cast<int>(ov[k]));
  }
  if (interchange) {
    emitInterchanged(*op_.topReduce());
  } else if (flat_) {
    openLoop(LoopKind::Vector, "fl", "0", fmt::format("n{} * n{}", flat_->outer, flat_->inner), "",
             true);
    store("out", outputOffset(), value(*op_.body));
    close();
  } else {
    store("out", outputOffset(), value(*op_.body));
  }
  for (size_t k = m; k < plain; ++k)
    close();
  close();
  if (sites > 0)
    close();
}

void Lowering::emitInterchanged(const ir::Reduce &top, const std::string &rowLo,
                                const std::string &rowHi) {
  const unsigned last = op_.outputVars.back();
  const std::string var = fmt::format("v{}", last),
                    lo = rowLo.empty() ? fmt::format("lo{}", last) : rowLo,
                    hi = rowHi.empty() ? fmt::format("hi{}", last) : rowHi;
  const std::string off = outputOffset();
  if (types_.output != loops::Element::F32) // print() schedules such kernels otherwise
    fail("an interchanged nest accumulating into a bfloat16 output");
  openLoop(LoopKind::Vector, var, lo, hi, "", true);
  store("out", off, identity(top.reducer));
  close();
  const Red &sched = sched_.of(&top);
  for (unsigned v : top.vars)
    openReductionLoop(sched, v, {});
  openLoop(LoopKind::Vector, var, lo, hi, "", true);
  for (const StridedVar &sv : sched.strides)
    knownTrue_.insert(sv.guard);
  combine(top.reducer, "out[" + off + "]", value(*top.body));
  knownTrue_.clear();
  exact_.clear();
  close();
  for (size_t k = 0; k < top.vars.size(); ++k)
    close();
}

void Lowering::decodeRanges(const std::vector<unsigned> &vars, const std::string &flat) {
  decl("i64", "rest", flat);
  for (size_t k = vars.size(); k-- > 0;) {
    const unsigned v = vars[k];
    decl("const i64", fmt::format("v{}", v), fmt::format("lo{0} + rest % (hi{0} - lo{0})", v));
    if (k)
      assign("rest", "/=", fmt::format("hi{0} - lo{0}", v));
  }
  use("rest");
}

void Lowering::decode(const std::vector<unsigned> &vars, const std::string &flat) {
  if (vars.empty())
    return;
  decl("i64", "rest", flat);
  for (size_t k = vars.size(); k-- > 0;) {
    decl("const i64", fmt::format("v{}", vars[k]), fmt::format("lo{0} + rest % n{0}", vars[k]));
    if (k)
      assign("rest", "/=", fmt::format("n{}", vars[k]));
  }
}

std::string Lowering::extentProduct(const std::vector<unsigned> &vars) {
  std::string total = "1";
  for (unsigned v : vars)
    total += fmt::format(" * n{}", v);
  return total;
}

void Lowering::emitCudaNest() {
  const std::vector<unsigned> &ov = op_.outputVars;
  if (!block_) {
    decl("const i64", "total", extentProduct(ov));
    openLoop(LoopKind::GridThreads, "f", "", "total");
    decode(ov, "f");
    emitSlot(-1, -1);
    for (unsigned v : ov)
      emitSlot(-1, static_cast<int>(v));
    store("out", outputOffset(), value(*op_.body));
    close();
    return;
  }
  const std::vector<unsigned> outer = blockOutputVars();
  std::vector<unsigned> inner;
  for (unsigned v : ov)
    if (std::find(outer.begin(), outer.end(), v) == outer.end())
      inner.push_back(v);
  decl("const i64", "total", extentProduct(outer));
  openLoop(LoopKind::GridBlocks, "f", "", "total");
  decode(outer, "f");
  collective_ = true; // the per-element reductions: they use only the block's variables
  for (const Red &r : sched_.reductions)
    if (outerSlot(r))
      emitReduction(r);
  collective_ = false;
  if (inner.empty()) {
    decl("const float", "value", value(*op_.body));
    openIf("threadIdx.x == 0", true);
    store("out", outputOffset(), "value");
    close();
  } else {
    decl("const i64", "per", extentProduct(inner));
    openLoop(LoopKind::BlockThreads, "g", "", "per");
    decode(inner, "g");
    store("out", outputOffset(), value(*op_.body));
    close();
  }
  close();
}

} // namespace kernelgen
} // namespace tofu
