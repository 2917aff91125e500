// Tests of the cost model, the DP and the partition search.
#include "search/search.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "graph/precision.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/pipeline.h"
#include "search/minsum.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// The graph (its training step with SGD when `train`) as a search problem, through the
/// pipeline every tool runs.
Problem problemOf(Graph g, bool train = false, Precision precision = Precision::FP32) {
  PipelineOptions options;
  if (train)
    options.train = Optimizer::SGD;
  options.precision = precision;
  options.until = Stage::Problem;
  auto r = runPipeline(std::move(g), "the test graph", testLibrary(), options);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return std::move(*r->problem);
}

TensorInfo tensor(const std::string &name, std::vector<int64_t> shape,
                  TensorRole role = TensorRole::Input) {
  return testTensor(name, std::move(shape), role);
}

Node node(const std::string &name, const std::string &op, std::vector<std::string> inputs,
          std::map<std::string, int64_t> groups = {}) {
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.output = name + "_out";
  n.groups = std::move(groups);
  return n;
}

/// C = A·B with A: MxK, B: KxN (floats).
Problem matmul(int64_t M, int64_t K, int64_t N) {
  Graph g;
  EXPECT_FALSE(g.addTensor(tensor("A", {M, K})));
  EXPECT_FALSE(g.addTensor(tensor("B", {K, N}, TensorRole::Weight)));
  EXPECT_FALSE(g.addNode(node("mm", "MatMul", {"A", "B"}, {{"b", 0}})));
  g.outputs = {"mm_out"};
  return problemOf(std::move(g));
}

int strategyOf(const Problem &p, unsigned n, const std::string &name) {
  for (unsigned s = 0; s < p.nodes[n].table->strategies.size(); ++s)
    if (p.strategyName(n, int(s)) == name)
      return int(s);
  ADD_FAILURE() << "no strategy " << name;
  return -1;
}

unsigned tensorIndex(const Problem &p, const std::string &name) {
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].name == name)
      return t;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

StepChoice step(const Problem &p, unsigned parts, std::vector<int> nodes,
                std::map<std::string, int> tensors) {
  StepChoice s;
  s.parts = parts;
  s.node = std::move(nodes);
  s.tensor.assign(p.tensors.size(), -1);
  for (const auto &[name, d] : tensors)
    s.tensor[tensorIndex(p, name)] = d;
  return s;
}

TEST(CostModel, MatmulRowSplitFetchesTheOtherHalfOfB) {
  Problem p = matmul(8, 6, 4);
  // Op split on i; A and C by rows, B by rows too: each worker reads all of B and holds
  // half: 2 workers x 12 elements x 4 bytes.
  StepChoice s = step(p, 2, {strategyOf(p, 0, "i")}, {{"A", 0}, {"B", 0}, {"mm_out", 0}});
  EXPECT_EQ(CostModel(p).modelCost({s}), 2 * 12 * 4);
  EXPECT_EQ(CostModel(p).bruteForceCost({s}), 2 * 12 * 4);
  // B by columns: the same; B whole on both: nothing.
  s.tensor[tensorIndex(p, "B")] = -1;
  EXPECT_EQ(CostModel(p).modelCost({s}), 0);
}

TEST(CostModel, ReductionSplitReducesPartialOutputs) {
  Problem p = matmul(8, 6, 4);
  // Op split on k: A by columns, B by rows (all local); each worker has a partial 8x4 C
  // and owns half of C: it receives the other's 16 partial elements.
  StepChoice s = step(p, 2, {strategyOf(p, 0, "reduce k")}, {{"A", 1}, {"B", 0}, {"mm_out", 0}});
  EXPECT_EQ(CostModel(p).modelCost({s}), 2 * 16 * 4);
  // Three workers: each owns a third of C's rows and needs the two other partials of it.
  StepChoice s3 = s;
  s3.parts = 3;
  EXPECT_EQ(CostModel(p).modelCost({s3}), 2 * 32 * 4);
  // Replicated C: an all-reduce, every worker receives every other partial in full.
  s.tensor[tensorIndex(p, "mm_out")] = -1;
  EXPECT_EQ(CostModel(p).modelCost({s}), 2 * 32 * 4);
}

TEST(CostModel, RecursiveStepsComposeIntoGrids) {
  Problem p = matmul(8, 6, 4);
  // Step 1 rows, step 2 columns: a 2x2 grid of C; worker (a, b) computes C[4a:4a+4,
  // 2b:2b+2] and reads A's rows 4a..4a+3 (24 elements), holding a 4x3 block: fetches 12.
  StepChoice s1 = step(p, 2, {strategyOf(p, 0, "i")}, {{"A", 0}, {"B", -1}, {"mm_out", 0}});
  StepChoice s2 = step(p, 2, {strategyOf(p, 0, "j")}, {{"A", 1}, {"B", 1}, {"mm_out", 1}});
  EXPECT_EQ(CostModel(p).bruteForceCost({s1, s2}), 4 * 12 * 4);
  EXPECT_EQ(CostModel(p).modelCost({s1, s2}), CostModel(p).bruteForceCost({s1, s2}));
  // B cut into column halves, then halves again, while the op cuts rows then columns:
  // worker (a, b) holds column 2a + b of B and reads columns 2b, 2b + 1. Workers (0, 0)
  // and (1, 1) hold one of them (fetch 6 elements), (1, 0) and (0, 1) none (fetch 12).
  s1.tensor[tensorIndex(p, "B")] = 1;
  EXPECT_EQ(CostModel(p).bruteForceCost({s1, s2}), 4 * (4 * 12 + 6 + 12 + 12 + 6));
  EXPECT_EQ(CostModel(p).modelCost({s1, s2}), CostModel(p).bruteForceCost({s1, s2}));
}

