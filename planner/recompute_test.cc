// Recomputation: the graph rewrite (copies declared before their first backward reader, the
// backward pass reading them, chains recomputed from the kept tensors, bad requests refused
// by name), its effect on the planned peak, and the choice under a budget (sqrt, auto, the
// exact optimum on a small graph).
#include "planner/recompute.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "graph/recompute.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/pipeline.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

Graph trainingGraph(llvm::Expected<Graph> forward) {
  EXPECT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.until = Stage::Graph;
  auto r = runPipeline(std::move(*forward), "model", testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return std::move(r->graph);
}

/// Node positions in the graph's (topological) order, by name.
std::map<std::string, size_t> positions(const Graph &g) {
  auto order = g.topologicalOrder();
  EXPECT_TRUE(bool(order));
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < order->size(); ++i)
    at[g.nodes()[(*order)[i]].name] = i;
  return at;
}

TEST(Recompute, CopiesComeBeforeTheirFirstBackwardReaderAndChainsFromKeptTensors) {
  const Graph g = trainingGraph(buildMlp({64, 32, 32, 10}, 8));
  auto candidates = recomputeCandidates(g);
  ASSERT_TRUE(bool(candidates)) << llvm::toString(candidates.takeError());
  ASSERT_GE(candidates->size(), 4u);
  for (const RecomputeCandidate &c : *candidates) {
    const TensorInfo *t = g.tensor(c.tensor);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->role, TensorRole::Activation) << c.tensor;
    EXPECT_EQ(std::count(g.outputs.begin(), g.outputs.end(), c.tensor), 0) << c.tensor;
  }
  // Every candidate the backward pass reads, dropped: each is recomputed once, from the
  // inputs and weights, in forward order, before the backward pass needs it.
  std::vector<std::string> dropped;
  for (const RecomputeCandidate &c : *candidates)
    if (c.readByBackward)
      dropped.push_back(c.tensor);
  Graph r = g;
  auto s = applyRecomputation(r, dropped);
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->copies.size(), dropped.size());
  ASSERT_FALSE(bool(checkGraph(r, testLibrary())));
  EXPECT_EQ(r.nodes().size(), g.nodes().size() + s->copies.size() - s->removed);
  const auto at = positions(r);
  std::map<std::string, std::string> copyOf(s->copies.begin(), s->copies.end());
  for (const auto &[x, copy] : s->copies) {
    const Node *cp = r.producer(copy);
    ASSERT_NE(cp, nullptr);
    const Node *original = g.producer(x);
    EXPECT_EQ(cp->op, original->op);
    EXPECT_EQ(cp->attrs, original->attrs);
    EXPECT_EQ(cp->group, original->group);
    EXPECT_EQ(r.tensor(copy)->shape, g.tensor(x)->shape);
    // It reads the copies of the dropped tensors its node read, the originals otherwise.
    for (size_t i = 0; i < cp->inputs.size(); ++i) {
      auto it = copyOf.find(original->inputs[i]);
      EXPECT_EQ(cp->inputs[i], it == copyOf.end() ? original->inputs[i] : it->second);
    }
    // No gradient node reads the dropped tensor; the copy comes after every forward node
    // and before each of its readers.
    bool read = false;
    for (const Node &n : r.nodes()) {
      const bool backward = r.tensor(n.output)->role == TensorRole::Gradient;
      for (const std::string &in : n.inputs) {
        if (in == x)
          EXPECT_FALSE(backward) << n.name << " reads " << x;
        if (in == copy) {
          read = true;
          EXPECT_LT(at.at(cp->name), at.at(n.name));
        }
      }
      if (r.tensor(n.output)->role == TensorRole::Activation &&
          n.name.find("_recompute") == std::string::npos)
        EXPECT_LT(at.at(n.name), at.at(cp->name)) << n.name;
    }
    EXPECT_TRUE(read) << copy;
  }
}

TEST(Recompute, RequestsThatAreNotForwardActivationsAreRefusedByName) {
  const Graph g = trainingGraph(buildMlp({16, 8, 4}, 2));
  auto refused = [&](const std::string &name) {
    Graph r = g;
    auto s = applyRecomputation(r, {name});
    EXPECT_FALSE(bool(s)) << name;
    return s ? std::string() : llvm::toString(s.takeError());
  };
  EXPECT_EQ(refused("nope"), "cannot recompute 'nope': the graph has no such tensor");
  std::string weight, gradient;
  for (const TensorInfo &t : g.tensors()) {
    if (t.role == TensorRole::Weight && weight.empty())
      weight = t.name;
    if (t.role == TensorRole::Gradient && gradient.empty())
      gradient = t.name;
  }
  EXPECT_EQ(refused(weight),
            "cannot recompute '" + weight + "': no node computes it (it is an weight)");
  EXPECT_NE(refused(gradient).find("it is computed by the backward pass"), std::string::npos);
  EXPECT_EQ(refused(g.outputs[0]),
            "cannot recompute '" + g.outputs[0] + "': it is an output of the graph");
  // Nothing dropped, nothing changed.
  Graph same = g;
  auto none = applyRecomputation(same, {});
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(same.nodes().size(), g.nodes().size());
}

