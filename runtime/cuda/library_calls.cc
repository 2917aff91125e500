// Library plans as cuBLAS and cuDNN call descriptors, and their host references.
#include "runtime/cuda/library_calls.h"

#include <algorithm>
#include <limits>

#include "fmt/format.h"

namespace tofu::cuda {
namespace {

bool fitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

/// The loop with the plan's A/B strides exchanged into X/Y order (X is B, Y is A).
GemmLoop swapped(const GemmLoop &l) { return GemmLoop{l.n, l.sb, l.sa, l.sc}; }

} // namespace

int64_t CublasGemm::calls() const { return gemmLoopCount(loops) * gemmLoopCount(inner); }

std::string CublasGemm::describe() const {
  std::string extra;
  if (batch > 1)
    extra += fmt::format(", batch {}", batch);
  if (calls() > 1)
    extra += fmt::format(", {} calls", calls());
  // Named in the row-major terms of the op: M x N x K.
  return fmt::format("cuBLAS sgemm {}x{}x{}{}", n, m, k, extra);
}

CublasGemm cublasGemm(const GemmPlan &p) {
  CublasGemm g;
  g.transX = p.transB, g.transY = p.transA;
  g.m = p.N, g.n = p.M, g.k = p.K;
  g.ldx = p.ldb, g.ldy = p.lda, g.ldc = p.ldc;
  g.x = p.b, g.y = p.a;
  g.offX = p.offB, g.offY = p.offA;
  g.alphaInput = p.alphaInput;
  // The longest independent loop becomes the strided batch; the others stay host loops.
  size_t best = p.outer.size();
  for (size_t i = 0; i < p.outer.size(); ++i)
    if (best == p.outer.size() || p.outer[i].n > p.outer[best].n)
      best = i;
  for (size_t i = 0; i < p.outer.size(); ++i) {
    if (i == best) {
      g.batch = p.outer[i].n;
      g.strideX = p.outer[i].sb, g.strideY = p.outer[i].sa, g.strideC = p.outer[i].sc;
    } else {
      g.loops.push_back(swapped(p.outer[i]));
    }
  }
  for (const GemmLoop &l : p.inner)
    g.inner.push_back(swapped(l));
  return g;
}

std::optional<CublasAffine> cublasAffine(const AffineGemmPlan &plan) {
  CublasAffine a;
  for (size_t i = 0; i < plan.products.size(); ++i) {
    a.products.push_back(cublasGemm(plan.products[i]));
    a.products.back().accumulate = i > 0 || plan.restInput >= 0;
  }
  if (plan.restInput < 0)
    return a;
  const size_t rank = plan.outputExtents.size();
  if (rank > static_cast<size_t>(kMaxCopyRank))
    return std::nullopt;
  a.hasRest = true;
  a.restInput = static_cast<unsigned>(plan.restInput);
  a.rest.rank = static_cast<int32_t>(rank);
  a.rest.combine = kOverwrite;
  a.rest.srcOffset = plan.restOffset;
  int64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    a.rest.extent[d] = plan.outputExtents[d];
    a.rest.srcStride[d] = plan.restStrides[d];
    a.rest.dstStride[d] = stride;
    stride *= plan.outputExtents[d];
  }
  a.rest.elements = stride;
  return a;
}

std::string CublasAffine::describe() const {
  std::string out = hasRest ? "bias broadcast" : "";
  for (const CublasGemm &g : products)
    out += (out.empty() ? "" : " + ") + g.describe();
  return out;
}

std::string GemmElements::describe() const {
  return fmt::format("{0} x {0} -> {1}{2}", bf16Operands ? "bf16" : "f32",
                     bf16Output ? "bf16" : "f32", staged ? " (staged in f32)" : "");
}

