// The CUDA backend on a GPU: the unpartitioned float32 step reproduces the double-precision
// interpreter, and partitioned steps at k = 2, 4, 8 virtual workers (k arenas and k streams
// on one device) reproduce the unpartitioned one; they
// move exactly the bytes the plan predicts, run in arenas of the planned size with every
// unwritten buffer poisoned, and report device-side phase times. Without a usable device
// (CI: cudaErrorInsufficientDriver) the engine refuses the backend with the runtime's
// reason, and the GPU tests say so and skip.
#include "runtime/cuda/cuda_backend.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "codegen/fusion.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/zoo.h"
#include "runtime/cpu_executor.h"
#include "runtime/engine.h"
#include "codegen/program.h"
#include "search/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

#define TOFU_REQUIRE_GPU()                                                                  \
  do {                                                                                      \
    if (llvm::Error e = cudaDeviceUsable())                                                 \
      GTEST_SKIP() << "SKIPPED: " << llvm::toString(std::move(e));                          \
  } while (0)

std::string tmp(const std::string &leaf) {
  return std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/" + leaf;
}

EngineOptions options(bool profile = false) {
  EngineOptions o;
  o.compile.cacheDir = tmp("kernels");
  o.checking = true;
  o.threadsPerWorker = 1;
  o.profile = profile;
  return o;
}

struct Run {
  ExecPlan exec;
  MemoryPlan memory;
  std::unique_ptr<Engine> engine;
  int64_t predicted = 0;
};

/// The fused plan for k workers on the CUDA backend, values set.
std::unique_ptr<Run> start(const Problem &p, unsigned k, const std::map<unsigned, Tensor> &given,
                           bool profile = false) {
  auto run = std::make_unique<Run>();
  PlanOptions o;
  o.workers = k;
  auto plan = searchPlan(p, o);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return nullptr;
  run->predicted = p.exactCost(plan->steps);
  FusedPlan fused = fuseElementwise(p, buildExecPlan(p, *plan), {});
  run->exec = std::move(fused.plan);
  run->memory = planMemory(fused.problem, run->exec, {});
  auto program = buildProgram(fused.problem, run->exec, run->memory);
  EXPECT_TRUE(bool(program)) << llvm::toString(program.takeError());
  if (!program)
    return nullptr;
  CudaBackendOptions co;
  co.cubins.cacheDir = tmp("cubins");
  auto e = Engine::create(std::move(*program), makeCudaBackend(co), options(profile));
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

void checkModel(const std::string &what, const Problem &p,
                const std::map<std::string, std::vector<double>> &constants = {}) {
  auto given = randomGraphInputs(p, 3);
  applyConstants(p, constants, given);
  auto reference = runReference(p, given);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto one = start(p, 1, given);
  ASSERT_TRUE(one);
  auto s1 = one->engine->step();
  ASSERT_TRUE(bool(s1)) << llvm::toString(s1.takeError());
  EXPECT_GT(one->engine->backendStats().library, 0u) << what;
  std::map<unsigned, unsigned> updatedBy;
  for (auto [upd, tgt] : one->engine->carries())
    updatedBy[tgt] = upd;
  double worstRef = 0;
  for (unsigned t : results(p, *one->engine)) {
    const Tensor got = one->engine->get(t);
    for (double v : got.data)
      ASSERT_FALSE(std::isnan(v)) << what << ": '" << p.tensors[t].name << "' is NaN after a step";
    unsigned ref = updatedBy.count(t) ? updatedBy[t] : t;
    worstRef = std::max(worstRef, maxRelativeError(got, (*reference)[ref]));
  }
  EXPECT_LE(worstRef, kFloat32StepTolerance) << what << ": k=1 against the interpreter";
  for (unsigned k : {2u, 4u, 8u}) {
    auto run = start(p, k, given, k == 2);
    ASSERT_TRUE(run) << what << " k=" << k;
    auto s = run->engine->step();
    ASSERT_TRUE(bool(s)) << what << " k=" << k << ": " << llvm::toString(s.takeError());
    EXPECT_EQ(s->bytesMoved, run->predicted) << what << " k=" << k;
    double worst = 0;
    std::string where;
    for (unsigned t : results(p, *run->engine)) {
      double e = maxRelativeError(run->engine->get(t), one->engine->get(t));
      if (e > worst)
        worst = e, where = p.tensors[t].name;
    }
    EXPECT_LE(worst, kFloat32StepTolerance) << what << " k=" << k << ": worst tensor " << where;
    if (k == 2) { // device-side times: every worker spent time in kernels
      for (const std::vector<NodeTime> &worker : run->engine->profile()) {
        double compute = 0;
        for (const NodeTime &n : worker)
          compute += n.computeSeconds;
        EXPECT_GT(compute, 0.0) << what;
      }
    }
    int64_t arenas = 0;
    for (int64_t b : run->engine->arenaBytes())
      arenas = std::max(arenas, b);
    std::printf("GPU %s k=%u: against k=1 %.3g, k=1 against the interpreter %.3g; %lld bytes "
                "moved = predicted; largest arena %lld bytes; %u shares on cuBLAS/cuDNN/scatter\n",
                what.c_str(), k, worst, worstRef, (long long)s->bytesMoved, (long long)arenas,
                run->engine->backendStats().library);
  }
}

TEST(CudaBackend, WithoutADeviceTheEngineSaysWhy) {
  if (!cudaDeviceUsable()) // a GPU is there: the other tests cover it
    GTEST_SKIP() << "a CUDA device is present";
  Problem p = trainingProblem(buildMlp({8, 8}, 2));
  auto plan = searchPlan(p, PlanOptions{});
  ASSERT_TRUE(bool(plan));
  ExecPlan exec = buildExecPlan(p, *plan);
  MemoryPlan memory = planMemory(p, exec, {});
  auto program = buildProgram(p, exec, memory);
  ASSERT_TRUE(bool(program));
  auto e = Engine::create(std::move(*program), makeCudaBackend(), options());
  ASSERT_FALSE(bool(e));
  const std::string why = llvm::toString(e.takeError());
  EXPECT_NE(why.find("no usable CUDA device"), std::string::npos) << why;
  std::printf("without a GPU: %s\n", why.c_str());
}

TEST(CudaBackend, MlpTrainingStep) {
  TOFU_REQUIRE_GPU();
  checkModel("mlp", trainingProblem(buildMlp({64, 96, 32}, 16)));
}

TEST(CudaBackend, LstmTrainingStep) {
  TOFU_REQUIRE_GPU();
  checkModel("rnn", trainingProblem(buildRnn(2, 8, 4, 3)));
}

TEST(CudaBackend, TransformerTrainingStep) {
  TOFU_REQUIRE_GPU();
  checkModel("gpt", trainingProblem(buildTransformer(1, 16, 2, 4, 2, 24)));
}

TEST(CudaBackend, WResNetTrainingStep) {
  TOFU_REQUIRE_GPU();
  checkModel("wresnet", trainingProblem(buildModel("wresnet-50-1-i32-c4-k10", 2)));
}

TEST(CudaBackend, OnnxResNet18TrainingStep) {
  TOFU_REQUIRE_GPU();
  auto g = importOnnx("tests/onnx/resnet18.onnx", testLibrary());
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  auto loss = addLoss(*g, testLibrary());
  ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  std::map<std::string, std::vector<double>> constants = g->constants;
  checkModel("onnx resnet18", trainingProblem(std::move(*g)), constants);
}

} // namespace
} // namespace tofu
