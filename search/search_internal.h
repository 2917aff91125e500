// The search's parts, shared by its files (search/search.h is the public header):
// step_dp.cc builds and solves one step's DP over candidates and cached cost terms;
// joint_solve.cc solves several steps together; recursion.cc runs the recursion over the
// factors of k; baselines.cc holds the baselines; search.cc the algorithm names, the
// coarsening, the entry point and the plan codec.
#ifndef TOFU_SEARCH_SEARCH_INTERNAL_H
#define TOFU_SEARCH_SEARCH_INTERNAL_H

#include "search/search.h"

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
int nodeLabel(const Problem &p, unsigned n, int s);

/// What sets one algorithm apart from Tofu's search, as data: the baselines' special cases
/// are read from here (policyOf), never tested against the algorithm itself.
struct SearchPolicy {
  enum class Driver {
    Recursion,  ///< one DP per factor of k, largest first (tofu, icml18)
    OneStep,    ///< one DP of k parts at once (equalchop, allrow, data-parallel)
    Greedy,     ///< largest tensor first (spartan)
    Flat,       ///< one DP over every multi-dimensional tiling (dp-flat)
    Exhaustive, ///< every sequence of basic plans
  };
  enum class TensorCuts {
    Any,       ///< any dimension
    FirstOnly, ///< the first dimension, else whole (allrow)
    Batch,     ///< the first dimension, but weights and their state whole (data-parallel)
  };
  Driver driver = Driver::Recursion;
  bool reductionStrategies = true; ///< ops may split a reduction variable (not icml18)
  TensorCuts tensorCuts = TensorCuts::Any;
  bool machineWeights = false; ///< the objective takes PlanOptions::prefixWeights
  bool jointMoves = false;     ///< pairs of steps and merged-factor starts after the sweeps
  /// Each op splits its batch variable only (batchVar), or stays whole where it cannot
  /// (zero3): the weights it reads are gathered, its weight gradients reduced.
  bool batchNodes = false;
  /// Weights, their gradients and state cut as Megatron-LM cuts them (megatronCuts); the
  /// other tensors and every op as the DP finds best.
  bool megatron = false;
  /// Every op and tensor may also be replicated, each worker computing or holding it whole
  /// (else only one that no strategy splits): under the time objective, which prices the
  /// compute repeated against the communication saved (recursionPolicy).
  bool replicas = false;
};
SearchPolicy policyOf(Algorithm a);
/// The policy of `o`'s algorithm in the recursion and the exhaustive search: replicas under
/// the time objective (PlanOptions::time) where the algorithm takes a machine's weights.
SearchPolicy recursionPolicy(const PlanOptions &o);

/// The candidates of one step: per node its strategies (or -1), per tensor its dimensions
/// (or -1) that can be split into `parts` given the earlier steps.
struct Candidates {
  std::vector<std::vector<int>> node, tensor;
};

/// Which tensors must stay whole under data parallelism: weights, optimiser state and
/// everything in a weight's group (its gradients and their sums).
std::vector<bool> weightLike(const Problem &p);

/// Node n's batch variable, as data parallelism splits it (-1 where it has none): the one
/// its output's first dimension is indexed by, where the output is not weight-like; else
/// the one indexing the first dimension of its first input that is not (a weight's
/// gradient sums over the batch); else its output's first (an optimiser's update of a
/// sharded weight is split as the weight is).
int batchVar(const Problem &p, unsigned n, const std::vector<bool> &weightLike);

/// Under a policy that cuts the batch (data-parallel, zero3) into `parts`: an error naming
/// the first node of a batch (its output not weight-like, of two dimensions or more) whose
/// batch variable has fewer than `parts` values. Such a node could only be replicated,
/// every worker computing all of it.
llvm::Error batchCutError(const Problem &p, unsigned parts, const char *algorithm);

