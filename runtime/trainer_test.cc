// The trainer as a library: the observer sees every step; a partitioned run verifies
// against the unpartitioned step; a checkpoint resumes the step count and the schedule and
// continues the same losses as one longer run; bad metadata and options are usage errors.
#include "runtime/trainer.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "graph/test_library.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "runtime/cpu_engine.h"
#include "support/errors.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

EngineOptions testEngine() {
  EngineOptions o;
  o.compile.cacheDir = testKernelCache();
  o.threadsPerWorker = 1;
  o.checking = true;
  return o;
}

EngineFactory cpuFactory() {
  return [](const Problem &p, const ExecPlan &plan, const MemoryPlan &memory,
            const EngineOptions &options, bool) { return makeCpuEngine(p, plan, memory, options); };
}

/// The zoo's MLP, trained with `optimizer`, planned for `workers` workers.
struct Planned {
  PipelineResult r;
  SingleWorker one;
  EnginePlan engine;
};
std::unique_ptr<Planned> plan(unsigned workers, Optimizer optimizer = Optimizer::Momentum) {
  auto out = std::make_unique<Planned>();
  GraphSource source;
  source.model = "mlp";
  source.batch = 8;
  PipelineOptions o;
  o.train = optimizer;
  o.until = Stage::Execution;
  o.search.workers = workers;
  auto r = runPipeline(source, testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  if (!r)
    return nullptr;
  out->r = std::move(*r);
  out->one = singleWorker(*out->r.problem, out->r.graph.outputs);
  auto e = planForEngine(*out->r.problem, out->r.exec, out->r.memory, out->r.graph.outputs,
                         /*fuse=*/true);
  EXPECT_TRUE(bool(e)) << llvm::toString(e.takeError());
  if (!e)
    return nullptr;
  out->engine = std::move(*e);
  return out;
}

TrainerOptions options(const Planned &p, unsigned steps) {
  TrainerOptions o;
  o.name = "mlp";
  o.optimizer = Optimizer::Momentum;
  o.steps = steps;
  o.seed = 5;
  o.engine = testEngine();
  o.referenceExec = &p.one.exec;
  o.referenceMemory = &p.one.memory;
  o.workers = static_cast<int>(p.r.plan.workers);
  return o;
}

llvm::Expected<std::unique_ptr<Trainer>> make(const Planned &p, TrainerOptions o) {
  return Trainer::create(*p.r.problem, p.r.graph, p.r.loss, p.engine, std::move(o), cpuFactory(),
                         localProcessGroup());
}

struct Recorder : TrainerObserver {
  std::vector<StepRecord> steps;
  void stepped(const StepRecord &r) override { steps.push_back(r); }
};

TEST(Trainer, StepsVerifiesAndResumes) {
  auto two = plan(2);
  ASSERT_TRUE(two);
  // Eight steps in one run.
  TrainerOptions all = options(*two, 8);
  all.lrSchedule = llvm::cantFail(parseLrSchedule("step:3:0.5"));
  all.verify = true;
  auto whole = make(*two, all);
  ASSERT_TRUE(bool(whole)) << llvm::toString(whole.takeError());
  Recorder seen;
  ASSERT_FALSE(bool((*whole)->train(seen)));
  ASSERT_EQ(seen.steps.size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_EQ(seen.steps[i].index, i);
    EXPECT_EQ(seen.steps[i].done, i + 1);
    EXPECT_TRUE(std::isfinite(seen.steps[i].loss));
    EXPECT_EQ(seen.steps[i].loss, (*whole)->losses()[i]);
  }
  EXPECT_EQ((*whole)->bytesMoved(), predictedBytes(*two->r.problem, two->r.plan));
  auto v = (*whole)->verify(-1);
  ASSERT_TRUE(bool(v)) << llvm::toString(v.takeError());
  EXPECT_TRUE(v->passed) << v->worstTensor << " " << v->worst;
  EXPECT_EQ(v->verdict, "passed");
  EXPECT_EQ(v->tolerance, kFloat32StepTolerance);
  EXPECT_EQ(v->compared, (*whole)->engine().carries().size() + 1);

  // Five steps, saved; then three more from the checkpoint: the same losses as the one run
  // (the schedule and the batches continue from step 5).
  const std::string dir = testTmpDir("ckpt");
  TrainerOptions first = options(*two, 5);
  first.lrSchedule = llvm::cantFail(parseLrSchedule("step:3:0.5"));
  first.saveDir = dir;
  auto a = make(*two, first);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  Recorder ignored;
  ASSERT_FALSE(bool((*a)->train(ignored)));
  auto saved = (*a)->save(dir);
  ASSERT_TRUE(bool(saved)) << llvm::toString(saved.takeError());
  EXPECT_EQ(saved->stepsTrained, 5u);
  EXPECT_EQ(saved->tiles, 0u); // one process: one whole file
  EXPECT_GT(saved->tensors, 0u);

  TrainerOptions rest = options(*two, 3);
  rest.loadDir = dir; // no schedule given: the checkpoint's
  auto b = make(*two, rest);
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ((*b)->stepsBefore(), 5u);
  ASSERT_NE((*b)->resumed(), nullptr);
  EXPECT_EQ((*b)->hyper().schedule.str(), "step:3:0.5");
  Recorder after;
  ASSERT_FALSE(bool((*b)->train(after)));
  ASSERT_EQ(after.steps.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(after.steps[i].done, 6 + i);
    EXPECT_NEAR(after.steps[i].loss, (*whole)->losses()[5 + i],
                1e-5 * std::max(1.0, std::abs((*whole)->losses()[5 + i])));
  }
}

TEST(StepVerify, RelativeDifference) {
  EXPECT_EQ(relativeDifference(2.0f, 2.0f), 0.0);
  EXPECT_DOUBLE_EQ(relativeDifference(0.5f, 0.25f), 0.25); // below 1: absolute
  EXPECT_DOUBLE_EQ(relativeDifference(-9.0f, -10.0f), 0.1);
  EXPECT_DOUBLE_EQ(relativeDifference(10.0f, 9.0f), 1.0 / 9.0); // relative to the reference
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(relativeDifference(inf, 1.0f), inf);
  EXPECT_EQ(relativeDifference(1.0f, -inf), inf);
  EXPECT_EQ(relativeDifference(std::nanf(""), 1.0f), inf);
}

TEST(Trainer, BadMetadataAndOptionsAreUsageErrors) {
  auto one = plan(1);
  ASSERT_TRUE(one);
  const std::string dir = testTmpDir("ckpt-bad");
  {
    TrainerOptions o = options(*one, 1);
    o.saveDir = dir;
    auto t = make(*one, o);
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    Recorder r;
    ASSERT_FALSE(bool((*t)->train(r)));
    ASSERT_TRUE(bool((*t)->save(dir)));
  }
  // Another optimiser's checkpoint: its state does not carry over. The message names the
  // setting by its field, or as the caller's names spell it (a tool's flags).
  for (const SettingNames &names : {SettingNames(), SettingNames::flags()}) {
    TrainerOptions o = options(*one, 1);
    o.optimizer = Optimizer::SGD;
    o.loadDir = dir;
    o.names = names;
    auto t = make(*one, o);
    ASSERT_FALSE(bool(t));
    std::string message;
    EXPECT_EQ(exitStatusOf(t.takeError(), message), 2);
    const std::string setting = names("optimizer");
    EXPECT_NE(message.find("trained with " + setting +
                           " momentum, this run uses sgd: its state "
                           "does not carry over (give " +
                           setting + " momentum)"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("--") != std::string::npos, setting == "--optimizer") << message;
  }
  // A cosine schedule that ends within its warm-up.
  for (const SettingNames &names : {SettingNames(), SettingNames::flags()}) {
    TrainerOptions o = options(*one, 4);
    o.lrSchedule = llvm::cantFail(parseLrSchedule("cosine"));
    o.warmup = 4;
    o.names = names;
    auto t = make(*one, o);
    ASSERT_FALSE(bool(t));
    std::string message;
    EXPECT_EQ(exitStatusOf(t.takeError(), message), 2);
    EXPECT_NE(message.find(names("lr-schedule") +
                           " cosine:4 ends at step 4, within the 4 steps "
                           "of " +
                           names("warmup")),
              std::string::npos)
        << message;
  }
  // A missing checkpoint fails the run (status 1), naming the folder.
  {
    TrainerOptions o = options(*one, 1);
    o.loadDir = testTmpDir("no-such-checkpoint");
    auto t = make(*one, o);
    ASSERT_FALSE(bool(t));
    std::string message;
    EXPECT_EQ(exitStatusOf(t.takeError(), message), 1);
    EXPECT_NE(message.find("no-such-checkpoint"), std::string::npos) << message;
  }
  // verify() without the first step's results kept.
  {
    auto t = make(*one, options(*one, 1));
    ASSERT_TRUE(bool(t));
    Recorder r;
    ASSERT_FALSE(bool((*t)->train(r)));
    auto v = (*t)->verify(-1);
    ASSERT_FALSE(bool(v));
    EXPECT_NE(llvm::toString(v.takeError()).find("not kept"), std::string::npos);
  }
}

TEST(Trainer, WholeTensorAndLocalGroup) {
  ProcessGroup &g = localProcessGroup();
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.size(), 1);
  EXPECT_FALSE(g.distributed());
  EXPECT_EQ(g.sum(7), 7);
  EXPECT_EQ(g.allGatherText("a b"), std::vector<std::string>{"a b"});
  EXPECT_TRUE(g.sameOnEvery(3));
}

} // namespace
} // namespace tofu
