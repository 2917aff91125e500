// The kernel scheduler (see schedule.h).
#include "codegen/schedule.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "analysis/strategy.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;

/// The variables a reduction's value depends on (those it uses and does not bind).
std::set<unsigned> freeVars(const ir::Reduce &r) {
  std::set<unsigned> used, bound;
  ir::walk(r, [&](const ir::Expr &e) {
    if (const auto *v = dyn_cast<ir::VarRef>(&e))
      used.insert(v->var);
    else if (const auto *inner = dyn_cast<ir::Reduce>(&e))
      bound.insert(inner->vars.begin(), inner->vars.end());
  });
  std::set<unsigned> out;
  for (unsigned v : used)
    if (!bound.count(v))
      out.insert(v);
  return out;
}

/// A text that two reductions share exactly when they compute the same value: the same
/// expression once each bound variable is renamed by the order it is bound in, with each
/// bound variable's extent source (the input dimension it indexes alone or its explicit
/// extent; a nested reduction's variables always range over their whole extent, so equal
/// sources mean equal ranges). Empty when the reduction must not be shared.
class CanonicalKey {
public:
  explicit CanonicalKey(const InstOp &op) : op_(op) {}

  std::string of(const ir::Reduce &r) {
    bound_.clear();
    ok_ = true;
    std::string s = expr(r);
    return ok_ ? s : std::string();
  }

private:
  std::string var(unsigned v) const {
    auto it = bound_.find(v);
    return it == bound_.end() ? fmt::format("v{}", v) : fmt::format("b{}", it->second);
  }

  std::string coord(const ir::Coord &c) {
    switch (c.kind) {
    case ir::Coord::Kind::Affine:
      return "a" + expr(*c.expr);
    case ir::Coord::Kind::DataDependent:
      return "d" + expr(*c.expr);
    case ir::Coord::Kind::Slice:
      return ":";
    case ir::Coord::Kind::Splat:
      ok_ = false;
      return "*";
    }
    return "?";
  }

  std::string list(const std::vector<ir::ExprPtr> &xs) {
    std::string s;
    for (const ir::ExprPtr &x : xs)
      s += expr(*x) + ",";
    return s;
  }

  std::string coords(const std::vector<ir::Coord> &cs) {
    std::string s;
    for (const ir::Coord &c : cs)
      s += coord(c) + ",";
    return s;
  }

  std::string expr(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const: {
      const auto &c = cast<ir::Const>(e);
      return c.isInt ? fmt::format("i{}", c.intValue) : fmt::format("f{:a}", c.value);
    }
    case ir::ExprKind::ExtentRef: {
      const auto &x = cast<ir::ExtentRef>(e);
      return fmt::format("x{}.{}", x.input, x.dim);
    }
    case ir::ExprKind::VarRef:
      return var(cast<ir::VarRef>(e).var);
    case ir::ExprKind::Read: {
      const auto &r = cast<ir::Read>(e);
      return fmt::format("in{}[{}]", r.input, coords(r.coords));
    }
    case ir::ExprKind::OpaqueCall: {
      const auto &c = cast<ir::OpaqueCall>(e);
      return fmt::format("{}({})[{}]", c.function, list(c.args), coords(c.coords));
    }
    case ir::ExprKind::Reduce: {
      const auto &r = cast<ir::Reduce>(e);
      std::string s = fmt::format("R{}(", static_cast<int>(r.reducer));
      for (unsigned v : r.vars) {
        const unsigned k = static_cast<unsigned>(bound_.size());
        bound_[v] = k;
        const InstVar &iv = op_.vars[v];
        if (iv.fixedExtent)
          s += fmt::format("b{}:{},", k, *iv.fixedExtent);
        else if (iv.extentDim)
          s += fmt::format("b{}:x{}.{},", k, iv.extentDim->first, iv.extentDim->second);
        else
          ok_ = false;
      }
      return s + "|" + expr(*r.body) + ")";
    }
    case ir::ExprKind::Apply: {
      const auto &a = cast<ir::Apply>(e);
      return fmt::format("A{}({})", static_cast<int>(a.fn), list(a.args));
    }
    case ir::ExprKind::Neg:
      return "-(" + expr(*cast<ir::Neg>(e).operand) + ")";
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      return fmt::format("({}{}{})", expr(*b.lhs), ast::binaryOpSpelling(b.op), expr(*b.rhs));
    }
    case ir::ExprKind::TensorRef: {
      const auto &t = cast<ir::TensorRef>(e);
      if (t.source != ir::TensorRef::Source::Input)
        ok_ = false;
      return fmt::format("T{}", t.input);
    }
    case ir::ExprKind::AttrRef:
    case ir::ExprKind::OpCall:
      break; // instantiation removes these
    }
    ok_ = false;
    return "?";
  }

  const InstOp &op_;
  std::map<unsigned, unsigned> bound_;
  bool ok_ = true;
};

