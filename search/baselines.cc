// The baselines the search is compared with: Spartan's greedy, a flat one-step search and
// the exhaustive search on small graphs.
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

/// Spartan: tensors in decreasing size choose the dimension that costs their incident ops
/// least given the choices made so far (undecided tensors assumed at their best); then
/// every op takes its best strategy.
void spartanSearch(const Problem &p, unsigned k, PartitionPlan &plan) {
  Candidates cand = candidates(p, {}, 0, k, policyOf(Algorithm::Spartan));
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  // terms[n][si][slot][ci]
  std::vector<std::vector<std::vector<std::vector<int64_t>>>> terms(N);
  for (unsigned n = 0; n < N; ++n) {
    std::vector<std::vector<int>> configs;
    for (unsigned t : p.nodes[n].inputs)
      configs.push_back(cand.tensor[t]);
    configs.push_back(cand.tensor[p.nodes[n].output]);
    for (int s : cand.node[n])
      terms[n].push_back(CostModel(p).stepTerms(n, {}, 0, k, s, configs));
  }
  std::vector<int> decided(p.tensors.size(), -1); // index into cand.tensor, -1 undecided
  auto slotTensor = [&](unsigned n, size_t i) {
    return i < p.nodes[n].inputs.size() ? p.nodes[n].inputs[i] : p.nodes[n].output;
  };
  auto nodeBest = [&](unsigned n, unsigned fixedT, int fixedC, int *bestS) {
    int64_t best = INT64_MAX;
    for (size_t si = 0; si < terms[n].size(); ++si) {
      int64_t sum = 0;
      for (size_t i = 0; i < terms[n][si].size(); ++i) {
        unsigned t = slotTensor(n, i);
        int c = t == fixedT ? fixedC : decided[t];
        if (c >= 0)
          sum += terms[n][si][i][c];
        else
          sum += *std::min_element(terms[n][si][i].begin(), terms[n][si][i].end());
      }
      if (sum < best) {
        best = sum;
        if (bestS)
          *bestS = static_cast<int>(si);
      }
    }
    return best;
  };
  std::vector<unsigned> byBytes(p.tensors.size());
  std::iota(byBytes.begin(), byBytes.end(), 0u);
  auto bytes = [&](unsigned t) {
    int64_t e = p.tensors[t].elementBytes;
    for (int64_t d : p.tensors[t].shape)
      e *= d;
    return e;
  };
  std::stable_sort(byBytes.begin(), byBytes.end(),
                   [&](unsigned a, unsigned b) { return bytes(a) > bytes(b); });
  for (unsigned t : byBytes) {
    std::vector<unsigned> incident = p.tensors[t].consumers;
    if (p.tensors[t].producer >= 0)
      incident.push_back(static_cast<unsigned>(p.tensors[t].producer));
    int64_t best = INT64_MAX;
    int bestC = 0;
    for (size_t c = 0; c < cand.tensor[t].size(); ++c) {
      int64_t sum = 0;
      for (unsigned n : incident)
        sum += nodeBest(n, t, static_cast<int>(c), nullptr);
      if (sum < best) {
        best = sum;
        bestC = static_cast<int>(c);
      }
    }
    decided[t] = bestC;
  }
  StepChoice step;
  step.parts = k;
  for (unsigned n = 0; n < N; ++n) {
    int si = 0;
    nodeBest(n, UINT32_MAX, -1, &si);
    step.node.push_back(cand.node[n][si]);
  }
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    step.tensor.push_back(cand.tensor[t][decided[t]]);
  plan.steps = {step};
}

/// dp-flat: one DP over whole tilings (every step solved jointly).
llvm::Error flatSearch(const Problem &p, const PlanOptions &o, const std::vector<unsigned> &factors,
                       Clock::time_point deadline, PartitionPlan &plan) {
  std::vector<StepChoice> steps(factors.size());
  std::vector<size_t> all;
  for (size_t l = 0; l < factors.size(); ++l) {
    steps[l].parts = factors[l];
    steps[l].node.assign(p.nodes.size(), -1);
    steps[l].tensor.assign(p.tensors.size(), -1);
    all.push_back(l);
  }
  TermCaches caches(p, factors.size(), 1);
  MinSumProblem::Limits limits;
  limits.maxTableEntries = o.maxTableEntries;
  limits.deadline = deadline;
  auto sol = jointSolve(p, o, objectiveOf(p, o, policyOf(o.algorithm).machineWeights),
                        CoarseSets(p, coarsen(p, o.coarsen, o.coarsen)), std::move(steps), all,
                        caches, limits, deadline);
  if (!sol)
    return stringError("dp-flat: " + llvm::toString(sol.takeError()));
  plan.steps = std::move(sol->steps);
  plan.largestTable = sol->largestTable;
  plan.variables = sol->variables;
  return llvm::Error::success();
}

/// Exhaustive: every assignment of every step but the last, the last solved exactly, by the
/// objective given (its prefix weights and time objective, under any algorithm).
llvm::Error exhaustiveSearch(const Problem &p, const PlanOptions &o,
                             const std::vector<unsigned> &factors, Clock::time_point deadline,
                             PartitionPlan &plan) {
  const CoarseSets co(p, coarsen(p, o.coarsen, o.coarsen));
  TermCaches caches(p, factors.size(), 1);
  // The oracle of every objective: the weights and compute given, whatever the algorithm.
  const Objective objective = objectiveOf(p, o, true);
  SearchPolicy replicas = policyOf(Algorithm::Tofu); // Tofu's candidates, replicas if timed
  replicas.replicas = !objective.work.empty();
  int64_t best = INT64_MAX;
  std::vector<StepChoice> current;
  llvm::Error err = llvm::Error::success();
  std::function<void()> recurse = [&]() {
    if (err)
      return;
    if (Clock::now() > deadline) {
      err = stringError("the exhaustive search ran out of its time budget");
      return;
    }
    unsigned parts = factors[current.size()];
    Candidates cand = candidates(p, current, current.size(), parts, replicas);
    StepModel m =
        buildStep(p, co, current, current.size(), parts, cand, caches, nullptr, 0, {}, objective);
    if (current.size() + 1 == factors.size()) {
      auto sol = m.msp.solve();
      if (!sol) {
        err = sol.takeError();
        return;
      }
      current.push_back(choiceOf(p, m, parts, sol->values));
      int64_t c = objectiveCost(p, objective, current);
      if (c < best) {
        best = c;
        plan.steps = current;
      }
      current.pop_back();
      return;
    }
    std::vector<unsigned> values(m.msp.variables(), 0);
    while (true) {
      current.push_back(choiceOf(p, m, parts, values));
      recurse();
      current.pop_back();
      if (err)
        return;
      size_t v = 0;
      for (; v < values.size(); ++v) {
        if (++values[v] < m.msp.domain(static_cast<unsigned>(v)))
          break;
        values[v] = 0;
      }
      if (v == values.size())
        break;
    }
  };
  if (!factors.empty())
    recurse();
  return err;
}

} // namespace searchimpl
} // namespace tofu
