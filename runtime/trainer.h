// Training a partitioned model on an engine: the loop tofu-run drives, as a library.
//
// A Trainer owns what a training run needs beside the plan: the values of every input
// (runtime/training_data.h: synthetic, the model's initial values, or a checkpoint's), the
// batches (a data set fed tile by tile, assembled ahead on a thread of its own, or batches a
// random teacher labels), the engine running the plan, the evaluation engine for held-out
// data, and checkpoints. It reports through an observer (each step, each evaluation) and
// leaves every word printed to its caller: a tool, a benchmark or an API.
//
// Under several processes (a ProcessGroup that is distributed) every process makes its own
// Trainer from the same plan; the figures the trainer reports (the loss, bytes moved,
// evaluations) are the same on every process, and each process writes only its own tiles.
#ifndef TOFU_RUNTIME_TRAINER_H
#define TOFU_RUNTIME_TRAINER_H

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/fusion.h"
#include "codegen/memory_plan.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "runtime/checkpoint.h"
#include "runtime/data_feed.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "runtime/lr_schedule.h"
#include "runtime/process_group.h"
#include "runtime/step_verify.h"
#include "runtime/training_data.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The plan an engine runs: element-wise chains folded (codegen/fusion.h) unless `fuse` is
/// false, and its memory planned again; `memory` is the unfused plan's. An error says the
/// fused plan's memory plan is unsound.
struct EnginePlan {
  FusedPlan fused;
  MemoryPlan memory;
};
llvm::Expected<EnginePlan> planForEngine(const Problem &p, const ExecPlan &exec,
                                         const MemoryPlan &memory,
                                         const std::vector<std::string> &outputs, bool fuse);

/// Makes the engine of a plan on the run's backend. `local`: the engine runs in this
/// process alone, whatever the process group (the unpartitioned references of verify()).
using EngineFactory = std::function<llvm::Expected<std::unique_ptr<Engine>>(
    const Problem &, const ExecPlan &, const MemoryPlan &, const EngineOptions &, bool local)>;

/// A whole tensor from the tiles every process holds (each element from a process that
/// holds it).
Tensor wholeTensor(const Engine &e, unsigned t, ProcessGroup &group);

/// The work of one step of `program`: the scheduled loops' iterations of every node over its
/// whole shapes (codegen/schedule.h), whatever the worker count and whichever library
/// computes a node. Its ratio between two batches is what a step's time should follow.
double stepIterations(const Program &program);

/// The forward graph that evaluation runs (the model without its loss), planned as the
/// training plan restricted to it (data_feed.h: restrictPlan).
struct EvalGraph {
  const Problem *problem = nullptr;
  const ExecPlan *exec = nullptr;
  const MemoryPlan *memory = nullptr;
  std::vector<std::string> outputs;
  unsigned logits = 0; ///< the output tensor: [batch, classes]
};

/// What a run asks of the trainer. A hyper-parameter left empty is the loaded checkpoint's,
/// else its default.
struct TrainerOptions {
  std::string name; ///< the model's, for messages and checkpoints
  /// How messages name the settings below (support/errors.h): by their fields' names
  /// ("data", "eval", "lr-schedule"), or as the caller says (a tool's flags).
  SettingNames names;
  Optimizer optimizer = Optimizer::SGD;
  std::optional<double> lr;          ///< default 0.1 (sgd), 0.01 (momentum, nesterov), 0.001
  std::optional<double> momentum;    ///< default 0.9
  std::optional<double> weightDecay; ///< default 0.01 for adamw, else 0
  /// The learning-rate schedule (lr_schedule.h); unset: the checkpoint's, or none.
  std::optional<LrSchedule> lrSchedule;
  std::optional<unsigned> warmup;
  std::optional<unsigned> steps; ///< default 1, or `epochs` over a data set
  unsigned epochs = 1;
  unsigned seed = 1;
  /// Over a data set: each epoch in its own order drawn from `seed` (epochOrder), or, when
  /// false, in file order.
  bool shuffle = true;
  /// teacher (fresh synthetic batches a random teacher labels), fixed (one synthetic batch),
  /// or a data set (openDataSet's path) fed through `feeds` (bindDataSet's) and normalised.
  std::string data = "teacher";
  /// The data set `data` names, where the caller opened it already (tofu-run does, before
  /// an ONNX import, whose dynamic axes the samples fix); else the trainer opens it.
  std::shared_ptr<const DataSet> dataSet;
  /// Batches the caller hands over as the steps come (a framework's data loader), where
  /// set: before each step, called with the step's index in this run, it returns a data set
  /// holding that step's batch alone, its samples in the batch's order. `dataSet` is its first
  /// batch (what binds the inputs), `shuffle` and `epochs` go unused, and `steps` says how
  /// many. An error it returns stops the run (before the step: save() then keeps the steps
  /// done); so does a batch of another size.
  std::function<llvm::Expected<std::shared_ptr<const DataSet>>(unsigned step)> batches;
  std::string feeds;
  Normalization normalization;
  /// Evaluation: `eval` is "test" (the data set's test split) or a data set's path; every
  /// `evalEvery` steps (0: every epoch) and after the last. Needs `evalGraph`. With
  /// `evalGraph` and no `eval`, evaluateOn() scores the data it is given.
  std::string eval;
  unsigned evalEvery = 0;
  const EvalGraph *evalGraph = nullptr;
  std::string loadDir; ///< a checkpoint to resume from
  /// The run will save() there: a non-finite last update is an error.
  std::string saveDir;
  /// The element type save() writes the tensors in (float32 unless told).
  StoredType saveType = StoredType::F32;
  bool continueNonFinite = false;
  /// verify() will be called: the first step's results are kept to compare with the step
  /// run on the unpartitioned plan (one worker: planner/pipeline.h's singleWorker).
  bool verify = false;
  const ExecPlan *referenceExec = nullptr;
  const MemoryPlan *referenceMemory = nullptr;
  /// Where the step recomputes (planner/recompute.h): the training problem without the
  /// recomputation, and its unpartitioned plans. verify() then also runs the first step
  /// on it, from the same values, and compares it with the recomputing step, bit for bit.
  const Problem *plainProblem = nullptr;
  const ExecPlan *plainExec = nullptr;
  const MemoryPlan *plainMemory = nullptr;
  EngineOptions engine;
  int workers = 1;
};

