// Execution-checked strategies: every strategy of an op, run on two workers that see only
// the input regions the analysis says they need (the rest poisoned with NaN), must
// reproduce the unpartitioned result.
#ifndef TOFU_ANALYSIS_VERIFY_H
#define TOFU_ANALYSIS_VERIFY_H

#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/strategy.h"

namespace tofu {

/// The outcome for one strategy.
struct StrategyCheck {
  std::string strategy; ///< e.g. "x (output dim 2)"
  bool ok = false;
  double maxRelError = 0;
  std::string problem; ///< why it failed
};

/// The outcome for one op.
struct OpCheck {
  std::string op;
  std::string shapes;   ///< the random shapes used, readable
  std::string problem;  ///< set when the op could not be checked at all
  std::vector<StrategyCheck> strategies;
  bool ok() const;
};

struct VerifyOptions {
  unsigned seed = 1;
  unsigned trials = 2;            ///< random shape draws per op
  double tolerance = 1e-5;        ///< on |a - b| / max(1, |b|)
  int64_t minExtent = 2, maxExtent = 5;
};

/// Fills what verification needs but `given` leaves open: attributes without a default
/// become 1, and an input of unknown rank (only passed whole to calls) gets the first rank
/// of 2, 1, 3, 4, 5, 6 that instantiates. `chosen` lists what was filled in, e.g. " P=1 rank(m)=2".
Instantiation completeForVerification(const ir::OpDef &op, Instantiation given,
                                      std::string *chosen);

/// Instantiates, analyses and verifies every op declared in `file` of `module`.
std::vector<OpCheck> verifyFile(const ir::Module &module, const std::string &file,
                                const VerifyOptions &options = {});

/// Checks every strategy of `table` by execution (see the file comment).
OpCheck verifyStrategies(const StrategyTable &table, const VerifyOptions &options = {},
                         const OpaqueRegistry &opaques = OpaqueRegistry::builtin());

/// Draws shapes consistent with `op`: variable extents in [minExtent, maxExtent] (equal for
/// variables that index one dimension), inputs just large enough for every read.
Shapes randomShapes(const InstOp &op, unsigned seed, int64_t minExtent, int64_t maxExtent);

} // namespace tofu

#endif // TOFU_ANALYSIS_VERIFY_H
