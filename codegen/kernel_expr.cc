// The kernel lowering's expressions (codegen/kernel_lowering.h): index arithmetic, reads
// (checked and unchecked), values, reductions where they are read, and opaque calls through
// their native implementations.
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

std::string floatLiteral(double v) {
  if (std::isnan(v))
    return "TOFU_NAN";
  if (std::isinf(v))
    return v > 0 ? "TOFU_INF" : "(-TOFU_INF)";
  std::string s = fmt::format("{:.9g}", static_cast<float>(v));
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return "(" + s + "f)";
}

const char *builtinCall(ir::Builtin b) {
  switch (b) {
  case ir::Builtin::Exp:
    return "expf";
  case ir::Builtin::Log:
    return "logf";
  case ir::Builtin::Sqrt:
    return "sqrtf";
  case ir::Builtin::Rsqrt:
    return "tofu_rsqrt";
  case ir::Builtin::Tanh:
    return "tanhf";
  case ir::Builtin::Sigmoid:
    return "tofu_sigmoid";
  case ir::Builtin::Relu:
    return "tofu_relu";
  case ir::Builtin::Abs:
    return "fabsf";
  case ir::Builtin::Sign:
    return "tofu_sign";
  case ir::Builtin::Floor:
    return "floorf";
  case ir::Builtin::Ceil:
    return "ceilf";
  case ir::Builtin::Pow:
    return "powf";
  case ir::Builtin::Min:
    return "tofu_min";
  case ir::Builtin::Max:
    return "tofu_max";
  case ir::Builtin::Select:
    return "tofu_select";
  case ir::Builtin::CastFloat:
    return "";
  case ir::Builtin::CastInt:
    return "truncf";
  case ir::Builtin::Sin:
    return "sinf";
  case ir::Builtin::Cos:
    return "cosf";
  case ir::Builtin::Tan:
    return "tanf";
  case ir::Builtin::Asin:
    return "asinf";
  case ir::Builtin::Acos:
    return "acosf";
  case ir::Builtin::Atan:
    return "atanf";
  case ir::Builtin::Sinh:
    return "sinhf";
  case ir::Builtin::Cosh:
    return "coshf";
  case ir::Builtin::Asinh:
    return "asinhf";
  case ir::Builtin::Acosh:
    return "acoshf";
  case ir::Builtin::Atanh:
    return "atanhf";
  case ir::Builtin::Erf:
    return "erff";
  case ir::Builtin::Round:
    return "nearbyintf"; // halves to even, as ONNX
  case ir::Builtin::IsNan:
    return "tofu_isnan";
  case ir::Builtin::IsInf:
    return "tofu_isinf";
  case ir::Builtin::RoundBf16:
    return "tofu_round_bf16";
  case ir::Builtin::RoundF16:
    return "tofu_round_f16";
  }
  return "";
}

const char *compareCall(ast::BinaryOp op) {
  switch (op) {
  case ast::BinaryOp::Eq:
    return "tofu_eq";
  case ast::BinaryOp::Ne:
    return "tofu_ne";
  case ast::BinaryOp::Lt:
    return "tofu_lt";
  case ast::BinaryOp::Le:
    return "tofu_le";
  case ast::BinaryOp::Gt:
    return "tofu_gt";
  case ast::BinaryOp::Ge:
    return "tofu_ge";
  case ast::BinaryOp::Add:
  case ast::BinaryOp::Sub:
  case ast::BinaryOp::Mul:
  case ast::BinaryOp::Div:
  case ast::BinaryOp::Mod:
    break;
  }
  return nullptr;
}

constexpr NativeOpaque kNativeOpaques[] = {
    {"Cholesky", 2},
    {"MatrixInverse", 2},
    {"Determinant", 0},
};

const NativeOpaque *nativeOpaque(const std::string &name) {
  for (const NativeOpaque &f : kNativeOpaques)
    if (name == f.name)
      return &f;
  return nullptr;
}

/// Whether an affine coordinate of a read may leave its tensor where the variables range
/// over the tensor's own extents: a window's (`s*y + k - p`, `(h + p - k) / s`: it uses a
/// reduction variable beside the output's) or a padded one (`h - p`: it subtracts a
/// constant). The unchecked variant guards such a read with a test against the tensor's
/// extent (zero outside, as TDL says) instead of running the checked nest for the whole
/// share; readsInsideRegions then requires only the part inside the tensor to lie in the
/// region. Other coordinates (plain variables, a reshape's divisions) read unguarded.
bool mayLeaveTensor(const InstOp &op, const ir::Coord &c) {
  if (c.kind != ir::Coord::Kind::Affine || ir::exactVar(c))
    return false;
  bool leaves = false;
  ir::walk(*c.expr, [&](const ir::Expr &e) {
    if (const auto *v = dyn_cast<ir::VarRef>(&e))
      leaves |=
          std::find(op.outputVars.begin(), op.outputVars.end(), v->var) == op.outputVars.end();
    if (const auto *k = dyn_cast<ir::Const>(&e))
      leaves |= k->isInt && k->intValue < 0;
    if (const auto *b = dyn_cast<ir::Binary>(&e))
      if (b->op == ast::BinaryOp::Sub)
        if (const auto *k = dyn_cast<ir::Const>(b->rhs.get()))
          leaves |= k->isInt && k->intValue > 0;
  });
  return leaves;
}

