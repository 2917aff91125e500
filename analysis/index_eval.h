// One evaluator of index expressions (Const, VarRef, ExtentRef, Neg, + - * / %), over any
// domain: exact integers (constant folding, the interpreter) or intervals (analysis).
#ifndef TOFU_ANALYSIS_INDEX_EVAL_H
#define TOFU_ANALYSIS_INDEX_EVAL_H

#include <cstdint>
#include <optional>

#include "analysis/ir.h"

namespace tofu {

/// Floor division (rounds towards negative infinity), as TDL's index division.
inline int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/// Evaluates `e` in domain `D`, which supplies `Value` and, each returning
/// std::optional<Value> (empty: not representable in the domain), `constant(int64_t)`,
/// `attr(unsigned)` (an attribute of a checked, not yet instantiated op), `var(unsigned)`,
/// `extent(unsigned input, unsigned dim)`, `neg`, `add`, `mul`, `div` and `mod`. Anything else (a
/// float, a tensor read, a call) gives no value.
template <typename D> std::optional<typename D::Value> evalIndex(const ir::Expr &e, const D &d) {
  using llvm::cast;
  switch (e.kind()) {
  case ir::ExprKind::Const: {
    const auto &c = cast<ir::Const>(e);
    if (!c.isInt)
      return std::nullopt;
    return d.constant(c.intValue);
  }
  case ir::ExprKind::VarRef:
    return d.var(cast<ir::VarRef>(e).var);
  case ir::ExprKind::ExtentRef: {
    const auto &x = cast<ir::ExtentRef>(e);
    return d.extent(x.input, x.dim);
  }
  case ir::ExprKind::Neg: {
    auto v = evalIndex(*cast<ir::Neg>(e).operand, d);
    if (!v)
      return std::nullopt;
    return d.neg(*v);
  }
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    auto l = evalIndex(*b.lhs, d);
    if (!l)
      return std::nullopt;
    auto r = evalIndex(*b.rhs, d);
    if (!r)
      return std::nullopt;
    switch (b.op) {
    case ast::BinaryOp::Add:
      return d.add(*l, *r);
    case ast::BinaryOp::Sub: {
      auto nr = d.neg(*r);
      if (!nr)
        return std::nullopt;
      return d.add(*l, *nr);
    }
    case ast::BinaryOp::Mul:
      return d.mul(*l, *r);
    case ast::BinaryOp::Div:
      return d.div(*l, *r);
    case ast::BinaryOp::Mod:
      return d.mod(*l, *r);
    case ast::BinaryOp::Eq:
    case ast::BinaryOp::Ne:
    case ast::BinaryOp::Lt:
    case ast::BinaryOp::Le:
    case ast::BinaryOp::Gt:
    case ast::BinaryOp::Ge:
      return std::nullopt;
    }
    return std::nullopt;
  }
  case ir::ExprKind::AttrRef:
    return d.attr(cast<ir::AttrRef>(e).attr);
  case ir::ExprKind::TensorRef:
  case ir::ExprKind::Read:
  case ir::ExprKind::OpaqueCall:
  case ir::ExprKind::OpCall:
  case ir::ExprKind::Reduce:
  case ir::ExprKind::Apply:
    return std::nullopt;
  }
  return std::nullopt;
}

/// Exact integers: variables take their values from `env` (when given), extents from
/// `shapes` and attributes from `attrs` (when given).
struct PointDomain {
  using Value = int64_t;
  const int64_t *env = nullptr;
  const std::vector<std::vector<int64_t>> *shapes = nullptr;
  const std::vector<int64_t> *attrs = nullptr;

  std::optional<Value> constant(int64_t c) const { return c; }
  std::optional<Value> attr(unsigned a) const {
    if (!attrs || a >= attrs->size())
      return std::nullopt;
    return (*attrs)[a];
  }
  std::optional<Value> var(unsigned v) const {
    if (!env)
      return std::nullopt;
    return env[v];
  }
  std::optional<Value> extent(unsigned input, unsigned dim) const {
    if (!shapes || input >= shapes->size() || dim >= (*shapes)[input].size())
      return std::nullopt;
    return (*shapes)[input][dim];
  }
  std::optional<Value> neg(Value a) const { return -a; }
  std::optional<Value> add(Value a, Value b) const { return a + b; }
  std::optional<Value> mul(Value a, Value b) const { return a * b; }
  std::optional<Value> div(Value a, Value b) const {
    if (b == 0)
      return std::nullopt;
    return floorDiv(a, b);
  }
  std::optional<Value> mod(Value a, Value b) const {
    if (b == 0)
      return std::nullopt;
    return a - floorDiv(a, b) * b;
  }
};

} // namespace tofu

#endif // TOFU_ANALYSIS_INDEX_EVAL_H
