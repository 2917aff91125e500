// Partition search: coarsening, per-step DP, recursion, baselines.
#include "search/search.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <deque>
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
#include "search/parallel.h"

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

/// What items share when they agree on it: a node's class (nodeClasses) and its choice at
/// every step but `skip`, or a tensor's shape and its dimension at every step but `skip`
/// (SIZE_MAX: every step). Written into `sig`.
void nodeSignature(const std::vector<int64_t> &classes, const std::vector<StepChoice> &steps,
                   unsigned n, size_t skip, std::vector<int64_t> &sig) {
  sig.assign({0, classes[n]});
  for (size_t l = 0; l < steps.size(); ++l)
    sig.push_back(l == skip ? -2 : steps[l].node[n]);
}
void tensorSignature(const Problem &p, const std::vector<StepChoice> &steps, unsigned t,
                     size_t skip, std::vector<int64_t> &sig) {
  const std::vector<int64_t> &shape = p.tensors[t].shape;
  sig.assign({1, int64_t(shape.size())});
  sig.insert(sig.end(), shape.begin(), shape.end());
  for (size_t l = 0; l < steps.size(); ++l)
    sig.push_back(l == skip ? -2 : steps[l].tensor[t]);
}

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
void candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i,
                unsigned parts, Algorithm algo, Candidates &c,
                const std::vector<int64_t> *classes = nullptr, WorkerPool *pool = nullptr) {
  c.node.resize(p.nodes.size());
  c.tensor.resize(p.tensors.size());
  const size_t m = std::max(steps.size(), i + 1);
  auto partsAt = [&](size_t l) { return l == i ? parts : steps[l].parts; };
  auto nodes = [&]() {
    FirstBySignature firsts;
    std::vector<int64_t> sig;
    // Per strategy, the extents of the variables the sequence cuts (few: one per step).
    std::vector<std::pair<int, int64_t>> cut;
    for (unsigned n = 0; n < p.nodes.size(); ++n) {
      if (classes) {
        nodeSignature(*classes, steps, n, i, sig);
        if (const unsigned first = firsts.of(sig, n); first != n) {
          c.node[n] = c.node[first];
          continue;
        }
      }
      std::vector<int> &list = c.node[n];
      list.clear();
      const auto &strategies = p.nodes[n].table->strategies;
      for (unsigned s = 0; s < strategies.size(); ++s) {
        if (algo == Algorithm::Icml18 && strategies[s].kind == Strategy::Kind::Reduction)
          continue;
        cut.clear();
        bool ok = true;
        for (size_t l = 0; l < m && ok; ++l) {
          int v = p.splitVar(n, l == i ? int(s) : steps[l].node[n]);
          if (v < 0)
            continue;
          auto at = std::find_if(cut.begin(), cut.end(),
                                 [&](const auto &c) { return c.first == v; });
          if (at == cut.end())
            at = cut.insert(cut.end(), {v, p.nodes[n].shapes.vars[v]});
          ok = at->second >= int64_t(partsAt(l));
          at->second = partOf(at->second, partsAt(l), 0).size();
        }
        if (ok)
          list.push_back(static_cast<int>(s));
      }
      if (list.empty())
        list.push_back(-1);
    }
  };
  auto tensors = [&]() {
    FirstBySignature firsts;
    std::vector<int64_t> sig;
    std::vector<bool> whole;
    if (algo == Algorithm::DataParallel)
      whole = weightLike(p);
    std::vector<int64_t> ext;
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      const std::vector<int64_t> &shape = p.tensors[t].shape;
      if (classes && algo != Algorithm::DataParallel) { // (data-parallel: by role too)
        tensorSignature(p, steps, t, i, sig);
        if (const unsigned first = firsts.of(sig, t); first != t) {
          c.tensor[t] = c.tensor[first];
          continue;
        }
      }
      std::vector<int> &list = c.tensor[t];
      list.clear();
      for (unsigned d = 0; d < shape.size(); ++d) {
        ext = shape;
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
    }
  };
  if (pool && pool->threads() > 1) {
    pool->run([&](unsigned t) {
      if (t == 0)
        nodes();
      else if (t == 1)
        tensors();
    });
  } else {
    nodes();
    tensors();
  }
}

