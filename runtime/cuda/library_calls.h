// The library plans of codegen/library_plans.h as cuBLAS and cuDNN calls: every size,
// leading dimension, stride, offset and padding fixed on the host, so the mapping is
// unit-tested without a GPU (reference implementations with the libraries' semantics run
// the descriptors on host buffers). The CUDA backend makes the calls (cuda_backend.cc).
#ifndef TOFU_RUNTIME_CUDA_LIBRARY_CALLS_H
#define TOFU_RUNTIME_CUDA_LIBRARY_CALLS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/kernel_gen.h"
#include "codegen/library_plans.h"
#include "codegen/loop_ir.h"
#include "runtime/cuda/device_ops.h"

namespace tofu::cuda {

/// One cublasSgemmStridedBatched call per iteration of `loops` (and of `inner`, which
/// accumulate: beta 0 on the first, 1 after), in cuBLAS's column-major terms:
/// C' = alpha * op(X) op(Y), X m x k, Y k x n, C' m x n with leading dimension ldc. A
/// row-major product C = A B is the column-major C^T = B^T A^T, so X is the plan's B and
/// Y its A, m = N and n = M.
struct CublasGemm {
  bool transX = false, transY = false;
  int64_t m = 1, n = 1, k = 1, ldx = 1, ldy = 1, ldc = 1;
  unsigned x = 0, y = 0; ///< the inputs read as X and Y
  int64_t offX = 0, offY = 0;
  int alphaInput = -1;
  int64_t batch = 1, strideX = 0, strideY = 0, strideC = 0;
  std::vector<GemmLoop> loops; ///< outer loops beside the batch (sa: X's stride, sb: Y's)
  std::vector<GemmLoop> inner; ///< accumulating loops (sa: X's stride, sb: Y's)
  bool accumulate = false;     ///< every call adds into C (a term of a sum of products)

  int64_t calls() const;
  std::string describe() const;

  /// Calls fn(offX, offY, offC, first) for each strided-batched call in order: the element
  /// offsets of its X, Y and C from the inputs' (offX, offY included) and the output's
  /// starts, and whether it overwrites C (beta 0) rather than accumulates. Stops at the
  /// first call for which fn returns false.
  template <typename Fn> void forEachCall(Fn fn) const {
    const int64_t innerCount = gemmLoopCount(inner);
    for (int64_t it = 0, n = gemmLoopCount(loops); it < n; ++it) {
      const GemmOffsets o = gemmLoopOffsets(loops, it);
      for (int64_t r = 0; r < innerCount; ++r) {
        const GemmOffsets q = gemmLoopOffsets(inner, r);
        if (!fn(offX + o.a + q.a, offY + o.b + q.b, o.c, r == 0 && !accumulate))
          return;
      }
    }
  }
};

CublasGemm cublasGemm(const GemmPlan &plan);

/// A sum of products (AffineGemmPlan) as library calls: the bias broadcast into the output
/// by the box-copy kernel (`hasRest`), then each product, the first overwriting where there
/// is no bias and every other accumulating.
struct CublasAffine {
  std::vector<CublasGemm> products;
  bool hasRest = false;
  unsigned restInput = 0;
  BoxCopyParams rest;

