// Variable elimination for min-sum problems.
#include "search/minsum.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <deque>
#include <iterator>
#include <limits>
#include <memory>
#include <tuple>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

unsigned MinSumProblem::addVariable(unsigned domain, int64_t priority) {
  domains_.push_back(std::max(1u, domain));
  priority_.push_back(priority);
  return static_cast<unsigned>(domains_.size() - 1);
}

void MinSumProblem::addUnary(unsigned v, const int64_t *costs) {
  factors_.push_back({{v, 0}, 1, tables_.size()});
  tables_.insert(tables_.end(), costs, costs + domains_[v]);
}

void MinSumProblem::addPairwise(unsigned a, unsigned b, const int64_t *table) {
  const unsigned da = domains_[a], db = domains_[b];
  factors_.push_back({{std::min(a, b), std::max(a, b)}, 2, tables_.size()});
  if (a < b) {
    tables_.insert(tables_.end(), table, table + size_t(da) * db);
    return;
  }
  tables_.resize(tables_.size() + size_t(da) * db);
  int64_t *t = tables_.data() + factors_.back().tableAt;
  for (unsigned xa = 0; xa < da; ++xa)
    for (unsigned xb = 0; xb < db; ++xb)
      t[xb * da + xa] = table[xa * db + xb];
}

void MinSumProblem::adoptTables(std::vector<int64_t> tables) {
  assert(tables_.empty() && "tables adopted after others were added");
  tables_ = std::move(tables);
}

void MinSumProblem::addUnaryAt(unsigned v, size_t at) {
  assert(at + domains_[v] <= tables_.size() && "a unary table beyond the pool");
  factors_.push_back({{v, 0}, 1, at});
}

void MinSumProblem::addPairwiseAt(unsigned a, unsigned b, size_t at) {
  assert(a < b && at + size_t(domains_[a]) * domains_[b] <= tables_.size() &&
         "a pairwise table out of order or beyond the pool");
  factors_.push_back({{a, b}, 2, at});
}

int64_t MinSumProblem::evaluate(const std::vector<unsigned> &values) const {
  int64_t total = constant_;
  for (const Factor &f : factors_) {
    size_t off = 0;
    for (unsigned k = 0; k < f.arity; ++k)
      off = off * domains_[f.vars[k]] + values[f.vars[k]];
    total += tables_[f.tableAt + off];
  }
  return total;
}

