// What the native part's two halves share (module.cc: planning; trainer.cc: training):
// tofu's exception kinds, the operator libraries loaded, and a plan's settings as the
// pipeline's options.
#ifndef TOFU_PYTHON_NATIVE_H
#define TOFU_PYTHON_NATIVE_H

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "analysis/interpreter.h"
#include "graph/library.h"
#include "planner/pipeline.h"
#include "planner/topology.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "runtime/process_group.h"
#include "llvm/Support/Error.h"

namespace tofupy {

namespace py = pybind11;

/// A failure, with the kind of exception it raises.
struct Failure {
  enum Kind { Usage, Model, Plan, Data, Other } kind = Plan; ///< Other: tofu.Error itself
  std::string message;
};

/// `e` as a failure of `kind`, or of bad usage where it is a UsageError.
Failure failure(llvm::Error e, Failure::Kind kind);
/// Raises the exception of `f`'s kind (tofu.UsageError, ...) with its message.
[[noreturn]] void raise(const Failure &f);

/// The operator library in `dir`, loaded and checked once per process; null with `failed`
/// set where it does not load. Thread-safe (called without the GIL).
const tofu::OpLibrary *library(const std::string &dir, Failure &failed);

/// What tofu.plan was asked (python/tofu/__init__.py checks the types and fills the names).
struct PlanArgs {
  std::string model, onnxPath, name;
  py::bytes onnxBytes;
  /// A module's export at the microbatch's batch, where microbatches > 1 (a module's export
  /// has its example's shapes, fixed: the microbatch's model is exported on its own).
  py::bytes microOnnxBytes;
  int64_t batch = 0; ///< 0: the model's default (zoo: 32), an ONNX model's own
  unsigned workers = 1;
  bool train = true;
  std::string optimizer = "adam", precision = "fp32", algorithm = "tofu", megatron, stages;
  unsigned microbatches = 0; ///< 0: not given
  std::string schedule, memoryPerWorker, recompute, topology, device = "h100";
  std::string objective = "time"; ///< what the search minimises (tofu-plan --objective)
  std::string anchor, opsDir;
};

/// The model `a` names, as the pipeline reads it.
tofu::GraphSource graphSource(const PlanArgs &a);

/// `a`'s model through the pipeline with `options`, on the operator library `a` names
/// (ops_dir, else the one found from the module's file), which `lib` gets. A failure is bad
/// usage (the library), the model's (reading and analysing it) or the plan's (the rest).
/// Call it without the GIL.
std::optional<Failure> runModel(const PlanArgs &a, const tofu::PipelineOptions &options,
                                const tofu::OpLibrary *&lib,
                                std::optional<tofu::PipelineResult> &result);

/// The engine of `plan` on `backend` ("cpu", "mpi") for `group`'s processes (`local`: in
/// this process alone), with the backend's default settings.
llvm::Expected<std::unique_ptr<tofu::Engine>>
makeEngine(const std::string &backend, tofu::ProcessGroup &group, const tofu::Problem &p,
           const tofu::ExecPlan &plan, const tofu::MemoryPlan &memory,
           const tofu::EngineOptions &options, bool local);

/// The pipeline's options from `a`, as tofu-plan makes them from its flags; errors are bad
/// usage naming the argument.
std::optional<Failure> pipelineOptions(const PlanArgs &a, tofu::PipelineOptions &o,
                                       std::optional<tofu::Topology> &topology,
                                       std::optional<int64_t> &budget);

/// A numpy array as a data set's array (`name` names it in messages), its bytes copied once;
/// a dtype tofu does not feed, or a scalar, is a data failure.
std::optional<Failure> arrayOf(const std::string &name, const py::array &given,
                               tofu::DataArray &out);

/// A whole tensor as a float32 numpy array of its shape (the engine's type).
py::array_t<float> numpyOf(const tofu::Tensor &t);

/// The training half's bindings (trainer.cc), and inference's (infer.cc).
void bindTrainer(py::module_ &m);
void bindInfer(py::module_ &m);

} // namespace tofupy

#endif // TOFU_PYTHON_NATIVE_H
