// Semantic checks of an op's expressions (analysis/sema_internal.h): values and names,
// extents and constants, index expressions and their affinity, calls and reductions.
#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "analysis/sema_internal.h"
#include "fmt/format.h"

namespace tofu {
namespace semaimpl {

// =====================================================================================
// Expressions
// =====================================================================================

namespace {

template <typename T> std::unique_ptr<T> make(SourceLoc loc) {
  auto e = std::make_unique<T>();
  e->loc = loc;
  return e;
}

} // namespace

ir::ExprPtr OpChecker::value(const ast::Expr &e) {
  switch (e.kind()) {
  case ast::ExprKind::IntLit: {
    auto c = make<ir::Const>(e.loc);
    c->isInt = true;
    c->intValue = cast<ast::IntLit>(e).value;
    c->value = static_cast<double>(c->intValue);
    return c;
  }
  case ast::ExprKind::FloatLit: {
    auto c = make<ir::Const>(e.loc);
    c->value = cast<ast::FloatLit>(e).value;
    return c;
  }
  case ast::ExprKind::Name:
    return valueName(cast<ast::Name>(e));
  case ast::ExprKind::ExtentOf:
    return extentOf(cast<ast::ExtentOf>(e));
  case ast::ExprKind::Index:
    return valueIndex(cast<ast::Index>(e));
  case ast::ExprKind::Call:
    return valueCall(cast<ast::Call>(e), nullptr, &e);
  case ast::ExprKind::Lambda:
    error(e.begin, "a lambda is only allowed as the body of an op or as the argument of a "
                   "reducer");
    return nullptr;
  case ast::ExprKind::Neg: {
    auto operand = value(*cast<ast::Neg>(e).operand);
    if (!operand)
      return nullptr;
    auto n = make<ir::Neg>(e.loc);
    n->operand = std::move(operand);
    return n;
  }
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    auto lhs = value(*b.lhs);
    auto rhs = value(*b.rhs);
    if (!lhs || !rhs)
      return nullptr;
    auto r = make<ir::Binary>(e.loc);
    r->op = b.op;
    r->lhs = std::move(lhs);
    r->rhs = std::move(rhs);
    return r;
  }
  }
  return nullptr;
}

ir::ExprPtr OpChecker::valueName(const ast::Name &n) {
  if (auto v = lookupVar(n.name)) {
    if (op_.vars[*v].isGroup) {
      error(n.loc, fmt::format("group '{}' can only be expanded inside an index list, as '*{}'",
                               n.name, n.name));
      return nullptr;
    }
    auto r = make<ir::VarRef>(n.loc);
    r->var = *v;
    return r;
  }
  if (auto a = op_.findAttr(n.name)) {
    auto r = make<ir::AttrRef>(n.loc);
    r->attr = *a;
    return r;
  }
  if (auto in = op_.findInput(n.name)) {
    used_[*in] = true;
    error(n.loc, fmt::format("input '{}' must be indexed, e.g. '{}[i]'", n.name, n.name));
    return nullptr;
  }
  if (n.name == "inf" || n.name == "nan") {
    auto c = make<ir::Const>(n.loc);
    c->value = n.name == "inf" ? std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::quiet_NaN();
    return c;
  }
  if (mc_.hasOp(n.name) || mc_.isOpaque(n.name) || ir::lookupBuiltin(n.name) ||
      ir::lookupReducer(n.name)) {
    error(n.loc, fmt::format("'{}' is a function and must be called", n.name));
    return nullptr;
  }
  if (inGrad_ && (n.name == "dOut" || n.name == "out")) {
    error(n.loc, fmt::format("'{}' is a tensor and can only be passed to the op a grad clause "
                             "calls",
                             n.name));
    return nullptr;
  }
  error(n.loc, fmt::format("unknown name '{}'", n.name));
  return nullptr;
}

ir::ExprPtr OpChecker::extentOf(const ast::ExtentOf &x) {
  const auto *base = dyn_cast<ast::Name>(x.base.get());
  std::optional<unsigned> input = base ? op_.findInput(base->name) : std::nullopt;
  if (!input) {
    error(x.begin, fmt::format("'{}': only an input's extent can be taken, as 'x.0'", x.text));
    return nullptr;
  }
  used_[*input] = true;
  if (x.dim < 0 || x.dim > 1000000) {
    error(x.begin, fmt::format("dimension {} of '{}' is out of range", x.dim, base->name));
    return nullptr;
  }
  auto r = make<ir::ExtentRef>(x.begin);
  r->input = *input;
  r->dim = static_cast<unsigned>(x.dim);
  extents_.push_back({r->input, r->dim, x.begin});
  return r;
}

ir::ExprPtr OpChecker::constant(const ast::Expr &e, const char *where) {
  switch (e.kind()) {
  case ast::ExprKind::IntLit: {
    auto c = make<ir::Const>(e.loc);
    c->isInt = true;
    c->intValue = cast<ast::IntLit>(e).value;
    c->value = static_cast<double>(c->intValue);
    return c;
  }
  case ast::ExprKind::Name: {
    const auto &n = cast<ast::Name>(e);
    if (auto a = op_.findAttr(n.name)) {
      auto r = make<ir::AttrRef>(n.loc);
      r->attr = *a;
      return r;
    }
    if (lookupVar(n.name))
      error(n.loc, fmt::format("index variable '{}' cannot appear in {}, which must be an "
                               "integer constant",
                               n.name, where));
    else if (op_.findInput(n.name))
      error(n.loc, fmt::format("input '{}' cannot appear in {}; its extents can, as '{}.0'", n.name,
                               where, n.name));
    else
      error(n.loc, fmt::format("unknown name '{}' in {}", n.name, where));
    return nullptr;
  }
  case ast::ExprKind::ExtentOf:
    return extentOf(cast<ast::ExtentOf>(e));
  case ast::ExprKind::Neg: {
    auto operand = constant(*cast<ast::Neg>(e).operand, where);
    if (!operand)
      return nullptr;
    auto n = make<ir::Neg>(e.loc);
    n->operand = std::move(operand);
    return n;
  }
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    if (ast::isComparison(b.op)) {
      error(e.begin,
            fmt::format("{} must be an integer constant, not the comparison '{}'", where, e.text));
      return nullptr;
    }
    auto lhs = constant(*b.lhs, where);
    auto rhs = constant(*b.rhs, where);
    if (!lhs || !rhs)
      return nullptr;
    auto r = make<ir::Binary>(e.loc);
    r->op = b.op;
    r->lhs = std::move(lhs);
    r->rhs = std::move(rhs);
    return r;
  }
  case ast::ExprKind::FloatLit:
  case ast::ExprKind::Index:
  case ast::ExprKind::Call:
  case ast::ExprKind::Lambda:
    break;
  }
  error(e.begin, fmt::format("{} must be an integer constant; '{}' is not", where, e.text));
  return nullptr;
}

