// The CPU reference executor: k workers as threads, each with its own tiles, run an
// ExecPlan; every fetch and every partial result combined is a real copy out of another
// worker's memory. It checks plans: the partitioned step must reproduce the unpartitioned
// one (the TDL interpreter computes every op).
#ifndef TOFU_RUNTIME_CPU_EXECUTOR_H
#define TOFU_RUNTIME_CPU_EXECUTOR_H

#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "analysis/interpreter.h"
#include "codegen/exec_plan.h"

namespace tofu {

/// How the workers' memories exchange data. The CPU executor's workers are threads of one
/// process (CpuTransport copies between their buffers); a GPU backend implements the same
/// calls with UVA peer copies within a node and NCCL across GPUs.
class Transport {
public:
  virtual ~Transport() = default;
  /// Copies the elements of `box` (absolute coordinates of a tensor) from worker `from`'s
  /// buffer `src`, which holds the tensor's box `srcOrigin`, into worker `to`'s buffer `dst`,
  /// which holds `dstOrigin` (an empty origin: the whole tensor). With `reducer`, combines
  /// into `dst` instead of overwriting (a reduction's partial results).
  virtual void copy(unsigned from, const Tensor &src, const Box &srcOrigin, unsigned to,
                    Tensor &dst, const Box &dstOrigin, const Box &box, unsigned elementBytes,
                    const ir::Reducer *reducer) = 0;
  /// Bytes copied between different workers so far.
  virtual int64_t bytesMoved() const = 0;
};

/// Copies between the buffers of one process's worker threads; thread-safe.
class CpuTransport : public Transport {
public:
  void copy(unsigned from, const Tensor &src, const Box &srcOrigin, unsigned to, Tensor &dst,
            const Box &dstOrigin, const Box &box, unsigned elementBytes,
            const ir::Reducer *reducer) override;
  int64_t bytesMoved() const override { return moved_; }

private:
  std::atomic<int64_t> moved_{0};
};

struct ExecResult {
  /// Every tensor of the graph, assembled from its owners' tiles.
  std::vector<Tensor> tensors;
  /// Bytes copied from other workers (counted at the copies, in the tensors' dtypes).
  int64_t bytesMoved = 0;
};

/// Runs `plan` with the graph's inputs and weights `given` (whole tensors, by tensor index;
/// every tensor without a producer needs one). Errors name the node that failed.
llvm::Expected<ExecResult> runPlan(const Problem &p, const ExecPlan &plan,
                                   const std::map<unsigned, Tensor> &given,
                                   Transport *transport = nullptr);

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