TEST(MinSum, EqualsBruteForceOnRandomProblems) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    MinSumProblem m;
    unsigned n = 2 + rng() % 7;
    for (unsigned v = 0; v < n; ++v)
      m.addVariable(1 + rng() % 4, rng() % 3);
    unsigned factors = rng() % 14;
    for (unsigned f = 0; f < factors; ++f) {
      unsigned a = rng() % n, b = rng() % n;
      if (a == b) {
        std::vector<int64_t> u(m.domain(a));
        for (auto &x : u)
          x = rng() % 100;
        m.addUnary(a, u);
      } else {
        std::vector<int64_t> t(m.domain(a) * m.domain(b));
        for (auto &x : t)
          x = rng() % 100;
        m.addPairwise(a, b, t);
      }
    }
    m.addConstant(5);
    auto sol = m.solve();
    ASSERT_TRUE(bool(sol)) << llvm::toString(sol.takeError());
    EXPECT_EQ(m.evaluate(sol->values), sol->cost);
    int64_t best = INT64_MAX;
    std::vector<unsigned> x(n, 0);
    while (true) {
      best = std::min(best, m.evaluate(x));
      unsigned v = 0;
      for (; v < n; ++v) {
        if (++x[v] < m.domain(v))
          break;
        x[v] = 0;
      }
      if (v == n)
        break;
    }
    EXPECT_EQ(sol->cost, best) << "trial " << trial;
  }
}

/// Six variables of domain 10, every pair of them in one table: eliminating any variable
/// needs a table of 10^6 entries.
MinSumProblem completeProblem() {
  MinSumProblem m;
  for (int v = 0; v < 6; ++v)
    m.addVariable(10);
  for (unsigned a = 0; a < 6; ++a)
    for (unsigned b = a + 1; b < 6; ++b)
      m.addPairwise(a, b, std::vector<int64_t>(100, 1));
  return m;
}

TEST(MinSum, KeptOrdersGiveTheSameSolutions) {
  // Problems of a few structures, each solved many times with other costs: with an order
  // cache the solutions (values, cost, largest table) are those of a fresh solve, the
  // repeated structures replay their order, and another structure does not take one.
  std::mt19937 rng(13);
  MinSumProblem::OrderCache orders;
  for (int trial = 0; trial < 60; ++trial) {
    std::mt19937 shape(trial % 3); // three structures
    MinSumProblem m;
    const unsigned n = 4 + shape() % 6;
    for (unsigned v = 0; v < n; ++v)
      m.addVariable(1 + shape() % 4, shape() % 3);
    const unsigned factors = 3 + shape() % 12;
    for (unsigned f = 0; f < factors; ++f) {
      unsigned a = shape() % n, b = shape() % n;
      std::vector<int64_t> t(a == b ? m.domain(a) : m.domain(a) * m.domain(b));
      for (auto &x : t)
        x = rng() % 100;
      if (a == b)
        m.addUnary(a, t);
      else
        m.addPairwise(a, b, t);
    }
    auto fresh = m.solve();
    auto kept = m.solve(MinSumProblem::Limits(), &orders);
    ASSERT_TRUE(bool(fresh) && bool(kept));
    EXPECT_EQ(kept->values, fresh->values) << "trial " << trial;
    EXPECT_EQ(kept->cost, fresh->cost) << "trial " << trial;
    EXPECT_EQ(kept->largestTable, fresh->largestTable) << "trial " << trial;
  }
  EXPECT_EQ(orders.misses, 3u);
  EXPECT_EQ(orders.hits, 57u);
  // A replayed order still honours the table limit.
  const MinSumProblem wide = completeProblem();
  ASSERT_TRUE(bool(wide.solve(MinSumProblem::Limits(), &orders)));
  MinSumProblem::Limits small;
  small.maxTableEntries = 1000;
  auto tooWide = wide.solve(small, &orders);
  EXPECT_EQ(orders.hits, 58u);
  ASSERT_FALSE(bool(tooWide));
  EXPECT_NE(llvm::toString(tooWide.takeError()).find("too wide"), std::string::npos);
}

TEST(MinSum, TableLimitIsAnError) {
  const MinSumProblem m = completeProblem();
  MinSumProblem::Limits limits;
  limits.maxTableEntries = 1000;
  auto sol = m.solve(limits);
  ASSERT_FALSE(bool(sol));
  EXPECT_NE(llvm::toString(sol.takeError()).find("too wide"), std::string::npos);
}

