// Strategy discovery (paper section 4.2): symbolic interval analysis of an instantiated op
// gives, for every basic 2-worker partition strategy, each input's regions and per-dimension
// access; the concrete half gives regions and bytes for any split (n parts, grids).
#ifndef TOFU_ANALYSIS_STRATEGY_H
#define TOFU_ANALYSIS_STRATEGY_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/affine.h"
#include "analysis/box.h"
#include "analysis/instantiate.h"
#include "analysis/ir.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// How a worker reads one input dimension under a strategy (TDL.md section 7).
enum class Access { Split, Halo, Full };
const char *accessName(Access a);

/// A symbolic region: per dimension a half-open range [lo, hi).
struct SymRegion {
  std::vector<std::pair<AffineExpr, AffineExpr>> dims;
  bool read = false; ///< false when the op never reads the input
};

struct InputStrategy {
  std::vector<Access> access; ///< per dimension
  SymRegion worker0, worker1;
};

/// A basic partition strategy for two workers.
struct Strategy {
  enum class Kind { Output, Reduction };
  Kind kind = Kind::Output;
  unsigned var = 0;                       ///< the split variable (an InstOp variable)
  unsigned outputDim = 0;                 ///< for Kind::Output
  ir::Reducer reducer = ir::Reducer::Sum; ///< for Kind::Reduction: how partials combine
  std::vector<InputStrategy> inputs;
};

/// Every basic strategy of one instantiated op.
struct StrategyTable {
  InstOp op;
  std::vector<std::string> symbols; ///< names of the symbolic extents
  std::vector<SymRegion> whole;     ///< what the unpartitioned op reads of each input
  bool elementwise = false;
  bool opaque = false;
  std::vector<Strategy> strategies;

  /// `data[0:B/2, 0:CI, 0:X + DX - 1]`.
  std::string regionString(unsigned input, const SymRegion &r) const;
  std::string symbolName(unsigned s) const { return symbols.at(s); }
};

/// Instantiates `op` and discovers its strategies: one output split per output
/// coordinate, one reduction split per variable of a top-level reducer.
llvm::Expected<StrategyTable> analyzeOp(const ir::OpDef &op, const Instantiation &inst);

// --- Concrete shapes, regions and costs ---------------------------------------------

// Range and Box, and what is asked of them: analysis/box.h.

/// Concrete extents of every input dimension and every variable of an instantiated op.
struct Shapes {
  std::vector<std::vector<int64_t>> inputs;
  std::vector<int64_t> vars;
};

/// Completes `inputShapes` with the extent of every variable: explicit extents, input
/// dimensions indexed alone, and for output coordinates `outputShape` (or the op's shape
/// clause). Errors name what cannot be inferred or does not agree.
llvm::Expected<Shapes> concreteShapes(const InstOp &op,
                                      const std::vector<std::vector<int64_t>> &inputShapes,
                                      const std::optional<std::vector<int64_t>> &outputShape);

/// The full range of every variable.
std::vector<Range> fullRanges(const Shapes &shapes);

/// The region of each input read by a worker whose variables range over `ranges`,
/// clipped to the tensor (reads outside it are zeros and need no data). A dimension
/// indexed by data or by a slice is read whole.
std::vector<Box> inputRegions(const InstOp &op, const Shapes &shapes,
                              const std::vector<Range> &ranges);
/// Every read of `op`'s body, in walk order (what inputRegions evaluates; collect them once
/// where the regions of one op are wanted many times).
std::vector<const ir::Read *> collectReads(const InstOp &op);
/// inputRegions with the reads collected already (`reads` from collectReads(op)).
std::vector<Box> inputRegions(const InstOp &op, const std::vector<const ir::Read *> &reads,
                              const Shapes &shapes, const std::vector<Range> &ranges);
/// The same into `out`, whose boxes are reused (no allocation once they have grown).
void inputRegions(const InstOp &op, const std::vector<const ir::Read *> &reads,
                  const Shapes &shapes, const std::vector<Range> &ranges, std::vector<Box> &out);

/// The closed range of values an index expression takes when the variables range over
/// `ranges` (none when it is not affine).
std::optional<std::pair<int64_t, int64_t>> indexValueRange(const ir::Expr &e, const Shapes &shapes,
                                                           const std::vector<Range> &ranges);

/// The numbers the search's cost model is built on, for one worker.
struct WorkerCost {
  std::vector<int64_t> inputBytes; ///< per input, the bytes of its region
  int64_t outputBytes = 0;         ///< the worker's (partial) output
  bool partialOutput = false;      ///< a reduction variable is split: outputs must be reduced
};
WorkerCost workerCost(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                      unsigned dtypeBytes);

} // namespace tofu

#endif // TOFU_ANALYSIS_STRATEGY_H
