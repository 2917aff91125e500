// Partition search: coarsening, per-step DP, recursion, baselines.
#include "search/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <functional>
#include <numeric>
#include <set>
#include <unordered_map>

#include "fmt/format.h"
#include "analysis/hash.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"
#include "search/minsum.h"

namespace tofu {
namespace {

using Clock = std::chrono::steady_clock;

struct UnionFind {
  std::vector<unsigned> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0u); }
  unsigned find(unsigned x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  }
  void unite(unsigned a, unsigned b) {
    a = find(a);
    b = find(b);
    if (a != b)
      parent[std::max(a, b)] = std::min(a, b);
  }
};

/// A node choice's label, shared across nodes: an output strategy by its output dimension
/// (so element-wise ops and tensors agree), a reduction by its variable, -1 for replicate.
int nodeLabel(const Problem &p, unsigned n, int s) {
  if (s < 0)
    return -1;
  const Strategy &st = p.nodes[n].table->strategies[s];
  return st.kind == Strategy::Kind::Output ? static_cast<int>(st.outputDim)
                                           : 1000 + static_cast<int>(st.var);
}

/// The candidates of one step: per node its strategies (or -1), per tensor its dimensions
/// (or -1) that can be split into `parts` given the earlier steps.
struct Candidates {
  std::vector<std::vector<int>> node, tensor;
};

/// Which tensors must stay whole under data parallelism: weights, optimiser state and
/// everything in a weight's group (its gradients and their sums).
std::vector<bool> weightLike(const Problem &p) {
  std::set<std::string> groups;
  for (const ProblemTensor &t : p.tensors)
    if (t.role == TensorRole::Weight)
      groups.insert(t.group);
  std::vector<bool> out;
  for (const ProblemTensor &t : p.tensors)
    out.push_back(t.role == TensorRole::Weight || t.role == TensorRole::OptimizerState ||
                  groups.count(t.group));
  return out;
}

/// The candidates of step `i` of `steps` (appended when i == steps.size()) with `parts`
/// groups: per node the strategies, per tensor the dimensions, whose whole sequence of
/// cuts stays valid (every cut piece at least as large as its step's parts); -1 (whole)
/// where nothing is.
Candidates candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i,
                      unsigned parts, Algorithm algo) {
  Candidates c;
  const size_t m = std::max(steps.size(), i + 1);
  auto partsAt = [&](size_t l) { return l == i ? parts : steps[l].parts; };
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    std::vector<int> list;
    const auto &strategies = p.nodes[n].table->strategies;
    for (unsigned s = 0; s < strategies.size(); ++s) {
      if (algo == Algorithm::Icml18 && strategies[s].kind == Strategy::Kind::Reduction)
        continue;
      std::vector<Range> ranges = fullRanges(p.nodes[n].shapes);
      bool ok = true;
      for (size_t l = 0; l < m && ok; ++l) {
        int v = p.splitVar(n, l == i ? int(s) : steps[l].node[n]);
        if (v < 0)
          continue;
        ok = ranges[v].size() >= int64_t(partsAt(l));
        ranges[v] = partOf(ranges[v].size(), partsAt(l), 0);
      }
      if (ok)
        list.push_back(static_cast<int>(s));
    }
    if (list.empty())
      list.push_back(-1);
    c.node.push_back(std::move(list));
  }
  std::vector<bool> whole;
  if (algo == Algorithm::DataParallel)
    whole = weightLike(p);
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    std::vector<int> list;
    const std::vector<int64_t> &shape = p.tensors[t].shape;
    for (unsigned d = 0; d < shape.size(); ++d) {
      std::vector<int64_t> ext = shape;
      bool ok = true;
      for (size_t l = 0; l < m && ok; ++l) {
        int e = l == i ? int(d) : steps[l].tensor[t];
        if (e < 0)
          continue;
        ok = ext[e] >= int64_t(partsAt(l));
        ext[e] = partOf(ext[e], partsAt(l), 0).size();
      }
      if (ok)
        list.push_back(static_cast<int>(d));
    }
    if (algo == Algorithm::AllRow || algo == Algorithm::DataParallel) {
      bool first = !list.empty() && list.front() == 0;
      list.clear();
      if (first && !(algo == Algorithm::DataParallel && whole[t]))
        list.push_back(0);
    }
    if (list.empty())
      list.push_back(-1);
    c.tensor.push_back(std::move(list));
  }
  return c;
}