TEST(MinSum, ConditioningSolvesWideProblemsValidly) {
  // Random complete problems far too wide for the table limit: conditioning gives an
  // assignment whose reported cost is its true cost, and close to the optimum in total.
  std::mt19937 rng(11);
  int64_t totalExact = 0, totalApprox = 0;
  for (int trial = 0; trial < 20; ++trial) {
    MinSumProblem m;
    const unsigned n = 7;
    for (unsigned v = 0; v < n; ++v)
      m.addVariable(3);
    for (unsigned v = 0; v < n; ++v) {
      std::vector<int64_t> u(3);
      for (auto &c : u)
        c = int64_t(rng() % 50);
      m.addUnary(v, u);
    }
    for (unsigned a = 0; a < n; ++a)
      for (unsigned b = a + 1; b < n; ++b) {
        std::vector<int64_t> t(9);
        for (auto &c : t)
          c = int64_t(rng() % 30);
        m.addPairwise(a, b, t);
      }
    auto exact = m.solve();
    ASSERT_TRUE(bool(exact));
    MinSumProblem::Limits limits;
    limits.maxTableEntries = 27; // three variables at most
    auto tooWide = m.solve(limits);
    ASSERT_FALSE(bool(tooWide));
    llvm::consumeError(tooWide.takeError());
    limits.conditionTableEntries = 27;
    auto approx = m.solve(limits);
    ASSERT_TRUE(bool(approx)) << llvm::toString(approx.takeError());
    EXPECT_GT(approx->conditioned, 0u);
    EXPECT_LE(approx->largestTable, 27u);
    EXPECT_EQ(approx->cost, m.evaluate(approx->values));
    EXPECT_GE(approx->cost, exact->cost);
    totalExact += exact->cost;
    totalApprox += approx->cost;
  }
  std::printf("conditioned / exact total cost: %.4f\n", double(totalApprox) / double(totalExact));
  EXPECT_LE(double(totalApprox), 1.03 * double(totalExact));
}

PartitionPlan plan(const Problem &p, unsigned k, Algorithm a, double budget = 60) {
  PlanOptions o;
  o.workers = k;
  o.algorithm = a;
  o.budgetSeconds = budget;
  auto r = searchPlan(p, o);
  EXPECT_TRUE(bool(r)) << algorithmName(a) << ": " << llvm::toString(r.takeError());
  return r ? std::move(*r) : PartitionPlan();
}

TEST(Search, ReportedCostIsTheModelCostOfThePlan) {
  Problem p = problemOf(*buildMlp({64, 128, 32}, 16), true);
  for (unsigned k : {2u, 3u, 4u, 6u, 8u}) {
    PartitionPlan r = plan(p, k, Algorithm::Tofu);
    EXPECT_EQ(r.totalBytes, CostModel(p).modelCost(r.steps)) << k;
    int64_t sum = 0;
    for (int64_t b : r.stepBytes)
      sum += b;
    EXPECT_EQ(sum, r.totalBytes);
    unsigned prod = 1;
    for (const StepChoice &s : r.steps)
      prod *= s.parts;
    EXPECT_EQ(prod, k);
  }
}

// The model cost (a sum-product over the steps each term depends on) equals the brute-force
// sum over every worker, for plans the search makes and random ones, at worker counts whose
// earlier steps make more than CostModel::kExactGroups groups (where the search's own terms
// take group 0 for all), with uneven splits, convolution halos, repeated reads and
// reductions; and no step of a searched plan adds a negative number of bytes.
TEST(CostModel, EveryWorkerCountedExactlyAtAnyK) {
  std::mt19937 rng(7);
  struct Case {
    const char *what;
    Problem p;
  };
  std::vector<Case> cases;
  {
    // The same tensor read twice: over the same region (A·A's squares, fetched once) and
    // over different ones (A·A reads rows and columns of A).
    Graph g;
    EXPECT_FALSE(g.addTensor(tensor("A", {10, 10}, TensorRole::Weight)));
    EXPECT_FALSE(g.addNode(node("aa", "MatMul", {"A", "A"}, {{"b", 0}})));
    EXPECT_FALSE(g.addNode(node("sq", "Mul", {"aa_out", "aa_out"})));
    g.outputs = {"sq_out"};
    cases.push_back({"repeated reads", problemOf(std::move(g))});
  }
  cases.push_back({"mlp", problemOf(*buildMlp({24, 40, 12}, 10), true)});
  cases.push_back({"wresnet", problemOf(*buildModel("wresnet-50-1-i32-c4-k10", 6), true)});
  cases.push_back({"gpt", problemOf(*buildTransformer(1, 16, 2, 6, 2, 30), true)});
  size_t index = 0;
  for (const Case &c : cases) {
    for (unsigned k : {6u, 12u, 128u, 210u}) {
      if (!runsInThisSample(index++, 2)) // under ASan half the cases, in turn
        continue;
      PartitionPlan r = plan(c.p, k, Algorithm::Tofu);
      EXPECT_EQ(r.totalBytes, CostModel(c.p).bruteForceCost(r.steps)) << c.what << " k=" << k;
      for (size_t i = 0; i < r.stepBytes.size(); ++i)
        EXPECT_GE(r.stepBytes[i], 0) << c.what << " k=" << k << " step " << i + 1;
      std::vector<unsigned> parts;
      for (const StepChoice &s : r.steps)
        parts.push_back(s.parts);
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<StepChoice> steps = randomSteps(c.p, parts, rng);
        EXPECT_EQ(CostModel(c.p).modelCost(steps), CostModel(c.p).bruteForceCost(steps))
            << c.what << " k=" << k << " random plan " << trial;
      }
    }
  }
}

