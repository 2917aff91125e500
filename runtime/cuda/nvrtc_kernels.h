// Generated CUDA kernels compiled by NVRTC into cubins (no GPU is needed to compile), in
// units of several kernels compiled in parallel, cached on disk under a hash of each unit's
// source, NVRTC's version and the options. The CUDA executor loads the cubins.
#ifndef TOFU_RUNTIME_CUDA_NVRTC_KERNELS_H
#define TOFU_RUNTIME_CUDA_NVRTC_KERNELS_H

#include <string>
#include <vector>

#include "codegen/kernel_gen.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct CubinOptions {
  std::string arch = "sm_90";
  std::string cacheDir; ///< default: the C++ kernels' cache directory
  unsigned jobs = 0;    ///< units compiled at once (default: the machine's cores)
  unsigned kernelsPerUnit = 16;
};

/// One compiled unit: its cubin and the kernels it holds.
struct Cubin {
  std::string path;                 ///< the cubin in the cache
  std::vector<std::string> kernels; ///< kernel names (each an extern "C" __global__)
  bool compiled = false;            ///< compiled now, not found in the cache
};

/// Compiles every kernel of `kernels` (CUDA dialect). An NVRTC failure names the unit and
/// quotes NVRTC's log.
llvm::Expected<std::vector<Cubin>> compileCubins(const std::vector<KernelSource> &kernels,
                                                 const CubinOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_CUDA_NVRTC_KERNELS_H
