// Library kernels on oneDNN: the plans of codegen/library_plans.h as sgemm calls,
// convolution primitives and a scatter-add loop.
#include "runtime/library_kernels.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/library_plans.h"
#include "fmt/format.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "support/bf16.h"

namespace tofu {
namespace {

dnnl::engine &cpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// Whether oneDNN implements a bfloat16 matmul natively: its brgemm kernels, on a CPU with
/// bfloat16 products (elsewhere the CPU backend widens the operands around sgemm).
bool nativeBf16(const dnnl::matmul::primitive_desc &pd) {
  return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
}

// ---------------------------------------------------------------------------------------
// Contractions as sgemm.

class GemmKernel : public LibraryKernel {
public:
  /// `accumulate`: the product adds into the output (a sum of products' later terms)
  /// instead of overwriting it.
  explicit GemmKernel(GemmPlan plan, bool accumulate = false)
      : g_(std::move(plan)), accumulate_(accumulate),
        // A few rows times a large transposed B (a linear layer's input gradient, dY Wᵀ):
        // oneDNN 2.6 packs the whole of B at every such call, 4x slower here than computing
        // the transpose, Cᵀ = B Aᵀ, whose transposed operand is the small one, into scratch
        // and transposing it into C (bench: 32x4096x4096, 21.9 ms against 5.9).
        swapped_(!g_.transA && g_.transB && g_.outerCount() == 1 && g_.M * 8 <= g_.N &&
                 g_.M <= 256) {}

  void run(const float *const *in, float *out, int threads, void *scratch) const override {
    const float alpha = g_.alphaInput >= 0 ? in[g_.alphaInput][0] : 1.0f;
    const float *A = in[g_.a] + g_.offA, *B = in[g_.b] + g_.offB;
    const int64_t outerCount = g_.outerCount(), innerCount = g_.innerCount();
    if (swapped_) {
      omp_set_num_threads(std::max(1, threads));
      float *t = static_cast<float *>(scratch); // Cᵀ, N x M
      const GemmOffsets o = gemmLoopOffsets(g_.outer, 0);
      for (int64_t r = 0; r < innerCount; ++r) {
        const GemmOffsets i = gemmLoopOffsets(g_.inner, r);
        dnnl_sgemm('N', 'T', g_.N, g_.M, g_.K, alpha, B + o.b + i.b, g_.ldb, A + o.a + i.a, g_.lda,
                   0.0f, t, g_.M);
        float *c = out + o.c;
        const bool add = r > 0 || accumulate_;
        for (int64_t m = 0; m < g_.M; ++m)
          for (int64_t n = 0; n < g_.N; ++n)
            c[m * g_.ldc + n] = (add ? c[m * g_.ldc + n] : 0.0f) + t[n * g_.M + m];
      }
      return;
    }
    auto one = [&](int64_t it) {
      const GemmOffsets o = gemmLoopOffsets(g_.outer, it);
      for (int64_t r = 0; r < innerCount; ++r) {
        const GemmOffsets i = gemmLoopOffsets(g_.inner, r);
        dnnl_sgemm(g_.transA ? 'T' : 'N', g_.transB ? 'T' : 'N', g_.M, g_.N, g_.K, alpha,
                   A + o.a + i.a, g_.lda, B + o.b + i.b, g_.ldb,
                   r == 0 && !accumulate_ ? 0.0f : 1.0f, out + o.c, g_.ldc);
      }
    };
    if (outerCount == 1) {
      omp_set_num_threads(std::max(1, threads));
      one(0);
      return;
    }
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t it = 0; it < outerCount; ++it)
      one(it);
  }

  std::string describe() const override {
    const int64_t loops = g_.outerCount() * g_.innerCount();
    return fmt::format("oneDNN sgemm {}x{}x{}{}{}", g_.M, g_.N, g_.K,
                       loops > 1 ? fmt::format(" ({} calls)", loops) : "",
                       swapped_ ? " (as its transpose)" : "");
  }

