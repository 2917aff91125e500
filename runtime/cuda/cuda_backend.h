// The CUDA backend of the engine (runtime/engine.h): per worker one device arena of the
// memory plan's size (one cudaMalloc; every buffer at its planned offset), one stream, and
// events for the cross-worker order — at each synchronisation a worker records an event on
// its stream and makes its stream wait for every other worker's, so nothing blocks the host
// inside a step. Weights and optimiser state stay in the arenas across steps. Launches run
// cuBLAS (strided-batched sgemm, or GemmEx on bfloat16) for the matrix-product family,
// cuDNN for convolutions and their gradients, the backend's scatter-add for gathers'
// gradients, and the generator's NVRTC-compiled kernels (cubins cached on disk) for
// everything else; cuda::libraryCall decides which, and in which element types. Region
// copies between arenas are device copies over UVA (a plain memcpy where the region is
// contiguous, the box-copy kernel otherwise, combining partial results on the owner).
// Several workers may share one GPU ("virtual workers": k arenas and k streams), so one
// GPU runs every k.
#ifndef TOFU_RUNTIME_CUDA_CUDA_BACKEND_H
#define TOFU_RUNTIME_CUDA_CUDA_BACKEND_H

#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/nvrtc_kernels.h"

namespace tofu {

struct CudaBackendOptions {
  CubinOptions cubins;
  /// Shares cuBLAS / cuDNN / the scatter-add express run them; off: generated kernels only.
  bool library = true;
  /// cuBLAS and cuDNN may use TF32 tensor cores (10-bit mantissa products). Off: float32
  /// FMA math, comparable with the CPU engine and the unpartitioned step.
  bool tf32 = false;
  int device = 0;
  /// The workers this process runs (empty: all). Only their arenas, streams and launches are
  /// made; a backend built on this one moves the regions other processes' workers hold.
  std::vector<unsigned> workers;
  /// Largest cuDNN workspace one convolution may use (the fastest algorithm under it).
  int64_t convWorkspaceLimit = int64_t(256) << 20;
  /// Convolution algorithms by timing each of cuDNN's on the convolution's geometry once
  /// (cudnnFind*, as PyTorch's cudnn.benchmark), remembered per geometry; off, or where
  /// timing fails: cuDNN's heuristics.
  bool timeConvAlgorithms = true;
};

/// Success when device `device` can be used; else the runtime's reason
/// ("cudaErrorInsufficientDriver" on a machine without a GPU driver).
llvm::Error cudaDeviceUsable(int device = 0);

std::unique_ptr<Backend> makeCudaBackend(const CudaBackendOptions &options = {});

/// Worker `w`'s device arena and stream (a cudaStream_t) on a backend made by
/// makeCudaBackend, for backends built on it that move regions themselves (NCCL between
/// processes); nulls on any other backend or for a worker it does not run.
struct CudaWorkerDevice {
  char *arena = nullptr;
  void *stream = nullptr;
};
CudaWorkerDevice cudaWorkerDevice(const Backend &backend, unsigned w);

} // namespace tofu

#endif // TOFU_RUNTIME_CUDA_CUDA_BACKEND_H
