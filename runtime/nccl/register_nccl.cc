// The NCCL backend in the registry: one process per worker and GPU under mpirun, regions
// over NCCL, CUDA kernels. Its local engines are the CUDA backend's on this process's GPU.
#include "runtime/backend_registry.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/mpi/mpi_process_group.h"
#include "runtime/nccl/nccl_backend.h"

namespace tofu {

namespace {

const BackendRegistration nccl({
    "nccl",
    3,
    /*gpu=*/true,
    /*processes=*/&mpiProcessGroup,
    /*check=*/
    [](const BackendSettings &s) {
      return s.mpiTransport.empty() ? std::string()
                                    : s.names("mpi-transport") + " is for " + s.names("backend") +
                                          " mpi (nccl moves regions with NCCL)";
    },
    /*make=*/
    [](Program program, const EngineOptions &options, const BackendSettings &settings,
       ProcessGroup &group, bool local) -> llvm::Expected<std::unique_ptr<Engine>> {
      if (local) { // this process's GPU
        CudaBackendOptions cuda;
        cuda.device = ncclProcessDevice();
        cuda.library = options.library;
        cuda.tf32 = settings.tf32;
        return Engine::create(std::move(program), makeCudaBackend(cuda), options);
      }
      if (llvm::Error e = sameProgramOnEvery(program, group))
        return std::move(e);
      NcclBackendOptions nccl;
      nccl.cuda.library = options.library;
      nccl.cuda.tf32 = settings.tf32;
      return Engine::create(std::move(program), makeNcclBackend(nccl), options);
    },
});

} // namespace
} // namespace tofu