const ir::Const *asConst(const ir::Expr &e) { return dyn_cast<ir::Const>(&e); }

/// A sum that counts: its body is the constant c, or `0 * e + c` (either order of each
/// operation), the form TDL writes a count in. Gives c.
std::optional<double> countedConstant(const ir::Reduce &r) {
  if (r.reducer != ir::Reducer::Sum)
    return std::nullopt;
  const ir::Expr &body = *r.body;
  if (const ir::Const *c = asConst(body))
    return c->value;
  const auto *add = dyn_cast<ir::Binary>(&body);
  if (!add || add->op != ast::BinaryOp::Add)
    return std::nullopt;
  auto zeroTimes = [](const ir::Expr &e) {
    const auto *mul = dyn_cast<ir::Binary>(&e);
    if (!mul || mul->op != ast::BinaryOp::Mul)
      return false;
    const ir::Const *l = asConst(*mul->lhs), *r = asConst(*mul->rhs);
    return (l && l->value == 0) || (r && r->value == 0);
  };
  const ir::Const *l = asConst(*add->lhs), *rc = asConst(*add->rhs);
  if (rc && zeroTimes(*add->lhs))
    return rc->value;
  if (l && zeroTimes(*add->rhs))
    return l->value;
  return std::nullopt;
}

/// The coefficient of variable `v` in integer expression `e` when `e` is affine in `v`
/// with a constant coefficient (other variables and extents may appear anyhow, outside
/// products with `v`); none otherwise.
std::optional<int64_t> coefficientOf(const ir::Expr &e, unsigned v) {
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return cast<ir::Const>(e).isInt ? std::optional<int64_t>(0) : std::nullopt;
  case ir::ExprKind::VarRef:
    return cast<ir::VarRef>(e).var == v ? 1 : 0;
  case ir::ExprKind::ExtentRef:
    return 0;
  case ir::ExprKind::Neg: {
    auto c = coefficientOf(*cast<ir::Neg>(e).operand, v);
    return c ? std::optional<int64_t>(-*c) : std::nullopt;
  }
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    auto l = coefficientOf(*b.lhs, v), r = coefficientOf(*b.rhs, v);
    if (!l || !r)
      return std::nullopt;
    switch (b.op) {
    case ast::BinaryOp::Add:
      return *l + *r;
    case ast::BinaryOp::Sub:
      return *l - *r;
    case ast::BinaryOp::Mul: {
      const auto *lc = dyn_cast<ir::Const>(b.lhs.get());
      const auto *rc = dyn_cast<ir::Const>(b.rhs.get());
      if (*l == 0 && *r == 0)
        return 0;
      if (lc && lc->isInt && *l == 0)
        return lc->intValue * *r;
      if (rc && rc->isInt && *r == 0)
        return rc->intValue * *l;
      return std::nullopt;
    }
    case ast::BinaryOp::Div:
    case ast::BinaryOp::Mod:
      return *l == 0 && *r == 0 ? std::optional<int64_t>(0) : std::nullopt;
    default:
      return std::nullopt;
    }
  }
  default:
    return std::nullopt;
  }
}

