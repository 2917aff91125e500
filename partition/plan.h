// A partition plan: one basic plan (StepChoice) per recursion step for k workers, with the
// search's figures, and its text form for processes that did not search.
#ifndef TOFU_PARTITION_PLAN_H
#define TOFU_PARTITION_PLAN_H

#include <cstdint>
#include <string>
#include <vector>

#include "partition/problem.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct PartitionPlan {
  std::string algorithm;
  unsigned workers = 1;
  std::vector<StepChoice> steps;  ///< one per factor of k (one for the single-step baselines)
  std::vector<int64_t> stepBytes; ///< communication added by each step (model)
  int64_t totalBytes = 0;         ///< the model cost (what the bytes objective minimises)
  std::vector<int64_t> nodeBytes; ///< its share per node
  double searchSeconds = 0;       ///< analysis excluded (Problem::build)
  uint64_t largestTable = 0;      ///< entries of the largest DP table
  size_t variables = 0;           ///< DP variables of the first step (after coarsening)
  /// DP variables fixed by conditioning because an elimination was too wide (tofu only; 0:
  /// every step's DP was exact).
  unsigned conditioned = 0;
  /// What the search minimised: "time" (PlanOptions::time, where the algorithm takes it) or
  /// "bytes".
  std::string objective = "bytes";
};

/// A plan as text, to hand to processes that did not search (one process searches, the
/// others receive its plan), and back. Decoding checks the plan against `problem`: a
/// choice per node and tensor of every step, each a strategy the node has or a dimension
/// the tensor has; errors say what does not fit.
std::string encodePlan(const PartitionPlan &plan);
llvm::Expected<PartitionPlan> decodePlan(const std::string &text, const Problem &problem);

/// `train` restricted to `sub`, whose nodes and tensors are some of `full`'s by name (the
/// forward graph of a training graph): each keeps its choice at every step. A node whose op
/// differs (evaluation's BatchNormalization where training ran batch_norm_train:
/// graph.h's evaluationGraph) takes its strategy of the same name (the same variable
/// split; strategyName), else it is replicated. Errors name a node or tensor `full` does
/// not have. The result's byte counts are zero: the
/// partition layer has no cost model (search/cost_model.h prices it).
llvm::Expected<PartitionPlan> restrictPlan(const PartitionPlan &train, const Problem &full,
                                           const Problem &sub);

} // namespace tofu

#endif // TOFU_PARTITION_PLAN_H