  size_t scratchBytes() const override {
    return swapped_ ? (static_cast<size_t>(g_.M * g_.N) * sizeof(float) + 63) / 64 * 64 : 0;
  }

private:
  GemmPlan g_;
  bool accumulate_;
  bool swapped_;
};

/// A contraction of bfloat16 A and B into a float32 C (float32 accumulation) as oneDNN's
/// matmul primitive, made only where oneDNN implements it natively (its brgemm kernels on a
/// CPU with bfloat16 products): elsewhere oneDNN's bf16 matmul is slower than widening the
/// operands around sgemm (docs/benchmarks.md), which the CPU backend then does.
class Bf16GemmKernel : public LibraryKernel {
public:
  static std::unique_ptr<Bf16GemmKernel> make(const GemmPlan &g) {
    using dt = dnnl::memory::data_type;
    // A product scaled by a runtime input (Gemm's alpha) gets no brgemm implementation in
    // oneDNN 2.6 (measured: its runtime output scales fall back to gemm:jit).
    if (g.alphaInput >= 0)
      return nullptr;
    auto k = std::unique_ptr<Bf16GemmKernel>(new Bf16GemmKernel(g));
    const dnnl::memory::desc a({g.M, g.K}, dt::bf16,
                               g.transA ? dnnl::memory::dims{1, g.lda}
                                        : dnnl::memory::dims{g.lda, 1});
    const dnnl::memory::desc b({g.K, g.N}, dt::bf16,
                               g.transB ? dnnl::memory::dims{1, g.ldb}
                                        : dnnl::memory::dims{g.ldb, 1});
    const dnnl::memory::desc c({g.M, g.N}, dt::f32, dnnl::memory::dims{g.ldc, 1});
    k->a_ = a;
    k->b_ = b;
    k->c_ = c;
    try {
      for (int add = 0; add < 2; ++add) { // C = A B, and C += A B (a reduction's later terms)
        dnnl::primitive_attr attr;
        if (add) {
          dnnl::post_ops ops;
          ops.append_sum(1.0f);
          attr.set_post_ops(ops);
        }
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpuEngine());
        if (!nativeBf16(pd))
          return nullptr;
        k->impl_ = pd.impl_info_str();
        k->prims_[add] = dnnl::matmul(pd);
      }
    } catch (const dnnl::error &) {
      return nullptr; // no bf16 matmul for these shapes or on this CPU
    }
    return k;
  }

  void run(const float *const *in, float *out, int threads, void *) const override {
    omp_set_num_threads(std::max(1, threads));
    dnnl::stream stream(cpuEngine());
    const auto *A = reinterpret_cast<const uint16_t *>(in[g_.a]) + g_.offA;
    const auto *B = reinterpret_cast<const uint16_t *>(in[g_.b]) + g_.offB;
    const int64_t outerCount = g_.outerCount(), innerCount = g_.innerCount();
    for (int64_t it = 0; it < outerCount; ++it) {
      const GemmOffsets o = gemmLoopOffsets(g_.outer, it);
      for (int64_t r = 0; r < innerCount; ++r) {
        const GemmOffsets i = gemmLoopOffsets(g_.inner, r);
        dnnl::memory a(a_, cpuEngine(), const_cast<uint16_t *>(A + o.a + i.a));
        dnnl::memory b(b_, cpuEngine(), const_cast<uint16_t *>(B + o.b + i.b));
        dnnl::memory c(c_, cpuEngine(), out + o.c);
        prims_[r > 0 ? 1 : 0].execute(
            stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      }
    }
    stream.wait();
  }

  std::string describe() const override {
    const int64_t loops = g_.outerCount() * g_.innerCount();
    return fmt::format("oneDNN bf16 matmul {}x{}x{}{} ({})", g_.M, g_.N, g_.K,
                       loops > 1 ? fmt::format(" ({} calls)", loops) : "", impl_);
  }

private:
  explicit Bf16GemmKernel(GemmPlan g) : g_(std::move(g)) {}
  GemmPlan g_;
  dnnl::memory::desc a_, b_, c_;
  dnnl::matmul prims_[2];
  std::string impl_;
};

/// A sum of products (AffineGemmPlan: lstm_gates, and the GRU and RNN cells): the bias
/// broadcast into the output, then each product as sgemm calls accumulating into it (the
/// first overwriting where there is no bias).
class AffineKernel : public LibraryKernel {
public:
  explicit AffineKernel(AffineGemmPlan plan) : p_(std::move(plan)) {
    for (size_t i = 0; i < p_.products.size(); ++i)
      products_.emplace_back(p_.products[i], i > 0 || p_.restInput >= 0);
  }