std::optional<GemmElements> gemmElements(const std::vector<const CublasGemm *> &products,
                                         const KernelTypes &types, std::string *why) {
  auto decline = [&](std::string reason) -> std::optional<GemmElements> {
    if (why)
      *why = std::move(reason);
    return std::nullopt;
  };
  GemmElements e;
  e.bf16Output = types.output == loops::Element::BF16;
  bool calls = products.size() > 1;
  for (size_t i = 0; i < products.size(); ++i) {
    const CublasGemm &g = *products[i];
    const bool x = types.input(g.x) == loops::Element::BF16,
               y = types.input(g.y) == loops::Element::BF16;
    if (x != y)
      return decline(
          fmt::format("a product of {} and {} operands", x ? "bf16" : "f32", y ? "bf16" : "f32"));
    if (i > 0 && x != e.bf16Operands)
      return decline("products of operands of different types");
    e.bf16Operands = x;
    if (g.alphaInput >= 0 && types.input(static_cast<size_t>(g.alphaInput)) != loops::Element::F32)
      return decline("a bf16 scaling input");
    calls = calls || g.calls() > 1 || g.accumulate;
  }
  e.staged = e.bf16Output && (!e.bf16Operands || calls);
  return e;
}

std::optional<bool> cudnnBf16(const CudnnConv &c, const KernelTypes &types, std::string *why) {
  auto of = [&](const TensorView &v) {
    return v.input < 0 ? types.output : types.input(static_cast<size_t>(v.input));
  };
  const loops::Element x = of(c.x), w = of(c.w), y = of(c.y);
  if (x == w && w == y)
    return x == loops::Element::BF16;
  if (why)
    *why = fmt::format("x {}, w {}, y {}: cuDNN takes one type", loops::elementName(x),
                       loops::elementName(w), loops::elementName(y));
  return std::nullopt;
}

std::string LibraryCall::describe() const {
  // A product with a bfloat16 operand or result is cuBLAS's GemmEx, not sgemm.
  auto typed = [&](std::string what) {
    if (!elements.bf16Operands && !elements.bf16Output)
      return what;
    for (size_t at = what.find("sgemm"); at != std::string::npos; at = what.find("sgemm", at))
      what.replace(at, 5, "GemmEx");
    return what + ", " + elements.describe();
  };
  std::string out;
  switch (kind) {
  case None:
    return "";
  case Gemm:
    out = typed(gemm.describe());
    break;
  case Conv:
    out = conv.describe() + (convBf16 ? ", bf16" : "");
    break;
  case Affine:
    out = typed(affine.describe());
    break;
  case Scatter:
    return "scatter-add (atomic adds, one k per q)";
  }
  const auto widened = std::count(widen.begin(), widen.end(), true);
  if (widened > 0)
    out += fmt::format(", {} bf16 operand{} widened", widened, widened > 1 ? "s" : "");
  if (staged && kind == Conv)
    out += ", rounded to bf16";
  return out;
}

bool LibraryCall::tensorCores() const {
  return ((kind == Gemm || kind == Affine) && elements.bf16Operands) || (kind == Conv && convBf16);
}

