// Unit tests of the semantic checks: what the checked IR records for the TDL.md examples.
#include "analysis/sema.h"

#include "analysis/printer.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;

struct Checked {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  std::optional<ir::Module> module;
  std::string errors;

  const ir::OpDef &op(const std::string &name) const {
    const ir::OpDef *op = module->findOp(name);
    EXPECT_NE(op, nullptr) << name;
    return *op;
  }
};

std::unique_ptr<Checked> check(const std::string &text) {
  auto c = std::make_unique<Checked>();
  auto m = loadModuleFromText("test.tdl", text, c->diags);
  for (const Diagnostic &d : c->diags.diagnostics())
    c->errors += d.str() + "\n";
  if (m)
    c->module = std::move(*m);
  else
    llvm::consumeError(m.takeError());
  return c;
}

unsigned varNamed(const ir::OpDef &op, const std::string &name) {
  for (unsigned i = 0; i < op.vars.size(); ++i)
    if (op.vars[i].name == name)
      return i;
  ADD_FAILURE() << "no variable " << name;
  return 0;
}

ir::Rank rank(unsigned fixed, std::vector<unsigned> groups = {}) { return {fixed, groups}; }

TEST(Sema, Conv1dRanksAndInferredExtents) {
  auto c = check("op conv1d(data, filters) = lambda b, co, x: Sum(lambda ci, dx: "
                 "data[b, ci, x + dx] * filters[ci, co, dx]);");
  ASSERT_TRUE(c->module) << c->errors;
  const ir::OpDef &op = c->op("conv1d");
  EXPECT_EQ(op.inputs[0].rank, rank(3));
  EXPECT_EQ(op.inputs[1].rank, rank(3));
  EXPECT_EQ(op.outputVars.size(), 3u);
  const ir::IndexVar &ci = op.vars[varNamed(op, "ci")];
  ASSERT_TRUE(ci.inferred);
  EXPECT_EQ(ci.role, ir::IndexVar::Role::Reduction);
  EXPECT_EQ(ci.inferred->input, 0u); // data, dimension 1
  EXPECT_EQ(ci.inferred->coord, 1u);
  const ir::IndexVar &dx = op.vars[varNamed(op, "dx")];
  ASSERT_TRUE(dx.inferred); // not from data's 'x + dx', but from filters' 'dx'
  EXPECT_EQ(dx.inferred->input, 1u);
  EXPECT_EQ(dx.inferred->coord, 2u);
  const auto *red = dyn_cast<ir::Reduce>(op.body.get());
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->reducer, ir::Reducer::Sum);
}

TEST(Sema, ExplicitExtentsAreKeptAndNotInferred) {
  auto c = check("op maxpool2d<k = 2, s = 2>(data) = lambda n, c, y, x: Max(lambda (dy : k), "
                 "(dx : k): data[n, c, y * s + dy, x * s + dx]);");
  ASSERT_TRUE(c->module) << c->errors;
  const ir::OpDef &op = c->op("maxpool2d");
  const ir::IndexVar &dy = op.vars[varNamed(op, "dy")];
  ASSERT_TRUE(dy.extent);
  EXPECT_FALSE(dy.inferred);
  EXPECT_EQ(cast<ir::AttrRef>(*dy.extent).attr, 0u);
  EXPECT_EQ(op.attrs[1].defaultValue, 2);
}

TEST(Sema, CoordinatesAreClassified) {
  auto c = check("opaque Cholesky;\n"
                 "op embedding(ids, W) = lambda i, d: W[ids[i], d];\n"
                 "op batch_cholesky(m) = lambda b, i, j: Cholesky(m[b, :, :])[i, j];\n"
                 "op shift_two(A) = lambda i: A[i + 2];\n");
  ASSERT_TRUE(c->module) << c->errors;
  const auto &read = cast<ir::Read>(*c->op("embedding").body);
  EXPECT_EQ(read.coords[0].kind, ir::Coord::Kind::DataDependent);
  EXPECT_EQ(read.coords[1].kind, ir::Coord::Kind::Affine);
  EXPECT_EQ(c->op("embedding").inputs[0].rank, rank(1));

  const auto &call = cast<ir::OpaqueCall>(*c->op("batch_cholesky").body);
  EXPECT_EQ(call.function, "Cholesky");
  const auto &arg = cast<ir::Read>(*call.args[0]);
  ASSERT_EQ(arg.coords.size(), 3u);
  EXPECT_EQ(arg.coords[0].kind, ir::Coord::Kind::Affine);
  EXPECT_EQ(arg.coords[1].kind, ir::Coord::Kind::Slice);
  EXPECT_EQ(arg.coords[2].kind, ir::Coord::Kind::Slice);
  EXPECT_EQ(c->op("batch_cholesky").inputs[0].rank, rank(3));

  const ir::OpDef &shift = c->op("shift_two");
  EXPECT_EQ(printExpr(shift, *shift.body), "A[(i + 2)]");
}

