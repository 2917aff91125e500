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

/// Storage in bfloat16 (--precision bf16) on the GPU: the same bf16 training step on the
/// CUDA backend (cuBLAS GemmEx and cuDNN on bfloat16 operands with float32 accumulation,
/// generated kernels on bfloat16 buffers, box copies converting between types) against the
/// CPU engine's, unpartitioned and at k = 2 and 4 virtual workers. Both round at the same
/// points; products accumulate in another order, so a rounded value may land an ulp apart
/// (2^-8 relative), compounding over the step like any bf16 step (kBfloat16StepTolerance).
void checkBfloat16(const std::string &what, llvm::Expected<Graph> g) {
  std::vector<std::string> outputs;
  Problem p = trainingProblem(std::move(g), Optimizer::SGD, &outputs, Precision::BF16);
  const auto given = trainingValues(p, outputs.at(0), 3, 0.1);
  BackendFactory cpu = [] {
    CpuBackendOptions o;
    o.threadsPerWorker = 1;
    return makeCpuBackend(o);
  };
  auto reference = startRun(p, 1, given, cpu, options());
  ASSERT_TRUE(reference);
  ASSERT_TRUE(reference->engine->program().hasBfloat16()) << what;
  auto want = reference->engine->step();
  ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
  for (unsigned k : {1u, 2u, 4u}) {
    auto run = startRun(p, k, given, cuda(), options());
    ASSERT_TRUE(run) << what << " k=" << k;
    auto got = run->engine->step();
    ASSERT_TRUE(bool(got)) << what << " k=" << k << ": " << llvm::toString(got.takeError());
    double worst = 0;
    for (unsigned t : resultTensors(p, *run->engine)) {
      const Tensor a = run->engine->get(t), b = reference->engine->get(t);
      for (double v : a.data)
        ASSERT_FALSE(std::isnan(v))
            << what << " k=" << k << ": '" << run->engine->program().tensors[t].name << "'";
      worst = std::max(worst, maxRelativeError(a, b));
    }
    EXPECT_LE(worst, kBfloat16StepTolerance) << what << " k=" << k;
    const std::vector<int64_t> arenas = run->engine->arenaBytes();
    EXPECT_EQ(*std::max_element(arenas.begin(), arenas.end()), run->memory.largestPeak()) << what;
    const BackendStats stats = run->engine->backendStats();
    if (k == 1)
      EXPECT_GT(stats.library, 0u) << what << ": no bf16 share ran on cuBLAS or cuDNN";
    std::printf("GPU bf16 %s k=%u: %u library calls (%u declined), worst %.3g against the CPU "
                "engine\n",
                what.c_str(), k, stats.library, stats.libraryDeclined, worst);
  }
}

TEST(CudaBackend, Bfloat16TrainingStepsMatchTheCpuEngine) {
  TOFU_REQUIRE_GPU();
  checkBfloat16("mlp", buildMlp({64, 96, 32}, 16));
  checkBfloat16("gpt", buildTransformer(1, 16, 2, 4, 2, 24));
  checkBfloat16("wresnet", buildModel("wresnet-50-1-i32-c4-k10", 2));
}

} // namespace
} // namespace tofu
