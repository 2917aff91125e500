// The CPU reference executor: k workers as threads, each with its own tiles, run an
// ExecPlan; every fetch and every partial result combined is a real copy out of another
// worker's memory. It checks plans: the partitioned step must reproduce the unpartitioned
// one (the TDL interpreter computes every op).
#ifndef TOFU_RUNTIME_CPU_EXECUTOR_H
#define TOFU_RUNTIME_CPU_EXECUTOR_H

#include <cstdint>
#include <map>
#include <vector>

#include "analysis/interpreter.h"
#include "codegen/exec_plan.h"

namespace tofu {

struct ExecResult {
  /// Every tensor of the graph, assembled from its owners' tiles.
  std::vector<Tensor> tensors;
  /// Bytes copied from other workers (counted at the copies, in the tensors' dtypes).
  int64_t bytesMoved = 0;
};

/// Runs `plan` with the graph's inputs and weights `given` (whole tensors, by tensor index;
/// every tensor without a producer needs one). Errors name the node that failed.
llvm::Expected<ExecResult> runPlan(const Problem &p, const ExecPlan &plan,
                                   const std::map<unsigned, Tensor> &given);

/// The unpartitioned step: every node on whole tensors.
llvm::Expected<std::vector<Tensor>> runReference(const Problem &p,
                                                 const std::map<unsigned, Tensor> &given);

/// Random values for every tensor without a producer: each drawn as its first consumer's
/// verification inputs are (index inputs in range, values in `range`).
std::map<unsigned, Tensor> randomGraphInputs(const Problem &p, unsigned seed,
                                             std::pair<double, double> range = {0.25, 1.0});

/// The largest |a - b| / max(1, |b|) over the elements of two tensors (infinite when their
/// shapes differ or one is NaN where the other is not).
double maxRelativeError(const Tensor &a, const Tensor &b);

} // namespace tofu

#endif // TOFU_RUNTIME_CPU_EXECUTOR_H
