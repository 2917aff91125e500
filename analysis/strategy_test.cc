// Strategy discovery against hand-derived expectations (paper section 4.2, TDL.md section 7).
#include "analysis/strategy.h"

#include "analysis/sema.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// Checks one op from TDL text and analyses it.
struct Analysed {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  std::optional<ir::Module> module;
  std::optional<StrategyTable> table;
};

std::unique_ptr<Analysed> analyse(const std::string &text, const std::string &op,
                                  Instantiation inst = {}) {
  auto a = std::make_unique<Analysed>();
  auto m = loadModuleFromText("t.tdl", text, a->diags);
  if (!m) {
    llvm::consumeError(m.takeError());
    for (const Diagnostic &d : a->diags.diagnostics())
      ADD_FAILURE() << d.str();
    return a;
  }
  a->module = std::move(*m);
  auto t = analyzeOp(*a->module->findOp(op), inst);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return a;
  }
  a->table = std::move(*t);
  return a;
}

/// "b split full full | filters full ..." for one strategy: the accesses of every input.
std::string accesses(const StrategyTable &t, const Strategy &s) {
  std::string out;
  for (unsigned i = 0; i < s.inputs.size(); ++i) {
    out += (i ? " | " : "") + t.op.inputs[i].name;
    for (Access a : s.inputs[i].access)
      out += std::string(" ") + accessName(a);
  }
  return out;
}

const Strategy &strategyOn(const StrategyTable &t, const std::string &var) {
  for (const Strategy &s : t.strategies)
    if (t.op.vars[s.var].name == var)
      return s;
  ADD_FAILURE() << "no strategy on " << var;
  return t.strategies.front();
}

/// checkStrategy(t, "x", "data full full halo | filters full full full",
///               {"data[0:B, 0:CI, 0:X/2 + DX - 1]", ...}) reads like the table in the paper.
void checkStrategy(const StrategyTable &t, const std::string &var, const std::string &access,
                   const std::vector<std::string> &regions0 = {}) {
  const Strategy &s = strategyOn(t, var);
  EXPECT_EQ(accesses(t, s), access) << "split on " << var;
  for (unsigned i = 0; i < regions0.size(); ++i)
    EXPECT_EQ(t.regionString(i, s.inputs[i].worker0), regions0[i]) << "split on " << var;
}

std::vector<std::string> kinds(const StrategyTable &t) {
  std::vector<std::string> out;
  for (const Strategy &s : t.strategies)
    out.push_back((s.kind == Strategy::Kind::Output ? "output " : "reduction ") +
                  t.op.vars[s.var].name);
  return out;
}

TEST(Strategies, MatmulHasThree) {
  auto a = analyse("op matmul(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j]);", "matmul");
  const StrategyTable &t = *a->table;
  EXPECT_EQ(kinds(t), (std::vector<std::string>{"output i", "output j", "reduction k"}));
  checkStrategy(t, "i", "A split full | B full full", {"A[0:I/2, 0:K]", "B[0:K, 0:J]"});
  checkStrategy(t, "j", "A full full | B full split", {"A[0:I, 0:K]", "B[0:K, 0:J/2]"});
  checkStrategy(t, "k", "A full split | B split full", {"A[0:I, 0:K/2]", "B[0:K/2, 0:J]"});
  EXPECT_EQ(t.strategies[2].reducer, ir::Reducer::Sum);
  EXPECT_EQ(t.regionString(0, t.strategies[2].inputs[0].worker1), "A[0:I, K/2:K]");
  EXPECT_FALSE(t.elementwise);
}