/// The `select(cond, v, 0)` a sum's terms are, when its terms are zero wherever `cond` is:
/// the body is the select, or the select times or over a nonzero constant or count (the
/// mean's `/ Sum(lambda j: 0 * x[j] + 1)`), which keeps a zero term zero.
const ir::Apply *zeroElseSelect(const ir::Reduce &r) {
  if (r.reducer != ir::Reducer::Sum)
    return nullptr;
  const ir::Expr *body = r.body.get();
  if (const auto *b = dyn_cast<ir::Binary>(body);
      b && (b->op == ast::BinaryOp::Div || b->op == ast::BinaryOp::Mul)) {
    auto safe = [](const ir::Expr &d) {
      if (const auto *c = dyn_cast<ir::Const>(&d))
        return c->value != 0 && std::isfinite(c->value);
      const auto *n = dyn_cast<ir::Reduce>(&d);
      auto k = n ? countedConstant(*n) : std::nullopt;
      return k && *k != 0 && std::isfinite(*k);
    };
    if (safe(*b->rhs))
      body = b->lhs.get();
    else if (b->op == ast::BinaryOp::Mul && safe(*b->lhs))
      body = b->rhs.get();
  }
  const auto *sel = dyn_cast<ir::Apply>(body);
  if (!sel || sel->fn != ir::Builtin::Select || sel->args.size() != 3)
    return nullptr;
  const auto *zero = dyn_cast<ir::Const>(sel->args[2].get());
  return zero && zero->value == 0 ? sel : nullptr;
}

/// The factors `a == b` of the condition of a sum whose terms are `select(cond, v, 0)`
/// (zeroElseSelect); none for other sums.
std::vector<const ir::Binary *> equalityFactors(const ir::Reduce &r) {
  std::vector<const ir::Binary *> out;
  const ir::Apply *sel = zeroElseSelect(r);
  if (!sel)
    return out;
  std::vector<const ir::Expr *> factors;
  ir::operandsOf(*sel->args[0], ast::BinaryOp::Mul, factors);
  for (const ir::Expr *f : factors)
    if (const auto *eq = dyn_cast<ir::Binary>(f); eq && eq->op == ast::BinaryOp::Eq)
      out.push_back(eq);
  return out;
}

/// The congruences of a sum's condition that its variables can step through (StridedVar):
/// its terms are `select(cond, v, 0)` (zeroElseSelect) and a factor of `cond` is `X % s == 0` with
/// X affine in one of the sum's variables (constant coefficient) and otherwise only in variables
/// bound before that one's loop. One per variable, each factor used once.
std::vector<StridedVar> stridesOf(const ir::Reduce &r) {
  std::vector<StridedVar> out;
  for (const ir::Binary *eq : equalityFactors(r)) {
    const auto *mod = dyn_cast<ir::Binary>(eq->lhs.get());
    const auto *z = dyn_cast<ir::Const>(eq->rhs.get());
    const auto *s = mod ? dyn_cast<ir::Const>(mod->rhs.get()) : nullptr;
    if (!mod || mod->op != ast::BinaryOp::Mod || !z || !z->isInt || z->intValue != 0 || !s ||
        !s->isInt || s->intValue <= 1)
      continue;
    std::set<unsigned> used;
    ir::walk(*mod->lhs, [&](const ir::Expr &e) {
      if (const auto *v = dyn_cast<ir::VarRef>(&e))
        used.insert(v->var);
    });
    for (size_t k = 0; k < r.vars.size(); ++k) {
      const unsigned v = r.vars[k];
      auto c = coefficientOf(*mod->lhs, v);
      bool taken = false;
      for (const StridedVar &o : out)
        taken |= o.var == v;
      if (!c || *c == 0 || taken)
        continue;
      bool inner = false; // uses a variable of a loop inside v's
      for (size_t j = k + 1; j < r.vars.size(); ++j)
        inner |= used.count(r.vars[j]) > 0;
      if (inner)
        continue;
      out.push_back({v, eq, mod->lhs.get(), *c, s->intValue});
      break;
    }
  }
  return out;
}