/// Memoised Problem::stepTerms (and stepBuffers): nodes of one instantiation on tensors of
/// the same shapes and choices cost the same (the repeated blocks of a ResNet, the
/// timesteps of an RNN).
class TermCache {
public:
  const std::vector<std::vector<int64_t>> &get(const Problem &p, unsigned n,
                                               const std::vector<StepChoice> &steps, size_t i,
                                               unsigned parts, int s,
                                               const std::vector<std::vector<int>> &configs,
                                               bool buffers = false) {
    const ProblemNode &node = p.nodes[n];
    const size_t m = std::max(steps.size(), i + 1);
    key_.clear();
    key_.push_back(buffers);
    key_.push_back(reinterpret_cast<intptr_t>(node.table.get()));
    key_.push_back(static_cast<int64_t>(i));
    key_.push_back(parts);
    key_.push_back(s);
    for (size_t l = 0; l < m; ++l) {
      key_.push_back(l == i ? parts : steps[l].parts);
      key_.push_back(l == i ? s : steps[l].node[n]);
    }
    for (int64_t v : node.shapes.vars)
      key_.push_back(v);
    for (size_t k = 0; k <= node.inputs.size(); ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      key_.push_back(-1000 - int64_t(k));
      // Repeated inputs are deduplicated by tensor identity: keep which slot it repeats.
      for (size_t q = 0; q < k && k < node.inputs.size(); ++q)
        if (node.inputs[q] == t)
          key_.push_back(-2000 - int64_t(q));
      for (int64_t d : p.tensors[t].shape)
        key_.push_back(d);
      key_.push_back(p.tensors[t].elementBytes);
      for (size_t l = 0; l < m; ++l)
        if (l != i)
          key_.push_back(steps[l].tensor[t]);
      for (int c : configs[k])
        key_.push_back(c);
    }
    auto it = cache_.find(key_);
    if (it != cache_.end())
      return it->second;
    return cache_
        .emplace(key_, buffers ? p.stepBuffers(n, steps, i, parts, s, configs)
                               : p.stepTerms(n, steps, i, parts, s, configs))
        .first->second;
  }

private:
  std::vector<int64_t> key_;
  std::unordered_map<std::vector<int64_t>, std::vector<std::vector<int64_t>>, VectorHash> cache_;
};

/// Sums the (node, tensor) cost tables of a step into the DP's tables: one per pair of
/// variables, a unary one where node and tensor share a variable or one of the two has a
/// single value (conditioned on it).
class CostTables {
public:
  explicit CostTables(MinSumProblem &msp) : msp_(msp) {}

  /// Adds cost(x, y) to the cost of X = x, Y = y.
  template <typename Cost> void add(unsigned X, unsigned Y, Cost cost) {
    const unsigned dx = msp_.domain(X), dy = msp_.domain(Y);
    if (X == Y) {
      auto &u = unary(X);
      for (unsigned x = 0; x < dx; ++x)
        u[x] += cost(x, x);
    } else if (dx == 1 || dy == 1) {
      auto &u = unary(dy == 1 ? X : Y);
      for (unsigned x = 0; x < dx; ++x)
        for (unsigned y = 0; y < dy; ++y)
          u[dy == 1 ? x : y] += cost(x, y);
    } else {
      auto &tab = pair_[{std::min(X, Y), std::max(X, Y)}];
      tab.resize(size_t(dx) * dy, 0);
      for (unsigned x = 0; x < dx; ++x)
        for (unsigned y = 0; y < dy; ++y)
          tab[X < Y ? size_t(x) * dy + y : size_t(y) * dx + x] += cost(x, y);
    }
  }

  /// Hands the sums to the DP.
  void flush() {
    for (auto &[v, u] : unary_)
      msp_.addUnary(v, u);
    for (auto &[k, tab] : pair_)
      msp_.addPairwise(k.first, k.second, tab);
  }

private:
  std::vector<int64_t> &unary(unsigned v) {
    auto &u = unary_[v];
    u.resize(msp_.domain(v), 0);
    return u;
  }
  MinSumProblem &msp_;
  std::map<std::pair<unsigned, unsigned>, std::vector<int64_t>> pair_;
  std::map<unsigned, std::vector<int64_t>> unary_;
};

/// One step's DP: coarse variables over the candidates, and the cost tables.
struct StepModel {
  MinSumProblem msp;
  std::vector<unsigned> nodeVar, tensorVar;
  std::vector<std::vector<int>> nodeChoice;   ///< per node, per value of its variable
  std::vector<std::vector<int>> tensorChoice; ///< per tensor, per value of its variable
};

/// Worker 0's bytes of tensor `t`'s tile when the tensor's cut at each step is `dims(l)`
/// (a dimension, or -1 for whole) into `parts(l)` of `m` steps.
template <typename Dims, typename Parts>
int64_t tileBytes(const Problem &p, unsigned t, size_t m, Dims dims, Parts parts) {
  std::vector<int64_t> ext = p.tensors[t].shape;
  for (size_t l = 0; l < m; ++l)
    if (int d = dims(l); d >= 0)
      ext[d] = partOf(ext[d], parts(l), 0).size();
  int64_t bytes = p.tensors[t].elementBytes;
  for (int64_t e : ext)
    bytes *= e;
  return bytes;
}