bool sameSteps(const PartitionPlan &a, const PartitionPlan &b) {
  if (a.steps.size() != b.steps.size())
    return false;
  for (size_t i = 0; i < a.steps.size(); ++i)
    if (a.steps[i].parts != b.steps[i].parts || a.steps[i].node != b.steps[i].node ||
        a.steps[i].tensor != b.steps[i].tensor)
      return false;
  return true;
}

/// x·w1, a ReLU, then ·w2 (x 8x12, w1 12x16, w2 16x4): a small chain the exact searches
/// enumerate quickly.
Problem productChain() {
  Graph g;
  EXPECT_FALSE(g.addTensor(tensor("x", {8, 12})));
  EXPECT_FALSE(g.addTensor(tensor("w1", {12, 16}, TensorRole::Weight)));
  EXPECT_FALSE(g.addTensor(tensor("w2", {16, 4}, TensorRole::Weight)));
  EXPECT_FALSE(g.addNode(node("h", "MatMul", {"x", "w1"}, {{"b", 0}})));
  EXPECT_FALSE(g.addNode(node("r", "Relu", {"h_out"}, {{"i", 2}})));
  EXPECT_FALSE(g.addNode(node("y", "MatMul", {"r_out", "w2"}, {{"b", 0}})));
  g.outputs = {"y_out"};
  return problemOf(std::move(g));
}

TEST(Search, ExhaustiveAndDpFlatAgreeOnTheOptimum) {
  // Two exact methods over every tiling (enumeration of all first steps with the last step
  // solved by the DP, and one DP over whole tilings) find the same least cost; the
  // recursion can only be worse or equal.
  Problem p = productChain();
  for (unsigned k : {4u, 6u}) {
    PartitionPlan e = plan(p, k, Algorithm::Exhaustive);
    PartitionPlan f = plan(p, k, Algorithm::DpFlat);
    PartitionPlan t = plan(p, k, Algorithm::Tofu);
    EXPECT_EQ(e.totalBytes, f.totalBytes) << k;
    EXPECT_EQ(e.totalBytes, CostModel(p).modelCost(e.steps));
    EXPECT_LE(e.totalBytes, t.totalBytes) << k;
    EXPECT_EQ(t.totalBytes, e.totalBytes) << k; // on this chain the recursion finds it
  }
}

/// A plan's objective under a time objective of `seconds` per node and a link of one byte
/// a second (no latency), computed here: its bytes plus each node's work times the workers
/// that compute it whole.
double timeObjectiveOf(const Problem &p, const PartitionPlan &plan, double seconds) {
  double total = double(CostModel(p).modelCost(plan.steps));
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    double copies = 1;
    for (const StepChoice &c : plan.steps)
      if (c.node[n] < 0)
        copies *= c.parts;
    total += seconds * copies;
  }
  return total;
}

PartitionPlan timedPlan(const Problem &p, unsigned k, Algorithm a, double seconds) {
  PlanOptions o;
  o.workers = k;
  o.algorithm = a;
  TimeObjective t;
  t.bytesPerSecond = 1;
  t.nodeSeconds = [seconds](const Problem &q) {
    return std::vector<double>(q.nodes.size(), seconds);
  };
  o.time = t;
  auto r = searchPlan(p, o);
  EXPECT_TRUE(bool(r)) << algorithmName(a) << ": " << llvm::toString(r.takeError());
  return r ? std::move(*r) : PartitionPlan();
}

