// The CUDA backend's own small kernels, written once for both compilers: each is a function
// of one element (or one scatter row) that the .cu kernels call per thread and the host
// references (device_ops.cc) call in a loop, so the index arithmetic the GPU runs is the one
// the CPU tests check. Plain structs only: they are kernel parameters.
#ifndef TOFU_RUNTIME_CUDA_DEVICE_OPS_H
#define TOFU_RUNTIME_CUDA_DEVICE_OPS_H

#include <cstdint>

#include "codegen/kernel_prelude.h" // tofu_combine

#ifdef __CUDACC__
#define TOFU_HD __host__ __device__ __forceinline__
#else
#define TOFU_HD inline
#endif

namespace tofu::cuda {

/// Largest rank of a copy after merging dimensions (tensors have at most 8).
constexpr int kMaxCopyRank = 8;
/// How a copied element meets the destination: overwrite, or one of the reducers.
enum CopyCombine : int32_t { kOverwrite = -1, kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

/// A box copied between two strided buffers of float32 or bfloat16 elements: per dimension
/// (the last fastest) its extent and both element strides; both base offsets in elements.
/// A bfloat16 source is widened exactly; a bfloat16 destination is rounded to nearest even
/// once, after the combine (which reads its value widened), as the CPU backend's copyBox.
struct BoxCopyParams {
  int32_t rank = 0;
  int32_t combine = kOverwrite;
  int32_t srcBf16 = 0, dstBf16 = 0; ///< the buffers' element types: 1 for bfloat16
  int64_t elements = 1;
  int64_t srcOffset = 0, dstOffset = 0;
  int64_t extent[kMaxCopyRank] = {};
  int64_t srcStride[kMaxCopyRank] = {};
  int64_t dstStride[kMaxCopyRank] = {};
};

/// `a` combined with `b` as the copy says: the kernels' reducer combine (CopyCombine's
/// reducers have tofu_combine's codes), NaN-propagating through Max and Min.
TOFU_HD float combineValues(int32_t how, float a, float b) {
  return how == kOverwrite ? b : tofu_combine(how, a, b);
}

/// Element `e` (row-major over the extents) of the copy.
TOFU_HD void boxCopyElement(const BoxCopyParams &p, int64_t e, void *dst, const void *src) {
  int64_t so = p.srcOffset, d = p.dstOffset;
  for (int32_t k = p.rank - 1; k >= 0; --k) {
    const int64_t c = e % p.extent[k];
    e /= p.extent[k];
    so += c * p.srcStride[k];
    d += c * p.dstStride[k];
  }
  if (!p.srcBf16 && !p.dstBf16) { // float32 both sides: the common case
    float *out = static_cast<float *>(dst);
    const float v = static_cast<const float *>(src)[so];
    out[d] = p.combine == kOverwrite ? v : combineValues(p.combine, out[d], v);
    return;
  }
  if (p.srcBf16 && p.dstBf16 && p.combine == kOverwrite) { // the bits, NaN payloads included
    static_cast<tofu_bf16 *>(dst)[d] = static_cast<const tofu_bf16 *>(src)[so];
    return;
  }
  const float v = p.srcBf16 ? tofu_from_bf16(static_cast<const tofu_bf16 *>(src)[so])
                            : static_cast<const float *>(src)[so];
  if (p.dstBf16) {
    tofu_bf16 *out = static_cast<tofu_bf16 *>(dst);
    out[d] = tofu_to_bf16(
        p.combine == kOverwrite ? v : combineValues(p.combine, tofu_from_bf16(out[d]), v));
  } else {
    float *out = static_cast<float *>(dst);
    out[d] = p.combine == kOverwrite ? v : combineValues(p.combine, out[d], v);
  }
}

/// A gather's gradient as scatter-adds: for each q of the index tensor, the dy row it names
/// is added into output row k = idx[q] - kLo when kLo <= idx[q] < kHi (an integer). Loops
/// over q and over the rest of the output (r) are decoded from flat indices.
struct ScatterParams {
  int32_t qRank = 0, rRank = 0;
  int64_t qCount = 1, rCount = 1;
  int64_t qExtent[kMaxCopyRank] = {}, qIdxStride[kMaxCopyRank] = {}, qDyStride[kMaxCopyRank] = {};
  int64_t rExtent[kMaxCopyRank] = {}, rDyStride[kMaxCopyRank] = {}, rOutStride[kMaxCopyRank] = {};
  int64_t idxOffset = 0, dyOffset = 0;
  int64_t kLo = 0, kHi = 0, kStride = 0;
};

/// Element (q, r) of the scatter: adds through `add` (an atomic add on the GPU).
template <typename Add>
TOFU_HD void scatterElement(const ScatterParams &p, int64_t q, int64_t r, float *out,
                            const float *idx, const float *dy, Add add) {
  int64_t io = p.idxOffset, qo = p.dyOffset, rq = q;
  for (int32_t k = p.qRank - 1; k >= 0; --k) {
    const int64_t c = rq % p.qExtent[k];
    rq /= p.qExtent[k];
    io += c * p.qIdxStride[k];
    qo += c * p.qDyStride[k];
  }
  const float v = idx[io];
  if (!(v >= static_cast<float>(p.kLo) && v < static_cast<float>(p.kHi)) ||
      v != static_cast<float>(static_cast<int64_t>(v)))
    return; // names no k of this share (NaN included)
  int64_t oo = (static_cast<int64_t>(v) - p.kLo) * p.kStride, rr = r;
  for (int32_t k = p.rRank - 1; k >= 0; --k) {
    const int64_t c = rr % p.rExtent[k];
    rr /= p.rExtent[k];
    oo += c * p.rOutStride[k];
    qo += c * p.rDyStride[k];
  }
  add(out + oo, dy[qo]);
}

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_DEVICE_OPS_H