  void run(const float *const *in, float *out, int threads, void *scratch) const override {
    if (p_.restInput >= 0) {
      // Rows of the output (every variable but the last), each a strided read of the bias.
      const size_t rank = p_.outputExtents.size();
      const int64_t cols = rank ? p_.outputExtents.back() : 1;
      const int64_t colStride = rank ? p_.restStrides.back() : 0;
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < rank; ++d)
        rows *= p_.outputExtents[d];
      const float *rest = in[p_.restInput] + p_.restOffset;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static) if (rows > 1)
      for (int64_t r = 0; r < rows; ++r) {
        int64_t left = r, off = 0;
        for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) { // the row's variables
          off += (left % p_.outputExtents[d]) * p_.restStrides[d];
          left /= p_.outputExtents[d];
        }
        float *o = out + r * cols;
        for (int64_t c = 0; c < cols; ++c)
          o[c] = rest[off + c * colStride];
      }
    }
    for (const GemmKernel &g : products_)
      g.run(in, out, threads, scratch);
  }

  size_t scratchBytes() const override { // the products run one after another
    size_t most = 0;
    for (const GemmKernel &g : products_)
      most = std::max(most, g.scratchBytes());
    return most;
  }

  std::string describe() const override {
    std::string out = p_.restInput >= 0 ? "bias broadcast" : "";
    for (const GemmKernel &g : products_)
      out += (out.empty() ? "" : " + ") + g.describe();
    return out;
  }

private:
  AffineGemmPlan p_;
  std::vector<GemmKernel> products_;
};

// ---------------------------------------------------------------------------------------
// Convolutions as oneDNN convolution primitives.