TEST(Search, TheTimeObjectiveRepeatsAnOpWhereSplittingItCostsMoreThanItsCompute) {
  // y = x·w, x 1x1024 and w 1024x1, on 4 workers: only the sum over 1024 splits, so the
  // paper's space (every op split) splits it and combines 4 partial results. The time objective may
  // also compute y whole on every worker: 4 times its work against the partial results' bytes.
  // Cheap, it is repeated; dear, it is split as the bytes objective splits it. The exhaustive
  // search over the same objective agrees.
  Graph g;
  ASSERT_FALSE(g.addTensor(tensor("x", {1, 1024})));
  ASSERT_FALSE(g.addTensor(tensor("w", {1024, 1}, TensorRole::Weight)));
  ASSERT_FALSE(g.addNode(node("y", "MatMul", {"x", "w"}, {{"b", 0}})));
  g.outputs = {"y_out"};
  Problem p = problemOf(std::move(g));
  const PartitionPlan bytes = plan(p, 4, Algorithm::Tofu);
  ASSERT_GT(bytes.totalBytes, 0);
  for (const StepChoice &c : bytes.steps)
    EXPECT_TRUE(p.isReduction(0, c.node[0]));
  const double split = timeObjectiveOf(p, bytes, 1);
  // Cheap: repeated on every worker, nothing moved.
  PartitionPlan cheap = timedPlan(p, 4, Algorithm::Tofu, 1);
  EXPECT_EQ(cheap.totalBytes, 0);
  for (const StepChoice &c : cheap.steps)
    EXPECT_EQ(c.node[0], -1);
  EXPECT_LT(timeObjectiveOf(p, cheap, 1), split);
  PartitionPlan oracle = timedPlan(p, 4, Algorithm::Exhaustive, 1);
  EXPECT_EQ(timeObjectiveOf(p, oracle, 1), timeObjectiveOf(p, cheap, 1));
  // Dear (its work a thousand times the partial results' bytes): split as by bytes.
  const double dear = 1000.0 * double(bytes.totalBytes);
  PartitionPlan costly = timedPlan(p, 4, Algorithm::Tofu, dear);
  EXPECT_EQ(costly.totalBytes, bytes.totalBytes);
  for (const StepChoice &c : costly.steps)
    EXPECT_NE(c.node[0], -1);
  oracle = timedPlan(p, 4, Algorithm::Exhaustive, dear);
  EXPECT_EQ(timeObjectiveOf(p, oracle, dear), timeObjectiveOf(p, costly, dear));
}

TEST(Search, TheTimeObjectiveMatchesTheExhaustiveSearch) {
  // A chain's ops, each as dear as some of the bytes its plan moves: the recursion's plan
  // under the time objective costs what the exhaustive search's optimum costs, and no more
  // than the plan of least bytes does under that objective.
  Problem p = productChain();
  for (double seconds : {4.0, 64.0, 1024.0}) {
    const PartitionPlan bytes = plan(p, 4, Algorithm::Tofu);
    PartitionPlan t = timedPlan(p, 4, Algorithm::Tofu, seconds);
    PartitionPlan e = timedPlan(p, 4, Algorithm::Exhaustive, seconds);
    EXPECT_EQ(timeObjectiveOf(p, e, seconds), timeObjectiveOf(p, t, seconds)) << seconds;
    EXPECT_LE(timeObjectiveOf(p, t, seconds), timeObjectiveOf(p, bytes, seconds)) << seconds;
    EXPECT_LE(timeObjectiveOf(p, e, seconds), timeObjectiveOf(p, bytes, seconds)) << seconds;
  }
}

TEST(Search, DpFlatBoundsTheRecursionOnTrainingGraphs) {
  // Measured, not a theorem: with every worker's regions counted exactly, the recursion is
  // not always optimal (the appendix's step costs are independent of the earlier steps,
  // these are not). dp-flat is the optimum over the same tilings.
  Problem p = problemOf(*buildMlp({64, 128, 32}, 16), true);
  for (unsigned k : {2u, 4u, 8u}) {
    PartitionPlan t = plan(p, k, Algorithm::Tofu);
    PartitionPlan f = plan(p, k, Algorithm::DpFlat);
    EXPECT_LE(f.totalBytes, t.totalBytes) << k;
    if (k == 2) {
      EXPECT_EQ(f.totalBytes, t.totalBytes); // one step: both are the exact DP
    }
  }
}

TEST(Search, NoHeuristicBaselineBeatsTofuOnSmallZooModels) {
  for (const char *model : {"mlp", "rnn-2-64", "gpt-1-64-4-16"}) {
    auto g = buildModel(model, 8);
    ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
    Problem p = problemOf(std::move(*g), true);
    for (unsigned k : {2u, 4u, 6u}) {
      PartitionPlan t = plan(p, k, Algorithm::Tofu);
      for (Algorithm a : {Algorithm::Icml18, Algorithm::EqualChop, Algorithm::Spartan,
                          Algorithm::AllRow, Algorithm::DataParallel})
        EXPECT_LE(t.totalBytes, plan(p, k, a).totalBytes)
            << model << " k=" << k << " " << algorithmName(a);
    }
  }
}

