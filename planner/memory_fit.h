// Searching under a memory budget: the plan of least communication whose every worker's
// planned peak (the memory planner's arena, codegen/memory_plan.h: tiles, fetch buffers
// and partial results with their lifetimes) fits in a given number of bytes, and the
// smallest number of workers for which such a plan exists.
//
// The peak is not a sum over ops and tensors, so the DP cannot take it as a constraint.
// It takes memory as a price instead (PlanOptions::memoryWeight: communication plus a
// weight times worker 0's tile bytes and the buffers of the nodes that ran while some
// worker was over the budget), and the price is searched: no price first (the least
// communication), then the highest (the least memory), then a ladder of prices a factor
// of 8 apart. Each candidate plan is judged by its real planned peak; the fitting plan of
// least communication found wins.
#ifndef TOFU_PLANNER_MEMORY_FIT_H
#define TOFU_PLANNER_MEMORY_FIT_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "planner/topology.h"
#include "search/search.h"

namespace tofu {

struct MemoryFit {
  bool fits = false;
  /// When `fits`: the fitting plan of least communication found. Otherwise the plan with
  /// the smallest planned peak found (what a user would come closest with).
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
  int64_t peak = 0;        ///< the plan's largest planned peak over its workers
  unsigned peakWorker = 0; ///< the first worker with that peak
  int64_t limit = 0;       ///< the budget per worker
  double memoryWeight = 0; ///< the price the plan was found with
  unsigned searches = 0;   ///< plans searched and memory-planned
  double seconds = 0;      ///< all of them together
};

/// The plan of least communication found for `options.workers` workers whose planned
/// peak is at most `limit` bytes on every worker; `outputs` are the graph's outputs (kept
/// for the whole step, as the executors do). Not fitting is a result (fits = false), not
/// an error; errors are the search's own.
llvm::Expected<MemoryFit> searchWithinMemory(const Problem &p, const PlanOptions &options,
                                             int64_t limit,
                                             const std::vector<std::string> &outputs);

/// The least bytes any plan on k workers can need on its largest worker is at least
/// `liveBytes / k`, where liveBytes is the most bytes of tensors live at one time in the
/// one-worker plan: at that time every worker holds its tiles of those tensors, and the
/// tiles cover them.
int64_t largestLiveBytes(const MemoryPlan &oneWorker);

struct WorkerCountFit {
  MemoryFit fit;           ///< at the smallest fitting count (fit.plan.workers)
  unsigned lowerBound = 1; ///< where the scan started: ceil(largestLiveBytes / limit)
  /// Every count tried, in order, with the smallest planned peak found for it.
  std::vector<std::pair<unsigned, int64_t>> tried;
};

/// The smallest number of workers k (any k from the lower bound up, not only powers of
/// two) with a plan whose planned peak fits in `limit` per worker, and that plan.
/// `progress` (when given) hears of each k as it is decided. On a `machine` (when given)
/// only the counts that fill part of it are tried (planner/topology.h: topologyForWorkers),
/// at most its workers, each searched over the levels it fills. Errors: no k up to
/// `maxWorkers` fits (saying how close the last came), or the search's own.
llvm::Expected<WorkerCountFit>
fitWorkers(const Problem &p, const PlanOptions &options, int64_t limit,
           const std::vector<std::string> &outputs, unsigned maxWorkers,
           const std::function<void(unsigned k, const MemoryFit &)> &progress = nullptr,
           const Topology *machine = nullptr);

} // namespace tofu

#endif // TOFU_PLANNER_MEMORY_FIT_H
