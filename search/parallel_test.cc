// The search's helper threads: every part runs once, and with no threads the caller runs
// them all.
#include "search/parallel.h"

#include <atomic>
#include <set>
#include <thread>

#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(WorkerPool, RunsEveryPartOnceThenReturns) {
  for (unsigned threads : {1u, 2u, 4u}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int job = 0; job < 200; ++job) {
      std::vector<std::atomic<int>> ran(threads);
      std::vector<std::thread::id> who(threads);
      pool.run([&](unsigned t) {
        ran[t].fetch_add(1);
        who[t] = std::this_thread::get_id();
      });
      // Every part ran exactly once before run() returned, part 0 on this thread, the
      // others each on a thread of their own.
      for (unsigned t = 0; t < threads; ++t)
        ASSERT_EQ(ran[t].load(), 1) << "threads " << threads << " part " << t;
      EXPECT_EQ(who[0], std::this_thread::get_id());
      EXPECT_EQ(std::set<std::thread::id>(who.begin(), who.end()).size(), threads);
    }
  }
}

TEST(WorkerPool, ZeroThreadsMeansTheCallerAlone) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.threads(), 1u);
  int calls = 0;
  pool.run([&](unsigned t) {
    EXPECT_EQ(t, 0u);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_GE(WorkerPool::defaultThreads(), 1u);
  EXPECT_LE(WorkerPool::defaultThreads(), 8u);
}

} // namespace
} // namespace tofu
