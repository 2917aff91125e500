// The CPU backend: each worker's arena is host memory, allocated once; launches run oneDNN
// (runtime/library_kernels.h) where a library call expresses the share, else the generated
// C++ kernel (compiled in one batch), else the interpreter; copies are memcpy runs between
// arenas; workers are threads that meet at a spinning barrier.
#ifndef TOFU_RUNTIME_CPU_BACKEND_H
#define TOFU_RUNTIME_CPU_BACKEND_H

#include <memory>

#include "runtime/backend.h"

namespace tofu {

struct CpuBackendOptions {
  KernelCompileOptions compile;
  /// OpenMP threads per worker (default: the machine's cores / k, at least 1).
  int threadsPerWorker = 0;
  /// Shares a oneDNN call expresses run it; off: every share runs its generated kernel.
  bool library = true;
};

std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_CPU_BACKEND_H
