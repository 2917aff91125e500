// The engine on the CPU backend for a partitioned plan, in one call: the workers' programs
// built (codegen/program_builder.h), the kernels compiled (one batch), the arenas allocated.
// Apart from the engine itself so that a build without the CPU backend (and oneDNN) links
// the engine alone.
#ifndef TOFU_RUNTIME_CPU_ENGINE_H
#define TOFU_RUNTIME_CPU_ENGINE_H

#include <memory>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "runtime/engine.h"

namespace tofu {

llvm::Expected<std::unique_ptr<Engine>> makeCpuEngine(const Problem &p, const ExecPlan &plan,
                                                      const MemoryPlan &memory,
                                                      const EngineOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_CPU_ENGINE_H