namespace {

/// A factor as an elimination reads it: a kept one (MinSumProblem::Factor) or one an
/// earlier elimination made.
struct FactorView {
  const unsigned *vars;
  size_t arity;
  const int64_t *table;
  size_t size;
};

/// A factor conditioning sliced.
struct MadeFactor {
  std::vector<unsigned> vars; ///< ascending
  std::vector<int64_t> table;
};

/// Storage for the factors the eliminations make, kept from one solve to the next on the
/// same thread: blocks that never move (a factor's view points into them), handed out in
/// order and taken back all at once by reset(), which frees blocks beyond a few to keep.
template <typename T> class Pool {
public:
  /// `n` uninitialised values.
  T *take(size_t n) {
    while (block_ < blocks_.size() && used_ + n > blocks_[block_].size) {
      ++block_;
      used_ = 0;
    }
    if (block_ == blocks_.size()) {
      const size_t size = std::max(n, kBlock);
      blocks_.push_back({std::unique_ptr<T[]>(new T[size]), size});
      used_ = 0;
    }
    T *out = blocks_[block_].data.get() + used_;
    used_ += n;
    return out;
  }
  /// Everything taken back; blocks past kKeep values in all are freed.
  void reset() {
    size_t kept = 0, b = 0;
    for (; b < blocks_.size() && kept + blocks_[b].size <= kKeep; ++b)
      kept += blocks_[b].size;
    blocks_.resize(b);
    block_ = used_ = 0;
  }

private:
  static constexpr size_t kBlock = size_t(1) << 16;
  static constexpr size_t kKeep = size_t(1) << 22;
  struct Block {
    std::unique_ptr<T[]> data;
    size_t size;
  };
  std::vector<Block> blocks_;
  size_t block_ = 0, used_ = 0;
};

/// Factor `f` with variable `u` fixed to `x`: its other variables and their table.
MadeFactor sliceOf(const FactorView &f, unsigned u, unsigned x,
                   const std::vector<unsigned> &domains) {
  MadeFactor out;
  size_t pos = 0;
  for (size_t k = 0; k < f.arity; ++k) {
    if (f.vars[k] == u)
      pos = k;
    else
      out.vars.push_back(f.vars[k]);
  }
  int64_t inner = 1; // the stride of u
  for (size_t k = pos + 1; k < f.arity; ++k)
    inner *= domains[f.vars[k]];
  const int64_t du = domains[u], total = int64_t(f.size);
  out.table.reserve(size_t(total / du));
  for (int64_t outer = 0; outer < total; outer += inner * du)
    for (int64_t i = 0; i < inner; ++i)
      out.table.push_back(f.table[size_t(outer + x * inner + i)]);
  return out;
}

/// The greedy elimination order solveWith and eliminationWork share: the variable whose
/// table (its domain times its neighbours') is smallest first, ties by priority, over the
/// interaction graph the eliminations change. Neighbour lists are sorted vectors and the
/// queue a heap whose outdated entries (a variable reweighed or taken) are skipped.
class EliminationOrder {
public:
  static constexpr bool kConditions = true;
  EliminationOrder(const std::vector<unsigned> &domains, const std::vector<int64_t> &priority,
                   const std::vector<MinSumProblem::Factor> &factors)
      : priority_(priority), adj_(domains.size()), log_(domains.size()), key_(domains.size()),
        version_(domains.size(), 0), queued_(domains.size(), true) {
    for (const MinSumProblem::Factor &f : factors)
      if (f.arity == 2) {
        adj_[f.vars[0]].push_back(f.vars[1]);
        adj_[f.vars[1]].push_back(f.vars[0]);
      }
    for (unsigned v = 0; v < domains.size(); ++v) {
      std::sort(adj_[v].begin(), adj_[v].end());
      adj_[v].erase(std::unique(adj_[v].begin(), adj_[v].end()), adj_[v].end());
      log_[v] = std::log2(double(domains[v]));
    }
    heap_.reserve(domains.size() * 2);
    for (unsigned v = 0; v < domains.size(); ++v) {
      key_[v] = weight(v);
      heap_.push_back({key_[v], priority_[v], v, 0});
    }
    std::make_heap(heap_.begin(), heap_.end(), Later());
  }
  bool empty() {
    while (!heap_.empty() && outdated(heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), Later());
      heap_.pop_back();
    }
    return heap_.empty();
  }
  /// Takes the next variable out of the queue (after empty() said there is one).
  unsigned pop() {
    const unsigned v = heap_.front().var;
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    heap_.pop_back();
    queued_[v] = false;
    return v;
  }
  /// Ascending.
  const std::vector<unsigned> &neighbours(unsigned v) const { return adj_[v]; }
  /// v eliminated: its neighbours lose it and become a clique.
  void eliminate(unsigned v) {
    const std::vector<unsigned> scope = std::move(adj_[v]);
    adj_[v].clear();
    for (unsigned u : scope) {
      merged_.clear();
      std::set_union(adj_[u].begin(), adj_[u].end(), scope.begin(), scope.end(),
                     std::back_inserter(merged_));
      merged_.erase(std::remove_if(merged_.begin(), merged_.end(),
                                   [&](unsigned w) { return w == u || w == v; }),
                    merged_.end());
      adj_[u].swap(merged_);
    }
    for (unsigned u : scope)
      reweigh(u);
  }
  /// u fixed by conditioning while eliminating v: u leaves the graph, and v goes back into
  /// the queue.
  void condition(unsigned u, unsigned v) {
    std::vector<unsigned> touched = std::move(adj_[u]);
    adj_[u].clear();
    for (unsigned w : touched)
      adj_[w].erase(std::lower_bound(adj_[w].begin(), adj_[w].end(), u));
    queued_[u] = false;
    if (std::find(touched.begin(), touched.end(), v) == touched.end())
      touched.insert(std::lower_bound(touched.begin(), touched.end(), v), v);
    for (unsigned w : touched)
      reweigh(w);
  }

private:
  struct Entry {
    double key;
    int64_t priority;
    unsigned var;
    uint32_t version;
  };
  /// The heap's order: a before b when (key, priority, var) is smaller.
  struct Later {
    bool operator()(const Entry &a, const Entry &b) const {
      return std::tie(a.key, a.priority, a.var) > std::tie(b.key, b.priority, b.var);
    }
  };
  bool outdated(const Entry &e) const { return !queued_[e.var] || e.version != version_[e.var]; }
  double weight(unsigned v) const {
    double w = log_[v];
    for (unsigned u : adj_[v])
      w += log_[u];
    return w;
  }
  void reweigh(unsigned v) {
    key_[v] = weight(v);
    queued_[v] = true;
    heap_.push_back({key_[v], priority_[v], v, ++version_[v]});
    std::push_heap(heap_.begin(), heap_.end(), Later());
  }
  const std::vector<int64_t> &priority_;
  std::vector<std::vector<unsigned>> adj_;
  std::vector<double> log_, key_;
  std::vector<uint32_t> version_;
  std::vector<bool> queued_;
  std::vector<Entry> heap_;
  std::vector<unsigned> merged_;
};

