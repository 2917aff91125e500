// The TDL abstract syntax tree: what a .tdl file says, before any name is resolved.
#ifndef TOFU_GRAMMAR_AST_H
#define TOFU_GRAMMAR_AST_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grammar/diagnostics.h"
#include "llvm/Support/Casting.h"

namespace tofu::ast {

/// Every expression kind, listed once; the enum, names and casting support derive from it.
#define TOFU_AST_EXPR_KINDS(X)                                                                     \
  X(IntLit)                                                                                        \
  X(FloatLit)                                                                                      \
  X(Name)                                                                                          \
  X(ExtentOf)                                                                                      \
  X(Index)                                                                                         \
  X(Call)                                                                                          \
  X(Lambda)                                                                                        \
  X(Neg)                                                                                           \
  X(Binary)

enum class ExprKind {
#define TOFU_X(K) K,
  TOFU_AST_EXPR_KINDS(TOFU_X)
#undef TOFU_X
};

/// The name of an expression kind ("IntLit", ...), for debugging output.
const char *exprKindName(ExprKind k);

/// Binary operators of TDL, arithmetic and comparison.
enum class BinaryOp { Add, Sub, Mul, Div, Mod, Eq, Ne, Lt, Le, Gt, Ge };

/// The source spelling of an operator ("+", "<=", ...).
const char *binaryOpSpelling(BinaryOp op);
/// True for == != < <= > >=.
bool isComparison(BinaryOp op);

/// Base of all expressions. `text` is the expression's source text, quoted by diagnostics.
class Expr {
public:
  virtual ~Expr() = default;
  ExprKind kind() const { return kind_; }

  SourceLoc loc;   ///< the expression's position (a binary expression's operator)
  SourceLoc begin; ///< where its text starts
  std::string text;

protected:
  explicit Expr(ExprKind k) : kind_(k) {}

private:
  ExprKind kind_;
};

using ExprPtr = std::unique_ptr<Expr>;

#define TOFU_AST_CLASSOF(K)                                                                        \
  static bool classof(const Expr *e) { return e->kind() == ExprKind::K; }

/// An integer literal: `42`.
struct IntLit : Expr {
  IntLit() : Expr(ExprKind::IntLit) {}
  TOFU_AST_CLASSOF(IntLit)
  int64_t value = 0;
};

/// A float literal: `1.5`, `1e-5`, `2.`.
struct FloatLit : Expr {
  FloatLit() : Expr(ExprKind::FloatLit) {}
  TOFU_AST_CLASSOF(FloatLit)
  double value = 0;
};

/// A bare identifier: index variable, attribute, input, `inf`, `nan`.
struct Name : Expr {
  Name() : Expr(ExprKind::Name) {}
  TOFU_AST_CLASSOF(Name)
  std::string name;
};

/// `x.d`: the extent of dimension d of input x.
struct ExtentOf : Expr {
  ExtentOf() : Expr(ExprKind::ExtentOf) {}
  TOFU_AST_CLASSOF(ExtentOf)
  ExprPtr base; ///< what precedes the '.', a Name when well formed
  int64_t dim = 0;
};

/// One coordinate of an index list: an expression, a slice `:` or a group splat `*g`.
struct IndexItem {
  enum class Kind { Expr, Slice, Group };
  Kind kind = Kind::Expr;
  SourceLoc loc;
  ExprPtr expr;      ///< for Kind::Expr
  std::string group; ///< for Kind::Group
};

/// `base[i1, ..., ik]`: a tensor element, or an element of a call's result.
struct Index : Expr {
  Index() : Expr(ExprKind::Index) {}
  TOFU_AST_CLASSOF(Index)
  ExprPtr base;
  std::vector<IndexItem> items;
};

/// `name = value` inside a call's `<...>`.
struct AttrArg {
  std::string name;
  SourceLoc loc;
  ExprPtr value;
};

/// `name = length` inside a call's `{...}` (an extension: explicit group lengths).
struct GroupArg {
  std::string name;
  SourceLoc loc;
  int64_t length = 0;
};

/// `f<attrs>{groups}(args)`: a builtin, reducer, opaque function or op call.
struct Call : Expr {
  Call() : Expr(ExprKind::Call) {}
  TOFU_AST_CLASSOF(Call)
  std::string callee;
  SourceLoc calleeLoc;
  std::vector<AttrArg> attrs;
  std::vector<GroupArg> groups;
  std::vector<ExprPtr> args;
  bool hasAttrList = false;
};

/// A lambda parameter: `v`, `(v : K)` or `*g`.
struct LambdaParam {
  enum class Kind { Plain, Extent, Group };
  Kind kind = Kind::Plain;
  std::string name;
  SourceLoc loc;
  ExprPtr extent; ///< for Kind::Extent
};

/// `lambda p1, ..., pn: body`.
struct Lambda : Expr {
  Lambda() : Expr(ExprKind::Lambda) {}
  TOFU_AST_CLASSOF(Lambda)
  std::vector<LambdaParam> params;
  ExprPtr body;
};

/// Unary minus.
struct Neg : Expr {
  Neg() : Expr(ExprKind::Neg) {}
  TOFU_AST_CLASSOF(Neg)
  ExprPtr operand;
};

/// `lhs op rhs`; `loc` is the operator's position.
struct Binary : Expr {
  Binary() : Expr(ExprKind::Binary) {}
  TOFU_AST_CLASSOF(Binary)
  BinaryOp op = BinaryOp::Add;
  ExprPtr lhs, rhs;
};

#undef TOFU_AST_CLASSOF

/// `import "path";`
struct ImportDecl {
  std::string path; ///< unquoted, escapes resolved
  SourceLoc loc;    ///< of the string
};

/// A name declared by `opaque A, B;`
struct OpaqueName {
  std::string name;
  SourceLoc loc;
};

/// An attribute of an op: `name` or `name = default`.
struct AttrParam {
  std::string name;
  SourceLoc loc;
  std::optional<int64_t> defaultValue;
};

/// A tensor input of an op.
struct InputParam {
  std::string name;
  SourceLoc loc;
};

/// One entry of the output-shape clause: an expression or `*g`.
struct ShapeDim {
  bool isGroup = false;
  std::string group;
  SourceLoc loc;
  ExprPtr expr;
};

/// `grad input = call`.
struct GradItem {
  std::string input;
  SourceLoc loc;
  ExprPtr value;
};

/// `op name<attrs>(inputs) -> [shape] = body grad ...;`
struct OpDecl {
  std::string name;
  SourceLoc loc;
  std::vector<AttrParam> attrs;
  std::vector<InputParam> inputs;
  bool hasShape = false;
  std::vector<ShapeDim> shape;
  ExprPtr body;
  std::vector<GradItem> grads;
};

/// One parsed .tdl file.
struct File {
  std::string path;
  std::vector<ImportDecl> imports;
  std::vector<OpaqueName> opaques;
  std::vector<OpDecl> ops;
};

} // namespace tofu::ast

#endif // TOFU_GRAMMAR_AST_H