LibraryCall libraryCall(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                        const std::vector<Box> &held, const KernelTypes &types) {
  using loops::Element;
  LibraryCall call;
  call.widen.assign(held.size(), false);
  // Widens the bfloat16 inputs among `read` (input indices; others ignored).
  auto widenAll = [&](const std::vector<int> &read) {
    KernelTypes wide = types;
    wide.inputs.resize(held.size(), Element::F32);
    for (int q : read)
      if (q >= 0 && static_cast<size_t>(q) < held.size() && wide.inputs[q] == Element::BF16) {
        call.widen[q] = true;
        wide.inputs[q] = Element::F32;
      }
    return wide;
  };
  auto products = [&](const std::vector<const CublasGemm *> &gemms) -> bool {
    if (auto e = gemmElements(gemms, types)) {
      call.elements = *e;
      return true;
    }
    std::vector<int> read; // what cuBLAS takes no mix of: widen the bfloat16 ones
    for (const CublasGemm *g : gemms)
      read.insert(read.end(), {static_cast<int>(g->x), static_cast<int>(g->y), g->alphaInput});
    auto e = gemmElements(gemms, widenAll(read));
    if (!e)
      return false;
    call.elements = *e;
    return true;
  };
  if (auto g = gemmPlan(op, ranges, held)) {
    call.gemm = cublasGemm(*g);
    if (products({&call.gemm}))
      call.kind = LibraryCall::Gemm;
  } else if (auto c = convPlan(op, shapes, ranges, held)) {
    if (auto conv = cudnnConv(*c, held)) {
      call.kind = LibraryCall::Conv;
      call.conv = std::move(*conv);
      if (auto bf16 = cudnnBf16(call.conv, types)) {
        call.convBf16 = *bf16;
      } else { // cuDNN takes one type: float32, the bfloat16 operands widened
        widenAll({call.conv.x.input, call.conv.w.input, call.conv.y.input});
        call.staged = types.output == Element::BF16;
      }
    }
  } else if (auto a = affineGemmPlan(op, ranges, held)) {
    if (auto calls = cublasAffine(*a)) {
      call.affine = std::move(*calls);
      std::vector<const CublasGemm *> gemms;
      for (const CublasGemm &g : call.affine.products)
        gemms.push_back(&g);
      if (products(gemms)) {
        call.kind = LibraryCall::Affine;
        // The bias in its own type, into the output, or the float32 staging it is rounded
        // from.
        call.affine.rest.srcBf16 =
            call.affine.hasRest && types.input(call.affine.restInput) == Element::BF16;
        call.affine.rest.dstBf16 = types.output == Element::BF16 && !call.elements.staged;
      }
    }
  } else if (auto sc = scatterPlan(op, ranges, held)) {
    if (types.allF32()) {
      call.kind = LibraryCall::Scatter;
      call.scatter = std::move(*sc);
    } else {
      call.declined = "the scatter-add kernel adds float32";
    }
  }
  if (call.kind == LibraryCall::Gemm || call.kind == LibraryCall::Affine)
    call.staged = call.elements.staged;
  if (call.kind == LibraryCall::None || (call.kind == LibraryCall::Conv && call.conv.zeros)) {
    call.widen.assign(held.size(), false); // nothing is read
    call.staged = false;
  }
  return call;
}

void referenceAffine(const CublasAffine &a, const float *const *in, float *out) {
  if (a.hasRest)
    for (int64_t e = 0; e < a.rest.elements; ++e)
      boxCopyElement(a.rest, e, out, in[a.restInput]);
  for (const CublasGemm &g : a.products)
    referenceGemm(g, in, out);
}

void referenceGemm(const CublasGemm &g, const float *const *in, float *out) {
  const float alpha = g.alphaInput >= 0 ? in[g.alphaInput][0] : 1.0f;
  g.forEachCall([&](int64_t offX, int64_t offY, int64_t offC, bool first) {
    for (int64_t b = 0; b < g.batch; ++b) {
      const float *X = in[g.x] + offX + b * g.strideX;
      const float *Y = in[g.y] + offY + b * g.strideY;
      float *C = out + offC + b * g.strideC;
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t i = 0; i < g.m; ++i) {
          double s = 0;
          for (int64_t l = 0; l < g.k; ++l) {
            const float xv = g.transX ? X[l + i * g.ldx] : X[i + l * g.ldx];
            const float yv = g.transY ? Y[j + l * g.ldy] : Y[l + j * g.ldy];
            s += static_cast<double>(xv) * yv;
          }
          float &c = C[i + j * g.ldc];
          c = static_cast<float>(alpha * s + (first ? 0.0 : c));
        }
    }
    return true;
  });
}

bool TensorView::dense() const {
  int64_t s = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] != 1 && strides[d] != s)
      return false;
    s *= dims[d];
  }
  return true;
}

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int d : dims)
    n *= d;
  return n;
}

std::string CudnnConv::describe() const {
  if (zeros)
    return "zeros (no term of the sum reaches the share)";
  const char *what = kind == ConvKind::Forward  ? "forward"
                     : kind == ConvKind::Filter ? "filter gradient"
                                                : "data gradient";
  return fmt::format("cuDNN convolution {}{}", what, stageWeights ? " (filter gathered)" : "");
}