/// An order OrderCache kept, played back: the variables and scopes the EliminationOrder
/// that chose it gave, without choosing them again. It cannot condition.
class Replay {
public:
  static constexpr bool kConditions = false;
  explicit Replay(const std::vector<unsigned> &kept) : kept_(kept) {}
  bool empty() const { return at_ == kept_.size(); }
  unsigned pop() {
    const unsigned v = kept_[at_], ns = kept_[at_ + 1];
    scope_.assign(kept_.begin() + at_ + 2, kept_.begin() + at_ + 2 + ns);
    at_ += 2 + ns;
    return v;
  }
  /// The scope of the variable pop() gave last.
  const std::vector<unsigned> &neighbours(unsigned) const { return scope_; }
  void eliminate(unsigned) {}
  /// The whole order's eliminations, scope entries and table entries (the argmins the
  /// back-substitution keeps), to allocate them once; and its widest table (scope and
  /// variable).
  void sizes(const std::vector<unsigned> &domains, size_t &eliminations, size_t &scopes,
             uint64_t &entries, uint64_t &widest) const {
    eliminations = scopes = 0;
    entries = widest = 0;
    for (size_t at = 0; at < kept_.size(); at += 2 + kept_[at + 1]) {
      uint64_t size = 1;
      for (unsigned q = 0; q < kept_[at + 1]; ++q)
        size *= domains[kept_[at + 2 + q]];
      ++eliminations;
      scopes += kept_[at + 1];
      entries += size;
      widest = std::max(widest, size * domains[kept_[at]]);
    }
  }

private:
  const std::vector<unsigned> &kept_;
  size_t at_ = 0;
  std::vector<unsigned> scope_;
};

/// One elimination's inner work: for every assignment of the scope (row-major), the least
/// sum over v's values of the factors' entries, and which value gives it. `stride` holds per
/// factor its strides along the scope's variables and then v (row k at k * (ns + 1)); the
/// last scope variable is walked innermost. DV: v's domain when fixed at compile time (0:
/// `dv`).
struct Rows {
  uint64_t size;
  unsigned dv;
  size_t ns, nf;
  const unsigned *domains;
  const int64_t *stride;
  const int64_t *const *base;
  const int64_t *vStride;
  int64_t *out;
  uint16_t *argmin;

  /// Buffers reused from one elimination to the next.
  struct Scratch {
    std::vector<int64_t> off, innerStride, sums;
    std::vector<unsigned> digit;
  };

