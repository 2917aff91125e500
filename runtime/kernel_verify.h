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
/// instantiated as the verifier instantiates them, of the types verificationTypes gives for
/// `storage` (in bfloat16, a reduction's partial-result variant too). Ops the generator cannot
/// express are listed in `notCompiled` ("op: reason"); they are verified on the interpreter.
std::vector<KernelSource> verificationKernels(const ir::Module &module, const std::string &file,
                                              std::vector<std::string> *notCompiled,
                                              KernelDialect dialect = KernelDialect::Cpp,
                                              loops::Element storage = loops::Element::F32);

/// The element types a share's kernel is generated for when verifying in `storage`: every
/// input bfloat16 but the indices (InputValueRule::integers: the engines hold integers as
/// float32), the output too unless the share is a partial result (a top-level reduction
/// variable's range is a slice), which stays float32 until combined, as in the engines.
/// All float32 for F32.
KernelTypes verificationTypes(const InstOp &op, const Shapes &shapes,
                              const std::vector<Range> &ranges, loops::Element storage);

/// A share evaluator running each op's kernel from `lib` (compiled there first if missing),
/// its buffers of the types verificationTypes gives for `storage`; ops without a kernel go
/// to the interpreter.
ShareEvaluator compiledEvaluator(CpuKernelLibrary &lib, const KernelCompileOptions &options,
                                 int threads = 1, loops::Element storage = loops::Element::F32);

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

/// The same for a kernel that loads bfloat16 inputs and rounds its output to bfloat16, on
/// inputs bfloat16 holds exactly (VerifyOptions::quantize): the loads are exact, the
/// arithmetic is float32's (kFloat32VerifyTolerance), and the one rounding of each output
/// value adds at most half a bfloat16 quantum: 8 significant bits put neighbours 2^-7 of
/// the value apart, so 2^-8 of it (the measure divides by max(1, |b|), so 2^-8 bounds it).
/// Partial results stay float32.
inline constexpr double kBfloat16VerifyTolerance = 1.0 / 256 + kFloat32VerifyTolerance;

} // namespace tofu

#endif // TOFU_RUNTIME_KERNEL_VERIFY_H