/// Megatron-LM's tensor-parallel cut of every weight-like tensor (its dimension, or -1:
/// whole), and -2 for the others (any). Followed through the forward ops in order, each
/// activation either whole or split by features: a product of a weight and a whole input
/// is column-parallel (the weight cut along the dimension the output keeps, its features;
/// the result split), of a split input row-parallel (cut along the dimension the product
/// sums over; the result summed whole);
/// the ops after it keep the split (attention's heads), a bias added to a split result is
/// cut with it, a layer norm's result is whole, and an embedding's table is cut by its
/// features (dimension 1: TDL's gather has no variable over the vocabulary). A weight's
/// gradients and optimiser state take its cut.
std::vector<int> megatronCuts(const Problem &p);
/// The variable node n splits under Megatron's layout (-1: any): where it writes a weight's
/// gradient or update with a cut, the one indexing that dimension of its output; else
/// where it reads a cut weight, the one indexing the cut (the weight stays in place).
int megatronVar(const Problem &p, unsigned n, const std::vector<int> &cuts);

/// What items share when they agree on it: a node's class (nodeClasses) and its choice at
/// every step but `skip`, or a tensor's shape and its dimension at every step but `skip`
/// (SIZE_MAX: every step). Written into `sig`.
void nodeSignature(const std::vector<int64_t> &classes, const std::vector<StepChoice> &steps,
                   unsigned n, size_t skip, std::vector<int64_t> &sig);
void tensorSignature(const Problem &p, const std::vector<StepChoice> &steps, unsigned t,
                     size_t skip, std::vector<int64_t> &sig);

/// The first item seen with each signature.
class FirstBySignature {
public:
  /// The first item with `sig` (`item` itself when none came before).
  unsigned of(const std::vector<int64_t> &sig, unsigned item) {
    return first_.try_emplace(sig, item).first->second;
  }

private:
  std::unordered_map<std::vector<int64_t>, unsigned, VectorHash> first_;
};

/// The candidates of step `i` of `steps` (appended when i == steps.size()) with `parts`
/// groups: per node the strategies, per tensor the dimensions, whose whole sequence of
/// cuts stays valid (every cut piece at least as large as its step's parts); -1 (whole)
/// where nothing is. Fills `c`, reusing its lists.
///
/// With `classes` (nodeClasses), a node whose class and choices at the other steps match an
/// earlier node's takes that node's list (the same strategies cut the same extents), and
/// likewise a tensor whose shape and choices match. With `pool`, the nodes and the tensors
/// are done by two of its threads.
void candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
                const SearchPolicy &policy, Candidates &c,
                const std::vector<int64_t> *classes = nullptr, WorkerPool *pool = nullptr);

Candidates candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i,
                      unsigned parts, const SearchPolicy &policy);

/// Per node, its class: nodes of one class (the same analysed op, variable extents, and
/// per slot the same tensor shape, element size and repeated-input pattern) have the same
/// terms under the same choices. Ids are dense, in the order of first appearance.
std::vector<int64_t> nodeClasses(const Problem &p);

/// Memoised CostModel::stepTerms (and stepBuffers): nodes of one instantiation on tensors of
/// the same shapes and choices cost the same (the repeated blocks of a ResNet, the
/// timesteps of an RNN).
class TermCache {
public:
  using Terms = std::vector<std::vector<int64_t>>;
  /// `classes`: nodeClasses, which must outlive the cache.
  explicit TermCache(const std::vector<int64_t> &classes) : classes_(classes) {}

  /// The terms of node `n` at step `i` of `steps` (of `parts` groups) for each choice `s` of
  /// the node there, its slots' tensors taking the `configs` choices (per slot): prepare()
  /// once, then get() per choice. `steps` and `configs` must outlive the gets.
  void prepare(const Problem &p, unsigned n, const std::vector<StepChoice> &steps, size_t i,
               unsigned parts, const std::vector<const std::vector<int> *> &configs,
               const PrefixWeights &weights = {}) {
    at_ = {&p, n, &steps, i, parts, &configs, &weights};
    const ProblemNode &node = p.nodes[n];
    const size_t m = std::max(steps.size(), i + 1);
    key_.clear();
    key_.push_back(0); // buffers or terms
    for (const std::vector<double> *ws : {&weights.bytes, &weights.messages}) {
      key_.push_back(static_cast<int64_t>(ws->size()));
      for (double w : *ws)
        key_.push_back(static_cast<int64_t>(std::llround(w * 1e6)));
    }
    key_.push_back(classes_[n]);
    key_.push_back(static_cast<int64_t>(i));
    key_.push_back(parts);
    for (size_t l = 0; l < m; ++l) {
      key_.push_back(l == i ? parts : steps[l].parts);
      if (l == i)
        choiceAt_ = key_.size();
      key_.push_back(l == i ? -2 : steps[l].node[n]); // step i: the choice, set by get()
    }
    for (size_t k = 0; k <= node.inputs.size(); ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      key_.push_back(-1000 - int64_t(k));
      for (size_t l = 0; l < m; ++l)
        if (l != i)
          key_.push_back(steps[l].tensor[t]);
      for (int c : *configs[k])
        key_.push_back(c);
    }
  }

