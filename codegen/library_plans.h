// Shares that a library call computes better than a generated loop nest, found
// structurally on an instantiated op's body and described as plain geometry that any
// backend maps onto its library: the CPU backend onto oneDNN (runtime/library_kernels.h),
// the CUDA backend onto cuBLAS and cuDNN (runtime/cuda/library_calls.h). The match serves
// every op of a form, not a list of names:
//   - contractions `Sum(lambda r: A[...] * B[...])`, optionally times a rank-0 input (the
//     matrix-product family: MatMul, Gemm's products, batched products and every gradient
//     of them), whose indices are plain variables: one row-major sgemm with loops around it
//     (independent products outside, the reduction's remaining variables accumulating);
//   - convolutions over 1 to 3 spatial dimensions in NCHW layout: the forward form
//     `Sum(ci, k...: data[n, ci, s*y + d*k - p] * w[co, ci, k])`, the filter gradient
//     `Sum(n, y...: dy[n, co, y] * data[n, ci, s*y + d*k - p])` and the data gradient
//     `Sum(co, k...: select(divisible, dy[n, co, (x + p - d*k) / s] * w[co, ci, k], 0))`: a
//     convolution over the region the share reads (a halo share's window starts inside the
//     tensor and is padded only where the whole tensor is);
//   - scatter-adds `[0 * Z[...] +] Sum(lambda q: select(idx[q] == k, dy[.., q, ..], 0))` (a
//     gather's gradient): each dy row added into the one k it names instead of testing
//     every k;
//   - sums of contractions over one output, plus at most one input read at output
//     variables only (a bias): `Sum(x[n, k] * W[q, k]) + Sum(h[n, j] * R[q, j]) + b[q]`
//     (lstm_gates, and the GRU and RNN cells built on it): the bias broadcast into the
//     output, then each product accumulating into it.
// A share a form cannot express (checked reads it would need, geometry the form cannot
// take) gets no plan; the generated kernel computes it.
#ifndef TOFU_CODEGEN_LIBRARY_PLANS_H
#define TOFU_CODEGEN_LIBRARY_PLANS_H

#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"

namespace tofu {

/// Row-major strides of a buffer holding `box`.
std::vector<int64_t> rowMajorStrides(const Box &box);

/// A loop around a product: its extent and its element strides in A, B and C.
struct GemmLoop {
  int64_t n = 1;
  int64_t sa = 0, sb = 0, sc = 0;
};

/// C[m, n] (+)= alpha * sum_k op(A)[m, k] * op(B)[k, n] on row-major matrices (A is M x K,
/// or K x M read transposed, with leading dimension lda; likewise B), C the share's output:
/// one product per iteration of `outer`, each summing over every iteration of `inner`
/// (the first iteration overwrites C, the others accumulate).
struct GemmPlan {
  bool transA = false, transB = false;
  int64_t M = 1, N = 1, K = 1, lda = 1, ldb = 1, ldc = 1;
  unsigned a = 0, b = 0;      ///< the inputs read as A and B
  int alphaInput = -1;        ///< a rank-0 input scaling the product, or -1
  int64_t offA = 0, offB = 0; ///< the share's first element in the held regions
  std::vector<GemmLoop> outer, inner;

  int64_t outerCount() const;
  int64_t innerCount() const;
};

/// The offsets into A, B and C of iteration `it` of `loops` (the last loop fastest).
struct GemmOffsets {
  int64_t a = 0, b = 0, c = 0;
};
GemmOffsets gemmLoopOffsets(const std::vector<GemmLoop> &loops, int64_t it);
/// How many iterations `loops` make (the product of their extents; 1 for none).
int64_t gemmLoopCount(const std::vector<GemmLoop> &loops);

/// Whether `op` is a contraction some share could run as one product.
bool hasGemmForm(const InstOp &op);
/// The product computing `op`'s share over `ranges` from inputs held in `held`, or none.
std::optional<GemmPlan> gemmPlan(const InstOp &op, const std::vector<Range> &ranges,
                                 const std::vector<Box> &held);

enum class ConvKind { Forward, Filter, Data };

/// A convolution share in the usual library terms: src [n, ci, x...], weights
/// [co, ci, k...], dst [n, co, y...], each an absolute box of its tensor; per spatial
/// dimension the stride, the dilation (1: dense) and the padding before and after the
/// src box. The output (dst, weights or src by kind) is the share, dense; the other two
/// are views of the inputs' held regions (input indices in srcIn, wIn, dstIn; -1 for the
/// output).
struct ConvPlan {
  ConvKind kind = ConvKind::Forward;
  /// No term of the sum reaches the share: it is zero (outputElements floats).
  bool zeros = false;
  int64_t outputElements = 0;
  Box src, weights, dst;
  int srcIn = -1, wIn = -1, dstIn = -1;
  std::vector<int64_t> strides, dilations, padBefore, padAfter;

  size_t spatialDims() const { return strides.size(); }
};

/// A sum of products over one output (AffineGemmPlan's form): the `rest` input, read at
/// output variables only, is written first (broadcast along the output variables it does
/// not use; none: the first product overwrites), then every product accumulates.
struct AffineGemmPlan {
  std::vector<GemmPlan> products;
  int restInput = -1;
  int64_t restOffset = 0;             ///< the share's first element in the rest's region
  std::vector<int64_t> restStrides;   ///< per output variable (0: broadcast along it)
  std::vector<int64_t> outputExtents; ///< per output variable, the share's extent
};

/// Whether `op`'s body is a sum of two or more contractions, or of one and a bias (and not
/// one contraction alone: hasGemmForm's).
bool hasAffineGemmForm(const InstOp &op);
std::optional<AffineGemmPlan> affineGemmPlan(const InstOp &op, const std::vector<Range> &ranges,
                                             const std::vector<Box> &held);

bool hasConvForm(const InstOp &op);
std::optional<ConvPlan> convPlan(const InstOp &op, const Shapes &shapes,
                                 const std::vector<Range> &ranges, const std::vector<Box> &held);

/// A loop of a scatter-add: extent and element strides in idx, dy and the output.
struct ScatterLoop {
  int64_t n = 1, sIdx = 0, sDy = 0, sOut = 0;
};

/// out = [0 * Z] then, for every q of `qs`: k = idx[q]; if kLo <= k < kHi (an integer),
/// out[(k - kLo) * kStride + r] += dy[q + r] for every r of `rest` (the output variables
/// but k). Offsets are of the share's first element in the held regions.
struct ScatterPlan {
  std::vector<ScatterLoop> qs, rest;
  unsigned idxIn = 0, dyIn = 0;
  int zeroIn = -1; ///< the input Z of a `0 * Z` term (NaN where Z is not finite), or -1
  int64_t idxOff = 0, dyOff = 0, zeroOff = 0;
  std::vector<int64_t> zeroStrides, outExtents; ///< the zero term's view, per output dim
  int64_t kLo = 0, kHi = 0, kStride = 0, outElems = 0;
};

bool hasScatterForm(const InstOp &op);
std::optional<ScatterPlan> scatterPlan(const InstOp &op, const std::vector<Range> &ranges,
                                       const std::vector<Box> &held);

} // namespace tofu

#endif // TOFU_CODEGEN_LIBRARY_PLANS_H
