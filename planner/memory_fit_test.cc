// Tests of the search under a memory budget: every answer checked against the memory
// planner run independently on the plan returned.
#include "planner/memory_fit.h"

#include <cstdio>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "support/units.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

int64_t plannedPeak(const Problem &p, const PartitionPlan &plan,
                    const std::vector<std::string> &outputs) {
  return planMemory(p, buildExecPlan(p, plan), outputs).largestPeak();
}

struct Case {
  Problem problem;
  std::vector<std::string> outputs;
};

/// A GPT's training step (Adam, 2 layers of 512, batch 32 of 128 tokens): at k = 6 its
/// plan of least communication peaks while it fetches a large input, and other plans
/// need less.
Case gpt() {
  Case c;
  c.problem = trainingProblem(buildTransformer(2, 512, 8, 128, 32), Optimizer::Adam, &c.outputs);
  return c;
}

PlanOptions on(unsigned k) {
  PlanOptions o;
  o.workers = k;
  return o;
}

TEST(MemoryFit, AGenerousBudgetKeepsThePlanOfLeastCommunication) {
  Case c = gpt();
  auto plain = searchPlan(c.problem, on(6));
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  const int64_t peak = plannedPeak(c.problem, *plain, c.outputs);
  auto fit = searchWithinMemory(c.problem, on(6), peak, c.outputs);
  ASSERT_TRUE(bool(fit)) << llvm::toString(fit.takeError());
  EXPECT_TRUE(fit->fits);
  EXPECT_EQ(fit->searches, 1u);
  EXPECT_EQ(fit->plan.totalBytes, plain->totalBytes);
  EXPECT_EQ(fit->peak, peak);
  EXPECT_EQ(fit->memoryWeight, 0);
}

TEST(MemoryFit, APricedPlanFitsWhereThePlanOfLeastCommunicationDoesNot) {
  Case c = gpt();
  auto plain = searchPlan(c.problem, on(6));
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  const int64_t peak0 = plannedPeak(c.problem, *plain, c.outputs);
  // A budget a byte under the unpriced plan's peak: the search must trade communication
  // for memory to meet it.
  auto fit = searchWithinMemory(c.problem, on(6), peak0 - 1, c.outputs);
  ASSERT_TRUE(bool(fit)) << llvm::toString(fit.takeError());
  std::printf("unpriced: peak %lld, communication %lld; budget %lld: fits %d, peak %lld, "
              "communication %lld, price %g, %u searches\n",
              (long long)peak0, (long long)plain->totalBytes, (long long)(peak0 - 1), fit->fits,
              (long long)fit->peak, (long long)fit->plan.totalBytes, fit->memoryWeight,
              fit->searches);
  ASSERT_TRUE(fit->fits);
  EXPECT_GT(fit->memoryWeight, 0);
  // The figure is the memory planner's, on the plan returned.
  EXPECT_EQ(plannedPeak(c.problem, fit->plan, c.outputs), fit->peak);
  EXPECT_LE(fit->peak, peak0 - 1);
  EXPECT_EQ(fit->memory.largestPeak(), fit->peak);
  EXPECT_EQ(checkMemoryPlan(fit->memory), "");
  // Memory is bought with communication, never the other way round.
  EXPECT_GE(fit->plan.totalBytes, plain->totalBytes);
  EXPECT_EQ(fit->plan.totalBytes, CostModel(c.problem).modelCost(fit->plan.steps));
}

TEST(MemoryFit, AnImpossibleBudgetReportsTheClosestPlan) {
  Case c = gpt();
  const int64_t limit = 1 << 20; // less than the weights' share
  auto fit = searchWithinMemory(c.problem, on(4), limit, c.outputs);
  ASSERT_TRUE(bool(fit)) << llvm::toString(fit.takeError());
  EXPECT_FALSE(fit->fits);
  EXPECT_GT(fit->peak, limit);
  EXPECT_EQ(plannedPeak(c.problem, fit->plan, c.outputs), fit->peak);
  // The closest is at least as close as the unpriced plan.
  auto plain = searchPlan(c.problem, on(4));
  ASSERT_TRUE(bool(plain));
  EXPECT_LE(fit->peak, plannedPeak(c.problem, *plain, c.outputs));
  EXPECT_FALSE(bool(searchWithinMemory(c.problem, on(4), 0, c.outputs)));
}

