// The checked IR of TDL: ops with every name resolved, ranks and extents known.
#ifndef TOFU_ANALYSIS_IR_H
#define TOFU_ANALYSIS_IR_H

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/ast.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/Casting.h"

namespace tofu::ir {

class OpDef;

/// Element-wise builtin functions (TDL.md section 3). They never affect partitioning.
#define TOFU_IR_BUILTINS(X)                                                                        \
  X(Exp, "exp", 1)                                                                                 \
  X(Log, "log", 1)                                                                                 \
  X(Sqrt, "sqrt", 1)                                                                               \
  X(Rsqrt, "rsqrt", 1)                                                                             \
  X(Tanh, "tanh", 1)                                                                               \
  X(Sigmoid, "sigmoid", 1)                                                                         \
  X(Relu, "relu", 1)                                                                               \
  X(Abs, "abs", 1)                                                                                 \
  X(Sign, "sign", 1)                                                                               \
  X(Floor, "floor", 1)                                                                             \
  X(Ceil, "ceil", 1)                                                                               \
  X(Pow, "pow", 2)                                                                                 \
  X(Min, "min", 2)                                                                                 \
  X(Max, "max", 2)                                                                                 \
  X(Select, "select", 3)                                                                           \
  X(CastFloat, "cast_float", 1)                                                                    \
  X(CastInt, "cast_int", 1)                                                                        \
  /* Extensions beyond TDL.md, for the ONNX operator set: */                                       \
  X(Sin, "sin", 1)                                                                                 \
  X(Cos, "cos", 1)                                                                                 \
  X(Tan, "tan", 1)                                                                                 \
  X(Asin, "asin", 1)                                                                               \
  X(Acos, "acos", 1)                                                                               \
  X(Atan, "atan", 1)                                                                               \
  X(Sinh, "sinh", 1)                                                                               \
  X(Cosh, "cosh", 1)                                                                               \
  X(Asinh, "asinh", 1)                                                                             \
  X(Acosh, "acosh", 1)                                                                             \
  X(Atanh, "atanh", 1)                                                                             \
  X(Erf, "erf", 1)                                                                                 \
  X(Round, "round", 1)                                                                             \
  X(IsNan, "isnan", 1)                                                                             \
  X(IsInf, "isinf", 1)                                                                             \
  X(RoundBf16, "round_bf16", 1)                                                                    \
  X(RoundF16, "round_f16", 1)

enum class Builtin {
#define TOFU_X(E, S, N) E,
  TOFU_IR_BUILTINS(TOFU_X)
#undef TOFU_X
};

/// The TDL spelling of a builtin ("exp").
const char *builtinName(Builtin b);
/// How many arguments a builtin takes.
unsigned builtinArity(Builtin b);
/// Looks a builtin up by its TDL spelling.
std::optional<Builtin> lookupBuiltin(const std::string &name);

/// Reducers: commutative, associative aggregations over reduction variables.
#define TOFU_IR_REDUCERS(X)                                                                        \
  X(Sum, "Sum")                                                                                    \
  X(Max, "Max")                                                                                    \
  X(Min, "Min")                                                                                    \
  X(Prod, "Prod")

enum class Reducer {
#define TOFU_X(E, S) E,
  TOFU_IR_REDUCERS(TOFU_X)
#undef TOFU_X
};

const char *reducerName(Reducer r);
std::optional<Reducer> lookupReducer(const std::string &name);

using ast::BinaryOp;

/// Every IR expression kind, listed once.
#define TOFU_IR_EXPR_KINDS(X)                                                                      \
  X(Const)                                                                                         \
  X(AttrRef)                                                                                       \
  X(ExtentRef)                                                                                     \
  X(VarRef)                                                                                        \
  X(TensorRef)                                                                                     \
  X(Read)                                                                                          \
  X(OpaqueCall)                                                                                    \
  X(OpCall)                                                                                        \
  X(Reduce)                                                                                        \
  X(Apply)                                                                                         \
  X(Neg)                                                                                           \
  X(Binary)

enum class ExprKind {
#define TOFU_X(K) K,
  TOFU_IR_EXPR_KINDS(TOFU_X)
#undef TOFU_X
};

/// Base of IR expressions. `loc` points into the file the op came from.
class Expr {
public:
  virtual ~Expr() = default;
  ExprKind kind() const { return kind_; }
  SourceLoc loc;

protected:
  explicit Expr(ExprKind k) : kind_(k) {}

private:
  ExprKind kind_;
};

using ExprPtr = std::unique_ptr<Expr>;

#define TOFU_IR_CLASSOF(K)                                                                         \
  static bool classof(const Expr *e) { return e->kind() == ExprKind::K; }

/// A numeric constant: an integer or float literal, `inf` or `nan`.
struct Const : Expr {
  Const() : Expr(ExprKind::Const) {}
  TOFU_IR_CLASSOF(Const)
  bool isInt = false;
  int64_t intValue = 0; ///< when isInt
  double value = 0;     ///< always set (the integer as a double when isInt)
};

/// An attribute of the enclosing op (an integer known at instantiation).
struct AttrRef : Expr {
  AttrRef() : Expr(ExprKind::AttrRef) {}
  TOFU_IR_CLASSOF(AttrRef)
  unsigned attr = 0;
};

/// `x.d`: the extent of dimension `dim` of input `input`.
struct ExtentRef : Expr {
  ExtentRef() : Expr(ExprKind::ExtentRef) {}
  TOFU_IR_CLASSOF(ExtentRef)
  unsigned input = 0;
  unsigned dim = 0;
};

/// An index variable (never a group) used as a value or inside an index expression.
struct VarRef : Expr {
  VarRef() : Expr(ExprKind::VarRef) {}
  TOFU_IR_CLASSOF(VarRef)
  unsigned var = 0;
};

/// A whole tensor passed to an op or opaque call: an input, or in a grad clause the
/// op's output `out` or its gradient `dOut`.
struct TensorRef : Expr {
  enum class Source { Input, Out, DOut };
  TensorRef() : Expr(ExprKind::TensorRef) {}
  TOFU_IR_CLASSOF(TensorRef)
  Source source = Source::Input;
  unsigned input = 0; ///< when source == Input
};

/// One coordinate of a tensor access, classified for analysis.
struct Coord {
  enum class Kind {
    Affine,        ///< affine in index variables (checked); `expr` holds it
    DataDependent, ///< reads tensor data (e.g. `ids[i]`); `expr` is a value expression
    Slice,         ///< `:` — the whole dimension (only in call arguments)
    Splat,         ///< `*g` — expands to the variables of group `var`
  };
  Kind kind = Kind::Affine;
  SourceLoc loc;
  ExprPtr expr;
  unsigned var = 0; ///< the group, for Splat
};

/// The variable an affine coordinate is exactly (`v`, no offset or factor), if any.
std::optional<unsigned> exactVar(const Coord &c);

/// `input[coords]`: an element of an input (or a slice of it, as a call argument).
struct Read : Expr {
  Read() : Expr(ExprKind::Read) {}
  TOFU_IR_CLASSOF(Read)
  unsigned input = 0;
  std::vector<Coord> coords;
};

/// `F(args)[coords]` for an opaque function F.
struct OpaqueCall : Expr {
  OpaqueCall() : Expr(ExprKind::OpaqueCall) {}
  TOFU_IR_CLASSOF(OpaqueCall)
  std::string function;
  std::vector<ExprPtr> args; ///< TensorRef, Read with slices, or unindexed OpCall
  std::vector<Coord> coords;
};

/// An attribute passed to a called op: `name = value` (value is a constant expression
/// of the caller).
struct AttrBinding {
  unsigned attr = 0; ///< index into the callee's attributes
  ExprPtr value;
};

/// An explicit group length passed to a called op: `{g = n}`.
struct GroupBinding {
  unsigned var = 0; ///< a group variable of the callee
  int64_t length = 0;
};

/// `op<attrs>{groups}(args)[coords]`: a call of another op, inlined by analysis. Without
/// coordinates (`indexed` false) it is a whole tensor, as an argument or a grad clause.
struct OpCall : Expr {
  OpCall() : Expr(ExprKind::OpCall) {}
  TOFU_IR_CLASSOF(OpCall)
  const OpDef *callee = nullptr;
  std::vector<AttrBinding> attrs;
  std::vector<GroupBinding> groups;
  std::vector<ExprPtr> args; ///< TensorRef, Read with slices, or unindexed OpCall
  bool indexed = false;
  std::vector<Coord> coords;
};

/// `Sum(lambda vars: body)` and the other reducers.
struct Reduce : Expr {
  Reduce() : Expr(ExprKind::Reduce) {}
  TOFU_IR_CLASSOF(Reduce)
  Reducer reducer = Reducer::Sum;
  std::vector<unsigned> vars; ///< reduction variables (groups included), in order
  ExprPtr body;
};

/// A builtin applied to values.
struct Apply : Expr {
  Apply() : Expr(ExprKind::Apply) {}
  TOFU_IR_CLASSOF(Apply)
  Builtin fn = Builtin::Exp;
  std::vector<ExprPtr> args;
};

/// Unary minus.
struct Neg : Expr {
  Neg() : Expr(ExprKind::Neg) {}
  TOFU_IR_CLASSOF(Neg)
  ExprPtr operand;
};

/// Arithmetic or comparison.
struct Binary : Expr {
  Binary() : Expr(ExprKind::Binary) {}
  TOFU_IR_CLASSOF(Binary)
  BinaryOp op = BinaryOp::Add;
  ExprPtr lhs, rhs;
};

#undef TOFU_IR_CLASSOF

/// Where a reduction variable's extent comes from when the file does not give it: the
/// dimension of an input that the variable indexes alone. The dimension's number is
/// `coord` plus the lengths of the groups splatted before it (`groupsBefore`).
struct ExtentSource {
  unsigned input = 0;
  unsigned coord = 0;                 ///< position in the index list
  std::vector<unsigned> groupsBefore; ///< groups splatted before that position
  unsigned fixedBefore = 0;           ///< non-group coordinates before that position
};

/// An index variable or variadic group.
struct IndexVar {
  enum class Role { Output, Reduction };
  std::string name;
  SourceLoc loc;
  Role role = Role::Output;
  bool isGroup = false;
  ExprPtr extent;                       ///< explicit `(v : K)`, a constant expression
  std::optional<ExtentSource> inferred; ///< for reduction variables without `extent`
};

/// An input's rank: `fixed` coordinates plus the lengths of the listed groups.
struct Rank {
  unsigned fixed = 0;
  std::vector<unsigned> groups; ///< sorted group variable ids (a multiset)

