// The ONNX translation table (ops/onnx_mapping.json): for each ONNX operator, the library
// ops that implement it and the rules that turn a node into them, with a small expression
// language for attributes, groups and conditions. The importer (graph/onnx_translate.cc)
// interprets the rules; structural operators (reshapes, slices, recurrences) name a C++
// handler instead.
#ifndef TOFU_GRAPH_ONNX_RULES_H
#define TOFU_GRAPH_ONNX_RULES_H

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/library.h"
#include "nlohmann/json.hpp"
#include "llvm/Support/Error.h"

namespace tofu {
namespace onnxrules {

/// A value of the expression language: a number, a list of numbers, a string, or
/// undefined (an attribute that is absent and has no default, an index out of range).
struct Value {
  enum class Kind { Undef, Num, List, Str } kind = Kind::Undef;
  double num = 0;
  std::vector<double> list;
  std::string str;

  static Value number(double x) { return {Kind::Num, x, {}, {}}; }
  static Value ofList(std::vector<double> v) { return {Kind::List, 0, std::move(v), {}}; }
  static Value string(std::string s) { return {Kind::Str, 0, {}, std::move(s)}; }
  bool defined() const { return kind != Kind::Undef; }
  std::string text() const;
};

/// What names and calls mean while a node is translated.
class Env {
public:
  virtual ~Env() = default;
  /// A variable: an attribute of the node (with the schema's default) or one of the
  /// importer's (rank, inputs, outputs, opset, o). Undefined when unknown.
  virtual Value name(const std::string &id) = 0;
  /// A function the importer provides (rank(k), in(k, d), out(k, d), const(k), ...);
  /// nullopt when `fn` is not one.
  virtual std::optional<llvm::Expected<Value>> call(const std::string &fn,
                                                    const std::vector<Value> &args) = 0;
};

class Expr;
using ExprPtr = std::shared_ptr<const Expr>;

/// Parses an expression: numbers, 'strings', names, calls f(a, b), lists [a, b], indexing
/// x[i], unary - and !, * / %, + -, comparisons, && ||, a ?? b (b when a is undefined) and
/// c ? a : b. Errors give the column.
llvm::Expected<ExprPtr> parse(const std::string &text);

/// Evaluates `e`; errors are type errors and the environment's.
llvm::Expected<Value> eval(const Expr &e, Env &env);

/// The built-in functions every environment has: len, min, max, sum, prod, floor, ceil,
/// abs, range(n), take(list, n), drop(list, n), contains(list, x), sorted(list),
/// int(x), defined(x). Table::load checks the table's calls against them.
const std::set<std::string> &builtinFunctions();

/// One input of a step: an ONNX input by index, the previous step's result, a step's
/// result by index, a rank-0 constant, a constant of a shape filled with a value, or a new
/// graph input (values that enter from outside, e.g. a dropout mask).
struct InputRef {
  enum class Kind { Onnx, Prev, Step, Scalar, Fill, NewInput } kind = Kind::Onnx;
  int index = 0;
  ExprPtr value, shape; ///< Scalar: value; Fill: value and shape; NewInput: shape
  /// NewInput: random values (Graph::randomInputs) of this kind ("mask", "uniform",
  /// "normal"; empty: none), with parameters a and b (a mask's probability of a 1; a uniform
  /// range [a, b); a normal's mean and deviation).
  std::string random;
  ExprPtr randomA, randomB;
  std::shared_ptr<InputRef> orElse; ///< Onnx: what stands in when the input is absent
  bool integer = false;             ///< Scalar/Fill: an int64 constant
  bool frozen = false;              ///< Onnx: a weight read here is not trained (an input)
  /// Onnx: a weight read here is state (optimizer_state): not trained by a gradient, carried
  /// from step to step by the node that reads it first (isStateUpdate), saved in checkpoints
  bool state = false;
  bool asScalar = false; ///< Onnx: a one-element tensor (shape [1], [1, 1]) read as rank 0
  std::string label;     ///< NewInput: the new tensor is `<node>_<label>`
};

/// One library op of a translation.
struct Step {
  /// A library op, "@reshape": `inputs[0]` reshaped to `shape` (splits, merges, unit axes),
  /// or "@transpose": `inputs[0]` with its axes permuted by `perm` (output axis d is input
  /// axis perm[d]).
  std::string op;
  ExprPtr shape; ///< @reshape's target
  ExprPtr perm;  ///< @transpose's permutation
  std::vector<InputRef> inputs;
  std::vector<std::pair<std::string, ExprPtr>> attrs, groups;
  ExprPtr cond;   ///< the step is skipped when false
  ExprPtr output; ///< the ONNX output it produces (default: the last step, output 0)
  /// Inputs (positions in `inputs`) broadcast numpy-style to `output`'s shape first.
  std::vector<int> broadcast;
  ExprPtr broadcastTo; ///< the shape they broadcast to (default: the broadcast of them all)
  /// With `broadcast`: the op to use when the second operand only lacks leading axes
  /// (trailing-aligned, e.g. AddBcast), instead of expanding it.
  std::string trailingOp;
  std::string text; ///< for messages
};

/// A translation: used when `when` holds; `refuse` conditions are errors with reasons.
struct Rule {
  ExprPtr when;
  std::vector<std::pair<ExprPtr, std::string>> refuse;
  std::vector<Step> steps;
  /// The steps run once per ONNX output, with `o` its index (Split).
  bool eachOutput = false;
  /// The steps run for every input after the first, `prev` the result so far and `k`
  /// the input (variadic Max, Min, Sum).
  bool chain = false;
};

struct Entry {
  std::string onnxOp;
  /// The operator's domain: empty for ONNX's own (ai.onnx), else e.g.
  /// "ai.onnx.preview.training".
  std::string domain;
  std::vector<std::string> tdl; ///< the library ops it may use
  /// Names bound before the rules are tried, in order (each may use the earlier ones).
  std::vector<std::pair<std::string, ExprPtr>> lets;
  std::vector<Rule> rules;    ///< tried in order
  std::string handler;        ///< a C++ handler of the importer, for structural operators
  std::string folded;         ///< the importer evaluates it (static shapes, constants)
  std::string notDescribable; ///< why TDL cannot express it
  std::string missing;        ///< describable, not written yet
  /// Example nodes the tests import (attributes and input shapes), from "tests".
  nlohmann::json tests;
};

class Table {
public:
  /// Loads and checks the table: expressions parse and call only built-in functions and
  /// `functions` (the importer's), steps name ops of `lib` that the entry lists under
  /// "tdl", handlers are among `handlers`. Errors name the operator.
  static llvm::Expected<Table> load(const std::string &path, const OpLibrary &lib,
                                    const std::set<std::string> &handlers,
                                    const std::set<std::string> &functions);
  const Entry *find(const std::string &onnxOp) const;
  const std::map<std::string, Entry> &entries() const { return entries_; }
  int opset() const { return opset_; }

private:
  std::map<std::string, Entry> entries_;
  int opset_ = 0;
};

} // namespace onnxrules
} // namespace tofu

#endif // TOFU_GRAPH_ONNX_RULES_H