TEST(Strategies, Conv1dSplitsBatchAndChannelsAndHalosTheWindow) {
  auto a = analyse("op conv1d(data, filters) = lambda b, co, x: Sum(lambda ci, dx: "
                   "data[b, ci, x + dx] * filters[ci, co, dx]);",
                   "conv1d");
  const StrategyTable &t = *a->table;
  EXPECT_EQ(kinds(t), (std::vector<std::string>{"output b", "output co", "output x", "reduction ci",
                                                "reduction dx"}));
  checkStrategy(t, "b", "data split full full | filters full full full",
                {"data[0:B/2, 0:CI, 0:X + DX - 1]", "filters[0:CI, 0:CO, 0:DX]"});
  checkStrategy(t, "co", "data full full full | filters full split full");
  // Split on x: each half of X plus DX - 1.
  checkStrategy(t, "x", "data full full halo | filters full full full",
                {"data[0:B, 0:CI, 0:X/2 + DX - 1]"});
  EXPECT_EQ(t.regionString(0, strategyOn(t, "x").inputs[0].worker1),
            "data[0:B, 0:CI, X/2:X + DX - 1]");
  checkStrategy(t, "ci", "data full split full | filters split full full");
  // Split on dx: X + DX/2 - 1 each.
  checkStrategy(t, "dx", "data full full halo | filters full full split",
                {"data[0:B, 0:CI, 0:X + DX/2 - 1]", "filters[0:CI, 0:CO, 0:DX/2]"});
}

TEST(Strategies, Conv2dWithStrideAndPadding) {
  auto a =
      analyse("op conv2d<sh = 1, sw = 1, ph = 0, pw = 0>(data, w) = lambda n, co, y, x: "
              "Sum(lambda ci, ky, kx: data[n, ci, y * sh + ky - ph, x * sw + kx - pw] * "
              "w[co, ci, ky, kx]);",
              "conv2d", Instantiation{{{"sh", 2}, {"sw", 2}, {"ph", 1}, {"pw", 1}}, {}, {}, {}});
  const StrategyTable &t = *a->table;
  // y in [0, Y/2 - 1], ky in [0, KY - 1]: rows 2y + ky - 1 in [-1, Y + KY - 4], i.e. the
  // half-open [-1, Y + KY - 3); worker 1 (y from Y/2) starts at row Y - 1.
  checkStrategy(t, "y", "data full full halo full | w full full full full",
                {"data[0:N, 0:CI, -1:Y + KY - 3, -1:2*X + KX - 3]"});
  EXPECT_EQ(t.regionString(0, strategyOn(t, "y").inputs[0].worker1),
            "data[0:N, 0:CI, Y - 1:2*Y + KY - 3, -1:2*X + KX - 3]");
  checkStrategy(t, "ci", "data full split full full | w full split full full");
  checkStrategy(t, "kx", "data full full full halo | w full full full split");
}

TEST(Strategies, ShiftTwoConcreteRegionsOfThePaper) {
  auto a = analyse("op shift_two(A) = lambda i: A[i + 2];", "shift_two");
  const StrategyTable &t = *a->table;
  checkStrategy(t, "i", "A split", {"A[2:I/2 + 2]"});
  // X = 10: worker 0 computes [0, 4] and needs A[2..6], worker 1 [5, 9] and A[7..11].
  auto shapes = concreteShapes(t.op, {{12}}, std::vector<int64_t>{10});
  ASSERT_TRUE(static_cast<bool>(shapes));
  std::vector<Range> r0 = {partOf(10, 2, 0)}, r1 = {partOf(10, 2, 1)};
  Shapes unclipped = *shapes;
  unclipped.inputs = {{100}};
  EXPECT_EQ(inputRegions(t.op, unclipped, r0)[0], (Box{{2, 7}}));
  EXPECT_EQ(inputRegions(t.op, unclipped, r1)[0], (Box{{7, 12}}));
}

TEST(Strategies, SoftmaxNeedsWholeRows) {
  auto a = analyse("op softmax(x) = lambda i, j: exp(x[i, j]) / Sum(lambda k: exp(x[i, k]));",
                   "softmax");
  const StrategyTable &t = *a->table;
  EXPECT_EQ(kinds(t), (std::vector<std::string>{"output i", "output j"})); // Sum not top-level
  checkStrategy(t, "i", "x split full", {"x[0:I/2, 0:J]"});
  checkStrategy(t, "j", "x full full", {"x[0:I, 0:J]"});
}

TEST(Strategies, BatchCholeskyIsOnlySplittableOnTheBatch) {
  auto a = analyse("opaque Cholesky;\nop batch_cholesky(m) = lambda b, i, j: "
                   "Cholesky(m[b, :, :])[i, j];",
                   "batch_cholesky");
  const StrategyTable &t = *a->table;
  EXPECT_TRUE(t.opaque);
  checkStrategy(t, "b", "m split full full", {"m[0:B/2, 0:m.1, 0:m.2]"});
  checkStrategy(t, "i", "m full full full");
  checkStrategy(t, "j", "m full full full");
}

