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
#include "codegen/loop_ir.h"
#include "codegen/schedule.h"
#include "fmt/format.h"

namespace tofu {

extern const char kKernelPreludeText[]; // codegen/kernel_prelude.h (codegen/BUILD)

namespace {

using llvm::cast;
using llvm::dyn_cast;

const char *const kNameToken = "@KERNEL@";
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
  std::optional<Value> add(const Value &a, const Value &b) const {
    return "(" + a + " + " + b + ")";
  }
  std::optional<Value> mul(const Value &a, const Value &b) const {
    return "(" + a + " * " + b + ")";
  }
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
        return guarded(r, cs, fmt::format("in{}[{}]", r.input, off));
      }
      for (size_t d = 0; d < cs.size(); ++d) {
        std::string term = fmt::format("({} - o{}_{})", cs[d], r.input, d);
        if (d + 1 < cs.size())
          term += fmt::format(" * st{}_{}", r.input, d);
        off += (d ? " + " : "") + term;
      }
      return guarded(r, cs, fmt::format("in{}[{}]", r.input, off));
    }
    std::string call =
        fmt::format("{}_ld{}(in{}, I + {}", kNameToken, r.input, r.input, inputBase(r.input));
    for (const std::string &c : cs)
      call += ", " + c;
    return call + ")";
  }

  /// An unchecked load of `r` (at coordinates `cs`), tested against the tensor's extent
  /// along every coordinate that may leave it (mayLeaveTensor): zero outside.
  std::string guarded(const ir::Read &r, const std::vector<std::string> &cs,
                      const std::string &load) const {
    std::string inside;
    for (size_t d = 0; d < cs.size(); ++d)
      if (mayLeaveTensor(op_, r.coords[d]))
        inside += fmt::format("{}(uint64_t)({}) < (uint64_t)s{}_{}", inside.empty() ? "" : " && ",
                              cs[d], r.input, d);
    return inside.empty() ? load : fmt::format("({} ? {} : 0.0f)", inside, load);
  }

  /// Whether `e` is integer-valued: index variables, extents, integer constants and their
  /// sums, differences, products and remainders by a nonzero integer constant.
  static bool isInt(const ir::Expr &e) {
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

  /// An integer-valued expression in i64; `%` truncates as fmod does.
  std::string intText(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const:
      return fmt::format("((i64){})", cast<ir::Const>(e).intValue);
    case ir::ExprKind::Neg:
      return "(-" + intText(*cast<ir::Neg>(e).operand) + ")";
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      return fmt::format("({} {} {})", intText(*b.lhs), ast::binaryOpSpelling(b.op),
                         intText(*b.rhs));
    }
    default:
      return "((i64)" + index(e) + ")";
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

  /// A reduction's value where it is read.
  std::string reduction(const Red &r) {
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

  // --- building the loop IR -------------------------------------------------------------

  using Node = loops::Node;
  using LoopKind = loops::LoopKind;

  loops::Block &cur() { return *blocks_.back(); }
  Node &add(Node n) {
    cur().push_back(std::move(n));
    return cur().back();
  }
  void decl(const std::string &type, std::vector<std::pair<std::string, std::string>> names) {
    add(loops::declNode(type, std::move(names)));
  }
  void decl(const std::string &type, const std::string &name, const std::string &value) {
    decl(type, {{name, value}});
  }
  void assign(const std::string &target, const std::string &op, const std::string &value) {
    add(loops::assignNode(target, op, value));
  }
  void combine(ir::Reducer reducer, const std::string &acc, const std::string &value) {
    add(loops::combineNode(reducer, acc, value));
  }
  void store(const std::string &buffer, const std::string &offset, const std::string &value) {
    add(loops::storeNode(buffer, offset, value));
  }
  void use(const std::string &local) { add(loops::useNode(local)); }
  void returnIf(const std::string &cond, const std::string &value) {
    Node n = loops::ifNode(cond, true);
    n.body.push_back(loops::returnNode(value));
    add(std::move(n));
  }
  /// Adds a compound statement and makes its body the current block.
  Node &open(Node n) {
    Node &at = add(std::move(n));
    blocks_.push_back(&at.body);
    open_.push_back(&at);
    return at;
  }
  Node &openLoop(LoopKind kind, const std::string &var, const std::string &from,
                 const std::string &to, const std::string &step = "", bool compact = false) {
    return open(loops::loopNode(kind, var, from, to, step, compact));
  }
  void openIf(const std::string &cond, bool compact = false) { open(loops::ifNode(cond, compact)); }
  /// The open If's else branch becomes the current block.
  void elseBranch() { blocks_.back() = &open_.back()->orElse; }
  void openScope(Node::Kind kind = Node::Kind::Scope) {
    Node n;
    n.kind = kind;
    open(std::move(n));
  }
  void close() {
    blocks_.pop_back();
    open_.pop_back();
  }

  /// How the lowering runs a reduction's loop: serially, or as a SIMD reduction into the
  /// accumulators of its group.
  struct Binding {
    LoopKind kind = LoopKind::Serial;
    std::vector<std::string> accumulators;
    ir::Reducer reducer = ir::Reducer::Sum;
  };

  static std::string accumulator(const Red &r) { return fmt::format("r{}", r.id); }
  static std::string identity(ir::Reducer r) { return floatLiteral(reducerIdentity<float>(r)); }

  // --- lowering ------------------------------------------------------------------------

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

  /// The number of leading variables of `vars` up to the last one at which some
  /// reduction of nest `nest` is placed (0 when none is).
  size_t slottedPrefix(int nest, const std::vector<unsigned> &vars) const {
    size_t n = 0;
    for (size_t k = 0; k < vars.size(); ++k)
      if (sched_.hasInlineAt(nest, static_cast<int>(vars[k])))
        n = k + 1;
    return n;
  }

  /// The first and end values of loop `v` (a part of its range under bounds_).
  std::string loOf(unsigned v) const {
    auto b = bounds_.find(v);
    return b != bounds_.end() ? b->second.first : fmt::format("lo{}", v);
  }
  std::string hiOf(unsigned v) const {
    auto b = bounds_.find(v);
    return b != bounds_.end() ? b->second.second : fmt::format("hi{}", v);
  }

  /// A reduction split across the threads of a block. Its leading variables up to the last
  /// one at which a nested reduction is placed loop serially in every thread (the nested
  /// reductions, computed once per value as in the serial nest, are themselves split across
  /// the block); each thread then takes every blockDim.x-th term of the flattened space of
  /// the remaining variables, and the block combines. (Flattening all the variables would
  /// recompute a nested reduction per term: a softmax's normaliser per class.)
  void emitBlockReduction(const Red &r) {
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
      count += fmt::format("{0}({2} > {1} ? {2} - {1} : 0)", count.empty() ? "" : " * ", loOf(v),
                           hiOf(v));
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
  /// modulus over the gcd, or, when it picks it (PickedVar), over the one position.
  void openReductionLoop(const Red &r, unsigned v, const Binding &how) {
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

  static void bindLoop(Node &loop, const Binding &how) {
    loop.accumulators = how.accumulators;
    loop.reducer = how.reducer;
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

  /// The loops of `r`'s group: the first `loops` variables as loops (a flattened pair after
  /// them when `flat`), then each member's combine. The innermost loop is a SIMD reduction
  /// when nothing is computed at its start.
  void emitReductionLoops(const Red &r, const std::vector<const Red *> &group, size_t loops,
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

  /// Each member's term combined into it, its variables renamed to the first member's.
  void emitCombines(const std::vector<const Red *> &group, const ir::Reduce &node) {
    for (const Red *m : group) {
      for (size_t k = 0; k < node.vars.size(); ++k)
        if (m->node->vars[k] != node.vars[k])
          rename_[m->node->vars[k]] = node.vars[k];
      combine(m->node->reducer, accumulator(*m), value(*m->node->body));
      rename_.clear();
    }
  }

  unsigned inputBase(unsigned input) const {
    unsigned base = 2 * static_cast<unsigned>(op_.vars.size());
    for (unsigned i = 0; i < input; ++i)
      base += 3 * op_.inputs[i].rank;
    return base;
  }

  /// Locals every entry point uses: ranges, input geometry, pointers, output extents.
  void emitLocals() {
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
      decl("const float *__restrict__", fmt::format("in{}", i), fmt::format("a->in[{}]", i));
      if (rank == 0) // a scalar input (a learning rate, a loss's gradient): read once
        decl("const float", fmt::format("x{}", i), fmt::format("in{}[0]", i));
    }
    decl("float *__restrict__", "out", "a->out");
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

  /// Makes a function of the kernel and its body the current block.
  void beginFunction(loops::Function::Kind kind, const std::string &name,
                     const std::string &params = "") {
    loops::Function f;
    f.kind = kind;
    f.name = name;
    f.params = params;
    kernel_.functions.push_back(std::move(f));
    blocks_.assign(1, &kernel_.functions.back().body);
    open_.clear();
  }

  /// The per-input checked loads (zero outside the tensor, NaN outside the region).
  void emitLoaders() {
    for (unsigned i = 0; i < op_.inputs.size(); ++i) {
      unsigned rank = op_.inputs[i].rank;
      if (rank == 0)
        continue;
      std::string params = "const float *p, const i64 *q";
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
      add(loops::returnNode("p[" + off + "]"));
    }
  }

  /// The pass that fills temporary `t`: one parallel loop over the values of its
  /// variables, each computing the reduction (and what its schedule computes with it) and
  /// storing it at its row-major offset.
  void emitTemporaryPass(const Red &t) {
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

  /// The main nest's output loops, the first `m` flattened into the parallel loop (with
  /// flat_, the last two run as one flat SIMD loop after the others).
  void emitMainLoops(size_t m) {
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
    LoopKind outer =
        n == 1 && sched_.vectorInnermost ? LoopKind::ParallelVector : LoopKind::Parallel;
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
      openLoop(LoopKind::Vector, "fl", "0", fmt::format("n{} * n{}", flat_->outer, flat_->inner),
               "", true);
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

  /// The interchanged contraction: the output row (of the innermost output variable, from
  /// `rowLo` to `rowHi`) starts at the identity, then each term of the reduction's loops
  /// is combined into the whole row, contiguously.
  void emitInterchanged(const ir::Reduce &top, const std::string &rowLo = "",
                        const std::string &rowHi = "") {
    const unsigned last = op_.outputVars.back();
    const std::string var = fmt::format("v{}", last),
                      lo = rowLo.empty() ? fmt::format("lo{}", last) : rowLo,
                      hi = rowHi.empty() ? fmt::format("hi{}", last) : rowHi;
    const std::string off = outputOffset();
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

  /// Decodes the variables `vars` (row-major over their ranges, the last fastest) from the
  /// flat index `flat`: a temporary's element.
  void decodeRanges(const std::vector<unsigned> &vars, const std::string &flat) {
    decl("i64", "rest", flat);
    for (size_t k = vars.size(); k-- > 0;) {
      const unsigned v = vars[k];
      decl("const i64", fmt::format("v{}", v), fmt::format("lo{0} + rest % (hi{0} - lo{0})", v));
      if (k)
        assign("rest", "/=", fmt::format("hi{0} - lo{0}", v));
    }
    use("rest");
  }

  /// Decodes the variables `vars` (row-major, the last fastest) from the flat index `flat`.
  void decode(const std::vector<unsigned> &vars, const std::string &flat) {
    if (vars.empty())
      return;
    decl("i64", "rest", flat);
    for (size_t k = vars.size(); k-- > 0;) {
      decl("const i64", fmt::format("v{}", vars[k]), fmt::format("lo{0} + rest % n{0}", vars[k]));
      if (k)
        assign("rest", "/=", fmt::format("n{}", vars[k]));
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

  /// The kernel as loop IR (after print()).
  const loops::Kernel &kernel() const { return kernel_; }

private:
  /// The nest twice: unchecked loads when the caller proved every read inside its region
  /// (a->fast), checked ones otherwise.
  void emitVariants(void (Lowering::*nest)()) {
    openIf("a->fast");
    fast_ = true;
    (this->*nest)();
    elseBranch();
    fast_ = false;
    (this->*nest)();
    close();
  }

  /// How many opaque calls the body makes: each call site has a memo per thread (its last
  /// argument slice and result), made by the kernel for the duration of one call.
  unsigned opaqueSites() const {
    unsigned n = 0;
    ir::walk(*op_.body, [&](const ir::Expr &e) { n += llvm::isa<ir::OpaqueCall>(e) ? 1 : 0; });
    return n;
  }

  /// The kernel's translation unit: the loaders, the opaque calls' helpers (which call
  /// them), the CUDA argument block, then the entry points.
  std::string printKernel(const std::string &argsDefinition) {
    const loops::Target target =
        dialect_ == KernelDialect::Cpp ? loops::Target::Cpp : loops::Target::Cuda;
    std::string out, error;
    for (const loops::Function &f : kernel_.functions)
      if (f.kind == loops::Function::Kind::Helper)
        loops::printFunction(kernel_, f, target, out, error);
    out += helpers_ + argsDefinition;
    for (const loops::Function &f : kernel_.functions)
      if (f.kind == loops::Function::Kind::Entry)
        loops::printFunction(kernel_, f, target, out, error);
    if (!error.empty())
      fail(error);
    return out;
  }

  std::string printCpp() {
    emitLoaders();
    beginFunction(loops::Function::Kind::Entry, kNameToken);
    emitLocals();
    std::string prev; // the temporaries, one after another in the scratch space
    for (const Red &r : sched_.reductions) {
      if (r.placement != Placement::Temporary)
        continue;
      decl("float *const", fmt::format("t{}", r.id), prev.empty() ? "a->scratch" : prev);
      prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
    }
    if (opaqueSites() > 0) // outside the parallel loop (reductions computed once per call)
      decl("TofuOpqMemo", fmt::format("memo[{}]", opaqueSites()), "");
    emitVariants(&Lowering::emitCppNest);
    return printKernel("");
  }

  /// The CUDA kernels: the one-launch entry points (`<name>`, and `<name>_blk` where
  /// reductions are computed per output), then, where the CudaPasses schedule has
  /// temporaries, the multi-launch ones: per temporary its pass (`<name>_p<id>`) and the
  /// combine of its partial results (`<name>_c<id>`), and the main nest reading them
  /// (`<name>_mp`, and `<name>_mp_blk`).
  std::string printCuda() {
    emitLoaders();
    kernel_.argsType = std::string(kNameToken) + "_args";
    const std::string args =
        fmt::format("typedef TofuCudaArgs<{}, {}> {};\n",
                    std::max(1u, inputBase(static_cast<unsigned>(op_.inputs.size()))),
                    std::max<size_t>(1, op_.inputs.size()), kernel_.argsType);
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
    return printKernel(args);
  }

  /// The main nest's entry points under the current schedule, named `<name><suffix>`: a
  /// thread per output, and, where reductions are computed per output, `..._blk`.
  void emitCudaMain(const std::string &suffix) {
    for (bool block : {false, true}) {
      if (block && blockReductions().empty())
        break;
      beginFunction(loops::Function::Kind::Entry,
                    fmt::format("{}{}{}", kNameToken, suffix, block ? "_blk" : ""));
      emitCudaLocals();
      block_ = block;
      emitVariants(&Lowering::emitCudaNest);
      block_ = false;
    }
  }

  /// An entry point's locals: emitLocals' and the temporaries' pointers into the scratch
  /// space, one after another in the order of their passes, then the partial results.
  void emitCudaLocals() {
    emitLocals();
    std::string prev = "a->scratch";
    for (const Red &r : sched_.reductions) {
      if (r.placement != Placement::Temporary)
        continue;
      decl("float *const", fmt::format("t{}", r.id), prev);
      prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
    }
    if (prev != "a->scratch") {
      decl("float *const", "tpart", prev);
      use("tpart");
    }
  }

  /// The pass of temporary `t` (`<name>_p<id>`): a block per value of its index and part of
  /// its first variable's range (a->parts parts, a block-stride loop over both), the block
  /// splitting that part's terms across its threads. One part writes the temporary; more
  /// write partial results, in `tpart` (value-major), for `<name>_c<id>` to combine.
  void emitCudaPass(const Red &t) {
    pass_ = &t;
    beginFunction(loops::Function::Kind::Entry, fmt::format("{}_p{}", kNameToken, t.id));
    emitCudaLocals();
    emitVariants(&Lowering::emitCudaPassNest);
    pass_ = nullptr;
  }

  void emitCudaPassNest() {
    const Red &t = *pass_;
    decl("const i64", "parts", "a->parts > 0 ? a->parts : 1");
    decl("const i64", "count", rangeProduct(t.depends));
    openLoop(LoopKind::GridBlocks, "b", "", "count * parts");
    decl("const i64", {{"e", "b / parts"}, {"p", "b % parts"}});
    decodeRanges(t.depends, "e");
    use("p");
    collective_ = true;
    block_ = true;
    emitSlot(t.id, -1);
    for (unsigned v : t.depends)
      emitSlot(t.id, static_cast<int>(v));
    if (!t.node->vars.empty()) {
      const unsigned v = t.node->vars.front();
      decl("const i64", fmt::format("span{}", v),
           fmt::format("hi{0} > lo{0} ? hi{0} - lo{0} : 0", v));
      decl("const i64",
           {{fmt::format("plo{}", v), fmt::format("lo{0} + span{0} * p / parts", v)},
            {fmt::format("phi{}", v), fmt::format("lo{0} + span{0} * (p + 1) / parts", v)}});
      bounds_[v] = {fmt::format("plo{}", v), fmt::format("phi{}", v)};
    }
    emitReduction(t);
    bounds_.clear();
    collective_ = false;
    block_ = false;
    openIf("threadIdx.x == 0");
    openIf("parts == 1", true);
    store(fmt::format("t{}", t.id), "e", accumulator(t));
    elseBranch();
    store("tpart", "e * parts + p", accumulator(t));
    close();
    close();
    close();
  }

  /// The combine of temporary `t`'s partial results (`<name>_c<id>`), a thread per value,
  /// in part order (the same result from run to run).
  void emitCudaCombine(const Red &t) {
    beginFunction(loops::Function::Kind::Entry, fmt::format("{}_c{}", kNameToken, t.id));
    emitCudaLocals();
    decl("const i64", "parts", "a->parts > 0 ? a->parts : 1");
    decl("const i64", "count", rangeProduct(t.depends));
    openLoop(LoopKind::GridThreads, "e", "", "count");
    decl("float", accumulator(t), identity(t.node->reducer));
    openLoop(LoopKind::Serial, "p", "0", "parts", "", true);
    combine(t.node->reducer, accumulator(t), "tpart[e * parts + p]");
    close();
    store(fmt::format("t{}", t.id), "e", accumulator(t));
    close();
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
  int zero_ = -1; ///< a variable printed as 0 (CodeDomain::zero)
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
  loops::Kernel kernel_;
  /// The blocks being built, innermost last, and the compound statements they belong to.
  std::vector<loops::Block *> blocks_;
  std::vector<Node *> open_;
  bool fast_ = false;
  /// The CUDA multi-launch entry points' temporaries and main nest (printCuda).
  std::vector<CudaTemporaryPass> passes_;
  std::vector<std::vector<unsigned>> passesBlockReductions_;
  std::vector<unsigned> passesBlockOutputVars_;
  const Red *pass_ = nullptr; ///< the temporary whose pass is being printed
  bool block_ = false;        ///< printing the block-per-output CUDA variant
  bool collective_ = false;   ///< block_: every thread of the block runs here alike
  std::string error_;
};

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

} // namespace

const std::string &kernelPrelude(KernelDialect dialect) {
  static const std::string cpp =
      std::string("// Generated by Tofu's kernel generator.\n#define TOFU_KERNEL_UNIT 1\n") +
      kKernelPreludeText;
  static const std::string cuda =
      std::string("// Generated by Tofu's kernel generator (CUDA).\n#define TOFU_KERNEL_UNIT 1\n") +
      kKernelPreludeText;
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

const char *const kKernelNameToken = kNameToken;

llvm::Expected<loops::Kernel> lowerKernel(const InstOp &op, KernelDialect dialect) {
  Lowering lowering(op, dialect);
  auto printed = lowering.print();
  if (!printed)
    return printed.takeError();
  return lowering.kernel();
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
      const bool guard = mayLeaveTensor(op, r->coords[d]);
      const int64_t extent = shapes.inputs[r->input][d];
      const auto clip = [&](std::optional<std::pair<int64_t, int64_t>> sp) {
        if (sp && guard) { // guarded: only the part inside the tensor is read
          sp->first = std::max<int64_t>(sp->first, 0);
          sp->second = std::min<int64_t>(sp->second, extent - 1);
        }
        return sp;
      };
      const Range &reg = regions[r->input][d];
      const auto outside = [&](const std::pair<int64_t, int64_t> &sp) {
        return sp.first <= sp.second && (sp.first < reg.lo || sp.second >= reg.hi);
      };
      auto span = clip(indexValueRange(*r->coords[d].expr, shapes, ranges));
      if (span && outside(*span)) // intervals overshoot
        span = clip(exactValueRange(*r->coords[d].expr, shapes, ranges));
      if (!span || outside(*span))
        inside = false;
    }
  });
  return inside;
}

} // namespace tofu
