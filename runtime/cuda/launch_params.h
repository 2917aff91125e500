// Host-side preparation of what the CUDA backend enqueues: region copies as merged strided
// boxes, scatter-adds, and the argument block of a generated kernel, each with a host
// runner that applies the same parameters to host buffers (the CPU tests' reference; no GPU
// needed).
#ifndef TOFU_RUNTIME_CUDA_LAUNCH_PARAMS_H
#define TOFU_RUNTIME_CUDA_LAUNCH_PARAMS_H

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/ir.h"
#include "analysis/strategy.h"
#include "codegen/kernel_gen.h"
#include "codegen/library_plans.h"
#include "runtime/cuda/device_ops.h"

namespace tofu::cuda {

/// How a copy combines: kOverwrite without a reducer.
int32_t copyCombine(const ir::Reducer *reducer);

/// The copy of `box` (absolute coordinates) from a row-major buffer holding `srcHeld`
/// whose first element is at `srcOffset` into one holding `dstHeld` at `dstOffset`
/// (offsets in elements). Unit dimensions are dropped and dimensions contiguous in both
/// buffers merged, so a contiguous copy has rank 1 (or 0 for one element). The buffers'
/// element types convert on the way (BoxCopyParams).
BoxCopyParams boxCopyParams(const Box &dstHeld, int64_t dstOffset, const Box &srcHeld,
                            int64_t srcOffset, const Box &box, int32_t combine,
                            loops::Element dstElement = loops::Element::F32,
                            loops::Element srcElement = loops::Element::F32);

/// A rank-1 (or 0) overwrite with unit strides between buffers of one element type: a
/// plain memcpy of `elements` elements (copyElementBytes each).
bool isContiguousCopy(const BoxCopyParams &p);
/// The bytes of one element of the copy's source (a contiguous copy's size per element).
int64_t copyElementBytes(const BoxCopyParams &p);

void runBoxCopyOnHost(const BoxCopyParams &p, void *dst, const void *src);

/// The scatter-adds of `plan` and, for a `0 * Z` term, the copy that multiplies the zeroed
/// output by Z's view (kProd over zeros: 0, or NaN where Z is not finite).
ScatterParams scatterParams(const ScatterPlan &plan);
BoxCopyParams scatterZeroTerm(const ScatterPlan &plan);

/// The whole scatter share on host buffers (zero, the 0 * Z term, the adds).
void runScatterOnHost(const ScatterPlan &plan, const float *const *in, float *out);

/// The argument block a generated CUDA kernel takes by value (codegen/kernel_gen.cc's
/// `<name>_args`: the integer arguments, the input pointers, the output pointer, `fast`,
/// `threads`, the scratch space of the multi-launch variant's temporaries and the parts a
/// temporary's pass splits its reduction into), laid out as the device compiler lays out
/// that struct.
std::vector<unsigned char> kernelArgBlock(const std::vector<int64_t> &ints,
                                          const std::vector<const float *> &inputs, float *out,
                                          bool fast, float *scratch = nullptr, int64_t parts = 1);

/// How many parts a temporary's pass splits each value's reduction into (its first
/// variable's range cut evenly; KernelSource::passes): enough blocks to fill a GPU
/// (about 1024 in all) where the temporary has few values, each part still some 2048
/// terms long; 1 where the values alone fill the GPU.
int64_t temporaryParts(int64_t values, int64_t firstExtent, int64_t terms);

/// The terms each value of temporary `t` combines over `ranges`, each term's own nested
/// reductions counted in: what temporaryParts weighs.
int64_t temporaryTerms(const CudaTemporaryPass &t, const std::vector<Range> &ranges);

/// The parts temporary `t`'s pass takes over `ranges` (temporaryParts).
int64_t temporaryParts(const CudaTemporaryPass &t, const std::vector<Range> &ranges);

/// Threads per block of every generated-kernel launch, and the most blocks a grid-stride
/// launch is given.
inline constexpr int kKernelThreads = 256;
inline constexpr int64_t kKernelMaxBlocks = 4096;

/// How the CUDA backend runs a generated kernel's share (decided on the host, so that the
/// kernel report shows what the backend does without a device): the multi-launch variant
/// wherever the kernel has one; then a thread per output, or the block variant where each
/// output sums many terms and there are too few outputs to fill the GPU with one thread
/// each, or the sums are very long, or many outputs share them (a softmax's row).
struct GeneratedLaunch {
  bool multi = false;    ///< the multi-launch variant (KernelSource::passes)
  bool perBlock = false; ///< the main nest's block variant
  int64_t outputs = 1;   ///< the share's output elements
  int64_t groups = 1;    ///< the block variant's values (of its blockOutputVars)
  int64_t reduced = 0;   ///< terms the block variant's reductions sum per value
  unsigned blocks = 1;   ///< the main launch's grid
  std::string entry;     ///< the main launch's entry point
  struct Pass {
    const CudaTemporaryPass *temporary = nullptr;
    int64_t values = 1, terms = 1, parts = 1;
    unsigned blocks = 1, combineBlocks = 1;
  };
  std::vector<Pass> passes; ///< before the main launch, in order

  /// "generated[, a block per ...][ after N temporaries (...)]": the profile's name.
  std::string describe() const;
};
GeneratedLaunch planGeneratedLaunch(const KernelSource &k, const InstOp &op,
                                    const std::vector<Range> &ranges);

/// The scratch bytes the multi-launch variant needs: its temporaries (KernelSource::
/// passes, sized over `ranges`), then the largest of their partial results (values times
/// parts).
int64_t cudaPassesScratchBytes(const std::vector<CudaTemporaryPass> &passes,
                               const std::vector<Range> &ranges);

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_LAUNCH_PARAMS_H