/// The variables of a sum that its condition pins to one value (PickedVar): its terms are
/// `select(cond, v, 0)` (zeroElseSelect) and a factor of `cond` is `var == e` or `e == var`, e
/// using no variable of a loop inside var's (nor var itself).
std::vector<PickedVar> picksOf(const ir::Reduce &r, const std::vector<StridedVar> &strides) {
  std::vector<PickedVar> out;
  for (const ir::Binary *eq : equalityFactors(r)) {
    for (auto [side, other] :
         {std::pair{eq->lhs.get(), eq->rhs.get()}, {eq->rhs.get(), eq->lhs.get()}}) {
      const auto *v = dyn_cast<ir::VarRef>(side);
      if (!v)
        continue;
      auto at = std::find(r.vars.begin(), r.vars.end(), v->var);
      bool taken = at == r.vars.end();
      for (const StridedVar &s : strides)
        taken |= s.var == v->var;
      for (const PickedVar &p : out)
        taken |= p.var == v->var;
      if (taken)
        continue;
      bool inner = false;
      ir::walk(*other, [&](const ir::Expr &e) {
        if (const auto *u = dyn_cast<ir::VarRef>(&e))
          inner |= std::find(at, r.vars.end(), u->var) != r.vars.end();
        inner |= llvm::isa<ir::Reduce>(e); // a value computed at another loop
      });
      if (inner)
        continue;
      out.push_back({v->var, other});
      break;
    }
  }
  return out;
}

class Scheduler {
public:
  Scheduler(const InstOp &op, ScheduleTarget target) : op_(op), key_(op) {
    s_.target = target;
    ir::walk(*op.body, [&](const ir::Expr &e) { opaque_ |= llvm::isa<ir::OpaqueCall>(e); });
    // An opaque call keeps a per-thread memo of its last result, which a temporary's own
    // parallel pass would not have: such ops keep every reduction inline.
    temporaries_ = target != ScheduleTarget::Cuda && !opaque_;
  }

  KernelSchedule run() {
    std::vector<unsigned> chain(op_.outputVars.begin(), op_.outputVars.end());
    assign(*op_.body, chain, chain.size(), -1);
    for (unsigned id : post_)
      s_.reductions.push_back(all_[id]);
    if (s_.target == ScheduleTarget::Cpp)
      fuse();
    scheduleMainNest();
    return std::move(s_);
  }

private:
  /// Places the reductions of `e`, computed inside the loops `chain` (outermost first) of
  /// nest `nest`, whose first `base` are the nest's own (the output variables, or a
  /// temporary's index) and the rest enclosing reductions' variables.
  void assign(const ir::Expr &e, const std::vector<unsigned> &chain, size_t base, int nest) {
    const auto *r = dyn_cast<ir::Reduce>(&e);
    if (!r) {
      ir::forEachChildExpr(e, [&](const ir::Expr &c) { assign(c, chain, base, nest); });
      return;
    }
    ScheduledReduction red;
    red.node = r;
    red.id = static_cast<unsigned>(all_.size());
    red.nest = nest;
    const std::set<unsigned> free = freeVars(*r);
    int pos = -1; // the innermost loop of the chain whose variable it uses
    for (size_t k = 0; k < chain.size(); ++k)
      if (free.count(chain[k])) {
        red.depends.push_back(chain[k]);
        pos = static_cast<int>(k);
      }
    assert(red.depends.size() == free.size() && "a free variable outside the enclosing loops");
    auto done = [&](ScheduledReduction x) {
      all_.push_back(std::move(x));
      post_.push_back(all_.back().id);
    };
    if (auto c = countedConstant(*r)) {
      red.placement = ScheduledReduction::Placement::Count;
      red.countScale = *c;
      return done(std::move(red));
    }
    const std::string key = key_.of(*r);
    if (!key.empty()) {
      auto it = seen_.find(key);
      if (it != seen_.end()) {
        const ScheduledReduction &rep = all_[it->second];
        // The first one is visible here when it is in a buffer, or a scalar of this nest
        // (same variables, so computed at the same loop).
        if (rep.placement == ScheduledReduction::Placement::Temporary || rep.nest == nest) {
          red.placement = ScheduledReduction::Placement::Alias;
          red.aliasOf = rep.id;
          return done(std::move(red));
        }
      } else {
        seen_[key] = red.id;
      }
    }
    bool redundant = false; // a loop outside its slot runs over a variable it does not use
    for (int k = 0; k < pos; ++k)
      redundant |= !free.count(chain[k]);
    // Launches of their own (CudaPasses): a reduction that depends on no loop, and one in a
    // temporary's nest that uses none of the enclosing reductions' variables.
    const bool ownLaunch = s_.target == ScheduleTarget::CudaPasses &&
                           (pos < 0 || (nest != -1 && pos < static_cast<int>(base)));
    std::vector<unsigned> inner;
    size_t innerBase = 0;
    if ((redundant || ownLaunch) && temporaries_) {
      red.placement = ScheduledReduction::Placement::Temporary;
      red.nest = static_cast<int>(red.id);
      inner = red.depends;
      innerBase = inner.size();
    } else {
      red.placement = ScheduledReduction::Placement::Inline;
      red.slot = pos < 0 ? -1 : static_cast<int>(chain[pos]);
      inner.assign(chain.begin(), chain.begin() + (pos + 1));
      red.loops = inner;
      innerBase = std::min(base, inner.size());
    }
    red.strides = stridesOf(*r);
    red.picks = picksOf(*r, red.strides);
    inner.insert(inner.end(), r->vars.begin(), r->vars.end());
    const unsigned id = red.id;
    const int innerNest = red.nest;
    // Known before its body (repeats inside see it), listed after it (post-order).
    all_.push_back(std::move(red));
    assign(*r->body, inner, innerBase, innerNest);
    post_.push_back(id);
  }