  /// The prepared node's terms (CostModel::stepTerms), or its buffers (stepBuffers), for its
  /// choice `s` at step i.
  const Terms &get(int s, bool buffers = false) {
    key_[0] = buffers;
    key_[choiceAt_] = s;
    auto it = cache_.find(key_);
    if (it != cache_.end())
      return it->second;
    const Problem &p = *at_.p;
    const std::vector<StepChoice> &steps = *at_.steps;
    const size_t i = at_.i, m = std::max(steps.size(), i + 1);
    // What the computation costs: a region evaluation per candidate, last-step part and
    // group counted.
    uint64_t candidates = 0;
    std::vector<std::vector<int>> configs;
    for (const std::vector<int> *c : *at_.configs) {
      candidates += c->size();
      configs.push_back(*c);
    }
    uint64_t groups = 1;
    for (size_t l = 0; l + 1 < m; ++l)
      groups = std::min<uint64_t>(groups * (l == i ? at_.parts : steps[l].parts),
                                  CostModel::kExactGroups);
    evaluations += candidates * groups * (m - 1 == i ? at_.parts : steps[m - 1].parts);
    return cache_
        .emplace(key_, buffers ? CostModel(p).stepBuffers(at_.n, steps, i, at_.parts, s, configs)
                               : CostModel(p).stepTerms(at_.n, steps, i, at_.parts, s, configs,
                                                        *at_.weights))
        .first->second;
  }

  /// Region evaluations of the terms computed so far (the misses' work).
  uint64_t evaluations = 0;

private:
  struct Prepared {
    const Problem *p;
    unsigned n;
    const std::vector<StepChoice> *steps;
    size_t i;
    unsigned parts;
    const std::vector<const std::vector<int> *> *configs;
    const PrefixWeights *weights;
  } at_{};
  const std::vector<int64_t> &classes_;
  std::vector<int64_t> key_; ///< the prepared key (the choice and buffers set by get)
  size_t choiceAt_ = 0;      ///< where step i's choice lies in key_
  std::unordered_map<std::vector<int64_t>, Terms, VectorHash> cache_;
};

/// A search's term caches: one per recursion step and per part of the search's threads. A
/// node's terms live in its class's part (classes are spread so that the parts have about
/// as many nodes each), so nodes of one class share their entries and one thread alone
/// touches a part's cache while the nodes of a step are spread over the threads; a step's
/// terms never match another step's.
class TermCaches {
public:
  TermCaches(const Problem &p, size_t steps, unsigned parts)
      : classes_(nodeClasses(p)), parts_(std::max(1u, parts)) {
    for (size_t k = 0; k < std::max<size_t>(steps, 1) * parts_; ++k)
      caches_.emplace_back(classes_);
    // Classes to parts, the largest first, each to the part with the fewest nodes so far.
    std::vector<unsigned> size;
    for (int64_t c : classes_) {
      if (size_t(c) >= size.size())
        size.resize(c + 1, 0);
      ++size[c];
    }
    std::vector<unsigned> byNodes(size.size());
    std::iota(byNodes.begin(), byNodes.end(), 0);
    std::stable_sort(byNodes.begin(), byNodes.end(),
                     [&](unsigned a, unsigned b) { return size[a] > size[b]; });
    std::vector<uint64_t> load(parts_, 0);
    partOfClass_.resize(size.size());
    for (unsigned c : byNodes) {
      const unsigned least = unsigned(std::min_element(load.begin(), load.end()) - load.begin());
      partOfClass_[c] = least;
      load[least] += size[c];
    }
  }
  unsigned parts() const { return parts_; }
  /// The part node n's terms belong to.
  unsigned partOf(unsigned n) const { return partOfClass_[classes_[n]]; }
  /// Per node, its class (nodeClasses).
  const std::vector<int64_t> &classes() const { return classes_; }
  /// The cache of step i (below the count given) and part `part`.
  TermCache &at(size_t i, unsigned part) {
    assert(i * parts_ + part < caches_.size() && "a step beyond the search's");
    return caches_[i * parts_ + part];
  }
  /// Region evaluations of every cache's misses so far.
  uint64_t evaluations() const {
    uint64_t sum = 0;
    for (const TermCache &c : caches_)
      sum += c.evaluations;
    return sum;
  }

private:
  std::vector<int64_t> classes_;
  unsigned parts_;
  std::vector<unsigned> partOfClass_;
  std::deque<TermCache> caches_; ///< step-major; a deque: a TermCache does not move
};

