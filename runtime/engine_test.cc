// The float32 engine: partitioned training steps on compiled kernels reproduce the
// unpartitioned step of the same engine and the double-precision interpreter, move exactly
// the bytes the plan predicts, run in arenas of the planned size with every unwritten
// buffer poisoned, and train over many steps, resuming at another worker count.
#include "runtime/engine.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "codegen/fusion.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/zoo.h"
#include "runtime/cpu_executor.h"
#include "search/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

EngineOptions testOptions() {
  EngineOptions o;
  o.compile.cacheDir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/kernels";
  o.checking = true;
  o.threadsPerWorker = 1;
  return o;
}

struct Run {
  ExecPlan exec;
  MemoryPlan memory;
  std::unique_ptr<Engine> engine;
  int64_t predicted = 0;
  unsigned folded = 0; ///< element-wise nodes folded into their readers
};

std::unique_ptr<Run> start(const Problem &p, unsigned k, const std::map<unsigned, Tensor> &given) {
  auto run = std::make_unique<Run>();
  PlanOptions o;
  o.workers = k;
  auto plan = searchPlan(p, o);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  run->predicted = p.exactCost(plan->steps);
  // Element-wise chains folded, as tofu-run runs them; fusion moves no bytes.
  FusedPlan fused = fuseElementwise(p, buildExecPlan(p, *plan), {});
  run->folded = fused.folded;
  run->exec = std::move(fused.plan);
  run->memory = planMemory(fused.problem, run->exec, {});
  EXPECT_EQ(checkMemoryPlan(run->memory), "");
  EXPECT_EQ(run->exec.bytesMoved(fused.problem), run->predicted);
  auto e = Engine::create(fused.problem, run->exec, run->memory, testOptions());
  EXPECT_TRUE(bool(e)) << llvm::toString(e.takeError());
  if (!e)
    return nullptr;
  run->engine = std::move(*e);
  for (const auto &[t, v] : given) {
    llvm::Error err = run->engine->set(t, v);
    EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }
  return run;
}

/// Tensors that hold results at the end of a step: the loss, and each weight (after its update is carried).
std::vector<unsigned> results(const Problem &p, const Engine &e) {
  std::vector<unsigned> out;
  for (auto [upd, tgt] : e.carries())
    out.push_back(tgt);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].producer >= 0 && p.tensors[t].consumers.empty() &&
        p.tensors[t].role != TensorRole::OptimizerState)
      out.push_back(t);
  return out;
}

void checkModel(const std::string &what, const Problem &p, std::vector<unsigned> ks,
                const std::map<std::string, std::vector<double>> &constants = {}) {
  auto given = randomGraphInputs(p, 3);
  applyConstants(p, constants, given); // an imported model's constants keep their values
  auto reference = runReference(p, given);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto one = start(p, 1, given);
  ASSERT_TRUE(one);
  auto s1 = one->engine->step();
  ASSERT_TRUE(bool(s1)) << llvm::toString(s1.takeError());
  EXPECT_EQ(one->engine->backendStats().interpreted, 0u) << what;
  // Every model here has matrix products or convolutions: oneDNN computes them.
  EXPECT_GT(one->engine->backendStats().library, 0u) << what;
  // The engine's unpartitioned float32 step against the double-precision interpreter: a
  // weight after the step holds the reference's updated value.
  std::map<unsigned, unsigned> updatedBy;
  for (auto [upd, tgt] : one->engine->carries())
    updatedBy[tgt] = upd;
  double worstRef = 0;
  for (unsigned t : results(p, *one->engine)) {
    unsigned ref = updatedBy.count(t) ? updatedBy[t] : t;
    worstRef = std::max(worstRef, maxRelativeError(one->engine->get(t), (*reference)[ref]));
  }
  EXPECT_LE(worstRef, kFloat32StepTolerance) << what << ": k=1 against the interpreter";
  // The comparisons skip NaN on both sides: the step must produce numbers to compare.
  for (unsigned t : results(p, *one->engine))
    for (double v : one->engine->get(t).data)
      ASSERT_FALSE(std::isnan(v)) << what << ": '" << p.tensors[t].name << "' is NaN after a step";
  for (unsigned k : ks) {
    auto run = start(p, k, given);
    ASSERT_TRUE(run);
    auto s = run->engine->step();
    ASSERT_TRUE(bool(s)) << what << " k=" << k << ": " << llvm::toString(s.takeError());
    EXPECT_EQ(s->bytesMoved, run->predicted) << what << " k=" << k;
    double worst = 0;
    std::string where;
    for (unsigned t : results(p, *run->engine)) {
      double e = maxRelativeError(run->engine->get(t), one->engine->get(t));
      if (e > worst) {
        worst = e;
        where = p.tensors[t].name;
      }
    }
    EXPECT_LE(worst, kFloat32StepTolerance) << what << " k=" << k << ": worst tensor " << where;
    int64_t arenas = 0;
    for (int64_t b : run->engine->arenaBytes())
      arenas = std::max(arenas, b);
    EXPECT_EQ(arenas, run->memory.largestPeak());
    std::printf("%s k=%u: against k=1 %.3g, k=1 against the interpreter %.3g; %lld bytes moved "
                "= predicted; largest arena %lld bytes; %u shares on oneDNN; %u nodes fused\n",
                what.c_str(), k, worst, worstRef, (long long)s->bytesMoved, (long long)arenas,
                run->engine->backendStats().library, run->folded);
  }
}

