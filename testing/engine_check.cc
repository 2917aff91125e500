// The engine checks shared by the backends' tests.
#include "testing/engine_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "codegen/fusion.h"
#include "codegen/program_builder.h"
#include "runtime/cpu_executor.h"
#include "runtime/training_data.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {

std::unique_ptr<CheckRun> startRun(const Problem &p, unsigned k,
                                   const std::map<unsigned, Tensor> &given,
                                   const BackendFactory &backend, const EngineOptions &options) {
  auto run = std::make_unique<CheckRun>();
  auto plan = searchedPlan(p, k);
  if (!plan)
    return nullptr;
  run->predicted = predictedBytes(p, *plan);
  // Element-wise chains folded, as tofu-run runs them; fusion moves no bytes.
  FusedPlan fused = fuseElementwise(p, buildExecPlan(p, *plan), {});
  run->folded = fused.folded;
  run->exec = std::move(fused.plan);
  run->memory = planMemory(fused.problem, run->exec, {});
  EXPECT_EQ(checkMemoryPlan(run->memory), "");
  EXPECT_EQ(run->exec.bytesMoved(fused.problem), run->predicted);
  auto program = buildProgram(fused.problem, run->exec, run->memory);
  EXPECT_TRUE(bool(program)) << llvm::toString(program.takeError());
  if (!program)
    return nullptr;
  auto e = Engine::create(std::move(*program), backend(), options);
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

std::vector<unsigned> resultTensors(const Problem &p, const Engine &e) {
  std::vector<unsigned> out;
  for (auto [upd, tgt] : e.carries())
    out.push_back(tgt);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].producer >= 0 && p.tensors[t].consumers.empty() &&
        p.tensors[t].role != TensorRole::OptimizerState)
      out.push_back(t);
  return out;
}

void checkModel(const std::string &what, const Problem &p, const std::vector<unsigned> &ks,
                const BackendFactory &backend, const EngineOptions &options,
                const std::map<std::string, std::vector<double>> &constants) {
  auto given = randomGraphInputs(p, 3);
  applyConstants(p, constants, given); // an imported model's constants keep their values
  auto reference = runReference(p, given);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  auto one = startRun(p, 1, given, backend, options);
  ASSERT_TRUE(one);
  auto s1 = one->engine->step();
  ASSERT_TRUE(bool(s1)) << llvm::toString(s1.takeError());
  EXPECT_EQ(one->engine->backendStats().interpreted, 0u) << what;
  // Every model here has matrix products or convolutions: a library computes them.
  EXPECT_GT(one->engine->backendStats().library, 0u) << what;
  // The engine's unpartitioned float32 step against the double-precision interpreter: a
  // weight after the step holds the reference's updated value.
  std::map<unsigned, unsigned> updatedBy;
  for (auto [upd, tgt] : one->engine->carries())
    updatedBy[tgt] = upd;
  double worstRef = 0;
  for (unsigned t : resultTensors(p, *one->engine)) {
    unsigned ref = updatedBy.count(t) ? updatedBy[t] : t;
    worstRef = std::max(worstRef, maxRelativeError(one->engine->get(t), (*reference)[ref]));
  }
  EXPECT_LE(worstRef, kFloat32StepTolerance) << what << ": k=1 against the interpreter";
  // The comparisons skip NaN on both sides: the step must produce numbers to compare.
  for (unsigned t : resultTensors(p, *one->engine))
    for (double v : one->engine->get(t).data)
      ASSERT_FALSE(std::isnan(v)) << what << ": '" << p.tensors[t].name << "' is NaN after a step";
  for (unsigned k : ks) {
    auto run = startRun(p, k, given, backend, options);
    ASSERT_TRUE(run);
    auto s = run->engine->step();
    ASSERT_TRUE(bool(s)) << what << " k=" << k << ": " << llvm::toString(s.takeError());
    EXPECT_EQ(s->bytesMoved, run->predicted) << what << " k=" << k;
    double worst = 0;
    std::string where;
    for (unsigned t : resultTensors(p, *run->engine)) {
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
    if (options.profile) // every worker computed something, and the profile says so
      for (const std::vector<NodeTime> &worker : run->engine->profile()) {
        double compute = 0;
        for (const NodeTime &n : worker)
          compute += n.computeSeconds;
        EXPECT_GT(compute, 0.0) << what << " k=" << k;
      }
    std::printf("%s on %s, k=%u: against k=1 %.3g, k=1 against the interpreter %.3g; %lld bytes "
                "moved = predicted; largest arena %lld bytes; %u shares on library calls; %u "
                "nodes fused\n",
                what.c_str(), run->engine->backend().name().c_str(), k, worst, worstRef,
                (long long)s->bytesMoved, (long long)arenas, run->engine->backendStats().library,
                run->folded);
  }
}

} // namespace tofu