/// Sums the (node, tensor) cost tables of a step into the DP's tables: one per pair of
/// variables, a unary one where node and tensor share a variable or one of the two has a
/// single value (conditioned on it).
class CostTables {
public:
  explicit CostTables(MinSumProblem &msp) : msp_(msp), unaryAt_(msp.variables(), kNone) {
    pool_.reserve(lastSize_); // a step's tables are about the size of the previous step's
  }

  /// Adds cost(x, y) to the cost of X = x, Y = y.
  template <typename Cost> void add(unsigned X, unsigned Y, Cost cost) {
    const unsigned dx = msp_.domain(X), dy = msp_.domain(Y);
    if (X == Y) {
      int64_t *u = unary(X);
      for (unsigned x = 0; x < dx; ++x)
        u[x] += cost(x, x);
    } else if (dx == 1 || dy == 1) {
      int64_t *u = unary(dy == 1 ? X : Y);
      for (unsigned x = 0; x < dx; ++x)
        for (unsigned y = 0; y < dy; ++y)
          u[dy == 1 ? x : y] += cost(x, y);
    } else {
      const unsigned a = std::min(X, Y), b = std::max(X, Y);
      auto [at, fresh] = pairAt_.try_emplace(uint64_t(a) << 32 | b, pool_.size());
      if (fresh) {
        pairs_.push_back({a, b, pool_.size()});
        pool_.resize(pool_.size() + size_t(dx) * dy, 0);
      }
      int64_t *tab = pool_.data() + at->second;
      for (unsigned x = 0; x < dx; ++x)
        for (unsigned y = 0; y < dy; ++y)
          tab[X < Y ? size_t(x) * dy + y : size_t(y) * dx + x] += cost(x, y);
    }
  }