// ZeRO-3's layout: every weight, its gradients and its optimiser state sharded along the
// first dimension, every other tensor cut by batch, and every op split by its batch
// variable (a weight's gradient sums over the batch, an update is split as its weight).
// Each worker then holds about 1/k of the tensors, where data parallelism holds every
// weight whole; both compute the same ops, so zero3 moves weights, not activations.
TEST(Search, Zero3ShardsWeightsAndSplitsEveryOpByBatch) {
  Problem p = problemOf(*buildMlp({64, 128, 32}, 16), true);
  std::set<std::string> weightGroups;
  for (const ProblemTensor &t : p.tensors)
    if (t.role == TensorRole::Weight)
      weightGroups.insert(t.group);
  const unsigned k = 4;
  PartitionPlan z = plan(p, k, Algorithm::Zero3), dp = plan(p, k, Algorithm::DataParallel);
  ASSERT_EQ(z.steps.size(), 1u);
  unsigned sharded = 0;
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &info = p.tensors[t];
    const bool cut = !info.shape.empty() && info.shape[0] >= k;
    EXPECT_EQ(z.steps[0].tensor[t], cut ? 0 : -1) << info.name;
    sharded += cut && (weightGroups.count(info.group) || info.role == TensorRole::OptimizerState);
  }
  EXPECT_GE(sharded, 8u); // 4 weights, their gradients (and sums)
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    const int s = z.steps[0].node[n];
    const ProblemTensor &out = p.tensors[p.nodes[n].output];
    if (!weightGroups.count(out.group) && out.shape.size() > 0 && out.shape[0] >= k) {
      // An activation or its gradient: split along its batch, its output's first dimension.
      ASSERT_GE(s, 0) << p.nodes[n].name;
      const Strategy &st = p.nodes[n].table->strategies[s];
      EXPECT_TRUE(st.kind == Strategy::Kind::Output && st.outputDim == 0) << p.nodes[n].name;
    } else {
      // A weight's gradient is a sum over the batch, split by it; an update is split as
      // its sharded weight (data parallelism computes each whole on every worker).
      EXPECT_GE(s, 0) << p.nodes[n].name;
    }
  }
  auto largest = [&](const PartitionPlan &r) {
    int64_t m = 0;
    for (unsigned w = 0; w < k; ++w)
      m = std::max(m, p.workerTensorBytes(r.steps, workerCoords(w, {k})));
    return m;
  };
  const int64_t single = p.workerTensorBytes({}, {});
  EXPECT_LE(double(largest(z)), 1.1 * double(single) / k);
  EXPECT_GT(largest(dp), largest(z)); // data parallelism holds every weight whole
}

// Data parallelism and ZeRO-3 give each part of the batch to a worker: with more workers
// than samples, an op could only be replicated (every worker computing all of it), which is
// neither layout. The search says so, naming an op and its batch, where Tofu's own search
// cuts something else.
TEST(Search, BatchLayoutsRefuseMorePartsThanSamples) {
  Problem p = problemOf(*buildMlp({64, 128, 32}, 4), true);
  for (Algorithm a : {Algorithm::Zero3, Algorithm::DataParallel}) {
    PlanOptions o;
    o.workers = 8;
    o.algorithm = a;
    auto r = searchPlan(p, o);
    ASSERT_FALSE(bool(r)) << algorithmName(a);
    const std::string msg = llvm::toString(r.takeError());
    EXPECT_NE(msg.find(std::string(algorithmName(a)) + " cuts the batch into 8 parts"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("has a batch of 4"), std::string::npos) << msg;
    EXPECT_FALSE(bool(batchPartsError(p, 4, a))); // 4 parts of 4 samples: fine
  }
  PlanOptions m;
  m.workers = 8;
  setMegatronSteps(m, 1, 8); // Megatron's data parallelism, over 8 groups
  auto r = searchPlan(p, m);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("data-parallel cuts the batch into 8 parts"),
            std::string::npos);
  EXPECT_GT(plan(p, 8, Algorithm::Tofu).steps.size(), 0u);
}

// Megatron-LM's layout of the zoo GPT: q, k, v and the MLP's first layer column-parallel
// (cut along their output features), the attention's output and the MLP's second layer
// row-parallel (along their input features), the first layer's bias with its features, the
// logits' weight by vocabulary; layer norms whole. Each product that reads a cut weight
// splits the variable that indexes its cut, so the weights never move: what moves is
// activations (and the embedding table's slices, gathered: see megatronCuts).
TEST(Search, MegatronCutsEachWeightAsMegatronLm) {
  // In bf16 the products read each weight through its bfloat16 cast: the same cuts, and each
  // cast cut as its weight (until 2026-12-03 the casts hid the weights from Megatron's rules,
  // which left every product's weight whole on every worker).
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    SCOPED_TRACE(precision == Precision::BF16 ? "bf16" : "fp32");
    Problem p = problemOf(*buildModel("gpt-1-64-4-16", 8), true, precision);
    PartitionPlan m = plan(p, 2, Algorithm::Megatron);
    ASSERT_EQ(m.steps.size(), 1u);
    std::map<std::string, int> want = {
        {"l1_q_w", 1},    {"l1_k_w", 1},        {"l1_v_w", 1},         {"l1_o_w", 0},
        {"l1_ff1_w", 1},  {"l1_ff1_b", 0},      {"l1_ff2_w", 0},       {"l1_ff2_b", -1},
        {"lm_head_w", 1}, {"l1_ln1_scale", -1}, {"final_ln_bias", -1}, {"tok_emb", 1}};
    unsigned seen = 0;
    for (unsigned t = 0; t < p.tensors.size(); ++t)
      if (auto it = want.find(p.tensors[t].name); it != want.end()) {
        EXPECT_EQ(m.steps[0].tensor[t], it->second) << it->first;
        ++seen;
      }
    EXPECT_EQ(seen, want.size());
    for (unsigned t = 0; t < p.tensors.size(); ++t)
      if (const std::string &name = p.tensors[t].name;
          precision == Precision::BF16 && name.size() > 5 && name.rfind("_bf16") == name.size() - 5)
        if (auto it = want.find(name.substr(0, name.size() - 5)); it != want.end()) {
          EXPECT_EQ(m.steps[0].tensor[t], it->second) << name;
          ++seen;
        }
    if (precision == Precision::BF16)
      EXPECT_GT(seen, want.size() + 5); // the products' weights' casts
    // The products that read the weights move none of them: their reads of a weight stay in
    // its tile (the bytes of every weight-reading forward product are its activations').
    auto byName = [&](const std::string &name) {
      for (unsigned n = 0; n < p.nodes.size(); ++n)
        if (p.nodes[n].name == name)
          return n;
      ADD_FAILURE() << "no node " << name;
      return 0u;
    };
    for (const char *node : {"l1_q", "l1_o", "l1_ff1", "l1_ff2", "lm_head"}) {
      const unsigned n = byName(node);
      const int s = m.steps[0].node[n];
      ASSERT_GE(s, 0) << node;
      const std::string strategy = p.strategyName(n, s);
      const bool row = std::string(node) == "l1_o" || std::string(node) == "l1_ff2";
      EXPECT_EQ(strategy.rfind("reduce", 0) == 0, row) << node << ": " << strategy;
    }
  }
}