  std::string describe() const;
};
/// None where the output has more dimensions than a box copy takes.
std::optional<CublasAffine> cublasAffine(const AffineGemmPlan &plan);
/// The calls on host buffers, with the libraries' semantics.
void referenceAffine(const CublasAffine &a, const float *const *in, float *out);

/// The element types of a product's library calls (one CublasGemm, or an affine plan's
/// products beside its bias). cuBLAS's GemmEx at CUBLAS_COMPUTE_32F accumulates in float32
/// and takes X and Y both float32, or both bfloat16 (on tensor cores), writing C in float32,
/// or in bfloat16 when X and Y are. A bfloat16 output that one call cannot write with one
/// rounding per element (float32 operands, several calls, or calls adding into C) is
/// computed into float32 scratch space and rounded once into the output (`staged`), as
/// the generated kernel rounds it.
struct GemmElements {
  bool bf16Operands = false; ///< X and Y are bfloat16 (CUDA_R_16BF)
  bool bf16Output = false;
  bool staged = false;
  /// "bf16 x bf16 -> f32", with " (staged)".
  std::string describe() const;
};
/// None, with the reason in `why`, where cuBLAS has no call for the buffers' `types`:
/// operands of different types, or a scaling input (alphaInput) that is not float32.
std::optional<GemmElements> gemmElements(const std::vector<const CublasGemm *> &products,
                                         const KernelTypes &types, std::string *why = nullptr);

/// Runs `g` on host buffers the way cuBLAS would (column-major, float accumulation in
/// double): the reference the mapping is tested against.
void referenceGemm(const CublasGemm &g, const float *const *in, float *out);

/// A view of a tensor for cuDNN: dims and element strides (at least 4-D: a 1-D
/// convolution gets a unit spatial dimension), its first element's offset in its buffer,
/// and which input holds it (-1: the share's output).
struct TensorView {
  std::vector<int> dims, strides;
  int64_t offset = 0;
  int input = -1;
  bool dense() const;
  int64_t elements() const;
};

/// A cuDNN convolution (cross-correlation, NCHW) computing one share: forward
/// (y from x and w), data gradient (x from y and w) or filter gradient (w from x and y).
/// cuDNN takes filters dense: a weights view that is not is gathered into scratch space
/// first (`stageWeights`, `weightsBox` inside the held box `weightsHeld`).
struct CudnnConv {
  ConvKind kind = ConvKind::Forward;
  bool zeros = false;
  int64_t outputElements = 0;
  TensorView x, w, y;
  std::vector<int> pad, stride, dilation;
  bool stageWeights = false;
  Box weightsBox, weightsHeld;
  /// A data gradient padded unevenly is computed over a wider x (the rows the uneven
  /// padding stands for, so that the padding left is even) into scratch space; the share
  /// is the part of it from `outputLead` (per dimension of x, the rows computed before the
  /// share's first) with the share's extents `outputDims`.
  bool stageOutput = false;
  std::vector<int> outputLead, outputDims;

  std::string describe() const;
};

/// The cuDNN call for `plan`, or none with the reason: cuDNN pads both ends of a dimension
/// alike, so a forward or filter-gradient share padded unevenly where the trailing padding
/// is read is left to the generated kernel (a data gradient's is computed wider, see
/// stageOutput); so is a view whose sizes or strides exceed int.
std::optional<CudnnConv> cudnnConv(const ConvPlan &plan, const std::vector<Box> &held,
                                   std::string *why = nullptr);

/// Whether cuDNN computes `c` in bfloat16 (x, w and y all bfloat16: cuDNN's pseudo-bfloat16
/// configuration, float32 accumulation) rather than float32 (all float32); none, with the
/// reason, for a mix, which cuDNN does not take.
std::optional<bool> cudnnBf16(const CudnnConv &c, const KernelTypes &types,
                              std::string *why = nullptr);

/// How the CUDA backend computes one share with a library, decided on the host (the
/// backend makes the call; the kernel report shows it without a device): a cuBLAS product,
/// a cuDNN convolution, a bias and cuBLAS products, the scatter-add kernel, or none (the
/// generated kernel), for the op's buffers of element types `types`. Types the library
/// takes in no one call (a product of a bfloat16 and a float32 operand; a convolution of
/// bfloat16 operands whose result is a float32 partial sum) are computed in float32: the
/// bfloat16 operands widened into scratch space first (exactly), a bfloat16 result staged in
/// float32 and rounded once, as the CPU backend runs its float32 library calls.
struct LibraryCall {
  enum Kind { None, Gemm, Conv, Affine, Scatter } kind = None;
  CublasGemm gemm;
  CudnnConv conv;
  CublasAffine affine;
  ScatterPlan scatter;
  GemmElements elements; ///< a product's (Gemm, Affine), its operands after widening
  bool convBf16 = false; ///< Conv: in bfloat16 (cuDNN's pseudo-bfloat16 configuration)
  /// Per input: widened from bfloat16 into float32 scratch space before the call.
  std::vector<bool> widen;
  /// The result is computed into float32 scratch space and rounded once into the share.
  bool staged = false;
  /// The op has a library form for this share that the scatter-add kernel's float32 rules
  /// out (the generated kernel runs it), and why.
  std::string declined;

  /// What runs, for the profile and the kernel report ("cuBLAS sgemm 64x96x16", with the
  /// element types where any is bfloat16).
  std::string describe() const;
  /// Products or convolutions on bfloat16 operands: tensor cores.
  bool tensorCores() const;
};
LibraryCall libraryCall(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                        const std::vector<Box> &held, const KernelTypes &types);

/// Runs `c` on host buffers with cuDNN's semantics (views by their strides, symmetric
/// zero padding): the reference the mapping is tested against.
void referenceConv(const CudnnConv &c, const float *const *in, float *out);

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_LIBRARY_CALLS_H
