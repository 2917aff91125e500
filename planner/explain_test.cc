// --explain's account of a plan: the chosen plan's step split into compute, communication
// and bubble, which add up to the estimate; each stage's heaviest ops and their cuts; the
// runner-ups of the other kinds, each planned and priced against the chosen plan.
#include "planner/explain.h"

#include <string>

#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

GraphSource gpt(int64_t batch) {
  GraphSource s;
  s.model = "gpt-2-64-4-16";
  s.batch = batch;
  return s;
}

PipelineOptions training(unsigned workers) {
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.search.workers = workers;
  o.device = llvm::cantFail(deviceModelNamed("h100"));
  return o;
}

Explanation explained(const GraphSource &s, const PipelineOptions &o) {
  auto r = runPipeline(s, testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  if (!r)
    return {};
  auto x = explainPlan(s, testLibrary(), o, *r);
  EXPECT_TRUE(bool(x)) << llvm::toString(x.takeError());
  return x ? std::move(*x) : Explanation();
}

const RunnerUp *runnerUp(const Explanation &x, const std::string &kind) {
  for (const RunnerUp &r : x.runnerUps)
    if (r.kind == kind)
      return &r;
  return nullptr;
}

TEST(Explain, APlanWithoutStagesAgainstTodaysAlternatives) {
  const Explanation x = explained(gpt(8), training(4));
  EXPECT_EQ(x.workers, 4u);
  EXPECT_EQ(x.plan, "tofu by time");
  // Without stages the step is the critical worker's compute plus communication.
  EXPECT_EQ(x.cost.bubble, 0);
  EXPECT_NEAR(x.cost.compute + x.cost.communication, x.cost.seconds, 1e-12);
  EXPECT_GT(x.cost.peak, 0);
  ASSERT_EQ(x.stages.size(), 1u);
  EXPECT_EQ(x.stages[0].workers, 4u);
  EXPECT_EQ(x.stages[0].layers, 0u);
  ASSERT_EQ(x.stages[0].heaviest.size(), 3u);
  for (size_t i = 1; i < 3; ++i)
    EXPECT_GE(x.stages[0].heaviest[i - 1].seconds, x.stages[0].heaviest[i].seconds);
  for (const HeavyOp &h : x.stages[0].heaviest)
    EXPECT_FALSE(h.cut.empty() || h.cut == "-") << h.node;
  // Its own kind is not a runner-up; the others are, each planned at 4 workers.
  EXPECT_EQ(runnerUp(x, "no-pipeline"), nullptr);
  for (const char *kind : {"megatron", "zero3", "pipeline"}) {
    const RunnerUp *r = runnerUp(x, kind);
    ASSERT_NE(r, nullptr) << kind;
    ASSERT_TRUE(r->cost) << kind << ": " << r->whyNot;
    EXPECT_GT(r->cost->seconds, 0) << kind;
    // Its parts add up to its step.
    EXPECT_NEAR(r->cost->compute + r->cost->communication + r->cost->bubble, r->cost->seconds, 1e-9)
        << kind;
  }
  EXPECT_EQ(runnerUp(x, "pipeline")->flags, "--stages 2 --microbatches 4");
  EXPECT_GT(runnerUp(x, "pipeline")->cost->bubble, 0);
  // ZeRO-3 gathers every weight twice a step: more communication than the chosen plan's.
  const StepCost &zero3 = *runnerUp(x, "zero3")->cost;
  EXPECT_GT(zero3.communication, x.cost.communication);
  EXPECT_NE(costsMore(zero3, x.cost).find("communication"), std::string::npos);
}

TEST(Explain, APipelinesStagesAndItsRunnerUps) {
  PipelineOptions o = training(4);
  o.stages.stages = 2;
  o.stages.microbatches = 2;
  const Explanation x = explained(gpt(8), o);
  ASSERT_EQ(x.stages.size(), 2u);
  EXPECT_EQ(x.stages[1].firstWorker, 2u);
  EXPECT_GT(x.stages[0].layers, 0u);
  EXPECT_EQ(x.stages[0].firstLayer + x.stages[0].layers, x.stages[1].firstLayer);
  EXPECT_NEAR(x.cost.compute + x.cost.communication + x.cost.bubble, x.cost.seconds, 1e-9);
  EXPECT_GT(x.cost.bubble, 0);
  EXPECT_EQ(runnerUp(x, "pipeline"), nullptr);
  const RunnerUp *megatron = runnerUp(x, "megatron-stages");
  ASSERT_NE(megatron, nullptr);
  EXPECT_EQ(megatron->flags, "--megatron 2,2,1 --microbatches 2");
  ASSERT_TRUE(megatron->cost) << megatron->whyNot;
  const RunnerUp *whole = runnerUp(x, "no-pipeline");
  ASSERT_NE(whole, nullptr);
  ASSERT_TRUE(whole->cost) << whole->whyNot;
  EXPECT_EQ(whole->cost->bubble, 0);
}

TEST(Explain, WhatARunnerUpCostsMoreInWords) {
  StepCost chosen, other;
  chosen.seconds = 1e-3;
  chosen.compute = 0.6e-3;
  chosen.communication = 0.4e-3;
  chosen.peak = 1 << 30;
  other = chosen;
  other.seconds = 1.5e-3;
  other.communication = 0.9e-3;
  other.peak = 3 << 29;
  EXPECT_EQ(costsMore(other, chosen),
            "+0.500 ms, mostly communication (+0.500 ms); 512.00 MiB more "
            "memory");
  EXPECT_EQ(costsMore(chosen, other),
            "0.500 ms shorter, mostly by communication (0.500 ms); 512.00 MiB less memory");
}

} // namespace
} // namespace tofu