Candidates candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i,
                      unsigned parts, Algorithm algo) {
  Candidates c;
  candidates(p, steps, i, parts, algo, c);
  return c;
}

/// Per node, its class: nodes of one class (the same analysed op, variable extents, and
/// per slot the same tensor shape, element size and repeated-input pattern) have the same
/// terms under the same choices. Ids are dense, in the order of first appearance.
std::vector<int64_t> nodeClasses(const Problem &p) {
  std::unordered_map<std::vector<int64_t>, int64_t, VectorHash> ids;
  std::vector<int64_t> out;
  std::vector<int64_t> key;
  for (const ProblemNode &node : p.nodes) {
    key.clear();
    key.push_back(reinterpret_cast<intptr_t>(node.table.get()));
    for (int64_t v : node.shapes.vars)
      key.push_back(v);
    for (size_t k = 0; k <= node.inputs.size(); ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      key.push_back(-1000 - int64_t(k));
      // Repeated inputs are deduplicated by tensor identity: keep which slot it repeats.
      for (size_t q = 0; q < k && k < node.inputs.size(); ++q)
        if (node.inputs[q] == t)
          key.push_back(-2000 - int64_t(q));
      for (int64_t d : p.tensors[t].shape)
        key.push_back(d);
      key.push_back(p.tensors[t].elementBytes);
    }
    out.push_back(ids.emplace(key, int64_t(ids.size())).first->second);
  }
  return out;
}