/// The memory term of the objective (PlanOptions::memoryWeight) in integer cost units.
int64_t memoryCost(double weight, int64_t bytes) {
  return static_cast<int64_t>(std::llround(weight * double(bytes)));
}

StepModel buildStep(const Problem &p, const Coarsening &co, const std::vector<StepChoice> &steps,
                    size_t i, unsigned parts, const Candidates &cand, TermCache &cache,
                    double memoryWeight, const std::vector<bool> &pricedBuffers) {
  StepModel m;
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  // Topological position for the elimination's tie-break.
  std::vector<int64_t> pos(N);
  for (unsigned i = 0; i < p.order.size(); ++i)
    pos[p.order[i]] = i;
  std::map<unsigned, std::vector<unsigned>> members; // set -> items (nodes < N <= tensors)
  for (unsigned n = 0; n < N; ++n)
    members[co.nodeSet[n]].push_back(n);
  for (unsigned t = 0; t < T; ++t)
    members[co.tensorSet[t]].push_back(N + t);
  auto labelsOf = [&](unsigned item) {
    std::vector<int> l;
    if (item < N)
      for (int s : cand.node[item])
        l.push_back(nodeLabel(p, item, s));
    else
      l = cand.tensor[item - N];
    return l;
  };
  auto priorityOf = [&](unsigned item) {
    if (item < N)
      return pos[item];
    const ProblemTensor &t = p.tensors[item - N];
    int64_t best = t.producer >= 0 ? pos[t.producer] : int64_t(N);
    for (unsigned c : t.consumers)
      best = std::min(best, pos[c]);
    return best;
  };
  m.nodeVar.assign(N, 0);
  m.tensorVar.assign(T, 0);
  m.nodeChoice.assign(N, {});
  m.tensorChoice.assign(T, {});
  auto assign = [&](const std::vector<unsigned> &items, const std::vector<int> &labels) {
    int64_t prio = INT64_MAX;
    for (unsigned item : items)
      prio = std::min(prio, priorityOf(item));
    unsigned v = m.msp.addVariable(static_cast<unsigned>(labels.size()), prio);
    for (unsigned item : items) {
      if (item >= N) {
        m.tensorVar[item - N] = v;
        m.tensorChoice[item - N] = labels;
        continue;
      }
      m.nodeVar[item] = v;
      for (int l : labels) {
        int s = -1;
        for (int c : cand.node[item])
          if (nodeLabel(p, item, c) == l)
            s = c;
        m.nodeChoice[item].push_back(s);
      }
    }
  };
  for (const auto &[set, items] : members) {
    std::vector<int> domain = labelsOf(items.front());
    for (size_t i = 1; i < items.size() && !domain.empty(); ++i) {
      std::vector<int> other = labelsOf(items[i]), keep;
      for (int l : domain)
        if (std::find(other.begin(), other.end(), l) != other.end())
          keep.push_back(l);
      domain = std::move(keep);
    }
    if (!domain.empty()) {
      assign(items, domain);
      continue;
    }
    for (unsigned item : items) // nothing in common this step: each member on its own
      assign({item}, labelsOf(item));
  }
  // Cost tables: per node and slot, strategy x tensor configuration.
  CostTables tables(m.msp);
  for (unsigned n = 0; n < N; ++n) {
    const ProblemNode &node = p.nodes[n];
    const size_t slots = node.inputs.size() + 1;
    std::vector<std::vector<int>> configs(slots);
    for (size_t i = 0; i < slots; ++i)
      configs[i] = m.tensorChoice[i < node.inputs.size() ? node.inputs[i] : node.output];
    // Communication, and where the node is priced, the memory of its buffers.
    const bool priced = memoryWeight > 0 && n < pricedBuffers.size() && pricedBuffers[n];
    std::map<int, std::vector<std::vector<int64_t>>> terms, buffers;
    for (int s : m.nodeChoice[n])
      if (!terms.count(s)) {
        terms[s] = cache.get(p, n, steps, i, parts, s, configs);
        if (priced)
          buffers[s] = cache.get(p, n, steps, i, parts, s, configs, true);
      }
    for (size_t i = 0; i < slots; ++i) {
      unsigned t = i < node.inputs.size() ? node.inputs[i] : node.output;
      tables.add(m.nodeVar[n], m.tensorVar[t], [&](unsigned x, unsigned y) {
        const int s = m.nodeChoice[n][x];
        return terms[s][i][y] + (priced ? memoryCost(memoryWeight, buffers[s][i][y]) : 0);
      });
    }
  }
  if (memoryWeight > 0) {
    const size_t depth = std::max(steps.size(), i + 1);
    for (unsigned t = 0; t < T; ++t) {
      std::vector<int64_t> u;
      for (int c : m.tensorChoice[t])
        u.push_back(memoryCost(
            memoryWeight,
            tileBytes(
                p, t, depth, [&](size_t l) { return l == i ? c : steps[l].tensor[t]; },
                [&](size_t l) { return l == i ? parts : steps[l].parts; })));
      tables.add(m.tensorVar[t], m.tensorVar[t], [&](unsigned x, unsigned) { return u[x]; });
    }
  }
  tables.flush();
  return m;
}

