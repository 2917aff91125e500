// The region-copy kernel: one thread per destination element, grid-stride loop.
#include "runtime/cuda/region_copy.h"

namespace tofu::cuda {
namespace {

__global__ void copyRegionKernel(const float *__restrict__ src, float *__restrict__ dst,
                                 Region r, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Decompose the dense destination index (row-major over the extents) into the source
    // offset.
    int64_t rest = i, offset = 0;
    for (int d = r.rank - 1; d >= 0; --d) {
      int64_t coord = rest % r.extent[d];
      rest /= r.extent[d];
      offset += (r.begin[d] + coord) * r.srcStride[d];
    }
    dst[i] = src[offset];
  }
}

} // namespace

int64_t regionElements(const Region &r) {
  int64_t n = 1;
  for (int d = 0; d < r.rank; ++d)
    n *= r.extent[d];
  return n;
}

cudaError_t copyRegion(const float *src, float *dst, const Region &r, cudaStream_t stream) {
  if (r.rank < 0 || r.rank > kMaxRegionRank)
    return cudaErrorInvalidValue;
  for (int d = 0; d < r.rank; ++d)
    if (r.extent[d] < 0 || r.begin[d] < 0)
      return cudaErrorInvalidValue;
  int64_t total = regionElements(r);
  if (total == 0)
    return cudaSuccess;
  constexpr int kThreads = 256;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 65535)
    blocks = 65535;
  copyRegionKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(src, dst, r, total);
  return cudaGetLastError();
}

} // namespace tofu::cuda
