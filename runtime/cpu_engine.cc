// The engine on the CPU backend: Engine::create's CPU overload, apart from the engine
// itself so that a build without the CPU backend (and oneDNN) links the engine alone.
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"

namespace tofu {

llvm::Expected<std::unique_ptr<Engine>> Engine::create(const Problem &p, const ExecPlan &plan,
                                                       const MemoryPlan &memory,
                                                       const EngineOptions &options) {
  auto program = buildProgram(p, plan, memory);
  if (!program)
    return program.takeError();
  CpuBackendOptions cpu;
  cpu.compile = options.compile;
  cpu.threadsPerWorker = options.threadsPerWorker;
  cpu.library = options.library;
  return create(std::move(*program), makeCpuBackend(cpu), options);
}

} // namespace tofu