/// Memoised Problem::stepTerms (and stepBuffers): nodes of one instantiation on tensors of
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

  /// The prepared node's terms (Problem::stepTerms), or its buffers (stepBuffers), for its
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
                                  Problem::kExactGroups);
    evaluations += candidates * groups * (m - 1 == i ? at_.parts : steps[m - 1].parts);
    return cache_
        .emplace(key_, buffers ? p.stepBuffers(at_.n, steps, i, at_.parts, s, configs)
                               : p.stepTerms(at_.n, steps, i, at_.parts, s, configs, *at_.weights))
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
thread_local size_t CostTables::lastSize_ = 0;

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
                                    return std::find(other.begin(), other.end(), l) ==
                                           other.end();
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
                    const PrefixWeights &weights) {
  StepModel m;
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  // Per node, the labels of its candidates (in their order).
  std::vector<std::vector<int>> nodeLabels(N);
  for (unsigned n = 0; n < N; ++n)
    for (int s : cand.node[n])
      nodeLabels[n].push_back(nodeLabel(p, n, s));
  auto labelsOf = [&](unsigned item) -> const std::vector<int> & {
    return item < N ? nodeLabels[item] : cand.tensor[item - N];
  };
  m.nodeVar.assign(N, 0);
  m.tensorVar.assign(T, 0);
  m.nodeChoice.assign(N, {});
  m.tensorChoice.assign(T, {});
  coarseVariables(co, labelsOf,
                  [&](const std::vector<unsigned> &items, const std::vector<int> &labels,
                      int64_t priority) {
                    const unsigned v =
                        m.msp.addVariable(static_cast<unsigned>(labels.size()), priority);
                    for (unsigned item : items) {
                      if (item >= N) {
                        m.tensorVar[item - N] = v;
                        m.tensorChoice[item - N] = labels;
                        continue;
                      }
                      m.nodeVar[item] = v;
                      // Each label's candidate (the last, should two share one).
                      const std::vector<int> &own = nodeLabels[item];
                      for (int l : labels) {
                        int s = -1;
                        for (size_t q = own.size(); q-- > 0;)
                          if (own[q] == l) {
                            s = cand.node[item][q];
                            break;
                          }
                        m.nodeChoice[item].push_back(s);
                      }
                    }
                  });
  // Per node and value of its variable, its terms (and where the node is priced, its
  // buffers) in the caches: nodeAt[n] is where its pointers start.
  std::vector<size_t> nodeAt(N + 1, 0);
  for (unsigned n = 0; n < N; ++n)
    nodeAt[n + 1] = nodeAt[n] + m.nodeChoice[n].size();
  std::vector<const TermCache::Terms *> terms(nodeAt[N]), buffers;
  auto isPriced = [&](unsigned n) {
    return memoryWeight > 0 && n < pricedBuffers.size() && pricedBuffers[n];
  };
  if (memoryWeight > 0)
    buffers.resize(nodeAt[N]);
  auto slotConfigs = [&](unsigned n, std::vector<const std::vector<int> *> &configs) {
    const ProblemNode &node = p.nodes[n];
    configs.resize(node.inputs.size() + 1);
    for (size_t k = 0; k < configs.size(); ++k)
      configs[k] = &m.tensorChoice[k < node.inputs.size() ? node.inputs[k] : node.output];
  };
  // Thread t looks up the nodes of part t (every part when it runs alone).
  auto lookUp = [&](unsigned t, unsigned threads) {
    std::vector<const std::vector<int> *> configs;
    for (unsigned n = 0; n < N; ++n) {
      const unsigned part = caches.partOf(n);
      if (threads > 1 && part != t)
        continue;
      slotConfigs(n, configs);
      TermCache &cache = caches.at(i, part);
      cache.prepare(p, n, steps, i, parts, configs, weights);
      const bool priced = isPriced(n);
      for (size_t x = 0; x < m.nodeChoice[n].size(); ++x) {
        const int s = m.nodeChoice[n][x];
        terms[nodeAt[n] + x] = &cache.get(s);
        if (priced)
          buffers[nodeAt[n] + x] = &cache.get(s, true);
      }
    }
  };
  if (pool && pool->threads() > 1 && caches.parts() == pool->threads())
    pool->run([&](unsigned t) { lookUp(t, pool->threads()); });
  else
    lookUp(0, 1);
  // Cost tables: per node and slot, strategy x tensor configuration.
  CostTables tables(m.msp);
  for (unsigned n = 0; n < N; ++n) {
    const ProblemNode &node = p.nodes[n];
    const size_t slots = node.inputs.size() + 1;
    // Communication, and where the node is priced, the memory of its buffers.
    const bool priced = isPriced(n);
    const TermCache::Terms *const *own = terms.data() + nodeAt[n];
    const TermCache::Terms *const *ownBuffers = priced ? buffers.data() + nodeAt[n] : nullptr;
    for (size_t k = 0; k < slots; ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      tables.add(m.nodeVar[n], m.tensorVar[t], [&](unsigned x, unsigned y) {
        return (*own[x])[k][y] + (priced ? memoryCost(memoryWeight, (*ownBuffers[x])[k][y]) : 0);
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

/// Solves the steps in `S` (ascending indices into `steps`, whose parts are set) jointly,
/// every other step as given: one DP whose variables choose, per coarse set, a sequence of
/// choices for those steps. With S every step this is dp-flat, the optimum over every
/// tiling; with S a pair it re-solves two steps of the recursion at once. The objective is
/// the same as one step's (buildStep): every node's whole cost, plus memory's price.
llvm::Expected<JointSolution> jointSolve(const Problem &p, const PlanOptions &o,
                                         const PrefixWeights &weights,
                                         const CoarseSets &co, std::vector<StepChoice> steps,
                                         const std::vector<size_t> &S, TermCaches &caches,
                                         const MinSumProblem::Limits &limits,
                                         Clock::time_point deadline,
                                         uint64_t *workLeft = nullptr,
                                         bool neighbourhood = false) {
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  const size_t last = S.back();
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
    choiceSequences(steps, S, opts, fullRanges(p.nodes[n].shapes), cut,
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
    choiceSequences(steps, S, opts, shape, cut, [&](size_t l) { return steps[l].tensor[t]; },
                    seqs[N + t]);
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
      [&](const std::vector<unsigned> &items, const std::vector<int64_t> &dom,
          int64_t priority) {
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
    const uint64_t work =
        msp.eliminationWork(scopes, workLeft ? *workLeft : UINT64_MAX, &largest);
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
  if (o.memoryWeight > 0)
    for (unsigned t = 0; t < T; ++t) {
      std::vector<int64_t> u;
      for (const std::vector<int> &seq : tensorChoice[t]) {
        auto dim = [&](size_t l) {
          auto at = std::find(S.begin(), S.end(), l);
          return at == S.end() ? steps[l].tensor[t] : seq[at - S.begin()];
        };
        u.push_back(memoryCost(o.memoryWeight,
                               tileBytes(p, t, steps.size(), dim,
                                         [&](size_t l) { return steps[l].parts; })));
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
llvm::Error recursiveSearch(const Problem &p, const PlanOptions &o,
                            const std::vector<unsigned> &factors, PartitionPlan &plan) {
  const CoarseSets co(p, coarsen(p, o.coarsen, o.coarsen));
  MinSumProblem::Limits limits;
  limits.maxTableEntries = o.maxTableEntries;
  // A graph too wide for exact elimination (DenseNet's concatenations) still gets a plan:
  // conditioning, with smaller tables so that it stays fast.
  limits.conditionTableEntries = std::min<uint64_t>(o.maxTableEntries, uint64_t(1) << 18);
  MinSumProblem::Limits pairLimits;
  pairLimits.maxTableEntries = std::min<uint64_t>(o.maxTableEntries, uint64_t(1) << 20);
  // The objective's prefix weights (a machine's levels), remapped for a merged start.
  PrefixWeights weights = o.algorithm == Algorithm::Tofu || o.algorithm == Algorithm::Icml18
                              ? o.prefixWeights
                              : PrefixWeights();
  bool pairsSkipped = false;         // some pair's DP did not fit in what was left
  uint64_t pairWorkLeft = kPairWork; // for every pair solve of this search
  WorkerPool pool(o.threads ? o.threads : WorkerPool::defaultThreads());
  TermCaches caches(p, factors.size(), pool.threads());
  MinSumProblem::OrderCache orders; // the steps' DPs, solved again after other steps changed
  Candidates cand; // each solve's, refilled
  using Steps = std::vector<StepChoice>;
  auto solveStep = [&](const Steps &steps, size_t i,
                       unsigned parts) -> llvm::Expected<std::pair<StepChoice, int64_t>> {
    candidates(p, steps, i, parts, o.algorithm, cand, &caches.classes(), &pool);
    StepModel m = buildStep(p, co, steps, i, parts, cand, caches, &pool, o.memoryWeight,
                            o.pricedBuffers, weights);
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
  };
  // Each step solved again given the others, while that lowers the cost. `fresh[i]`: step
  // i was solved given the others as they are now, so solving it again would give the same
  // result (skipped; not on wide graphs, whose limits may change between solves). (Solving
  // the next steps at the same time and keeping those before the first that lowers the
  // cost was tried: the first one usually does, so on WResNet-152-10 it was no faster than
  // the threads' term look-ups within each solve.)
  auto sweepSteps = [&](Steps &steps, int64_t &cost, std::vector<char> fresh) -> llvm::Error {
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
  };
  // Then pairs of steps solved jointly (a step's best choice can depend on changing
  // another's at the same time), each round followed by the single sweeps. A pair whose DP
  // would be too wide is left as it is; a graph that needed conditioning skips this.
  auto sweepPairs = [&](Steps &steps, int64_t &cost, bool &changed) -> llvm::Error {
    if (o.algorithm != Algorithm::Tofu || !o.jointMoves || plan.conditioned > 0 || pairsSkipped)
      return llvm::Error::success();
    for (unsigned round = 0; round < 4 && steps.size() > 1; ++round) {
      bool improved = false;
      for (size_t a = 0; a < steps.size(); ++a)
        for (size_t b = a + 1; b < steps.size() && (b == a + 1 || steps.size() <= 3); ++b) {
          auto joint = jointSolve(p, o, weights, co, steps, {a, b}, caches, pairLimits,
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
  };
  // Refined from `steps` (`fresh` as in sweepSteps): the single sweeps, then the pairs,
  // unless the pairs raised the exact cost (beyond Problem::kExactGroups groups the
  // objective takes group 0 for all).
  auto refine = [&](Steps &steps, int64_t &cost, std::vector<char> fresh) -> llvm::Error {
    if (llvm::Error e = sweepSteps(steps, cost, std::move(fresh)))
      return e;
    const Steps before = steps;
    const int64_t beforeCost = cost;
    bool changed = false;
    if (llvm::Error e = sweepPairs(steps, cost, changed))
      return e;
    if (changed && p.weightedCost(steps, weights) > p.weightedCost(before, weights)) {
      steps = before;
      cost = beforeCost;
    }
    return llvm::Error::success();
  };
  // One start: the steps of `fs` one after the other, refined.
  auto start = [&](const std::vector<unsigned> &fs, Steps &steps,
                   int64_t &cost) -> llvm::Error {
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
  };
  int64_t cost = 0;
  if (llvm::Error e = start(factors, plan.steps, cost))
    return e;
  // The merged-factor starts: with up to four factors (their number grows with the number
  // of factors, and each start searches again), while the pairs' budget lasts.
  if (o.algorithm != Algorithm::Tofu || !o.jointMoves || factors.size() < 3 || factors.size() > 4 ||
      plan.conditioned > 0 || pairsSkipped)
    return llvm::Error::success();
  int64_t exact = p.weightedCost(plan.steps, weights);
  const PrefixWeights own = weights;
  for (size_t l = 0; l + 1 < factors.size() && !pairsSkipped; ++l) {
    std::vector<unsigned> merged = factors;
    merged[l] *= merged[l + 1];
    merged.erase(merged.begin() + l + 1);
    if (!own.empty()) { // the merged step weighs as the two steps did together
      weights = own;
      for (std::vector<double> *ws : {&weights.bytes, &weights.messages})
        if (!ws->empty()) {
          (*ws)[l] += (*ws)[l + 1];
          ws->erase(ws->begin() + l + 1);
        }
    }
    Steps steps;
    int64_t c = 0;
    llvm::Error err = start(merged, steps, c);
    weights = own;
    if (err)
      return err;
    // Split the merged step back: the same choices cut twice, into factors l and l + 1.
    steps.insert(steps.begin() + l + 1, steps[l]);
    steps[l].parts = factors[l];
    steps[l + 1].parts = factors[l + 1];
    c = INT64_MAX; // the first solve of the sweep gives the objective in these steps
    if (llvm::Error e = refine(steps, c, {}))
      return e;
    const int64_t e = p.weightedCost(steps, weights);
    if (e < exact || (e == exact && c < cost)) {
      plan.steps = std::move(steps);
      cost = c;
      exact = e;
    }
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
  auto sol = jointSolve(p, o, o.prefixWeights, CoarseSets(p, coarsen(p, o.coarsen, o.coarsen)),
                        std::move(steps), all, caches, limits, deadline);
  if (!sol)
    return stringError("dp-flat: " + llvm::toString(sol.takeError()));
  plan.steps = std::move(sol->steps);
  plan.largestTable = sol->largestTable;
  plan.variables = sol->variables;
  return llvm::Error::success();
}

/// Exhaustive: every assignment of every step but the last, the last solved exactly.
llvm::Error exhaustiveSearch(const Problem &p, const PlanOptions &o,
                             const std::vector<unsigned> &factors, Clock::time_point deadline,
                             PartitionPlan &plan) {
  const CoarseSets co(p, coarsen(p, o.coarsen, o.coarsen));
  TermCaches caches(p, factors.size(), 1);
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
    StepModel m = buildStep(p, co, current, current.size(), parts, cand, caches, nullptr, 0, {},
                            {});
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
  std::vector<unsigned> factors = o.factors.empty() ? factorWorkers(o.workers) : o.factors;
  unsigned product = 1;
  for (unsigned f : factors) {
    if (f < 2)
      return stringError(fmt::format("a recursion step of {} parts (each step needs at least 2)", f));
    product *= f;
  }
  if (o.workers > 1 && product != o.workers)
    return stringError(fmt::format("the recursion's steps make {} parts for {} workers", product,
                                   o.workers));
  for (const std::vector<double> *ws : {&o.prefixWeights.bytes, &o.prefixWeights.messages})
    if (!ws->empty() && ws->size() != factors.size())
      return stringError(fmt::format("{} prefix weights for {} recursion steps", ws->size(),
                                     factors.size()));
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
