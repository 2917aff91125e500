// The MPI backend in the registry: one process per worker, started by mpirun, each on the
// CPU backend; regions move over MPI. Its local engines (the references a run compares
// with) are the CPU backend's, in this process alone.
#include "runtime/backend_registry.h"
#include "runtime/mpi/mpi_backend.h"
#include "runtime/mpi/mpi_process_group.h"

namespace tofu {

namespace {

const BackendRegistration mpi({
    "mpi",
    2,
    /*gpu=*/false,
    /*processes=*/&mpiProcessGroup,
    /*check=*/
    [](const BackendSettings &s) {
      MpiTransport t;
      return s.mpiTransport.empty() || parseMpiTransport(s.mpiTransport, t)
                 ? std::string()
                 : s.names("mpi-transport") + " must be get or sendrecv";
    },
    /*make=*/
    [](Program program, const EngineOptions &options, const BackendSettings &settings,
       ProcessGroup &group, bool local) -> llvm::Expected<std::unique_ptr<Engine>> {
      if (local) {
        const BackendEntry *cpu = findBackend("cpu");
        if (!cpu)
          return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "the MPI backend's local engines need the CPU backend");
        return cpu->make(std::move(program), options, settings, group, true);
      }
      if (llvm::Error e = sameProgramOnEvery(program, group))
        return std::move(e);
      MpiBackendOptions mpi;
      mpi.cpu.compile = options.compile;
      mpi.cpu.threadsPerWorker = options.threadsPerWorker;
      mpi.cpu.library = options.library;
      if (!settings.mpiTransport.empty())
        parseMpiTransport(settings.mpiTransport, mpi.transport);
      return Engine::create(std::move(program), makeMpiBackend(mpi), options);
    },
});

} // namespace
} // namespace tofu
