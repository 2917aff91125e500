// Tables, lookups, structural equality and traversal for the checked IR.
#include "analysis/ir.h"

#include <algorithm>

namespace tofu::ir {

std::optional<unsigned> exactVar(const Coord &c) {
  if (c.kind != Coord::Kind::Affine)
    return std::nullopt;
  if (const auto *v = llvm::dyn_cast<VarRef>(c.expr.get()))
    return v->var;
  return std::nullopt;
}

const char *builtinName(Builtin b) {
  switch (b) {
#define TOFU_X(E, S, N)                                                                            \
  case Builtin::E:                                                                                 \
    return S;
    TOFU_IR_BUILTINS(TOFU_X)
#undef TOFU_X
  }
  return "?";
}

unsigned builtinArity(Builtin b) {
  switch (b) {
#define TOFU_X(E, S, N)                                                                            \
  case Builtin::E:                                                                                 \
    return N;
    TOFU_IR_BUILTINS(TOFU_X)
#undef TOFU_X
  }
  return 0;
}

std::optional<Builtin> lookupBuiltin(const std::string &name) {
#define TOFU_X(E, S, N)                                                                            \
  if (name == S)                                                                                   \
    return Builtin::E;
  TOFU_IR_BUILTINS(TOFU_X)
#undef TOFU_X
  return std::nullopt;
}

const char *reducerName(Reducer r) {
  switch (r) {
#define TOFU_X(E, S)                                                                               \
  case Reducer::E:                                                                                 \
    return S;
    TOFU_IR_REDUCERS(TOFU_X)
#undef TOFU_X
  }
  return "?";
}

std::optional<Reducer> lookupReducer(const std::string &name) {
#define TOFU_X(E, S)                                                                               \
  if (name == S)                                                                                   \
    return Reducer::E;
  TOFU_IR_REDUCERS(TOFU_X)
#undef TOFU_X
  return std::nullopt;
}

Rank OpDef::outputRank() const {
  Rank r;
  for (unsigned v : outputVars) {
    if (vars[v].isGroup)
      r.groups.push_back(v);
    else
      ++r.fixed;
  }
  std::sort(r.groups.begin(), r.groups.end());
  return r;
}

std::optional<unsigned> OpDef::findAttr(const std::string &n) const {
  for (unsigned i = 0; i < attrs.size(); ++i)
    if (attrs[i].name == n)
      return i;
  return std::nullopt;
}

std::optional<unsigned> OpDef::findInput(const std::string &n) const {
  for (unsigned i = 0; i < inputs.size(); ++i)
    if (inputs[i].name == n)
      return i;
  return std::nullopt;
}

const OpDef *Module::findOp(const std::string &name) const {
  for (const auto &op : ops)
    if (op->name == name)
      return op.get();
  return nullptr;
}

std::vector<const OpDef *> Module::opsInFile(const std::string &file) const {
  std::vector<const OpDef *> out;
  for (const auto &op : ops)
    if (op->file == file)
      out.push_back(op.get());
  return out;
}

namespace {

bool equalPtr(const Expr *a, const Expr *b) {
  if (!a || !b)
    return a == b;
  return equal(*a, *b);
}

bool equalList(const std::vector<ExprPtr> &a, const std::vector<ExprPtr> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!equalPtr(a[i].get(), b[i].get()))
      return false;
  return true;
}

bool equalCoords(const std::vector<Coord> &a, const std::vector<Coord> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].var != b[i].var ||
        !equalPtr(a[i].expr.get(), b[i].expr.get()))
      return false;
  }
  return true;
}

bool equalCall(const OpCall &x, const OpCall &y) {
  if (x.callee->name != y.callee->name || x.indexed != y.indexed ||
      x.attrs.size() != y.attrs.size() || x.groups.size() != y.groups.size())
    return false;
  for (size_t i = 0; i < x.attrs.size(); ++i)
    if (x.attrs[i].attr != y.attrs[i].attr ||
        !equalPtr(x.attrs[i].value.get(), y.attrs[i].value.get()))
      return false;
  for (size_t i = 0; i < x.groups.size(); ++i)
    if (x.groups[i].var != y.groups[i].var || x.groups[i].length != y.groups[i].length)
      return false;
  return equalList(x.args, y.args) && equalCoords(x.coords, y.coords);
}

} // namespace

bool equal(const Expr &a, const Expr &b) {
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case ExprKind::Const: {
    auto &x = llvm::cast<Const>(a), &y = llvm::cast<Const>(b);
    if (x.isInt != y.isInt)
      return false;
    if (x.isInt)
      return x.intValue == y.intValue;
    return x.value == y.value || (x.value != x.value && y.value != y.value); // nan == nan
  }
  case ExprKind::AttrRef:
    return llvm::cast<AttrRef>(a).attr == llvm::cast<AttrRef>(b).attr;
  case ExprKind::ExtentRef: {
    auto &x = llvm::cast<ExtentRef>(a), &y = llvm::cast<ExtentRef>(b);
    return x.input == y.input && x.dim == y.dim;
  }
  case ExprKind::VarRef:
    return llvm::cast<VarRef>(a).var == llvm::cast<VarRef>(b).var;
  case ExprKind::TensorRef: {
    auto &x = llvm::cast<TensorRef>(a), &y = llvm::cast<TensorRef>(b);
    return x.source == y.source && x.input == y.input;
  }
  case ExprKind::Read: {
    auto &x = llvm::cast<Read>(a), &y = llvm::cast<Read>(b);
    return x.input == y.input && equalCoords(x.coords, y.coords);
  }
  case ExprKind::OpaqueCall: {
    auto &x = llvm::cast<OpaqueCall>(a), &y = llvm::cast<OpaqueCall>(b);
    return x.function == y.function && equalList(x.args, y.args) && equalCoords(x.coords, y.coords);
  }
  case ExprKind::OpCall:
    return equalCall(llvm::cast<OpCall>(a), llvm::cast<OpCall>(b));
  case ExprKind::Reduce: {
    auto &x = llvm::cast<Reduce>(a), &y = llvm::cast<Reduce>(b);
    return x.reducer == y.reducer && x.vars == y.vars && equalPtr(x.body.get(), y.body.get());
  }
  case ExprKind::Apply: {
    auto &x = llvm::cast<Apply>(a), &y = llvm::cast<Apply>(b);
    return x.fn == y.fn && equalList(x.args, y.args);
  }
  case ExprKind::Neg:
    return equalPtr(llvm::cast<Neg>(a).operand.get(), llvm::cast<Neg>(b).operand.get());
  case ExprKind::Binary: {
    auto &x = llvm::cast<Binary>(a), &y = llvm::cast<Binary>(b);
    return x.op == y.op && equalPtr(x.lhs.get(), y.lhs.get()) && equalPtr(x.rhs.get(), y.rhs.get());
  }
  }
  return false;
}