TEST(Sema, VariadicGroupsGiveSymbolicRanks) {
  auto c = check("op sum_axis(x) = lambda *pre, *post: Sum(lambda r: x[*pre, r, *post]);\n"
                 "op add_bcast_row(a, b) = lambda *i, j: a[*i, j] + b[j];");
  ASSERT_TRUE(c->module) << c->errors;
  const ir::OpDef &op = c->op("sum_axis");
  unsigned pre = varNamed(op, "pre"), post = varNamed(op, "post");
  EXPECT_TRUE(op.vars[pre].isGroup);
  EXPECT_EQ(op.inputs[0].rank, rank(1, {pre, post}));
  EXPECT_EQ(op.outputRank(), rank(0, {pre, post}));
  const ir::IndexVar &r = op.vars[varNamed(op, "r")];
  ASSERT_TRUE(r.inferred);
  EXPECT_EQ(r.inferred->coord, 1u);
  EXPECT_EQ(r.inferred->groupsBefore, std::vector<unsigned>{pre});
  EXPECT_EQ(r.inferred->fixedBefore, 0u);

  const ir::OpDef &bc = c->op("add_bcast_row");
  EXPECT_EQ(bc.inputs[0].rank, rank(1, {varNamed(bc, "i")}));
  EXPECT_EQ(bc.inputs[1].rank, rank(1));
}

TEST(Sema, GradClausesCallOpsWithOutAndDOut) {
  auto c = check("op matmul(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j])\n"
                 "  grad A = matmul_nt(dOut, B), grad B = matmul_tn(A, dOut);\n"
                 "op matmul_nt(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[j, k]);\n"
                 "op matmul_tn(A, B) = lambda i, j: Sum(lambda k: A[k, i] * B[k, j]);\n");
  ASSERT_TRUE(c->module) << c->errors;
  const ir::OpDef &op = c->op("matmul");
  ASSERT_EQ(op.grads.size(), 2u);
  EXPECT_EQ(op.grads[0].input, 0u);
  EXPECT_EQ(op.grads[0].call->callee->name, "matmul_nt");
  EXPECT_FALSE(op.grads[0].call->indexed);
  EXPECT_EQ(cast<ir::TensorRef>(*op.grads[0].call->args[0]).source, ir::TensorRef::Source::DOut);
  const auto &b = cast<ir::TensorRef>(*op.grads[0].call->args[1]);
  EXPECT_EQ(b.source, ir::TensorRef::Source::Input);
  EXPECT_EQ(b.input, 1u);
  EXPECT_EQ(op.grads[1].input, 1u);
}

TEST(Sema, WholeTensorArgumentsTakeTheCalleeRank) {
  auto c = check("op mm(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j]);\n"
                 "op square(x) = lambda i, j: mm(x, x)[i, j];\n");
  ASSERT_TRUE(c->module) << c->errors;
  EXPECT_EQ(c->op("square").inputs[0].rank, rank(2));
}

TEST(Sema, SiblingLambdasMayReuseNames) {
  auto c = check("op f(a, b) = lambda i: Sum(lambda k: a[i, k]) + Sum(lambda k: b[k, i]);");
  ASSERT_TRUE(c->module) << c->errors;
  EXPECT_EQ(c->op("f").vars.size(), 3u);
}

TEST(Sema, ReportsEveryErrorOfAFileNotJustTheFirst) {
  auto c = check("op a(x) = lambda i: x[i * i];\n"
                 "op b(x) = lambda i: y[i];\n"
                 "op c(x) = lambda i: x[i] + x[i, i];\n");
  EXPECT_FALSE(c->module);
  EXPECT_EQ(c->diags.errorCount(), 3u) << c->errors;
}

TEST(Sema, OpsMayBeDeclaredAfterTheirCallers) {
  auto c = check("op twice(x) = lambda i: dbl(x)[i];\n"
                 "op dbl(x) = lambda i: x[i] * 2;\n");
  ASSERT_TRUE(c->module) << c->errors;
  const auto &call = cast<ir::OpCall>(*c->op("twice").body);
  EXPECT_EQ(call.callee, &c->op("dbl"));
}

TEST(Sema, ShapeClauseChecksAgainstTheLambda) {
  auto c = check("op pad1d<P>(x) -> [x.0, x.1 + 2 * P] = lambda i, j: x[i, j - P];\n"
                 "op relu_any(x) -> [*i] = lambda *i: relu(x[*i]);\n");
  ASSERT_TRUE(c->module) << c->errors;
  ASSERT_TRUE(c->op("pad1d").shape);
  EXPECT_EQ(c->op("pad1d").shape->size(), 2u);
  EXPECT_TRUE((*c->op("relu_any").shape)[0].isGroup);
}

TEST(Diagnostics, PrintTheSourceLineAndACaretUnderTheColumn) {
  auto c = check("op a(x) = lambda i, j: x[i * j];\n");
  ASSERT_FALSE(c->module);
  std::string out;
  llvm::raw_string_ostream os(out);
  c->diags.print(os);
  EXPECT_EQ(os.str(), "test.tdl:1:26: error: index expression 'i * j' is not affine: it "
                      "multiplies index variables\n"
                      "op a(x) = lambda i, j: x[i * j];\n"
                      "                         ^\n");
}

TEST(Diagnostics, CaretKeepsTabsAndCountsCodePoints) {
  auto c = check("# \xc3\xa9t\xc3\xa9\n\top a(x) = lambda i: \xce\xbb + x[i];\n");
  ASSERT_FALSE(c->module);
  std::string out;
  llvm::raw_string_ostream os(out);
  c->diags.print(os);
  EXPECT_EQ(os.str(), "test.tdl:2:22: error: unexpected character '\xce\xbb'\n"
                      "\top a(x) = lambda i: \xce\xbb + x[i];\n"
                      "\t                    ^\n");
}

} // namespace
} // namespace tofu
