// Printing partition plans: the summary table, JSON, and an SVG of tiles per worker.
#ifndef TOFU_SEARCH_REPORT_H
#define TOFU_SEARCH_REPORT_H

#include <string>

#include "search/search.h"

namespace tofu {

struct PlanReportOptions {
  std::string title;     ///< the model or file the graph came from
  bool exact = true;     ///< also count the communication over every worker (k region sweeps)
  bool listTensors = true;
  bool listOps = true;
};

/// Human-readable: summary, per-step communication, memory, then per tensor and per op.
std::string planTable(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o);
/// JSON with the same content (DESIGN.md's plan fields).
std::string planJson(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o);
/// The weights, and the activations that weight-using ops read, drawn as their first two
/// dimensions tiled by owning worker (the paper's Figure 10).
std::string planSvg(const Problem &p, const PartitionPlan &plan, const std::string &title);

/// Bytes as `12.34 GiB`.
std::string humanBytes(double bytes);

} // namespace tofu

#endif // TOFU_SEARCH_REPORT_H
