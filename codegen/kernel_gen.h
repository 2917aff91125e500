// The kernel generator: an instantiated op lowered to one loop nest per share, printed as
// C++ (OpenMP, compiled by the host compiler) or CUDA C++ (compiled by NVRTC). A kernel
// computes the share of the op whose variables range over given ranges, reading each input
// from a buffer that holds one region of it (at a known origin), and writes the share — or,
// when a top-level reduction variable's range is a slice, the partial result. Ranges,
// shapes, origins and extents are arguments: one kernel serves every share and every worker
// of an instantiation.
#ifndef TOFU_CODEGEN_KERNEL_GEN_H
#define TOFU_CODEGEN_KERNEL_GEN_H

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "codegen/kernel_prelude.h" // TofuKernelArgs: what a C++ kernel is called with
#include "codegen/loop_ir.h"
#include "llvm/Support/Error.h"

namespace tofu {

enum class KernelDialect { Cpp, Cuda };

/// CUDA: a temporary of the multi-launch variant (KernelSource::passes): the reduction it
/// holds, the variables it is indexed by (its size is the product of their ranges), the
/// reduction's variables (the first is the one whose range a pass splits into parts), and
/// those of the reductions computed inside its loops (a log-sum-exp's, per row of a loss
/// over rows): a term costs those.
struct CudaTemporaryPass {
  unsigned id = 0;
  std::vector<unsigned> depends;
  std::vector<unsigned> vars;
  std::vector<std::vector<unsigned>> nested;
};

/// A generated kernel. `name` is derived from a hash of the op's lowering, so equal
/// instantiations (of any op name) share one kernel.
struct KernelSource {
  std::string name;
  std::string code; ///< the definitions (the dialect's prelude comes first in a unit)
  /// CUDA: the variables of each reduction computed per output element (outside any other
  /// reduction's loop). When there are any, `code` also defines `<name>_blk`, taking the
  /// same arguments, in which one block of threads computes one output value at a time,
  /// splitting each such reduction across its threads (then a shared-memory tree): the
  /// variant for long reductions over few outputs (batch-norm statistics, a softmax over a
  /// vocabulary, a bias gradient over the batch), where one thread per output would run
  /// the whole sum serially. Its block size must be a multiple of 32.
  std::vector<std::vector<unsigned>> blockReductions;
  /// CUDA, with blockReductions: the output variables the block variant gives one block per
  /// value (those its reductions depend on: a batch norm's channel, a softmax's row); the
  /// block's threads share the elements of the other output variables, the reductions
  /// computed once. Empty: one block computes the reductions, then every output.
  std::vector<unsigned> blockOutputVars;
  /// C++: per temporary of the schedule (codegen/schedule.h), the variables it is indexed
  /// by; its size is the product of their ranges (kernelScratchBytes).
  std::vector<std::vector<unsigned>> temporaries;
  /// CUDA: the multi-launch variant, where the op has reductions one launch would compute
  /// more than once per value, or that depend on no output variable (ScheduleTarget::
  /// CudaPasses: a batch norm's statistics, a layer norm's per-token statistics in its
  /// scale gradient, a loss over the batch). Empty when it has none. Per temporary, in
  /// order: `temporaryPassName(name, id)` fills it (with `parts` > 1, partial results that
  /// `temporaryCombineName(name, id)` then combines); then `passesKernelName(name)` (and
  /// its block variant, where passesBlockReductions is not empty) computes the output.
  /// Temporaries, one after another, then the partial results live in `scratch`
  /// (cudaPassesScratchBytes).
  std::vector<CudaTemporaryPass> passes;
  std::vector<std::vector<unsigned>> passesBlockReductions;
  std::vector<unsigned> passesBlockOutputVars;
};

/// The element types of a kernel's buffers in memory: per input (float32 past the end of
/// `inputs`) and of its output. A kernel computes in float32 whatever they are: it widens
/// what it loads and rounds what it stores. Accumulators and temporaries are float32, so
/// a kernel whose output is bfloat16 rounds each output value once.
struct KernelTypes {
  std::vector<loops::Element> inputs;
  loops::Element output = loops::Element::F32;
  loops::Element input(size_t i) const {
    return i < inputs.size() ? inputs[i] : loops::Element::F32;
  }
  bool allF32() const;
  /// "bf16,f32->bf16": the inputs' types and the output's.
  std::string describe(size_t inputCount) const;
};

/// Lowers and prints `op`, its buffers of `types`. Fails, naming the op and the construct,
/// for what the generator cannot express (an opaque call): such ops run on the interpreter.
llvm::Expected<KernelSource> generateKernel(const InstOp &op, KernelDialect dialect,
                                            const KernelTypes &types = {});

/// The loop IR of `op`'s kernel in `dialect` (what generateKernel prints), every entry point
/// named with the prefix kKernelNameToken where the kernel's name goes. Fails as
/// generateKernel.
llvm::Expected<loops::Kernel> lowerKernel(const InstOp &op, KernelDialect dialect,
                                          const KernelTypes &types = {});
/// Where a kernel's name stands in lowerKernel's function names.
extern const char *const kKernelNameToken;

/// The scratch space (bytes) a C++ kernel call over `ranges` needs for its temporaries.
int64_t kernelScratchBytes(const KernelSource &k, const std::vector<Range> &ranges);
/// The same from a kernel's KernelSource::temporaries alone.
int64_t kernelScratchBytes(const std::vector<std::vector<unsigned>> &temporaries,
                           const std::vector<Range> &ranges);
/// The same for the C++ kernel of `op` (scheduling it again).
int64_t kernelScratchBytes(const InstOp &op, const std::vector<Range> &ranges);

/// The name of a CUDA kernel's block-per-output variant (KernelSource::blockReductions).
std::string blockKernelName(const std::string &kernel);
/// The names of the multi-launch variant's entry points (KernelSource::passes): its main
/// nest, and per temporary its pass and its combine.
std::string passesKernelName(const std::string &kernel);
std::string temporaryPassName(const std::string &kernel, unsigned id);
std::string temporaryCombineName(const std::string &kernel, unsigned id);
/// Every entry point a CUDA kernel's code defines.
std::vector<std::string> cudaEntryPoints(const KernelSource &k);

/// The helpers every kernel of a dialect uses (codegen/kernel_prelude.h's text); comes once
/// at the top of a translation unit.
const std::string &kernelPrelude(KernelDialect dialect);

/// The integer arguments of one call (TofuKernelArgs::ints) for a share over `ranges`
/// whose inputs are given as `regions` (absolute boxes of the inputs' tensors).
std::vector<int64_t> kernelInts(const InstOp &op, const Shapes &shapes,
                                const std::vector<Range> &ranges, const std::vector<Box> &regions);

/// True when every read with affine coordinates stays inside its input's region (and so
/// inside the tensor) over `ranges` — for a coordinate that may leave the tensor (a window's
/// or a padded one, which the unchecked variant tests against the tensor's extent), the part
/// inside the tensor — and every variable and extent fits in 32 bits: the kernel may then
/// load without the region checks (and convert indices to float as 32-bit integers).
bool readsInsideRegions(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                        const std::vector<Box> &regions);

/// 64-bit FNV-1a: the stable hash kernel names and the kernel cache are keyed by.
uint64_t stableHash(const std::string &s, uint64_t seed = 1469598103934665603ull);

} // namespace tofu

#endif // TOFU_CODEGEN_KERNEL_GEN_H
