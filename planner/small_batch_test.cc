// SmallBatch (planner/small_batch.h): the largest batch one worker fits is found, and is
// the largest: one more does not fit.
#include "planner/small_batch.h"

#include <gtest/gtest.h>

#include "graph/test_library.h"

namespace tofu {
namespace {

PipelineOptions training() {
  PipelineOptions o;
  o.train = Optimizer::Adam;
  return o;
}

int64_t peakAt(int64_t batch) {
  GraphSource s;
  s.model = "gpt-1-64-4-16";
  s.batch = batch;
  PipelineOptions o = training();
  o.until = Stage::Execution;
  o.search.workers = 1;
  auto r = runPipeline(s, testLibrary(), o);
  EXPECT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  return r ? r->memory.largestPeak() : 0;
}

TEST(SmallBatch, TheLargestBatchThatFitsOneWorker) {
  GraphSource s;
  s.model = "gpt-1-64-4-16";
  s.batch = 64;
  // A budget halfway between the peaks of batches 1 and 64: the batch found fits, one more
  // does not.
  const int64_t p1 = peakAt(1), p64 = peakAt(64);
  ASSERT_LT(p1, p64);
  const int64_t budget = (p1 + p64) / 2;
  auto r = smallBatch(s, testLibrary(), training(), budget, 8, *deviceModelNamed("h100"));
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  ASSERT_GT(r->batch, 1);
  ASSERT_LT(r->batch, 64);
  EXPECT_EQ(r->peak, peakAt(r->batch));
  EXPECT_LE(r->peak, budget);
  EXPECT_EQ(r->over, r->batch + 1);
  EXPECT_EQ(r->overPeak, peakAt(r->batch + 1));
  EXPECT_GT(r->overPeak, budget);
  EXPECT_LE(r->tried, 9u); // 64, 1, then bisection
  ASSERT_GT(r->step.seconds, 0);
  EXPECT_DOUBLE_EQ(r->samplesPerSecond, double(r->batch) / r->step.seconds);
  EXPECT_DOUBLE_EQ(r->allWorkers, 8 * r->samplesPerSecond);
  // The batch asked for, when it fits; none, when a batch of 1 does not.
  auto all = smallBatch(s, testLibrary(), training(), peakAt(64), 2, *deviceModelNamed("h100"));
  ASSERT_TRUE(static_cast<bool>(all));
  EXPECT_EQ(all->batch, 64);
  EXPECT_EQ(all->over, 0);
  EXPECT_EQ(all->tried, 1u);
  auto none = smallBatch(s, testLibrary(), training(), 1000, 2, *deviceModelNamed("h100"));
  ASSERT_FALSE(static_cast<bool>(none));
  EXPECT_NE(llvm::toString(none.takeError()).find("even a batch of 1 does not fit one worker"),
            std::string::npos);
}

} // namespace
} // namespace tofu
