// Numerical checks of grad clauses: the backward op a clause calls, evaluated by the
// interpreter, must match central finite differences of L = sum(out * dOut).
#ifndef TOFU_ANALYSIS_GRADCHECK_H
#define TOFU_ANALYSIS_GRADCHECK_H

#include <map>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/ir.h"
#include "analysis/verify.h"

namespace tofu {

struct GradCheck {
  std::string input; ///< the input the clause differentiates
  std::string call;  ///< the backward op called
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

/// An op's value and its grad clauses' results on given inputs.
struct OpValues {
  Tensor out;
  std::map<std::string, Tensor> grads; ///< by input name, one per grad clause
};

/// Evaluates `def` instantiated as `inst` on `inputs` with the interpreter (the output's
/// shape from `dOut` where given, else from the shape clause) and, with `dOut`, every grad
/// clause's backward op for that output gradient: what an independent oracle (PyTorch
/// autograd: tools/oracles/torch_op_oracle.py through `tdlc --eval`) is compared with.
llvm::Expected<OpValues>
evaluateWithGradients(const ir::OpDef &def, const Instantiation &inst, std::vector<Tensor> inputs,
                      const Tensor *dOut,
                      const OpaqueRegistry &opaques = OpaqueRegistry::builtin());

} // namespace tofu

#endif // TOFU_ANALYSIS_GRADCHECK_H
