// Joint solves: several steps' choices searched together where the step-by-step DP
// cannot see an interaction between them.
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

/// Solves the steps in `S` (ascending indices into `steps`, whose parts are set) jointly,
/// every other step as given: one DP whose variables choose, per coarse set, a sequence of
/// choices for those steps. With S every step this is dp-flat, the optimum over every
/// tiling; with S a pair it re-solves two steps of the recursion at once. The objective is
/// the same as one step's (buildStep): every node's whole cost, plus memory's price and, under
/// the time objective, its compute.
llvm::Expected<JointSolution>
jointSolve(const Problem &p, const PlanOptions &o, const Objective &objective, const CoarseSets &co,
           std::vector<StepChoice> steps, const std::vector<size_t> &S, TermCaches &caches,
           const MinSumProblem::Limits &limits, Clock::time_point deadline, uint64_t *workLeft,
           bool neighbourhood) {
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  const size_t last = S.back();
  const PrefixWeights &weights = objective.weights;
  // Per item (nodes n, tensors N + t), its sequences over S (node: strategies; tensor:
  // dimensions). Items that must have the same sequences share them: nodes of one class
  // (nodeClasses) with the same choice at every step, tensors of one shape with the
  // same dimension at every step; rep[item] is the first such item, which holds them.
  std::vector<std::vector<std::vector<int>>> seqs(N + T);
  std::vector<unsigned> rep(N + T);
  FirstBySignature firsts;
  std::vector<int64_t> sig;
  // Only the moves near the current steps: either step as it is (the other free), both
  // the same choice (cut twice), or the two steps' choices swapped.
  auto near = [&](std::vector<std::vector<int>> &seqs, int a, int b) {
    if (!neighbourhood || S.size() != 2)
      return;
    // The current choices are valid even where the generation would not offer them (a
    // step kept whole because no cut fits with the other step's current choice).
    if (std::find(seqs.begin(), seqs.end(), std::vector<int>{a, b}) == seqs.end())
      seqs.push_back({a, b});
    seqs.erase(std::remove_if(seqs.begin(), seqs.end(),
                              [&](const std::vector<int> &q) {
                                return !(q[0] == a || q[1] == b || q[0] == q[1] ||
                                         (q[0] == b && q[1] == a));
                              }),
               seqs.end());
  };
  std::vector<int> opts;
  for (unsigned n = 0; n < N; ++n) {
    nodeSignature(caches.classes(), steps, n, SIZE_MAX, sig);
    if ((rep[n] = firsts.of(sig, n)) != n)
      continue;
    opts.resize(p.nodes[n].table->strategies.size());
    std::iota(opts.begin(), opts.end(), 0);
    auto cut = [&](std::vector<Range> &r, int s, unsigned parts) {
      const int v = p.splitVar(n, s);
      if (v < 0)
        return true;
      if (r[v].size() < int64_t(parts))
        return false;
      r[v] = partOf(r[v].size(), parts, 0);
      return true;
    };
    choiceSequences(
        steps, S, opts, fullRanges(p.nodes[n].shapes), cut,
        [&](size_t l) { return steps[l].node[n]; }, seqs[n]);
    near(seqs[n], steps[S[0]].node[n], steps[S.back()].node[n]);
  }
  for (unsigned t = 0; t < T; ++t) {
    const std::vector<int64_t> &shape = p.tensors[t].shape;
    tensorSignature(p, steps, t, SIZE_MAX, sig);
    if ((rep[N + t] = N + firsts.of(sig, t)) != N + t)
      continue;
    opts.resize(shape.size());
    std::iota(opts.begin(), opts.end(), 0);
    auto cut = [&](std::vector<int64_t> &ext, int d, unsigned parts) {
      if (ext[d] < int64_t(parts))
        return false;
      ext[d] = partOf(ext[d], parts, 0).size();
      return true;
    };
    choiceSequences(
        steps, S, opts, shape, cut, [&](size_t l) { return steps[l].tensor[t]; }, seqs[N + t]);
    near(seqs[N + t], steps[S[0]].tensor[t], steps[S.back()].tensor[t]);
  }
  // Each sequence's label, one number: a node's sequence by its labels (nodeLabel per
  // step), a tensor's by its dimensions; equal label sequences get equal numbers.
  std::unordered_map<std::vector<int64_t>, int64_t, VectorHash> labelIds;
  std::vector<int64_t> key;
  auto labelOf = [&](const std::vector<int> &seq, unsigned node) {
    key.clear();
    for (int c : seq)
      key.push_back(node < N ? nodeLabel(p, node, c) : c);
    return labelIds.emplace(key, int64_t(labelIds.size())).first->second;
  };
  std::vector<std::vector<int64_t>> labels(N + T); // per representative item
  for (unsigned item = 0; item < N + T; ++item)
    if (rep[item] == item)
      for (const std::vector<int> &seq : seqs[item])
        labels[item].push_back(labelOf(seq, std::min(item, N)));
  auto labelsOf = [&](unsigned item) -> const std::vector<int64_t> & { return labels[rep[item]]; };
  MinSumProblem msp;
  std::vector<unsigned> nodeVar(N), tensorVar(T);
  // Per variable, the labels of its values.
  std::vector<std::vector<int64_t>> varLabels;
  const size_t widest = coarseVariables(
      co, labelsOf,
      [&](const std::vector<unsigned> &items, const std::vector<int64_t> &dom, int64_t priority) {
        const unsigned v = msp.addVariable(static_cast<unsigned>(dom.size()), priority);
        varLabels.push_back(dom);
        for (unsigned item : items)
          (item >= N ? tensorVar[item - N] : nodeVar[item]) = v;
      });
  if (widest > 65535)
    return stringError("too many tilings for one variable of a joint solve");
  // The elimination's work and widest table, from the tables' scopes, before building them
  // (a graph too wide for the limit fails at once, not after its tables are built).
  if (workLeft || limits.conditionTableEntries == 0) {
    std::vector<std::pair<unsigned, unsigned>> scopes;
    for (unsigned n = 0; n < N; ++n) {
      const ProblemNode &node = p.nodes[n];
      for (size_t i = 0; i <= node.inputs.size(); ++i) {
        const unsigned X = nodeVar[n];
        const unsigned Y = tensorVar[i < node.inputs.size() ? node.inputs[i] : node.output];
        if (X != Y && msp.domain(X) > 1 && msp.domain(Y) > 1)
          scopes.push_back({X, Y});
      }
    }
    uint64_t largest = 0;
    const uint64_t work = msp.eliminationWork(scopes, workLeft ? *workLeft : UINT64_MAX, &largest);
    if (workLeft && work > *workLeft)
      return stringError(fmt::format("a joint solve of {} steps would visit more than {} table "
                                     "entries",
                                     S.size(), *workLeft));
    if (largest > limits.maxTableEntries)
      return stringError(fmt::format("the elimination needs a table of more than {} entries: "
                                     "the graph is too wide for this search",
                                     limits.maxTableEntries));
    if (workLeft)
      *workLeft -= work;
  }
  // Per node and tensor, per value of its variable, its sequence over S (the first of its
  // sequences with that label, should two share one).
  std::vector<std::vector<std::vector<int>>> nodeChoice(N), tensorChoice(T);
  for (unsigned item = 0; item < N + T; ++item) {
    const std::vector<int64_t> &own = labels[rep[item]];
    const std::vector<std::vector<int>> &mine = seqs[rep[item]];
    std::vector<std::vector<int>> &choice = item >= N ? tensorChoice[item - N] : nodeChoice[item];
    for (int64_t l : varLabels[item >= N ? tensorVar[item - N] : nodeVar[item]])
      choice.push_back(mine[std::find(own.begin(), own.end(), l) - own.begin()]);
  }
  // Per node and slot, a table over (node sequence, tensor sequence): the steps of S but
  // the last are set in `work`, the last varies through stepTerms' candidates.
  const unsigned lastParts = steps[last].parts;
  std::vector<StepChoice> work = steps;
  const uint64_t evaluations = caches.evaluations();
  auto setNode = [&](unsigned n, const std::vector<int> &seq) {
    for (size_t q = 0; q + 1 < S.size(); ++q)
      work[S[q]].node[n] = seq[q];
  };
  CostTables tables(msp);
  for (unsigned n = 0; n < N; ++n) {
    const ProblemNode &node = p.nodes[n];
    const size_t slots = node.inputs.size() + 1;
    const unsigned X = nodeVar[n];
    const size_t dx = nodeChoice[n].size();
    const bool priced = o.memoryWeight > 0 && n < o.pricedBuffers.size() && o.pricedBuffers[n];
    for (size_t i = 0; i < slots; ++i) {
      if (Clock::now() > deadline)
        return stringError("ran out of its time budget while building its tables");
      if (workLeft && (caches.evaluations() - evaluations) * kEvaluationWork > *workLeft)
        return stringError("a joint solve's tables would take more than what is left of its "
                           "work budget");
      const unsigned t = i < node.inputs.size() ? node.inputs[i] : node.output;
      const std::vector<std::vector<int>> &ys = tensorChoice[t];
      const size_t dy = ys.size();
      // The tensor's sequences grouped by their choices before the last step of S.
      std::map<std::vector<int>, std::vector<size_t>> byPrefix;
      for (size_t y = 0; y < dy; ++y)
        byPrefix[std::vector<int>(ys[y].begin(), ys[y].end() - 1)].push_back(y);
      std::vector<int64_t> tab(dx * dy, 0);
      // The terms' slot configurations: this slot's last-step choices, none elsewhere.
      const std::vector<int> none;
      std::vector<int> finals;
      std::vector<const std::vector<int> *> configs(slots, &none);
      configs[i] = &finals;
      for (size_t x = 0; x < dx; ++x) {
        setNode(n, nodeChoice[n][x]);
        for (const auto &[pre, group] : byPrefix) {
          for (size_t q = 0; q < pre.size(); ++q)
            work[S[q]].tensor[t] = pre[q];
          // The group's choices at the last step of S, for this slot only.
          finals.clear();
          for (size_t y : group)
            finals.push_back(ys[y].back());
          const int s = nodeChoice[n][x].back();
          TermCache &cache = caches.at(last, caches.partOf(n));
          cache.prepare(p, n, work, last, lastParts, configs, weights);
          const TermCache::Terms &terms = cache.get(s);
          const TermCache::Terms *buffers = priced ? &cache.get(s, true) : nullptr;
          for (size_t q = 0; q < group.size(); ++q)
            tab[x * dy + group[q]] =
                terms[i][q] + (buffers ? memoryCost(o.memoryWeight, (*buffers)[i][q]) : 0);
        }
        for (size_t q = 0; q + 1 < S.size(); ++q)
          work[S[q]].tensor[t] = steps[S[q]].tensor[t];
      }
      for (size_t q = 0; q + 1 < S.size(); ++q)
        work[S[q]].node[n] = steps[S[q]].node[n];
      tables.add(X, tensorVar[t], [&](unsigned x, unsigned y) { return tab[size_t(x) * dy + y]; });
    }
  }
  if (workLeft)
    *workLeft -= std::min(*workLeft, (caches.evaluations() - evaluations) * kEvaluationWork);
  if (!objective.work.empty()) // the time objective: each node's compute on its sequence
    for (unsigned n = 0; n < N; ++n) {
      std::vector<int64_t> u;
      for (const std::vector<int> &seq : nodeChoice[n]) {
        setNode(n, seq);
        u.push_back(computeTerm(objective, n, work, last, lastParts, seq.back()));
      }
      for (size_t q = 0; q < S.size(); ++q)
        work[S[q]].node[n] = steps[S[q]].node[n];
      tables.add(nodeVar[n], nodeVar[n], [&](unsigned x, unsigned) { return u[x]; });
    }
  if (o.memoryWeight > 0)
    for (unsigned t = 0; t < T; ++t) {
      std::vector<int64_t> u;
      for (const std::vector<int> &seq : tensorChoice[t]) {
        auto dim = [&](size_t l) {
          auto at = std::find(S.begin(), S.end(), l);
          return at == S.end() ? steps[l].tensor[t] : seq[at - S.begin()];
        };
        u.push_back(memoryCost(o.memoryWeight, tileBytes(p, t, steps.size(), dim, [&](size_t l) {
                                 return steps[l].parts;
                               })));
      }
      tables.add(tensorVar[t], tensorVar[t], [&](unsigned x, unsigned) { return u[x]; });
    }
  tables.flush();
  auto sol = msp.solve(limits);
  if (!sol)
    return sol.takeError();
  JointSolution out;
  out.cost = sol->cost;
  out.largestTable = sol->largestTable;
  out.variables = msp.variables();
  for (size_t q = 0; q < S.size(); ++q) {
    StepChoice &c = steps[S[q]];
    for (unsigned n = 0; n < N; ++n)
      c.node[n] = nodeChoice[n][sol->values[nodeVar[n]]][q];
    for (unsigned t = 0; t < T; ++t)
      c.tensor[t] = tensorChoice[t][sol->values[tensorVar[t]]][q];
  }
  out.steps = std::move(steps);
  return out;
}

/// Recursive partitioning (and the single-step DP algorithms, with one factor): one exact
/// DP per factor of k, each given the steps before it; then, as long as it lowers the
/// cost, each step is solved again exactly given all the others, and (tofu) each pair of
/// steps jointly (the cost of a step depends on how the other steps cut each op and
/// tensor, so the first pass alone is not always optimal; refinement never raises the
/// cost). Tofu with three or four factors also starts from each factorisation that merges
/// two neighbouring factors (8 as 4·2 and 2·4), its merged step then split back into two
/// steps of the same choices and refined the same way; the least cost wins.
} // namespace searchimpl
} // namespace tofu
