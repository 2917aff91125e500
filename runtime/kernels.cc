// Native kernels.
#include "runtime/kernels.h"

namespace tofu {
namespace {

int varIndex(const InstOp &op, const char *name) {
  for (size_t v = 0; v < op.vars.size(); ++v)
    if (op.vars[v].name == name)
      return static_cast<int>(v);
  return -1;
}

int64_t attr(const InstOp &op, const char *name, int64_t dflt) {
  for (const auto &[k, v] : op.attrs)
    if (k == name)
      return v;
  return dflt;
}

/// C[i, j] = Sum_k A[i, k] * B[k, j] (MatMul without batch dimensions).
Tensor matmul(const InstOp &op, const Tensor &A, const Tensor &B, const std::vector<Range> &r) {
  const int i = varIndex(op, "i"), j = varIndex(op, "j"), k = varIndex(op, "k");
  const Range ri = r[i], rj = r[j], rk = r[k];
  Tensor out({ri.size(), rj.size()});
  const int64_t K = A.shape[1], N = B.shape[1];
  for (int64_t a = ri.lo; a < ri.hi; ++a)
    for (int64_t b = rj.lo; b < rj.hi; ++b) {
      double acc = 0;
      for (int64_t c = rk.lo; c < rk.hi; ++c)
        acc = acc + A.data[a * K + c] * B.data[c * N + b];
      out.data[(a - ri.lo) * rj.size() + (b - rj.lo)] = acc;
    }
  return out;
}

/// out[n, co, y, x] = Sum_{ci, ky, kx} data[n, ci, y*sh + ky*dh - ph, x*sw + kx*dw - pw] *
/// w[co, ci, ky, kx], reads outside `data` being zero.
Tensor conv2d(const InstOp &op, const Tensor &data, const Tensor &w, const std::vector<Range> &r) {
  const int vn = varIndex(op, "n"), vco = varIndex(op, "co"), vy = varIndex(op, "y"),
            vx = varIndex(op, "x"), vci = varIndex(op, "ci"), vky = varIndex(op, "ky"),
            vkx = varIndex(op, "kx");
  const int64_t sh = attr(op, "sh", 1), sw = attr(op, "sw", 1), ph = attr(op, "ph", 0),
                pw = attr(op, "pw", 0), dh = attr(op, "dh", 1), dw = attr(op, "dw", 1);
  const int64_t C = data.shape[1], H = data.shape[2], W = data.shape[3];
  const int64_t WC = w.shape[1], KH = w.shape[2], KW = w.shape[3];
  const Range rn = r[vn], rco = r[vco], ry = r[vy], rx = r[vx], rci = r[vci], rky = r[vky],
              rkx = r[vkx];
  Tensor out({rn.size(), rco.size(), ry.size(), rx.size()});
  int64_t o = 0;
  for (int64_t n = rn.lo; n < rn.hi; ++n)
    for (int64_t co = rco.lo; co < rco.hi; ++co)
      for (int64_t y = ry.lo; y < ry.hi; ++y)
        for (int64_t x = rx.lo; x < rx.hi; ++x) {
          double acc = 0;
          for (int64_t ci = rci.lo; ci < rci.hi; ++ci)
            for (int64_t ky = rky.lo; ky < rky.hi; ++ky)
              for (int64_t kx = rkx.lo; kx < rkx.hi; ++kx) {
                int64_t iy = y * sh + ky * dh - ph, ix = x * sw + kx * dw - pw;
                double d = iy >= 0 && iy < H && ix >= 0 && ix < W
                               ? data.data[((n * C + ci) * H + iy) * W + ix]
                               : 0.0;
                acc = acc + d * w.data[((co * WC + ci) * KH + ky) * KW + kx];
              }
          out.data[o++] = acc;
        }
  return out;
}

} // namespace

std::optional<Tensor> fastKernel(const InstOp &op, const Shapes &shapes,
                                 const std::vector<const Tensor *> &inputs,
                                 const std::vector<Range> &ranges) {
  (void)shapes;
  if (!op.def)
    return std::nullopt;
  const std::string &name = op.def->name;
  if (name == "MatMul" && op.vars.size() == 3 && inputs.size() == 2 &&
      inputs[0]->shape.size() == 2 && inputs[1]->shape.size() == 2)
    return matmul(op, *inputs[0], *inputs[1], ranges);
  if (name == "Conv2d" && op.vars.size() == 7 && inputs.size() == 2 &&
      inputs[0]->shape.size() == 4 && inputs[1]->shape.size() == 4)
    return conv2d(op, *inputs[0], *inputs[1], ranges);
  return std::nullopt;
}

llvm::Expected<Tensor> evaluateFast(const InstOp &op, const Shapes &shapes,
                                    const std::vector<const Tensor *> &inputs,
                                    const std::vector<Range> &ranges) {
  if (auto t = fastKernel(op, shapes, inputs, ranges))
    return std::move(*t);
  return evaluate(op, shapes, inputs, ranges);
}

} // namespace tofu
