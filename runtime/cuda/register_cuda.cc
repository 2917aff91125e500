// The CUDA backend in the registry: workers as streams over arenas on one GPU (cuBLAS,
// cuDNN and the NVRTC kernels).
#include "runtime/backend_registry.h"
#include "runtime/cuda/cuda_backend.h"

namespace tofu {
namespace {

const BackendRegistration cuda({
    "cuda",
    1,
    /*gpu=*/true,
    /*processes=*/nullptr,
    /*check=*/nullptr,
    /*make=*/
    [](Program program, const EngineOptions &options, const BackendSettings &settings,
       ProcessGroup &, bool) -> llvm::Expected<std::unique_ptr<Engine>> {
      CudaBackendOptions cuda;
      cuda.library = options.library;
      cuda.tf32 = settings.tf32;
      return Engine::create(std::move(program), makeCudaBackend(cuda), options);
    },
});

} // namespace
} // namespace tofu