ir::ExprPtr OpChecker::valueIndex(const ast::Index &ix) {
  if (const auto *call = dyn_cast<ast::Call>(ix.base.get()))
    return valueCall(*call, &ix.items, &ix);
  const auto *name = dyn_cast<ast::Name>(ix.base.get());
  if (!name) {
    error(ix.begin, fmt::format("'{}' cannot be indexed; only inputs and the results of op and "
                                "opaque calls can",
                                ix.base->text));
    return nullptr;
  }
  auto input = op_.findInput(name->name);
  if (!input) {
    if (lookupVar(name->name) || op_.findAttr(name->name))
      error(name->loc, fmt::format("'{}' is not a tensor and cannot be indexed", name->name));
    else if (inGrad_ && (name->name == "dOut" || name->name == "out"))
      error(name->loc,
            fmt::format("'{}' cannot be indexed in a grad clause; pass it whole", name->name));
    else if (mc_.hasOp(name->name) || mc_.isOpaque(name->name))
      error(name->loc, fmt::format("'{}' is a function; call it before indexing, as '{}(...)[...]'",
                                   name->name, name->name));
    else
      error(name->loc, fmt::format("unknown tensor '{}'", name->name));
    return nullptr;
  }
  used_[*input] = true;
  auto read = make<ir::Read>(ix.loc);
  read->input = *input;
  if (!coords(ix.items, /*allowSlices=*/false, read->coords))
    return nullptr;
  ir::Rank rank;
  for (const ir::Coord &c : read->coords) {
    if (c.kind == ir::Coord::Kind::Splat)
      rank.groups.push_back(c.var);
    else
      ++rank.fixed;
  }
  std::sort(rank.groups.begin(), rank.groups.end());
  recordRank(*input, rank, ix.loc);
  return read;
}