std::optional<CudnnConv> cudnnConv(const ConvPlan &plan, const std::vector<Box> &held,
                                   std::string *why) {
  auto no = [&](std::string reason) -> std::optional<CudnnConv> {
    if (why)
      *why = std::move(reason);
    return std::nullopt;
  };
  CudnnConv c;
  c.kind = plan.kind;
  c.outputElements = plan.outputElements;
  if (plan.zeros) {
    c.zeros = true;
    return c;
  }
  const size_t nsp = plan.spatialDims();
  const bool fwd = plan.kind == ConvKind::Forward, filter = plan.kind == ConvKind::Filter;
  Box src = plan.src;
  std::vector<int> lead(2 + nsp, 0);
  for (size_t d = 0; d < nsp; ++d) {
    const int64_t ext = (plan.weights[2 + d].size() - 1) * plan.dilations[d] + 1;
    int64_t p = plan.padBefore[d];
    if (!fwd && !filter && plan.padBefore[d] != plan.padAfter[d]) {
      // Data gradient: pad evenly by the smaller padding and compute the rows the rest
      // stands for (they receive gradient from the same dy rows; they are dropped).
      p = std::min(plan.padBefore[d], plan.padAfter[d]);
      src[2 + d] = {src[2 + d].lo - (plan.padBefore[d] - p),
                    src[2 + d].hi + (plan.padAfter[d] - p)};
      lead[2 + d] = static_cast<int>(plan.padBefore[d] - p);
      c.stageOutput = true;
    }
    // cuDNN pads both ends by `p`: the output size it implies must be the share's (trailing
    // padding that is never read is harmless).
    const int64_t span = src[2 + d].size() + 2 * p - ext;
    if (span < 0 || span / plan.strides[d] + 1 != plan.dst[2 + d].size())
      return no(fmt::format("uneven padding ({} before, {} after) in spatial dimension {}",
                            plan.padBefore[d], plan.padAfter[d], d));
    if (!fitsInt(p) || !fitsInt(plan.strides[d]) || !fitsInt(plan.dilations[d]))
      return no("a padding, stride or dilation exceeds int");
    c.pad.push_back(static_cast<int>(p));
    c.stride.push_back(static_cast<int>(plan.strides[d]));
    c.dilation.push_back(static_cast<int>(plan.dilations[d]));
  }
  if (c.stageOutput) {
    c.outputLead = lead;
    for (const Range &r : plan.src)
      c.outputDims.push_back(static_cast<int>(r.size()));
  }
  // A view of `box` in the buffer holding `within` (the share's own output: dense).
  auto view = [&](const Box &box, int input, TensorView &v) {
    const Box &within = input >= 0 ? held[static_cast<size_t>(input)] : box;
    const std::vector<int64_t> st = rowMajorStrides(within);
    v.input = input;
    v.offset = 0;
    for (size_t d = 0; d < box.size(); ++d) {
      v.offset += (box[d].lo - within[d].lo) * st[d];
      if (!fitsInt(box[d].size()) || !fitsInt(st[d]))
        return false;
      v.dims.push_back(static_cast<int>(box[d].size()));
      v.strides.push_back(static_cast<int>(st[d]));
    }
    if (box.size() == 3) { // 1-D: a unit spatial dimension in front of the real one
      const int64_t over = int64_t(v.dims[2]) * v.strides[2]; // steps over the real one
      if (!fitsInt(over))
        return false;
      v.dims.insert(v.dims.begin() + 2, 1);
      v.strides.insert(v.strides.begin() + 2, static_cast<int>(over));
    }
    return true;
  };
  if (!view(src, fwd || filter ? plan.srcIn : -1, c.x) ||
      !view(plan.weights, filter ? -1 : plan.wIn, c.w) ||
      !view(plan.dst, fwd ? -1 : plan.dstIn, c.y))
    return no("a view's size or stride exceeds int");
  if (nsp == 1) {
    if (c.stageOutput) {
      c.outputLead.insert(c.outputLead.begin() + 2, 0);
      c.outputDims.insert(c.outputDims.begin() + 2, 1);
    }
    c.pad.insert(c.pad.begin(), 0);
    c.stride.insert(c.stride.begin(), 1);
    c.dilation.insert(c.dilation.begin(), 1);
  }
  if (!filter && !c.w.dense()) {
    c.stageWeights = true;
    c.weightsBox = plan.weights;
    c.weightsHeld = held[static_cast<size_t>(plan.wIn)];
  }
  return c;
}