StepChoice choiceOf(const Problem &p, const StepModel &m, unsigned parts,
                    const std::vector<unsigned> &values) {
  StepChoice c;
  c.parts = parts;
  for (unsigned n = 0; n < p.nodes.size(); ++n)
    c.node.push_back(m.nodeChoice[n][values[m.nodeVar[n]]]);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    c.tensor.push_back(m.tensorChoice[t][values[m.tensorVar[t]]]);
  return c;
}

void finishPlan(const Problem &p, PartitionPlan &plan) {
  plan.stepBytes.clear();
  plan.nodeBytes.assign(p.nodes.size(), 0);
  int64_t before = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    std::vector<StepChoice> prefix(plan.steps.begin(), plan.steps.begin() + i + 1);
    int64_t c = p.modelCost(prefix, i + 1 == plan.steps.size() ? &plan.nodeBytes : nullptr);
    plan.stepBytes.push_back(c - before);
    before = c;
  }
  plan.totalBytes = before;
}

/// Recursive partitioning (and the single-step DP algorithms, with one factor): one exact
/// DP per factor of k, each given the steps before it; then, as long as it lowers the
/// cost, each step is solved again exactly given all the others (the cost of a step
/// depends on how the earlier steps cut each op and tensor, so the first pass alone is not
/// always optimal; this refinement never raises the cost).
llvm::Error recursiveSearch(const Problem &p, const PlanOptions &o,
                            const std::vector<unsigned> &factors, PartitionPlan &plan) {
  Coarsening co = coarsen(p, o.coarsen, o.coarsen);
  MinSumProblem::Limits limits;
  limits.maxTableEntries = o.maxTableEntries;
  // A graph too wide for exact elimination (DenseNet's concatenations) still gets a plan:
  // conditioning, with smaller tables so that it stays fast.
  limits.conditionTableEntries = std::min<uint64_t>(o.maxTableEntries, uint64_t(1) << 18);
  TermCache cache;
  auto solveStep = [&](size_t i, unsigned parts) -> llvm::Expected<std::pair<StepChoice, int64_t>> {
    Candidates cand = candidates(p, plan.steps, i, parts, o.algorithm);
    StepModel m = buildStep(p, co, plan.steps, i, parts, cand, cache, o.memoryWeight, o.pricedBuffers);
    if (i == 0 && plan.variables == 0)
      plan.variables = m.msp.variables();
    auto sol = m.msp.solve(limits);
    if (!sol)
      return sol.takeError();
    if (sol->conditioned > 0) // the graph is wide: later solves skip the large exact tables
      limits.maxTableEntries = limits.conditionTableEntries;
    plan.largestTable = std::max(plan.largestTable, sol->largestTable);
    plan.conditioned = std::max(plan.conditioned, sol->conditioned);
    return std::make_pair(choiceOf(p, m, parts, sol->values), sol->cost);
  };
  int64_t cost = 0;
  for (unsigned parts : factors) {
    auto step = solveStep(plan.steps.size(), parts);
    if (!step)
      return step.takeError();
    plan.steps.push_back(std::move(step->first));
    cost = step->second;
  }
  for (unsigned sweep = 0; sweep < 8 && plan.steps.size() > 1; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      auto step = solveStep(i, plan.steps[i].parts);
      if (!step)
        return step.takeError();
      if (step->second < cost) {
        plan.steps[i] = std::move(step->first);
        cost = step->second;
        improved = true;
      }
    }
    if (!improved)
      break;
  }
  return llvm::Error::success();
}

