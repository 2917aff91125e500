// Swapping (planner/swap.h): with memory enough only the batch crosses the host link; with
// less, tensors go out and come back, never more on the device than the budget, the step
// no shorter than its compute or than its bytes over the link; a node that cannot fit is
// refused by name.
#include "planner/swap.h"

#include <gtest/gtest.h>

#include "graph/test_library.h"

namespace tofu {
namespace {

struct Step {
  PipelineResult r;
  std::vector<unsigned> order;
  std::vector<double> seconds;
  int64_t inputBytes = 0; ///< the batch's
};

Step stepOf(const std::string &model, int64_t batch) {
  GraphSource s;
  s.model = model;
  s.batch = batch;
  s.batchGiven = true;
  PipelineOptions o;
  o.train = Optimizer::Adam;
  o.until = Stage::Execution;
  o.search.workers = 1;
  auto r = runPipeline(s, testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  Step out;
  if (!r)
    return out;
  out.r = std::move(*r);
  const Problem &p = *out.r.problem;
  for (const NodeExec &ne : out.r.exec.nodes)
    out.order.push_back(ne.node);
  // Every node 1 us, so that the figures below follow from the bytes alone.
  out.seconds.assign(p.nodes.size(), 1e-6);
  for (const ProblemTensor &t : p.tensors)
    if (t.role == TensorRole::Input) {
      int64_t e = 1;
      for (int64_t d : t.shape)
        e *= d;
      out.inputBytes += e * t.storageBytes();
    }
  return out;
}

SwapOptions link(int64_t budget) {
  SwapOptions o;
  o.budget = budget;
  o.hostBandwidth = 1e9;
  o.hostLatency = 1e-6;
  return o;
}

TEST(Swap, WithMemoryEnoughOnlyTheBatchMoves) {
  const Step s = stepOf("gpt-1-64-4-16", 8);
  auto whole = estimateSwap(*s.r.problem, s.order, s.seconds, link(int64_t(1) << 40));
  ASSERT_TRUE(bool(whole)) << llvm::toString(whole.takeError());
  // The second step finds every weight and state where the first left them.
  EXPECT_EQ(whole->bytesIn, s.inputBytes);
  EXPECT_EQ(whole->bytesOut, 0);
  EXPECT_EQ(whole->droppedBytes, 0);
  // Everything held at once but the batch, fetched as it is read.
  EXPECT_LE(whole->peakBytes, whole->wholeBytes);
  EXPECT_GE(whole->peakBytes, whole->wholeBytes - s.inputBytes);
  EXPECT_NEAR(whole->computeSeconds, 1e-6 * double(s.order.size()), 1e-12);
  EXPECT_GE(whole->seconds, whole->computeSeconds);
  // At most the batch's transfers are waited for.
  EXPECT_LE(whole->stallSeconds, double(s.inputBytes) / 1e9 + 1e-6 * whole->transfersIn + 1e-12);
}

TEST(Swap, LessMemorySwapsWithinTheBudget) {
  const Step s = stepOf("gpt-1-64-4-16", 8);
  auto whole = estimateSwap(*s.r.problem, s.order, s.seconds, link(int64_t(1) << 40));
  ASSERT_TRUE(bool(whole));
  const int64_t budget = std::max(whole->largestNodeBytes, whole->wholeBytes / 2);
  ASSERT_LT(budget, whole->wholeBytes);
  auto half = estimateSwap(*s.r.problem, s.order, s.seconds, link(budget));
  ASSERT_TRUE(bool(half)) << llvm::toString(half.takeError());
  EXPECT_LE(half->peakBytes, budget);
  EXPECT_GT(half->bytesIn, s.inputBytes);
  // What goes to the host comes back: every byte sent out in the step is a result or an
  // update, and more than the budget leaves no room to keep them all.
  EXPECT_GT(half->bytesOut, 0);
  // The step is no shorter than its compute, nor than its bytes to the device over the link.
  EXPECT_GE(half->seconds, half->computeSeconds);
  EXPECT_GE(half->seconds, double(half->bytesIn) / 1e9);
  EXPECT_GT(half->seconds, whole->seconds);
  // A slower link makes a slower step.
  SwapOptions slow = link(budget);
  slow.hostBandwidth = 1e8;
  auto slower = estimateSwap(*s.r.problem, s.order, s.seconds, slow);
  ASSERT_TRUE(bool(slower));
  EXPECT_GT(slower->seconds, half->seconds);
}

TEST(Swap, RefusesWhatCannotRun) {
  const Step s = stepOf("gpt-1-64-4-16", 8);
  auto whole = estimateSwap(*s.r.problem, s.order, s.seconds, link(int64_t(1) << 40));
  ASSERT_TRUE(bool(whole));
  auto small = estimateSwap(*s.r.problem, s.order, s.seconds, link(whole->largestNodeBytes - 1));
  ASSERT_FALSE(bool(small));
  EXPECT_NE(
      llvm::toString(small.takeError()).find("node '" + whole->largestNode + "' reads and writes"),
      std::string::npos);
  SwapOptions none = link(int64_t(1) << 30);
  none.hostBandwidth = 0;
  auto noLink = estimateSwap(*s.r.problem, s.order, s.seconds, none);
  ASSERT_FALSE(bool(noLink));
  EXPECT_NE(llvm::toString(noLink.takeError()).find("swap needs a host link"), std::string::npos);
}

TEST(Swap, TheBaselineCreditsEachWorkerItsOwnReplica) {
  GraphSource s;
  s.model = "gpt-1-64-4-16";
  s.batch = 8;
  s.batchGiven = true;
  PipelineOptions o;
  o.train = Optimizer::Adam;
  auto h100 = deviceModelNamed("h100");
  ASSERT_TRUE(bool(h100));
  SwapOptions so;
  so.budget = int64_t(1) << 40;
  so.hostBandwidth = h100->hostBandwidth;
  so.hostLatency = h100->hostLatency;
  auto all = swapping(s, testLibrary(), o, so, 8, *h100);
  ASSERT_TRUE(bool(all)) << llvm::toString(all.takeError());
  // Between the largest node and the step's tensors: it swaps.
  so.budget = (all->swap.largestNodeBytes + all->swap.wholeBytes) / 2;
  auto r = swapping(s, testLibrary(), o, so, 8, *h100);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->batch, 8);
  EXPECT_GT(r->plannedPeak, so.budget);
  EXPECT_GT(r->swap.bytesOut, 0);
  EXPECT_GT(r->swap.seconds, all->swap.seconds);
  ASSERT_GT(r->swap.seconds, 0);
  EXPECT_DOUBLE_EQ(r->samplesPerSecond, 8 / r->swap.seconds);
  EXPECT_DOUBLE_EQ(r->allWorkers, 8 * r->samplesPerSecond);
}

} // namespace
} // namespace tofu
