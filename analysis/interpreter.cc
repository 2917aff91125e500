// A tree-walking evaluator of instantiated TDL, in double precision, propagating NaN.
#include "analysis/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "analysis/hash.h"

#include "analysis/index_eval.h"
#include "analysis/reducer.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// `x` rounded to the nearest value (halves to even) of a narrower floating-point format of
/// `bits` significant bits, normal exponents from `emin` and largest finite value `max`
/// (round_bf16, round_f16; the kernels' tofu_round_narrow computes the same).
float roundNarrow(float x, int bits, int emin, float max) {
  if (std::isnan(x) || x == 0.0f || std::isinf(x))
    return x;
  const int e = std::max(std::ilogb(x), emin);
  const float q = std::ldexp(1.0f, e - (bits - 1));
  const float r = std::nearbyint(x / q) * q;
  return r > max    ? std::numeric_limits<float>::infinity()
         : r < -max ? -std::numeric_limits<float>::infinity()
                    : r;
}

class Evaluator {
public:
  Evaluator(const InstOp &op, const Shapes &shapes, const std::vector<const Tensor *> &inputs,
            const std::vector<Range> &ranges, const OpaqueRegistry &opaques)
      : op_(op), shapes_(shapes), inputs_(inputs), ranges_(ranges), opaques_(opaques),
        env_(op.vars.size(), 0) {}

  llvm::Expected<Tensor> run() {
    std::vector<int64_t> shape;
    for (unsigned v : op_.outputVars)
      shape.push_back(ranges_[v].size());
    Tensor out(shape);
    if (out.size() == 0)
      return out;
    std::vector<int64_t> idx(op_.outputVars.size(), 0);
    for (int64_t flat = 0; flat < out.size(); ++flat) {
      unflatten(flat, shape, idx.data());
      for (size_t k = 0; k < idx.size(); ++k)
        env_[op_.outputVars[k]] = ranges_[op_.outputVars[k]].lo + idx[k];
      out.data[flat] = value(*op_.body);
      if (!error_.empty())
        return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", error_.c_str());
    }
    return out;
  }

private:
  /// An integer index expression (affine, already checked).
  int64_t index(const ir::Expr &e) {
    PointDomain d;
    d.env = env_.data();
    d.shapes = &shapes_.inputs;
    if (auto v = evalIndex(e, d))
      return *v;
    fail("index expression cannot be evaluated (division by zero?)");
    return 0;
  }

  int64_t coord(const ir::Coord &c) {
    if (c.kind == ir::Coord::Kind::DataDependent) {
      double v = value(*c.expr);
      if (!std::isfinite(v))
        return std::numeric_limits<int64_t>::min(); // reads nothing: out of range
      return static_cast<int64_t>(std::floor(v));
    }
    return index(*c.expr);
  }

  double read(const ir::Read &r) {
    int64_t coords[16];
    for (size_t d = 0; d < r.coords.size(); ++d)
      coords[d] = coord(r.coords[d]);
    const Tensor &t = *inputs_[r.input];
    int64_t off = t.offset(coords);
    return off < 0 ? 0.0 : t.data[off];
  }

  struct Memo {
    std::vector<unsigned> free;
    std::unordered_map<std::vector<int64_t>, double, VectorHash> values;
  };
  std::unordered_map<const ir::Reduce *, Memo> reduceMemo_;
  std::vector<int64_t> key_;

  double opaque(const ir::OpaqueCall &c) {
    // The arguments' fixed coordinates select the slices; results are memoised per choice.
    std::vector<int64_t> key;
    for (const ir::ExprPtr &a : c.args)
      for (const ir::Coord &co : cast<ir::Read>(*a).coords)
        if (co.kind != ir::Coord::Kind::Slice)
          key.push_back(coord(co));
    auto it = memo_[&c].find(key);
    if (it == memo_[&c].end()) {
      std::vector<Tensor> args;
      for (const ir::ExprPtr &a : c.args)
        args.push_back(slice(cast<ir::Read>(*a)));
      const OpaqueRegistry::Fn *fn = opaques_.find(c.function);
      if (!fn) {
        fail(fmt::format("no implementation of opaque function '{}' is registered", c.function));
        return kNaN;
      }
      auto res = (*fn)(args);
      if (!res) {
        fail(fmt::format("opaque function '{}': {}", c.function, llvm::toString(res.takeError())));
        return kNaN;
      }
      it = memo_[&c].emplace(key, std::move(*res)).first;
    }
    int64_t coords[16];
    for (size_t d = 0; d < c.coords.size(); ++d)
      coords[d] = coord(c.coords[d]);
    if (c.coords.size() != it->second.shape.size()) {
      fail(fmt::format("opaque function '{}' returned rank {} but is indexed with {} "
                       "coordinates",
                       c.function, it->second.shape.size(), c.coords.size()));
      return kNaN;
    }
    int64_t off = it->second.offset(coords);
    return off < 0 ? 0.0 : it->second.data[off];
  }

