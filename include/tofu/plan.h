// libtofu_plan: the planning library a framework links (graph in, partition plan out).
//
//   auto planner = tofu::Planner::open("path/to/ops");        // the operator library, once
//   tofu::Graph g = ...;                                       // the framework's graph
//   tofu::PlanOptions options;  options.workers = 8;
//   auto result = planner->plan(std::move(g), options, tofu::Optimizer::Adam);
//   result->plan.steps[...]                                    // per step: op strategies, tensor cuts
//   result->json()                                             // or the whole plan as JSON
//
// Graph construction: graph/graph.h (tensors with shapes and roles, nodes naming ops of the
// library). The search and its options: search/search.h. No CUDA is linked.
#ifndef TOFU_INCLUDE_TOFU_PLAN_H
#define TOFU_INCLUDE_TOFU_PLAN_H

#include <memory>
#include <optional>
#include <string>

#include "graph/graph.h"
#include "graph/library.h"
#include "search/report.h"
#include "search/search.h"

namespace tofu {

/// A graph as planned: the checked (training) graph, its analysis and the plan.
struct PlanResult {
  Graph graph;
  Problem problem;
  PartitionPlan plan;

  /// The plan as JSON (tofu-plan --format=json).
  std::string json() const;
  /// The plan as tofu-plan's table.
  std::string table() const;
  /// The index of a tensor or node of `graph` in the plan's vectors, or -1.
  int tensorIndex(const std::string &name) const;
  int nodeIndex(const std::string &name) const;
};

class Planner {
public:
  /// Loads and checks every .tdl file under `opsDir`. Errors carry the diagnostics.
  static llvm::Expected<Planner> open(const std::string &opsDir);

  /// Checks `g` (inferring the shapes it can), builds its training step when `train` is
  /// given (the graph's single output must be the scalar loss), and searches its partition.
  llvm::Expected<PlanResult> plan(Graph g, const PlanOptions &options,
                                  std::optional<Optimizer> train = std::nullopt) const;

  const OpLibrary &library() const { return *library_; }

private:
  std::shared_ptr<OpLibrary> library_;
};

} // namespace tofu

#endif // TOFU_INCLUDE_TOFU_PLAN_H