TEST(Recompute, SegmentCheckpointsKeepEverySqrtNth) {
  std::vector<RecomputeCandidate> c(10);
  for (size_t i = 0; i < c.size(); ++i)
    c[i].tensor = "t" + std::to_string(i);
  // s = 4: t3 and t7 kept (each segment's last), the rest dropped.
  EXPECT_EQ(segmentCheckpoints(c),
            (std::vector<std::string>{"t0", "t1", "t2", "t4", "t5", "t6", "t8", "t9"}));
  EXPECT_TRUE(segmentCheckpoints({c[0]}).empty());
}

// The forward pass's cuts: a transformer's residual stream between its sublayers (and the
// chain after the last), never a tensor inside a sublayer, which the residual path skips.
TEST(Recompute, CutsAreTheResidualStreamAndAChainsLinks) {
  const Graph gpt = trainingGraph(buildTransformer(2, 64, 4, 32, 8));
  auto candidates = recomputeCandidates(gpt);
  ASSERT_TRUE(bool(candidates)) << llvm::toString(candidates.takeError());
  std::vector<std::string> cuts;
  for (const RecomputeCandidate &c : *candidates)
    if (c.cut)
      cuts.push_back(c.tensor);
  EXPECT_EQ(cuts, (std::vector<std::string>{
                      "embed_out", "embed_pos_out", "l1_res1_out", "l1_res2_out", "l2_res1_out",
                      "l2_res2_out", "final_ln_out", "lm_head_out", "flatten_positions_out"}));
  // An MLP is a chain: every forward tensor is a cut.
  const Graph mlp = trainingGraph(buildMlp({64, 32, 32, 10}, 8));
  auto chain = recomputeCandidates(mlp);
  ASSERT_TRUE(bool(chain));
  for (const RecomputeCandidate &c : *chain)
    EXPECT_TRUE(c.cut) << c.tensor;
}

/// Every copy in `r` (a rewrite of `g`) reads, of `g`'s forward tensors, only those the
/// backward pass read anyway or a cut: no copy keeps alive into the backward pass a tensor
/// that died in the forward (it reads that tensor's copy instead). Auto's ranking that keeps
/// the cuts guarantees it; the transformer below chooses that ranking.
void expectCopiesKeepNothingAlive(const Graph &g, const RecomputePlan &r) {
  auto candidates = recomputeCandidates(g);
  ASSERT_TRUE(bool(candidates));
  std::map<std::string, RecomputeCandidate> byName;
  for (const RecomputeCandidate &c : *candidates)
    byName[c.tensor] = c;
  for (const auto &[x, copy] : r.summary.copies)
    for (const std::string &in : r.graph.producer(copy)->inputs)
      if (auto it = byName.find(in); it != byName.end())
        EXPECT_TRUE(it->second.readByBackward || it->second.cut)
            << copy << " reads " << in << ", which only the forward pass read";
}

PlanOptions onWorkers(unsigned k) {
  PlanOptions o;
  o.workers = k;
  o.threads = 1;
  return o;
}