  /// False when the deadline passed (checked every 2^16 entries of `work`). NF: the
  /// number of factors when fixed at compile time (0: `nf`).
  template <unsigned DV, unsigned NF = 0>
  bool run(std::chrono::steady_clock::time_point deadline, uint64_t &work, Scratch &s) const {
    const unsigned d = DV ? DV : dv;
    const size_t nf = NF ? NF : this->nf;
    const size_t inner = ns ? domains[ns - 1] : 1;
    std::vector<int64_t> &off = s.off, &innerStride = s.innerStride;
    off.assign(nf, 0);
    innerStride.assign(nf, 0);
    for (size_t k = 0; k < nf && ns > 0; ++k)
      innerStride[k] = stride[k * (ns + 1) + ns - 1];
    std::vector<unsigned> &digit = s.digit;
    digit.assign(ns, 0);
    s.sums.resize(DV ? 0 : d);
    int64_t fixedSums[DV ? DV : 1];
    int64_t *sums = DV ? fixedSums : s.sums.data();
    for (uint64_t idx = 0; idx < size; idx += inner) {
      for (size_t j = 0; j < inner; ++j) {
        for (unsigned x = 0; x < d; ++x)
          sums[x] = 0;
        for (size_t k = 0; k < nf; ++k) {
          const int64_t *t = base[k] + off[k] + int64_t(j) * innerStride[k];
          const int64_t st = vStride[k];
          for (unsigned x = 0; x < d; ++x)
            sums[x] += t[x * st];
        }
        unsigned arg = 0;
        for (unsigned x = 1; x < d; ++x)
          if (sums[x] < sums[arg])
            arg = x;
        out[idx + j] = sums[arg];
        argmin[idx + j] = static_cast<uint16_t>(arg);
      }
      // The next row: the scope's other digits, last fastest.
      for (size_t p = ns >= 2 ? ns - 1 : 0; p-- > 0;) {
        ++digit[p];
        for (size_t k = 0; k < nf; ++k)
          off[k] += stride[k * (ns + 1) + p];
        if (digit[p] < domains[p])
          break;
        for (size_t k = 0; k < nf; ++k)
          off[k] -= int64_t(domains[p]) * stride[k * (ns + 1) + p];
        digit[p] = 0;
      }
      const uint64_t step = inner * d;
      if (((work += step) & 0xffff) < step && std::chrono::steady_clock::now() > deadline)
        return false;
    }
    return true;
  }
};

/// Rows::run with small domains and few factors unrolled.
template <unsigned DV>
bool runWithDomain(const Rows &rows, std::chrono::steady_clock::time_point deadline, uint64_t &work,
                   Rows::Scratch &scratch) {
  switch (rows.nf) {
  case 1:
    return rows.run<DV, 1>(deadline, work, scratch);
  case 2:
    return rows.run<DV, 2>(deadline, work, scratch);
  case 3:
    return rows.run<DV, 3>(deadline, work, scratch);
  case 4:
    return rows.run<DV, 4>(deadline, work, scratch);
  default:
    return rows.run<DV>(deadline, work, scratch);
  }
}

bool runRows(const Rows &rows, std::chrono::steady_clock::time_point deadline, uint64_t &work,
             Rows::Scratch &scratch) {
  switch (rows.dv) {
  case 2:
    return runWithDomain<2>(rows, deadline, work, scratch);
  case 3:
    return runWithDomain<3>(rows, deadline, work, scratch);
  case 4:
    return runWithDomain<4>(rows, deadline, work, scratch);
  case 5:
    return runWithDomain<5>(rows, deadline, work, scratch);
  case 6:
    return runWithDomain<6>(rows, deadline, work, scratch);
  case 7:
    return runWithDomain<7>(rows, deadline, work, scratch);
  case 8:
    return runWithDomain<8>(rows, deadline, work, scratch);
  default:
    return rows.run<0>(deadline, work, scratch);
  }
}

} // namespace

uint64_t MinSumProblem::eliminationWork(uint64_t stopAbove, uint64_t *largest) const {
  return eliminationWork({}, stopAbove, largest);
}

uint64_t MinSumProblem::eliminationWork(const std::vector<std::pair<unsigned, unsigned>> &scopes,
                                        uint64_t stopAbove, uint64_t *largest) const {
  std::vector<Factor> factors = factors_;
  for (const auto &[a, b] : scopes)
    factors.push_back({{std::min(a, b), std::max(a, b)}, 2, 0}); // the order reads scopes only
  EliminationOrder order(domains_, priority_, factors);
  uint64_t work = 0;
  while (!order.empty() && work <= stopAbove) {
    const unsigned v = order.pop();
    double entries = domains_[v];
    for (unsigned u : order.neighbours(v))
      entries *= domains_[u];
    work = entries + double(work) >= double(UINT64_MAX) ? UINT64_MAX : work + uint64_t(entries);
    if (largest)
      *largest = std::max(*largest, entries >= double(UINT64_MAX) ? UINT64_MAX : uint64_t(entries));
    order.eliminate(v);
  }
  return work;
}