dnnl::memory::dims toDims(const std::vector<int64_t> &v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

/// A view of a held region: the box `view` inside a buffer holding `held`.
struct View {
  dnnl::memory::desc desc;
  int64_t offset = 0;
  bool dense = true; ///< the view is the whole buffer's layout (row-major, no gaps)
};

std::optional<View> viewOf(const Box &held, const Box &view,
                           dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  std::vector<int64_t> st = rowMajorStrides(held), dims;
  int64_t off = 0;
  for (size_t d = 0; d < held.size(); ++d) {
    if (view[d].size() <= 0 || view[d].lo < held[d].lo || view[d].hi > held[d].hi)
      return std::nullopt;
    off += (view[d].lo - held[d].lo) * st[d];
    dims.push_back(view[d].size());
  }
  bool dense = rowMajorStrides(view) == st;
  return View{dnnl::memory::desc(toDims(dims), type, toDims(st)), off, dense};
}

dnnl::memory::desc denseDesc(const std::vector<int64_t> &dims,
                             dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  std::vector<int64_t> st(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;)
    st[d - 1] = st[d] * dims[d];
  return dnnl::memory::desc(toDims(dims), type, toDims(st));
}

/// A share no term of the sum reaches: zeros.
class ZeroKernel : public LibraryKernel {
public:
  explicit ZeroKernel(int64_t n) : n_(n) {}
  void run(const float *const *, float *out, int, void *) const override {
    std::fill(out, out + n_, 0.0f);
  }
  std::string describe() const override { return "zeros (no term of the sum reaches the share)"; }

private:
  int64_t n_;
};

class ConvKernel : public LibraryKernel {
public:
  ConvKind kind = ConvKind::Forward;
  dnnl::primitive prim;
  dnnl::memory::desc srcD, wD, dstD;    ///< src/diff_src, weights/diff_weights, dst/diff_dst
  int srcIn = -1, wIn = -1, dstIn = -1; ///< which is read from which input (-1: the output)
  int64_t srcOff = 0, wOff = 0, dstOff = 0;
  std::string what;
  /// Inputs whose view has gaps are first gathered into a dense buffer (oneDNN's fast
  /// convolutions take dense layouts only; a strided view falls to its reference code).
  struct Stage {
    int input = -1;
    int64_t offset = 0;
    dnnl::memory::desc from, to;
    dnnl::primitive gather;
    size_t at = 0; ///< its buffer's offset in the scratch space
  };
  std::vector<Stage> stages;
  /// Inputs held as bfloat16 (offsets count their 2-byte elements); the rest float32.
  std::vector<bool> bf16;
  /// The scratch space: the primitive's own (oneDNN's shared scratchpad is not safe for
  /// primitives running concurrently on several workers), then the stages' buffers.
  dnnl::memory::desc scratchD;
  size_t scratchSize = 0;

  static size_t aligned(size_t n) { return (n + 63) / 64 * 64; }
  template <typename PD> void setScratch(const PD &pd) {
    scratchD = pd.scratchpad_desc();
    scratchSize = aligned(scratchD.get_size());
    for (Stage &st : stages) {
      st.at = scratchSize;
      scratchSize += aligned(st.to.get_size());
    }
  }
  size_t scratchBytes() const override { return scratchSize; }

  void run(const float *const *in, float *out, int threads, void *scratch) const override {
    omp_set_num_threads(std::max(1, threads));
    char *space = static_cast<char *>(scratch);
    dnnl::engine &e = cpuEngine();
    dnnl::stream stream(e);
    auto ptr = [&](int input, int64_t off) -> void * {
      if (input < 0)
        return out;
      const size_t q = static_cast<size_t>(input);
      void *at = q < bf16.size() && bf16[q]
                     ? static_cast<void *>(const_cast<uint16_t *>(
                           reinterpret_cast<const uint16_t *>(in[input]) + off))
                     : static_cast<void *>(const_cast<float *>(in[input] + off));
      for (const Stage &st : stages)
        if (st.input == input && st.offset == off) {
          dnnl::memory from(st.from, e, at), to(st.to, e, space + st.at);
          st.gather.execute(stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
          return space + st.at;
        }
      return at;
    };
    dnnl::memory src(srcD, e, ptr(srcIn, srcOff)), w(wD, e, ptr(wIn, wOff)),
        dst(dstD, e, ptr(dstIn, dstOff));
    dnnl::memory sp(scratchD, e, space);
    switch (kind) {
    case ConvKind::Forward:
      prim.execute(stream, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_WEIGHTS, w},
                            {DNNL_ARG_DST, dst},
                            {DNNL_ARG_SCRATCHPAD, sp}});
      break;
    case ConvKind::Filter:
      prim.execute(stream, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_DIFF_WEIGHTS, w},
                            {DNNL_ARG_DIFF_DST, dst},
                            {DNNL_ARG_SCRATCHPAD, sp}});
      break;
    case ConvKind::Data:
      prim.execute(stream, {{DNNL_ARG_DIFF_SRC, src},
                            {DNNL_ARG_WEIGHTS, w},
                            {DNNL_ARG_DIFF_DST, dst},
                            {DNNL_ARG_SCRATCHPAD, sp}});
      break;
    }
    stream.wait();
  }
  std::string describe() const override { return what; }
};

/// Whether oneDNN runs bfloat16 products natively on this CPU (avx512_core_bf16, AMX).
bool nativeBf16() {
  static const bool native = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return native;
}

