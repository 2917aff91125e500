// The TDL interpreter: evaluates an instantiated op on concrete tensors, over all of its
// output or over one worker's share (the reference every partitioned execution is checked
// against).
#ifndef TOFU_ANALYSIS_INTERPRETER_H
#define TOFU_ANALYSIS_INTERPRETER_H

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A dense row-major tensor of doubles.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, double fill = 0);
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  /// The flat offset of `coords`, or -1 when outside the tensor.
  int64_t offset(const int64_t *coords) const;
};

/// The row-major coordinates of element `flat` of a tensor of `shape`, into `coords`.
void unflatten(int64_t flat, const std::vector<int64_t> &shape, int64_t *coords);

/// C++ implementations of opaque functions, by name. Each takes the argument slices
/// (tensors) and returns the result tensor.
class OpaqueRegistry {
public:
  using Fn = std::function<llvm::Expected<Tensor>(const std::vector<Tensor> &)>;
  void add(const std::string &name, Fn fn) { fns_[name] = std::move(fn); }
  const Fn *find(const std::string &name) const;
  /// The registry with the built-in functions: Cholesky (lower factor of the symmetric
  /// matrix given by the lower triangle), MatrixInverse (Gauss-Jordan, partial pivoting)
  /// and Determinant (LU with partial pivoting; a rank-0 result).
  static const OpaqueRegistry &builtin();

private:
  std::map<std::string, Fn> fns_;
};

/// Evaluates `op` with its variables restricted to `ranges` (a worker's share; fullRanges
/// for the whole op). The result has the shape of the share of the output. Reads outside
/// an input are 0; a split top-level reducer gives the partial reduction.
llvm::Expected<Tensor> evaluate(const InstOp &op, const Shapes &shapes,
                                const std::vector<const Tensor *> &inputs,
                                const std::vector<Range> &ranges,
                                const OpaqueRegistry &opaques = OpaqueRegistry::builtin());

} // namespace tofu

#endif // TOFU_ANALYSIS_INTERPRETER_H