  /// The slice of an input that a Read with `:` coordinates denotes.
  Tensor slice(const ir::Read &r) {
    const Tensor &t = *inputs_[r.input];
    std::vector<int64_t> fixed(r.coords.size(), 0), shape;
    std::vector<unsigned> free;
    for (unsigned d = 0; d < r.coords.size(); ++d) {
      if (r.coords[d].kind == ir::Coord::Kind::Slice) {
        free.push_back(d);
        shape.push_back(t.shape[d]);
      } else {
        fixed[d] = coord(r.coords[d]);
      }
    }
    Tensor out(shape);
    std::vector<int64_t> coords = fixed, inSlice(free.size());
    for (int64_t flat = 0; flat < out.size(); ++flat) {
      unflatten(flat, shape, inSlice.data());
      for (size_t k = 0; k < free.size(); ++k)
        coords[free[k]] = inSlice[k];
      int64_t off = t.offset(coords.data());
      out.data[flat] = off < 0 ? 0.0 : t.data[off];
    }
    return out;
  }

  /// A nested reduction's value depends only on the variables it does not bind (a mean
  /// inside an element-wise body depends on the channel alone): memoised by their values,
  /// which turns O(n^2) bodies like batch normalisation's gradient back into O(n).
  double reduce(const ir::Reduce &r) {
    if (&r == op_.body.get())
      return reduceOnce(r);
    auto [it, fresh] = reduceMemo_.try_emplace(&r);
    Memo &m = it->second;
    if (fresh) {
      std::set<unsigned> used, bound;
      ir::walk(r, [&](const ir::Expr &e) {
        if (auto *v = llvm::dyn_cast<ir::VarRef>(&e))
          used.insert(v->var);
        else if (auto *inner = llvm::dyn_cast<ir::Reduce>(&e))
          bound.insert(inner->vars.begin(), inner->vars.end());
      });
      for (unsigned v : used)
        if (!bound.count(v))
          m.free.push_back(v);
    }
    key_.clear();
    for (unsigned v : m.free)
      key_.push_back(env_[v]);
    if (auto hit = m.values.find(key_); hit != m.values.end())
      return hit->second;
    std::vector<int64_t> key = key_;
    double value = reduceOnce(r);
    if (error_.empty())
      m.values.emplace(std::move(key), value);
    return value;
  }

  double reduceOnce(const ir::Reduce &r) {
    double acc = reducerIdentity<double>(r.reducer);
    bool any = true;
    for (unsigned v : r.vars) {
      if (ranges_[v].size() == 0)
        any = false;
      env_[v] = ranges_[v].lo;
    }
    while (any && error_.empty()) {
      acc = reducerCombine(r.reducer, acc, value(*r.body));
      // Advance the odometer over the reduction variables.
      size_t k = r.vars.size();
      while (k > 0) {
        unsigned v = r.vars[k - 1];
        if (++env_[v] < ranges_[v].hi)
          break;
        env_[v] = ranges_[v].lo;
        --k;
      }
      if (k == 0)
        break;
    }
    return acc;
  }

  double apply(const ir::Apply &a) {
    if (a.fn == ir::Builtin::Select) { // only the chosen branch is evaluated
      double c = value(*a.args[0]);
      if (std::isnan(c))
        return kNaN;
      return value(*a.args[c != 0 ? 1 : 2]);
    }
    double x = value(*a.args[0]);
    double y = a.args.size() > 1 ? value(*a.args[1]) : 0;
    switch (a.fn) {
    case ir::Builtin::Exp:
      return std::exp(x);
    case ir::Builtin::Log:
      return std::log(x);
    case ir::Builtin::Sqrt:
      return std::sqrt(x);
    case ir::Builtin::Rsqrt:
      return 1 / std::sqrt(x);
    case ir::Builtin::Tanh:
      return std::tanh(x);
    case ir::Builtin::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case ir::Builtin::Relu:
      return std::isnan(x) ? x : (x > 0 ? x : 0);
    case ir::Builtin::Abs:
      return std::fabs(x);
    case ir::Builtin::Sign:
      return std::isnan(x) ? x : (x > 0) - (x < 0);
    case ir::Builtin::Floor:
      return std::floor(x);
    case ir::Builtin::Ceil:
      return std::ceil(x);
    case ir::Builtin::Pow:
      return std::pow(x, y);
    case ir::Builtin::Min:
      return std::isnan(x) || std::isnan(y) ? kNaN : std::min(x, y);
    case ir::Builtin::Max:
      return std::isnan(x) || std::isnan(y) ? kNaN : std::max(x, y);
    case ir::Builtin::CastFloat:
      return x;
    case ir::Builtin::CastInt:
      return std::trunc(x);
    case ir::Builtin::Sin:
      return std::sin(x);
    case ir::Builtin::Cos:
      return std::cos(x);
    case ir::Builtin::Tan:
      return std::tan(x);
    case ir::Builtin::Asin:
      return std::asin(x);
    case ir::Builtin::Acos:
      return std::acos(x);
    case ir::Builtin::Atan:
      return std::atan(x);
    case ir::Builtin::Sinh:
      return std::sinh(x);
    case ir::Builtin::Cosh:
      return std::cosh(x);
    case ir::Builtin::Asinh:
      return std::asinh(x);
    case ir::Builtin::Acosh:
      return std::acosh(x);
    case ir::Builtin::Atanh:
      return std::atanh(x);
    case ir::Builtin::Erf:
      return std::erf(x);
    case ir::Builtin::Round: // ONNX rounds halves to even
      return std::nearbyint(x);
    case ir::Builtin::IsNan:
      return std::isnan(x) ? 1 : 0;
    case ir::Builtin::IsInf:
      return std::isinf(x) ? 1 : 0;
    case ir::Builtin::RoundBf16:
      return roundNarrow(static_cast<float>(x), 8, -126, 3.3895313892515355e38f);
    case ir::Builtin::RoundF16:
      return roundNarrow(static_cast<float>(x), 11, -14, 65504.0f);
    case ir::Builtin::Select:
      break;
    }
    return kNaN;
  }