TEST(MemoryFit, StepBuffersAreWorkerZerosFetchAndPartialBuffers) {
  // For the last step of a plan, the DP's buffer terms with the plan's own choices are
  // exactly the memory planner's fetch and partial buffers of worker 0.
  Case c = gpt();
  const Problem &p = c.problem;
  for (unsigned k : {3u, 4u, 5u, 6u}) {
    auto plan = searchPlan(p, on(k));
    ASSERT_TRUE(bool(plan));
    const ExecPlan exec = buildExecPlan(p, *plan);
    const MemoryPlan m = planMemory(p, exec, c.outputs);
    std::vector<int64_t> planner(p.nodes.size(), 0);
    for (const Buffer &b : m.workers[0].buffers)
      if (b.kind != Buffer::Kind::Tile)
        planner[exec.nodes[b.node].node] += b.bytes;
    const size_t last = plan->steps.size() - 1;
    for (unsigned n = 0; n < p.nodes.size(); ++n) {
      const ProblemNode &node = p.nodes[n];
      std::vector<std::vector<int>> configs;
      for (unsigned t : node.inputs)
        configs.push_back({plan->steps[last].tensor[t]});
      configs.push_back({plan->steps[last].tensor[node.output]});
      auto terms = CostModel(p).stepBuffers(n, plan->steps, last, plan->steps[last].parts,
                                            plan->steps[last].node[n], configs);
      int64_t sum = 0;
      for (const auto &slot : terms)
        sum += slot[0];
      EXPECT_EQ(sum, planner[n]) << node.name << " at k = " << k;
    }
  }
}

TEST(MemoryFit, SmallestWorkerCount) {
  Case c = gpt();
  const Problem &p = c.problem;
  auto one = searchPlan(p, on(1));
  ASSERT_TRUE(bool(one));
  MemoryPlan single = planMemory(p, buildExecPlan(p, *one), c.outputs);
  const int64_t live = largestLiveBytes(single);
  EXPECT_GT(live, 0);
  EXPECT_LE(live, single.largestPeak());
  // A budget of 2/9 of what one worker needs: at least 5 workers by the bound, and (this
  // model's fetch buffers) 7 by the search, so that counts are tried that do not fit.
  const int64_t limit = single.largestPeak() * 2 / 9;
  std::vector<unsigned> decided;
  auto fit = fitWorkers(p, on(1), limit, c.outputs, 64,
                        [&](unsigned k, const MemoryFit &) { decided.push_back(k); });
  ASSERT_TRUE(bool(fit)) << llvm::toString(fit.takeError());
  const unsigned k = fit->fit.plan.workers;
  std::printf("one worker: peak %lld, live %lld; budget %lld: %u workers (from %u), peak %lld\n",
              (long long)single.largestPeak(), (long long)live, (long long)limit, k,
              fit->lowerBound, (long long)fit->fit.peak);
  EXPECT_TRUE(fit->fit.fits);
  EXPECT_EQ(plannedPeak(p, fit->fit.plan, c.outputs), fit->fit.peak);
  EXPECT_LE(fit->fit.peak, limit);
  EXPECT_EQ(fit->lowerBound, (live + limit - 1) / limit);
  EXPECT_GT(k, fit->lowerBound);
  // Every count from the lower bound up was decided in order, the last one fitting.
  ASSERT_EQ(decided.size(), k - fit->lowerBound + 1);
  for (size_t i = 0; i < decided.size(); ++i)
    EXPECT_EQ(decided[i], fit->lowerBound + i);
  ASSERT_EQ(fit->tried.size(), decided.size());
  for (size_t i = 0; i + 1 < fit->tried.size(); ++i)
    EXPECT_GT(fit->tried[i].second, limit) << fit->tried[i].first << " workers";
  // Below the lower bound nothing fits: not the plan of least communication, nor any
  // priced one (the bound holds for every plan).
  for (unsigned below = 2; below < fit->lowerBound; ++below)
    for (double w : {0.0, 1.0, 1e3}) {
      PlanOptions o = on(below);
      o.memoryWeight = w;
      o.pricedBuffers.assign(p.nodes.size(), true);
      auto plan = searchPlan(p, o);
      ASSERT_TRUE(bool(plan));
      EXPECT_GT(plannedPeak(p, *plan, c.outputs), limit) << below << " workers";
    }
  // Nothing fits within too few workers: an error that says how close it came.
  auto none = fitWorkers(p, on(1), limit, c.outputs, k - 1);
  ASSERT_FALSE(bool(none));
  EXPECT_NE(llvm::toString(none.takeError()).find("no plan on at most"), std::string::npos);
}

