// Instantiation: an op with its attributes fixed, variadic groups expanded and op calls
// inlined — the fixed-rank form that analysis, the interpreter and the search work on.
#ifndef TOFU_ANALYSIS_INSTANTIATE_H
#define TOFU_ANALYSIS_INSTANTIATE_H

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/ir.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// What fixes an op's free parameters. Attributes not given take their defaults; group
/// lengths not given are inferred from `inputRanks` where possible, else default to 1.
struct Instantiation {
  std::map<std::string, int64_t> attrs;
  std::map<std::string, int64_t> groups;
  /// Lengths for groups that nothing else determines (instead of the default 1). A grad
  /// clause's op gets the forward op's lengths of same-named groups this way.
  std::map<std::string, int64_t> groupHints;
  /// The rank of each actual input, when known (a graph knows them); empty otherwise.
  std::vector<std::optional<unsigned>> inputRanks;
};

/// An index variable of an instantiated op (groups expanded: `i` of length 2 gives `i0`,
/// `i1`). Reduction variables of inlined ops become variables of the instantiated op.
struct InstVar {
  std::string name;
  ir::IndexVar::Role role = ir::IndexVar::Role::Output;
  /// The explicit extent `(v : K)`, evaluated.
  std::optional<int64_t> fixedExtent;
  /// An input dimension that the variable indexes alone (`v` or `v + c`): its extent.
  std::optional<std::pair<unsigned, unsigned>> extentDim;
};

struct InstInput {
  std::string name;
  unsigned rank = 0;
};

/// An instantiated op. `body` uses the IR's expression nodes with these restrictions:
/// no AttrRef (folded to Const), no group splats, no OpCall (inlined), no TensorRef;
/// Read and ExtentRef name `inputs`, VarRef names `vars`; slices appear only in the
/// arguments of opaque calls.
struct InstOp {
  const ir::OpDef *def = nullptr;
  std::string name;
  std::vector<std::pair<std::string, int64_t>> attrs;  ///< the values used
  std::vector<std::pair<std::string, int64_t>> groups; ///< the lengths used
  std::vector<InstInput> inputs;
  std::vector<InstVar> vars;
  std::vector<unsigned> outputVars;
  ir::ExprPtr body;
  /// The output-shape clause, when the op has one: per output dimension an expression
  /// over Const and ExtentRef (input extents).
  std::optional<std::vector<ir::ExprPtr>> shape;
  /// Per shape entry: it named an output variable (`*g` or `v`) rather than a dimension.
  std::vector<bool> shapeNamesVar;

  /// Every input is read exactly at the output coordinates, in order.
  bool isElementwise() const;
  /// Output element x is computed from input `input` at x alone (every read of it is at the
  /// output coordinates; the body has no reduction or opaque call): the output may be
  /// written over that input (other inputs may be read anyhow, e.g. a rank-0 learning rate).
  bool mapsInputElementwise(unsigned input) const;
  /// The body is a reducer at top level.
  const ir::Reduce *topReduce() const;
  /// Variables of the top-level reducer (the reduction-split candidates).
  std::vector<unsigned> topReductionVars() const;
  /// The input extents implied by the shape clause, given the input shapes.
  std::optional<std::vector<int64_t>>
  outputShape(const std::vector<std::vector<int64_t>> &inputShapes) const;
};

/// Instantiates `op`. Errors (a missing attribute value, a non-positive explicit extent,
/// ranks that cannot agree, a reduction variable whose extent disappears when inlining)
/// name the op and the problem.
llvm::Expected<InstOp> instantiate(const ir::OpDef &op, const Instantiation &inst);

/// How to instantiate the op a grad clause calls: `fwd` is the forward op as instantiated on
/// inputs of shapes `fwdInputShapes`, and `argRank` gives the rank of the tensor each
/// argument names (an input, `out` or `dOut`). Attribute values are evaluated in the
/// forward op's terms; where the arguments' ranks leave the called op's group lengths open,
/// its groups take the lengths of the forward op's same-named groups (a reduction's
/// gradient splits its rank the way the reduction did). Fails when an argument is not a
/// whole tensor or an attribute value is not a constant.
llvm::Expected<Instantiation>
gradCallInstantiation(const ir::OpCall &call, const InstOp &fwd,
                      const std::vector<std::vector<int64_t>> &fwdInputShapes,
                      const std::function<unsigned(const ir::TensorRef &)> &argRank);

/// A deep copy of an instantiated expression.
ir::ExprPtr cloneExpr(const ir::Expr &e);

/// Evaluates an expression of Const, ExtentRef and integer arithmetic.
std::optional<int64_t> evalConstant(const ir::Expr &e,
                                    const std::vector<std::vector<int64_t>> *inputShapes);

} // namespace tofu

#endif // TOFU_ANALYSIS_INSTANTIATE_H