bool OpChecker::coords(const std::vector<ast::IndexItem> &items, bool allowSlices,
                       std::vector<ir::Coord> &out) {
  bool ok = true;
  for (const ast::IndexItem &item : items) {
    ir::Coord c;
    if (coord(item, allowSlices, c))
      out.push_back(std::move(c));
    else
      ok = false;
  }
  return ok;
}

bool OpChecker::readsData(const ast::Expr &e) {
  switch (e.kind()) {
  case ast::ExprKind::Index:
    return true;
  case ast::ExprKind::Call: {
    const auto &c = cast<ast::Call>(e);
    if (!ir::lookupBuiltin(c.callee))
      return true;
    for (const auto &a : c.args)
      if (readsData(*a))
        return true;
    return false;
  }
  case ast::ExprKind::Neg:
    return readsData(*cast<ast::Neg>(e).operand);
  case ast::ExprKind::Binary:
    return readsData(*cast<ast::Binary>(e).lhs) || readsData(*cast<ast::Binary>(e).rhs);
  case ast::ExprKind::IntLit:
  case ast::ExprKind::FloatLit:
  case ast::ExprKind::Name:
  case ast::ExprKind::ExtentOf:
  case ast::ExprKind::Lambda:
    return false;
  }
  return false;
}

bool OpChecker::coord(const ast::IndexItem &item, bool allowSlices, ir::Coord &out) {
  out.loc = item.loc;
  switch (item.kind) {
  case ast::IndexItem::Kind::Slice:
    if (!allowSlices) {
      error(item.loc, "a slice ':' is only allowed in an argument of an op or opaque call");
      return false;
    }
    out.kind = ir::Coord::Kind::Slice;
    return true;
  case ast::IndexItem::Kind::Group: {
    auto v = lookupVar(item.group);
    if (!v) {
      error(item.loc, fmt::format("unknown group '{}'", item.group));
      return false;
    }
    if (!op_.vars[*v].isGroup) {
      error(item.loc, fmt::format("'{}' is an index variable, not a group; write '{}' without "
                                  "'*'",
                                  item.group, item.group));
      return false;
    }
    out.kind = ir::Coord::Kind::Splat;
    out.var = *v;
    return true;
  }
  case ast::IndexItem::Kind::Expr:
    break;
  }
  const ast::Expr &e = *item.expr;
  if (readsData(e)) {
    out.kind = ir::Coord::Kind::DataDependent;
    out.expr = value(e);
    return out.expr != nullptr;
  }
  bool hasVar = false;
  if (!checkAffine(e, hasVar))
    return false;
  out.kind = ir::Coord::Kind::Affine;
  out.expr = value(e);
  return out.expr != nullptr;
}