TEST(MemoryFit, ParseBytes) {
  EXPECT_EQ(*parseBytes("80GB"), int64_t(80e9));
  EXPECT_EQ(*parseBytes("16GiB"), int64_t(16) << 30);
  EXPECT_EQ(*parseBytes("1.5 TiB"), int64_t(3) << 39);
  EXPECT_EQ(*parseBytes("12e9"), int64_t(12e9));
  EXPECT_EQ(*parseBytes("512mib"), int64_t(512) << 20);
  EXPECT_EQ(*parseBytes("4096"), 4096);
  for (const char *bad : {"", "abc", "12 XB", "-5GB", "0", "0.1"}) {
    auto b = parseBytes(bad);
    EXPECT_FALSE(bool(b)) << bad;
    if (!b)
      llvm::consumeError(b.takeError());
  }
}

// What a peak is made of: the tiles live when the most bytes are, by role, add up to the
// tiles liveAtMost counts, and the largest of them are named; in bf16 the activations the backward
// pass reads are partly bfloat16, and the weights float32 still.
TEST(MemoryFit, LiveTilesAtThePeakAddUpByRoleAndPrecision) {
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    std::vector<std::string> outputs;
    // SGD and a batch of 32: the peak is in the backward pass, not at the update.
    Problem p =
        trainingProblem(buildTransformer(2, 256, 4, 64, 32), Optimizer::SGD, &outputs, precision);
    auto plan = searchPlan(p, on(2));
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    const MemoryPlan m = planMemory(p, buildExecPlan(p, *plan), outputs);
    const WorkerMemory &w = m.workers[m.largestPeakWorker()];
    const LiveAtMost live = liveAtMost(w);
    const LiveTiles tiles = liveTilesAt(p, w, live.time);
    std::printf("%s: tiles %lld (weights %lld, state %lld, activations %lld, gradients %lld, "
                "inputs %lld; bfloat16 %lld)\n",
                precisionName(precision), (long long)live.tiles, (long long)tiles.weights,
                (long long)tiles.optimizerState, (long long)tiles.activations,
                (long long)tiles.gradients, (long long)tiles.inputs, (long long)tiles.bfloat16);
    EXPECT_EQ(tiles.total(), live.tiles);
    EXPECT_GT(tiles.weights, 0);
    EXPECT_EQ(tiles.optimizerState, 0); // SGD keeps none
    EXPECT_GT(tiles.activations, tiles.weights);
    int64_t weightBytes = 0;
    for (const ProblemTensor &t : p.tensors)
      if (t.role == TensorRole::Weight)
        weightBytes += int64_t(t.storageBytes()) * boxElements(wholeBox(t.shape));
    // Weights live the whole step: every worker holds its 1/2 share, or all of a tensor
    // it replicates, stored as float32 in either precision.
    EXPECT_GE(tiles.weights * 2, weightBytes);
    // The largest tiles: the worker's own buffers at that time, largest first, none
    // larger than the tensor.
    ASSERT_FALSE(tiles.largest.empty());
    EXPECT_LE(tiles.largest.size(), kLargestLiveTiles);
    int64_t largestBytes = 0;
    for (size_t i = 0; i < tiles.largest.size(); ++i) {
      const auto &[t, bytes] = tiles.largest[i];
      int64_t own = 0;
      for (const Buffer &b : w.buffers)
        if (b.kind == Buffer::Kind::Tile && b.tensor == t && b.start <= live.time &&
            live.time < b.end)
          own += b.bytes;
      EXPECT_EQ(bytes, own) << p.tensors[t].name;
      EXPECT_LE(
          bytes,
          (int64_t(p.tensors[t].storageBytes()) * boxElements(wholeBox(p.tensors[t].shape)) + 3) /
              4 * 4);
      if (i > 0)
        EXPECT_LE(bytes, tiles.largest[i - 1].second);
      largestBytes += bytes;
    }
    EXPECT_LE(largestBytes, live.tiles);
    if (precision == Precision::FP32) {
      EXPECT_EQ(tiles.bfloat16, 0);
    } else {
      EXPECT_GT(tiles.bfloat16, 0);
      EXPECT_LE(tiles.bfloat16, tiles.activations + tiles.gradients);
    }
  }
}

} // namespace
} // namespace tofu