// Megatron-LM's TP x DP (--megatron 2,1,2): the outer step data-parallel (every weight whole
// across the two groups, activations cut by batch), the inner one Megatron's cuts; TP = 1
// is data parallelism itself.
TEST(Search, StepsFollowTheirOwnAlgorithms) {
  Problem p = problemOf(*buildModel("gpt-1-64-4-16", 8), true);
  PlanOptions o;
  o.workers = 4;
  o.algorithm = Algorithm::Megatron;
  o.factors = {2, 2};
  o.stepAlgorithms = {Algorithm::DataParallel, Algorithm::Megatron};
  auto tpdp = searchPlan(p, o);
  ASSERT_TRUE(static_cast<bool>(tpdp)) << llvm::toString(tpdp.takeError());
  ASSERT_EQ(tpdp->steps.size(), 2u);
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const std::string &name = p.tensors[t].name;
    if (name == "l1_q_w" || name == "l1_o_w") {
      EXPECT_EQ(tpdp->steps[0].tensor[t], -1) << name;
      EXPECT_EQ(tpdp->steps[1].tensor[t], name == "l1_q_w" ? 1 : 0) << name;
    }
    if (name == "l1_ln1_out")
      EXPECT_EQ(tpdp->steps[0].tensor[t], 0); // by batch across the groups
  }
  o.factors = {4};
  o.stepAlgorithms = {Algorithm::DataParallel};
  auto dp = searchPlan(p, o);
  ASSERT_TRUE(static_cast<bool>(dp));
  EXPECT_EQ(dp->totalBytes, plan(p, 4, Algorithm::DataParallel).totalBytes);
  // A step cannot follow a recursion's rules, and the steps must match the factors.
  o.stepAlgorithms = {Algorithm::Tofu};
  auto bad = searchPlan(p, o);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("cannot follow tofu's rules"), std::string::npos);
  o.stepAlgorithms = {Algorithm::DataParallel, Algorithm::Megatron};
  auto mismatch = searchPlan(p, o);
  ASSERT_FALSE(static_cast<bool>(mismatch));
  EXPECT_EQ(llvm::toString(mismatch.takeError()), "2 step algorithms for 1 recursion steps");
}

TEST(Search, PlansAreDeterministic) {
  Problem p = problemOf(*buildModel("rnn-2-64", 8), true);
  PartitionPlan a = plan(p, 8, Algorithm::Tofu), b = plan(p, 8, Algorithm::Tofu);
  EXPECT_TRUE(sameSteps(a, b));
  EXPECT_EQ(a.totalBytes, b.totalBytes);
}

TEST(Search, AnyThreadCountGivesTheSamePlan) {
  // The threads share a step's term look-ups by node class; with memory priced, the
  // buffers' look-ups too.
  size_t index = 0;
  for (const char *model : {"rnn-2-64", "gpt-1-64-4-16"}) {
    Problem p = problemOf(*buildModel(model, 8), true);
    for (unsigned k : {6u, 8u}) {
      if (!runsInThisSample(index++, 2)) // under ASan half the cases, in turn
        continue;
      for (bool priced : {false, true}) {
        std::vector<PartitionPlan> plans;
        for (unsigned threads : {1u, 2u, 3u}) {
          PlanOptions o;
          o.workers = k;
          o.threads = threads;
          if (priced) {
            o.memoryWeight = 1e-3;
            o.pricedBuffers.assign(p.nodes.size(), true);
          }
          auto r = searchPlan(p, o);
          ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
          plans.push_back(std::move(*r));
        }
        for (size_t q = 1; q < plans.size(); ++q) {
          EXPECT_TRUE(sameSteps(plans[0], plans[q])) << model << " k=" << k << " priced=" << priced;
          EXPECT_EQ(plans[0].totalBytes, plans[q].totalBytes);
        }
      }
    }
  }
}

