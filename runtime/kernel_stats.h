// What compiling one batch of generated kernels took, whichever compiler a backend uses (the
// host compiler for the CPU, NVRTC for CUDA).
#ifndef TOFU_RUNTIME_KERNEL_STATS_H
#define TOFU_RUNTIME_KERNEL_STATS_H

namespace tofu {

struct KernelCompileStats {
  unsigned kernels = 0;       ///< distinct kernels requested
  unsigned units = 0;         ///< shared objects they live in
  unsigned unitsCompiled = 0; ///< of which compiled now (the others came from the cache)
  double seconds = 0;         ///< wall time of the batch
};

} // namespace tofu

#endif // TOFU_RUNTIME_KERNEL_STATS_H