void referenceConv(const CudnnConv &c, const float *const *in, float *out) {
  if (c.zeros) {
    std::fill(out, out + c.outputElements, 0.0f);
    return;
  }
  auto base = [&](const TensorView &v) -> const float * {
    return (v.input >= 0 ? in[v.input] : out) + v.offset;
  };
  const float *X = base(c.x), *W = base(c.w), *Y = base(c.y);
  const TensorView &result = c.kind == ConvKind::Forward  ? c.y
                             : c.kind == ConvKind::Filter ? c.w
                                                          : c.x;
  std::vector<double> acc(static_cast<size_t>(result.elements()), 0.0);
  auto at = [](const TensorView &v, const std::vector<int64_t> &idx) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      o += idx[d] * v.strides[d];
    return o;
  };
  auto dense = [&](const std::vector<int64_t> &idx) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      o = o * result.dims[d] + idx[d];
    return static_cast<size_t>(o);
  };
  const size_t nsp = c.x.dims.size() - 2;
  const int N = c.x.dims[0], CI = c.x.dims[1], CO = c.w.dims[0];
  // Every (n, co, ci, output position, kernel position): one term of each form.
  std::vector<int64_t> o(nsp, 0), k(nsp, 0);
  for (int n = 0; n < N; ++n)
    for (int co = 0; co < CO; ++co)
      for (int ci = 0; ci < CI; ++ci) {
        std::fill(o.begin(), o.end(), 0);
        for (bool moreO = true; moreO;) {
          std::fill(k.begin(), k.end(), 0);
          for (bool moreK = true; moreK;) {
            std::vector<int64_t> xi{n, ci}, wi{co, ci}, yi{n, co};
            bool inside = true;
            for (size_t d = 0; d < nsp; ++d) {
              const int64_t i = o[d] * c.stride[d] + k[d] * c.dilation[d] - c.pad[d];
              inside = inside && i >= 0 && i < c.x.dims[2 + d];
              xi.push_back(i), wi.push_back(k[d]), yi.push_back(o[d]);
            }
            if (inside) {
              switch (c.kind) {
              case ConvKind::Forward:
                acc[dense(yi)] += static_cast<double>(X[at(c.x, xi)]) * W[at(c.w, wi)];
                break;
              case ConvKind::Filter:
                acc[dense(wi)] += static_cast<double>(X[at(c.x, xi)]) * Y[at(c.y, yi)];
                break;
              case ConvKind::Data:
                acc[dense(xi)] += static_cast<double>(Y[at(c.y, yi)]) * W[at(c.w, wi)];
                break;
              }
            }
            moreK = false;
            for (size_t d = nsp; d-- > 0;)
              if (++k[d] < c.w.dims[2 + d]) {
                moreK = true;
                break;
              } else {
                k[d] = 0;
              }
          }
          moreO = false;
          for (size_t d = nsp; d-- > 0;)
            if (++o[d] < c.y.dims[2 + d]) {
              moreO = true;
              break;
            } else {
              o[d] = 0;
            }
        }
      }
  if (!c.stageOutput) {
    for (size_t e = 0; e < acc.size(); ++e)
      out[e] = static_cast<float>(acc[e]);
    return;
  }
  // The share is a box of what was computed: `outputLead` on, `outputDims` long.
  int64_t n = 1;
  for (int d : c.outputDims)
    n *= d;
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, src = 0, scale = 1;
    for (size_t d = c.outputDims.size(); d-- > 0;) {
      src += (rest % c.outputDims[d] + c.outputLead[d]) * scale;
      rest /= c.outputDims[d];
      scale *= result.dims[d];
    }
    out[e] = static_cast<float>(acc[static_cast<size_t>(src)]);
  }
}

} // namespace tofu::cuda