std::string Lowering::index(const ir::Expr &e) {
  if (auto s = evalIndex(e, CodeDomain{&rename_, zero_, &exact_}))
    return *s;
  fail("an index expression is not integer arithmetic");
  return "0";
}

std::string Lowering::coord(const ir::Coord &c) {
  switch (c.kind) {
  case ir::Coord::Kind::Affine:
    return index(*c.expr);
  case ir::Coord::Kind::DataDependent:
    return "tofu_didx(" + value(*c.expr) + ")";
  case ir::Coord::Kind::Slice:
  case ir::Coord::Kind::Splat:
    break;
  }
  fail("a slice or group outside an opaque call");
  return "0";
}

std::string Lowering::read(const ir::Read &r) {
  bool affine = true;
  std::vector<std::string> cs;
  for (const ir::Coord &c : r.coords) {
    affine &= c.kind == ir::Coord::Kind::Affine;
    cs.push_back(coord(c));
  }
  if (cs.empty())
    return fmt::format("x{}", r.input); // emitLocals
  if (fast_ && affine) {
    std::string off;
    const size_t last = cs.size() - 1;
    auto renamed = [&](const ir::Coord &c) -> std::optional<unsigned> {
      std::optional<unsigned> v = ir::exactVar(c);
      if (v)
        if (auto it = rename_.find(*v); it != rename_.end())
          return it->second;
      return v;
    };
    if (flat_ && last >= 1 && renamed(r.coords[last - 1]) == flat_->outer &&
        renamed(r.coords[last]) == flat_->inner) {
      // (a - o) * st + (b - o') with b's range the whole row (flatConditions): the row
      // start of a's first value, plus the flat index.
      for (size_t d = 0; d + 1 < last; ++d)
        off += fmt::format("({} - o{}_{}) * st{}_{} + ", cs[d], r.input, d, r.input, d);
      off += fmt::format("(lo{} - o{}_{}) * st{}_{} + fl", flat_->outer, r.input, last - 1, r.input,
                         last - 1);
      return guarded(r, cs, widened(r.input, fmt::format("in{}[{}]", r.input, off)));
    }
    for (size_t d = 0; d < cs.size(); ++d) {
      std::string term = fmt::format("({} - o{}_{})", cs[d], r.input, d);
      if (d + 1 < cs.size())
        term += fmt::format(" * st{}_{}", r.input, d);
      off += (d ? " + " : "") + term;
    }
    return guarded(r, cs, widened(r.input, fmt::format("in{}[{}]", r.input, off)));
  }
  std::string call =
      fmt::format("{}_ld{}(in{}, I + {}", kNameToken, r.input, r.input, inputBase(r.input));
  for (const std::string &c : cs)
    call += ", " + c;
  return call + ")";
}

std::string Lowering::guarded(const ir::Read &r, const std::vector<std::string> &cs,
                              const std::string &load) const {
  std::string inside;
  for (size_t d = 0; d < cs.size(); ++d)
    if (mayLeaveTensor(op_, r.coords[d]))
      inside += fmt::format("{}(uint64_t)({}) < (uint64_t)s{}_{}", inside.empty() ? "" : " && ",
                            cs[d], r.input, d);
  return inside.empty() ? load : fmt::format("({} ? {} : 0.0f)", inside, load);
}

bool Lowering::isInt(const ir::Expr &e) {
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return cast<ir::Const>(e).isInt;
  case ir::ExprKind::VarRef:
  case ir::ExprKind::ExtentRef:
    return true;
  case ir::ExprKind::Neg:
    return isInt(*cast<ir::Neg>(e).operand);
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    switch (b.op) {
    case ast::BinaryOp::Add:
    case ast::BinaryOp::Sub:
    case ast::BinaryOp::Mul:
      return isInt(*b.lhs) && isInt(*b.rhs);
    case ast::BinaryOp::Mod: {
      const auto *c = llvm::dyn_cast<ir::Const>(b.rhs.get());
      return isInt(*b.lhs) && c && c->isInt && c->intValue != 0;
    }
    default:
      return false;
    }
  }
  default:
    return false;
  }
}