/// Spartan: tensors in decreasing size choose the dimension that costs their incident ops
/// least given the choices made so far (undecided tensors assumed at their best); then
/// every op takes its best strategy.
void spartanSearch(const Problem &p, unsigned k, PartitionPlan &plan) {
  Candidates cand = candidates(p, {}, 0, k, Algorithm::Spartan);
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  // terms[n][si][slot][ci]
  std::vector<std::vector<std::vector<std::vector<int64_t>>>> terms(N);
  for (unsigned n = 0; n < N; ++n) {
    std::vector<std::vector<int>> configs;
    for (unsigned t : p.nodes[n].inputs)
      configs.push_back(cand.tensor[t]);
    configs.push_back(cand.tensor[p.nodes[n].output]);
    for (int s : cand.node[n])
      terms[n].push_back(p.stepTerms(n, {}, 0, k, s, configs));
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

/// Every valid choice sequence of one item over `factors` (a node's strategies or a
/// tensor's dimensions, each split only while the piece stays at least as large as the
/// parts), as labels per step.
template <typename Extent>
void sequences(unsigned steps, const std::vector<unsigned> &factors, const std::vector<int> &options,
               Extent extentAfter, std::vector<int> &prefix, std::vector<std::vector<int>> &out) {
  if (prefix.size() == steps) {
    out.push_back(prefix);
    return;
  }
  unsigned parts = factors[prefix.size()];
  bool any = false;
  for (int o : options) {
    if (o < 0)
      continue;
    if (extentAfter(prefix, o) < int64_t(parts))
      continue;
    any = true;
    prefix.push_back(o);
    sequences(steps, factors, options, extentAfter, prefix, out);
    prefix.pop_back();
  }
  if (!any) {
    prefix.push_back(-1);
    sequences(steps, factors, options, extentAfter, prefix, out);
    prefix.pop_back();
  }
}

/// dp-flat: one DP whose variables choose a whole tiling (a choice per factor of k).
llvm::Error flatSearch(const Problem &p, const PlanOptions &o, const std::vector<unsigned> &factors,
                       Clock::time_point deadline, PartitionPlan &plan) {
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  const unsigned m = static_cast<unsigned>(factors.size());
  Coarsening co = coarsen(p, o.coarsen, o.coarsen);
  auto nodeSeqs = [&](unsigned n) {
    std::vector<int> opts(p.nodes[n].table->strategies.size());
    std::iota(opts.begin(), opts.end(), 0);
    std::vector<std::vector<int>> out;
    std::vector<int> prefix;
    auto extent = [&](const std::vector<int> &pre, int s) {
      unsigned v = p.nodes[n].table->strategies[s].var;
      Range r{0, p.nodes[n].shapes.vars[v]};
      for (size_t l = 0; l < pre.size(); ++l)
        if (pre[l] >= 0 && p.nodes[n].table->strategies[pre[l]].var == v)
          r = partOf(r.size(), factors[l], 0);
      return r.size();
    };
    sequences(m, factors, opts, extent, prefix, out);
    return out;
  };
  auto tensorSeqs = [&](unsigned t) {
    std::vector<int> opts(p.tensors[t].shape.size());
    std::iota(opts.begin(), opts.end(), 0);
    std::vector<std::vector<int>> out;
    std::vector<int> prefix;
    auto extent = [&](const std::vector<int> &pre, int d) {
      Range r{0, p.tensors[t].shape[d]};
      for (size_t l = 0; l < pre.size(); ++l)
        if (pre[l] == d)
          r = partOf(r.size(), factors[l], 0);
      return r.size();
    };
    sequences(m, factors, opts, extent, prefix, out);
    return out;
  };
  // Label sequences per item; coarse sets intersect them.
  std::vector<std::vector<std::vector<int>>> nodeSeq(N), tensorSeq(T);
  for (unsigned n = 0; n < N; ++n)
    nodeSeq[n] = nodeSeqs(n);
  for (unsigned t = 0; t < T; ++t)
    tensorSeq[t] = tensorSeqs(t);
  auto nodeLabels = [&](unsigned n, const std::vector<int> &seq) {
    std::vector<int> l;
    for (int s : seq)
      l.push_back(nodeLabel(p, n, s));
    return l;
  };
  std::map<unsigned, std::vector<unsigned>> members;
  for (unsigned n = 0; n < N; ++n)
    members[co.nodeSet[n]].push_back(n);
  for (unsigned t = 0; t < T; ++t)
    members[co.tensorSet[t]].push_back(N + t);
  MinSumProblem msp;
  std::vector<unsigned> nodeVar(N), tensorVar(T);
  std::vector<std::vector<std::vector<int>>> nodeChoice(N), tensorChoice(T); // per value, a sequence
  auto labelSeqs = [&](unsigned item) {
    std::vector<std::vector<int>> out;
    if (item < N)
      for (const auto &s : nodeSeq[item])
        out.push_back(nodeLabels(item, s));
    else
      out = tensorSeq[item - N];
    return out;
  };
  auto assign = [&](const std::vector<unsigned> &items, const std::vector<std::vector<int>> &dom) {
    unsigned v = msp.addVariable(static_cast<unsigned>(dom.size()), items.front());
    for (unsigned item : items) {
      if (item >= N) {
        tensorVar[item - N] = v;
        tensorChoice[item - N] = dom;
        continue;
      }
      nodeVar[item] = v;
      for (const auto &labels : dom)
        for (const auto &s : nodeSeq[item])
          if (nodeLabels(item, s) == labels) {
            nodeChoice[item].push_back(s);
            break;
          }
    }
  };
  for (const auto &[set, items] : members) {
    std::vector<std::vector<int>> dom = labelSeqs(items.front());
    for (size_t i = 1; i < items.size() && !dom.empty(); ++i) {
      auto other = labelSeqs(items[i]);
      std::vector<std::vector<int>> keep;
      for (const auto &l : dom)
        if (std::find(other.begin(), other.end(), l) != other.end())
          keep.push_back(l);
      dom = std::move(keep);
    }
    if (dom.size() > 65535)
      return stringError("dp-flat: too many tilings for one variable");
    if (!dom.empty()) {
      assign(items, dom);
      continue;
    }
    for (unsigned item : items)
      assign({item}, labelSeqs(item));
  }
  plan.variables = msp.variables();
  // Pairwise tables: the node's cost at the last level, per slot.
  std::vector<StepChoice> scratch(m);
  for (unsigned l = 0; l < m; ++l) {
    scratch[l].parts = factors[l];
    scratch[l].node.assign(N, -1);
    scratch[l].tensor.assign(T, -1);
  }
  std::vector<StepChoice> prior(scratch.begin(), scratch.end() - 1);
  CostTables tables(msp);
  for (unsigned n = 0; n < N; ++n) {
    const ProblemNode &node = p.nodes[n];
    const size_t slots = node.inputs.size() + 1;
    const unsigned X = nodeVar[n];
    const size_t dx = nodeChoice[n].size();
    for (size_t i = 0; i < slots; ++i) {
      if (Clock::now() > deadline)
        return stringError("dp-flat ran out of its time budget while building its tables");
      unsigned t = i < node.inputs.size() ? node.inputs[i] : node.output;
      const unsigned Y = tensorVar[t];
      const size_t dy = tensorChoice[t].size();
      std::vector<int64_t> tab(dx * dy, 0);
      for (size_t x = 0; x < dx; ++x) {
        for (unsigned l = 0; l + 1 < m; ++l)
          prior[l].node[n] = nodeChoice[n][x][l];
        // Group the tensor's sequences by prefix: one stepTerms call per prefix.
        std::map<std::vector<int>, std::vector<size_t>> byPrefix;
        for (size_t y = 0; y < dy; ++y)
          byPrefix[std::vector<int>(tensorChoice[t][y].begin(), tensorChoice[t][y].end() - 1)]
              .push_back(y);
        for (const auto &[pre, ys] : byPrefix) {
          for (unsigned l = 0; l + 1 < m; ++l)
            prior[l].tensor[t] = pre[l];
          std::vector<std::vector<int>> configs(slots);
          for (size_t y : ys)
            configs[i].push_back(tensorChoice[t][y].back());
          auto terms = p.stepTerms(n, prior, prior.size(), factors.back(),
                                   nodeChoice[n][x].back(), configs);
          for (size_t q = 0; q < ys.size(); ++q)
            tab[x * dy + ys[q]] = terms[i][q];
        }
        for (unsigned l = 0; l + 1 < m; ++l)
          prior[l].tensor[t] = -1;
      }
      for (unsigned l = 0; l + 1 < m; ++l)
        prior[l].node[n] = -1;
      tables.add(X, Y, [&](unsigned x, unsigned y) { return tab[size_t(x) * dy + y]; });
    }
  }
  if (o.memoryWeight > 0)
    for (unsigned t = 0; t < T; ++t) {
      std::vector<int64_t> u;
      for (const std::vector<int> &seq : tensorChoice[t])
        u.push_back(memoryCost(o.memoryWeight,
                               tileBytes(
                                   p, t, m, [&](size_t l) { return seq[l]; },
                                   [&](size_t l) { return factors[l]; })));
      tables.add(tensorVar[t], tensorVar[t], [&](unsigned x, unsigned) { return u[x]; });
    }
  tables.flush();
  MinSumProblem::Limits limits;
  limits.maxTableEntries = o.maxTableEntries;
  limits.deadline = deadline;
  auto sol = msp.solve(limits);
  if (!sol)
    return stringError("dp-flat: " + llvm::toString(sol.takeError()));
  plan.largestTable = sol->largestTable;
  plan.steps = scratch;
  for (unsigned n = 0; n < N; ++n)
    for (unsigned l = 0; l < m; ++l)
      plan.steps[l].node[n] = nodeChoice[n][sol->values[nodeVar[n]]][l];
  for (unsigned t = 0; t < T; ++t)
    for (unsigned l = 0; l < m; ++l)
      plan.steps[l].tensor[t] = tensorChoice[t][sol->values[tensorVar[t]]][l];
  return llvm::Error::success();
}

/// Exhaustive: every assignment of every step but the last, the last solved exactly.
llvm::Error exhaustiveSearch(const Problem &p, const PlanOptions &o,
                             const std::vector<unsigned> &factors, Clock::time_point deadline,
                             PartitionPlan &plan) {
  Coarsening co = coarsen(p, o.coarsen, o.coarsen);
  TermCache cache;
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
    Candidates cand = candidates(p, current, current.size(), parts, Algorithm::Tofu);
    StepModel m = buildStep(p, co, current, current.size(), parts, cand, cache, 0, {});
    if (current.size() + 1 == factors.size()) {
      auto sol = m.msp.solve();
      if (!sol) {
        err = sol.takeError();
        return;
      }
      current.push_back(choiceOf(p, m, parts, sol->values));
      int64_t c = p.modelCost(current);
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

} // namespace

const char *algorithmName(Algorithm a) {
  switch (a) {
  case Algorithm::Tofu: return "tofu";
  case Algorithm::DpFlat: return "dp-flat";
  case Algorithm::Icml18: return "icml18";
  case Algorithm::EqualChop: return "equalchop";
  case Algorithm::Spartan: return "spartan";
  case Algorithm::AllRow: return "allrow";
  case Algorithm::DataParallel: return "data-parallel";
  case Algorithm::Exhaustive: return "exhaustive";
  }
  return "?";
}

std::optional<Algorithm> parseAlgorithm(const std::string &name) {
  for (Algorithm a : {Algorithm::Tofu, Algorithm::DpFlat, Algorithm::Icml18, Algorithm::EqualChop,
                      Algorithm::Spartan, Algorithm::AllRow, Algorithm::DataParallel,
                      Algorithm::Exhaustive})
    if (name == algorithmName(a))
      return a;
  return std::nullopt;
}

std::string algorithmNames() {
  return "tofu, dp-flat, icml18, equalchop, spartan, allrow, data-parallel, exhaustive";
}

/// Element-wise for coarsening: one output strategy per output dimension, nothing else,
/// and every input either a scalar or of the output's shape, split exactly along the
/// strategy's dimension (hyper-parameter scalars, as in optimiser updates, are allowed).
bool elementwiseLike(const Problem &p, unsigned n) {
  const ProblemNode &node = p.nodes[n];
  const StrategyTable &t = *node.table;
  const std::vector<int64_t> &out = p.tensors[node.output].shape;
  if (t.strategies.size() != out.size() || out.empty())
    return false;
  for (const Strategy &s : t.strategies) {
    if (s.kind != Strategy::Kind::Output)
      return false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::vector<int64_t> &in = p.tensors[node.inputs[i]].shape;
      if (in.empty())
        continue;
      if (in != out)
        return false;
      for (size_t d = 0; d < in.size(); ++d)
        if (s.inputs[i].access[d] != (d == s.outputDim ? Access::Split : Access::Full))
          return false;
    }
  }
  return true;
}

Coarsening coarsen(const Problem &p, bool mergeElementwise, bool mergeCoalesced) {
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  UnionFind uf(N + p.tensors.size());
  if (mergeCoalesced) {
    std::map<std::string, unsigned> firstNode;
    for (unsigned n = 0; n < N; ++n) {
      const std::string &key = p.nodes[n].coalesce;
      if (key.empty())
        continue;
      auto [it, fresh] = firstNode.emplace(key, n);
      if (!fresh) {
        uf.unite(it->second, n);
        uf.unite(N + p.nodes[it->second].output, N + p.nodes[n].output);
      }
    }
  }
  if (mergeElementwise) {
    for (unsigned n = 0; n < N; ++n) {
      if (!elementwiseLike(p, n))
        continue;
      for (unsigned t : p.nodes[n].inputs) {
        const ProblemTensor &in = p.tensors[t];
        if (in.producer < 0 || in.consumers.size() != 1 ||
            !elementwiseLike(p, static_cast<unsigned>(in.producer)) ||
            in.shape != p.tensors[p.nodes[n].output].shape)
          continue;
        uf.unite(n, static_cast<unsigned>(in.producer));
        uf.unite(n, N + t);
      }
    }
  }
  Coarsening c;
  std::map<unsigned, unsigned> id;
  for (unsigned i = 0; i < uf.parent.size(); ++i) {
    unsigned r = uf.find(i);
    auto [it, fresh] = id.emplace(r, static_cast<unsigned>(id.size()));
    (i < N ? c.nodeSet : c.tensorSet).push_back(it->second);
  }
  c.sets = static_cast<unsigned>(id.size());
  return c;
}

llvm::Expected<PartitionPlan> searchPlan(const Problem &p, const PlanOptions &o) {
  if (o.workers == 0)
    return stringError("the number of workers must be at least 1");
  PartitionPlan plan;
  plan.algorithm = algorithmName(o.algorithm);
  plan.workers = o.workers;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(o.budgetSeconds));
  std::vector<unsigned> factors = factorWorkers(o.workers);
  llvm::Error err = llvm::Error::success();
  if (o.workers > 1) {
    switch (o.algorithm) {
    case Algorithm::Tofu:
    case Algorithm::Icml18:
      err = recursiveSearch(p, o, factors, plan);
      break;
    case Algorithm::EqualChop:
    case Algorithm::AllRow:
    case Algorithm::DataParallel:
      err = recursiveSearch(p, o, {o.workers}, plan);
      break;
    case Algorithm::Spartan:
      spartanSearch(p, o.workers, plan);
      break;
    case Algorithm::DpFlat:
      err = flatSearch(p, o, factors, deadline, plan);
      break;
    case Algorithm::Exhaustive:
      err = exhaustiveSearch(p, o, factors, deadline, plan);
      break;
    }
  }
  if (err)
    return llvm::Expected<PartitionPlan>(std::move(err));
  plan.searchSeconds = std::chrono::duration<double>(Clock::now() - start).count();
  finishPlan(p, plan);
  return plan;
}

std::string encodePlan(const PartitionPlan &plan) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepChoice &s : plan.steps)
    steps.push_back({{"parts", s.parts}, {"node", s.node}, {"tensor", s.tensor}});
  return nlohmann::json{{"algorithm", plan.algorithm},     {"workers", plan.workers},
                        {"steps", steps},                  {"step_bytes", plan.stepBytes},
                        {"total_bytes", plan.totalBytes},  {"node_bytes", plan.nodeBytes},
                        {"search_seconds", plan.searchSeconds},
                        {"largest_table", plan.largestTable}, {"variables", plan.variables},
                        {"conditioned", plan.conditioned}}
      .dump();
}

