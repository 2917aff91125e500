// The pipeline's memory stage: under a budget and with recomputation the plan is the
// recomputation planner's own choice; across processes (PipelineOptions::agree) the others
// rebuild the same step and plan from the chooser's texts without planning; a budget no plan
// fits fails at the Plan stage with the one message and the driver's hint.
#include "planner/pipeline.h"

#include <string>
#include <vector>

#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "partition/plan.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// A small MLP; at a large batch its activations, not its weights, set the peak.
Graph mlp(int64_t batch = 8) {
  auto g = buildMlp({64, 32, 32, 10}, batch);
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  return std::move(*g);
}

PipelineOptions training(unsigned workers) {
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.until = Stage::Execution;
  o.search.workers = workers;
  return o;
}

/// A plan's text without its search time.
std::string untimed(PartitionPlan plan) {
  plan.searchSeconds = 0;
  return encodePlan(plan);
}

PipelineResult run(const PipelineOptions &o, int64_t batch = 8) {
  auto r = runPipeline(mlp(batch), "mlp", testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return r ? std::move(*r) : PipelineResult();
}

TEST(Pipeline, RecomputationUnderABudgetIsThePlannersChoice) {
  // The step and its plan without the pipeline's help.
  PipelineOptions upTo = training(2);
  upTo.until = Stage::Graph;
  const Graph step = run(upTo, 512).graph;
  auto sqrt = planWithRecomputation(step, testLibrary(), upTo.search, 0, RecomputeMode::Sqrt);
  ASSERT_TRUE(bool(sqrt)) << llvm::toString(sqrt.takeError());
  ASSERT_FALSE(sqrt->summary.dropped.empty());
  // Auto under the budget sqrt's set meets: something is dropped, and the plan fits.
  const int64_t limit = sqrt->fit.peak;
  ASSERT_LT(limit, sqrt->peakWithout);
  auto direct = planWithRecomputation(step, testLibrary(), upTo.search, limit, RecomputeMode::Auto);
  ASSERT_TRUE(bool(direct)) << llvm::toString(direct.takeError());
  ASSERT_TRUE(direct->fit.fits);

  PipelineOptions o = training(2);
  o.memoryPerWorker = limit;
  o.recompute = RecomputeMode::Auto;
  const PipelineResult r = run(o, 512);
  EXPECT_EQ(r.recomputed.dropped, direct->summary.dropped);
  EXPECT_EQ(graphToJson(r.graph), graphToJson(direct->graph));
  EXPECT_EQ(untimed(r.plan), untimed(direct->fit.plan));
  EXPECT_EQ(r.memory.largestPeak(), direct->fit.peak);
  EXPECT_LE(r.memory.largestPeak(), limit);
  ASSERT_TRUE(r.withoutRecomputation.has_value());
  EXPECT_EQ(graphToJson(*r.withoutRecomputation), graphToJson(step));
  ASSERT_TRUE(r.budget && r.budget->recompute);
  EXPECT_EQ(r.budget->limit, limit);
  EXPECT_EQ(r.budget->fit.peak, direct->fit.peak);
  EXPECT_EQ(r.budget->recompute->candidates, direct->candidates);
}

TEST(Pipeline, OtherProcessesTakeTheChoosersTextsWithoutPlanning) {
  PipelineOptions first = training(2);
  first.recompute = RecomputeMode::Sqrt;
  std::vector<std::string> sent;
  first.agree = [&](const std::function<llvm::Expected<std::string>()> &choose)
      -> llvm::Expected<std::string> {
    auto text = choose();
    if (text)
      sent.push_back(*text);
    return text;
  };
  const PipelineResult chooser = run(first);
  ASSERT_EQ(sent.size(), 2u); // what to recompute, then the plan
  ASSERT_FALSE(chooser.recomputed.dropped.empty());
  ASSERT_TRUE(chooser.budget.has_value());

  PipelineOptions other = training(2);
  other.recompute = RecomputeMode::Sqrt;
  size_t received = 0;
  other.agree =
      [&](const std::function<llvm::Expected<std::string>()> &) -> llvm::Expected<std::string> {
    EXPECT_LT(received, sent.size());
    return received < sent.size() ? sent[received++] : std::string();
  };
  const PipelineResult follower = run(other);
  EXPECT_EQ(received, 2u);
  EXPECT_FALSE(follower.budget.has_value()); // it chose nothing
  EXPECT_EQ(follower.recomputed.dropped, chooser.recomputed.dropped);
  EXPECT_EQ(follower.recomputed.copies, chooser.recomputed.copies);
  EXPECT_EQ(graphToJson(follower.graph), graphToJson(chooser.graph));
  EXPECT_EQ(encodePlan(follower.plan), encodePlan(chooser.plan));
  EXPECT_EQ(follower.memory.largestPeak(), chooser.memory.largestPeak());
  EXPECT_EQ(follower.exec.nodes.size(), chooser.exec.nodes.size());
  ASSERT_TRUE(follower.withoutRecomputation.has_value());
}

TEST(Pipeline, ABudgetNoPlanFitsFailsThePlanStageWithTheDriversHint) {
  for (bool recomputing : {false, true}) {
    PipelineOptions o = training(2);
    o.memoryPerWorker = 1000;
    if (recomputing)
      o.recompute = RecomputeMode::Auto;
    o.noFitHint = "; try more workers";
    Stage failed = Stage::Graph;
    auto r = runPipeline(mlp(), "mlp", testLibrary(), o, &failed);
    ASSERT_FALSE(bool(r));
    const std::string message = llvm::toString(r.takeError());
    EXPECT_EQ(failed, Stage::Plan);
    EXPECT_EQ(message.rfind(std::string("mlp: no plan found for 2 workers fits in 1000.00 B per "
                                        "worker") +
                                (recomputing ? ", even recomputing every forward tensor the "
                                               "backward pass reads: the closest (tofu) has"
                                             : ": the closest (tofu) has"),
                            0),
              0u)
        << message;
    EXPECT_NE(message.find(" over; try more workers"), std::string::npos) << message;
  }
  // Recomputation belongs to a training step.
  PipelineOptions forward;
  forward.search.workers = 2;
  forward.recompute = RecomputeMode::Sqrt;
  auto r = runPipeline(mlp(), "mlp", testLibrary(), forward);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("recomputation applies to a training step"),
            std::string::npos);
}

