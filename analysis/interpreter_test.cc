// The TDL interpreter on values computed by hand.
#include "analysis/interpreter.h"

#include <cmath>

#include "analysis/sema.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

struct Run {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  std::optional<ir::Module> module;
  std::optional<InstOp> op;
  std::optional<Shapes> shapes;
};

std::unique_ptr<Run> prepare(const std::string &text, const std::string &name,
                             const std::vector<std::vector<int64_t>> &inputShapes,
                             std::optional<std::vector<int64_t>> out = std::nullopt) {
  auto r = std::make_unique<Run>();
  auto m = loadModuleFromText("t.tdl", text, r->diags);
  if (!m) {
    ADD_FAILURE() << llvm::toString(m.takeError());
    return r;
  }
  r->module = std::move(*m);
  auto op = instantiate(*r->module->findOp(name), {});
  if (!op) {
    ADD_FAILURE() << llvm::toString(op.takeError());
    return r;
  }
  r->op = std::move(*op);
  auto s = concreteShapes(*r->op, inputShapes, out);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return r;
  }
  r->shapes = std::move(*s);
  return r;
}

Tensor tensor(std::vector<int64_t> shape, std::vector<double> data) {
  Tensor t(std::move(shape));
  t.data = std::move(data);
  return t;
}

TEST(Interpreter, MatmulWholeAndPartial) {
  auto r = prepare("op mm(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j]);", "mm",
                   {{2, 3}, {3, 2}});
  Tensor a = tensor({2, 3}, {1, 2, 3, 4, 5, 6}), b = tensor({3, 2}, {1, 0, 0, 1, 1, 1});
  auto whole = evaluate(*r->op, *r->shapes, {&a, &b}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(whole));
  EXPECT_EQ(whole->data, (std::vector<double>{4, 5, 10, 11}));
  // Reducing over k in [0, 1) only: the partial product of the first column of A.
  std::vector<Range> ranges = fullRanges(*r->shapes);
  ranges[2] = {0, 1};
  auto part = evaluate(*r->op, *r->shapes, {&a, &b}, ranges);
  ASSERT_TRUE(static_cast<bool>(part));
  EXPECT_EQ(part->data, (std::vector<double>{1, 0, 4, 0}));
}

TEST(Interpreter, OutOfRangeReadsAreZero) {
  auto r = prepare("op pad<P = 1>(x) -> [x.0 + 2 * P] = lambda i: x[i - P] + 10;", "pad", {{3}});
  Tensor x = tensor({3}, {1, 2, 3});
  auto out = evaluate(*r->op, *r->shapes, {&x}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(out->data, (std::vector<double>{10, 11, 12, 13, 10}));
}

TEST(Interpreter, PoisonPropagatesThroughEveryReducer) {
  for (const char *reducer : {"Sum", "Max", "Min", "Prod"}) {
    auto r = prepare(std::string("op red(x) = lambda i: ") + reducer + "(lambda k: x[i, k]);",
                     "red", {{1, 3}});
    Tensor x = tensor({1, 3}, {1, std::nan(""), 3});
    auto out = evaluate(*r->op, *r->shapes, {&x}, fullRanges(*r->shapes));
    ASSERT_TRUE(static_cast<bool>(out));
    EXPECT_TRUE(std::isnan(out->data[0])) << reducer;
  }
  auto r = prepare("op mx(a, b) = lambda i: max(a[i], b[i]) + min(a[i], b[i]);", "mx", {{1}, {1}});
  Tensor a = tensor({1}, {1}), b = tensor({1}, {std::nan("")});
  auto out = evaluate(*r->op, *r->shapes, {&a, &b}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_TRUE(std::isnan(out->data[0]));
}

TEST(Interpreter, DataDependentIndicesAndSelect) {
  auto r = prepare("op emb(ids, W) = lambda i, d: W[ids[i], d];\n"
                   "op pick(c, a) = lambda i: select(c[i] > 0, a[i], -1);",
                   "emb", {{3}, {4, 2}});
  Tensor ids = tensor({3}, {3, 0, 7}), w = tensor({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  auto out = evaluate(*r->op, *r->shapes, {&ids, &w}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(out->data, (std::vector<double>{6, 7, 0, 1, 0, 0})); // id 7 is out of range
}

TEST(Interpreter, OpaqueCholeskyAndInverse) {
  auto r = prepare("opaque Cholesky, MatrixInverse;\n"
                   "op chol(m) = lambda b, i, j: Cholesky(m[b, :, :])[i, j];\n"
                   "op inv(m) = lambda b, i, j: MatrixInverse(m[b, :, :])[i, j];",
                   "chol", {{1, 2, 2}}, std::vector<int64_t>{1, 2, 2});
  Tensor m = tensor({1, 2, 2}, {4, 2, 2, 5}); // L = [[2, 0], [1, 2]]
  auto out = evaluate(*r->op, *r->shapes, {&m}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(out->data, (std::vector<double>{2, 0, 1, 2}));
  auto inv = instantiate(*r->module->findOp("inv"), {});
  ASSERT_TRUE(static_cast<bool>(inv));
  auto out2 = evaluate(*inv, *r->shapes, {&m}, fullRanges(*r->shapes));
  ASSERT_TRUE(static_cast<bool>(out2));
  std::vector<double> want{5.0 / 16, -2.0 / 16, -2.0 / 16, 4.0 / 16};
  for (int k = 0; k < 4; ++k)
    EXPECT_NEAR(out2->data[k], want[k], 1e-12);
}

TEST(Interpreter, UnknownOpaqueFunctionIsAnError) {
  auto r = prepare("opaque Frob;\nop f(m) = lambda b, i: Frob(m[b, :])[i];", "f", {{2, 2}},
                   std::vector<int64_t>{2, 2});
  Tensor m(std::vector<int64_t>{2, 2}, 1.0);
  auto out = evaluate(*r->op, *r->shapes, {&m}, fullRanges(*r->shapes));
  ASSERT_FALSE(static_cast<bool>(out));
  EXPECT_EQ(llvm::toString(out.takeError()),
            "op 'f': no implementation of opaque function 'Frob' is registered");
}

} // namespace
} // namespace tofu