TEST(Engine, MlpTrainingStep) {
  checkModel("mlp", trainingProblem(buildMlp({64, 96, 32}, 16)), {2, 3, 4, 6, 8});
}

TEST(Engine, LstmTrainingStep) {
  checkModel("rnn", trainingProblem(buildRnn(2, 8, 4, 3)), {2, 3, 4, 8});
}

TEST(Engine, TransformerTrainingStep) {
  checkModel("gpt", trainingProblem(buildTransformer(1, 16, 2, 4, 2, 24)), {2, 3, 4, 8});
}

TEST(Engine, WResNetTrainingStep) {
  checkModel("wresnet", trainingProblem(buildModel("wresnet-50-1-i32-c4-k10", 2)), {2, 4, 8});
}

TEST(Engine, OnnxTransformerTrainingStep) {
  auto g = importOnnx("tests/onnx/transformer.onnx", testLibrary());
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  auto loss = addLoss(*g, testLibrary());
  ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  // Its constants (LayerNorm's epsilon, the attention scale) keep their values: drawn at
  // random like data, a negative epsilon made every weight NaN (the old known defect).
  std::map<std::string, std::vector<double>> constants = g->constants;
  EXPECT_FALSE(constants.empty());
  checkModel("onnx transformer", trainingProblem(std::move(*g)), {2, 4}, constants);
}

/// The loss after each of `steps` steps.
std::vector<double> train(Engine &e, unsigned loss, unsigned steps) {
  std::vector<double> out;
  for (unsigned s = 0; s < steps; ++s) {
    auto r = e.step();
    EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
    out.push_back(e.get(loss).data.at(0));
  }
  return out;
}

TEST(Engine, TrainsOverManyStepsAndResumesAtAnotherK) {
  std::vector<std::string> outputs;
  Problem p = trainingProblem(buildMlp({32, 64, 10}, 8), Optimizer::SGD, &outputs);
  unsigned loss = 0;
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].name == outputs.at(0))
      loss = t;
  auto given = trainingValues(p, outputs.at(0), 5, 0.5);
  // 20 steps at k = 2 without a break...
  auto straight = start(p, 2, given);
  ASSERT_TRUE(straight);
  std::vector<double> all = train(*straight->engine, loss, 20);
  EXPECT_LT(all.back(), 0.5 * all.front()) << "the loss falls: " << all.front() << " -> " << all.back();
  // ... equal 10 steps at k = 2, then every weight moved to an engine at k = 4 for 10 more.
  auto first = start(p, 2, given);
  std::vector<double> a = train(*first->engine, loss, 10);
  auto second = start(p, 4, given);
  for (auto [upd, tgt] : first->engine->carries()) {
    llvm::Error e = second->engine->set(tgt, first->engine->get(tgt));
    ASSERT_FALSE(bool(e));
  }
  std::vector<double> b = train(*second->engine, loss, 10);
  a.insert(a.end(), b.begin(), b.end());
  for (size_t s = 0; s < all.size(); ++s)
    EXPECT_NEAR(a[s], all[s], kFloat32StepTolerance * std::max(1.0, std::fabs(all[s]))) << "step " << s;
}

} // namespace
} // namespace tofu
