// The precision rewrite (precision.cc): bf16 as torch.autocast runs it (applyPrecision).
#ifndef TOFU_GRAPH_PRECISION_H
#define TOFU_GRAPH_PRECISION_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/library.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// How torch.autocast(dtype=torch.bfloat16) treats an op of the library, by name.
enum class CastClass {
  Lower,   ///< runs on bfloat16 operands with float32 accumulation: products, convolutions
  Float32, ///< runs in float32 (softmax, normalisations' statistics, losses, exp, log, pow,
           ///< sums, ...): bfloat16 inputs are widened first
  Promote, ///< runs in the widest float type of its inputs (type promotion)
};
CastClass castClass(const std::string &op);

/// What applyPrecision did.
struct PrecisionSummary {
  unsigned casts = 0;   ///< cast nodes added (to bfloat16 and back to float32)
  unsigned lowered = 0; ///< Lower nodes, now on bfloat16 operands
  unsigned float32 = 0; ///< Float32 nodes that read a bfloat16 tensor, widened
  /// Float32 nodes whose result only products read, stored in bfloat16
  unsigned storedNarrow = 0;
  /// Bias adds that round their product's float32 result and the bias once
  unsigned fusedBias = 0;
  /// GELUs the ONNX export spelled out in five ops, joined into one Gelu (nn.GELU rounds once)
  unsigned gelus = 0;
  /// Exported torch.baddbmm / addmm (Add(Mul(product, 1), M)) whose product and M are
  /// rounded once, M cast to bfloat16, as autocast runs them (counted in fusedBias too)
  unsigned addmms = 0;
};

/// Applies precision `p` to a checked forward graph (before buildTrainingGraph, which gives
/// every gradient its tensor's element type). FP32 changes nothing. BF16 follows PyTorch's
/// autocast to bfloat16 (CUDA's op lists, which keep more in float32 than the CPU's):
/// - a Lower op reads its float32 inputs through a CastBfloat16 node (one per tensor, shared
///   by all its Lower readers: a weight is cast once per step, as autocast caches it), and
///   its result is bfloat16;
/// - a Float32 op reads its bfloat16 inputs as they are (its kernel widens them exactly and
///   computes in float32), and its float result is float32, except where only products read
///   it and it is no output of the graph: then it is stored in bfloat16, rounded once as it
///   is written, where autocast keeps it in float32 beside a bfloat16 copy (a deviation:
///   a softmax's gradient then reads its rounded probabilities, as with Megatron's fused
///   softmax; it halves what attention keeps for the backward pass);
/// - another op's float result takes the widest float type of its float inputs, where a
///   rank-0 input does not widen a tensor of higher rank (PyTorch's promotion of 0-dim
///   tensors), a batch norm follows its data, and the bias a product's result is added to
///   (Add, AddBcast, ConvBias of a Lower op's result and a float32 weight) is cast with it,
///   as autocast's linear and conv take their bias.
/// Weights, their gradients and the optimiser's state stay float32; float64 tensors are
/// never narrowed. The graph stays checked.
llvm::Expected<PrecisionSummary> applyPrecision(Graph &g, const OpLibrary &lib, Precision p);

} // namespace tofu

#endif // TOFU_GRAPH_PRECISION_H