TEST(Search, AnyWorkerCountSplitsMemory) {
  Problem p = problemOf(*buildMlp({64, 128, 32}, 24), true);
  int64_t single = p.workerTensorBytes({}, {});
  for (unsigned k : {3u, 5u, 6u, 12u}) {
    PartitionPlan r = plan(p, k, Algorithm::Tofu);
    std::vector<unsigned> parts;
    for (const StepChoice &s : r.steps)
      parts.push_back(s.parts);
    EXPECT_EQ(parts, factorWorkers(k));
    EXPECT_TRUE(std::is_sorted(parts.rbegin(), parts.rend()));
    int64_t largest = 0;
    for (unsigned w = 0; w < k; ++w)
      largest = std::max(largest, p.workerTensorBytes(r.steps, workerCoords(w, parts)));
    // Every tensor but the scalars is cut k ways (shares differ by at most one row).
    EXPECT_LE(double(largest), 1.1 * double(single) / k) << k;
  }
}

TEST(Search, CoalescedTimestepsShareStrategies) {
  Problem p = problemOf(*buildModel("rnn-2-64", 8), true);
  PartitionPlan r = plan(p, 4, Algorithm::Tofu);
  std::map<std::string, std::vector<int>> byKey;
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    if (p.nodes[n].coalesce.empty())
      continue;
    std::vector<int> choice;
    for (const StepChoice &s : r.steps)
      choice.push_back(s.node[n]);
    auto [it, fresh] = byKey.emplace(p.nodes[n].coalesce, choice);
    if (!fresh) {
      EXPECT_EQ(it->second, choice) << p.nodes[n].name;
    }
  }
  EXPECT_GE(byKey.size(), 6u);
}

TEST(Search, Errors) {
  Problem p = matmul(8, 6, 4);
  PlanOptions o;
  o.workers = 0;
  auto r = searchPlan(p, o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("at least 1"), std::string::npos);
  o.workers = 1;
  auto one = searchPlan(p, o);
  ASSERT_TRUE(bool(one));
  EXPECT_EQ(one->totalBytes, 0);
  Problem big = problemOf(*buildMlp({64, 128, 128, 32}, 16), true);
  o.workers = 8;
  o.algorithm = Algorithm::Exhaustive;
  o.budgetSeconds = 0.2;
  auto e = searchPlan(big, o);
  ASSERT_FALSE(bool(e));
  EXPECT_NE(llvm::toString(e.takeError()).find("time budget"), std::string::npos);
  EXPECT_FALSE(parseAlgorithm("nope"));
  EXPECT_EQ(parseAlgorithm("dp-flat"), Algorithm::DpFlat);
}

} // namespace
} // namespace tofu

namespace tofu {
namespace {

// A plan handed to processes that did not search arrives whole; a plan that does not fit
// the graph is refused, saying why.
TEST(PlanText, RoundTripsAndChecksTheGraph) {
  Problem p = matmul(8, 6, 4);
  PlanOptions o;
  o.workers = 4;
  auto plan = searchPlan(p, o);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  auto back = decodePlan(encodePlan(*plan), p);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->algorithm, plan->algorithm);
  EXPECT_EQ(back->workers, 4u);
  ASSERT_EQ(back->steps.size(), plan->steps.size());
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    EXPECT_EQ(back->steps[i].parts, plan->steps[i].parts);
    EXPECT_EQ(back->steps[i].node, plan->steps[i].node);
    EXPECT_EQ(back->steps[i].tensor, plan->steps[i].tensor);
  }
  EXPECT_EQ(CostModel(p).bruteForceCost(back->steps), CostModel(p).bruteForceCost(plan->steps));

  auto error = [&](PartitionPlan bad) {
    auto r = decodePlan(encodePlan(bad), p);
    return r ? std::string() : llvm::toString(r.takeError());
  };
  PartitionPlan bad = *plan;
  bad.steps[0].node[0] = 99;
  EXPECT_NE(error(bad).find("node 'mm' has no strategy 99"), std::string::npos) << error(bad);
  bad = *plan;
  bad.steps[0].tensor[tensorIndex(p, "B")] = 2;
  EXPECT_NE(error(bad).find("tensor 'B' has no dimension 2"), std::string::npos) << error(bad);
  bad = *plan;
  bad.steps[0].node.pop_back();
  EXPECT_NE(error(bad).find("node and"), std::string::npos) << error(bad);
  bad = *plan;
  bad.workers = 8;
  EXPECT_NE(error(bad).find("parts for 8 workers"), std::string::npos) << error(bad);
  auto garbage = decodePlan("{\"algorithm\": 3}", p);
  ASSERT_FALSE(bool(garbage));
  EXPECT_NE(llvm::toString(garbage.takeError()).find("a malformed plan"), std::string::npos);
}

} // namespace
} // namespace tofu