  /// The reductions `e` reads (repeats resolved to what they repeat), not looking inside
  /// the reductions it reads.
  std::set<unsigned> readsOf(const ir::Expr &e) const {
    std::set<unsigned> out;
    std::function<void(const ir::Expr &)> visit = [&](const ir::Expr &x) {
      if (const auto *r = dyn_cast<ir::Reduce>(&x)) {
        out.insert(s_.resolved(s_.of(r)).id);
        return;
      }
      ir::forEachChildExpr(x, visit);
    };
    visit(e);
    return out;
  }

  /// Whether two reductions' loops run over the same ranges: as many variables, each with
  /// the same extent source, none of them a top-level reduction variable (a share may
  /// take a slice of those).
  bool sameLoops(const ir::Reduce &a, const ir::Reduce &b) const {
    if (a.vars.size() != b.vars.size() || &a == op_.topReduce() || &b == op_.topReduce())
      return false;
    for (size_t k = 0; k < a.vars.size(); ++k) {
      const InstVar &x = op_.vars[a.vars[k]], &y = op_.vars[b.vars[k]];
      if (!(x.fixedExtent || x.extentDim) || x.fixedExtent != y.fixedExtent ||
          x.extentDim != y.extentDim)
        return false;
    }
    return true;
  }

  /// Horizontal fusion: each reduction joins the first earlier one computed at the same
  /// point (a temporary over the same variables, or an inline one in the same nest and
  /// loop) over the same loops, when neither computes anything inside its own loops, it
  /// reads no member of that group, and everything it reads comes before the group.
  void fuse() {
    using P = ScheduledReduction::Placement;
    std::vector<ScheduledReduction> &rs = s_.reductions;
    std::map<unsigned, size_t> position;
    for (size_t k = 0; k < rs.size(); ++k)
      position[rs[k].id] = k;
    auto computesInside = [&](const ScheduledReduction &r) {
      const int nest = r.placement == P::Temporary ? static_cast<int>(r.id) : r.nest;
      for (unsigned v : r.node->vars)
        if (s_.hasInlineAt(nest, static_cast<int>(v)))
          return true;
      return false;
    };
    auto samePoint = [&](const ScheduledReduction &a, const ScheduledReduction &b) {
      if (a.placement != b.placement)
        return false;
      if (a.placement == P::Temporary)
        return a.depends == b.depends;
      return a.placement == P::Inline && a.nest == b.nest && a.slot == b.slot;
    };
    std::vector<std::vector<size_t>> groups; // positions, leader first
    for (size_t k = 0; k < rs.size(); ++k) {
      ScheduledReduction &x = rs[k];
      if ((x.placement != P::Temporary && x.placement != P::Inline) || computesInside(x) ||
          !x.strides.empty() || !x.picks.empty())
        continue;
      const std::set<unsigned> reads = readsOf(*x.node->body);
      bool joined = false;
      for (std::vector<size_t> &g : groups) {
        const ScheduledReduction &leader = rs[g.front()];
        if (!samePoint(leader, x) || !sameLoops(*leader.node, *x.node) ||
            leader.node->reducer != x.node->reducer || !leader.strides.empty() ||
            !leader.picks.empty())
          continue;
        bool ok = true;
        for (unsigned id : reads) {
          const ScheduledReduction &read = rs[position.at(id)];
          // Inline reductions of the same point are computed in order there; anything
          // else read must be complete before the group's nest runs.
          if (read.placement == P::Count)
            continue;
          if ((read.placement == P::Inline && read.nest == x.nest && read.slot == x.slot &&
               x.placement == P::Inline) ||
              position.at(id) >= g.front())
            ok = false;
        }
        if (!ok)
          continue;
        x.fusedWith = static_cast<int>(leader.id);
        g.push_back(k);
        joined = true;
        break;
      }
      if (!joined)
        groups.push_back({k});
    }
  }

