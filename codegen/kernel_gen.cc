// Lowering of an instantiated op to loop nests, and its two printers (C++ with OpenMP, and
// CUDA), both following the op's schedule (codegen/schedule.h).
//
// The main nest: one loop per output variable (in output order, so the innermost loop
// writes contiguous elements). Each reduction is computed where the schedule says: inline
// at the start of a loop's body (a softmax's denominator inside the row loop), or — C++ —
// in a temporary that a pass fills before the main nest (a batch norm's per-channel
// statistics, whose output loops run the batch outside the channel), in the scratch space
// the caller passes; repeats read the first, counts are products of extents computed once
// per call, and reductions the schedule fuses share one loop nest. Reads have two forms:
// checked (zero outside the tensor, NaN outside the region the buffer holds, as the
// interpreter's poisoned workers see it) and unchecked, used when the caller proved every
// affine read lies inside its region (`readsInsideRegions`); the nests are printed once for
// each, and the kernel picks at run time.
#include "codegen/kernel_gen.h"

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
#include "codegen/schedule.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;

constexpr const char *kNameToken = "@KERNEL@";
/// Output elements per block of an interchanged column reduction (a few cache lines).
constexpr int kRowBlock = 64;
/// At most this many threads share a reduction to a scalar (its partial results' array).
constexpr int kMaxParts = 64;

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

/// evalIndex's domain that prints C expressions of type i64.
struct CodeDomain {
  using Value = std::string;
  /// Variables printed as others (a fused reduction's, as its group's first).
  const std::map<unsigned, unsigned> *rename = nullptr;
  /// A variable printed as 0 (the offset of a strided loop's congruence); -1: none.
  int zero = -1;
  std::optional<Value> constant(int64_t c) const { return fmt::format("((i64){})", c); }
  std::optional<Value> attr(unsigned) const { return std::nullopt; }
  std::optional<Value> var(unsigned v) const {
    if (static_cast<int>(v) == zero)
      return "((i64)0)";
    if (rename)
      if (auto it = rename->find(v); it != rename->end())
        v = it->second;
    return fmt::format("v{}", v);
  }
  std::optional<Value> extent(unsigned input, unsigned dim) const {
    return fmt::format("s{}_{}", input, dim);
  }
  std::optional<Value> neg(const Value &a) const { return "(-" + a + ")"; }
  std::optional<Value> add(const Value &a, const Value &b) const { return "(" + a + " + " + b + ")"; }
  std::optional<Value> mul(const Value &a, const Value &b) const { return "(" + a + " * " + b + ")"; }
  std::optional<Value> div(const Value &a, const Value &b) const {
    if (exact)
      for (const auto &[num, den] : *exact)
        if (a == num && b == den) // a multiple inside its strided loop: C's division is exact
          return "(" + a + " / " + b + ")";
    return (positive(b) ? "tofu_fdivp(" : "tofu_fdiv(") + a + ", " + b + ")";
  }
  std::optional<Value> mod(const Value &a, const Value &b) const {
    return (positive(b) ? "tofu_imodp(" : "tofu_imod(") + a + ", " + b + ")";
  }
  /// A positive integer literal (as constant() prints it): division by it needs no sign
  /// test of the divisor, and the compiler turns it into a multiplication.
  static bool positive(const Value &b) {
    return b.size() > 7 && b.compare(0, 6, "((i64)") == 0 && b[6] != '-' && b[6] != '0' &&
           b.back() == ')';
  }
  /// Numerators known to be multiples of their divisors (printed forms).
  const std::vector<std::pair<std::string, std::string>> *exact = nullptr;
};

const char *builtinCall(ir::Builtin b) {
  switch (b) {
  case ir::Builtin::Exp: return "expf";
  case ir::Builtin::Log: return "logf";
  case ir::Builtin::Sqrt: return "sqrtf";
  case ir::Builtin::Rsqrt: return "tofu_rsqrt";
  case ir::Builtin::Tanh: return "tanhf";
  case ir::Builtin::Sigmoid: return "tofu_sigmoid";
  case ir::Builtin::Relu: return "tofu_relu";
  case ir::Builtin::Abs: return "fabsf";
  case ir::Builtin::Sign: return "tofu_sign";
  case ir::Builtin::Floor: return "floorf";
  case ir::Builtin::Ceil: return "ceilf";
  case ir::Builtin::Pow: return "powf";
  case ir::Builtin::Min: return "tofu_min";
  case ir::Builtin::Max: return "tofu_max";
  case ir::Builtin::Select: return "tofu_select";
  case ir::Builtin::CastFloat: return "";
  case ir::Builtin::CastInt: return "truncf";
  case ir::Builtin::Sin: return "sinf";
  case ir::Builtin::Cos: return "cosf";
  case ir::Builtin::Tan: return "tanf";
  case ir::Builtin::Asin: return "asinf";
  case ir::Builtin::Acos: return "acosf";
  case ir::Builtin::Atan: return "atanf";
  case ir::Builtin::Sinh: return "sinhf";
  case ir::Builtin::Cosh: return "coshf";
  case ir::Builtin::Asinh: return "asinhf";
  case ir::Builtin::Acosh: return "acoshf";
  case ir::Builtin::Atanh: return "atanhf";
  case ir::Builtin::Erf: return "erff";
  case ir::Builtin::Round: return "nearbyintf"; // halves to even, as ONNX
  case ir::Builtin::IsNan: return "tofu_isnan";
  case ir::Builtin::IsInf: return "tofu_isinf";
  }
  return "";
}

const char *compareCall(ast::BinaryOp op) {
  switch (op) {
  case ast::BinaryOp::Eq: return "tofu_eq";
  case ast::BinaryOp::Ne: return "tofu_ne";
  case ast::BinaryOp::Lt: return "tofu_lt";
  case ast::BinaryOp::Le: return "tofu_le";
  case ast::BinaryOp::Gt: return "tofu_gt";
  case ast::BinaryOp::Ge: return "tofu_ge";
  case ast::BinaryOp::Add:
  case ast::BinaryOp::Sub:
  case ast::BinaryOp::Mul:
  case ast::BinaryOp::Div:
  case ast::BinaryOp::Mod:
    break;
  }
  return nullptr;
}

/// An opaque function with a native implementation in both dialects' prelude: it takes one
/// n x n matrix (row-major, overwritten as scratch) and writes its result, rank 0 or n x n.
/// The arithmetic follows the interpreter's (analysis/interpreter.cc) step for step.
struct NativeOpaque {
  const char *name;
  unsigned resultRank;
};

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

/// The loop nest of one op: where each reduction is computed.
class Lowering {
public:
  Lowering(const InstOp &op, KernelDialect dialect) : op_(op), dialect_(dialect) {}

  llvm::Expected<std::string> print() {
    sched_ = scheduleKernel(op_, dialect_ == KernelDialect::Cpp ? ScheduleTarget::Cpp
                                                                : ScheduleTarget::Cuda);
    std::string out = dialect_ == KernelDialect::Cpp ? printCpp() : printCuda();
    if (!error_.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "op '%s': %s",
                                     op_.name.c_str(), error_.c_str());
    return out;
  }

  const KernelSchedule &schedule() const { return sched_; }

private:
  using Red = ScheduledReduction;
  using Placement = ScheduledReduction::Placement;

  // --- expressions ---------------------------------------------------------------------

  std::string index(const ir::Expr &e) {
    if (auto s = evalIndex(e, CodeDomain{&rename_, zero_, &exact_}))
      return *s;
    fail("an index expression is not integer arithmetic");
    return "0";
  }

