// Choosing what a training step recomputes (graph.h: applyRecomputation) so that every
// worker's planned peak fits a memory budget.
//
// Modes:
// - none: nothing is recomputed;
// - sqrt: Chen et al.'s segment checkpointing, whatever the budget: the forward tensors cut
//   into segments of ceil(sqrt(n)), each segment's last kept (the baseline);
// - auto: the least recomputation found that fits the budget. The plan without any is
//   tried first. Otherwise the forward tensors are ranked by bytes per unit of work to
//   recompute them (the tensor's bytes over its node's iterations: an element-wise result is
//   cheap to recompute and as large as its input, a product's costly and small), and the
//   shortest prefix of that ranking whose plan fits is found by bisection, each candidate
//   set judged by the real planned peak of its plan (the plain search's, or where the
//   longest set needs it the memory-budgeted search's: planner/memory_fit.h). The ranking is
//   bisected twice, once with runs of dropped tensors bounded by sqrt(n), and the fitting set
//   repeating the least work wins; where neither fits, sqrt's set is tried last.
//   Recomputation's own communication is in each plan: the copies are searched and
//   partitioned like any op.
//
// The exact optimum (exactRecomputation) tries every subset of a small graph's candidates:
// the quality reference, as dp-flat is for partitions.
#ifndef TOFU_PLANNER_RECOMPUTE_H
#define TOFU_PLANNER_RECOMPUTE_H

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/recompute.h"
#include "partition/problem.h"
#include "planner/memory_fit.h"
#include "planner/step_time.h"
#include "search/search.h"

namespace tofu {

enum class RecomputeMode { None, Sqrt, Auto };
const char *recomputeModeName(RecomputeMode m);
std::optional<RecomputeMode> recomputeModeNamed(const std::string &name);

struct RecomputePlan {
  RecomputeMode mode = RecomputeMode::None;
  Graph graph; ///< the training graph, rewritten where something is recomputed
  RecomputeSummary summary;
  std::optional<Problem> problem;
  /// The plan of `problem` (the budgeted search's, or the plain search's without a budget):
  /// fits, plan, exec, memory, peak.
  MemoryFit fit;
  int64_t peakWithout = 0; ///< the plan without recomputation (its closest to the budget)
  bool fitsWithout = false;
  /// Where something is recomputed: the problem and execution plan without recomputation
  /// (what the recomputation's cost in time is estimated against).
  std::optional<Problem> problemWithout;
  ExecPlan execWithout;
  unsigned candidates = 0; ///< forward tensors that could be dropped
  /// fitWorkersRecomputing: the fewest workers that fit without recomputation (0: none up to
  /// the maximum).
  unsigned workersWithout = 0;
  unsigned tried = 0; ///< candidate sets planned (each a budgeted search)
  double seconds = 0; ///< all of it
};

/// The bytes of `training`'s weights and optimiser state: what lives through the whole step
/// whatever is recomputed, so `limit` per worker needs at least their bytes over it workers.
double weightAndStateBytes(const Graph &training);

/// auto's ranking of the candidates the backward pass reads, cheapest to recompute first (most
/// bytes per iteration of their node in `p`, the training graph's problem), runs unbounded;
/// those named in `kept` are left out. What pipeline stages rank their own candidates by.
std::vector<std::string> recomputeRanking(const std::vector<RecomputeCandidate> &candidates,
                                          const Problem &p, const std::set<std::string> &kept);
/// `dropped` with the forward-only inputs its copies would otherwise keep alive, as auto closes
/// a set where it keeps cuts; none of `kept` is added.
std::vector<std::string> recomputeClosure(const Graph &training,
                                          const std::vector<RecomputeCandidate> &candidates,
                                          const std::vector<std::string> &dropped,
                                          const std::set<std::string> &kept);

/// Plans the training graph `training` on options.workers workers with recomputation chosen by
/// `mode` (see above). `limit` > 0 is the budget per worker (auto needs one; sqrt and none
/// take it as --memory-per-worker does). Not fitting is a result (fit.fits = false, the
/// closest plan found), not an error. `progress`, where given, hears of each candidate set
/// tried: how many tensors it drops and its planned peak.
llvm::Expected<RecomputePlan>
planWithRecomputation(const Graph &training, const OpLibrary &lib, const PlanOptions &options,
                      int64_t limit, RecomputeMode mode,
                      const std::function<void(size_t dropped, const MemoryFit &)> &progress = {});

/// The smallest worker count from 1 up whose plan fits `limit` with recomputation chosen
/// by `mode` (auto: tried only where the plan without it does not fit), up to `maxWorkers`.
/// On a `machine` (when given), only the counts that fill part of it, each searched over
/// the levels it fills (fitWorkers). Errors: none fits (saying how close the last came), or
/// the search's own.
llvm::Expected<RecomputePlan>
fitWorkersRecomputing(const Graph &training, const OpLibrary &lib, const PlanOptions &options,
                      int64_t limit, RecomputeMode mode, unsigned maxWorkers,
                      const std::function<void(unsigned k, const RecomputePlan &)> &progress = {},
                      const Topology *machine = nullptr);

/// The exact optimum for small graphs: every subset of the candidates (at most
/// `maxCandidates` of them, else an error), each planned by the plain search
/// (least communication, options.workers), and the one of least estimated step time on
/// `device` whose planned peak is within `limit`. `tried` gets the subsets planned.
struct ExactRecompute {
  std::vector<std::string> dropped;
  int64_t peak = 0;
  double seconds = 0; ///< estimated step
  bool fits = false;
  unsigned tried = 0;
};
llvm::Expected<ExactRecompute> exactRecomputation(const Graph &training, const OpLibrary &lib,
                                                  const PlanOptions &options, int64_t limit,
                                                  const DeviceModel &device,
                                                  unsigned maxCandidates = 14);

} // namespace tofu

#endif // TOFU_PLANNER_RECOMPUTE_H