/// The share's convolution primitive. With `bf16` (per input), the inputs it marks are read
/// as bfloat16 and the result is float32, and the kernel is made only where oneDNN
/// implements that natively (on a CPU with bfloat16 products); else null.
std::unique_ptr<LibraryKernel> convKernel(const ConvPlan &c, const std::vector<Box> &held,
                                          const std::vector<bool> *bf16 = nullptr) {
  if (c.zeros)
    return bf16 ? nullptr : std::make_unique<ZeroKernel>(c.outputElements);
  dnnl::memory::dims strides(c.strides.begin(), c.strides.end()), dil, padL, padR;
  for (size_t d = 0; d < c.spatialDims(); ++d) {
    dil.push_back(c.dilations[d] - 1); // oneDNN counts the gaps
    padL.push_back(c.padBefore[d]);
    padR.push_back(c.padAfter[d]);
  }
  const Box &srcBox = c.src, &wBox = c.weights, &dstBox = c.dst;
  auto k = std::make_unique<ConvKernel>();
  k->kind = c.kind;
  if (bf16)
    k->bf16 = *bf16;
  using dt = dnnl::memory::data_type;
  auto typeOf = [&](int in) {
    return bf16 && in >= 0 && static_cast<size_t>(in) < bf16->size() && (*bf16)[in] ? dt::bf16
                                                                                    : dt::f32;
  };
  auto dense = [](const Box &b, dt type = dt::f32) {
    std::vector<int64_t> e;
    for (const Range &r : b)
      e.push_back(r.size());
    return denseDesc(e, type);
  };
  auto input = [&](int in, const Box &box, dnnl::memory::desc &desc, int &which, int64_t &off) {
    auto v = viewOf(held[static_cast<size_t>(in)], box, typeOf(in));
    if (!v)
      return false;
    desc = v->desc, which = in, off = v->offset;
    if (!v->dense) {
      ConvKernel::Stage st;
      st.input = which, st.offset = off, st.from = v->desc, st.to = dense(box, typeOf(in));
      st.gather =
          dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), st.from, cpuEngine(), st.to));
      desc = st.to;
      k->stages.push_back(std::move(st));
    }
    return true;
  };
  using namespace dnnl;
  engine &e = cpuEngine();
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  const auto fwdAlg = algorithm::convolution_direct;
  // The forward convolution of the share (the backward kinds take it as their hint), once
  // the three descriptors are set.
  auto forward = [&] {
    return convolution_forward::desc(prop_kind::forward_training, fwdAlg, k->srcD, k->wD, k->dstD,
                                     strides, dil, padL, padR);
  };
  // The backward kinds' forward hint: in bf16, the forward of bfloat16 src and weights into
  // a float32 dst (the one forward oneDNN implements that those descriptors' shapes take).
  auto retyped = [](const dnnl::memory::desc &d, dt type) {
    const dnnl::memory::dims dims = d.dims();
    const auto &st = d.data.format_desc.blocking.strides;
    return dnnl::memory::desc(dims, type, dnnl::memory::dims(st, st + dims.size()));
  };
  auto hint = [&] {
    if (!bf16)
      return forward();
    auto s = k->srcD.data.data_type == dnnl_bf16 ? k->srcD : retyped(k->srcD, dt::bf16);
    auto w = k->wD.data.data_type == dnnl_bf16 ? k->wD : retyped(k->wD, dt::bf16);
    return convolution_forward::desc(prop_kind::forward_training, fwdAlg, s, w,
                                     retyped(k->dstD, dt::f32), strides, dil, padL, padR);
  };
  try {
    switch (c.kind) {
    case ConvKind::Forward: {
      if (!input(c.srcIn, srcBox, k->srcD, k->srcIn, k->srcOff) ||
          !input(c.wIn, wBox, k->wD, k->wIn, k->wOff))
        return nullptr;
      k->dstD = dense(dstBox);
      convolution_forward::primitive_desc pd(forward(), attr, e);
      k->prim = convolution_forward(pd);
      k->setScratch(pd);
      k->what = fmt::format("oneDNN convolution forward ({})", pd.impl_info_str());
      break;
    }
    case ConvKind::Filter: {
      if (!input(c.srcIn, srcBox, k->srcD, k->srcIn, k->srcOff) ||
          !input(c.dstIn, dstBox, k->dstD, k->dstIn, k->dstOff))
        return nullptr;
      k->wD = dense(wBox);
      convolution_forward::primitive_desc hpd(hint(), e);
      convolution_backward_weights::desc d(fwdAlg, k->srcD, k->wD, k->dstD, strides, dil, padL,
                                           padR);
      convolution_backward_weights::primitive_desc pd(d, attr, e, hpd);
      k->prim = convolution_backward_weights(pd);
      k->setScratch(pd);
      k->what = fmt::format("oneDNN convolution filter gradient ({})", pd.impl_info_str());
      break;
    }
    case ConvKind::Data: {
      if (!input(c.dstIn, dstBox, k->dstD, k->dstIn, k->dstOff) ||
          !input(c.wIn, wBox, k->wD, k->wIn, k->wOff))
        return nullptr;
      k->srcD = dense(srcBox);
      convolution_forward::primitive_desc hpd(hint(), e);
      convolution_backward_data::desc d(fwdAlg, k->srcD, k->wD, k->dstD, strides, dil, padL, padR);
      convolution_backward_data::primitive_desc pd(d, attr, e, hpd);
      k->prim = convolution_backward_data(pd);
      k->setScratch(pd);
      k->what = fmt::format("oneDNN convolution data gradient ({})", pd.impl_info_str());
      break;
    }
    }
  } catch (const dnnl::error &) {
    return nullptr; // a geometry oneDNN does not take: the generated kernel computes it
  }
  // bfloat16 operands only where the CPU has bfloat16 products and oneDNN runs more than
  // its reference code: elsewhere widening around the float32 call is faster.
  if (bf16) {
    if (!nativeBf16() || k->what.find("ref") != std::string::npos)
      return nullptr;
    k->what.replace(0, std::string("oneDNN").size(), "oneDNN bf16");
  }
  return k;
}