  std::string coord(const ir::Coord &c) {
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

  std::string read(const ir::Read &r) {
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
        off += fmt::format("(lo{} - o{}_{}) * st{}_{} + fl", flat_->outer, r.input, last - 1,
                           r.input, last - 1);
        return fmt::format("in{}[{}]", r.input, off);
      }
      for (size_t d = 0; d < cs.size(); ++d) {
        std::string term = fmt::format("({} - o{}_{})", cs[d], r.input, d);
        if (d + 1 < cs.size())
          term += fmt::format(" * st{}_{}", r.input, d);
        off += (d ? " + " : "") + term;
      }
      return fmt::format("in{}[{}]", r.input, off);
    }
    std::string call = fmt::format("{}_ld{}(in{}, I + {}", kNameToken, r.input, r.input,
                                   inputBase(r.input));
    for (const std::string &c : cs)
      call += ", " + c;
    return call + ")";
  }

  /// Whether `e` is integer-valued: index variables, extents, integer constants and their
  /// sums, differences, products and remainders by a nonzero integer constant.
  static bool isInt(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const: return cast<ir::Const>(e).isInt;
    case ir::ExprKind::VarRef:
    case ir::ExprKind::ExtentRef: return true;
    case ir::ExprKind::Neg: return isInt(*cast<ir::Neg>(e).operand);
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      switch (b.op) {
      case ast::BinaryOp::Add:
      case ast::BinaryOp::Sub:
      case ast::BinaryOp::Mul: return isInt(*b.lhs) && isInt(*b.rhs);
      case ast::BinaryOp::Mod: {
        const auto *c = llvm::dyn_cast<ir::Const>(b.rhs.get());
        return isInt(*b.lhs) && c && c->isInt && c->intValue != 0;
      }
      default: return false;
      }
    }
    default: return false;
    }
  }

  /// An integer-valued expression in i64; `%` truncates as fmod does.
  std::string intText(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const: return fmt::format("((i64){})", cast<ir::Const>(e).intValue);
    case ir::ExprKind::Neg: return "(-" + intText(*cast<ir::Neg>(e).operand) + ")";
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      return fmt::format("({} {} {})", intText(*b.lhs), ast::binaryOpSpelling(b.op),
                         intText(*b.rhs));
    }
    default: return "((i64)" + index(e) + ")";
    }
  }

  std::string value(const ir::Expr &e) {
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
      case ast::BinaryOp::Add: return "(" + l + " + " + r + ")";
      case ast::BinaryOp::Sub: return "(" + l + " - " + r + ")";
      case ast::BinaryOp::Mul: return "(" + l + " * " + r + ")";
      case ast::BinaryOp::Div: return "(" + l + " / " + r + ")";
      case ast::BinaryOp::Mod: return "fmodf(" + l + ", " + r + ")";
      default: break;
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

  /// A reduction's value where it is read.
  std::string reduction(const Red &r) {
    switch (r.placement) {
    case Placement::Inline: return fmt::format("r{}", r.id);
    case Placement::Temporary: return fmt::format("t{}[{}]", r.id, temporaryOffset(r));
    case Placement::Alias: return reduction(sched_.resolved(r));
    case Placement::Count: return fmt::format("k{}", r.id); // emitLocals

    }
    fail("a reduction without a placement");
    return "0";
  }

  /// The element of temporary `r` at the current values of its variables (row-major over
  /// their ranges, as its pass writes it).
  static std::string temporaryOffset(const Red &r) {
    std::string off;
    for (size_t k = 0; k < r.depends.size(); ++k) {
      const unsigned v = r.depends[k];
      off = k == 0 ? fmt::format("(v{0} - lo{0})", v)
                   : fmt::format("({}) * (hi{} - lo{}) + (v{} - lo{})", off, v, v, v, v);
    }
    return off.empty() ? "0" : off;
  }

  /// An opaque function's result at the call's coordinates, through its native
  /// implementation (kNativeOpaques): a helper per call site gathers the argument's slice
  /// with checked loads, calls the function, and indexes the result. In C++ each thread
  /// keeps the last slice's result for the current kernel call (keyed by the slice's fixed
  /// coordinates), so the elements of one result reuse one evaluation.
  std::string opaque(const ir::OpaqueCall &c) {
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
      fail(fmt::format("opaque function '{}': an argument that is not an input's slice",
                       c.function));
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
    std::string call = fmt::format("{}_opq{}(in{}, I + {}{}", kNameToken, id, input,
                                   inputBase(input),
                                   dialect_ == KernelDialect::Cpp ? fmt::format(", &memo[{}]", id) : "");
    for (const ir::Coord *co : coords)
      if (co)
        call += ", " + coord(*co);
    for (const ir::Coord &co : c.coords)
      call += ", " + coord(co);
    return call + ")";
  }

  void emitOpaqueHelper(unsigned id, const NativeOpaque &fn, unsigned input,
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
    add(fmt::format("{} float {}_opq{}(const float *p, const i64 *q{}{}) {{",
                    cpp ? "static inline" : "static __device__", kNameToken, id,
                    cpp ? ", TofuOpqMemo *m" : "", params));
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

  // --- statements ----------------------------------------------------------------------

  void line(const std::string &s) { out_ += std::string(indent_ * 2, ' ') + s + "\n"; }

  /// The inline reductions of nest `nest` computed at the start of loop `slot`'s body (-1:
  /// before the nest's loops).
  void emitSlot(int nest, int slot) {
    for (const Red &r : sched_.reductions)
      if (r.placement == Placement::Inline && r.nest == nest && r.slot == slot && r.fusedWith < 0)
        emitReduction(r);
  }

  /// The reductions of the main nest computed per output element, outside any other
  /// reduction's loop.
  bool outerSlot(const Red &r) const {
    if (r.placement != Placement::Inline || r.nest != -1)
      return false;
    if (r.slot < 0)
      return true;
    for (unsigned v : op_.outputVars)
      if (r.slot == static_cast<int>(v))
        return true;
    return false;
  }

  /// The OpenMP reduction identifier of a reducer (Max and Min: the prelude's declared
  /// NaN-propagating reductions).
  static const char *simdReducer(ir::Reducer r) {
    switch (r) {
    case ir::Reducer::Sum: return "+";
    case ir::Reducer::Prod: return "*";
    case ir::Reducer::Max: return "tofu_maxr";
    case ir::Reducer::Min: return "tofu_minr";
    }
    return "+";
  }

  std::string combineLine(const Red &r, const std::string &x) const {
    switch (r.node->reducer) {
    case ir::Reducer::Sum: return fmt::format("r{} += {};", r.id, x);
    case ir::Reducer::Prod: return fmt::format("r{} *= {};", r.id, x);
    case ir::Reducer::Max: return fmt::format("r{0} = tofu_max(r{0}, {1});", r.id, x);
    case ir::Reducer::Min: return fmt::format("r{0} = tofu_min(r{0}, {1});", r.id, x);
    }
    return "";
  }

  /// The number of leading variables of `vars` up to the last one at which some
  /// reduction of nest `nest` is placed (0 when none is).
  size_t slottedPrefix(int nest, const std::vector<unsigned> &vars) const {
    size_t n = 0;
    for (size_t k = 0; k < vars.size(); ++k)
      if (sched_.hasInlineAt(nest, static_cast<int>(vars[k])))
        n = k + 1;
    return n;
  }

  /// A reduction split across the threads of a block. Its leading variables up to the last
  /// one at which a nested reduction is placed loop serially in every thread (the nested
  /// reductions, computed once per value as in the serial nest, are themselves split across
  /// the block); each thread then takes every blockDim.x-th term of the flattened space of
  /// the remaining variables, and the block combines. (Flattening all the variables would
  /// recompute a nested reduction per term: a softmax's normaliser per class.)
  /// The first and end values of loop `v` (a part of its range under bounds_).
  std::string loOf(unsigned v) const {
    auto b = bounds_.find(v);
    return b != bounds_.end() ? b->second.first : fmt::format("lo{}", v);
  }
  std::string hiOf(unsigned v) const {
    auto b = bounds_.find(v);
    return b != bounds_.end() ? b->second.second : fmt::format("hi{}", v);
  }

  void emitBlockReduction(const Red &r) {
    const ir::Reduce &node = *r.node;
    line(fmt::format("float r{} = {};", r.id, floatLiteral(reducerIdentity<float>(node.reducer))));
    line("{");
    ++indent_;
    const size_t serial = slottedPrefix(r.nest, node.vars);
    for (size_t k = 0; k < serial; ++k) {
      const unsigned v = node.vars[k];
      line(fmt::format("for (i64 v{0} = {1}; v{0} < {2}; ++v{0}) {{", v, loOf(v), hiOf(v)));
      ++indent_;
      emitSlot(r.nest, static_cast<int>(v)); // every thread is here: collective
    }
    std::string count;
    for (size_t k = serial; k < node.vars.size(); ++k) {
      const unsigned v = node.vars[k];
      count += fmt::format("{0}({2} > {1} ? {2} - {1} : 0)", count.empty() ? "" : " * ", loOf(v),
                           hiOf(v));
    }
    line(fmt::format("const i64 c{} = {};", r.id, count.empty() ? "1" : count));
    line(fmt::format("for (i64 u{0} = threadIdx.x; u{0} < c{0}; u{0} += blockDim.x) {{", r.id));
    ++indent_;
    line(fmt::format("i64 q{0} = u{0};", r.id));
    for (size_t k = node.vars.size(); k-- > serial;) {
      const unsigned v = node.vars[k];
      line(fmt::format("const i64 v{0} = {1} + q{2} % ({3} - {1});", v, loOf(v), r.id, hiOf(v)));
      if (k > serial)
        line(fmt::format("q{} /= {} - {};", r.id, hiOf(v), loOf(v)));
    }
    const bool outer = collective_;
    collective_ = false; // each thread its own terms: nothing nested is placed here
    line(combineLine(r, value(*node.body)));
    collective_ = outer;
    --indent_;
    line("}");
    for (size_t k = 0; k < serial; ++k) {
      --indent_;
      line("}");
    }
    const int op = node.reducer == ir::Reducer::Sum    ? 0
                   : node.reducer == ir::Reducer::Prod ? 1
                   : node.reducer == ir::Reducer::Max  ? 2
                                                       : 3; // tofu_combine's codes
    line(fmt::format("r{0} = tofu_block_reduce(r{0}, {1});", r.id, op));
    --indent_;
    line("}");
  }

  void emitReduction(const Red &r) {
    if (block_ && collective_)
      return emitBlockReduction(r);
    const bool wasCollective = collective_;
    collective_ = false; // what is nested inside runs serially in each thread
    emitSerialReduction(r);
    collective_ = wasCollective;
  }

  /// Opens the loop of reduction variable `v` of `r`: over its range, or, when the schedule
  /// strides it (StridedVar), from the first solution of its congruence in steps of the
  /// modulus over the gcd. `pragma` comes right before the `for`.
  void openReductionLoop(const Red &r, unsigned v, const std::string &pragma) {
    const StridedVar *sv = nullptr;
    for (const StridedVar &x : r.strides)
      if (x.var == v)
        sv = &x;
    for (const PickedVar &p : r.picks)
      if (p.var == v) {
        // One position: the value's, when it is an integer in range; the first, when it is
        // NaN (the condition then gives the sum its NaN); none otherwise.
        line(fmt::format("const float e{} = {};", v, value(*p.value)));
        line(fmt::format("i64 from{0} = hi{0}, to{0} = hi{0};", v));
        line(fmt::format("if (e{0} != e{0}) {{ from{0} = lo{0}; to{0} = lo{0} + 1; }}", v));
        line(fmt::format("else if (e{0} >= (float)lo{0} && e{0} < (float)hi{0} && "
                         "(float)(i64)e{0} == e{0}) {{ from{0} = (i64)e{0}; to{0} = from{0} + 1; }}",
                         v));
        if (!pragma.empty())
          line(pragma);
        line(fmt::format("for (i64 v{0} = from{0}; v{0} < to{0}; ++v{0}) {{", v));
        ++indent_;
        return;
      }
    if (!sv) {
      if (!pragma.empty())
        line(pragma); // (a strided loop runs a few window positions: not worth vectors)
      if (auto b = bounds_.find(v); b != bounds_.end())
        line(fmt::format("for (i64 v{0} = {1}; v{0} < {2}; ++v{0}) {{", v, b->second.first,
                         b->second.second));
      else
        line(fmt::format("for (i64 v{0} = lo{0}; v{0} < hi{0}; ++v{0}) {{", v));
      ++indent_;
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
    line(fmt::format("const i64 a{} = {};", v, offset));
    line(fmt::format("i64 from{0} = hi{0};", v));
    line(fmt::format("if (tofu_imodp(a{0}, {1}) == 0) from{0} = lo{0} + tofu_imodp("
                     "tofu_imodp(-(a{0} / {1}) * {2}, {3}) - lo{0}, {3});",
                     v, g, inv, step));
    line(fmt::format("for (i64 v{0} = from{0}; v{0} < hi{0}; v{0} += {1}) {{", v, step));
    ++indent_;
  }

  /// The reads through which loops `a` (outer) and `b` (inner, adjacent) can run as one
  /// flat loop over contiguous memory, found in `e`: every use of `a` and `b` is as the
  /// last two coordinates, exactly, of a read, and nothing computed at either loop (an
  /// inline reduction there, a temporary indexed by either) stands between. False when
  /// some use is not.
  bool flatReads(const ir::Expr &e, unsigned a, unsigned b,
                 std::vector<const ir::Read *> &reads) const {
    if (const auto *r = dyn_cast<ir::Reduce>(&e)) {
      const Red *s = &sched_.resolved(sched_.of(r));
      const auto uses = [&](const std::vector<unsigned> &vs) {
        return std::find(vs.begin(), vs.end(), a) != vs.end() ||
               std::find(vs.begin(), vs.end(), b) != vs.end();
      };
      switch (s->placement) {
      case Placement::Count: return true;
      case Placement::Temporary: return !uses(s->depends);
      case Placement::Inline: return !uses(s->depends) && !uses(s->loops);
      case Placement::Alias: return false;
      }
      return false;
    }
    if (const auto *r = dyn_cast<ir::Read>(&e)) {
      const size_t n = r->coords.size();
      if (n >= 2 && ir::exactVar(r->coords[n - 2]) == a && ir::exactVar(r->coords[n - 1]) == b) {
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

  /// The run-time test that each read's row is whole (b's range covers its buffer's last
  /// dimension): then a and b step through contiguous memory.
  std::string flatConditions(unsigned b, const std::vector<const ir::Read *> &reads) const {
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

  /// A reduction with those fused with it (KernelSchedule::fusedGroup): one loop nest
  /// over the first one's variables, each member's variables renamed to them.
  void emitSerialReduction(const Red &r) {
    const std::vector<const Red *> group = sched_.fusedGroup(r.id);
    const ir::Reduce &node = *r.node;
    for (const Red *m : group)
      line(fmt::format("float r{} = {};", m->id,
                       floatLiteral(reducerIdentity<float>(m->node->reducer))));
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
      line(fmt::format("if ({}) {{", flatConditions(node.vars.back(), reads)));
      ++indent_;
      flat_ = FlatPair{node.vars[node.vars.size() - 2], node.vars.back()};
      emitReductionLoops(r, group, node.vars.size() - 2, true);
      flat_.reset();
      --indent_;
      line("} else {");
      ++indent_;
      emitReductionLoops(r, group, node.vars.size(), false);
      --indent_;
      line("}");
    } else {
      emitReductionLoops(r, group, node.vars.size(), false);
    }
    knownTrue_.clear();
    exact_.clear();
  }

  /// The loops of `r`'s group: the first `loops` variables as loops (a flattened pair after
  /// them when `flat`), then each member's combine.
  void emitReductionLoops(const Red &r, const std::vector<const Red *> &group, size_t loops,
                          bool flat) {
    const ir::Reduce &node = *r.node;
    const bool innermostFree =
        node.vars.empty() || !sched_.hasInlineAt(r.nest, static_cast<int>(node.vars.back()));
    std::string ids;
    for (const Red *m : group)
      ids += fmt::format("{}r{}", ids.empty() ? "" : ", ", m->id);
    if (flat) {
      for (size_t k = 0; k < loops; ++k) {
        openReductionLoop(r, node.vars[k], "");
        emitSlot(r.nest, static_cast<int>(node.vars[k]));
      }
      const unsigned a = flat_->outer, b = flat_->inner;
      line(fmt::format("#pragma omp simd reduction({}:{})", simdReducer(node.reducer), ids));
      line(fmt::format("for (i64 fl = 0; fl < (hi{0} - lo{0}) * (hi{1} - lo{1}); ++fl) {{", a, b));
      ++indent_;
      emitCombines(group, node);
      --indent_;
      line("}");
      for (size_t k = 0; k < loops; ++k) {
        --indent_;
        line("}");
      }
      return;
    }
    for (size_t k = 0; k < node.vars.size(); ++k) {
      unsigned v = node.vars[k];
      std::string pragma;
      if (k + 1 == node.vars.size() && innermostFree && dialect_ == KernelDialect::Cpp)
        pragma = fmt::format("#pragma omp simd reduction({}:{})", simdReducer(node.reducer), ids);
      openReductionLoop(r, v, pragma);
      emitSlot(r.nest, static_cast<int>(v));
    }
    for (const StridedVar &sv : r.strides)
      knownTrue_.insert(sv.guard);
    emitCombines(group, node);
    for (size_t k = 0; k < node.vars.size(); ++k) {
      --indent_;
      line("}");
    }
  }

  /// Each member's term combined into it, its variables renamed to the first member's.
  void emitCombines(const std::vector<const Red *> &group, const ir::Reduce &node) {
    for (const Red *m : group) {
      for (size_t k = 0; k < node.vars.size(); ++k)
        if (m->node->vars[k] != node.vars[k])
          rename_[m->node->vars[k]] = node.vars[k];
      line(combineLine(*m, value(*m->node->body)));
      rename_.clear();
    }
  }

  unsigned inputBase(unsigned input) const {
    unsigned base = 2 * static_cast<unsigned>(op_.vars.size());
    for (unsigned i = 0; i < input; ++i)
      base += 3 * op_.inputs[i].rank;
    return base;
  }

  /// Locals every variant uses: ranges, input geometry, pointers, output extents.
  void emitLocals(const std::string &args) {
    line(fmt::format("const i64 *I = {}ints;", args));
    for (unsigned v = 0; v < op_.vars.size(); ++v)
      line(fmt::format("const i64 lo{0} = I[{1}], hi{0} = I[{2}];", v, 2 * v, 2 * v + 1));
    for (unsigned i = 0; i < op_.inputs.size(); ++i) {
      unsigned base = inputBase(i), rank = op_.inputs[i].rank;
      for (unsigned d = 0; d < rank; ++d)
        line(fmt::format("const i64 s{0}_{1} = I[{2}], o{0}_{1} = I[{3}], e{0}_{1} = I[{4}];", i,
                         d, base + 3 * d, base + 3 * d + 1, base + 3 * d + 2));
      for (unsigned d = rank; d-- > 0;)
        line(d + 1 == rank ? fmt::format("const i64 st{}_{} = 1;", i, d)
                           : fmt::format("const i64 st{0}_{1} = st{0}_{2} * e{0}_{2};", i, d, d + 1));
      line(fmt::format("const float *__restrict__ in{0} = {1}in[{0}];", i, args));
      if (rank == 0) // a scalar input (a learning rate, a loss's gradient): read once
        line(fmt::format("const float x{0} = in{0}[0];", i));
    }
    line(fmt::format("float *__restrict__ out = {}out;", args));
    // Counting sums: the product of their extents, once per call (a value the loops then
    // read as an invariant, with no branch in them).
    for (const Red &r : sched_.reductions)
      if (r.placement == Placement::Count) {
        std::string n = floatLiteral(r.countScale);
        for (unsigned v : r.node->vars)
          n += fmt::format(" * (float)(hi{0} > lo{0} ? hi{0} - lo{0} : 0)", v);
        line(fmt::format("const float k{} = {};", r.id, n));
      }
    for (unsigned k = 0; k < op_.outputVars.size(); ++k) {
      unsigned v = op_.outputVars[k];
      line(fmt::format("const i64 n{0} = hi{0} - lo{0};", v));
      line(fmt::format("if (n{} <= 0) return;", v));
    }
    line("(void)I;");
  }

  std::string outputOffset() const {
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

  /// The per-input checked loads (zero outside the tensor, NaN outside the region).
  void emitLoaders(const char *qualifier) {
    for (unsigned i = 0; i < op_.inputs.size(); ++i) {
      unsigned rank = op_.inputs[i].rank;
      if (rank == 0)
        continue;
      std::string params;
      for (unsigned d = 0; d < rank; ++d)
        params += fmt::format(", i64 c{}", d);
      line(fmt::format("{} float {}_ld{}(const float *p, const i64 *q{}) {{", qualifier,
                       kNameToken, i, params));
      ++indent_;
      std::string outside, region, off;
      for (unsigned d = 0; d < rank; ++d) {
        outside += fmt::format("{0}c{1} < 0 || c{1} >= q[{2}]", d ? " || " : "", d, 3 * d);
        line(fmt::format("const i64 r{0} = c{0} - q[{1}];", d, 3 * d + 1));
        region += fmt::format("{0}r{1} < 0 || r{1} >= q[{2}]", d ? " || " : "", d, 3 * d + 2);
        off = d == 0 ? "r0" : fmt::format("({}) * q[{}] + r{}", off, 3 * d + 2, d);
      }
      line("if (" + outside + ") return 0.0f;");
      line("if (" + region + ") return TOFU_NAN;");
      line("return p[" + off + "];");
      --indent_;
      line("}");
    }
  }

  /// The pass that fills temporary `t`: one parallel loop over the values of its
  /// variables, each computing the reduction (and what its schedule computes with it) and
  /// storing it at its row-major offset.
  void emitTemporaryPass(const Red &t) {
    const std::vector<const Red *> group = sched_.fusedGroup(t.id);
    line("{");
    ++indent_;
    for (const Red *m : group)
      emitSlot(m->nest, -1);
    line("#pragma omp parallel for num_threads(a->threads) schedule(static) if (a->threads > 1)");
    line(fmt::format("for (i64 f = 0; f < {}; ++f) {{", rangeProduct(t.depends)));
    ++indent_;
    decodeRanges(t.depends, "f");
    for (const Red *m : group)
      for (unsigned v : t.depends)
        emitSlot(m->nest, static_cast<int>(v));
    emitSerialReduction(t);
    for (const Red *m : group)
      line(fmt::format("t{0}[f] = r{0};", m->id));
    --indent_;
    line("}");
    --indent_;
    line("}");
  }

  /// Whether the C++ kernel splits reduction `r` across its threads: a sum to a scalar
  /// output computed once per call (a loss), whose outermost loop is plain.
  bool splitAcrossThreads(const Red &r) const {
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

  /// `r` split across the threads: each thread its share of the outermost variable's range
  /// (a fixed partition per thread count), the partial results combined in order, so the
  /// result is the same from call to call.
  void emitSplitReduction(const Red &r) {
    const unsigned v = r.node->vars.front();
    line(fmt::format("float r{} = {};", r.id, floatLiteral(reducerIdentity<float>(r.node->reducer))));
    line("{");
    ++indent_;
    line(fmt::format("const i64 parts = a->threads > 1 ? (a->threads < {0} ? a->threads : {0}) : 1;",
                     kMaxParts));
    line(fmt::format("float part[{}];", kMaxParts));
    line(fmt::format("const i64 span = hi{0} > lo{0} ? hi{0} - lo{0} : 0;", v));
    line("#pragma omp parallel for num_threads(a->threads) schedule(static, 1) if (a->threads > 1)");
    line("for (i64 t = 0; t < parts; ++t) {");
    ++indent_;
    line(fmt::format("const i64 plo = lo{0} + span * t / parts, phi = lo{0} + span * (t + 1) / parts;",
                     v));
    bounds_[v] = {"plo", "phi"};
    emitSerialReduction(r);
    bounds_.clear();
    line(fmt::format("part[t] = r{};", r.id));
    --indent_;
    line("}");
    line("for (i64 t = 0; t < parts; ++t)");
    line("  " + combineLine(r, "part[t]"));
    --indent_;
    line("}");
  }

  /// The C++ kernel: the temporaries' passes, then the main nest as the schedule says (its
  /// leading output loops flattened into one OpenMP-parallel loop, the innermost a SIMD
  /// loop or the rows of an interchanged contraction).
  void emitCppNest() {
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
      line("out[0] = " + value(*op_.body) + ";");
      return;
    }
    if (n == 1 && sched_.interchange) {
      // A reduction over the rows of a column (a bias or scale gradient): blocks of the
      // output in parallel, each accumulated row by row.
      const unsigned v = ov[0];
      line(fmt::format("const i64 blocks = (n{} + {} - 1) / {};", v, kRowBlock, kRowBlock));
      line("#pragma omp parallel for num_threads(a->threads) schedule(static) if (a->threads > 1)");
      line("for (i64 b = 0; b < blocks; ++b) {");
      ++indent_;
      line(fmt::format("const i64 rlo = lo{0} + b * {1}, rhi = std::min(hi{0}, rlo + {1});", v,
                       kRowBlock));
      emitInterchanged(*op_.topReduce(), "rlo", "rhi");
      --indent_;
      line("}");
      return;
    }
    if (fast_ && n >= 2 && !sched_.interchange && sched_.vectorInnermost && opaqueSites() == 0 &&
        sched_.parallelLoops + 2 >= n) {
      // The two innermost output loops as one flat loop when the rows read are whole (an
      // element-wise op on 8 x 8 maps: one SIMD loop of 64, not 8 of 8).
      const unsigned a = ov[n - 2], b = ov[n - 1];
      std::vector<const ir::Read *> reads;
      if (!sched_.hasInlineAt(-1, static_cast<int>(a)) && flatReads(*op_.body, a, b, reads)) {
        line(fmt::format("if ({}) {{", flatConditions(b, reads)));
        ++indent_;
        flat_ = FlatPair{a, b};
        emitMainLoops(n - 2);
        flat_.reset();
        --indent_;
        line("} else {");
        ++indent_;
        emitMainLoops(sched_.parallelLoops);
        --indent_;
        line("}");
        return;
      }
    }
    emitMainLoops(sched_.parallelLoops);
  }

  /// The main nest's output loops, the first `m` flattened into the parallel loop (with
  /// flat_, the last two run as one flat SIMD loop after the others).
  void emitMainLoops(size_t m) {
    const std::vector<unsigned> &ov = op_.outputVars;
    const size_t n = ov.size();
    const size_t rows = flat_ ? n - 2 : n; // output loops before the flat pair
    if (flat_ && m == 0) {
      line(fmt::format("#pragma omp parallel for simd num_threads(a->threads) schedule(static) "
                       "if (a->threads > 1)"));
      line(fmt::format("for (i64 fl = 0; fl < n{} * n{}; ++fl)", flat_->outer, flat_->inner));
      line("  out[" + outputOffset() + "] = " + value(*op_.body) + ";");
      return;
    }
    std::string total;
    for (size_t k = 0; k < m; ++k)
      total += fmt::format("{}n{}", k ? " * " : "", ov[k]);
    const unsigned sites = opaqueSites();
    if (sites > 0) { // each thread its own memos
      line("#pragma omp parallel num_threads(a->threads) if (a->threads > 1)");
      line("{");
      ++indent_;
      line(fmt::format("TofuOpqMemo memo[{}];", sites));
      line("#pragma omp for schedule(static)");
    } else {
      line(fmt::format("#pragma omp parallel for{} num_threads(a->threads) schedule(static) "
                       "if (a->threads > 1)",
                       n == 1 && sched_.vectorInnermost ? " simd" : ""));
    }
    line(fmt::format("for (i64 f = 0; f < {}; ++f) {{", total));
    ++indent_;
    if (m == 1) {
      line(fmt::format("const i64 v{0} = lo{0} + f;", ov[0]));
    } else {
      line("i64 rest = f;");
      for (size_t k = m; k-- > 0;) {
        line(fmt::format("const i64 v{0} = lo{0} + rest % n{0};", ov[k]));
        if (k)
          line(fmt::format("rest /= n{};", ov[k]));
      }
    }
    for (size_t k = 0; k < m; ++k)
      emitSlot(-1, static_cast<int>(ov[k]));
    const bool interchange = sched_.interchange;
    const size_t plain = interchange ? n - 1 : rows; // loops nested as written
    for (size_t k = m; k < plain; ++k) {
      if (k + 1 == n && sched_.vectorInnermost)
        line("#pragma omp simd");
      line(fmt::format("for (i64 v{0} = lo{0}; v{0} < hi{0}; ++v{0}) {{", ov[k]));
      ++indent_;
      emitSlot(-1, static_cast<int>(ov[k]));
    }
    if (interchange) {
      emitInterchanged(*op_.topReduce());
    } else if (flat_) {
      line("#pragma omp simd");
      line(fmt::format("for (i64 fl = 0; fl < n{} * n{}; ++fl)", flat_->outer, flat_->inner));
      line("  out[" + outputOffset() + "] = " + value(*op_.body) + ";");
    } else {
      line("out[" + outputOffset() + "] = " + value(*op_.body) + ";");
    }
    for (size_t k = m; k < plain; ++k) {
      --indent_;
      line("}");
    }
    --indent_;
    line("}");
    if (sites > 0) {
      --indent_;
      line("}");
    }
  }

  /// The interchanged contraction: the output row (of the innermost output variable, from
  /// `rowLo` to `rowHi`) starts at the identity, then each term of the reduction's loops
  /// is combined into the whole row, contiguously.
  void emitInterchanged(const ir::Reduce &top, const std::string &rowLo = "",
                        const std::string &rowHi = "") {
    unsigned last = op_.outputVars.back();
    std::string row = fmt::format("for (i64 v{0} = {1}; v{0} < {2}; ++v{0})", last,
                                  rowLo.empty() ? fmt::format("lo{}", last) : rowLo,
                                  rowHi.empty() ? fmt::format("hi{}", last) : rowHi);
    std::string at = "out[" + outputOffset() + "]";
    line("#pragma omp simd");
    line(row);
    line(fmt::format("  {} = {};", at, floatLiteral(reducerIdentity<float>(top.reducer))));
    const Red &sched = sched_.of(&top);
    for (unsigned v : top.vars)
      openReductionLoop(sched, v, "");
    line("#pragma omp simd");
    line(row);
    for (const StridedVar &sv : sched.strides)
      knownTrue_.insert(sv.guard);
    std::string x = value(*top.body);
    knownTrue_.clear();
    exact_.clear();
    switch (top.reducer) {
    case ir::Reducer::Sum: line(fmt::format("  {} += {};", at, x)); break;
    case ir::Reducer::Prod: line(fmt::format("  {} *= {};", at, x)); break;
    case ir::Reducer::Max: line(fmt::format("  {0} = tofu_max({0}, {1});", at, x)); break;
    case ir::Reducer::Min: line(fmt::format("  {0} = tofu_min({0}, {1});", at, x)); break;
    }
    for (size_t k = 0; k < top.vars.size(); ++k) {
      --indent_;
      line("}");
    }
  }

  /// Decodes the variables `vars` (row-major over their ranges, the last fastest) from the
  /// flat index `flat`: a temporary's element.
  void decodeRanges(const std::vector<unsigned> &vars, const std::string &flat) {
    line(fmt::format("i64 rest = {};", flat));
    for (size_t k = vars.size(); k-- > 0;) {
      const unsigned v = vars[k];
      line(fmt::format("const i64 v{0} = lo{0} + rest % (hi{0} - lo{0});", v));
      if (k)
        line(fmt::format("rest /= hi{0} - lo{0};", v));
    }
    line("(void)rest;");
  }

  /// Decodes the variables `vars` (row-major, the last fastest) from the flat index `flat`.
  void decode(const std::vector<unsigned> &vars, const std::string &flat) {
    if (vars.empty())
      return;
    line(fmt::format("i64 rest = {};", flat));
    for (size_t k = vars.size(); k-- > 0;) {
      line(fmt::format("const i64 v{0} = lo{0} + rest % n{0};", vars[k]));
      if (k)
        line(fmt::format("rest /= n{};", vars[k]));
    }
  }

  static std::string extentProduct(const std::vector<unsigned> &vars) {
    std::string total = "1";
    for (unsigned v : vars)
      total += fmt::format(" * n{}", v);
    return total;
  }

  /// The CUDA nest. One thread per output element: a grid-stride loop over the share's
  /// elements. With block_, one block per value of the output variables the per-element
  /// reductions depend on (blockOutputVars()): a block-stride loop (the
  /// same trip count for every thread of a block) in which the block computes those
  /// reductions together, each split across its threads, then its threads share the output
  /// elements of that value (a softmax's row: its normaliser once, then the row), or, when
  /// no output variable is left, thread 0 writes the one element.
  void emitCudaNest() {
    const std::vector<unsigned> &ov = op_.outputVars;
    if (!block_) {
      line(fmt::format("const i64 total = {};", extentProduct(ov)));
      line("for (i64 f = (i64)blockIdx.x * blockDim.x + threadIdx.x; f < total; "
           "f += (i64)gridDim.x * blockDim.x) {");
      ++indent_;
      decode(ov, "f");
      emitSlot(-1, -1);
      for (unsigned v : ov)
        emitSlot(-1, static_cast<int>(v));
      line("out[" + outputOffset() + "] = " + value(*op_.body) + ";");
      --indent_;
      line("}");
      return;
    }
    const std::vector<unsigned> outer = blockOutputVars();
    std::vector<unsigned> inner;
    for (unsigned v : ov)
      if (std::find(outer.begin(), outer.end(), v) == outer.end())
        inner.push_back(v);
    line(fmt::format("const i64 total = {};", extentProduct(outer)));
    line("for (i64 f = blockIdx.x; f < total; f += gridDim.x) {");
    ++indent_;
    decode(outer, "f");
    collective_ = true; // the per-element reductions: they use only the block's variables
    for (const Red &r : sched_.reductions)
      if (outerSlot(r))
        emitReduction(r);
    collective_ = false;
    if (inner.empty()) {
      line("const float value = " + value(*op_.body) + ";");
      line("if (threadIdx.x == 0) out[" + outputOffset() + "] = value;");
    } else {
      line(fmt::format("const i64 per = {};", extentProduct(inner)));
      line("for (i64 g = threadIdx.x; g < per; g += blockDim.x) {");
      ++indent_;
      decode(inner, "g");
      line("out[" + outputOffset() + "] = " + value(*op_.body) + ";");
      --indent_;
      line("}");
    }
    --indent_;
    line("}");
  }

public:
  /// The output variables whose values the block variant gives one block each: those the
  /// reductions computed per output element depend on (a batch norm's channel, a softmax's
  /// row), in output order.
  std::vector<unsigned> blockOutputVars() const {
    std::set<unsigned> used;
    for (const Red &r : sched_.reductions)
      if (outerSlot(r))
        used.insert(r.depends.begin(), r.depends.end());
    std::vector<unsigned> out;
    for (unsigned v : op_.outputVars)
      if (used.count(v))
        out.push_back(v);
    return out;
  }

  /// The multi-launch entry points (after print(); KernelSource::passes).
  const std::vector<CudaTemporaryPass> &passes() const { return passes_; }
  const std::vector<std::vector<unsigned>> &passesBlockReductions() const {
    return passesBlockReductions_;
  }
  const std::vector<unsigned> &passesBlockOutputVars() const { return passesBlockOutputVars_; }

  /// The variables of the reductions a block variant splits (after print()).
  std::vector<std::vector<unsigned>> blockReductions() const {
    std::vector<std::vector<unsigned>> out;
    for (const Red &r : sched_.reductions)
      if (outerSlot(r))
        out.push_back(r.node->vars);
    return out;
  }

private:
  void emitVariants(void (Lowering::*nest)()) {
    line("if (a->fast) {");
    ++indent_;
    fast_ = true;
    (this->*nest)();
    --indent_;
    line("} else {");
    ++indent_;
    fast_ = false;
    (this->*nest)();
    --indent_;
    line("}");
  }

  /// How many opaque calls the body makes: each call site has a memo per thread (its last
  /// argument slice and result), made by the kernel for the duration of one call.
  unsigned opaqueSites() const {
    unsigned n = 0;
    ir::walk(*op_.body, [&](const ir::Expr &e) { n += llvm::isa<ir::OpaqueCall>(e) ? 1 : 0; });
    return n;
  }

  std::string printCpp() {
    emitLoaders("static inline");
    std::string head = out_;
    out_.clear();
    line(fmt::format("extern \"C\" void {}(const TofuKernelArgs *a) {{", kNameToken));
    ++indent_;
    emitLocals("a->");
    std::string prev; // the temporaries, one after another in the scratch space
    for (const Red &r : sched_.reductions) {
      if (r.placement != Placement::Temporary)
        continue;
      line(fmt::format("float *const t{} = {};", r.id, prev.empty() ? "a->scratch" : prev));
      prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
    }
    if (opaqueSites() > 0) // outside the parallel loop (reductions computed once per call)
      line(fmt::format("TofuOpqMemo memo[{}];", opaqueSites()));
    emitVariants(&Lowering::emitCppNest);
    --indent_;
    line("}");
    return head + helpers_ + out_; // the opaque helpers call the loaders
  }

  /// The CUDA kernels: the one-launch entry points (`<name>`, and `<name>_blk` where
  /// reductions are computed per output), then, where the CudaPasses schedule has
  /// temporaries, the multi-launch ones: per temporary its pass (`<name>_p<id>`) and the
  /// combine of its partial results (`<name>_c<id>`), and the main nest reading them
  /// (`<name>_mp`, and `<name>_mp_blk`).
  std::string printCuda() {
    emitLoaders("static __device__ __forceinline__");
    const size_t head = out_.size();
    line(fmt::format("struct {}_args {{ i64 ints[{}]; const float *in[{}]; float *out; int fast; "
                     "int threads; float *scratch; i64 parts; }};",
                     kNameToken, std::max(1u, inputBase(static_cast<unsigned>(op_.inputs.size()))),
                     std::max<size_t>(1, op_.inputs.size())));
    emitCudaMain("");
    KernelSchedule passes = scheduleKernel(op_, ScheduleTarget::CudaPasses);
    if (!passes.temporaries().empty()) {
      const KernelSchedule single = std::move(sched_);
      sched_ = std::move(passes);
      for (const Red &t : sched_.reductions)
        if (t.placement == Placement::Temporary) {
          CudaTemporaryPass pass{t.id, t.depends, t.node->vars, {}};
          for (const Red &n : sched_.reductions)
            if (n.placement == Placement::Inline && n.nest == static_cast<int>(t.id))
              pass.nested.push_back(n.node->vars);
          passes_.push_back(std::move(pass));
          emitCudaPass(t);
          emitCudaCombine(t);
        }
      emitCudaMain("_mp");
      passesBlockReductions_ = blockReductions();
      passesBlockOutputVars_ = blockOutputVars();
      sched_ = single;
    }
    std::string kernel = out_.substr(head);
    return out_.substr(0, head) + helpers_ + kernel;
  }

  /// The main nest's entry points under the current schedule, named `<name><suffix>`: a
  /// thread per output, and, where reductions are computed per output, `..._blk`.
  void emitCudaMain(const std::string &suffix) {
    for (bool block : {false, true}) {
      if (block && blockReductions().empty())
        break;
      line(fmt::format("extern \"C\" __global__ void {0}{1}{2}(const {0}_args args) {{",
                       kNameToken, suffix, block ? "_blk" : ""));
      ++indent_;
      emitCudaLocals();
      block_ = block;
      emitVariants(&Lowering::emitCudaNest);
      block_ = false;
      --indent_;
      line("}");
    }
  }

  /// An entry point's locals: emitLocals' and the temporaries' pointers into the scratch
  /// space, one after another in the order of their passes, then the partial results.
  void emitCudaLocals() {
    line(fmt::format("const {}_args *a = &args;", kNameToken));
    emitLocals("a->");
    std::string prev = "a->scratch";
    for (const Red &r : sched_.reductions) {
      if (r.placement != Placement::Temporary)
        continue;
      line(fmt::format("float *const t{} = {};", r.id, prev));
      prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
    }
    if (prev != "a->scratch")
      line(fmt::format("float *const tpart = {}; (void)tpart;", prev));
  }

  /// The pass of temporary `t` (`<name>_p<id>`): a block per value of its index and part of
  /// its first variable's range (a->parts parts, a block-stride loop over both), the block
  /// splitting that part's terms across its threads. One part writes the temporary; more
  /// write partial results, in `tpart` (value-major), for `<name>_c<id>` to combine.
  void emitCudaPass(const Red &t) {
    pass_ = &t;
    line(fmt::format("extern \"C\" __global__ void {0}_p{1}(const {0}_args args) {{", kNameToken,
                     t.id));
    ++indent_;
    emitCudaLocals();
    emitVariants(&Lowering::emitCudaPassNest);
    --indent_;
    line("}");
    pass_ = nullptr;
  }

  void emitCudaPassNest() {
    const Red &t = *pass_;
    line("const i64 parts = a->parts > 0 ? a->parts : 1;");
    line(fmt::format("const i64 count = {};", rangeProduct(t.depends)));
    line("for (i64 b = blockIdx.x; b < count * parts; b += gridDim.x) {");
    ++indent_;
    line("const i64 e = b / parts, p = b % parts;");
    decodeRanges(t.depends, "e");
    line("(void)p;");
    collective_ = true;
    block_ = true;
    emitSlot(t.id, -1);
    for (unsigned v : t.depends)
      emitSlot(t.id, static_cast<int>(v));
    if (!t.node->vars.empty()) {
      const unsigned v = t.node->vars.front();
      line(fmt::format("const i64 span{0} = hi{0} > lo{0} ? hi{0} - lo{0} : 0;", v));
      line(fmt::format("const i64 plo{0} = lo{0} + span{0} * p / parts, "
                       "phi{0} = lo{0} + span{0} * (p + 1) / parts;", v));
      bounds_[v] = {fmt::format("plo{}", v), fmt::format("phi{}", v)};
    }
    emitReduction(t);
    bounds_.clear();
    collective_ = false;
    block_ = false;
    line("if (threadIdx.x == 0) {");
    line(fmt::format("  if (parts == 1) t{0}[e] = r{0};", t.id));
    line(fmt::format("  else tpart[e * parts + p] = r{};", t.id));
    line("}");
    --indent_;
    line("}");
  }

  /// The combine of temporary `t`'s partial results (`<name>_c<id>`), a thread per value,
  /// in part order (the same result from run to run).
  void emitCudaCombine(const Red &t) {
    line(fmt::format("extern \"C\" __global__ void {0}_c{1}(const {0}_args args) {{", kNameToken,
                     t.id));
    ++indent_;
    emitCudaLocals();
    line("const i64 parts = a->parts > 0 ? a->parts : 1;");
    line(fmt::format("const i64 count = {};", rangeProduct(t.depends)));
    line("for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < count; "
         "e += (i64)gridDim.x * blockDim.x) {");
    ++indent_;
    line(fmt::format("float r{} = {};", t.id, floatLiteral(reducerIdentity<float>(t.node->reducer))));
    line("for (i64 p = 0; p < parts; ++p)");
    line("  " + combineLine(t, "tpart[e * parts + p]"));
    line(fmt::format("t{0}[e] = r{0};", t.id));
    --indent_;
    line("}");
    --indent_;
    line("}");
  }

  /// The number of values `vars` take together: the product of their ranges (a
  /// temporary's size, its pass's trip count).
  static std::string rangeProduct(const std::vector<unsigned> &vars) {
    std::string p;
    for (unsigned v : vars)
      p += fmt::format("{0}(hi{1} > lo{1} ? hi{1} - lo{1} : 0)", p.empty() ? "" : " * ", v);
    return p.empty() ? "1" : p;
  }

  void fail(const std::string &msg) {
    if (error_.empty())
      error_ = msg;
  }

  const InstOp &op_;
  KernelDialect dialect_;
  KernelSchedule sched_;
  std::map<unsigned, unsigned> rename_; ///< while printing a fused member's body
  /// Loops over a part of their range (a split reduction's share): bound expressions.
  std::map<unsigned, std::pair<std::string, std::string>> bounds_;
  int zero_ = -1;                       ///< a variable printed as 0 (CodeDomain::zero)
  /// Inside strided loops: their offsets and moduli (CodeDomain::exact).
  std::vector<std::pair<std::string, std::string>> exact_;
  std::set<const ir::Expr *> knownTrue_; ///< guards a strided loop makes true, printed as 1
  /// Two adjacent loops run as one flat loop `fl` over contiguous rows (fast variant).
  struct FlatPair {
    unsigned outer, inner;
  };
  std::optional<FlatPair> flat_;
  std::map<const ir::OpaqueCall *, unsigned> opaqueSite_;
  std::string helpers_; ///< one function per opaque call site, before the kernel
  std::string out_;
  unsigned indent_ = 0;
  bool fast_ = false;
  /// The CUDA multi-launch entry points' temporaries and main nest (printCuda).
  std::vector<CudaTemporaryPass> passes_;
  std::vector<std::vector<unsigned>> passesBlockReductions_;
  std::vector<unsigned> passesBlockOutputVars_;
  const Red *pass_ = nullptr; ///< the temporary whose pass is being printed
  bool block_ = false;       ///< printing the block-per-output CUDA variant
  bool collective_ = false;  ///< block_: every thread of the block runs here alike
  std::string error_;
};

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The helpers, written once for both dialects: the scalar semantics of the interpreter
// (NaN-propagating comparisons, min and max; floor division of indices).
const char *kCommonPrelude = R"(
TOFU_DEV i64 tofu_fdiv(i64 a, i64 b) { i64 q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TOFU_DEV i64 tofu_imod(i64 a, i64 b) { return a - tofu_fdiv(a, b) * b; }
// The same for a positive divisor (a literal: the compiler divides by multiplying).
TOFU_DEV i64 tofu_fdivp(i64 a, i64 b) { i64 q = a / b; return q - (a - q * b < 0); }
TOFU_DEV i64 tofu_imodp(i64 a, i64 b) { i64 r = a % b; return r + (r < 0 ? b : 0); }
TOFU_DEV i64 tofu_didx(float v) { return (v == v && v - v == 0.0f) ? (i64)floorf(v) : TOFU_I64_MIN; }
TOFU_DEV float tofu_rsqrt(float x) { return 1.0f / sqrtf(x); }
TOFU_DEV float tofu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
TOFU_DEV float tofu_relu(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
TOFU_DEV float tofu_sign(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }
// Written without short-circuits (`|`, not `||`; the choice before the NaN test) so that a
// SIMD loop over them needs no control flow and vectorises.
TOFU_DEV float tofu_min(float x, float y) { const float r = y < x ? y : x; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_max(float x, float y) { const float r = y > x ? y : x; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_select(float c, float x, float y) { const float r = c != 0.0f ? x : y; return c != c ? TOFU_NAN : r; }
TOFU_DEV float tofu_isnan(float x) { return x != x ? 1.0f : 0.0f; }
TOFU_DEV float tofu_isinf(float x) { return ((x == TOFU_INF) | (x == -TOFU_INF)) ? 1.0f : 0.0f; }
TOFU_DEV float tofu_eq(float x, float y) { const float r = x == y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_ne(float x, float y) { const float r = x != y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_lt(float x, float y) { const float r = x < y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_le(float x, float y) { const float r = x <= y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_gt(float x, float y) { const float r = x > y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
TOFU_DEV float tofu_ge(float x, float y) { const float r = x >= y ? 1.0f : 0.0f; return ((x != x) | (y != y)) ? TOFU_NAN : r; }
// Native opaque functions: one n x n matrix `a` (scratch), the result in `out`.
TOFU_DEV void tofu_opq_Cholesky(float *a, i64 n, float *out) {
  for (i64 j = 0; j < n; ++j)
    for (i64 i = 0; i < n; ++i) out[i * n + j] = 0.0f;
  for (i64 j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (i64 k = 0; k < j; ++k) d -= (double)out[j * n + k] * out[j * n + k];
    out[j * n + j] = (float)sqrt(d); // NaN when the matrix is not positive definite
    for (i64 i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (i64 k = 0; k < j; ++k) s -= (double)out[i * n + k] * out[j * n + k];
      out[i * n + j] = (float)(s / out[j * n + j]);
    }
  }
}
TOFU_DEV void tofu_opq_MatrixInverse(float *a, i64 n, float *inv) {
  for (i64 i = 0; i < n * n; ++i) inv[i] = 0.0f;
  for (i64 i = 0; i < n; ++i) inv[i * n + i] = 1.0f;
  for (i64 c = 0; c < n; ++c) {
    i64 p = c;
    for (i64 r = c + 1; r < n; ++r)
      if (fabsf(a[r * n + c]) > fabsf(a[p * n + c])) p = r;
    if (a[p * n + c] == 0.0f || a[p * n + c] != a[p * n + c]) { // singular
      for (i64 i = 0; i < n * n; ++i) inv[i] = TOFU_NAN;
      return;
    }
    for (i64 k = 0; k < n; ++k) {
      float t = a[c * n + k]; a[c * n + k] = a[p * n + k]; a[p * n + k] = t;
      t = inv[c * n + k]; inv[c * n + k] = inv[p * n + k]; inv[p * n + k] = t;
    }
    const float d = a[c * n + c];
    for (i64 k = 0; k < n; ++k) { a[c * n + k] /= d; inv[c * n + k] /= d; }
    for (i64 r = 0; r < n; ++r) {
      if (r == c) continue;
      const float f = a[r * n + c];
      for (i64 k = 0; k < n; ++k) { a[r * n + k] -= f * a[c * n + k]; inv[r * n + k] -= f * inv[c * n + k]; }
    }
  }
}
TOFU_DEV void tofu_opq_Determinant(float *a, i64 n, float *out) {
  double det = 1.0;
  for (i64 c = 0; c < n; ++c) { // LU with partial pivoting
    i64 p = c;
    for (i64 r = c + 1; r < n; ++r)
      if (fabsf(a[r * n + c]) > fabsf(a[p * n + c])) p = r;
    if (a[p * n + c] == 0.0f) { det = 0.0; break; }
    if (p != c) {
      for (i64 k = 0; k < n; ++k) { float t = a[c * n + k]; a[c * n + k] = a[p * n + k]; a[p * n + k] = t; }
      det = -det;
    }
    det *= a[c * n + c];
    for (i64 r = c + 1; r < n; ++r) {
      const float f = a[r * n + c] / a[c * n + c];
      for (i64 k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
    }
  }
  out[0] = (float)det;
}
)";

} // namespace

const std::string &kernelPrelude(KernelDialect dialect) {
  static const std::string cpp = std::string(R"(// Generated by Tofu's kernel generator.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
typedef int64_t i64;
extern "C" {
struct TofuKernelArgs { const i64 *ints; const float *const *in; float *out; int32_t fast; int32_t threads; float *scratch; };
}
#define TOFU_DEV static inline
#define TOFU_NAN __builtin_nanf("")
#define TOFU_INF __builtin_inff()
#define TOFU_I64_MIN INT64_MIN
// An opaque call site's memo in one thread of one kernel call: the last argument slice's
// fixed coordinates and the function's result for it.
struct TofuOpqMemo { bool have = false; i64 key[10]; std::vector<float> arg, res; };
)") + kCommonPrelude + R"(
// glibc's vector math (libmvec, linked with the kernels): the SIMD variants of the float
// functions the kernels call, so that loops over them vectorise (<cmath> declares them only
// under -ffast-math, which would also drop the NaN tests the semantics need).
#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP)
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float sinf(float) noexcept;
#pragma omp declare simd notinbranch
float cosf(float) noexcept;
#pragma omp declare simd notinbranch
float tanf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float powf(float, float) noexcept;
}
#endif
// Max and Min as OpenMP reductions (SIMD loops), NaN-propagating like the combine.
#pragma omp declare reduction(tofu_maxr : float : omp_out = tofu_max(omp_out, omp_in)) initializer(omp_priv = -TOFU_INF)
#pragma omp declare reduction(tofu_minr : float : omp_out = tofu_min(omp_out, omp_in)) initializer(omp_priv = TOFU_INF)
)";
  static const std::string cuda = std::string(R"(// Generated by Tofu's kernel generator (CUDA).
typedef long long i64;
#define TOFU_DEV static __device__ __forceinline__
#define TOFU_NAN __int_as_float(0x7fffffff)
#define TOFU_INF __int_as_float(0x7f800000)
#define TOFU_I64_MIN (-9223372036854775807LL - 1)
#define TOFU_OPQ_MAX 256 // elements of an opaque function's matrix in a thread's local memory
)") + kCommonPrelude + R"(
// A reduction's partial values of every thread of a block combined (op: 0 sum, 1 product,
// 2 max, 3 min, NaN-propagating) and given to every thread. blockDim.x is a multiple of 32.
TOFU_DEV float tofu_combine(int op, float a, float b) {
  return op == 0 ? a + b : op == 1 ? a * b : op == 2 ? tofu_max(a, b) : tofu_min(a, b);
}
static __device__ float tofu_block_reduce(float v, int op) {
  __shared__ float part[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = tofu_combine(op, v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads(); // the previous call's result has been read
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = part[0];
    for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w)
      r = tofu_combine(op, r, part[w]);
    part[0] = r;
  }
  __syncthreads();
  return part[0];
}
)";
  return dialect == KernelDialect::Cpp ? cpp : cuda;
}

uint64_t stableHash(const std::string &s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

llvm::Expected<KernelSource> generateKernel(const InstOp &op, KernelDialect dialect) {
  // The name hashes the C++ lowering, whatever the dialect: the two dialects' kernels of
  // one instantiation share it.
  Lowering cppLowering(op, KernelDialect::Cpp);
  auto cpp = cppLowering.print();
  if (!cpp)
    return cpp.takeError();
  KernelSource k;
  k.name = fmt::format("tofu_k_{:016x}", stableHash(*cpp));
  if (dialect == KernelDialect::Cpp) {
    k.code = std::move(*cpp);
    k.temporaries = cppLowering.schedule().temporaries();
  } else {
    Lowering lowering(op, KernelDialect::Cuda);
    auto cuda = lowering.print();
    if (!cuda)
      return cuda.takeError();
    k.code = std::move(*cuda);
    k.blockReductions = lowering.blockReductions();
    k.blockOutputVars = lowering.blockOutputVars();
    k.passes = lowering.passes();
    k.passesBlockReductions = lowering.passesBlockReductions();
    k.passesBlockOutputVars = lowering.passesBlockOutputVars();
  }
  replaceAll(k.code, kNameToken, k.name);
  k.code = fmt::format("// op {}\n", op.name) + k.code;
  return k;
}

std::string blockKernelName(const std::string &kernel) { return kernel + "_blk"; }
std::string passesKernelName(const std::string &kernel) { return kernel + "_mp"; }
std::string temporaryPassName(const std::string &kernel, unsigned id) {
  return fmt::format("{}_p{}", kernel, id);
}
std::string temporaryCombineName(const std::string &kernel, unsigned id) {
  return fmt::format("{}_c{}", kernel, id);
}

std::vector<std::string> cudaEntryPoints(const KernelSource &k) {
  std::vector<std::string> out{k.name};
  if (!k.blockReductions.empty())
    out.push_back(blockKernelName(k.name));
  if (k.passes.empty())
    return out;
  for (const CudaTemporaryPass &t : k.passes) {
    out.push_back(temporaryPassName(k.name, t.id));
    out.push_back(temporaryCombineName(k.name, t.id));
  }
  out.push_back(passesKernelName(k.name));
  if (!k.passesBlockReductions.empty())
    out.push_back(blockKernelName(passesKernelName(k.name)));
  return out;
}

int64_t kernelScratchBytes(const std::vector<std::vector<unsigned>> &temporaries,
                           const std::vector<Range> &ranges) {
  int64_t floats = 0;
  for (const std::vector<unsigned> &t : temporaries) {
    int64_t n = 1;
    for (unsigned v : t)
      n *= ranges[v].size();
    floats += n;
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t kernelScratchBytes(const KernelSource &k, const std::vector<Range> &ranges) {
  return kernelScratchBytes(k.temporaries, ranges);
}

int64_t kernelScratchBytes(const InstOp &op, const std::vector<Range> &ranges) {
  return kernelScratchBytes(scheduleKernel(op, ScheduleTarget::Cpp).temporaries(), ranges);
}

std::vector<int64_t> kernelInts(const InstOp &op, const Shapes &shapes,
                                const std::vector<Range> &ranges, const std::vector<Box> &regions) {
  std::vector<int64_t> ints;
  for (const Range &r : ranges) {
    ints.push_back(r.lo);
    ints.push_back(r.hi);
  }
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    for (unsigned d = 0; d < op.inputs[i].rank; ++d) {
      ints.push_back(shapes.inputs[i][d]);
      ints.push_back(regions[i][d].lo);
      ints.push_back(regions[i][d].size());
    }
  return ints;
}

namespace {
/// The exact range of an index expression of one variable with a division (a reshape's
/// `k - n * (k / n)`, which intervals widen to beyond the dimension), by evaluating it at
/// each of the variable's values; none otherwise or for more than 65536 values.
std::optional<std::pair<int64_t, int64_t>> exactValueRange(const ir::Expr &e, const Shapes &shapes,
                                                          const std::vector<Range> &ranges) {
  std::set<unsigned> vars;
  bool divides = false; // an affine coordinate's interval is exact already
  ir::walk(e, [&](const ir::Expr &x) {
    if (const auto *v = dyn_cast<ir::VarRef>(&x))
      vars.insert(v->var);
    if (const auto *b = dyn_cast<ir::Binary>(&x))
      divides |= b->op == ast::BinaryOp::Div || b->op == ast::BinaryOp::Mod;
  });
  if (!divides || vars.size() != 1 || ranges[*vars.begin()].size() > (int64_t(1) << 16))
    return std::nullopt;
  const unsigned v = *vars.begin();
  std::vector<int64_t> env(ranges.size(), 0);
  PointDomain d{env.data(), &shapes.inputs, nullptr};
  std::optional<std::pair<int64_t, int64_t>> out;
  for (int64_t x = ranges[v].lo; x < ranges[v].hi; ++x) {
    env[v] = x;
    auto y = evalIndex(e, d);
    if (!y)
      return std::nullopt;
    out = out ? std::make_pair(std::min(out->first, *y), std::max(out->second, *y))
              : std::make_pair(*y, *y);
  }
  return out;
}
} // namespace

bool readsInsideRegions(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                        const std::vector<Box> &regions) {
  for (const Range &r : ranges)
    if (r.size() == 0 || r.lo < INT32_MIN || r.hi > INT32_MAX)
      return false;
  for (const std::vector<int64_t> &s : shapes.inputs)
    for (int64_t e : s)
      if (e > INT32_MAX)
        return false;
  bool inside = true;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *r = dyn_cast<ir::Read>(&e);
    if (!r || !inside)
      return;
    for (unsigned d = 0; d < r->coords.size(); ++d) {
      if (r->coords[d].kind != ir::Coord::Kind::Affine)
        continue; // data-dependent coordinates are always checked
      auto span = indexValueRange(*r->coords[d].expr, shapes, ranges);
      const Range &reg = regions[r->input][d];
      if (span && (span->first < reg.lo || span->second >= reg.hi))
        span = exactValueRange(*r->coords[d].expr, shapes, ranges); // intervals overshoot
      if (!span || span->first < reg.lo || span->second >= reg.hi)
        inside = false;
    }
  });
  return inside;
}

} // namespace tofu
