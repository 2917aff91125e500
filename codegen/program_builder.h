// Building the workers' programs (codegen/program.h) from a partitioned execution plan and
// its memory plan: what stands between the partition layer and a backend.
#ifndef TOFU_CODEGEN_PROGRAM_BUILDER_H
#define TOFU_CODEGEN_PROGRAM_BUILDER_H

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "codegen/program.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// Builds every worker's program from a plan and its memory plan. Errors name the node and
/// worker of an inconsistent plan (an input neither fetched nor held, a result without a
/// buffer, a misaligned buffer).
llvm::Expected<Program> buildProgram(const Problem &p, const ExecPlan &plan,
                                     const MemoryPlan &memory);

} // namespace tofu

#endif // TOFU_CODEGEN_PROGRAM_BUILDER_H