  bool operator==(const Rank &o) const { return fixed == o.fixed && groups == o.groups; }
  bool operator!=(const Rank &o) const { return !(*this == o); }
};

struct Attr {
  std::string name;
  SourceLoc loc;
  std::optional<int64_t> defaultValue;
};

struct Input {
  std::string name;
  SourceLoc loc;
  std::optional<Rank> rank; ///< unset when the op never reads the input
  /// Other forms of the same rank, from uses through other groups (sibling lambdas that
  /// each bind a group); instantiation solves them together.
  std::vector<Rank> otherRanks;
};

/// One output dimension stated by the shape clause: a constant expression, or (an
/// extension) output variables: `*g` for a group, `v` for one coordinate, whose extents are
/// those of the input dimensions they index exactly.
struct ShapeDim {
  bool isGroup = false; ///< `*g`
  bool isVar = false;   ///< `v`
  unsigned var = 0;     ///< the output group or variable
  ExprPtr expr;         ///< otherwise
  SourceLoc loc;
};

/// `grad input = call`.
struct Grad {
  unsigned input = 0;
  SourceLoc loc;
  std::unique_ptr<OpCall> call;
};

/// A checked op: the unit that analysis instantiates and partitions.
class OpDef {
public:
  std::string name;
  std::string file; ///< the file it is declared in
  SourceLoc loc;
  std::vector<Attr> attrs;
  std::vector<Input> inputs;
  std::vector<IndexVar> vars;       ///< every index variable and group of the op
  std::vector<unsigned> outputVars; ///< the top-level lambda's variables, in order
  ExprPtr body;                     ///< the top-level lambda's body
  std::optional<std::vector<ShapeDim>> shape;
  std::vector<Grad> grads;

