// The CUDA backend's own kernels (device_kernels.cu, compiled by nvcc in every build): box
// copies between arenas (with a combine for partial results), fills, and scatter-adds. The
// per-element logic is device_ops.h's, which the CPU tests run on the host.
#ifndef TOFU_RUNTIME_CUDA_DEVICE_KERNELS_H
#define TOFU_RUNTIME_CUDA_DEVICE_KERNELS_H

#include <cstdint>

#include <cuda_runtime_api.h>

#include "runtime/cuda/device_ops.h"

namespace tofu::cuda {

/// Copies (or combines) the box `p` from `src` into `dst` on `stream`; both pointers may
/// be on any device the current one can reach (UVA). cudaErrorInvalidValue for a rank
/// outside [0, kMaxCopyRank] or a negative extent, before launching anything.
cudaError_t launchBoxCopy(const BoxCopyParams &p, void *dst, const void *src, cudaStream_t stream);

/// Sets `n` floats at `dst` to `value`.
cudaError_t launchFill(float *dst, int64_t n, float value, cudaStream_t stream);
/// Sets `n` bfloat16 elements at `dst` to `value` rounded to nearest even.
cudaError_t launchFillBf16(void *dst, int64_t n, float value, cudaStream_t stream);

/// The scatter-adds of `p` (atomic adds into `out`, which holds the zeroed share).
cudaError_t launchScatter(const ScatterParams &p, float *out, const float *idx, const float *dy,
                          cudaStream_t stream);

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_DEVICE_KERNELS_H
