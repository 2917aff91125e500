// Unit tests of the parser and AST builder: structure, precedence, literals, recovery.
#include "grammar/parser.h"

#include "gtest/gtest.h"

namespace tofu {
namespace {

using llvm::cast;

struct Parsed {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  std::optional<ast::File> file;
};

std::unique_ptr<Parsed> parse(const std::string &text) {
  auto p = std::make_unique<Parsed>();
  auto f = parseTdl("t.tdl", text, p->diags);
  if (f)
    p->file = std::move(*f);
  else
    llvm::consumeError(f.takeError());
  return p;
}

const ast::Expr &bodyOf(const Parsed &p, size_t op = 0) {
  return *cast<ast::Lambda>(*p.file->ops.at(op).body).body;
}

TEST(Parser, DeclarationsOfEveryKind) {
  auto p = parse("import \"nn/conv.tdl\";\nopaque Cholesky, MatrixInverse;\n"
                 "op pad<P = -1, Q>(x, y) -> [x.0, *g] = lambda *g, i: x[*g, i - P] "
                 "grad x = f(dOut), grad y = g2(out);");
  ASSERT_TRUE(p->file);
  ASSERT_EQ(p->file->imports.size(), 1u);
  EXPECT_EQ(p->file->imports[0].path, "nn/conv.tdl");
  EXPECT_EQ(p->file->imports[0].loc, (SourceLoc{1, 8}));
  ASSERT_EQ(p->file->opaques.size(), 2u);
  EXPECT_EQ(p->file->opaques[1].name, "MatrixInverse");
  const ast::OpDecl &op = p->file->ops.at(0);
  EXPECT_EQ(op.name, "pad");
  ASSERT_EQ(op.attrs.size(), 2u);
  EXPECT_EQ(op.attrs[0].defaultValue, -1);
  EXPECT_FALSE(op.attrs[1].defaultValue);
  EXPECT_EQ(op.inputs.size(), 2u);
  ASSERT_TRUE(op.hasShape);
  EXPECT_TRUE(op.shape[1].isGroup);
  EXPECT_EQ(cast<ast::ExtentOf>(*op.shape[0].expr).dim, 0);
  const auto &lam = cast<ast::Lambda>(*op.body);
  EXPECT_EQ(lam.params[0].kind, ast::LambdaParam::Kind::Group);
  ASSERT_EQ(op.grads.size(), 2u);
  EXPECT_EQ(op.grads[1].input, "y");
}

TEST(Parser, PrecedenceAndAssociativity) {
  auto p = parse("op f(a) = lambda i: a[i] - a[i] * 2 + -a[i] < 3;");
  ASSERT_TRUE(p->file);
  const auto &cmp = cast<ast::Binary>(bodyOf(*p));
  EXPECT_EQ(cmp.op, ast::BinaryOp::Lt);
  const auto &add = cast<ast::Binary>(*cmp.lhs); // (a - a*2) + (-a)
  EXPECT_EQ(add.op, ast::BinaryOp::Add);
  EXPECT_EQ(add.loc, (SourceLoc{1, 37}));
  EXPECT_EQ(add.text, "a[i] - a[i] * 2 + -a[i]");
  const auto &sub = cast<ast::Binary>(*add.lhs);
  EXPECT_EQ(sub.op, ast::BinaryOp::Sub);
  EXPECT_EQ(cast<ast::Binary>(*sub.rhs).op, ast::BinaryOp::Mul);
  EXPECT_TRUE(llvm::isa<ast::Neg>(*add.rhs));
}

TEST(Parser, LiteralsAndNames) {
  auto p = parse("op f(a) = lambda i: 1.5 + 1e-5 + 2. + 7 + inf + a.1;");
  ASSERT_TRUE(p->file);
  // ((((1.5 + 1e-5) + 2.) + 7) + inf) + a.1
  const auto *e = &bodyOf(*p);
  EXPECT_EQ(cast<ast::ExtentOf>(*cast<ast::Binary>(*e).rhs).dim, 1);
  e = cast<ast::Binary>(*e).lhs.get();
  EXPECT_EQ(cast<ast::Name>(*cast<ast::Binary>(*e).rhs).name, "inf");
  e = cast<ast::Binary>(*e).lhs.get();
  EXPECT_EQ(cast<ast::IntLit>(*cast<ast::Binary>(*e).rhs).value, 7);
  e = cast<ast::Binary>(*e).lhs.get();
  EXPECT_EQ(cast<ast::FloatLit>(*cast<ast::Binary>(*e).rhs).value, 2.0);
  e = cast<ast::Binary>(*e).lhs.get();
  EXPECT_EQ(cast<ast::FloatLit>(*cast<ast::Binary>(*e).lhs).value, 1.5);
  EXPECT_EQ(cast<ast::FloatLit>(*cast<ast::Binary>(*e).rhs).value, 1e-5);
}

TEST(Parser, CallsWithAttributesGroupsSlicesAndExtents) {
  auto p = parse("op f(x, m) = lambda n, i: conv<sh = 2, sw = 1 + 1>{g = 3}(x, m)[n, i] + "
                 "C(m[n, :, :])[i, i] + Sum(lambda (k : 3), *r: x[*r, k]);");
  ASSERT_TRUE(p->file) << "parse failed";
  const auto &outer = cast<ast::Binary>(bodyOf(*p));
  const auto &inner = cast<ast::Binary>(*outer.lhs);
  const auto &convIx = cast<ast::Index>(*inner.lhs);
  const auto &conv = cast<ast::Call>(*convIx.base);
  EXPECT_EQ(conv.callee, "conv");
  ASSERT_EQ(conv.attrs.size(), 2u);
  EXPECT_EQ(conv.attrs[1].name, "sw");
  ASSERT_EQ(conv.groups.size(), 1u);
  EXPECT_EQ(conv.groups[0].length, 3);
  const auto &cIx = cast<ast::Index>(*inner.rhs);
  const auto &sliceArg = cast<ast::Index>(*cast<ast::Call>(*cIx.base).args[0]);
  EXPECT_EQ(sliceArg.items[1].kind, ast::IndexItem::Kind::Slice);
  const auto &sum = cast<ast::Call>(*outer.rhs);
  const auto &lam = cast<ast::Lambda>(*sum.args[0]);
  EXPECT_EQ(lam.params[0].kind, ast::LambdaParam::Kind::Extent);
  EXPECT_EQ(lam.params[1].kind, ast::LambdaParam::Kind::Group);
}

TEST(Parser, CommentsAndWhitespaceAreInsignificant) {
  auto p = parse("# header\nop   f(a)#c\n=\n  lambda i :   # more\n a[ i ]\n ;\n");
  ASSERT_TRUE(p->file);
  EXPECT_EQ(p->file->ops[0].loc, (SourceLoc{2, 6}));
  EXPECT_EQ(bodyOf(*p).text, "a[ i ]");
}

TEST(Parser, RecoversToReportSeveralSyntaxErrors) {
  auto p = parse("op a(x) = lambda i: x[i] +;\nop b(x) = lambda i x[i];\nop c = ;\n");
  EXPECT_FALSE(p->file);
  EXPECT_GE(p->diags.errorCount(), 3u);
  for (const Diagnostic &d : p->diags.diagnostics())
    EXPECT_TRUE(d.loc.isValid()) << d.str();
}

TEST(Parser, EmptyFileIsValid) {
  auto p = parse("");
  ASSERT_TRUE(p->file);
  EXPECT_TRUE(p->file->ops.empty());
}

TEST(Parser, NestingLimitProtectsTheStack) {
  std::string deep = "op a(x) = lambda i: " + std::string(5000, '-') + "x[i];";
  auto p = parse(deep);
  EXPECT_FALSE(p->file);
  ASSERT_EQ(p->diags.errorCount(), 1u);
  EXPECT_EQ(p->diags.diagnostics()[0].message, "expression nests deeper than 200 levels");

  std::string lambdas = "op a(x) = lambda i: ";
  for (int k = 0; k < 300; ++k)
    lambdas += "Sum(lambda k" + std::to_string(k) + ": ";
  auto q = parse(lambdas + "x[i]" + std::string(300, ')') + ";");
  EXPECT_FALSE(q->file);

  std::string longDecl = "op a(x) = lambda i: x[i]";
  for (int k = 0; k < 3000; ++k)
    longDecl += " + x[i]";
  auto r = parse(longDecl + ";");
  EXPECT_FALSE(r->file);
  EXPECT_EQ(r->diags.diagnostics()[0].message, "declaration is longer than 4000 tokens");
}

} // namespace
} // namespace tofu