const std::vector<unsigned> *
MinSumProblem::OrderCache::find(const std::vector<int64_t> &key) const {
  for (const auto &[k, order] : kept_)
    if (k == key)
      return &order;
  return nullptr;
}

void MinSumProblem::OrderCache::insert(std::vector<int64_t> key, std::vector<unsigned> order) {
  if (kept_.size() == kKept)
    kept_.pop_front();
  kept_.emplace_back(std::move(key), std::move(order));
}

std::vector<int64_t> MinSumProblem::structureKey() const {
  std::vector<int64_t> key;
  key.reserve(1 + 2 * domains_.size() + 3 * factors_.size());
  key.push_back(int64_t(domains_.size()));
  key.insert(key.end(), domains_.begin(), domains_.end());
  key.insert(key.end(), priority_.begin(), priority_.end());
  for (const Factor &f : factors_) {
    key.push_back(-int64_t(f.arity));
    key.insert(key.end(), f.vars, f.vars + f.arity);
  }
  return key;
}

llvm::Expected<MinSumProblem::Solution> MinSumProblem::solve(const Limits &limits,
                                                             OrderCache *orders) const {
  bool tooWide = false;
  auto exact = [&]() -> llvm::Expected<Solution> {
    if (!orders) {
      EliminationOrder order(domains_, priority_, factors_);
      return solveWith(limits, limits.maxTableEntries, false, &tooWide, order);
    }
    std::vector<int64_t> key = structureKey();
    if (const std::vector<unsigned> *kept = orders->find(key)) {
      ++orders->hits;
      Replay order(*kept);
      return solveWith(limits, limits.maxTableEntries, false, &tooWide, order);
    }
    ++orders->misses;
    EliminationOrder order(domains_, priority_, factors_);
    std::vector<unsigned> record;
    auto sol = solveWith(limits, limits.maxTableEntries, false, &tooWide, order, &record);
    if (sol)
      orders->insert(std::move(key), std::move(record));
    return sol;
  };
  auto sol = exact();
  if (sol || !tooWide || limits.conditionTableEntries == 0)
    return sol;
  llvm::consumeError(sol.takeError());
  EliminationOrder order(domains_, priority_, factors_);
  return solveWith(limits, limits.conditionTableEntries, true, &tooWide, order);
}