// ---------------------------------------------------------------------------------------
// Scatter-adds.

class ScatterKernel : public LibraryKernel {
public:
  explicit ScatterKernel(ScatterPlan plan) : p_(std::move(plan)) {}
  using Loop = ScatterLoop;

  static int64_t offset(int64_t flat, const std::vector<Loop> &loops, int64_t Loop::*s) {
    int64_t off = 0;
    for (size_t d = loops.size(); d-- > 0;) {
      off += (flat % loops[d].n) * (loops[d].*s);
      flat /= loops[d].n;
    }
    return off;
  }

  void run(const float *const *in, float *out, int, void *) const override {
    if (p_.zeroIn >= 0) { // 0 * Z: zeros, or NaN where Z is not finite, as the sum's term says
      const float *z = in[p_.zeroIn] + p_.zeroOff;
      for (int64_t e = 0; e < p_.outElems; ++e) {
        int64_t left = e, zo = 0;
        for (size_t d = p_.outExtents.size(); d-- > 0;) {
          zo += (left % p_.outExtents[d]) * p_.zeroStrides[d];
          left /= p_.outExtents[d];
        }
        out[e] = 0.0f * z[zo];
      }
    } else {
      std::fill(out, out + p_.outElems, 0.0f);
    }
    int64_t nq = 1, nr = 1;
    for (const Loop &l : p_.qs)
      nq *= l.n;
    for (const Loop &l : p_.rest)
      nr *= l.n;
    const float *idx = in[p_.idxIn] + p_.idxOff, *dy = in[p_.dyIn] + p_.dyOff;
    for (int64_t q = 0; q < nq; ++q) {
      const float v = idx[offset(q, p_.qs, &Loop::sIdx)];
      if (!(v >= static_cast<float>(p_.kLo) && v < static_cast<float>(p_.kHi)) ||
          v != static_cast<float>(static_cast<int64_t>(v)))
        continue; // names no k of this share (NaN included: it equals nothing)
      float *o = out + (static_cast<int64_t>(v) - p_.kLo) * p_.kStride;
      const float *d = dy + offset(q, p_.qs, &Loop::sDy);
      for (int64_t r = 0; r < nr; ++r)
        o[offset(r, p_.rest, &Loop::sOut)] += d[offset(r, p_.rest, &Loop::sDy)];
    }
  }
  std::string describe() const override { return "scatter-add (the sum over q, one k per q)"; }

private:
  ScatterPlan p_;
};

} // namespace

bool hasLibraryForm(const InstOp &op) {
  return hasGemmForm(op) || hasConvForm(op) || hasScatterForm(op) || hasAffineGemmForm(op);
}