std::string Lowering::intText(const ir::Expr &e) {
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return fmt::format("((i64){})", cast<ir::Const>(e).intValue);
  case ir::ExprKind::Neg:
    return "(-" + intText(*cast<ir::Neg>(e).operand) + ")";
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    return fmt::format("({} {} {})", intText(*b.lhs), ast::binaryOpSpelling(b.op), intText(*b.rhs));
  }
  default:
    return "((i64)" + index(e) + ")";
  }
}

std::string Lowering::value(const ir::Expr &e) {
  if (knownTrue_.count(&e))
    return "(1.0f)";
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return floatLiteral(cast<ir::Const>(e).value);
  case ir::ExprKind::VarRef:
  case ir::ExprKind::ExtentRef:
    // The fast variant's variables fit in 32 bits (readsInsideRegions): an int converts to
    // float in vectors (AVX2 has no 64-bit integer conversion).
    return (fast_ ? "((float)(int)" : "((float)") + index(e) + ")";
  case ir::ExprKind::Read:
    return read(cast<ir::Read>(e));
  case ir::ExprKind::Reduce:
    return reduction(sched_.of(&cast<ir::Reduce>(e)));
  case ir::ExprKind::Apply: {
    const auto &a = cast<ir::Apply>(e);
    std::string call = std::string(builtinCall(a.fn)) + "(";
    for (size_t i = 0; i < a.args.size(); ++i)
      call += (i ? ", " : "") + value(*a.args[i]);
    return call + ")";
  }
  case ir::ExprKind::Neg:
    return "(-" + value(*cast<ir::Neg>(e).operand) + ")";
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    // Integer-valued operands (index arithmetic: `(h + ph - ky) % sh == 0`) compare and
    // take remainders in integers, exactly and without fmodf.
    if (b.op == ast::BinaryOp::Mod && isInt(e))
      return "((float)" + intText(e) + ")";
    if (compareCall(b.op) && isInt(*b.lhs) && isInt(*b.rhs))
      return fmt::format("((float)({} {} {}))", intText(*b.lhs), ast::binaryOpSpelling(b.op),
                         intText(*b.rhs));
    std::string l = value(*b.lhs), r = value(*b.rhs);
    if (const char *cmp = compareCall(b.op))
      return fmt::format("{}({}, {})", cmp, l, r);
    switch (b.op) {
    case ast::BinaryOp::Add:
      return "(" + l + " + " + r + ")";
    case ast::BinaryOp::Sub:
      return "(" + l + " - " + r + ")";
    case ast::BinaryOp::Mul:
      return "(" + l + " * " + r + ")";
    case ast::BinaryOp::Div:
      return "(" + l + " / " + r + ")";
    case ast::BinaryOp::Mod:
      return "fmodf(" + l + ", " + r + ")";
    default:
      break;
    }
    return "0";
  }
  case ir::ExprKind::OpaqueCall:
    return opaque(cast<ir::OpaqueCall>(e));
  case ir::ExprKind::AttrRef:
  case ir::ExprKind::TensorRef:
  case ir::ExprKind::OpCall:
    break;
  }
  fail("an expression kind that instantiation removes");
  return "0";
}

std::string Lowering::reduction(const Red &r) {
  switch (r.placement) {
  case Placement::Inline:
    return fmt::format("r{}", r.id);
  case Placement::Temporary:
    return fmt::format("t{}[{}]", r.id, temporaryOffset(r));
  case Placement::Alias:
    return reduction(sched_.resolved(r));
  case Placement::Count:
    return fmt::format("k{}", r.id); // emitLocals
  }
  fail("a reduction without a placement");
  return "0";
}

std::string Lowering::temporaryOffset(const Red &r) {
  std::string off;
  for (size_t k = 0; k < r.depends.size(); ++k) {
    const unsigned v = r.depends[k];
    off = k == 0 ? fmt::format("(v{0} - lo{0})", v)
                 : fmt::format("({}) * (hi{} - lo{}) + (v{} - lo{})", off, v, v, v, v);
  }
  return off.empty() ? "0" : off;
}

