// The engine: k workers run a partitioned training step on float32 (or, on backends that hold
// it, with tensors stored in bfloat16: --precision bf16), each in one arena of its memory
// plan's size, allocated once by the backend; every buffer (tiles, fetch buffers
// holding an input's region, partial results) lives at its planned offset, so the planned
// peak is the real peak (library calls may add their own scratch space beside it). The
// engine walks each worker's program (codegen/program.h) on its own host thread and asks
// the backend (runtime/backend.h) to copy regions, launch kernels and synchronise. On the
// CPU backend ops run as oneDNN calls where one expresses the share (matrix products,
// convolutions), else as generated C++ kernels (the interpreter only for ops the generator
// cannot express). Weights and optimiser state stay in the arenas across steps: after each
// step every optimiser update's result is carried into the tensor it updates.
#ifndef TOFU_RUNTIME_ENGINE_H
#define TOFU_RUNTIME_ENGINE_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "codegen/program.h"
#include "runtime/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/cpu_kernels.h"
#include "support/errors.h"

namespace tofu {

struct EngineOptions {
  KernelCompileOptions compile;
  /// OpenMP threads per worker (default: the machine's cores / k, at least 1).
  int threadsPerWorker = 0;
  /// Poison: fill every buffer a step writes with NaN before each step, so a kernel or plan
  /// that reads what was never written shows NaN in the result.
  bool checking = false;
  /// Shares a oneDNN call expresses run it (runtime/library_kernels.h); off: every share
  /// runs its generated kernel.
  bool library = true;
  /// Time every node on every worker (Engine::profile).
  bool profile = false;
  /// How messages name the settings (support/errors.h): "precision" by default.
  SettingNames names;
};

/// Where a node's time went on one worker, summed over the steps run.
struct NodeTime {
  std::string node, op;
  std::string kernel;     ///< what computes the worker's share ("generated", a library call, ...)
  double copySeconds = 0; ///< fetching inputs and assembling the output
  double computeSeconds = 0; ///< the kernel
  double waitSeconds = 0;    ///< at the synchronisations: the other workers' imbalance
};

struct StepStats {
  double seconds = 0;
  int64_t bytesMoved = 0; ///< between workers, by the plan's fetches and reductions
  int64_t carryBytes = 0; ///< between workers, carrying updates into the next step
};

/// Runs the workers' programs (codegen/program.h) on a backend (runtime/backend.h), one
/// host thread per worker, step after step. A backend of one process per worker (MPI) runs
/// some of the workers here: the engine then walks, writes and reads only theirs.
class Engine {
public:
  /// On `backend`, which prepares `program` (the engine keeps both).
  static llvm::Expected<std::unique_ptr<Engine>>
  create(Program program, std::unique_ptr<Backend> backend, const EngineOptions &options = {});
  ~Engine();

  /// Writes a whole tensor without a producer (an input, weight or optimiser state) into
  /// the tiles of the (local) workers holding it. Inputs are kept and written again every
  /// step.
  llvm::Error set(unsigned tensor, const Tensor &value);
  /// The same, each local worker's tile drawn by `fill(tile, out)` (out row-major over the
  /// tile), so no whole tensor is ever made; the engine keeps the local tiles of inputs.
  void setTiles(unsigned tensor, const std::function<void(const Box &, float *)> &fill);
  /// Runs one step; then carries each update into the tensor it updates. The bytes moved
  /// are those the local workers fetched.
  llvm::Expected<StepStats> step();
  /// A whole tensor assembled from its tiles (on the local workers: NaN where none holds
  /// it). Only tensors live at the end of a step (weights, optimiser state, graph outputs)
  /// are meaningful.
  Tensor get(unsigned tensor) const;
  /// Whether worker `w` holds a tile of `tensor` (a buffer with elements in its arena).
  bool holdsTile(unsigned tensor, unsigned w) const;
  /// Worker `w`'s tile of a tensor it holds (ProgramTensor::tiles), row-major over the tile;
  /// `w` must be local. Between steps only.
  std::vector<float> readTile(unsigned tensor, unsigned w) const;
  /// Overwrites worker `w`'s tile of a weight or optimiser-state tensor with `values`
  /// (row-major over the tile); `w` must be local.
  void writeTile(unsigned tensor, unsigned w, const float *values);
  /// The workers this process runs (all, but on a backend of one process per worker).
  const std::vector<unsigned> &localWorkers() const;
  /// Each worker's arena size.
  std::vector<int64_t> arenaBytes() const;
  const Program &program() const;
  const Backend &backend() const;
  /// The backend's figures: kernels compiled, launches on a library or the interpreter,
  /// memory beside the arenas.
  BackendStats backendStats() const;
  /// Per worker, per node in plan order, with EngineOptions::profile (else zero times).
  const std::vector<std::vector<NodeTime>> &profile() const;
  /// Pairs (updated tensor, tensor it replaces) carried after each step.
  const std::vector<std::pair<unsigned, unsigned>> &carries() const;

  struct Impl;

private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The training state: every weight and optimiser-state tensor, whole, by graph name.
Checkpoint checkpointOf(const Engine &engine);
/// The training state as the tiles this process's workers hold, every tile once over all
/// the processes: a tile that several workers hold (a replica) is taken from the first of
/// them. Over all the processes the tiles of each tensor are disjoint and cover it.
std::vector<CheckpointTile> trainingTiles(const Engine &engine);
/// Writes a checkpoint's tensors into the engine at any k, from either form: each local
/// worker reads only its own tiles' boxes. Every weight and optimiser-state tensor of the
/// graph must be there with its shape, and nothing else (with `forwardOnly`, a forward
/// graph's weights: the checkpoint's optimiser state is not read); errors name the tensor.
llvm::Error restore(Engine &engine, const CheckpointReader &c, bool forwardOnly = false,
                    const SettingNames &names = {});

/// The largest |a - b| / max(1, |b|) a partitioned float32 step may show against the
/// unpartitioned one on the same engine: split reductions sum in another order (each
/// partial sum and the combine rounded to float32, relative 6e-8 per operation) over
/// reductions of up to thousands of terms, and an SGD step turns a gradient's error into a
/// weight's error scaled by the learning rate. 1e-3 is ten times the largest difference
/// measured on the executor tests' models (README).
inline constexpr double kFloat32StepTolerance = 1e-3;
/// The same for a step that stores tensors in bfloat16 (--precision bf16): a value stored
/// rounds to 8 significant bits (relative 2^-9), and where a partition sums in another order
/// the float32 result may round to the other neighbour, a difference that the layers after
/// it carry on. 1.5e-2 is ten times the largest difference measured on engine_test's bf16
/// models (0.00141: wresnet-50-1-i32-c4-k10, batch 8, against the same graph held in
/// float32; partitioned against unpartitioned at most 0.00107), on training data.
inline constexpr double kBfloat16StepTolerance = 1.5e-2;

} // namespace tofu

#endif // TOFU_RUNTIME_ENGINE_H
