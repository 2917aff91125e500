// The CPU backend: each worker's arena is host memory, allocated once; launches run oneDNN
// (runtime/library_kernels.h) where a library call expresses the share, else the generated
// C++ kernel (compiled in one batch), else the interpreter; copies are memcpy runs between
// arenas; workers are threads that meet at a spinning barrier.
#ifndef TOFU_RUNTIME_CPU_BACKEND_H
#define TOFU_RUNTIME_CPU_BACKEND_H

#include <functional>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu_kernels.h"

namespace tofu {

struct CpuBackendOptions {
  KernelCompileOptions compile;
  /// OpenMP threads per worker (default: the machine's cores / k, at least 1).
  int threadsPerWorker = 0;
  /// Shares a oneDNN call expresses run it; off: every share runs its generated kernel.
  bool library = true;
  /// The workers this process runs (empty: all of them, as threads). Only their arenas are
  /// allocated and only their kernels compiled; the backend of one process per worker
  /// (runtime/mpi) runs one and copies the others' regions itself.
  std::vector<unsigned> workers;
  /// Where a worker's arena lives (at least `bytes`, 64-byte aligned), owned by the caller;
  /// default: host memory the backend allocates and frees. The MPI backend allocates each
  /// arena as its process's RMA window.
  std::function<llvm::Expected<float *>(unsigned w, int64_t bytes)> allocateArena;
};

std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_CPU_BACKEND_H
