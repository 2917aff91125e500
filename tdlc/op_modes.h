// tdlc's modes that act on one checked op at a time: --eval (the op and its gradients on
// given arrays), --kernel (its schedule and generated kernel) and --verify (its strategies
// by execution, its gradients against finite differences). tdlc.cc picks the ops and the
// mode; these print their results and take their settings as arguments.
#ifndef TOFU_TDLC_OP_MODES_H
#define TOFU_TDLC_OP_MODES_H

#include <string>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "analysis/verify.h"
#include "codegen/loop_ir.h"
#include "runtime/cpu_kernels.h"
#include "llvm/Support/Error.h"

namespace tdlc {

/// --eval: `op` and its grad clauses on the arrays `inputs` names (NAME=FILE,...), with
/// the output's gradient from `dout` (none where empty); every result written as .npy into
/// `outDir`. Returns the exit status (2: a bad --input).
int evaluateOp(const tofu::ir::OpDef &op, tofu::Instantiation given, const std::string &inputs,
               const std::string &dout, const std::string &outDir);

/// --kernel: the schedule and the generated kernel of `op` instantiated as `mine`, in CUDA
/// C++ (`cuda`) or C++, with buffers of `storage`. An error: the op does not instantiate.
llvm::Error printKernel(const tofu::ir::OpDef &op, const tofu::Instantiation &mine, bool cuda,
                        tofu::loops::Element storage);

/// The checks --verify counted over every op.
struct VerifyCounts {
  unsigned passed = 0, failed = 0;
};

/// --verify of one op: every strategy of `table` by execution (on `kernels` where given,
/// with buffers of `storage`; else on the interpreter), then every gradient against finite
/// differences. `example`: the op's example shapes, if any; `defaults`: what was chosen for
/// verification, as printed. False where a check failed.
bool verifyOp(const tofu::ir::OpDef &op, const tofu::StrategyTable &table,
              const tofu::Example *example, const std::string &defaults, unsigned seed,
              tofu::CpuKernelLibrary *kernels, tofu::loops::Element storage, VerifyCounts &counts);

} // namespace tdlc

#endif // TOFU_TDLC_OP_MODES_H
