// Why the search chose its plan (tofu-plan --explain): the chosen plan's estimated step split
// into compute, communication and a pipeline's bubble; per stage (a plan without stages is
// one), its workers, time, memory and its heaviest ops with how each is cut; and the
// runner-up plans of today's alternatives (the best Megatron-LM configuration, ZeRO-3, the
// plan without or with pipeline stages), planned for the same step and workers, each with
// what it costs more.
#ifndef TOFU_PLANNER_EXPLAIN_H
#define TOFU_PLANNER_EXPLAIN_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/pipeline.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A plan's estimated step, split as the step-time model makes it (planner/step_time.h).
struct StepCost {
  double seconds = 0;       ///< the estimated step
  unsigned worker = 0;      ///< the critical worker: the most compute plus communication
  double compute = 0;       ///< that worker's compute
  double communication = 0; ///< its transfers, their latencies and the synchronisations
  /// The rest of the step: a pipeline's workers waiting on one another (its schedule's
  /// bubble); 0 without stages, where the step is the critical worker's sum.
  double bubble = 0;
  int64_t peak = 0;  ///< the largest planned peak of a worker
  int64_t bytes = 0; ///< every byte the workers receive from one another
};

/// One of a stage's costliest nodes on its first worker, and how the plan cuts it there.
struct HeavyOp {
  std::string node, op;
  double seconds = 0;
  /// Its variables split on that worker, each over how many parts ("b/4 k/2 (partial
  /// sums)"); "whole" where the worker computes all of it, "idle" where none.
  std::string cut;
};

/// A stage of the chosen plan (the plan itself where it has no stages).
struct StageCost {
  unsigned firstWorker = 0, workers = 1;
  unsigned firstLayer = 0, layers = 0;   ///< 0 layers: the plan has no stages
  double compute = 0, communication = 0; ///< its slowest worker's
  int64_t peak = 0;                      ///< its workers' largest planned peak
  std::vector<HeavyOp> heaviest;         ///< the three costliest nodes, costliest first
};

/// An alternative planned for the same step: its kind, how it was configured and the tool
/// flags that plan it, and its cost, or why it could not be planned.
struct RunnerUp {
  std::string kind; ///< "megatron", "megatron-stages", "zero3", "no-pipeline" or "pipeline"
  std::string plan; ///< "Megatron-LM TP 4 x DP 2"
  std::string flags;
  std::optional<StepCost> cost;
  std::string whyNot; ///< where `cost` is unset
};

struct Explanation {
  std::string plan; ///< the chosen plan ("tofu by time" or a pipeline's description)
  unsigned workers = 1;
  StepCost cost;
  std::vector<StageCost> stages;
  std::vector<RunnerUp> runnerUps;
};

/// The cost of `r`'s plan (Stage::Plan or later; its execution and memory plans built here
/// where `r` has none) on `device`, over `machine`'s levels where given.
llvm::Expected<StepCost> stepCostOf(const PipelineResult &r, const DeviceModel &device,
                                    const std::optional<Topology> &machine);

/// Explains `chosen`, what runPipeline(source, lib, options) planned. Each runner-up is
/// planned from `source` with `options` but for its algorithm and stages, at the chosen
/// plan's workers (under --fit, at the count it chose, within the same budget), and
/// estimated on options.device over the part of options.machine they fill. `progress`, where
/// given, hears of each runner-up before it is planned. A runner-up that cannot be planned
/// says why; errors are the chosen plan's estimate failing.
llvm::Expected<Explanation> explainPlan(const GraphSource &source, const OpLibrary &lib,
                                        const PipelineOptions &options,
                                        const PipelineResult &chosen,
                                        const std::function<void(const RunnerUp &)> &progress = {});

/// What a runner-up costs more than `chosen`, in words: "+0.412 ms, mostly communication
/// (+0.380 ms); 1.25 GiB more memory", or how much shorter it is estimated.
std::string costsMore(const StepCost &runnerUp, const StepCost &chosen);

} // namespace tofu

#endif // TOFU_PLANNER_EXPLAIN_H
