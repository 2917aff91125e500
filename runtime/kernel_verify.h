// Strategies checked on compiled kernels: the verifier of analysis/verify.h with every
// worker's share computed by the op's generated C++ kernel instead of the interpreter
// (`tdlc --verify --kernels compiled`, and the test over the whole operator library).
#ifndef TOFU_RUNTIME_KERNEL_VERIFY_H
#define TOFU_RUNTIME_KERNEL_VERIFY_H

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analysis/verify.h"
#include "runtime/cpu_kernels.h"

namespace tofu {

/// The kernels (C++, or CUDA) that verifying `file`'s ops (verifyFile) will call,
/// instantiated as the verifier instantiates them. Ops the generator cannot express are
/// listed in `notCompiled` ("op: reason"); they are verified on the interpreter.
std::vector<KernelSource> verificationKernels(const ir::Module &module, const std::string &file,
                                              std::vector<std::string> *notCompiled,
                                              KernelDialect dialect = KernelDialect::Cpp);

/// A share evaluator running each op's kernel from `lib` (compiled there first if missing);
/// ops without a kernel go to the interpreter.
ShareEvaluator compiledEvaluator(CpuKernelLibrary &lib, const KernelCompileOptions &options,
                                 int threads = 1);

/// Per op name, how many shares a library kernel computed and how many it could not.
using LibraryUse = std::map<std::string, std::pair<unsigned, unsigned>>;

/// A share evaluator that runs the library kernel (runtime/library_kernels.h) of every
/// share that has one, and `fallback` (unset: the interpreter) for the others; ops with a
/// library form are counted in `use`.
ShareEvaluator libraryEvaluator(ShareEvaluator fallback, LibraryUse *use, int threads = 1);

/// The largest relative difference a float32 kernel may show against the double-precision
/// interpreter in verification: inputs and every intermediate rounded to float32 (relative
/// error 6e-8 each), over expressions of tens of operations and sums of at most a few
/// hundred terms on the verifier's small shapes, with cancellation in variances. The
/// largest difference measured over the library is 2.4e-6; 1e-4 leaves a margin of 40.
inline constexpr double kFloat32VerifyTolerance = 1e-4;

} // namespace tofu

#endif // TOFU_RUNTIME_KERNEL_VERIFY_H
