// The parts of tofu-run's driver (tofu_run.cc) that its run modes share: the process group
// and fail(), the engine of --backend, and the three ways a run ends (training on the
// engine, inference, one step on the reference executor).
#ifndef TOFU_TOFU_RUN_DRIVER_H
#define TOFU_TOFU_RUN_DRIVER_H

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "partition/plan.h"
#include "planner/pipeline.h"
#include "runtime/backend_registry.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "runtime/input_arrays.h"
#include "runtime/process_group.h"
#include "runtime/training_data.h"
#include "tofu_run/evaluation.h"

namespace tofurun {

/// The processes of this run: this one alone, or those mpirun started (--backend mpi, nccl).
extern tofu::ProcessGroup *group;

/// Prints `msg` (with this process's rank under mpirun, and then ends the whole job) and
/// returns `code`.
int fail(const std::string &msg, int code = 1);
/// fail() with an error's message and status (2 for bad usage, support/errors.h).
int fail(llvm::Error e);

/// The engine options the command line gives.
tofu::EngineOptions engineOptions();
/// --tf32 and --mpi-transport, for the backends that read them.
tofu::BackendSettings backendSettings();
/// The engine of --backend running `plan` (runtime/backend_registry.h).
/// `local`: the engine runs in this process alone (the unpartitioned reference of --verify).
llvm::Expected<std::unique_ptr<tofu::Engine>>
makeEngine(const tofu::Problem &p, const tofu::ExecPlan &plan, const tofu::MemoryPlan &memory,
           const tofu::EngineOptions &options, bool local = false);

double seconds(std::chrono::steady_clock::time_point since);
double median(std::vector<double> v);
/// The bytes a step of `plan` is predicted to move: the cost model's over its steps, or, for
/// pipeline stages (`exec` of several stages; the plan has no steps of its own), its
/// execution plan's (PartitionPlan::totalBytes).
int64_t predictedBytes(const tofu::Problem &p, const tofu::PartitionPlan &plan,
                       const tofu::ExecPlan &exec);

/// Trains on the engine (train.cc): --steps steps, then the summary (and --verify's
/// comparison). `predicted`: the bytes the plan moves per step. `dataSet`: --data's data
/// set where it was opened before the import (null: the trainer opens it).
/// What --recompute and --memory-per-worker chose (planner/recompute.h), for the report, the
/// budget check and --verify's comparison with the step without recomputation.
struct RecomputeRun {
  int64_t budget = 0;  ///< bytes per worker (0: none given)
  size_t dropped = 0;  ///< tensors recomputed
  std::string line;    ///< the summary, as printed
  nlohmann::json json; ///< the same, for --format=json
  /// Where something is recomputed: the training problem without it and its unpartitioned
  /// plans (--verify runs the first step on it too).
  std::optional<tofu::Problem> plain;
  std::optional<tofu::SingleWorker> plainOne;
};

int runTraining(const tofu::Problem &p, const tofu::Graph &training, const std::string &loss,
                const std::string &name, const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                const tofu::SingleWorker &one, int64_t predicted, const std::string &algorithm,
                const EvalSetup *evalSetup, std::shared_ptr<const tofu::DataSet> dataSet,
                const RecomputeRun *recompute = nullptr);

/// --infer (infer.cc): the forward graph once on the given inputs; every output reported
/// and written.
int runInference(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                 const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                 const tofu::InputArrays &inputs);

/// --infer of a model whose every output holds no element (Graph::emptyOutputs): nothing
/// to compute; each output reported and written.
int inferEmptyOutputs(const tofu::Graph &g, const std::string &name);

/// --kernels interp (reference_run.cc): one step on the reference executor (every op in the
/// interpreter, double precision), and with --verify the unpartitioned step compared.
int runOnExecutor(const tofu::Problem &p, const tofu::Graph &training, const std::string &name,
                  const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                  const tofu::SingleWorker &single, const tofu::PartitionPlan &plan);

/// --batch FILE (processes.cc): many --infer runs in one process, each forked from this one
/// and run by `run` (tofu_run.cc's main: a command line without the program's name).
int runBatch(const char *argv0, const std::string &file, int (*run)(int, char **));
/// The operator library a --batch parent loaded from `dir` before forking this run, or null.
const tofu::OpLibrary *preloadedLibrary(const std::string &dir);
/// --backend cuda or nccl in the CPU build (processes.cc): replaces this process by
/// tofu-run-gpu, the build with every backend, from this binary's folder, with the same
/// arguments (under mpirun each process does so before MPI starts). Returns only when it
/// cannot.
int runGpuBuild(char **argv);

/// --calibrate (calibrate.cc): measures this machine's device model and writes it to `path`.
int runCalibration(const tofu::OpLibrary &lib, const std::string &path);

} // namespace tofurun

#endif // TOFU_TOFU_RUN_DRIVER_H