  /// Hands the sums to the DP, which takes the pool as it is (once, at the end).
  void flush() {
    lastSize_ = pool_.size();
    msp_.adoptTables(std::move(pool_));
    for (unsigned v = 0; v < unaryAt_.size(); ++v)
      if (unaryAt_[v] != kNone)
        msp_.addUnaryAt(v, unaryAt_[v]);
    for (const Pair &pair : pairs_)
      msp_.addPairwiseAt(pair.a, pair.b, pair.at);
  }

private:
  static constexpr size_t kNone = SIZE_MAX;
  int64_t *unary(unsigned v) {
    if (unaryAt_[v] == kNone) {
      unaryAt_[v] = pool_.size();
      pool_.resize(pool_.size() + msp_.domain(v), 0);
    }
    return pool_.data() + unaryAt_[v];
  }
  struct Pair {
    unsigned a, b; ///< a < b
    size_t at;     ///< the table's place in pool_
  };
  MinSumProblem &msp_;
  std::vector<int64_t> pool_;                   ///< every table, one after the other
  std::vector<Pair> pairs_;                     ///< in the order first added
  std::unordered_map<uint64_t, size_t> pairAt_; ///< (a << 32 | b) -> place in pool_
  std::vector<size_t> unaryAt_;                 ///< per variable (kNone: no table)
  static thread_local size_t lastSize_;         ///< pool_'s size at the last flush
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
inline int64_t memoryCost(double weight, int64_t bytes) {
  return static_cast<int64_t>(std::llround(weight * double(bytes)));
}

/// What a search minimises: communication over the prefix weights' levels (empty: bytes)
/// and, under the time objective (PlanOptions::time), every worker's compute.
struct Objective {
  PrefixWeights weights;
  /// Per node, its divisible work (TimeObjective::nodeSeconds) in cost units; empty: none.
  std::vector<double> work;
};
/// The objective of an algorithm that takes a machine's weights (SearchPolicy::machineWeights:
/// o's weights, and the time objective's compute of `p`'s nodes), else communication alone.
Objective objectiveOf(const Problem &p, const PlanOptions &o, bool machineWeights);
/// Node n's compute, summed over every worker, where step i of `steps` (i == steps.size():
/// appended) takes `parts` parts with the node on strategy s: its work times the parts of
/// each step that replicates it (-1), the steps still to come counted as splitting it.
int64_t computeTerm(const Objective &obj, unsigned n, const std::vector<StepChoice> &steps,
                    size_t i, unsigned parts, int s);
/// The objective of a plan's steps: CostModel::weightedCost plus every node's compute.
int64_t objectiveCost(const Problem &p, const Objective &obj, const std::vector<StepChoice> &steps);

/// A coarsening's sets with their members (nodes n, tensors N + t), and each item's
/// topological position (a tensor: its producer's or earliest consumer's), computed once
/// per search.
struct CoarseSets {
  std::vector<std::vector<unsigned>> members; ///< per set id
  std::vector<int64_t> priority;              ///< per item
  CoarseSets(const Problem &p, const Coarsening &co) {
    const unsigned N = static_cast<unsigned>(p.nodes.size());
    const unsigned T = static_cast<unsigned>(p.tensors.size());
    std::vector<int64_t> pos(N);
    for (unsigned i = 0; i < p.order.size(); ++i)
      pos[p.order[i]] = i;
    priority.assign(pos.begin(), pos.end());
    for (unsigned t = 0; t < T; ++t) {
      const ProblemTensor &pt = p.tensors[t];
      int64_t best = pt.producer >= 0 ? pos[pt.producer] : int64_t(N);
      for (unsigned c : pt.consumers)
        best = std::min(best, pos[c]);
      priority.push_back(best);
    }
    members.resize(co.sets);
    for (unsigned n = 0; n < N; ++n)
      members[co.nodeSet[n]].push_back(n);
    for (unsigned t = 0; t < T; ++t)
      members[co.tensorSet[t]].push_back(N + t);
  }
};

/// The DP's variables of one solve: the members of a coarse set share one variable over
/// the labels they all have (each member its own variable where they have none in common),
/// with the earliest topological position among them as the elimination's tie-break.
/// `labelsOf(item)` lists an item's labels (any comparable type); `assign(items, labels,
/// priority)` adds the variable. Returns the largest domain.
template <typename LabelsOf, typename Assign>
size_t coarseVariables(const CoarseSets &co, LabelsOf labelsOf, Assign assign) {
  auto add = [&](const std::vector<unsigned> &items, const auto &labels) {
    int64_t prio = INT64_MAX;
    for (unsigned item : items)
      prio = std::min(prio, co.priority[item]);
    assign(items, labels, prio);
    return labels.size();
  };
  size_t largest = 0;
  std::decay_t<decltype(labelsOf(0u))> domain; // reused from set to set
  for (const std::vector<unsigned> &items : co.members) {
    if (items.empty())
      continue;
    domain = labelsOf(items.front());
    for (size_t i = 1; i < items.size() && !domain.empty(); ++i) {
      const auto &other = labelsOf(items[i]);
      domain.erase(std::remove_if(domain.begin(), domain.end(),
                                  [&](const auto &l) {
                                    return std::find(other.begin(), other.end(), l) == other.end();
                                  }),
                   domain.end());
    }
    if (!domain.empty()) {
      largest = std::max(largest, add(items, domain));
      continue;
    }
    for (unsigned item : items) // nothing in common: each member on its own
      largest = std::max(largest, add({item}, labelsOf(item)));
  }
  return largest;
}

/// Step i's DP. The nodes' terms are looked up (and computed where missing) by `pool`'s
/// threads, each the nodes of its part of `caches` (none: this thread, every part); the
/// tables are then summed in node order.
StepModel buildStep(const Problem &p, const CoarseSets &co, const std::vector<StepChoice> &steps,
                    size_t i, unsigned parts, const Candidates &cand, TermCaches &caches,
                    WorkerPool *pool, double memoryWeight, const std::vector<bool> &pricedBuffers,
                    const Objective &objective);

StepChoice choiceOf(const Problem &p, const StepModel &m, unsigned parts,
                    const std::vector<unsigned> &values);

void finishPlan(const Problem &p, PartitionPlan &plan);

/// The work one search may spend on joint solves of pairs of steps, in table entries the
/// elimination visits (MinSumProblem::eliminationWork; squared domains make it grow fast
/// with the graph's width) and region evaluations of their cost tables, one of which
/// counts as kEvaluationWork entries. About half a second on this project's machines.
constexpr uint64_t kPairWork = uint64_t(1) << 26;
constexpr uint64_t kEvaluationWork = 64;

/// The choice sequences one item (a node or a tensor) may take over the steps in `S`
/// (ascending) when every other step keeps its choice in `steps`: per step of S an option
/// (a strategy or a dimension) whose cut leaves every piece of the whole sequence at least
/// as large as its step's parts, or -1 (whole) where no option at that step has a valid
/// completion. `cut(state, option, parts)` cuts a copy of the item's extents, false when
/// the piece would be too small; `fixed(l)` is step l's own choice.
template <typename State, typename Cut, typename Fixed>
void choiceSequences(const std::vector<StepChoice> &steps, const std::vector<size_t> &S,
                     const std::vector<int> &options, const State &start, Cut cut, Fixed fixed,
                     std::vector<std::vector<int>> &out) {
  std::vector<int> seq;
  // The extents after each step's cut, one buffer per depth (reused, not reallocated).
  thread_local std::vector<State> after;
  if (after.size() < steps.size())
    after.resize(steps.size());
  // Whether some sequence continues from step l with extents `state`.
  auto walk = [&](auto &self, size_t l, const State &state) -> bool {
    if (l == steps.size()) {
      out.push_back(seq);
      return true;
    }
    const unsigned parts = steps[l].parts;
    State &next = after[l];
    if (std::find(S.begin(), S.end(), l) == S.end()) {
      const int c = fixed(l);
      if (c < 0)
        return self(self, l + 1, state);
      next = state;
      return cut(next, c, parts) && self(self, l + 1, next);
    }
    bool any = false;
    for (int c : options) {
      next = state;
      if (!cut(next, c, parts))
        continue;
      seq.push_back(c);
      any |= self(self, l + 1, next);
      seq.pop_back();
    }
    if (!any) {
      seq.push_back(-1);
      any = self(self, l + 1, state);
      seq.pop_back();
    }
    return any;
  };
  walk(walk, 0, start);
}

/// A joint solve's result: the steps with those of S replaced, and the objective.
struct JointSolution {
  std::vector<StepChoice> steps;
  int64_t cost = 0;
  uint64_t largestTable = 0;
  size_t variables = 0;
};

/// Several steps solved together (joint_solve.cc).
llvm::Expected<JointSolution>
jointSolve(const Problem &p, const PlanOptions &o, const Objective &objective, const CoarseSets &co,
           std::vector<StepChoice> steps, const std::vector<size_t> &S, TermCaches &caches,
           const MinSumProblem::Limits &limits, Clock::time_point deadline,
           uint64_t *workLeft = nullptr, bool neighbourhood = false);

/// The recursion over the factors of k (recursion.cc).
llvm::Error recursiveSearch(const Problem &p, const PlanOptions &o,
                            const std::vector<unsigned> &factors, PartitionPlan &plan);

/// The baselines (baselines.cc).
void spartanSearch(const Problem &p, unsigned k, PartitionPlan &plan);

llvm::Error flatSearch(const Problem &p, const PlanOptions &o, const std::vector<unsigned> &factors,
                       Clock::time_point deadline, PartitionPlan &plan);

llvm::Error exhaustiveSearch(const Problem &p, const PlanOptions &o,
                             const std::vector<unsigned> &factors, Clock::time_point deadline,
                             PartitionPlan &plan);

} // namespace searchimpl
} // namespace tofu

#endif // TOFU_SEARCH_SEARCH_INTERNAL_H
