// Library kernels: shares that oneDNN computes better than a generated loop nest. The
// match is structural, on the instantiated op's body, so it serves every op of the form
// and not a list of names:
//   - contractions `Sum(lambda r: A[...] * B[...])`, optionally times a rank-0 input (the
//     matrix-product family: MatMul, Gemm's products, batched products and every gradient
//     of them), whose indices are plain variables, become oneDNN sgemm calls (loops over
//     the variables a single product cannot take, the reduction's in order);
//   - convolutions over 1 to 3 spatial dimensions in NCHW layout: the forward form
//     `Sum(ci, k...: data[n, ci, s*y + d*k - p] * w[co, ci, k])`, the filter gradient
//     `Sum(n, y...: dy[n, co, y] * data[n, ci, s*y + d*k - p])` and the data gradient
//     `Sum(co, k...: select(divisible, dy[n, co, (x + p - d*k) / s] * w[co, ci, k], 0))`
//     become oneDNN convolution primitives; a share is a convolution over the region it
//     reads (a halo share's window starts inside the tensor and is padded only where the
//     whole tensor is).
//   - scatter-adds `Sum(lambda q: select(idx[q] == k, dy[.., q, ..], 0))` (a gather's
//     gradient) add each dy row into the one k it names instead of testing every k;
//   - sums of products with at most one bias read at output variables
//     (`Sum(x[n, k] * W[q, k]) + Sum(h[n, j] * R[q, j]) + b[q]`: lstm_gates, and the GRU and
//     RNN cells built on it) become the bias broadcast, then sgemm calls accumulating.
// A share a library call cannot express (checked reads it would need, padding it cannot
// take) gets no library kernel; the generated kernel computes it.
#ifndef TOFU_RUNTIME_LIBRARY_KERNELS_H
#define TOFU_RUNTIME_LIBRARY_KERNELS_H

#include <memory>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/strategy.h"

namespace tofu {

/// One share's library call (or hand-written loop), every size and offset fixed when it is
/// made.
class LibraryKernel {
public:
  virtual ~LibraryKernel() = default;
  /// Computes the share: `in[q]` holds input q's region `held[q]` (row-major); `out` is the
  /// share's output (its output variables' ranges, row-major), overwritten. `scratch` holds
  /// scratchBytes() bytes, 64-byte aligned, that the call may overwrite (calls that run one
  /// after another can share it).
  virtual void run(const float *const *in, float *out, int threads, void *scratch) const = 0;
  /// What it calls, e.g. "oneDNN sgemm 2x4096x1024" or "oneDNN convolution forward".
  virtual std::string describe() const = 0;
  /// The scratch space the call needs (oneDNN's, and dense copies of strided views).
  virtual size_t scratchBytes() const { return 0; }
};

/// The OpenMP threads that library kernels made on the calling thread are planned for.
/// oneDNN fixes a primitive's thread count when it is made, from the making thread's
/// OpenMP setting (the machine's cores unless set), and runs a team that large whatever the
/// call later asks: a backend sets its threads per worker here before it makes its kernels.
/// Otherwise workers that share the cores (threads, or MPI processes) each run teams of
/// every core, whose idle members spin, and steps slow down by up to 100x.
void setLibraryThreads(int threads);

/// The FLOP/s of a square product n x n x n on the library the CPU backend calls, the best of
/// `repeats` timed calls after an untimed one, on `threads` threads: oneDNN's sgemm, or with
/// `bf16` its native bfloat16 matmul (float32 accumulation), 0 where this CPU has none (the
/// backend then widens the operands around sgemm). --calibrate's peak: no rate it fits goes
/// past it.
double libraryProductFlops(int64_t n, bool bf16, int threads, int repeats = 5);

/// The library kernel for `op`'s share over `ranges` reading inputs held in `held`, or
/// null when none applies.
std::unique_ptr<LibraryKernel> libraryKernel(const InstOp &op, const Shapes &shapes,
                                             const std::vector<Range> &ranges,
                                             const std::vector<Box> &held);

/// The share as one product or convolution of bfloat16 operands into a float32 result,
/// where `bf16` (per input) marks exactly its two operands (a product's; a convolution's
/// src and weights, src and output gradient, or output gradient and weights by kind) and
/// oneDNN implements it natively on this CPU (its brgemm matmul, none for a product scaled
/// by an input, Gemm's alpha; its bf16 convolutions); else null (the caller widens the
/// operands around libraryKernel's float32 call). `in` then holds the operands' bfloat16
/// bits.
std::unique_ptr<LibraryKernel> bf16LibraryKernel(const InstOp &op, const Shapes &shapes,
                                                 const std::vector<Range> &ranges,
                                                 const std::vector<Box> &held,
                                                 const std::vector<bool> &bf16);

/// Whether `op`'s body has a form some share could run as a library call.
bool hasLibraryForm(const InstOp &op);

} // namespace tofu

#endif // TOFU_RUNTIME_LIBRARY_KERNELS_H
