// Copies an n-d box region of a strided device tensor into a dense device buffer: the
// building block of the MultiFetch step (one kernel launch per fetched region).
#ifndef TOFU_RUNTIME_CUDA_REGION_COPY_H
#define TOFU_RUNTIME_CUDA_REGION_COPY_H

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tofu::cuda {

/// Largest rank the region copy supports.
constexpr int kMaxRegionRank = 8;

/// A box inside a tensor: for each dimension its first index and length, plus the
/// source tensor's element strides.
struct Region {
  int rank = 0;
  int64_t begin[kMaxRegionRank] = {};
  int64_t extent[kMaxRegionRank] = {};
  int64_t srcStride[kMaxRegionRank] = {};
};

/// Number of elements of `r` (the product of its extents; 1 for rank 0).
int64_t regionElements(const Region &r);

/// Copies region `r` of `src` (float elements, strides in `r`) into the dense, row-major
/// buffer `dst` (regionElements(r) floats), on `stream`. Both pointers may live on any
/// device that the current device can access (UVA peer access). Returns the launch status;
/// cudaErrorInvalidValue for a rank outside [0, kMaxRegionRank] or a negative extent.
cudaError_t copyRegion(const float *src, float *dst, const Region &r, cudaStream_t stream);

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_REGION_COPY_H