template <typename Order>
llvm::Expected<MinSumProblem::Solution>
MinSumProblem::solveWith(const Limits &limits, uint64_t tableLimit, bool condition, bool *tooWide,
                         Order &order, std::vector<unsigned> *record) const {
  const unsigned n = static_cast<unsigned>(domains_.size());
  // The problem's factors, then those the eliminations make (their scopes and tables in
  // this thread's pools, which keep them in place).
  thread_local Pool<unsigned> madeVars;
  thread_local Pool<int64_t> madeTables;
  madeVars.reset();
  madeTables.reset();
  std::vector<FactorView> factors;
  factors.reserve(factors_.size() * 2);
  for (size_t f = 0; f < factors_.size(); ++f) {
    const Factor &kept = factors_[f];
    size_t size = 1;
    for (unsigned k = 0; k < kept.arity; ++k)
      size *= domains_[kept.vars[k]];
    factors.push_back({kept.vars, kept.arity, tables_.data() + kept.tableAt, size});
  }
  std::vector<char> alive(factors.size(), 1);
  // Per variable, its factors (this thread's lists, kept with their capacity).
  thread_local std::vector<std::vector<unsigned>> ofVar;
  if (ofVar.size() < n)
    ofVar.resize(n);
  for (unsigned v = 0; v < n; ++v)
    ofVar[v].clear();
  for (unsigned f = 0; f < factors.size(); ++f)
    for (size_t k = 0; k < factors[f].arity; ++k)
      ofVar[factors[f].vars[k]].push_back(f);
  // A made factor over `vars` (ascending) whose table (madeTables) is already written.
  auto addFactor = [&](const std::vector<unsigned> &vars, const int64_t *table, size_t size) {
    const unsigned id = static_cast<unsigned>(factors.size());
    unsigned *own = madeVars.take(vars.size());
    std::copy(vars.begin(), vars.end(), own);
    factors.push_back({own, vars.size(), table, size});
    alive.push_back(1);
    for (unsigned w : vars)
      ofVar[w].push_back(id);
  };
  // Each elimination's variable, its scope (in scopes) and its best value per assignment of
  // the scope (in argmins), for the back-substitution.
  struct Elimination {
    unsigned var;
    size_t scopeAt, scopeSize, argminAt;
  };
  // This thread's, kept from one solve to the next (first touching fresh pages costs more
  // than the eliminations that fill them); those grown past kKeepArgmins are let go after.
  thread_local std::vector<Elimination> eliminations;
  thread_local std::vector<unsigned> scopes;
  thread_local std::vector<uint16_t> argmins;
  constexpr size_t kKeepArgmins = size_t(1) << 24;
  eliminations.clear();
  scopes.clear();
  argmins.clear();
  struct LetGo {
    ~LetGo() {
      if (argmins.capacity() > kKeepArgmins)
        std::vector<uint16_t>().swap(argmins);
    }
  } letGo;
  if constexpr (!Order::kConditions) { // a kept order knows its sizes: allocate once
    size_t e = 0, sc = 0;
    uint64_t entries = 0, widest = 0;
    order.sizes(domains_, e, sc, entries, widest);
    if (widest <= tableLimit) { // (else the solve fails at that table)
      eliminations.reserve(e);
      scopes.reserve(sc);
      argmins.reserve(entries);
    }
  }
  Solution sol;
  int64_t constant = constant_;
  uint64_t work = 0;
  // Per elimination, reused: its factors, their strides, the scope's domains.
  std::vector<unsigned> fs, scopeDomains;
  std::vector<int64_t> stride, vStride;
  std::vector<const int64_t *> base;
  Rows::Scratch scratch;
  while (!order.empty()) {
    const unsigned v = order.pop();
    const std::vector<unsigned> &scope = order.neighbours(v);
    fs.clear();
    for (unsigned f : ofVar[v])
      if (alive[f]) {
        fs.push_back(f);
        alive[f] = 0;
      }
    uint64_t size = 1;
    for (unsigned u : scope) {
      size *= domains_[u];
      if (size > tableLimit)
        break;
    }
    const unsigned dv = domains_[v];
    if (size * dv > tableLimit) {
      if (!condition || !Order::kConditions) {
        *tooWide = true;
        return stringError(fmt::format("the elimination needs a table over {} variables (more "
                                       "than {} entries): the graph is too wide for this search",
                                       scope.size() + 1, tableLimit));
      }
      if constexpr (Order::kConditions) { // (a Replay never gets here)
        // Condition: fix the scope's most connected variable u to the value whose factors'
        // best completions cost least, fold that value into u's factors, and try v again.
        for (unsigned f : fs)
          alive[f] = 1;
        unsigned u = scope[0];
        for (unsigned w : scope)
          if (order.neighbours(w).size() > order.neighbours(u).size())
            u = w;
        std::vector<unsigned> live;
        for (unsigned f : ofVar[u])
          if (alive[f])
            live.push_back(f);
        unsigned best = 0;
        int64_t bestCost = std::numeric_limits<int64_t>::max();
        for (unsigned x = 0; x < domains_[u]; ++x) {
          int64_t c = 0;
          for (unsigned f : live) {
            const std::vector<int64_t> t = sliceOf(factors[f], u, x, domains_).table;
            c += *std::min_element(t.begin(), t.end());
          }
          if (c < bestCost) {
            bestCost = c;
            best = x;
          }
        }
        for (unsigned f : live) {
          alive[f] = 0;
          MadeFactor sliced = sliceOf(factors[f], u, best, domains_);
          if (sliced.vars.empty()) {
            constant += sliced.table[0];
          } else {
            int64_t *table = madeTables.take(sliced.table.size());
            std::copy(sliced.table.begin(), sliced.table.end(), table);
            addFactor(sliced.vars, table, sliced.table.size());
          }
        }
        order.condition(u, v);
        eliminations.push_back({u, scopes.size(), 0, argmins.size()});
        argmins.push_back(static_cast<uint16_t>(best));
        ++sol.conditioned;
        continue;
      }
    }
    sol.largestTable = std::max(sol.largestTable, size * dv);
    if (record) {
      record->push_back(v);
      record->push_back(static_cast<unsigned>(scope.size()));
      record->insert(record->end(), scope.begin(), scope.end());
    }
    // Strides of every factor in the extended scope (scope..., v), row k at k * (ns + 1).
    const size_t ns = scope.size(), nf = fs.size();
    stride.assign(nf * (ns + 1), 0);
    base.resize(nf);
    vStride.resize(nf);
    for (size_t k = 0; k < nf; ++k) {
      const FactorView &f = factors[fs[k]];
      int64_t s = 1;
      for (size_t q = f.arity; q-- > 0;) {
        unsigned u = f.vars[q];
        size_t pos =
            u == v ? ns : size_t(std::lower_bound(scope.begin(), scope.end(), u) - scope.begin());
        stride[k * (ns + 1) + pos] = s;
        s *= domains_[u];
      }
      // The inner loops read flat arrays: each factor's table and its stride along v.
      base[k] = f.table;
      vStride[k] = stride[k * (ns + 1) + ns];
    }
    eliminations.push_back({v, scopes.size(), ns, argmins.size()});
    scopes.insert(scopes.end(), scope.begin(), scope.end());
    argmins.resize(argmins.size() + size);
    int64_t *out = madeTables.take(size);
    scopeDomains.clear();
    for (unsigned u : scope)
      scopeDomains.push_back(domains_[u]);
    Rows rows{size,
              dv,
              ns,
              nf,
              scopeDomains.data(),
              stride.data(),
              base.data(),
              vStride.data(),
              out,
              argmins.data() + eliminations.back().argminAt};
    const bool inTime = runRows(rows, limits.deadline, work, scratch);
    if (!inTime)
      return stringError("the search ran out of its time budget");
    if (ns == 0)
      constant += out[0];
    else
      addFactor(scope, out, size);
    order.eliminate(v);
  }
  sol.values.assign(n, 0);
  for (size_t e = eliminations.size(); e-- > 0;) {
    const Elimination &el = eliminations[e];
    size_t at = 0;
    for (size_t q = 0; q < el.scopeSize; ++q) {
      const unsigned u = scopes[el.scopeAt + q];
      at = at * domains_[u] + sol.values[u];
    }
    sol.values[el.var] = argmins[el.argminAt + at];
  }
  sol.cost = constant;
  if (sol.conditioned > 0) {
    // Coordinate descent over the original factors: each variable in turn takes its best
    // value given the others, until a pass changes nothing (the cost never rises).
    std::vector<std::vector<unsigned>> mine(n);
    for (unsigned f = 0; f < factors_.size(); ++f)
      for (unsigned k = 0; k < factors_[f].arity; ++k)
        mine[factors_[f].vars[k]].push_back(f);
    for (int pass = 0; pass < 50; ++pass) {
      bool changed = false;
      for (unsigned w = 0; w < n; ++w) {
        unsigned keep = sol.values[w], bestX = keep;
        int64_t bestCost = std::numeric_limits<int64_t>::max();
        for (unsigned x = 0; x < domains_[w]; ++x) {
          sol.values[w] = x;
          int64_t c = 0;
          for (unsigned f : mine[w]) {
            const Factor &kept = factors_[f];
            size_t off = 0;
            for (unsigned k = 0; k < kept.arity; ++k)
              off = off * domains_[kept.vars[k]] + sol.values[kept.vars[k]];
            c += tables_[kept.tableAt + off];
          }
          if (c < bestCost || (c == bestCost && x == keep)) {
            bestCost = c;
            bestX = x;
          }
        }
        sol.values[w] = bestX;
        changed |= bestX != keep;
      }
      if (!changed)
        break;
    }
    sol.cost = evaluate(sol.values);
  }
  return sol;
}

} // namespace tofu
