// Execution-checked strategies: every strategy of an op, run on two workers that see only
// the input regions the analysis says they need (the rest poisoned with NaN), must
// reproduce the unpartitioned result.
#ifndef TOFU_ANALYSIS_VERIFY_H
#define TOFU_ANALYSIS_VERIFY_H

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
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
  std::string shapes;  ///< the random shapes used, readable
  std::string problem; ///< set when the op could not be checked at all
  std::vector<StrategyCheck> strategies;
  bool ok() const;
};

/// An instantiation and input shapes an op's author gives for checking it, where random
/// shapes cannot satisfy the op's attributes (a concatenation's split point, say). Read
/// from `verify_examples.json` beside the .tdl file:
///   {"Concat": {"attrs": {"n": 2, "m": 5}, "groups": {"pre": 1, "post": 1},
///               "inputs": [[3, 2, 4], [3, 3, 4]]}}
struct Example {
  Instantiation inst;
  std::vector<std::vector<int64_t>> inputShapes;
  /// Why the op's grad clauses pass the gradient straight through a rounding (its
  /// "straight_through"): finite differences of a step function say nothing of them, so they
  /// are not checked so (the PyTorch oracle checks them against PyTorch's straight-through).
  std::string straightThrough;
};

/// The examples of `dir/verify_examples.json` (none when the file does not exist); errors
/// name the file and the entry.
llvm::Expected<std::map<std::string, Example>> loadExamples(const std::string &dir);

/// Computes one worker's share of an op: the interpreter by default; compiled kernels plug
/// in here (their inputs are the poisoned whole tensors the interpreter would see).
using ShareEvaluator = std::function<llvm::Expected<Tensor>(const InstOp &, const Shapes &,
                                                            const std::vector<const Tensor *> &,
                                                            const std::vector<Range> &)>;

struct VerifyOptions {
  unsigned seed = 1;
  ShareEvaluator evaluate; ///< unset: the interpreter
  /// When set, the first trial uses these input shapes (an Example's).
  const std::vector<std::vector<int64_t>> *exampleShapes = nullptr;
  unsigned trials = 2;     ///< random shape draws per op
  double tolerance = 1e-5; ///< on |a - b| / max(1, |b|)
  /// When set, every random input value that is not an index (InputValueRule::integers) is
  /// replaced by quantize(value) before anything runs: verification in a narrower element
  /// type draws values that type holds exactly (bfloat16: roundToBf16).
  std::function<double(double)> quantize;
  int64_t minExtent = 2, maxExtent = 5;
};

/// Fills what verification needs but `given` leaves open: attributes without a default
/// become 1, and an input of unknown rank (only passed whole to calls) gets the first rank
/// of 2, 1, 3, 4, 5, 6 that instantiates. `chosen` lists what was filled in, e.g. " P=1 rank(m)=2".
Instantiation completeForVerification(const ir::OpDef &op, Instantiation given,
                                      std::string *chosen);

/// Instantiates, analyses and verifies every op declared in `file` of `module`, with the
/// examples beside the file.
std::vector<OpCheck> verifyFile(const ir::Module &module, const std::string &file,
                                const VerifyOptions &options = {});

/// Checks every strategy of `table` by execution (see the file comment).
OpCheck verifyStrategies(const StrategyTable &table, const VerifyOptions &options = {},
                         const OpaqueRegistry &opaques = OpaqueRegistry::builtin());

/// Value ranges tried in order for random inputs: positive first (log, sqrt), then above
/// 1 (acosh), then negative, then both signs.
inline constexpr std::pair<double, double> kValueRanges[] = {
    {0.25, 1.0}, {1.25, 2.0}, {-1.0, -0.25}, {-1.0, 1.0}};

/// What values an input of an op may take for a run to be meaningful: integers in
/// [0, `integers`) for inputs used as indices or a select's condition (0 when any value
/// goes), and for matrices handed to opaque functions the two dimensions whose diagonal is
/// made dominant.
struct InputValueRule {
  int64_t integers = 0;
  std::optional<std::pair<unsigned, unsigned>> diagonal;
  /// Read inside the argument of sqrt, rsqrt or log (a variance): synthetic training values
  /// of such an input are non-negative (runtime/training_data.h).
  bool positive = false;
};
std::vector<InputValueRule> inputValueRules(const InstOp &op, const Shapes &shapes);

/// Random inputs for `op` with values in `range`, except inputs used as indices (integers in
/// range of the dimension or variable they index or are compared with), inputs read directly
/// as a select's condition (0 or 1) and matrices handed to opaque functions (a dominant
/// diagonal, so factorisations and inverses exist).
std::vector<Tensor> randomInputs(const InstOp &op, const Shapes &shapes, unsigned seed,
                                 std::pair<double, double> range);

/// Draws shapes consistent with `op`: variable extents in [minExtent, maxExtent] (equal for
/// variables that index one dimension), output extents as the shape clause says where it
/// has one, other input dimensions exactly as large as the reads need.
Shapes randomShapes(const InstOp &op, unsigned seed, int64_t minExtent, int64_t maxExtent);

} // namespace tofu

#endif // TOFU_ANALYSIS_VERIFY_H
