// The recursive search over the factors of k (the paper's recursion, generalised).
#include "search/search_internal.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "analysis/hash.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"
#include "search/minsum.h"
#include "search/parallel.h"

namespace tofu {
namespace searchimpl {

namespace {

/// One recursive search (recursiveSearch): its limits, caches and work budget, shared by its
/// starts, sweeps and joint solves.
class RecursiveSearch {
public:
  RecursiveSearch(const Problem &p, const PlanOptions &o, const std::vector<unsigned> &factors,
                  PartitionPlan &plan)
      : p(p), o(o), factors(factors), plan(plan), co(p, coarsen(p, o.coarsen, o.coarsen)),
        policy(recursionPolicy(o)), objective(objectiveOf(p, o, policy.machineWeights)),
        pool(o.threads ? o.threads : WorkerPool::defaultThreads()),
        caches(p, factors.size(), pool.threads()) {
    limits.maxTableEntries = o.maxTableEntries;
    // A graph too wide for exact elimination (DenseNet's concatenations) still gets a plan:
    // conditioning, with smaller tables so that it stays fast.
    limits.conditionTableEntries = std::min<uint64_t>(o.maxTableEntries, uint64_t(1) << 18);
    pairLimits.maxTableEntries = std::min<uint64_t>(o.maxTableEntries, uint64_t(1) << 20);
  }

  /// The search: a start from `factors`, then the merged-factor starts; the best in `plan`.
  llvm::Error run();

private:
  using Steps = std::vector<StepChoice>;

  /// Step `i` of `parts` parts solved exactly given the others: its choice and the cost.
  llvm::Expected<std::pair<StepChoice, int64_t>> solveStep(const Steps &steps, size_t i,
                                                           unsigned parts);
  llvm::Error sweepSteps(Steps &steps, int64_t &cost, std::vector<char> fresh);
  llvm::Error sweepPairs(Steps &steps, int64_t &cost, bool &changed);
  llvm::Error refine(Steps &steps, int64_t &cost, std::vector<char> fresh);
  llvm::Error start(const std::vector<unsigned> &fs, Steps &steps, int64_t &cost);