  double value(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const:
      return cast<ir::Const>(e).value;
    case ir::ExprKind::VarRef:
    case ir::ExprKind::ExtentRef:
      return static_cast<double>(index(e));
    case ir::ExprKind::Read:
      return read(cast<ir::Read>(e));
    case ir::ExprKind::OpaqueCall:
      return opaque(cast<ir::OpaqueCall>(e));
    case ir::ExprKind::Reduce:
      return reduce(cast<ir::Reduce>(e));
    case ir::ExprKind::Apply:
      return apply(cast<ir::Apply>(e));
    case ir::ExprKind::Neg:
      return -value(*cast<ir::Neg>(e).operand);
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      double l = value(*b.lhs), r = value(*b.rhs);
      switch (b.op) {
      case ast::BinaryOp::Add:
        return l + r;
      case ast::BinaryOp::Sub:
        return l - r;
      case ast::BinaryOp::Mul:
        return l * r;
      case ast::BinaryOp::Div:
        return l / r;
      case ast::BinaryOp::Mod:
        return std::fmod(l, r);
      case ast::BinaryOp::Eq:
        return std::isnan(l) || std::isnan(r) ? kNaN : l == r;
      case ast::BinaryOp::Ne:
        return std::isnan(l) || std::isnan(r) ? kNaN : l != r;
      case ast::BinaryOp::Lt:
        return std::isnan(l) || std::isnan(r) ? kNaN : l < r;
      case ast::BinaryOp::Le:
        return std::isnan(l) || std::isnan(r) ? kNaN : l <= r;
      case ast::BinaryOp::Gt:
        return std::isnan(l) || std::isnan(r) ? kNaN : l > r;
      case ast::BinaryOp::Ge:
        return std::isnan(l) || std::isnan(r) ? kNaN : l >= r;
      }
      return kNaN;
    }
    case ir::ExprKind::AttrRef:
    case ir::ExprKind::TensorRef:
    case ir::ExprKind::OpCall:
      break;
    }
    fail("unsupported expression in an instantiated op");
    return kNaN;
  }

  void fail(std::string msg) {
    if (error_.empty())
      error_ = fmt::format("op '{}': {}", op_.name, msg);
  }

  const InstOp &op_;
  const Shapes &shapes_;
  const std::vector<const Tensor *> &inputs_;
  const std::vector<Range> &ranges_;
  const OpaqueRegistry &opaques_;
  std::vector<int64_t> env_;
  std::map<const ir::OpaqueCall *, std::map<std::vector<int64_t>, Tensor>> memo_;
  std::string error_;
};

llvm::Error needMatrix(const std::vector<Tensor> &args, const char *name) {
  if (args.size() != 1 || args[0].shape.size() != 2 || args[0].shape[0] != args[0].shape[1])
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s takes one square matrix",
                                   name);
  return llvm::Error::success();
}

llvm::Expected<Tensor> cholesky(const std::vector<Tensor> &args) {
  if (llvm::Error e = needMatrix(args, "Cholesky"))
    return llvm::Expected<Tensor>(std::move(e));
  const Tensor &a = args[0];
  int64_t n = a.shape[0];
  Tensor l({n, n});
  for (int64_t j = 0; j < n; ++j) {
    double d = a.data[j * n + j];
    for (int64_t k = 0; k < j; ++k)
      d -= l.data[j * n + k] * l.data[j * n + k];
    l.data[j * n + j] = std::sqrt(d); // NaN when the matrix is not positive definite
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a.data[i * n + j];
      for (int64_t k = 0; k < j; ++k)
        s -= l.data[i * n + k] * l.data[j * n + k];
      l.data[i * n + j] = s / l.data[j * n + j];
    }
  }
  return l;
}