  /// The C++ main nest: the leading output loops whose bodies compute nothing are
  /// flattened into the parallel loop; the innermost is a SIMD loop when nothing is
  /// computed at its start; a body that is one contraction is interchanged.
  void scheduleMainNest() {
    const std::vector<unsigned> &ov = op_.outputVars;
    const size_t n = ov.size();
    if (n == 0)
      return;
    unsigned m = 1;
    while (m + 1 < n && !s_.hasInlineAt(-1, static_cast<int>(ov[m - 1])))
      ++m;
    s_.parallelLoops = m;
    s_.vectorInnermost = !s_.hasInlineAt(-1, static_cast<int>(ov.back())) && (n > 1 || !opaque_);
    const ir::Reduce *top = op_.topReduce();
    if (top && !top->vars.empty() && (n >= 2 || columnReduction(*top))) {
      const ScheduledReduction &t = s_.of(top);
      unsigned inlineInMain = 0;
      for (const ScheduledReduction &r : s_.reductions)
        inlineInMain += r.placement == ScheduledReduction::Placement::Inline && r.nest == -1;
      bool rowStride = !t.picks.empty(); // a stride's start (a pick) moves with the row
      for (const StridedVar &sv : t.strides)
        ir::walk(*sv.offset, [&](const ir::Expr &e) {
          if (const auto *v = dyn_cast<ir::VarRef>(&e))
            rowStride |= v->var == ov.back();
        });
      s_.interchange = t.placement == ScheduledReduction::Placement::Inline && t.nest == -1 &&
                       t.slot == static_cast<int>(ov.back()) && inlineInMain == 1 && !rowStride;
    }
  }

  /// A reduction to a vector whose reads run along the output (`Sum(lambda p: dy[p, f])`):
  /// some read's last coordinate is the output variable and none's is a reduction variable.
  bool columnReduction(const ir::Reduce &top) const {
    if (op_.outputVars.size() != 1)
      return false;
    bool along = false, across = false;
    ir::walk(*top.body, [&](const ir::Expr &e) {
      const auto *r = dyn_cast<ir::Read>(&e);
      if (!r || r->coords.empty())
        return;
      std::optional<unsigned> v = ir::exactVar(r->coords.back());
      if (v && *v == op_.outputVars[0])
        along = true;
      else if (v && std::find(top.vars.begin(), top.vars.end(), *v) != top.vars.end())
        across = true;
    });
    return along && !across;
  }

  const InstOp &op_;
  CanonicalKey key_;
  KernelSchedule s_;
  bool opaque_ = false; ///< the body calls an opaque function
  bool temporaries_ = false;
  std::vector<ScheduledReduction> all_;  ///< by id, in the order they are met
  std::vector<unsigned> post_;           ///< ids in post-order
  std::map<std::string, unsigned> seen_; ///< canonical key -> the first reduction's id
};

} // namespace

const ScheduledReduction &KernelSchedule::of(const ir::Reduce *node) const {
  for (const ScheduledReduction &r : reductions)
    if (r.node == node)
      return r;
  assert(false && "a reduction the schedule does not know");
  return reductions.front();
}

std::vector<std::vector<unsigned>> KernelSchedule::temporaries() const {
  std::vector<std::vector<unsigned>> out;
  for (const ScheduledReduction &r : reductions)
    if (r.placement == ScheduledReduction::Placement::Temporary)
      out.push_back(r.depends);
  return out;
}

const ScheduledReduction &KernelSchedule::resolved(const ScheduledReduction &r) const {
  if (r.placement != ScheduledReduction::Placement::Alias)
    return r;
  for (const ScheduledReduction &o : reductions)
    if (o.id == r.aliasOf)
      return o;
  assert(false && "an alias of a reduction the schedule does not know");
  return r;
}

