// A machine's interconnect as levels (e.g. 2 nodes × 8 GPUs: between nodes, within a
// node), how the search weighs each recursion step's traffic by the level it crosses, and
// the traffic per level of an execution plan, counted exactly.
//
// Workers are numbered with the outermost level most significant (worker w of 2 × 4 is on
// node w / 4), as the recursion numbers them with its first step most significant; the
// recursion's steps are each level's factors, outermost level first, so the steps of level
// L split the workers among that level's units. A received byte crosses the outermost level
// at which its sender and receiver differ.
//
// The search's objective becomes the communication time, in units of the innermost level's
// bytes: Σ_L X_L × (1/bw_L − 1/bw_{L+1}) + M_L × (lat_L − lat_{L+1}), where X_L and M_L are
// the bytes and messages every worker receives from outside its unit of level L (from any
// level up to L; CostModel::levelCost with the steps up to level L's last) and the innermost
// level's terms use 1/bw = lat = 0 beyond it: it stands for each byte over the bandwidth of
// the level it crosses and each message's latency there. X_L and M_L count each worker's
// fetches as the execution plan makes them (from the nearest holder); the report counts
// each level's bytes and messages from the execution plan itself.
#ifndef TOFU_PLANNER_TOPOLOGY_H
#define TOFU_PLANNER_TOPOLOGY_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "partition/problem.h"
#include "planner/topology_spec.h"
#include "search/search.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The recursion's steps: each level's factors (factorWorkers), outermost level first.
std::vector<unsigned> topologyFactors(const Topology &t);
/// Per step of topologyFactors, its prefix weights (PlanOptions::prefixWeights): on the last
/// step of level L, bytes (1/bw_L − 1/bw_{L+1}) and messages (lat_L − lat_{L+1}), each times
/// the innermost bandwidth; elsewhere 0. No message weights where no level has a latency.
PrefixWeights topologyWeights(const Topology &t);

struct LevelTraffic {
  int64_t bytes = 0;    ///< received over this level, every worker
  int64_t messages = 0; ///< fetches over this level (one per part of a region or a result)
};
struct TopologyTraffic {
  std::vector<LevelTraffic> levels;
  /// Per worker, the estimate: what it receives over each level divided by that level's
  /// bandwidth, plus the level's latency per message.
  std::vector<double> workerSeconds;
  /// Per worker, what it receives from the others over every level.
  std::vector<int64_t> workerBytes, workerMessages;
  unsigned slowestWorker = 0;
  double slowestSeconds = 0;
};
/// The plan's traffic per level, counted from every fetch of the execution plan.
TopologyTraffic topologyTraffic(const Problem &p, const ExecPlan &plan, const Topology &t);

/// The part of machine `t` that `k` of its workers fill, for --fit and budgets on a machine:
/// the innermost levels whole and one level partly, from its first unit (k ≤ the innermost
/// count: that level alone with count k; a multiple m of the innermost units' workers, m at
/// most the next level's count: that level with count m and the levels inside it whole; and
/// so on out). None where k fills no such part (11 workers of 2 × 8), or k exceeds the
/// machine.
std::optional<Topology> topologyForWorkers(const Topology &t, unsigned k);
/// `options` for the machine `t`: its workers, its levels' steps and their weights.
PlanOptions machineOptions(PlanOptions options, const Topology &t);

/// A plan for a machine: the search with the machine's steps and weights, and the search
/// without them (the plan of least bytes); each one's traffic counted from its execution
/// plan; the one whose slowest worker's estimated time is lower is chosen (the weighted
/// search minimises every worker's time together, and it is a heuristic search, so the
/// plan of least bytes may still have the faster slowest worker). Under the time objective
/// (PlanOptions::time) the machine's search weighs compute too, and each plan's average
/// compute per worker (planComputeSeconds) is added to its slowest worker's traffic.
struct TopologyPlan {
  PartitionPlan plan; ///< the chosen one
  TopologyTraffic traffic;
  bool leastBytesChosen = false; ///< the machine's search did not beat the plan of least bytes
  PartitionPlan weighted;        ///< the machine's search's own plan
  TopologyTraffic weightedTraffic;
  PartitionPlan leastBytes; ///< the search without the machine
  TopologyTraffic leastBytesTraffic;
};
/// `options.workers` must be the topology's; its factors and prefix weights are set here.
llvm::Expected<TopologyPlan> searchForTopology(const Problem &p, PlanOptions options,
                                               const Topology &t);

} // namespace tofu

#endif // TOFU_PLANNER_TOPOLOGY_H
