// The CPU backend's engine in one call (cpu_engine.h).
#include "runtime/cpu_engine.h"

#include "codegen/program_builder.h"
#include "runtime/cpu_backend.h"

namespace tofu {

llvm::Expected<std::unique_ptr<Engine>> makeCpuEngine(const Problem &p, const ExecPlan &plan,
                                                      const MemoryPlan &memory,
                                                      const EngineOptions &options) {
  auto program = buildProgram(p, plan, memory);
  if (!program)
    return program.takeError();
  CpuBackendOptions cpu;
  cpu.compile = options.compile;
  cpu.threadsPerWorker = options.threadsPerWorker;
  cpu.library = options.library;
  return Engine::create(std::move(*program), makeCpuBackend(cpu), options);
}

} // namespace tofu
