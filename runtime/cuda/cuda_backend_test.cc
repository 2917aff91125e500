// The CUDA backend on a GPU: the unpartitioned float32 step reproduces the double-precision
// interpreter, and partitioned steps at k = 2, 4, 8 virtual workers (k arenas and k streams
// on one device) reproduce the unpartitioned one; they
// move exactly the bytes the plan predicts, run in arenas of the planned size with every
// unwritten buffer poisoned, and report device-side phase times. Without a usable device
// (CI: cudaErrorInsufficientDriver) the engine refuses the backend with the runtime's
// reason, and the GPU tests say so and skip.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "codegen/program_builder.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "runtime/cpu_executor.h"
#include "runtime/training_data.h"
#include "testing/engine_check.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

#define TOFU_REQUIRE_GPU()                                                                         \
  do {                                                                                             \
    if (llvm::Error e = cudaDeviceUsable())                                                        \
      GTEST_SKIP() << "SKIPPED: " << llvm::toString(std::move(e));                                 \
  } while (0)

EngineOptions options(bool profile = false) {
  EngineOptions o;
  o.compile.cacheDir = testKernelCache();
  o.checking = true;
  o.threadsPerWorker = 1;
  o.profile = profile;
  return o;
}

/// The CUDA backend, its cubins cached in the test's directory.
BackendFactory cuda() {
  return [] {
    CudaBackendOptions co;
    co.cubins.cacheDir = testKernelCache();
    return makeCudaBackend(co);
  };
}

/// The unpartitioned step against the interpreter, k = 2, 4, 8 virtual workers against it,
/// with device-side phase times.
void checkModel(const std::string &what, const Problem &p,
                const std::map<std::string, std::vector<double>> &constants = {}) {
  tofu::checkModel("GPU " + what, p, {2, 4, 8}, cuda(), options(true), constants);
}

TEST(CudaBackend, WithoutADeviceTheEngineSaysWhy) {
  if (!cudaDeviceUsable()) // a GPU is there: the other tests cover it
    GTEST_SKIP() << "a CUDA device is present";
  Problem p = trainingProblem(buildMlp({8, 8}, 2));
  auto plan = searchedPlan(p, 8);
  ASSERT_TRUE(plan.has_value());
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

/// Storage in bfloat16 (--precision bf16) on the GPU: the bf16 training step on the CUDA
/// backend (cuBLAS GemmEx and cuDNN on bfloat16 operands with float32 accumulation,
/// generated kernels on bfloat16 buffers, box copies converting between types) against the
/// same graph held in float32 on the GPU (its casts round to bfloat16, every other value
/// float32: what storage in bfloat16 adds is rounding each stored value, compounding over
/// the step, kBfloat16StepTolerance, as engine_test checks it on the CPU), then at k = 2 and
/// 4 virtual workers against k = 1. (No CPU engine here: the GPU bundle carries no oneDNN.)
void checkBfloat16(const std::string &what, llvm::Expected<Graph> g) {
  std::vector<std::string> outputs;
  Problem bf16 = trainingProblem(std::move(g), Optimizer::SGD, &outputs, Precision::BF16);
  Problem emulated = bf16;
  for (ProblemTensor &t : emulated.tensors)
    if (t.storage == ElementType::BFloat16)
      t.storage = ElementType::Float32;
  const auto given = trainingValues(bf16, outputs.at(0), 3, 0.1);
  auto wide = startRun(emulated, 1, given, cuda(), options());
  auto one = startRun(bf16, 1, given, cuda(), options());
  ASSERT_TRUE(wide && one) << what;
  ASSERT_TRUE(one->engine->program().hasBfloat16()) << what;
  ASSERT_FALSE(wide->engine->program().hasBfloat16()) << what;
  auto sw = wide->engine->step();
  auto s1 = one->engine->step();
  ASSERT_TRUE(sw && s1) << what;
  auto worstAgainst = [&](const Engine &a, const Engine &b) {
    double worst = 0;
    for (unsigned t : resultTensors(bf16, a)) {
      const Tensor x = a.get(t);
      for (double v : x.data)
        EXPECT_FALSE(std::isnan(v)) << what << ": '" << a.program().tensors[t].name << "'";
      worst = std::max(worst, maxRelativeError(x, b.get(t)));
    }
    return worst;
  };
  const double fromWide = worstAgainst(*one->engine, *wide->engine);
  EXPECT_LE(fromWide, kBfloat16StepTolerance) << what << ": against the float32-held step";
  const BackendStats stats = one->engine->backendStats();
  EXPECT_GT(stats.library, 0u) << what << ": no bf16 share ran on cuBLAS or cuDNN";
  EXPECT_LT(one->engine->arenaBytes().at(0), wide->engine->arenaBytes().at(0)) << what;
  std::printf("GPU bf16 %s k=1: %u library calls (%u declined), %.3g from the float32-held "
              "step\n",
              what.c_str(), stats.library, stats.libraryDeclined, fromWide);
  for (unsigned k : {2u, 4u}) {
    auto run = startRun(bf16, k, given, cuda(), options());
    ASSERT_TRUE(run) << what << " k=" << k;
    auto got = run->engine->step();
    ASSERT_TRUE(bool(got)) << what << " k=" << k << ": " << llvm::toString(got.takeError());
    const double worst = worstAgainst(*run->engine, *one->engine);
    EXPECT_LE(worst, kBfloat16StepTolerance) << what << " k=" << k;
    const std::vector<int64_t> arenas = run->engine->arenaBytes();
    EXPECT_EQ(*std::max_element(arenas.begin(), arenas.end()), run->memory.largestPeak()) << what;
    std::printf("GPU bf16 %s k=%u: %.3g from k=1\n", what.c_str(), k, worst);
  }
}

TEST(CudaBackend, Bfloat16TrainingSteps) {
  TOFU_REQUIRE_GPU();
  checkBfloat16("mlp", buildMlp({64, 96, 32}, 16));
  checkBfloat16("gpt", buildTransformer(1, 16, 2, 4, 2, 24));
  checkBfloat16("wresnet", buildModel("wresnet-50-1-i32-c4-k10", 2));
}

} // namespace
} // namespace tofu
