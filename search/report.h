// Printing partition plans: the summary table, JSON, and an SVG of tiles per worker.
#ifndef TOFU_SEARCH_REPORT_H
#define TOFU_SEARCH_REPORT_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "search/search.h"

namespace tofu {

struct PlanReportOptions {
  std::string title; ///< the model or file the graph came from
  bool exact = true; ///< also count the communication over every worker (k region sweeps)
  bool listTensors = true;
  bool listOps = true;
  /// The memory planner's result, where the caller planned memory: the largest worker's
  /// arena (-1: not planned) and which worker it is; and the budget it had (-1: none).
  int64_t plannedPeak = -1;
  unsigned plannedPeakWorker = 0;
  int64_t memoryLimit = -1;
  /// On that worker, when the most bytes are live: of tiles, fetch buffers, partials.
  int64_t liveTiles = 0, liveFetches = 0, livePartials = 0;
  /// Those tiles by their tensors' role, and the bfloat16 ones among them (LiveTiles's
  /// fields; printed where liveTiles > 0).
  int64_t liveInputs = 0, liveWeights = 0, liveActivations = 0, liveGradients = 0,
          liveOptimizerState = 0, liveBfloat16 = 0;
  /// The largest of those tiles, (tensor name, bytes), largest first; and the node the
  /// worker runs then (empty: not known).
  std::vector<std::pair<std::string, int64_t>> liveLargest;
  std::string peakNode;
  /// Said after the objective (how the time objective's plan compared with the bytes
  /// objective's), where not empty.
  std::string objectiveNote;
};

/// Human-readable: summary, per-step communication, memory, then per tensor and per op.
std::string planTable(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o);
/// JSON with the same content (DESIGN.md's plan fields).
std::string planJson(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o);
/// The weights, and the activations that weight-using ops read, drawn as their first two
/// dimensions tiled by owning worker (the paper's Figure 10).
std::string planSvg(const Problem &p, const PartitionPlan &plan, const std::string &title);

} // namespace tofu

#endif // TOFU_SEARCH_REPORT_H