  const Problem &p;
  const PlanOptions &o;
  const std::vector<unsigned> &factors;
  PartitionPlan &plan;
  const CoarseSets co;
  const SearchPolicy policy;
  /// The objective: its prefix weights (a machine's levels), remapped for a merged start,
  /// and the time objective's compute.
  Objective objective;
  MinSumProblem::Limits limits, pairLimits;
  bool pairsSkipped = false;         ///< some pair's DP did not fit in what was left
  uint64_t pairWorkLeft = kPairWork; ///< for every pair solve of this search
  WorkerPool pool;
  TermCaches caches;
  MinSumProblem::OrderCache orders; ///< the steps' DPs, solved again after other steps changed
  Candidates cand;                  ///< each solve's, refilled
};

llvm::Expected<std::pair<StepChoice, int64_t>>
RecursiveSearch::solveStep(const Steps &steps, size_t i, unsigned parts) {
  const SearchPolicy stepPolicy =
      i < o.stepAlgorithms.size() ? policyOf(o.stepAlgorithms[i]) : policy;
  if (llvm::Error e = batchPartsError(
          p, parts, i < o.stepAlgorithms.size() ? o.stepAlgorithms[i] : o.algorithm))
    return llvm::Expected<std::pair<StepChoice, int64_t>>(std::move(e));
  candidates(p, steps, i, parts, stepPolicy, cand, &caches.classes(), &pool);
  StepModel m = buildStep(p, co, steps, i, parts, cand, caches, &pool, o.memoryWeight,
                          o.pricedBuffers, objective);
  if (i == 0 && plan.variables == 0)
    plan.variables = m.msp.variables();
  auto sol = m.msp.solve(limits, &orders);
  if (!sol)
    return sol.takeError();
  if (sol->conditioned > 0) // the graph is wide: later solves skip the large exact tables
    limits.maxTableEntries = limits.conditionTableEntries;
  plan.largestTable = std::max(plan.largestTable, sol->largestTable);
  plan.conditioned = std::max(plan.conditioned, sol->conditioned);
  return std::make_pair(choiceOf(p, m, parts, sol->values), sol->cost);
}

/// Each step solved again given the others, while that lowers the cost. `fresh[i]`: step
/// i was solved given the others as they are now, so solving it again would give the same
/// result (skipped; not on wide graphs, whose limits may change between solves). (Solving
/// the next steps at the same time and keeping those before the first that lowers the
/// cost was tried: the first one usually does, so on WResNet-152-10 it was no faster than
/// the threads' term look-ups within each solve.)
llvm::Error RecursiveSearch::sweepSteps(Steps &steps, int64_t &cost, std::vector<char> fresh) {
  fresh.resize(steps.size(), 0);
  for (unsigned sweep = 0; sweep < 8 && steps.size() > 1; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (fresh[i] && plan.conditioned == 0)
        continue;
      auto step = solveStep(steps, i, steps[i].parts);
      if (!step)
        return step.takeError();
      fresh[i] = 1;
      if (step->second < cost) {
        steps[i] = std::move(step->first);
        cost = step->second;
        improved = true;
        std::fill(fresh.begin(), fresh.end(), 0);
        fresh[i] = 1;
      }
    }
    if (!improved)
      break;
  }
  return llvm::Error::success();
}

/// Pairs of steps solved jointly (a step's best choice can depend on changing another's at
/// the same time), each round followed by the single sweeps. A pair whose DP would be too
/// wide is left as it is; a graph that needed conditioning skips this.
llvm::Error RecursiveSearch::sweepPairs(Steps &steps, int64_t &cost, bool &changed) {
  if (!policy.jointMoves || !o.jointMoves || plan.conditioned > 0 || pairsSkipped)
    return llvm::Error::success();
  for (unsigned round = 0; round < 4 && steps.size() > 1; ++round) {
    bool improved = false;
    for (size_t a = 0; a < steps.size(); ++a)
      for (size_t b = a + 1; b < steps.size() && (b == a + 1 || steps.size() <= 3); ++b) {
        auto joint = jointSolve(p, o, objective, co, steps, {a, b}, caches, pairLimits,
                                Clock::time_point::max(), &pairWorkLeft, true);
        if (!joint) { // over what is left: no more joint solves in this search
          llvm::consumeError(joint.takeError());
          pairsSkipped = true;
          return llvm::Error::success();
        }
        plan.largestTable = std::max(plan.largestTable, joint->largestTable);
        if (joint->cost < cost) {
          steps = std::move(joint->steps);
          cost = joint->cost;
          improved = changed = true;
        }
      }
    if (!improved)
      break;
    if (llvm::Error e = sweepSteps(steps, cost, {}))
      return e;
  }
  return llvm::Error::success();
}

/// Refined from `steps` (`fresh` as in sweepSteps): the single sweeps, then the pairs,
/// unless the pairs raised the exact cost (beyond CostModel::kExactGroups groups the
/// objective takes group 0 for all).
llvm::Error RecursiveSearch::refine(Steps &steps, int64_t &cost, std::vector<char> fresh) {
  if (llvm::Error e = sweepSteps(steps, cost, std::move(fresh)))
    return e;
  const Steps before = steps;
  const int64_t beforeCost = cost;
  bool changed = false;
  if (llvm::Error e = sweepPairs(steps, cost, changed))
    return e;
  if (changed && objectiveCost(p, objective, steps) > objectiveCost(p, objective, before)) {
    steps = before;
    cost = beforeCost;
  }
  return llvm::Error::success();
}

/// One start: the steps of `fs` one after the other, refined.
llvm::Error RecursiveSearch::start(const std::vector<unsigned> &fs, Steps &steps, int64_t &cost) {
  for (unsigned parts : fs) {
    auto step = solveStep(steps, steps.size(), parts);
    if (!step)
      return step.takeError();
    steps.push_back(std::move(step->first));
    cost = step->second;
  }
  std::vector<char> fresh(steps.size(), 0);
  if (!fresh.empty()) // the last step was solved given all the others
    fresh.back() = 1;
  return refine(steps, cost, std::move(fresh));
}

llvm::Error RecursiveSearch::run() {
  int64_t cost = 0;
  if (llvm::Error e = start(factors, plan.steps, cost))
    return e;
  // The merged-factor starts: with up to four factors (their number grows with the number
  // of factors, and each start searches again), while the pairs' budget lasts.
  if (!policy.jointMoves || !o.jointMoves || factors.size() < 3 || factors.size() > 4 ||
      plan.conditioned > 0 || pairsSkipped)
    return llvm::Error::success();
  int64_t exact = objectiveCost(p, objective, plan.steps);
  const PrefixWeights own = objective.weights;
  for (size_t l = 0; l + 1 < factors.size() && !pairsSkipped; ++l) {
    std::vector<unsigned> merged = factors;
    merged[l] *= merged[l + 1];
    merged.erase(merged.begin() + l + 1);
    if (!own.empty()) { // the merged step weighs as the two steps did together
      objective.weights = own;
      for (std::vector<double> *ws : {&objective.weights.bytes, &objective.weights.messages})
        if (!ws->empty()) {
          (*ws)[l] += (*ws)[l + 1];
          ws->erase(ws->begin() + l + 1);
        }
    }
    Steps steps;
    int64_t c = 0;
    llvm::Error err = start(merged, steps, c);
    objective.weights = own;
    if (err)
      return err;
    // Split the merged step back: the same choices cut twice, into factors l and l + 1.
    steps.insert(steps.begin() + l + 1, steps[l]);
    steps[l].parts = factors[l];
    steps[l + 1].parts = factors[l + 1];
    c = INT64_MAX; // the first solve of the sweep gives the objective in these steps
    if (llvm::Error e = refine(steps, c, {}))
      return e;
    const int64_t e = objectiveCost(p, objective, steps);
    if (e < exact || (e == exact && c < cost)) {
      plan.steps = std::move(steps);
      cost = c;
      exact = e;
    }
  }
  return llvm::Error::success();
}

} // namespace

/// Recursive partitioning (and the single-step DP algorithms, with one factor): one exact
/// DP per factor of k, each given the steps before it; then, as long as it lowers the
/// cost, each step is solved again exactly given all the others, and (tofu) each pair of
/// steps jointly (the cost of a step depends on how the other steps cut each op and
/// tensor, so the first pass alone is not always optimal; refinement never raises the
/// cost). Tofu with three or four factors also starts from each factorisation that merges
/// two neighbouring factors (8 as 4·2 and 2·4), its merged step then split back into two
/// steps of the same choices and refined the same way; the least cost wins.
llvm::Error recursiveSearch(const Problem &p, const PlanOptions &o,
                            const std::vector<unsigned> &factors, PartitionPlan &plan) {
  return RecursiveSearch(p, o, factors, plan).run();
}

/// Spartan: tensors in decreasing size choose the dimension that costs their incident ops
/// least given the choices made so far (undecided tensors assumed at their best); then
/// every op takes its best strategy.
} // namespace searchimpl
} // namespace tofu