std::string Lowering::opaque(const ir::OpaqueCall &c) {
  const NativeOpaque *fn = nativeOpaque(c.function);
  if (!fn) {
    fail(fmt::format("opaque function '{}' has no native implementation (the op runs on the "
                     "interpreter)",
                     c.function));
    return "0";
  }
  if (c.args.size() != 1) {
    fail(fmt::format("opaque function '{}' takes one argument", c.function));
    return "0";
  }
  // The argument: an input read with slices (`m[b, :, :]`) or a whole input (`m`).
  unsigned input = 0;
  std::vector<const ir::Coord *> coords; // null: a slice (free) dimension
  if (const auto *r = dyn_cast<ir::Read>(c.args[0].get())) {
    input = r->input;
    for (const ir::Coord &co : r->coords)
      coords.push_back(co.kind == ir::Coord::Kind::Slice ? nullptr : &co);
  } else if (const auto *t = dyn_cast<ir::TensorRef>(c.args[0].get());
             t && t->source == ir::TensorRef::Source::Input) {
    input = t->input;
    coords.assign(op_.inputs[input].rank, nullptr);
  } else {
    fail(fmt::format("opaque function '{}': an argument that is not an input's slice", c.function));
    return "0";
  }
  std::vector<unsigned> freeDims;
  for (unsigned d = 0; d < coords.size(); ++d)
    if (!coords[d])
      freeDims.push_back(d);
  if (freeDims.size() != 2 || c.coords.size() != fn->resultRank || coords.size() > 10) {
    fail(fmt::format("opaque function '{}' takes a matrix and gives rank {}", c.function,
                     fn->resultRank));
    return "0";
  }
  auto [it, fresh] = opaqueSite_.emplace(&c, static_cast<unsigned>(opaqueSite_.size()));
  const unsigned id = it->second;
  if (fresh)
    emitOpaqueHelper(id, *fn, input, coords, freeDims);
  std::string call =
      fmt::format("{}_opq{}(in{}, I + {}{}", kNameToken, id, input, inputBase(input),
                  dialect_ == KernelDialect::Cpp ? fmt::format(", &memo[{}]", id) : "");
  for (const ir::Coord *co : coords)
    if (co)
      call += ", " + coord(*co);
  for (const ir::Coord &co : c.coords)
    call += ", " + coord(co);
  return call + ")";
}

void Lowering::emitOpaqueHelper(unsigned id, const NativeOpaque &fn, unsigned input,
                                const std::vector<const ir::Coord *> &coords,
                                const std::vector<unsigned> &freeDims) {
  const bool cpp = dialect_ == KernelDialect::Cpp;
  std::string params, fixedCount = "0";
  unsigned nFixed = 0;
  for (const ir::Coord *co : coords)
    if (co)
      params += fmt::format(", i64 x{}", nFixed++);
  for (unsigned k = 0; k < fn.resultRank; ++k)
    params += fmt::format(", i64 c{}", k);
  std::string h;
  auto add = [&](const std::string &l) { h += l + "\n"; };
  add(fmt::format("{} float {}_opq{}(const {} *p, const i64 *q{}{}) {{",
                  cpp ? "static inline" : "static __device__", kNameToken, id,
                  loops::elementCType(types_.input(input)), cpp ? ", TofuOpqMemo *m" : "", params));
  add(fmt::format("  const i64 m0 = q[{}], m1 = q[{}];", 3 * freeDims[0], 3 * freeDims[1]));
  std::string load = fmt::format("{}_ld{}(p, q", kNameToken, input);
  for (unsigned d = 0, x = 0; d < coords.size(); ++d)
    load += coords[d] ? fmt::format(", x{}", x++) : (d == freeDims[0] ? ", i0" : ", i1");
  load += ")";
  if (cpp) {
    std::string hit = "m->have";
    for (unsigned x = 0; x < nFixed; ++x)
      hit += fmt::format(" && m->key[{0}] == x{0}", x);
    add(fmt::format("  if (!({})) {{", hit));
    add("    m->arg.resize(m0 * m1);");
    add(fmt::format("    m->res.assign({}, TOFU_NAN);", fn.resultRank == 0 ? "1" : "m0 * m0"));
    add("    for (i64 i0 = 0; i0 < m0; ++i0)");
    add("      for (i64 i1 = 0; i1 < m1; ++i1)");
    add(fmt::format("        m->arg[i0 * m1 + i1] = {};", load));
    add(fmt::format("    if (m0 == m1) tofu_opq_{}(m->arg.data(), m0, m->res.data());", fn.name));
    add("    m->have = true;");
    for (unsigned x = 0; x < nFixed; ++x)
      add(fmt::format("    m->key[{0}] = x{0};", x));
    add("  }");
    add("  const float *r = m->res.data();");
  } else {
    add("  if (m0 != m1 || m0 * m1 > TOFU_OPQ_MAX) return TOFU_NAN;");
    add("  float arg[TOFU_OPQ_MAX], r[TOFU_OPQ_MAX];");
    add("  for (i64 i0 = 0; i0 < m0; ++i0)");
    add("    for (i64 i1 = 0; i1 < m1; ++i1)");
    add(fmt::format("      arg[i0 * m1 + i1] = {};", load));
    add(fmt::format("  tofu_opq_{}(arg, m0, r);", fn.name));
  }
  if (fn.resultRank == 0) {
    add("  return r[0];");
  } else {
    add("  if (c0 < 0 || c0 >= m0 || c1 < 0 || c1 >= m0) return 0.0f;");
    add("  return r[c0 * m0 + c1];");
  }
  add("}");
  helpers_ += h;
}

} // namespace kernelgen
} // namespace tofu
