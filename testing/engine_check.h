// What the engine's tests check of a backend, shared by the CPU engine's tests and the CUDA
// backend's: a model's plan for k workers (searched, element-wise chains fused as tofu-run
// runs them) started on a fresh backend with given values, and checkModel: the unpartitioned
// float32 step against the double-precision interpreter, then each partitioned step against
// it — bytes moved equal to the plan's prediction, arenas of the planned size, no NaN.
#ifndef TOFU_TESTING_ENGINE_CHECK_H
#define TOFU_TESTING_ENGINE_CHECK_H

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "partition/problem.h"
#include "runtime/engine.h"

namespace tofu {

/// A fresh backend for each engine a check starts.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

struct CheckRun {
  ExecPlan exec;
  MemoryPlan memory;
  std::unique_ptr<Engine> engine;
  int64_t predicted = 0;
  unsigned folded = 0; ///< element-wise nodes folded into their readers
};

/// The fused plan for k workers on a backend from `backend`, `given` values set; null (with
/// the test's failure recorded) when any stage fails.
std::unique_ptr<CheckRun> startRun(const Problem &p, unsigned k,
                                   const std::map<unsigned, Tensor> &given,
                                   const BackendFactory &backend, const EngineOptions &options);

/// Tensors that hold results at the end of a step: each weight (after its update is
/// carried) and the loss.
std::vector<unsigned> resultTensors(const Problem &p, const Engine &e);

/// Checks one model on the backend: k = 1 against the interpreter (no share left to it,
/// some on a library call, nothing NaN), then each k of `ks` against k = 1 (within
/// kFloat32StepTolerance, the predicted bytes, the largest arena the memory plan's peak;
/// with EngineOptions::profile, every worker timed some compute). Prints a line per k.
void checkModel(const std::string &what, const Problem &p, const std::vector<unsigned> &ks,
                const BackendFactory &backend, const EngineOptions &options,
                const std::map<std::string, std::vector<double>> &constants = {});

} // namespace tofu

#endif // TOFU_TESTING_ENGINE_CHECK_H
