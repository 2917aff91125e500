// Numerical checks of grad clauses: the backward op a clause calls, evaluated by the
// interpreter, must match central finite differences of L = sum(out * dOut).
#ifndef TOFU_ANALYSIS_GRADCHECK_H
#define TOFU_ANALYSIS_GRADCHECK_H

#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/ir.h"
#include "analysis/verify.h"

namespace tofu {

struct GradCheck {
  std::string input;    ///< the input the clause differentiates
  std::string call;     ///< the backward op called
  bool ok = false;
  bool skipped = false; ///< the clause could not be evaluated here (reason in `problem`)
  double maxError = 0;  ///< largest |numeric - analytic| / max(1, |numeric|)
  std::string problem;
};

struct GradCheckOptions {
  unsigned seed = 1;
  /// An example instantiation and input shapes (see verify.h); random ones otherwise.
  const Example *example = nullptr;
  double tolerance = 1e-4;
  unsigned maxElements = 24; ///< elements of each input perturbed (spread over it)
};

/// Checks every grad clause of `op` (instantiated as for verification).
std::vector<GradCheck> checkGradients(const ir::OpDef &op, const GradCheckOptions &options = {},
                                      const OpaqueRegistry &opaques = OpaqueRegistry::builtin());

} // namespace tofu

#endif // TOFU_ANALYSIS_GRADCHECK_H