llvm::Expected<PartitionPlan> decodePlan(const std::string &text, const Problem &problem) {
  PartitionPlan plan;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    plan.algorithm = j.at("algorithm").get<std::string>();
    plan.workers = j.at("workers").get<unsigned>();
    for (const nlohmann::json &s : j.at("steps"))
      plan.steps.push_back({s.at("parts").get<unsigned>(), s.at("node").get<std::vector<int>>(),
                            s.at("tensor").get<std::vector<int>>()});
    plan.stepBytes = j.at("step_bytes").get<std::vector<int64_t>>();
    plan.totalBytes = j.at("total_bytes").get<int64_t>();
    plan.nodeBytes = j.at("node_bytes").get<std::vector<int64_t>>();
    plan.searchSeconds = j.at("search_seconds").get<double>();
    plan.largestTable = j.at("largest_table").get<uint64_t>();
    plan.variables = j.at("variables").get<size_t>();
    plan.conditioned = j.value("conditioned", 0u);
  } catch (const nlohmann::json::exception &e) {
    return stringError(std::string("a malformed plan: ") + e.what());
  }
  unsigned product = 1;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const StepChoice &s = plan.steps[i];
    if (s.parts < 1 || s.node.size() != problem.nodes.size() ||
        s.tensor.size() != problem.tensors.size())
      return stringError(fmt::format("plan step {}: {} parts, {} node and {} tensor choices for "
                                     "a graph of {} nodes and {} tensors",
                                     i + 1, s.parts, s.node.size(), s.tensor.size(),
                                     problem.nodes.size(), problem.tensors.size()));
    for (size_t n = 0; n < s.node.size(); ++n)
      if (s.node[n] < -1 ||
          s.node[n] >= static_cast<int>(problem.nodes[n].table->strategies.size()))
        return stringError(fmt::format("plan step {}: node '{}' has no strategy {}", i + 1,
                                       problem.nodes[n].name, s.node[n]));
    for (size_t t = 0; t < s.tensor.size(); ++t)
      if (s.tensor[t] < -1 || s.tensor[t] >= static_cast<int>(problem.tensors[t].shape.size()))
        return stringError(fmt::format("plan step {}: tensor '{}' has no dimension {}", i + 1,
                                       problem.tensors[t].name, s.tensor[t]));
    product *= s.parts;
  }
  if (!plan.steps.empty() && product != plan.workers)
    return stringError(fmt::format("the plan's steps make {} parts for {} workers", product,
                                   plan.workers));
  return plan;
}

} // namespace tofu