  /// The output's rank: its fixed variables plus its groups.
  Rank outputRank() const;
  /// Index of the attribute / input named `n`, if any.
  std::optional<unsigned> findAttr(const std::string &n) const;
  std::optional<unsigned> findInput(const std::string &n) const;
};

/// All ops and opaque functions visible from a root file (its imports included).
struct Module {
  std::string rootFile;
  std::vector<std::string> files; ///< every file loaded, root first
  std::vector<std::unique_ptr<OpDef>> ops;
  std::vector<std::string> opaques;
  /// For each file, the imports exactly as written (printing keeps them).
  std::vector<std::pair<std::string, std::vector<std::string>>> importsByFile;
  /// For each file, the opaque names it declares.
  std::vector<std::pair<std::string, std::vector<std::string>>> opaquesByFile;

  /// The op named `name`, or null.
  const OpDef *findOp(const std::string &name) const;
  /// The ops declared in `file`, in declaration order.
  std::vector<const OpDef *> opsInFile(const std::string &file) const;
};

/// Structural equality of two expressions (locations ignored; called ops compared by name).
bool equal(const Expr &a, const Expr &b);
/// Structural equality of two ops (locations and file ignored).
bool equal(const OpDef &a, const OpDef &b);

/// Calls `fn` on `e` and every sub-expression (coordinates, arguments and bodies), parents
/// before children.
void walk(const Expr &e, const std::function<void(const Expr &)> &fn);

/// Calls `fn` on each direct sub-expression slot of `e` (coordinate expressions, arguments,
/// bodies, operands), so a rewrite can change or replace it.
void forEachChild(Expr &e, const std::function<void(ExprPtr &)> &fn);

/// Calls `fn` on each direct sub-expression of `e`, in walk's order (for passes that decide
/// per node whether to look further, as walk does not).
void forEachChildExpr(const Expr &e, const std::function<void(const Expr &)> &fn);

/// The operands of a chain of `op` (`a * b * c` for Mul: a, b, c; `e` itself when it is not
/// one), left to right, appended to `out`.
void operandsOf(const Expr &e, BinaryOp op, std::vector<const Expr *> &out);

} // namespace tofu::ir

#endif // TOFU_ANALYSIS_IR_H
