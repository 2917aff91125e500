// Exact minimisation of a sum of small cost tables over discrete variables by variable
// elimination (bucket elimination): the DP that the search runs at every recursion step.
// On a chain this is the paper's DP over the coarsened graph, its state the boundary
// configurations; on any other graph it is still exact, at a cost exponential in the
// induced width of the elimination order (chosen greedily: smallest new table first).
#ifndef TOFU_SEARCH_MINSUM_H
#define TOFU_SEARCH_MINSUM_H

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "llvm/Support/Error.h"

namespace tofu {

class MinSumProblem {
public:
  /// A variable with values 0..domain-1 (domain >= 1, < 65536). Lower `priority` is
  /// eliminated first among equally cheap choices (the coarsened graph's order).
  unsigned addVariable(unsigned domain, int64_t priority = 0);
  unsigned domain(unsigned v) const { return domains_[v]; }
  size_t variables() const { return domains_.size(); }

  /// Adds `costs[x]` to the cost of `v = x`.
  void addUnary(unsigned v, const std::vector<int64_t> &costs) { addUnary(v, costs.data()); }
  /// The same from `domain(v)` values in place.
  void addUnary(unsigned v, const int64_t *costs);
  /// Adds `table[xa * domain(b) + xb]` to the cost of `a = xa, b = xb` (a != b).
  void addPairwise(unsigned a, unsigned b, const std::vector<int64_t> &table) {
    addPairwise(a, b, table.data());
  }
  /// The same from `domain(a) * domain(b)` values in place.
  void addPairwise(unsigned a, unsigned b, const int64_t *table);
  /// Takes `tables` as the pool of its factors' tables, instead of copying each table in
  /// (only before any other factor is added); addUnaryAt and addPairwiseAt then say where
  /// in it each factor's table lies.
  void adoptTables(std::vector<int64_t> tables);
  /// A unary factor whose `domain(v)` costs lie at `at` in the adopted pool.
  void addUnaryAt(unsigned v, size_t at);
  /// A pairwise factor (a < b) whose table, row-major over (a, b), lies at `at`.
  void addPairwiseAt(unsigned a, unsigned b, size_t at);
  /// Adds a constant.
  void addConstant(int64_t c) { constant_ += c; }

  struct Limits {
    uint64_t maxTableEntries = uint64_t(1) << 24;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    /// When an elimination would exceed maxTableEntries: 0 fails; otherwise the problem is
    /// solved again with tables of at most this many entries, fixing the most connected
    /// variable of a too-wide scope to its locally best value (conditioning) until the
    /// table fits, then improving the assignment by coordinate descent. That solution is
    /// valid but not proven optimal (Solution::conditioned counts the fixed variables).
    uint64_t conditionTableEntries = 0;
  };
  struct Solution {
    std::vector<unsigned> values;
    int64_t cost = 0;
    uint64_t largestTable = 0; ///< entries of the largest table the elimination built
    unsigned conditioned = 0;  ///< variables fixed heuristically (0: the optimum)
  };
  /// Elimination orders kept for problems of the same structure (the same domains,
  /// priorities and factor scopes, in the same order): the greedy order depends on nothing
  /// else, so a problem solved again with other costs (a recursion step solved again after
  /// another step changed) replays it instead of choosing it again. Holds the last few
  /// structures. An order is kept as its eliminations one after the other: the variable,
  /// the size of its scope, the scope (ascending).
  class OrderCache {
  public:
    /// The order of `key`'s structure, or null.
    const std::vector<unsigned> *find(const std::vector<int64_t> &key) const;
    void insert(std::vector<int64_t> key, std::vector<unsigned> order);
    /// Solves that replayed a kept order, and solves that chose one.
    uint64_t hits = 0, misses = 0;

  private:
    static constexpr size_t kKept = 8;
    std::deque<std::pair<std::vector<int64_t>, std::vector<unsigned>>> kept_;
  };

  /// The assignment of least total cost (ties: the first found, deterministic). Fails when
  /// the deadline passes, or when a table would exceed the limit (unless the limits allow
  /// conditioning). With `orders`, an exact solve replays a kept order of this structure
  /// (the same result as choosing it again) and keeps the one it chose.
  llvm::Expected<Solution> solve(const Limits &limits, OrderCache *orders = nullptr) const;
  llvm::Expected<Solution> solve() const { return solve(Limits()); }

  /// What solve() would cost without conditioning: the sum over its eliminations of the
  /// entries it visits (table entries times the eliminated variable's domain), from the
  /// scopes alone (the tables' values are not read). Stops counting past `stopAbove`.
  /// `largest`, when given, receives the entries of the largest table it would build.
  uint64_t eliminationWork(uint64_t stopAbove = UINT64_MAX, uint64_t *largest = nullptr) const;
  /// The same as if a pairwise factor over each pair of `scopes` had been added too (no
  /// table is built: what a problem would cost, before its tables are computed).
  uint64_t eliminationWork(const std::vector<std::pair<unsigned, unsigned>> &scopes,
                           uint64_t stopAbove = UINT64_MAX, uint64_t *largest = nullptr) const;

  /// The total cost of an assignment.
  int64_t evaluate(const std::vector<unsigned> &values) const;

  /// A factor as kept: one or two variables (ascending) and where its table lies in
  /// tables_ (row-major over the variables).
  struct Factor {
    unsigned vars[2];
    unsigned arity;
    size_t tableAt;
  };

private:
  /// Variable elimination with tables of at most `tableLimit` entries; a wider table
  /// conditions when `condition` is set, else fails with `*tooWide` set. `order` gives the
  /// variables to eliminate (EliminationOrder, or a replay of a kept one); `record`, when
  /// given, receives the eliminations as OrderCache keeps them.
  template <typename Order>
  llvm::Expected<Solution> solveWith(const Limits &limits, uint64_t tableLimit, bool condition,
                                     bool *tooWide, Order &order,
                                     std::vector<unsigned> *record = nullptr) const;
  /// The key OrderCache keeps this problem's structure under.
  std::vector<int64_t> structureKey() const;
  std::vector<unsigned> domains_;
  std::vector<int64_t> priority_;
  std::vector<Factor> factors_;
  std::vector<int64_t> tables_; ///< every factor's table, one after the other
  int64_t constant_ = 0;
};

} // namespace tofu

#endif // TOFU_SEARCH_MINSUM_H
