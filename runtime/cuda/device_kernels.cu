// Box copies, fills and scatter-adds: one thread per element, grid-stride loops.
#include "runtime/cuda/device_kernels.h"

namespace tofu::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

__global__ void boxCopyKernel(BoxCopyParams p, void *dst, const void *src) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.elements;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    boxCopyElement(p, e, dst, src);
}

template <typename T> __global__ void fillKernel(T *dst, int64_t n, T value) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[e] = value;
}

struct AtomicAdd {
  __device__ void operator()(float *at, float v) const { atomicAdd(at, v); }
};

__global__ void scatterKernel(ScatterParams p, float *out, const float *idx, const float *dy) {
  const int64_t total = p.qCount * p.rCount;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    scatterElement(p, e / p.rCount, e % p.rCount, out, idx, dy, AtomicAdd{});
}

} // namespace

cudaError_t launchBoxCopy(const BoxCopyParams &p, void *dst, const void *src, cudaStream_t stream) {
  if (p.rank < 0 || p.rank > kMaxCopyRank)
    return cudaErrorInvalidValue;
  for (int k = 0; k < p.rank; ++k)
    if (p.extent[k] < 0)
      return cudaErrorInvalidValue;
  if (p.elements <= 0)
    return cudaSuccess;
  boxCopyKernel<<<blocksFor(p.elements), kThreads, 0, stream>>>(p, dst, src);
  return cudaGetLastError();
}

cudaError_t launchFill(float *dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  fillKernel<float><<<blocksFor(n), kThreads, 0, stream>>>(dst, n, value);
  return cudaGetLastError();
}

cudaError_t launchFillBf16(void *dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  fillKernel<tofu_bf16><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<tofu_bf16 *>(dst), n,
                                                               tofu_to_bf16(value));
  return cudaGetLastError();
}

cudaError_t launchScatter(const ScatterParams &p, float *out, const float *idx, const float *dy,
                          cudaStream_t stream) {
  if (p.qRank < 0 || p.qRank > kMaxCopyRank || p.rRank < 0 || p.rRank > kMaxCopyRank)
    return cudaErrorInvalidValue;
  const int64_t total = p.qCount * p.rCount;
  if (total <= 0)
    return cudaSuccess;
  scatterKernel<<<blocksFor(total), kThreads, 0, stream>>>(p, out, idx, dy);
  return cudaGetLastError();
}

} // namespace tofu::cuda