std::vector<const ScheduledReduction *> KernelSchedule::fusedGroup(unsigned leader) const {
  std::vector<const ScheduledReduction *> out;
  for (const ScheduledReduction &r : reductions)
    if (r.id == leader || r.fusedWith == static_cast<int>(leader))
      out.push_back(&r);
  return out;
}

bool KernelSchedule::hasInlineAt(int nest, int slot) const {
  for (const ScheduledReduction &r : reductions)
    if (r.placement == ScheduledReduction::Placement::Inline && r.nest == nest && r.slot == slot)
      return true;
  return false;
}

KernelSchedule scheduleKernel(const InstOp &op, ScheduleTarget target) {
  return Scheduler(op, target).run();
}

double visitedTerms(const ScheduledReduction &r, const std::vector<Range> &ranges) {
  double n = 1;
  for (unsigned v : r.node->vars) {
    double visited = static_cast<double>(std::max<int64_t>(0, ranges[v].size()));
    for (const PickedVar &pv : r.picks)
      if (pv.var == v)
        visited = std::min(visited, 1.0);
    for (const StridedVar &sv : r.strides)
      if (sv.var == v) {
        const int64_t c = sv.coefficient < 0 ? -sv.coefficient : sv.coefficient;
        visited = visited * static_cast<double>(std::gcd(c, sv.modulus)) /
                  static_cast<double>(sv.modulus);
      }
    n *= visited;
  }
  return n;
}

double scheduledIterations(const InstOp &op, const KernelSchedule &s,
                           const std::vector<Range> &ranges) {
  auto extent = [&](unsigned v) { return static_cast<double>(ranges[v].size()); };
  double total = 1;
  for (unsigned v : op.outputVars)
    total *= extent(v);
  for (const ScheduledReduction &r : s.reductions) {
    using P = ScheduledReduction::Placement;
    if (r.placement != P::Inline && r.placement != P::Temporary)
      continue;
    double n = 1;
    for (unsigned v : r.placement == P::Inline ? r.loops : r.depends)
      if (std::find(r.node->vars.begin(), r.node->vars.end(), v) == r.node->vars.end())
        n *= extent(v);
    total += n * visitedTerms(r, ranges);
  }
  return total;
}

std::string describeSchedule(const InstOp &op, const KernelSchedule &s) {
  auto names = [&](const std::vector<unsigned> &vars) {
    std::string out;
    for (unsigned v : vars)
      out += (out.empty() ? "" : ", ") + op.vars[v].name;
    return out;
  };
  std::string out;
  for (const ScheduledReduction &r : s.reductions) {
    out += fmt::format("r{} {}({}) ", r.id, reducerName(r.node->reducer), names(r.node->vars));
    switch (r.placement) {
    case ScheduledReduction::Placement::Inline:
      out += "inline";
      if (r.nest >= 0)
        out += fmt::format(" in r{}'s pass", r.nest);
      out += r.slot < 0 ? " once" : " at " + op.vars[r.slot].name;
      break;
    case ScheduledReduction::Placement::Temporary:
      out += "temporary [" + names(r.depends) + "]";
      break;
    case ScheduledReduction::Placement::Alias:
      out += fmt::format("alias r{}", r.aliasOf);
      break;
    case ScheduledReduction::Placement::Count:
      out += "count";
      break;
    }
    if (r.fusedWith >= 0)
      out += fmt::format(" (loops of r{})", r.fusedWith);
    for (const StridedVar &sv : r.strides)
      out += fmt::format("; {} by congruence mod {}", op.vars[sv.var].name, sv.modulus);
    for (const PickedVar &pv : r.picks)
      out += fmt::format("; {} picked", op.vars[pv.var].name);
    out += "\n";
  }
  if (!op.outputVars.empty() && s.target == ScheduleTarget::Cpp) {
    std::vector<unsigned> par(op.outputVars.begin(), op.outputVars.begin() + s.parallelLoops);
    out += "main: parallel " +
           (op.outputVars.size() == 1 && s.interchange ? "blocks of " + names(par) : names(par));
    if (s.interchange)
      out += "; interchanged";
    else if (s.vectorInnermost)
      out += "; vector " + op.vars[op.outputVars.back()].name;
    out += "\n";
  }
  return out;
}

} // namespace tofu
