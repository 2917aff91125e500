// The float32 engine: partitioned training steps on compiled kernels reproduce the
// unpartitioned step of the same engine and the double-precision interpreter, move exactly
// the bytes the plan predicts, run in arenas of the planned size with every unwritten
// buffer poisoned, and train over many steps, resuming at another worker count.
#include "runtime/engine.h"

#include <cmath>
#include <cstdio>

#include "codegen/fusion.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/zoo.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_executor.h"
#include "runtime/training_data.h"
#include "testing/engine_check.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

EngineOptions testOptions() {
  EngineOptions o;
  o.compile.cacheDir = testKernelCache();
  o.checking = true;
  o.threadsPerWorker = 1;
  return o;
}

/// The CPU backend as Engine::create's CPU overload makes it from the test's options.
BackendFactory cpu() {
  return [] {
    CpuBackendOptions o;
    o.compile = testOptions().compile;
    o.threadsPerWorker = testOptions().threadsPerWorker;
    return makeCpuBackend(o);
  };
}

void checkModel(const std::string &what, const Problem &p, const std::vector<unsigned> &ks,
                const std::map<std::string, std::vector<double>> &constants = {}) {
  tofu::checkModel(what, p, ks, cpu(), testOptions(), constants);
}

std::unique_ptr<CheckRun> start(const Problem &p, unsigned k,
                                const std::map<unsigned, Tensor> &given) {
  return startRun(p, k, given, cpu(), testOptions());
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
  EXPECT_LT(all.back(), 0.5 * all.front())
      << "the loss falls: " << all.front() << " -> " << all.back();
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
    EXPECT_NEAR(a[s], all[s], kFloat32StepTolerance * std::max(1.0, std::fabs(all[s])))
        << "step " << s;
}

} // namespace
} // namespace tofu