bool equal(const OpDef &a, const OpDef &b) {
  if (a.name != b.name || a.attrs.size() != b.attrs.size() || a.inputs.size() != b.inputs.size() ||
      a.vars.size() != b.vars.size() || a.outputVars != b.outputVars ||
      a.grads.size() != b.grads.size() || a.shape.has_value() != b.shape.has_value())
    return false;
  for (size_t i = 0; i < a.attrs.size(); ++i)
    if (a.attrs[i].name != b.attrs[i].name || a.attrs[i].defaultValue != b.attrs[i].defaultValue)
      return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i].name != b.inputs[i].name || a.inputs[i].rank != b.inputs[i].rank ||
        a.inputs[i].otherRanks != b.inputs[i].otherRanks)
      return false;
  for (size_t i = 0; i < a.vars.size(); ++i) {
    const IndexVar &x = a.vars[i], &y = b.vars[i];
    if (x.name != y.name || x.role != y.role || x.isGroup != y.isGroup ||
        !equalPtr(x.extent.get(), y.extent.get()) ||
        x.inferred.has_value() != y.inferred.has_value())
      return false;
    if (x.inferred &&
        (x.inferred->input != y.inferred->input || x.inferred->coord != y.inferred->coord ||
         x.inferred->groupsBefore != y.inferred->groupsBefore ||
         x.inferred->fixedBefore != y.inferred->fixedBefore))
      return false;
  }
  if (a.shape) {
    if (a.shape->size() != b.shape->size())
      return false;
    for (size_t i = 0; i < a.shape->size(); ++i) {
      const ShapeDim &x = (*a.shape)[i], &y = (*b.shape)[i];
      if (x.isGroup != y.isGroup || x.isVar != y.isVar || x.var != y.var ||
          !equalPtr(x.expr.get(), y.expr.get()))
        return false;
    }
  }
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (a.grads[i].input != b.grads[i].input || !equal(*a.grads[i].call, *b.grads[i].call))
      return false;
  return equalPtr(a.body.get(), b.body.get());
}

namespace {

/// Calls `fn` on each direct sub-expression slot of `e` (const or not), in walk's order.
template <typename E, typename Fn> void eachChild(E &e, Fn &&fn) {
  auto coords = [&](auto &cs) {
    for (auto &c : cs)
      if (c.expr)
        fn(c.expr);
  };
  switch (e.kind()) {
  case ExprKind::Const:
  case ExprKind::AttrRef:
  case ExprKind::ExtentRef:
  case ExprKind::VarRef:
  case ExprKind::TensorRef:
    return;
  case ExprKind::Read:
    coords(llvm::cast<Read>(e).coords);
    return;
  case ExprKind::OpaqueCall: {
    auto &c = llvm::cast<OpaqueCall>(e);
    for (auto &a : c.args)
      fn(a);
    coords(c.coords);
    return;
  }
  case ExprKind::OpCall: {
    auto &c = llvm::cast<OpCall>(e);
    for (auto &a : c.attrs)
      fn(a.value);
    for (auto &a : c.args)
      fn(a);
    coords(c.coords);
    return;
  }
  case ExprKind::Reduce:
    fn(llvm::cast<Reduce>(e).body);
    return;
  case ExprKind::Apply:
    for (auto &a : llvm::cast<Apply>(e).args)
      fn(a);
    return;
  case ExprKind::Neg:
    fn(llvm::cast<Neg>(e).operand);
    return;
  case ExprKind::Binary:
    fn(llvm::cast<Binary>(e).lhs);
    fn(llvm::cast<Binary>(e).rhs);
    return;
  }
}

} // namespace

void walk(const Expr &e, const std::function<void(const Expr &)> &fn) {
  fn(e);
  eachChild(e, [&](const ExprPtr &c) { walk(*c, fn); });
}

void forEachChild(Expr &e, const std::function<void(ExprPtr &)> &fn) { eachChild(e, fn); }

void operandsOf(const Expr &e, BinaryOp op, std::vector<const Expr *> &out) {
  if (const auto *b = llvm::dyn_cast<Binary>(&e); b && b->op == op) {
    operandsOf(*b->lhs, op, out);
    operandsOf(*b->rhs, op, out);
    return;
  }
  out.push_back(&e);
}

void forEachChildExpr(const Expr &e, const std::function<void(const Expr &)> &fn) {
  eachChild(e, [&](const ExprPtr &c) { fn(*c); });
}

} // namespace tofu::ir
