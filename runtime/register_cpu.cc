// The CPU backend in the registry: workers as threads over host arenas (oneDNN and the
// generated C++ kernels).
#include "runtime/backend_registry.h"
#include "runtime/cpu_backend.h"

namespace tofu {
namespace {

const BackendRegistration cpu({
    "cpu",
    0,
    /*gpu=*/false,
    /*processes=*/nullptr,
    /*check=*/nullptr,
    /*make=*/
    [](Program program, const EngineOptions &options, const BackendSettings &, ProcessGroup &,
       bool) -> llvm::Expected<std::unique_ptr<Engine>> {
      CpuBackendOptions cpu;
      cpu.compile = options.compile;
      cpu.threadsPerWorker = options.threadsPerWorker;
      cpu.library = options.library;
      return Engine::create(std::move(program), makeCpuBackend(cpu), options);
    },
});

} // namespace
} // namespace tofu