// A transformer's activations dominate its peak: recomputing lowers the planned peak, sqrt
// lowers it, and auto finds a plan within a budget that the plan without recomputation
// exceeds, recomputing part of what sqrt does not need to.
TEST(Recompute, BudgetsBelowThePlainPeakFitWithRecomputation) {
  const Graph g = trainingGraph(buildTransformer(2, 64, 4, 32, 8));
  auto none = planWithRecomputation(g, testLibrary(), onWorkers(2), 0, RecomputeMode::None);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_TRUE(none->summary.copies.empty());
  const int64_t plain = none->fit.peak;
  auto sqrt = planWithRecomputation(g, testLibrary(), onWorkers(2), 0, RecomputeMode::Sqrt);
  ASSERT_TRUE(bool(sqrt)) << llvm::toString(sqrt.takeError());
  EXPECT_FALSE(sqrt->summary.copies.empty());
  EXPECT_LT(sqrt->fit.peak, plain);
  EXPECT_EQ(checkMemoryPlan(sqrt->fit.memory), "");

  // auto needs a budget; with one the plain plan meets, it recomputes nothing.
  auto noBudget = planWithRecomputation(g, testLibrary(), onWorkers(2), 0, RecomputeMode::Auto);
  ASSERT_FALSE(bool(noBudget));
  EXPECT_NE(llvm::toString(noBudget.takeError()).find("needs a memory budget"), std::string::npos);
  auto roomy = planWithRecomputation(g, testLibrary(), onWorkers(2), plain, RecomputeMode::Auto);
  ASSERT_TRUE(bool(roomy)) << llvm::toString(roomy.takeError());
  EXPECT_TRUE(roomy->fit.fits);
  EXPECT_TRUE(roomy->summary.copies.empty());

  // A budget between the two: the plain plan (even the budgeted search's) does not fit,
  // auto's does, within it, by recomputing.
  const int64_t budget = (sqrt->fit.peak + plain) / 2;
  unsigned heard = 0;
  auto fit = planWithRecomputation(g, testLibrary(), onWorkers(2), budget, RecomputeMode::Auto,
                                   [&](size_t, const MemoryFit &) { ++heard; });
  ASSERT_TRUE(bool(fit)) << llvm::toString(fit.takeError());
  if (fit->fitsWithout) {
    GTEST_SKIP() << "the budgeted search fits " << budget << " bytes without recomputation";
  }
  EXPECT_TRUE(fit->fit.fits);
  EXPECT_LE(fit->fit.peak, budget);
  for (const WorkerMemory &w : fit->fit.memory.workers)
    EXPECT_LE(w.peak, budget);
  EXPECT_FALSE(fit->summary.copies.empty());
  EXPECT_GT(fit->peakWithout, budget);
  EXPECT_EQ(heard, fit->tried);
  EXPECT_GE(fit->tried, 2u);
  EXPECT_EQ(checkMemoryPlan(fit->fit.memory), "");
  expectCopiesKeepNothingAlive(g, *fit);

  // At sqrt's peak: auto fits where sqrt does, keeping no dead tensor alive (before copies
  // read their inputs' copies, a dropped softmax kept its masked scores alive until the
  // backward pass).
  const int64_t tight = sqrt->fit.peak;
  auto t = planWithRecomputation(g, testLibrary(), onWorkers(2), tight, RecomputeMode::Auto);
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_TRUE(t->fit.fits) << tight << " bytes: closest " << t->fit.peak;
  EXPECT_LE(t->fit.peak, tight);
  expectCopiesKeepNothingAlive(g, *t);
}

// On a graph small enough to try every subset, the exact optimum is what auto's choice is
// judged against: within the same budget it is never slower, and it fits where auto does.
TEST(Recompute, ExactOptimumOnASmallGraph) {
  const Graph g = trainingGraph(buildMlp({64, 256, 256, 10}, 2048));
  DeviceModel d;
  d.name = "test";
  d.productFlops = 1e10;
  d.kernelFlops = 1e9;
  d.bandwidth = 1e10;
  d.launch = 1e-6;
  d.linkBandwidth = 1e9;
  d.linkLatency = 1e-6;
  PlanOptions o = onWorkers(1);
  auto none = planWithRecomputation(g, testLibrary(), o, 0, RecomputeMode::None);
  ASSERT_TRUE(bool(none));
  auto plainTime = estimateStepTime(*none->problem, none->fit.exec, none->graph.outputs, d);
  ASSERT_TRUE(bool(plainTime));
  // Unlimited: the optimum is no slower than recomputing nothing. (It may drop a tensor
  // that only the backward pass reads: its node then runs there instead, and may fuse with
  // its reader.)
  auto free = exactRecomputation(g, testLibrary(), o, none->fit.peak, d);
  ASSERT_TRUE(bool(free)) << llvm::toString(free.takeError());
  EXPECT_TRUE(free->fits);
  EXPECT_LE(free->seconds, plainTime->seconds);
  EXPECT_LE(free->peak, none->fit.peak);
  EXPECT_GT(free->tried, 8u);
  // Below the plain peak: the optimum recomputes, fits, and costs time; auto fits too and is
  // no faster than the optimum.
  const int64_t budget = none->fit.peak * 9 / 10;
  auto exact = exactRecomputation(g, testLibrary(), o, budget, d);
  ASSERT_TRUE(bool(exact)) << llvm::toString(exact.takeError());
  ASSERT_TRUE(exact->fits);
  EXPECT_FALSE(exact->dropped.empty());
  EXPECT_LE(exact->peak, budget);
  EXPECT_GT(exact->seconds, plainTime->seconds);
  auto chosen = planWithRecomputation(g, testLibrary(), o, budget, RecomputeMode::Auto);
  ASSERT_TRUE(bool(chosen)) << llvm::toString(chosen.takeError());
  ASSERT_TRUE(chosen->fit.fits);
  auto autoTime = estimateStepTime(*chosen->problem, chosen->fit.exec, chosen->graph.outputs, d);
  ASSERT_TRUE(bool(autoTime));
  EXPECT_GE(autoTime->seconds, exact->seconds * (1 - 1e-12));
  std::printf("budget %lld of %lld bytes: the exact optimum recomputes %zu tensors (%.6f s), "
              "auto %zu (%.6f s: %.3fx)\n",
              (long long)budget, (long long)none->fit.peak, exact->dropped.size(), exact->seconds,
              chosen->summary.dropped.size(), autoTime->seconds,
              autoTime->seconds / exact->seconds);
}

} // namespace
} // namespace tofu