std::unique_ptr<LibraryKernel> bf16LibraryKernel(const InstOp &op, const Shapes &shapes,
                                                 const std::vector<Range> &ranges,
                                                 const std::vector<Box> &held,
                                                 const std::vector<bool> &bf16) {
  auto g = gemmPlan(op, ranges, held);
  if (!g) {
    if (hasGemmForm(op))
      return nullptr;
    auto c = convPlan(op, shapes, ranges, held);
    if (!c)
      return nullptr;
    // The two operands bfloat16, anything else float32: src and weights (forward), src and
    // the output's gradient (filter gradient), the output's gradient and weights (data).
    const int a = c->kind == ConvKind::Data ? c->dstIn : c->srcIn;
    const int b = c->kind == ConvKind::Filter ? c->dstIn : c->wIn;
    for (size_t q = 0; q < bf16.size(); ++q)
      if (bf16[q] != (int(q) == a || int(q) == b))
        return nullptr;
    if (a < 0 || b < 0 || a == b)
      return nullptr;
    return convKernel(*c, held, &bf16);
  }
  for (size_t q = 0; q < bf16.size(); ++q) // A and B bfloat16, anything else float32
    if (bf16[q] != (q == g->a || q == g->b))
      return nullptr;
  if (g->a == g->b || bf16.size() <= std::max(g->a, g->b))
    return nullptr;
  return Bf16GemmKernel::make(*g);
}

std::unique_ptr<LibraryKernel> libraryKernel(const InstOp &op, const Shapes &shapes,
                                             const std::vector<Range> &ranges,
                                             const std::vector<Box> &held) {
  if (auto g = gemmPlan(op, ranges, held))
    return std::make_unique<GemmKernel>(std::move(*g));
  if (hasGemmForm(op))
    return nullptr;
  if (auto c = convPlan(op, shapes, ranges, held))
    return convKernel(*c, held);
  if (hasConvForm(op))
    return nullptr;
  if (auto s = scatterPlan(op, ranges, held))
    return std::make_unique<ScatterKernel>(std::move(*s));
  if (hasScatterForm(op))
    return nullptr;
  if (auto a = affineGemmPlan(op, ranges, held))
    return std::make_unique<AffineKernel>(std::move(*a));
  return nullptr;
}

void setLibraryThreads(int threads) { omp_set_num_threads(std::max(1, threads)); }

double libraryProductFlops(int64_t n, bool bf16, int threads, int repeats) {
  omp_set_num_threads(std::max(1, threads));
  const size_t elements = static_cast<size_t>(n * n);
  std::vector<float> a(elements), b(elements), c(elements);
  for (size_t i = 0; i < elements; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    b[i] = static_cast<float>(i % 5) * 0.125f - 0.25f;
  }
  std::function<void()> call;
  dnnl::stream stream(cpuEngine());
  dnnl::matmul product;
  std::vector<uint16_t> a16, b16;
  std::unordered_map<int, dnnl::memory> args;
  if (!bf16) {
    call = [&] {
      dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    };
  } else {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc ab({n, n}, dt::bf16, dnnl::memory::dims{n, 1});
    const dnnl::memory::desc cd({n, n}, dt::f32, dnnl::memory::dims{n, 1});
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ab, ab, cd), cpuEngine());
      if (!nativeBf16(pd))
        return 0;
      product = dnnl::matmul(pd);
    } catch (const dnnl::error &) {
      return 0;
    }
    a16.resize(elements);
    b16.resize(elements);
    toBf16(a.data(), a16.data(), elements);
    toBf16(b.data(), b16.data(), elements);
    args = {{DNNL_ARG_SRC, dnnl::memory(ab, cpuEngine(), a16.data())},
            {DNNL_ARG_WEIGHTS, dnnl::memory(ab, cpuEngine(), b16.data())},
            {DNNL_ARG_DST, dnnl::memory(cd, cpuEngine(), c.data())}};
    call = [&] {
      product.execute(stream, args);
      stream.wait();
    };
  }
  call(); // packs, pages and caches warmed
  double best = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0)
      best = std::max(best, 2.0 * double(n) * double(n) * double(n) / s);
  }
  return best;
}

} // namespace tofu
