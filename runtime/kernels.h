// Native fast paths for the executor's heaviest ops (matrix products and 2-D
// convolutions): each computes exactly the share the TDL interpreter would (same ranges,
// partial sums when a reduction variable is split, zeros outside the inputs, the same
// summation order), only faster. Other ops go to the interpreter.
#ifndef TOFU_RUNTIME_KERNELS_H
#define TOFU_RUNTIME_KERNELS_H

#include <optional>
#include <vector>

#include "analysis/interpreter.h"

namespace tofu {

/// The share of `op` over `ranges` when a native kernel implements the op's instantiation;
/// none otherwise.
std::optional<Tensor> fastKernel(const InstOp &op, const Shapes &shapes,
                                 const std::vector<const Tensor *> &inputs,
                                 const std::vector<Range> &ranges);

/// `fastKernel` when it applies, else the interpreter.
llvm::Expected<Tensor> evaluateFast(const InstOp &op, const Shapes &shapes,
                                    const std::vector<const Tensor *> &inputs,
                                    const std::vector<Range> &ranges);

} // namespace tofu

#endif // TOFU_RUNTIME_KERNELS_H