TEST(Strategies, EmbeddingReadsTheTableWholeAlongTheLookup) {
  auto a = analyse("op embedding(ids, W) = lambda i, d: W[ids[i], d];", "embedding");
  const StrategyTable &t = *a->table;
  checkStrategy(t, "i", "ids split | W full full", {"ids[0:I/2]", "W[0:W.0, 0:D]"});
  checkStrategy(t, "d", "ids full | W full split", {"ids[0:I]", "W[0:W.0, 0:D/2]"});
}

TEST(Strategies, MaxpoolWindowEqualToStrideSplitsCleanly) {
  auto a = analyse("op maxpool2d<k = 2, s = 2>(data) = lambda n, c, y, x: Max(lambda (dy : k), "
                   "(dx : k): data[n, c, y * s + dy, x * s + dx]);",
                   "maxpool2d");
  const StrategyTable &t = *a->table;
  checkStrategy(t, "y", "data full full split full", {"data[0:N, 0:C, 0:Y, 0:2*X]"});
  checkStrategy(t, "dy", "data full full halo full");
  EXPECT_EQ(strategyOn(t, "dy").reducer, ir::Reducer::Max);
  // A window larger than the stride overlaps.
  auto b = analyse("op pool<k = 3, s = 2>(data) = lambda y: Max(lambda (dy : k): "
                   "data[y * s + dy]);",
                   "pool");
  checkStrategy(*b->table, "y", "data halo", {"data[0:Y + 1]"});
}

TEST(Strategies, TransposeSwapsTheSplitDimension) {
  auto a = analyse("op transpose(x) = lambda i, j: x[j, i];", "transpose");
  const StrategyTable &t = *a->table;
  checkStrategy(t, "i", "x full split", {"x[0:J, 0:I/2]"});
  checkStrategy(t, "j", "x split full", {"x[0:J/2, 0:I]"});
  EXPECT_FALSE(t.elementwise);
}

TEST(Strategies, BroadcastingAddAndElementwise) {
  auto a = analyse("op add_bcast_row(a, b) = lambda *i, j: a[*i, j] + b[j];\n"
                   "op add(a, b) = lambda i, j: a[i, j] + b[i, j];\n",
                   "add_bcast_row", Instantiation{{}, {{"i", 1}}, {}, {}});
  const StrategyTable &t = *a->table;
  checkStrategy(t, "i0", "a split full | b full", {"a[0:I0/2, 0:J]", "b[0:J]"});
  checkStrategy(t, "j", "a full split | b split", {"a[0:I0, 0:J/2]", "b[0:J/2]"});
  EXPECT_FALSE(t.elementwise);
  auto add = analyzeOp(*a->module->findOp("add"), {});
  ASSERT_TRUE(static_cast<bool>(add));
  EXPECT_TRUE(add->elementwise);
}

TEST(Strategies, SumAxisWithGroups) {
  const char *src = "op sum_axis(x) = lambda *pre, *post: Sum(lambda r: x[*pre, r, *post]);";
  auto a = analyse(src, "sum_axis", Instantiation{{}, {{"pre", 1}, {"post", 2}}, {}, {}});
  const StrategyTable &t = *a->table;
  EXPECT_EQ(kinds(t), (std::vector<std::string>{"output pre0", "output post0", "output post1",
                                                "reduction r"}));
  checkStrategy(t, "pre0", "x split full full full");
  checkStrategy(t, "post1", "x full full full split");
  checkStrategy(t, "r", "x full split full full", {"x[0:PRE0, 0:R/2, 0:POST0, 0:POST1]"});
  // Group lengths inferred from the input's rank: rank 2 with pre = 0 leaves post = 1.
  Instantiation byRank;
  byRank.groups = {{"pre", 0}};
  byRank.inputRanks = {2u};
  auto b = analyse(src, "sum_axis", byRank);
  EXPECT_EQ(kinds(*b->table), (std::vector<std::string>{"output post0", "reduction r"}));
}