/// Checks that `e` (which reads no tensor data) is affine in index variables with integer
/// constant coefficients; `hasVar` tells whether it involves any index variable.
bool OpChecker::checkAffine(const ast::Expr &e, bool &hasVar) {
  hasVar = false;
  switch (e.kind()) {
  case ast::ExprKind::IntLit:
  case ast::ExprKind::ExtentOf:
    return true;
  case ast::ExprKind::FloatLit:
    error(e.begin, fmt::format("index expression uses the non-integer constant '{}'", e.text));
    return false;
  case ast::ExprKind::Name: {
    const auto &n = cast<ast::Name>(e);
    if (n.name == "inf" || n.name == "nan") {
      error(e.begin, fmt::format("index expression uses the non-integer constant '{}'", n.name));
      return false;
    }
    hasVar = lookupVar(n.name).has_value();
    return true; // other problems are reported when the expression is built
  }
  case ast::ExprKind::Neg:
    return checkAffine(*cast<ast::Neg>(e).operand, hasVar);
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    bool lv = false, rv = false;
    if (!checkAffine(*b.lhs, lv) || !checkAffine(*b.rhs, rv))
      return false;
    hasVar = lv || rv;
    switch (b.op) {
    case ast::BinaryOp::Add:
    case ast::BinaryOp::Sub:
      return true;
    case ast::BinaryOp::Mul:
      if (lv && rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: it multiplies index "
                                   "variables",
                                   e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Div:
      if (rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: it divides by an index "
                                   "variable",
                                   e.text));
        return false;
      }
      if (const auto *lit = dyn_cast<ast::IntLit>(b.rhs.get()); lit && lit->value == 0) {
        error(b.rhs->begin, fmt::format("index expression '{}' divides by zero", e.text));
        return false;
      }
      if (const auto *neg = dyn_cast<ast::Neg>(b.rhs.get());
          neg && isa<ast::IntLit>(*neg->operand)) {
        error(b.rhs->begin, fmt::format("index expression '{}' divides by a negative constant; "
                                        "only division by a positive constant is affine",
                                        e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Mod:
      if (lv || rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: '%' of an index "
                                   "variable",
                                   e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Eq:
    case ast::BinaryOp::Ne:
    case ast::BinaryOp::Lt:
    case ast::BinaryOp::Le:
    case ast::BinaryOp::Gt:
    case ast::BinaryOp::Ge:
      error(e.begin,
            fmt::format("index expression '{}' is not affine: it is a comparison", e.text));
      return false;
    }
    return false;
  }
  case ast::ExprKind::Call:
    error(e.begin, fmt::format("index expression '{}' is not affine: '{}' is not an affine "
                               "function",
                               e.text, cast<ast::Call>(e).callee));
    return false;
  case ast::ExprKind::Lambda:
    error(e.begin, "a lambda cannot be an index");
    return false;
  case ast::ExprKind::Index:
    return true; // data-dependent; never reaches here (see readsData)
  }
  return false;
}

ir::ExprPtr OpChecker::valueCall(const ast::Call &c, const std::vector<ast::IndexItem> *items,
                                 const ast::Expr *whole) {
  // Builtins and reducers.
  if (auto b = ir::lookupBuiltin(c.callee)) {
    if (items) {
      error(whole->begin, fmt::format("the result of builtin '{}' is a value and cannot be "
                                      "indexed",
                                      c.callee));
      return nullptr;
    }
    if (c.hasAttrList || !c.groups.empty()) {
      error(c.calleeLoc, fmt::format("builtin '{}' takes no attributes or groups", c.callee));
      return nullptr;
    }
    unsigned arity = ir::builtinArity(*b);
    if (c.args.size() != arity) {
      error(c.calleeLoc,
            fmt::format("builtin '{}' takes {} argument{} but {} {} given", c.callee, arity,
                        arity == 1 ? "" : "s", c.args.size(), c.args.size() == 1 ? "was" : "were"));
      return nullptr;
    }
    auto a = make<ir::Apply>(c.calleeLoc);
    a->fn = *b;
    bool ok = true;
    for (const auto &arg : c.args) {
      auto v = value(*arg);
      ok &= v != nullptr;
      a->args.push_back(std::move(v));
    }
    return ok ? std::move(a) : nullptr;
  }
  if (auto r = ir::lookupReducer(c.callee)) {
    if (items) {
      error(whole->begin, fmt::format("the result of reducer '{}' is a value and cannot be "
                                      "indexed",
                                      c.callee));
      return nullptr;
    }
    return reduce(c, *r);
  }
  // Locals are not functions.
  if (lookupVar(c.callee) || op_.findAttr(c.callee) || op_.findInput(c.callee)) {
    error(c.calleeLoc, fmt::format("'{}' is not a function", c.callee));
    return nullptr;
  }
  if (mc_.isOpaque(c.callee)) {
    if (c.hasAttrList || !c.groups.empty()) {
      error(c.calleeLoc,
            fmt::format("opaque function '{}' takes no attributes or groups", c.callee));
      return nullptr;
    }
    if (!items) {
      error(c.calleeLoc, fmt::format("the result of opaque function '{}' is a tensor and must "
                                     "be indexed, as '{}(...)[i, j]'",
                                     c.callee, c.callee));
      return nullptr;
    }
    if (c.args.empty()) {
      error(c.calleeLoc, fmt::format("opaque function '{}' needs at least one argument", c.callee));
      return nullptr;
    }
    auto call = make<ir::OpaqueCall>(c.calleeLoc);
    call->function = c.callee;
    bool ok = true;
    for (const auto &arg : c.args) {
      auto t = tensorArg(*arg, c.callee);
      ok &= t != nullptr;
      call->args.push_back(std::move(t));
    }
    ok &= coords(*items, /*allowSlices=*/false, call->coords);
    return ok ? std::move(call) : nullptr;
  }
  if (!mc_.hasOp(c.callee)) {
    error(c.calleeLoc, fmt::format("unknown function '{}'", c.callee));
    return nullptr;
  }
  bool calleeFailed = false;
  const ir::OpDef *callee = mc_.requireOp(c.callee, c.calleeLoc, calleeFailed);
  if (calleeFailed) {
    failed_ = true;
    return nullptr;
  }
  if (!items) {
    error(c.calleeLoc, fmt::format("the result of op '{}' is a tensor and must be indexed, as "
                                   "'{}(...)[...]'",
                                   c.callee, c.callee));
    return nullptr;
  }
  auto call = opCall(c, *callee);
  if (!call)
    return nullptr;
  call->indexed = true;
  if (!coords(*items, /*allowSlices=*/false, call->coords))
    return nullptr;
  ir::Rank want = callee->outputRank();
  bool anySplat = false;
  for (const ir::Coord &co : call->coords)
    anySplat |= co.kind == ir::Coord::Kind::Splat;
  if (want.groups.empty() && !anySplat && call->coords.size() != want.fixed) {
    error(whole->begin,
          fmt::format("op '{}' has rank {} but is indexed with {} coordinate{}", c.callee,
                      want.fixed, call->coords.size(), call->coords.size() == 1 ? "" : "s"));
    return nullptr;
  }
  return call;
}

std::unique_ptr<ir::OpCall> OpChecker::opCall(const ast::Call &c, const ir::OpDef &callee) {
  auto call = make<ir::OpCall>(c.calleeLoc);
  call->callee = &callee;
  bool ok = true;
  if (c.args.size() != callee.inputs.size()) {
    error(c.calleeLoc, fmt::format("op '{}' takes {} input{} but {} {} given", callee.name,
                                   callee.inputs.size(), callee.inputs.size() == 1 ? "" : "s",
                                   c.args.size(), c.args.size() == 1 ? "was" : "were"));
    return nullptr;
  }
  std::set<unsigned> given;
  for (const ast::AttrArg &a : c.attrs) {
    auto idx = callee.findAttr(a.name);
    if (!idx) {
      error(a.loc, fmt::format("op '{}' has no attribute '{}'", callee.name, a.name));
      ok = false;
      continue;
    }
    if (!given.insert(*idx).second) {
      error(a.loc, fmt::format("attribute '{}' is given twice", a.name));
      ok = false;
      continue;
    }
    auto v = constant(*a.value, "an attribute value");
    if (!v) {
      ok = false;
      continue;
    }
    call->attrs.push_back({*idx, std::move(v)});
  }
  for (unsigned i = 0; i < callee.attrs.size(); ++i)
    if (!callee.attrs[i].defaultValue && !given.count(i)) {
      error(c.calleeLoc, fmt::format("call of op '{}' must give attribute '{}', which has no "
                                     "default",
                                     callee.name, callee.attrs[i].name));
      ok = false;
    }
  std::set<unsigned> groupsGiven;
  for (const ast::GroupArg &g : c.groups) {
    std::optional<unsigned> var;
    for (unsigned v = 0; v < callee.vars.size(); ++v)
      if (callee.vars[v].isGroup && callee.vars[v].name == g.name)
        var = v;
    if (!var) {
      error(g.loc, fmt::format("op '{}' has no group '{}'", callee.name, g.name));
      ok = false;
      continue;
    }
    if (!groupsGiven.insert(*var).second) {
      error(g.loc, fmt::format("group '{}' is given twice", g.name));
      ok = false;
      continue;
    }
    call->groups.push_back({*var, g.length});
  }
  for (unsigned i = 0; i < c.args.size(); ++i) {
    auto t = tensorArg(*c.args[i], callee.name);
    if (!t) {
      ok = false;
      continue;
    }
    // A whole input passed where the callee reads a fixed rank: the ranks must agree.
    const auto *ref = dyn_cast<ir::TensorRef>(t.get());
    const auto &want = callee.inputs[i].rank;
    if (ref && ref->source == ir::TensorRef::Source::Input && want && want->groups.empty())
      recordRank(ref->input, *want, c.args[i]->begin);
    call->args.push_back(std::move(t));
  }
  return ok ? std::move(call) : nullptr;
}

ir::ExprPtr OpChecker::tensorArg(const ast::Expr &e, const std::string &callee) {
  if (const auto *n = dyn_cast<ast::Name>(&e)) {
    if (inGrad_ && (n->name == "dOut" || n->name == "out") && !op_.findInput(n->name)) {
      auto r = make<ir::TensorRef>(n->loc);
      r->source = n->name == "dOut" ? ir::TensorRef::Source::DOut : ir::TensorRef::Source::Out;
      return r;
    }
    if (auto in = op_.findInput(n->name)) {
      used_[*in] = true;
      passedWhole_[*in] = true;
      auto r = make<ir::TensorRef>(n->loc);
      r->input = *in;
      return r;
    }
    if (!lookupVar(n->name) && !op_.findAttr(n->name) && n->name != "inf" && n->name != "nan") {
      error(n->loc, fmt::format("unknown tensor '{}'", n->name));
      return nullptr;
    }
  } else if (const auto *ix = dyn_cast<ast::Index>(&e)) {
    const auto *base = dyn_cast<ast::Name>(ix->base.get());
    if (auto in = base ? op_.findInput(base->name) : std::nullopt) {
      used_[*in] = true;
      auto read = make<ir::Read>(ix->loc);
      read->input = *in;
      if (!coords(ix->items, /*allowSlices=*/true, read->coords))
        return nullptr;
      ir::Rank rank;
      bool anySlice = false;
      for (const ir::Coord &c : read->coords) {
        anySlice |= c.kind == ir::Coord::Kind::Slice;
        if (c.kind == ir::Coord::Kind::Splat)
          rank.groups.push_back(c.var);
        else
          ++rank.fixed;
      }
      std::sort(rank.groups.begin(), rank.groups.end());
      recordRank(*in, rank, ix->loc);
      if (!anySlice) {
        error(ix->begin, fmt::format("argument '{}' of '{}' is a single element; pass a tensor "
                                     "or a slice with ':'",
                                     ix->text, callee));
        return nullptr;
      }
      return read;
    }
  } else if (const auto *c = dyn_cast<ast::Call>(&e)) {
    if (mc_.hasOp(c->callee) && !lookupVar(c->callee) && !op_.findInput(c->callee) &&
        !op_.findAttr(c->callee)) {
      bool calleeFailed = false;
      const ir::OpDef *op = mc_.requireOp(c->callee, c->calleeLoc, calleeFailed);
      if (calleeFailed) {
        failed_ = true;
        return nullptr;
      }
      return opCall(*c, *op);
    }
  }
  error(e.begin, fmt::format("argument '{}' of '{}' must be a tensor: an input, a slice of one, "
                             "or an op call",
                             e.text, callee));
  return nullptr;
}

ir::ExprPtr OpChecker::reduce(const ast::Call &c, ir::Reducer r) {
  if (c.hasAttrList || !c.groups.empty()) {
    error(c.calleeLoc, fmt::format("reducer '{}' takes no attributes or groups", c.callee));
    return nullptr;
  }
  const ast::Lambda *lam =
      c.args.size() == 1 ? dyn_cast<ast::Lambda>(c.args.front().get()) : nullptr;
  if (!lam) {
    error(c.calleeLoc, fmt::format("reducer '{}' takes one argument, a lambda over the reduction "
                                   "variables",
                                   c.callee));
    return nullptr;
  }
  if (lam->params.empty()) {
    error(lam->begin, fmt::format("reducer '{}' needs at least one reduction variable", c.callee));
    return nullptr;
  }
  size_t mark = scope_.size();
  auto red = make<ir::Reduce>(c.calleeLoc);
  red->reducer = r;
  bool ok = bindParams(lam->params, ir::IndexVar::Role::Reduction, red->vars);
  red->body = value(*lam->body);
  ok &= red->body != nullptr;
  scope_.resize(mark);
  if (!ok)
    return nullptr;
  if (!inferExtents(*red, lam->begin))
    return nullptr;
  return red;
}

/// Finds, for each reduction variable of `red` without an explicit extent, an input
/// dimension that it indexes alone (`v` or `v + c`), as TDL.md section 3 prescribes.
bool OpChecker::inferExtents(const ir::Reduce &red, SourceLoc) {
  bool ok = true;
  for (unsigned v : red.vars) {
    ir::IndexVar &var = op_.vars[v];
    if (var.extent)
      continue;
    std::optional<ir::ExtentSource> found;
    auto alone = [&](const ir::Coord &c) {
      if (c.kind == ir::Coord::Kind::Splat)
        return c.var == v;
      if (c.kind != ir::Coord::Kind::Affine)
        return false;
      const ir::Expr *e = c.expr.get();
      if (const auto *b = dyn_cast<ir::Binary>(e);
          b && (b->op == ast::BinaryOp::Add || b->op == ast::BinaryOp::Sub)) {
        bool lhsVar = isa<ir::VarRef>(*b->lhs);
        const ir::Expr &other = lhsVar ? *b->rhs : *b->lhs;
        if (b->op == ast::BinaryOp::Sub && !lhsVar)
          return false; // c - v has coefficient -1
        bool otherConst = true;
        ir::walk(other, [&](const ir::Expr &s) {
          otherConst &= !isa<ir::VarRef>(s) && !isa<ir::Read>(s);
        });
        e = otherConst ? (lhsVar ? b->lhs.get() : b->rhs.get()) : nullptr;
      }
      const auto *ref = dyn_cast_or_null<ir::VarRef>(e);
      return ref && ref->var == v;
    };
    ir::walk(*red.body, [&](const ir::Expr &e) {
      const auto *read = dyn_cast<ir::Read>(&e);
      if (found || !read)
        return;
      ir::ExtentSource src;
      src.input = read->input;
      for (unsigned i = 0; i < read->coords.size(); ++i) {
        const ir::Coord &c = read->coords[i];
        if (alone(c)) {
          src.coord = i;
          found = src;
          return;
        }
        if (c.kind == ir::Coord::Kind::Splat)
          src.groupsBefore.push_back(c.var);
        else
          ++src.fixedBefore;
      }
    });
    if (!found) {
      error(var.loc,
            var.isGroup
                ? fmt::format("cannot infer the lengths and extents of reduction group '{}': no "
                              "input is indexed with '*{}'",
                              var.name, var.name)
                : fmt::format("cannot infer the extent of reduction variable '{}': it indexes no "
                              "input dimension alone; give it as '({} : K)'",
                              var.name, var.name));
      ok = false;
      continue;
    }
    var.inferred = std::move(found);
  }
  return ok;
}

} // namespace semaimpl
} // namespace tofu
