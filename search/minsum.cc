// Variable elimination for min-sum problems.
#include "search/minsum.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

unsigned MinSumProblem::addVariable(unsigned domain, int64_t priority) {
  domains_.push_back(std::max(1u, domain));
  priority_.push_back(priority);
  return static_cast<unsigned>(domains_.size() - 1);
}

void MinSumProblem::addUnary(unsigned v, const std::vector<int64_t> &costs) {
  factors_.push_back({{v}, costs});
}

void MinSumProblem::addPairwise(unsigned a, unsigned b, const std::vector<int64_t> &table) {
  if (a < b) {
    factors_.push_back({{a, b}, table});
    return;
  }
  unsigned da = domains_[a], db = domains_[b];
  std::vector<int64_t> t(table.size());
  for (unsigned xa = 0; xa < da; ++xa)
    for (unsigned xb = 0; xb < db; ++xb)
      t[xb * da + xa] = table[xa * db + xb];
  factors_.push_back({{b, a}, std::move(t)});
}

int64_t MinSumProblem::evaluate(const std::vector<unsigned> &values) const {
  int64_t total = constant_;
  for (const Factor &f : factors_) {
    size_t off = 0;
    for (unsigned v : f.vars)
      off = off * domains_[v] + values[v];
    total += f.table[off];
  }
  return total;
}

/// Factor `f` with variable `u` fixed to `x`: its other variables and their table.
static std::pair<std::vector<unsigned>, std::vector<int64_t>>
sliceOf(const MinSumProblem::Factor &f, unsigned u, unsigned x, const std::vector<unsigned> &domains) {
  std::vector<unsigned> vars;
  size_t pos = 0;
  for (size_t k = 0; k < f.vars.size(); ++k) {
    if (f.vars[k] == u)
      pos = k;
    else
      vars.push_back(f.vars[k]);
  }
  int64_t inner = 1; // the stride of u
  for (size_t k = pos + 1; k < f.vars.size(); ++k)
    inner *= domains[f.vars[k]];
  const int64_t du = domains[u], total = int64_t(f.table.size());
  std::vector<int64_t> table;
  table.reserve(size_t(total / du));
  for (int64_t outer = 0; outer < total; outer += inner * du)
    for (int64_t i = 0; i < inner; ++i)
      table.push_back(f.table[size_t(outer + x * inner + i)]);
  return {std::move(vars), std::move(table)};
}

namespace {

/// The greedy elimination order solveWith and eliminationWork share: the variable whose
/// table (its domain times its neighbours') is smallest first, ties by priority, over the
/// interaction graph the eliminations change.
class EliminationOrder {
public:
  EliminationOrder(const std::vector<unsigned> &domains, const std::vector<int64_t> &priority,
                   const std::vector<MinSumProblem::Factor> &factors)
      : domains_(domains), priority_(priority), adj_(domains.size()), key_(domains.size()) {
    for (const MinSumProblem::Factor &f : factors)
      for (unsigned v : f.vars)
        for (unsigned u : f.vars)
          if (u != v)
            adj_[v].insert(u);
    for (unsigned v = 0; v < domains.size(); ++v) {
      key_[v] = weight(v);
      queue_.insert({key_[v], priority_[v], v});
    }
  }
  bool empty() const { return queue_.empty(); }
  /// Takes the next variable out of the queue.
  unsigned pop() {
    const unsigned v = std::get<2>(*queue_.begin());
    queue_.erase(queue_.begin());
    return v;
  }
  const std::set<unsigned> &neighbours(unsigned v) const { return adj_[v]; }
  /// v eliminated: its neighbours lose it and become a clique.
  void eliminate(unsigned v) {
    const std::set<unsigned> scope = std::move(adj_[v]);
    adj_[v].clear();
    for (unsigned u : scope) {
      adj_[u].erase(v);
      for (unsigned w : scope)
        if (w != u)
          adj_[u].insert(w);
    }
    for (unsigned u : scope)
      reweigh(u);
  }
  /// u fixed by conditioning while eliminating v: u leaves the graph, and v goes back into
  /// the queue.
  void condition(unsigned u, unsigned v) {
    std::set<unsigned> touched = std::move(adj_[u]);
    adj_[u].clear();
    for (unsigned w : touched)
      adj_[w].erase(u);
    queue_.erase({key_[u], priority_[u], u});
    touched.insert(v);
    touched.erase(u);
    for (unsigned w : touched)
      reweigh(w);
  }

private:
  double weight(unsigned v) const {
    double w = std::log2(double(domains_[v]));
    for (unsigned u : adj_[v])
      w += std::log2(double(domains_[u]));
    return w;
  }
  void reweigh(unsigned v) {
    queue_.erase({key_[v], priority_[v], v});
    key_[v] = weight(v);
    queue_.insert({key_[v], priority_[v], v});
  }
  const std::vector<unsigned> &domains_;
  const std::vector<int64_t> &priority_;
  std::vector<std::set<unsigned>> adj_;
  std::vector<double> key_;
  std::set<std::tuple<double, int64_t, unsigned>> queue_;
};

} // namespace