/// One step, as the observer sees it.
struct StepRecord {
  unsigned index = 0; ///< in this run, from 0
  unsigned done = 0;  ///< steps trained after it, counted over every run
  double loss = 0;
  double seconds = 0;
};

/// One evaluation on held-out data.
struct EvalRecord {
  unsigned step = 0; ///< after this many steps, counted over every run
  double epoch = 0;
  ClassifierScore score; ///< over every label: one per sample, or one per position
  double seconds = 0;
  int64_t samples = 0; ///< held-out samples scored
};

class TrainerObserver {
public:
  virtual ~TrainerObserver() = default;
  virtual void stepped(const StepRecord &) {}
  /// Before an evaluation starts.
  virtual void evaluating() {}
  virtual void evaluated(const EvalRecord &) {}
  /// Asked after each step (and its evaluation): true ends the run there, its state that of
  /// the steps done (an interrupted run's, kept). Every process of the group is asked, and
  /// one process's true ends every process's run.
  virtual bool stopRequested() { return false; }
};

/// What save() wrote.
struct SaveReport {
  std::string path; ///< the checkpoint's file, or its index
  size_t tensors = 0;
  size_t tiles = 0;  ///< sharded: tiles over every process (0: one whole file)
  int64_t bytes = 0; ///< sharded: the tiles' bytes over every process
  unsigned stepsTrained = 0;
};

/// Each process's memory (filled only in a distributed group; by rank).
struct ProcessMemory {
  std::vector<int64_t> arena;          ///< allocated for its worker
  std::vector<int64_t> residentBefore; ///< resident when the trainer was made
  std::vector<int64_t> residentPeak;   ///< at its peak since then
  std::vector<int64_t> verifyCopies;   ///< the first step's tiles kept for verify()
};

class Trainer {
public:
  /// Makes the trainer of `training` (whose loss is `loss`) on the engine `factory` makes for
  /// `plan`: resumes from options.loadDir (its metadata checked), binds the data set, draws
  /// or loads every input, and makes the evaluation engine. Bad options, metadata or data
  /// are UsageErrors (support/errors.h). `group` and `factory` must outlive the trainer.
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(const Problem &p, const Graph &training, const std::string &loss, const EnginePlan &plan,
         TrainerOptions options, EngineFactory factory, ProcessGroup &group);
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// Runs the steps, evaluating as asked. Stops with an error at a non-finite loss (unless
  /// options.continueNonFinite) naming the first weight the update made non-finite, and,
  /// when saving, after a last step whose update is not finite.
  llvm::Error train(TrainerObserver &observer);
  /// The state trained so far scored on held-out data `held` (`what` names it in messages),
  /// its arrays named as the training data's: loss and top-1 accuracy over every sample.
  /// Needs options.evalGraph. Errors: labels outside the classes, arrays that do not bind.
  llvm::Expected<EvalRecord> evaluateOn(const DataSet &held, const std::string &what);
  /// Writes every weight and optimiser state, with the run's metadata: one file from one
  /// process, else each process its tiles and the first the index of them all.
  llvm::Expected<SaveReport> save(const std::string &dir);
  /// Every weight and state tensor (a batch norm's running statistics, an optimiser's),
  /// whole, by name: under several processes gathered from their tiles, on every process
  /// (collective).
  std::map<std::string, Tensor> wholeState();
  /// The first step run again unpartitioned, on this process alone, and compared with the
  /// partitioned step's results (options.verify must have been set). `tolerance` < 0:
  /// kFloat32StepTolerance, or kBfloat16StepTolerance where the step stores tensors in
  /// bfloat16. Collective: every process calls it.
  llvm::Expected<VerifyReport> verify(double tolerance);
  /// Collective: every process calls it.
  ProcessMemory processMemory();

  // The run, as resolved.
  Optimizer optimizer() const;
  double lr() const;
  const TrainingHyper &hyper() const;
  unsigned steps() const;
  unsigned stepsBefore() const; ///< trained before this run (from the checkpoint)
  /// The checkpoint resumed from (nullptr: none).
  const CheckpointReader *resumed() const;
  /// The training data set and its bindings (nullptr: synthetic data).
  const DataSet *dataSet() const;
  const std::vector<DataBinding> &bindings() const;
  int64_t dataBatch() const;
  int64_t stepsPerEpoch() const;
  const DataSet *evalDataSet() const; ///< nullptr: no evaluation
  Engine &engine();
  const Engine &engine() const;
  const Engine *evalEngine() const;
  double buildSeconds() const; ///< making the engine (compiling its kernels)

  // The results.
  const std::vector<double> &losses() const;
  const std::vector<double> &stepSeconds() const;
  int64_t bytesMoved() const; ///< by the last step, over every process
  const std::vector<EvalRecord> &evaluations() const;
  /// Seconds the steps waited for batches assembled ahead, and spent assembling them.
  double dataWaitSeconds() const;
  double dataAssembleSeconds() const;

private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace tofu

#endif // TOFU_RUNTIME_TRAINER_H