TEST(Pipeline, LossOutputsAreNamesWithWeights) {
  auto terms = lossTerms("mel, mel_post ,gate:0.1");
  ASSERT_TRUE(static_cast<bool>(terms)) << llvm::toString(terms.takeError());
  ASSERT_EQ(terms->size(), 3u);
  EXPECT_EQ((*terms)[1].output, "mel_post");
  EXPECT_EQ((*terms)[1].weight, 1.0);
  EXPECT_EQ((*terms)[2].output, "gate");
  EXPECT_EQ((*terms)[2].weight, 0.1);
  EXPECT_TRUE(lossTerms("")->empty());
  for (const auto &[spec, why] : std::vector<std::pair<std::string, std::string>>{
           {"a,", "an empty output name"},
           {"a:0", "the weight '0' of 'a' is not a positive number"},
           {"a:-1", "is not a positive number"},
           {"a:nan", "is not a positive number"},
           {"a:1x", "the weight '1x'"},
           {"a:", "the weight '' of 'a'"},
           {"a,b,a:2", "the output 'a' is named twice"}}) {
    auto bad = lossTerms(spec);
    ASSERT_FALSE(static_cast<bool>(bad)) << spec;
    const std::string message = llvm::toString(bad.takeError());
    EXPECT_NE(message.find(why), std::string::npos) << spec << ": " << message;
    EXPECT_EQ(message.rfind("--loss-output '" + spec + "'", 0), 0u) << message;
  }
}

// --algo megatron without a configuration: every TP dividing the workers, DP the rest, each
// estimated; the plan is the one of least time, and TP = 1 is data parallelism itself.
TEST(Pipeline, MegatronTakesTheBestOfItsGridByEstimatedStep) {
  PipelineOptions o;
  o.train = Optimizer::Adam;
  o.search.workers = 4;
  o.search.algorithm = Algorithm::Megatron;
  o.device = *deviceModelNamed("h100");
  auto g = buildModel("gpt-1-64-4-16", 8);
  ASSERT_TRUE(static_cast<bool>(g));
  auto r = runPipeline(std::move(*g), "gpt", testLibrary(), o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->megatronGrid.size(), 3u);
  std::vector<std::pair<unsigned, unsigned>> configs;
  const MegatronConfig *best = &r->megatronGrid[0];
  for (const MegatronConfig &c : r->megatronGrid) {
    configs.push_back({c.tp, c.dp});
    EXPECT_GT(c.seconds, 0);
    if (c.seconds < best->seconds)
      best = &c;
  }
  EXPECT_EQ(configs, (std::vector<std::pair<unsigned, unsigned>>{{4, 1}, {2, 2}, {1, 4}}));
  EXPECT_EQ(r->plan.totalBytes, best->bytes);
  PlanOptions dp = o.search;
  dp.algorithm = Algorithm::DataParallel;
  auto dataParallel = searchPlan(*r->problem, dp);
  ASSERT_TRUE(static_cast<bool>(dataParallel));
  EXPECT_EQ(r->megatronGrid.back().bytes, dataParallel->totalBytes);
  EXPECT_NE(megatronGridLines(r->megatronGrid, "H100", "").find("chosen"), std::string::npos);
  // Without a device model, TP is every worker: no grid.
  o.device.reset();
  auto plain = runPipeline(*buildModel("gpt-1-64-4-16", 8), "gpt", testLibrary(), o);
  ASSERT_TRUE(static_cast<bool>(plain));
  EXPECT_TRUE(plain->megatronGrid.empty());
  EXPECT_EQ(plain->plan.steps.size(), 1u);
}

} // namespace
} // namespace tofu
