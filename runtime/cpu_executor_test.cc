// Partitioned training steps reproduce the unpartitioned ones, the bytes the executor
// copies between workers are the bytes the cost model predicts, and the memory planner's
// arenas are sound and within 1.3x of the single-worker peak / k.
#include "runtime/cpu_executor.h"

#include <cstdio>

#include "codegen/memory_plan.h"
#include "graph/training.h"

#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/zoo.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

int64_t singlePeak(const Problem &p, const std::vector<std::string> &outputs) {
  auto plan = searchedPlan(p, 1);
  MemoryPlan m = planMemory(p, buildExecPlan(p, *plan), outputs);
  EXPECT_EQ(checkMemoryPlan(m), "");
  return m.largestPeak();
}

void checkModel(const std::string &what, const Problem &p, std::vector<unsigned> ks) {
  auto given = randomGraphInputs(p, 3);
  const std::vector<std::string> outputs;
  const int64_t single = singlePeak(p, outputs);
  auto reference = runReference(p, given);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  for (size_t i = 0; i < ks.size(); ++i) {
    // Under AddressSanitizer half the worker counts, in turn with the commit.
    if (!runsInSampledCheck(i, 1, 2))
      continue;
    const unsigned k = ks[i];
    auto plan = searchedPlan(p, k);
    ASSERT_TRUE(plan.has_value());
    ExecPlan exec = buildExecPlan(p, *plan);
    // The plan moves exactly what the cost model counts.
    EXPECT_EQ(exec.bytesMoved(p), predictedBytes(p, *plan)) << what << " k=" << k;
    auto r = runPlan(p, exec, given);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(r->bytesMoved, exec.bytesMoved(p)) << what << " k=" << k;
    double worst = 0;
    std::string where;
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      double e = maxRelativeError(r->tensors[t], (*reference)[t]);
      if (e > worst) {
        worst = e;
        where = p.tensors[t].name;
      }
    }
    EXPECT_LE(worst, 1e-4) << what << " k=" << k << ": worst tensor " << where;
    MemoryPlan m = planMemory(p, exec, outputs);
    EXPECT_EQ(checkMemoryPlan(m), "") << what << " k=" << k;
    std::printf("%s k=%u: peak %lld bytes, single-worker peak / k %lld, ratio %.3f\n", what.c_str(),
                k, (long long)m.largestPeak(), (long long)(single / k),
                double(m.largestPeak()) * k / double(single));
    // The target: every worker within 1.3x of the single-worker peak / k.
    EXPECT_LE(double(m.largestPeak()) * k, 1.3 * double(single)) << what << " k=" << k;
  }
}

TEST(CpuExecutor, MlpTrainingStep) {
  checkModel("mlp", trainingProblem(buildMlp({64, 96, 32}, 16)), {2, 3, 4, 6, 8});
}

TEST(CpuExecutor, LstmTrainingStep) {
  checkModel("rnn", trainingProblem(buildRnn(2, 8, 4, 3)), {2, 3, 4, 8});
}

TEST(CpuExecutor, TransformerTrainingStep) {
  checkModel("gpt", trainingProblem(buildTransformer(1, 16, 2, 4, 2, 24)), {2, 3, 4, 8});
}

TEST(CpuExecutor, WResNetTrainingStep) {
  // WResNet-50 with 32x32 images, a stem 4 channels wide and 10 classes: every layer of the
  // real model, small enough for the interpreter.
  checkModel("wresnet", trainingProblem(buildModel("wresnet-50-1-i32-c4-k10", 2)), {2, 3, 4, 8});
}

TEST(CpuExecutor, OnnxTransformerTrainingStep) {
  auto g = importOnnx("tests/onnx/transformer.onnx", testLibrary());
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  auto loss = addLoss(*g, testLibrary());
  ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  checkModel("onnx transformer", trainingProblem(std::move(*g)), {2, 4});
}

TEST(CpuExecutor, MissingInputsAreErrors) {
  Problem p = trainingProblem(buildMlp({4, 6, 2}, 2));
  auto plan = searchedPlan(p, 2);
  ASSERT_TRUE(plan.has_value());
  auto r = runPlan(p, buildExecPlan(p, *plan), {});
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("no value given for tensor"), std::string::npos);
}

} // namespace
} // namespace tofu