uint64_t MinSumProblem::eliminationWork(uint64_t stopAbove, uint64_t *largest) const {
  EliminationOrder order(domains_, priority_, factors_);
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

llvm::Expected<MinSumProblem::Solution> MinSumProblem::solve(const Limits &limits) const {
  bool tooWide = false;
  auto sol = solveWith(limits, limits.maxTableEntries, false, &tooWide);
  if (sol || !tooWide || limits.conditionTableEntries == 0)
    return sol;
  llvm::consumeError(sol.takeError());
  return solveWith(limits, limits.conditionTableEntries, true, &tooWide);
}

llvm::Expected<MinSumProblem::Solution>
MinSumProblem::solveWith(const Limits &limits, uint64_t tableLimit, bool condition,
                         bool *tooWide) const {
  const unsigned n = static_cast<unsigned>(domains_.size());
  std::vector<Factor> factors = factors_;
  std::vector<bool> alive(factors.size(), true);
  std::vector<std::vector<unsigned>> ofVar(n);
  for (unsigned f = 0; f < factors.size(); ++f)
    for (unsigned v : factors[f].vars)
      ofVar[v].push_back(f);
  EliminationOrder order(domains_, priority_, factors_);
  struct Elimination {
    unsigned var;
    std::vector<unsigned> scope;
    std::vector<uint16_t> argmin;
  };
  std::vector<Elimination> eliminations;
  Solution sol;
  int64_t constant = constant_;
  uint64_t work = 0;
  while (!order.empty()) {
    const unsigned v = order.pop();
    std::vector<unsigned> scope(order.neighbours(v).begin(), order.neighbours(v).end());
    std::vector<unsigned> fs;
    for (unsigned f : ofVar[v])
      if (alive[f]) {
        fs.push_back(f);
        alive[f] = false;
      }
    uint64_t size = 1;
    for (unsigned u : scope) {
      size *= domains_[u];
      if (size > tableLimit)
        break;
    }
    const unsigned dv = domains_[v];
    if (size * dv > tableLimit) {
      if (!condition) {
        *tooWide = true;
        return stringError(fmt::format("the elimination needs a table over {} variables (more "
                                       "than {} entries): the graph is too wide for this search",
                                       scope.size() + 1, tableLimit));
      }
      // Condition: fix the scope's most connected variable u to the value whose factors'
      // best completions cost least, fold that value into u's factors, and try v again.
      for (unsigned f : fs)
        alive[f] = true;
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
          std::vector<int64_t> t = sliceOf(factors[f], u, x, domains_).second;
          c += *std::min_element(t.begin(), t.end());
        }
        if (c < bestCost) {
          bestCost = c;
          best = x;
        }
      }
      for (unsigned f : live) {
        alive[f] = false;
        auto [vars, table] = sliceOf(factors[f], u, best, domains_);
        if (vars.empty()) {
          constant += table[0];
          continue;
        }
        unsigned id = static_cast<unsigned>(factors.size());
        factors.push_back({vars, std::move(table)});
        alive.push_back(true);
        for (unsigned w : vars)
          ofVar[w].push_back(id);
      }
      order.condition(u, v);
      eliminations.push_back({u, {}, {static_cast<uint16_t>(best)}});
      ++sol.conditioned;
      continue;
    }
    sol.largestTable = std::max(sol.largestTable, size * dv);
    // Strides of every factor in the extended scope (scope..., v).
    const size_t ns = scope.size();
    std::vector<std::vector<int64_t>> stride(fs.size(), std::vector<int64_t>(ns + 1, 0));
    for (size_t k = 0; k < fs.size(); ++k) {
      const Factor &f = factors[fs[k]];
      int64_t s = 1;
      for (size_t q = f.vars.size(); q-- > 0;) {
        unsigned u = f.vars[q];
        size_t pos = u == v ? ns : size_t(std::lower_bound(scope.begin(), scope.end(), u) - scope.begin());
        stride[k][pos] = s;
        s *= domains_[u];
      }
    }
    Elimination el{v, scope, std::vector<uint16_t>(size)};
    Factor out{scope, std::vector<int64_t>(size)};
    std::vector<int64_t> off(fs.size(), 0);
    std::vector<unsigned> digit(ns, 0);
    // The inner loops read flat arrays: each factor's table and its stride along v.
    std::vector<const int64_t *> base(fs.size());
    std::vector<int64_t> vStride(fs.size());
    for (size_t k = 0; k < fs.size(); ++k) {
      base[k] = factors[fs[k]].table.data();
      vStride[k] = stride[k][ns];
    }
    std::vector<int64_t> sums(dv);
    for (uint64_t idx = 0; idx < size; ++idx) {
      std::fill(sums.begin(), sums.end(), 0);
      for (size_t k = 0; k < fs.size(); ++k) {
        const int64_t *t = base[k] + off[k];
        const int64_t st = vStride[k];
        for (unsigned x = 0; x < dv; ++x)
          sums[x] += t[x * st];
      }
      unsigned arg = 0;
      for (unsigned x = 1; x < dv; ++x)
        if (sums[x] < sums[arg])
          arg = x;
      out.table[idx] = sums[arg];
      el.argmin[idx] = static_cast<uint16_t>(arg);
      for (size_t p = ns; p-- > 0;) {
        ++digit[p];
        for (size_t k = 0; k < fs.size(); ++k)
          off[k] += stride[k][p];
        if (digit[p] < domains_[scope[p]])
          break;
        for (size_t k = 0; k < fs.size(); ++k)
          off[k] -= int64_t(domains_[scope[p]]) * stride[k][p];
        digit[p] = 0;
      }
      if (((work += dv) & 0xffff) < dv && std::chrono::steady_clock::now() > limits.deadline)
        return stringError("the search ran out of its time budget");
    }
    if (scope.empty()) {
      constant += out.table[0];
    } else {
      unsigned id = static_cast<unsigned>(factors.size());
      factors.push_back(std::move(out));
      alive.push_back(true);
      for (unsigned u : scope)
        ofVar[u].push_back(id);
    }
    order.eliminate(v);
    eliminations.push_back(std::move(el));
  }
  sol.values.assign(n, 0);
  for (size_t e = eliminations.size(); e-- > 0;) {
    const Elimination &el = eliminations[e];
    size_t off = 0;
    for (unsigned u : el.scope)
      off = off * domains_[u] + sol.values[u];
    sol.values[el.var] = el.argmin[off];
  }
  sol.cost = constant;
  if (sol.conditioned > 0) {
    // Coordinate descent over the original factors: each variable in turn takes its best
    // value given the others, until a pass changes nothing (the cost never rises).
    std::vector<std::vector<unsigned>> mine(n);
    for (unsigned f = 0; f < factors_.size(); ++f)
      for (unsigned w : factors_[f].vars)
        mine[w].push_back(f);
    for (int pass = 0; pass < 50; ++pass) {
      bool changed = false;
      for (unsigned w = 0; w < n; ++w) {
        unsigned keep = sol.values[w], bestX = keep;
        int64_t bestCost = std::numeric_limits<int64_t>::max();
        for (unsigned x = 0; x < domains_[w]; ++x) {
          sol.values[w] = x;
          int64_t c = 0;
          for (unsigned f : mine[w]) {
            size_t off = 0;
            for (unsigned q : factors_[f].vars)
              off = off * domains_[q] + sol.values[q];
            c += factors_[f].table[off];
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