llvm::Expected<Tensor> matrixInverse(const std::vector<Tensor> &args) {
  if (llvm::Error e = needMatrix(args, "MatrixInverse"))
    return llvm::Expected<Tensor>(std::move(e));
  int64_t n = args[0].shape[0];
  Tensor a = args[0], inv({n, n});
  for (int64_t i = 0; i < n; ++i)
    inv.data[i * n + i] = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a.data[r * n + c]) > std::fabs(a.data[p * n + c]))
        p = r;
    if (a.data[p * n + c] == 0 || std::isnan(a.data[p * n + c])) {
      std::fill(inv.data.begin(), inv.data.end(), kNaN); // singular
      return inv;
    }
    for (int64_t k = 0; k < n; ++k) {
      std::swap(a.data[c * n + k], a.data[p * n + k]);
      std::swap(inv.data[c * n + k], inv.data[p * n + k]);
    }
    double d = a.data[c * n + c];
    for (int64_t k = 0; k < n; ++k) {
      a.data[c * n + k] /= d;
      inv.data[c * n + k] /= d;
    }
    for (int64_t r = 0; r < n; ++r) {
      if (r == c)
        continue;
      double f = a.data[r * n + c];
      for (int64_t k = 0; k < n; ++k) {
        a.data[r * n + k] -= f * a.data[c * n + k];
        inv.data[r * n + k] -= f * inv.data[c * n + k];
      }
    }
  }
  return inv;
}

llvm::Expected<Tensor> determinant(const std::vector<Tensor> &args) {
  if (llvm::Error e = needMatrix(args, "Determinant"))
    return llvm::Expected<Tensor>(std::move(e));
  int64_t n = args[0].shape[0];
  Tensor a = args[0], out(std::vector<int64_t>{});
  double det = 1;
  for (int64_t c = 0; c < n; ++c) { // LU with partial pivoting
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a.data[r * n + c]) > std::fabs(a.data[p * n + c]))
        p = r;
    if (a.data[p * n + c] == 0) {
      det = 0;
      break;
    }
    if (p != c) {
      for (int64_t k = 0; k < n; ++k)
        std::swap(a.data[c * n + k], a.data[p * n + k]);
      det = -det;
    }
    det *= a.data[c * n + c];
    for (int64_t r = c + 1; r < n; ++r) {
      double f = a.data[r * n + c] / a.data[c * n + c];
      for (int64_t k = c; k < n; ++k)
        a.data[r * n + k] -= f * a.data[c * n + k];
    }
  }
  out.data = {det};
  return out;
}

} // namespace

void unflatten(int64_t flat, const std::vector<int64_t> &shape, int64_t *coords) {
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    coords[d] = flat % shape[d];
    flat /= shape[d];
  }
}

Tensor::Tensor(std::vector<int64_t> s, double fill) : shape(std::move(s)) {
  int64_t n = 1;
  for (int64_t e : shape)
    n *= e;
  data.assign(n, fill);
}

int64_t Tensor::offset(const int64_t *coords) const {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (coords[d] < 0 || coords[d] >= shape[d])
      return -1;
    off = off * shape[d] + coords[d];
  }
  return off;
}

const OpaqueRegistry::Fn *OpaqueRegistry::find(const std::string &name) const {
  auto it = fns_.find(name);
  return it == fns_.end() ? nullptr : &it->second;
}

const OpaqueRegistry &OpaqueRegistry::builtin() {
  static const OpaqueRegistry registry = [] {
    OpaqueRegistry r;
    r.add("Cholesky", cholesky);
    r.add("MatrixInverse", matrixInverse);
    r.add("Determinant", determinant);
    return r;
  }();
  return registry;
}

llvm::Expected<Tensor> evaluate(const InstOp &op, const Shapes &shapes,
                                const std::vector<const Tensor *> &inputs,
                                const std::vector<Range> &ranges, const OpaqueRegistry &opaques) {
  if (inputs.size() != op.inputs.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "op '%s' takes %zu inputs but %zu were given", op.name.c_str(),
                                   op.inputs.size(), inputs.size());
  for (unsigned i = 0; i < inputs.size(); ++i)
    if (inputs[i]->shape != shapes.inputs[i] || op.inputs[i].rank > 16)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "op '%s': input '%s' does not have the shape given",
                                     op.name.c_str(), op.inputs[i].name.c_str());
  return Evaluator(op, shapes, inputs, ranges, opaques).run();
}

} // namespace tofu
