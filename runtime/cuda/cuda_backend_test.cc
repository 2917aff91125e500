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

#include "codegen/program_builder.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/zoo.h"
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

} // namespace
} // namespace tofu
