// The engine: partitioned training steps on compiled kernels reproduce the unpartitioned
// step of the same engine and the double-precision interpreter, move exactly the bytes the
// plan predicts, run in arenas of the planned size with every unwritten buffer poisoned, and
// train over many steps, resuming at another worker count; with tensors stored in bfloat16
// (--precision bf16), the same against the graph held in float32.
#include "runtime/engine.h"

#include <cmath>
#include <cstdio>

#include "codegen/fusion.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_executor.h"
#include "runtime/training_data.h"
#include "support/bf16.h"
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

/// Storage in bfloat16 (--precision bf16): the same training graph, its bfloat16 tensors
/// held in 2 bytes, against the same graph held in float32 (the engine emulating it: the
/// graph's casts round to bfloat16, every other value float32) and partitioned against
/// unpartitioned, on data as training sees it.
void checkBfloat16(const std::string &what, llvm::Expected<Graph> g,
                   const std::vector<unsigned> &ks) {
  std::vector<std::string> outputs;
  Problem bf16 = trainingProblem(std::move(g), Optimizer::SGD, &outputs, Precision::BF16);
  Problem emulated = bf16; // the same graph, every tensor held in float32
  unsigned narrow = 0;
  for (ProblemTensor &t : emulated.tensors)
    if (t.storage == ElementType::BFloat16) {
      t.storage = ElementType::Float32;
      ++narrow;
    }
  ASSERT_GT(narrow, 0u) << what << ": the policy stores no tensor in bfloat16";
  // Data as training sees it (weights at their initial scale, one-hot labels), not random
  // values of any size: a loss of 95 over logits in the hundreds, rounded at 2^-9 of
  // their size, compared nothing but rounding.
  auto given = trainingValues(bf16, outputs.at(0), 3, 0.1);
  auto wide = start(emulated, 1, given);
  auto one = start(bf16, 1, given);
  ASSERT_TRUE(wide && one);
  EXPECT_FALSE(wide->engine->program().hasBfloat16());
  EXPECT_TRUE(one->engine->program().hasBfloat16());
  // A bfloat16 tile takes 2 bytes an element (buffers rounded to whole 4-byte words): the
  // arena is the memory plan's, smaller than the float32 one's.
  EXPECT_EQ(one->engine->arenaBytes().at(0), one->memory.largestPeak());
  EXPECT_LT(one->engine->arenaBytes().at(0), wide->engine->arenaBytes().at(0)) << what;
  auto sw = wide->engine->step();
  auto s1 = one->engine->step();
  ASSERT_TRUE(sw && s1) << what;
  // What is held in bfloat16 reads back as bfloat16 values: the arena holds their bits.
  const Program &prog = one->engine->program();
  unsigned checked = 0;
  for (unsigned t = 0; t < prog.tensors.size(); ++t) {
    if (prog.tensors[t].element != loops::Element::BF16 || !one->engine->holdsTile(t, 0))
      continue;
    ++checked;
    for (double v : one->engine->get(t).data)
      ASSERT_TRUE(std::isnan(v) || static_cast<float>(v) == roundToBf16(static_cast<float>(v)))
          << what << ": '" << prog.tensors[t].name << "' holds " << v;
  }
  EXPECT_GT(checked, 0u);
  // A backend that holds float32 alone refuses the program, saying which backends run it.
  class Float32Only final : public ForwardingBackend {
  public:
    std::string name() const override { return "float32-only"; }
    llvm::Error prepare(const Program &p) override {
      inner_ = cpu()();
      return inner_->prepare(p);
    }
  };
  auto refused = Engine::create(one->engine->program(), std::make_unique<Float32Only>());
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()),
            "the float32-only backend does not run plans that store tensors in bfloat16 "
            "(precision bf16); the cpu, mpi, cuda and nccl backends do");
  // Against the float32-held step: what storage in bfloat16 adds is rounding each stored
  // value to 8 significant bits (relative 2^-9 each, compounding over the step's layers).
  double fromWide = 0;
  for (unsigned t : resultTensors(bf16, *one->engine))
    fromWide = std::max(fromWide, maxRelativeError(one->engine->get(t), wide->engine->get(t)));
  EXPECT_LE(fromWide, kBfloat16StepTolerance) << what << ": against the float32-held step";
  for (unsigned k : ks) {
    auto run = start(bf16, k, given);
    ASSERT_TRUE(run);
    auto s = run->engine->step();
    ASSERT_TRUE(bool(s)) << what << " k=" << k << ": " << llvm::toString(s.takeError());
    EXPECT_EQ(s->bytesMoved, run->predicted) << what << " k=" << k;
    double worst = 0;
    for (unsigned t : resultTensors(bf16, *run->engine))
      worst = std::max(worst, maxRelativeError(run->engine->get(t), one->engine->get(t)));
    EXPECT_LE(worst, kBfloat16StepTolerance) << what << " k=" << k;
    int64_t arenas = 0;
    for (int64_t b : run->engine->arenaBytes())
      arenas = std::max(arenas, b);
    EXPECT_EQ(arenas, run->memory.largestPeak());
    std::printf("%s in bf16, k=%u: against k=1 %.3g; k=1 against the float32-held step %.3g; "
                "%lld bytes moved = predicted; largest arena %lld bytes (k=1: %lld, float32-held "
                "%lld)\n",
                what.c_str(), k, worst, fromWide, (long long)s->bytesMoved, (long long)arenas,
                (long long)one->engine->arenaBytes().at(0),
                (long long)wide->engine->arenaBytes().at(0));
  }
}

TEST(Engine, Bfloat16StorageTrainingSteps) {
  // Under AddressSanitizer one model of the three, in turn with the commit.
  if (runsInSampledCheck(0, 1))
    checkBfloat16("gpt", buildTransformer(1, 16, 2, 4, 2, 24), {2, 4});
  if (runsInSampledCheck(1, 1))
    checkBfloat16("mlp", buildMlp({64, 96, 32}, 16), {2, 4});
  if (runsInSampledCheck(2, 1))
    checkBfloat16("wresnet", buildModel("wresnet-50-1-i32-c4-k10", 8), {2, 4});
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