TEST(Strategies, InlinedCallsAreAnalysedThroughTheCallee) {
  auto a = analyse("op mm(A, B) = lambda i, j: Sum(lambda k: A[i, k] * B[k, j]);\n"
                   "op mm_t(A, B) = lambda i, j: mm(A, B)[j, i];\n",
                   "mm_t");
  const StrategyTable &t = *a->table;
  EXPECT_EQ(kinds(t), (std::vector<std::string>{"output i", "output j", "reduction k"}));
  checkStrategy(t, "i", "A full full | B full split");
  checkStrategy(t, "j", "A split full | B full full");
}

TEST(Strategies, NonAffineIndexIsRejectedAtItsLocation) {
  SourceManager sources;
  DiagnosticEngine diags(sources);
  auto m = loadModuleFromText("na.tdl", "op f(x) = lambda i, j:\n  x[i * j + 1];", diags);
  ASSERT_FALSE(static_cast<bool>(m));
  llvm::consumeError(m.takeError());
  ASSERT_EQ(diags.diagnostics().size(), 1u);
  EXPECT_EQ(diags.diagnostics()[0].str(),
            "na.tdl:2:5: error: index expression 'i * j' is not affine: it multiplies index "
            "variables");
}

TEST(ConcreteRegions, NWaySplitsAndGridsCoverTheOutput) {
  auto a = analyse("op conv1d(data, filters) = lambda b, co, x: Sum(lambda ci, dx: "
                   "data[b, ci, x + dx] * filters[ci, co, dx]);",
                   "conv1d");
  const InstOp &op = a->table->op;
  // The output's x cannot be inferred from the inputs (data[.., x + dx] is not x alone).
  auto noOut = concreteShapes(op, {{6, 4, 12}, {4, 5, 3}}, std::nullopt);
  ASSERT_FALSE(static_cast<bool>(noOut));
  EXPECT_EQ(llvm::toString(noOut.takeError()),
            "op 'conv1d': the extent of output coordinate 'x' cannot be inferred from the "
            "inputs; give the output shape");
  auto shapes = concreteShapes(op, {{6, 4, 12}, {4, 5, 3}}, std::vector<int64_t>{6, 5, 10});
  ASSERT_TRUE(static_cast<bool>(shapes)) << llvm::toString(shapes.takeError());
  auto var = [&](const std::string &n) {
    for (unsigned v = 0; v < op.vars.size(); ++v)
      if (op.vars[v].name == n)
        return v;
    return 0u;
  };
  EXPECT_EQ(shapes->vars[var("x")], 10);
  EXPECT_EQ(shapes->vars[var("dx")], 3); // filters' dimension 2
  // 3-way split of x (extent 10): shares 3, 3, 4; each needs its share plus DX - 1 = 2.
  std::vector<int64_t> got;
  for (unsigned w = 0; w < 3; ++w) {
    std::vector<Range> r = fullRanges(*shapes);
    r[var("x")] = partOf(10, 3, w);
    Box data = inputRegions(op, *shapes, r)[0];
    got.push_back(data[2].lo);
    got.push_back(data[2].hi);
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 5, 3, 8, 6, 12}));
  // A 2x2 grid over (b, co): each worker reads half the batch and half the filters.
  std::vector<Range> r = fullRanges(*shapes);
  r[var("b")] = partOf(6, 2, 1);
  r[var("co")] = partOf(5, 2, 0);
  auto boxes = inputRegions(op, *shapes, r);
  EXPECT_EQ(boxes[0], (Box{{3, 6}, {0, 4}, {0, 12}}));
  EXPECT_EQ(boxes[1], (Box{{0, 4}, {0, 2}, {0, 3}}));
  WorkerCost c = workerCost(op, *shapes, r, 4);
  EXPECT_EQ(c.inputBytes, (std::vector<int64_t>{3 * 4 * 12 * 4, 4 * 2 * 3 * 4}));
  EXPECT_FALSE(c.partialOutput);
  r = fullRanges(*shapes);
  r[var("ci")] = partOf(4, 2, 0);
  EXPECT_TRUE(workerCost(op, *shapes, r, 4).partialOutput);
}

} // namespace
} // namespace tofu
