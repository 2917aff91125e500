// The communication cost model over a partitioning problem (paper section 5 and its
// appendix): per-worker bytes and messages from the analysis' regions, the search's step
// terms, and the sum over every worker as a sum-product.
#include "search/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {
namespace {

int64_t elementsWith(const Box &b, int d, Range r) {
  int64_t n = 1;
  for (size_t k = 0; k < b.size(); ++k)
    n *= int(k) == d ? r.size() : b[k].size();
  return n;
}

Range overlapOf(Range a, Range b) {
  Range r{std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
  if (r.hi < r.lo)
    r.hi = r.lo;
  return r;
}

/// The boundaries of the nonempty cells of [0, extent) cut into `parts[0]` parts, each of
/// those into `parts[1]`, and so on (a tensor's tiles along one dimension, or the ranges a
/// variable is computed in): every cell's start, in order, then `extent`.
std::vector<int64_t> cellBounds(int64_t extent, const std::vector<unsigned> &parts) {
  std::vector<Range> cells{{0, extent}}, next;
  for (unsigned p : parts) {
    next.clear();
    for (const Range &c : cells)
      for (unsigned w = 0; w < p; ++w)
        if (Range r = subRange(c, p, w); r.size() > 0)
          next.push_back(r);
    cells.swap(next);
  }
  std::vector<int64_t> out;
  for (const Range &c : cells)
    if (c.size() > 0)
      out.push_back(c.lo);
  out.push_back(extent);
  return out;
}

/// How many cells of `bounds` (cellBounds) range `r` overlaps.
int64_t cellsOver(const std::vector<int64_t> &bounds, Range r) {
  r.lo = std::max<int64_t>(r.lo, 0);
  r.hi = std::min(r.hi, bounds.back());
  if (r.hi <= r.lo || bounds.size() < 2)
    return 0;
  auto cellOf = [&](int64_t x) {
    return std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin() - 1;
  };
  return cellOf(r.hi - 1) - cellOf(r.lo) + 1;
}

} // namespace

namespace {

/// The parts of the steps that cut dimension `d` of tensor `t`, in order.
std::vector<unsigned> tensorCuts(unsigned t, size_t d, const std::vector<StepChoice> &steps) {
  std::vector<unsigned> out;
  for (const StepChoice &s : steps)
    if (s.tensor[t] == int(d))
      out.push_back(s.parts);
  return out;
}

/// The parts of the steps that split variable `v` of node `n`, in order.
std::vector<unsigned> varCuts(const Problem &p, unsigned n, unsigned v,
                              const std::vector<StepChoice> &steps) {
  std::vector<unsigned> out;
  for (const StepChoice &s : steps)
    if (p.splitVar(n, s.node[n]) == int(v))
      out.push_back(s.parts);
  return out;
}

} // namespace

int64_t CostModel::workerNodeBytes(unsigned node, const std::vector<StepChoice> &steps,
                                   const std::vector<unsigned> &coords, size_t cut,
                                   int64_t *messages) const {
  const ProblemNode &n = p_.nodes[node];
  cut = std::min(cut, steps.size());
  std::vector<Range> ranges = p_.nodeRanges(node, steps, coords);
  std::vector<Range> unitRanges = p_.nodeRanges(node, steps, coords, cut);
  std::vector<Box> regions = inputRegions(n.table->op, *n.reads, n.shapes, ranges);
  int64_t bytes = 0, fetches = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (repeatedRead(n.inputs, regions, i) >= 0)
      continue;
    const ProblemTensor &t = p_.tensors[n.inputs[i]];
    Box unit = p_.tensorTile(n.inputs[i], steps, coords, cut);
    bytes += (boxElements(regions[i]) - intersectionElements(regions[i], unit)) * t.elementBytes;
    if (messages) {
      int64_t all = 1, inside = 1;
      for (size_t d = 0; d < unit.size(); ++d) {
        const std::vector<int64_t> grid = cellBounds(t.shape[d], tensorCuts(n.inputs[i], d, steps));
        all *= cellsOver(grid, regions[i][d]);
        inside *= cellsOver(grid, overlapOf(regions[i][d], unit[d]));
      }
      fetches += all - inside;
    }
  }
  auto nonempty = [](const std::vector<Range> &rs) {
    bool all = true;
    for (const Range &r : rs)
      all &= r.size() > 0;
    return all;
  };
  const bool computes = nonempty(unitRanges);
  Box produced;
  for (unsigned v : n.table->op.outputVars)
    produced.push_back(computes ? unitRanges[v] : Range{0, 0});
  const ProblemTensor &out = p_.tensors[n.output];
  Box owned = p_.tensorTile(n.output, steps, coords);
  const int64_t rho = p_.partials(node, steps), inner = p_.partials(node, steps, cut);
  const int64_t have = computes ? intersectionElements(owned, produced) : 0; // (a scalar too)
  bytes += (rho * boxElements(owned) - inner * have) * out.resultBytes(rho > 1);
  if (messages) {
    int64_t all = 1, inside = computes;
    for (size_t d = 0; d < owned.size(); ++d) {
      const std::vector<int64_t> grid =
          cellBounds(n.shapes.vars[n.table->op.outputVars[d]],
                     varCuts(p_, node, n.table->op.outputVars[d], steps));
      all *= cellsOver(grid, owned[d]);
      inside *= cellsOver(grid, overlapOf(owned[d], produced[d]));
    }
    fetches += rho * all - inner * inside;
    *messages += fetches;
  }
  return bytes;
}

namespace {

/// The weight of the units of the first j + 1 steps among the first m steps of a plan: its
/// own, and for the last of them those of the steps to come (they cut finer: their bytes
/// are counted there for now).
double prefixWeight(const std::vector<double> &weights, size_t j, size_t m) {
  double w = j < weights.size() ? weights[j] : 0;
  if (j + 1 == m)
    for (size_t q = j + 1; q < weights.size(); ++q)
      w += weights[q];
  return w;
}

} // namespace

std::vector<std::vector<int64_t>> CostModel::stepTerms(unsigned node,
                                                       const std::vector<StepChoice> &steps,
                                                       size_t i, unsigned parts, int s,
                                                       const std::vector<std::vector<int>> &configs,
                                                       const PrefixWeights &weights) const {
  if (weights.empty())
    return terms(node, steps, i, parts, s, configs, false);
  const size_t m = std::max(steps.size(), i + 1);
  std::vector<std::vector<double>> sum(configs.size());
  for (size_t k = 0; k < configs.size(); ++k)
    sum[k].assign(configs[k].size(), 0);
  std::vector<std::vector<int64_t>> messages;
  for (size_t j = 0; j < m; ++j) {
    const double wb = prefixWeight(weights.bytes, j, m);
    const double wm = prefixWeight(weights.messages, j, m);
    if (wb == 0 && wm == 0)
      continue;
    const auto t =
        terms(node, steps, i, parts, s, configs, false, j + 1, wm != 0 ? &messages : nullptr);
    for (size_t k = 0; k < configs.size(); ++k)
      for (size_t c = 0; c < configs[k].size(); ++c)
        sum[k][c] += wb * double(t[k][c]) + (wm != 0 ? wm * double(messages[k][c]) : 0);
  }
  std::vector<std::vector<int64_t>> out(configs.size());
  for (size_t k = 0; k < configs.size(); ++k)
    for (double v : sum[k])
      out[k].push_back(std::llround(v));
  return out;
}

int64_t CostModel::levelCost(const std::vector<StepChoice> &steps, size_t cut,
                             int64_t *messages) const {
  if (messages)
    *messages = 0;
  int64_t total = 0;
  if (steps.empty())
    return 0;
  for (unsigned n = 0; n < p_.nodes.size(); ++n)
    total += nodeCostEveryWorker(n, steps, cut, messages);
  return total;
}

int64_t CostModel::weightedCost(const std::vector<StepChoice> &steps,
                                const PrefixWeights &weights) const {
  if (weights.empty())
    return modelCost(steps);
  double total = 0;
  for (size_t j = 0; j < steps.size(); ++j) {
    const double wb = prefixWeight(weights.bytes, j, steps.size());
    const double wm = prefixWeight(weights.messages, j, steps.size());
    if (wb == 0 && wm == 0)
      continue;
    int64_t messages = 0;
    const int64_t bytes = levelCost(steps, j + 1, wm != 0 ? &messages : nullptr);
    total += wb * double(bytes) + wm * double(messages);
  }
  return std::llround(total);
}

std::vector<std::vector<int64_t>>
CostModel::stepBuffers(unsigned node, const std::vector<StepChoice> &steps, size_t i,
                       unsigned parts, int s, const std::vector<std::vector<int>> &configs) const {
  return terms(node, steps, i, parts, s, configs, true);
}

std::vector<std::vector<int64_t>>
CostModel::terms(unsigned node, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
                 int s, const std::vector<std::vector<int>> &configs, bool buffers, size_t cut,
                 std::vector<std::vector<int64_t>> *messages) const {
  const ProblemNode &n = p_.nodes[node];
  const size_t m = std::max(steps.size(), i + 1);
  cut = buffers ? m : std::min(cut, m); // the steps that cut the units' tiles
  const bool units = cut < m;           // else the last step is one of them: a worker's own
  auto partsAt = [&](size_t l) { return l == i ? parts : steps[l].parts; };
  auto choiceAt = [&](size_t l) { return l == i ? s : steps[l].node[node]; };
  std::vector<unsigned> earlier;
  int64_t mult = 1, rho = 1, inner = 1; // inner: the partials computed inside one unit
  for (size_t l = 0; l + 1 < m; ++l) {
    earlier.push_back(partsAt(l));
    mult *= partsAt(l);
  }
  const bool exact = mult <= kExactGroups && !buffers; // buffers: worker 0's only
  for (size_t l = 0; l < m; ++l)
    if (p_.isReduction(node, choiceAt(l))) {
      rho *= partsAt(l);
      if (l >= cut)
        inner *= partsAt(l);
    }
  const size_t slots = n.inputs.size() + 1;
  auto slotTensor = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : n.output; };
  std::vector<std::vector<int64_t>> out(slots);
  for (size_t k = 0; k < slots; ++k)
    out[k].assign(configs[k].size(), 0);
  if (messages) {
    messages->resize(slots);
    for (size_t k = 0; k < slots; ++k)
      (*messages)[k].assign(configs[k].size(), 0);
  }
  const unsigned lastParts = partsAt(m - 1);
  // Buffers reused from one call to the next (the search calls this many times).
  struct Scratch {
    std::vector<Range> base, ranges, unit; // unit: the ranges a worker's unit computes
    std::vector<std::vector<std::pair<Box, int>>> tiles; // per slot and configuration
    std::vector<Box> regions;
    Box produced;
    // For messages: per slot, configuration and dimension, the cells of the tiles (inputs;
    // the output's: of the ranges its elements are computed in).
    std::vector<std::vector<std::vector<std::vector<int64_t>>>> cells;
  };
  thread_local Scratch scratch;
  std::vector<Range> &base = scratch.base, &ranges = scratch.ranges;
  std::vector<std::vector<std::pair<Box, int>>> &tiles = scratch.tiles;
  std::vector<Box> &regions = scratch.regions;
  Box &produced = scratch.produced;
  if (tiles.size() < slots)
    tiles.resize(slots);
  if (messages) {
    auto &cells = scratch.cells;
    cells.resize(slots);
    std::vector<unsigned> cuts;
    for (size_t k = 0; k < slots; ++k) {
      const unsigned t = slotTensor(k);
      const bool output = k + 1 == slots;
      cells[k].resize(configs[k].size());
      for (size_t c = 0; c < configs[k].size(); ++c) {
        cells[k][c].resize(p_.tensors[t].shape.size());
        for (size_t d = 0; d < p_.tensors[t].shape.size(); ++d) {
          cuts.clear();
          for (size_t l = 0; l < m; ++l) {
            if (output ? p_.splitVar(node, choiceAt(l)) == int(n.table->op.outputVars[d])
                       : (l == i ? configs[k][c] : steps[l].tensor[t]) == int(d))
              cuts.push_back(partsAt(l));
          }
          cells[k][c][d] = cellBounds(
              output ? n.shapes.vars[n.table->op.outputVars[d]] : p_.tensors[t].shape[d], cuts);
        }
      }
    }
  }
  for (int64_t g = 0; g < (exact ? mult : 1); ++g) {
    // The earlier steps' coordinates of this group (exact: every group; else group 0).
    const std::vector<unsigned> coords = workerCoords(static_cast<unsigned>(g), earlier);
    base.clear();
    for (int64_t e : n.shapes.vars)
      base.push_back({0, e});
    if (units)
      scratch.unit = base;
    int lastVar = -1;
    for (size_t l = 0; l < m; ++l) {
      int v = p_.splitVar(node, choiceAt(l));
      if (l + 1 == m) {
        lastVar = v;
      } else if (v >= 0) {
        base[v] = subRange(base[v], partsAt(l), coords[l]);
        if (units && l < cut)
          scratch.unit[v] = subRange(scratch.unit[v], partsAt(l), coords[l]);
      }
    }
    // With units, the unit's ranges and whether it computes are the group's (the last
    // step does not cut them).
    bool unitComputes = true;
    if (units)
      for (const Range &r : scratch.unit)
        unitComputes &= r.size() > 0;
    for (size_t k = 0; k < slots; ++k) {
      // The inputs' tiles are their units' (cut by the first `cut` steps); the output's,
      // the worker's own.
      const bool output = k + 1 == slots;
      tiles[k].resize(configs[k].size());
      for (size_t c = 0; c < configs[k].size(); ++c) {
        unsigned t = slotTensor(k);
        Box &box = tiles[k][c].first;
        box.clear();
        for (int64_t e : p_.tensors[t].shape)
          box.push_back({0, e});
        int last = -1;
        for (size_t l = 0; l < m; ++l) {
          int d = l == i ? configs[k][c] : steps[l].tensor[t];
          if (l + 1 == m)
            last = output || !units ? d : -1;
          else if (d >= 0 && (output || l < cut))
            box[d] = subRange(box[d], partsAt(l), coords[l]);
        }
        tiles[k][c].second = last;
      }
    }
    const int64_t weight = exact || buffers ? 1 : mult;
    for (unsigned j = 0; j < (buffers ? 1u : lastParts); ++j) {
      ranges = base;
      if (lastVar >= 0)
        ranges[lastVar] = subRange(base[lastVar], lastParts, j);
      inputRegions(n.table->op, *n.reads, n.shapes, ranges, regions);
      bool computes = true;
      for (const Range &r : ranges)
        computes &= r.size() > 0;
      if (!units)
        unitComputes = computes;
      const std::vector<Range> &unit = units ? scratch.unit : ranges;
      produced.clear();
      for (unsigned var : n.table->op.outputVars)
        produced.push_back(unitComputes ? unit[var] : Range{0, 0});
      for (size_t k = 0; k < slots; ++k) {
        bool output = k == n.inputs.size();
        unsigned t = slotTensor(k);
        if (!output && repeatedRead(n.inputs, regions, k) >= 0)
          continue;
        for (size_t c = 0; c < configs[k].size(); ++c) {
          const Box &tile = tiles[k][c].first;
          int d = tiles[k][c].second;
          Range r = d >= 0 ? subRange(tile[d], lastParts, j) : Range{};
          int64_t elems =
              output ? rho * elementsWith(tile, d, r) -
                           (unitComputes ? inner * intersectionElements(produced, tile, d, r) : 0)
                     : boxElements(regions[k]) - intersectionElements(regions[k], tile, d, r);
          if (buffers) {
            // Whole buffers, where any of it is someone else's: a fetched region, or a
            // partial result that is not exactly the worker's tile.
            if (output) {
              const bool direct =
                  rho == 1 && elementsWith(tile, d, r) == boxElements(produced) &&
                  intersectionElements(produced, tile, d, r) == boxElements(produced);
              elems = computes && !direct ? boxElements(produced) : 0;
            } else {
              elems = elems > 0 ? boxElements(regions[k]) : 0;
            }
          }
          // Bytes moved per element, or (buffers) held in the arena per element.
          const ProblemTensor &pt = p_.tensors[t];
          const int64_t eb = buffers ? (output ? pt.resultStorageBytes(rho > 1) : pt.storageBytes())
                                     : (output ? pt.resultBytes(rho > 1) : pt.elementBytes);
          out[k][c] += elems * eb * weight;
          if (messages) {
            // The distinct pieces overlapped: all of them, less those inside the unit.
            const std::vector<std::vector<int64_t>> &grid = scratch.cells[k][c];
            const Box &seen = output ? tile : regions[k];
            int64_t all = 1, inside = !output || unitComputes;
            for (size_t x = 0; x < seen.size(); ++x) {
              const Range own = int(x) == d ? r : tile[x];
              const Range whole = output ? own : seen[x];
              all *= cellsOver(grid[x], whole);
              inside *= cellsOver(grid[x], overlapOf(whole, output ? produced[x] : own));
            }
            (*messages)[k][c] +=
                ((output ? rho : 1) * all - (output ? inner : 1) * inside) * weight;
          }
        }
      }
    }
  }
  return out;
}

int64_t CostModel::modelCost(const std::vector<StepChoice> &steps,
                             std::vector<int64_t> *perNode) const {
  if (perNode)
    perNode->assign(p_.nodes.size(), 0);
  if (steps.empty())
    return 0;
  int64_t total = 0;
  for (unsigned n = 0; n < p_.nodes.size(); ++n) {
    const int64_t c = nodeCostEveryWorker(n, steps);
    if (perNode)
      (*perNode)[n] = c;
    total += c;
  }
  return total;
}

namespace {

/// One factor of a node's cost terms: a one-dimensional quantity of a worker. "The unit's":
/// under the first `cut` steps alone (CostModel::levelCost).
struct CostFactor {
  enum Kind {
    Nonempty,          ///< var a's range is not empty (0 or 1); b = 1: the unit's
    RegionLen,         ///< input a's region along dimension d
    RegionOverlap,     ///< ... intersected with the unit's tile of the input
    RegionEqual,       ///< inputs a and b read the same range along dimension d (0 or 1)
    TileLen,           ///< the output tile along dimension d
    TileComputed,      ///< ... intersected with the range the unit computes
    RegionCells,       ///< the input's tiles' cells that input a's region overlaps along d
    RegionCellsInside, ///< ... within the unit's tile
    TileCells,         ///< the computed ranges' cells the output tile overlaps along d
    TileCellsComputed, ///< ... within the range the unit computes
  } kind;
  unsigned a = 0, b = 0, d = 0;
  uint64_t steps = 0; ///< the steps whose coordinates it depends on (bit l: step l)
};

/// A product of factors times a coefficient, counting bytes or messages.
struct CostTerm {
  int64_t coef = 0;
  std::vector<unsigned> factors;
  bool message = false;
};

/// A node under some steps, as every phase of nodeCostEveryWorker sees it: its op, its
/// slots (the inputs, then the output) and the unit of the first `cut` steps.
struct NodeAtSteps {
  NodeAtSteps(const Problem &p, unsigned node, const std::vector<StepChoice> &steps, size_t cut)
      : p(p), node(node), n(p.nodes[node]), op(n.table->op), steps(steps), cut(cut),
        unitMask(cut >= 64 ? ~uint64_t(0) : (uint64_t(1) << cut) - 1), units(cut < steps.size()),
        slots(n.inputs.size() + 1) {}

  unsigned slotTensor(size_t k) const { return k < n.inputs.size() ? n.inputs[k] : n.output; }

  const Problem &p;
  const unsigned node;
  const ProblemNode &n;
  const InstOp &op;
  const std::vector<StepChoice> &steps;
  const size_t cut;
  const uint64_t unitMask;
  const bool units; ///< the unit's ranges and tiles differ from the worker's
  const size_t slots;
};

/// A node's bytes (and messages) on a worker as a sum of terms, each a product of factors.
struct NodeTerms {
  std::vector<CostFactor> factors;
  std::vector<CostTerm> terms;
  /// For messages: per slot and dimension, the cells of the tiles (inputs) or of the
  /// computed ranges (the output).
  std::vector<std::vector<std::vector<int64_t>>> cells;
};

/// The terms of node `v`'s bytes, and of its messages too when `messages`: per input, its
/// region less what the unit's tile holds, unless an earlier input reads the same tensor
/// over the same region; for the output, its partial results less what the unit computes.
/// None when an input repeats more than 8 earlier ones (the expansion would be too large).
std::optional<NodeTerms> nodeTerms(const NodeAtSteps &v, bool messages) {
  const ProblemNode &n = v.n;
  const InstOp &op = v.op;
  const size_t m = v.steps.size();
  const std::vector<std::vector<std::vector<unsigned>>> &regionVars = *n.regionVars;
  // Which steps split each variable and each dimension of each slot's tensor.
  std::vector<uint64_t> varSteps(op.vars.size(), 0);
  std::vector<std::vector<uint64_t>> dimSteps(v.slots);
  for (size_t k = 0; k < v.slots; ++k)
    dimSteps[k].assign(v.p.tensors[v.slotTensor(k)].shape.size(), 0);
  for (size_t l = 0; l < m; ++l) {
    int var = v.p.splitVar(v.node, v.steps[l].node[v.node]);
    if (var >= 0)
      varSteps[var] |= uint64_t(1) << l;
    for (size_t k = 0; k < v.slots; ++k) {
      int d = v.steps[l].tensor[v.slotTensor(k)];
      if (d >= 0)
        dimSteps[k][d] |= uint64_t(1) << l;
    }
  }
  auto regionSteps = [&](unsigned i, unsigned d) {
    uint64_t mask = 0;
    for (unsigned var : regionVars[i][d])
      mask |= varSteps[var];
    return mask;
  };
  NodeTerms t;
  if (messages) {
    t.cells.resize(v.slots);
    for (size_t k = 0; k < v.slots; ++k)
      for (size_t d = 0; d < v.p.tensors[v.slotTensor(k)].shape.size(); ++d)
        t.cells[k].push_back(k + 1 < v.slots
                                 ? cellBounds(v.p.tensors[v.slotTensor(k)].shape[d],
                                              tensorCuts(v.slotTensor(k), d, v.steps))
                                 : cellBounds(n.shapes.vars[op.outputVars[d]],
                                              varCuts(v.p, v.node, op.outputVars[d], v.steps)));
  }
  auto factor = [&](CostFactor f) {
    t.factors.push_back(f);
    return static_cast<unsigned>(t.factors.size() - 1);
  };
  std::vector<unsigned> nonempty, unitNonempty;
  for (unsigned var = 0; var < op.vars.size(); ++var)
    nonempty.push_back(factor({CostFactor::Nonempty, var, 0, 0, varSteps[var]}));
  if (v.units)
    for (unsigned var = 0; var < op.vars.size(); ++var)
      unitNonempty.push_back(factor({CostFactor::Nonempty, var, 1, 0, varSteps[var] & v.unitMask}));
  else
    unitNonempty = nonempty;
  for (unsigned i = 0; i < n.inputs.size(); ++i) {
    const int64_t eb = v.p.tensors[n.inputs[i]].elementBytes;
    const unsigned rank = static_cast<unsigned>(regionVars[i].size());
    // Not fetched again where an earlier input reads the same tensor over the same region:
    // Π_j (1 - [region j == region i]), expanded over the subsets of those inputs.
    std::vector<unsigned> same;
    for (unsigned j = 0; j < i; ++j)
      if (n.inputs[j] == n.inputs[i])
        same.push_back(j);
    if (same.size() > 8)
      return std::nullopt;
    std::vector<unsigned> len, overlap, regionCells, insideCells;
    for (unsigned d = 0; d < rank; ++d) {
      const uint64_t held = regionSteps(i, d) | (dimSteps[i][d] & v.unitMask);
      len.push_back(factor({CostFactor::RegionLen, i, 0, d, regionSteps(i, d)}));
      overlap.push_back(factor({CostFactor::RegionOverlap, i, 0, d, held}));
      if (messages) {
        regionCells.push_back(factor({CostFactor::RegionCells, i, 0, d, regionSteps(i, d)}));
        insideCells.push_back(factor({CostFactor::RegionCellsInside, i, 0, d, held}));
      }
    }
    for (uint32_t subset = 0; subset < (uint32_t(1) << same.size()); ++subset) {
      CostTerm base;
      base.factors = nonempty;
      int sign = 1;
      for (size_t s = 0; s < same.size(); ++s)
        if (subset & (uint32_t(1) << s)) {
          sign = -sign;
          for (unsigned d = 0; d < rank; ++d)
            base.factors.push_back(factor({CostFactor::RegionEqual, same[s], i, d,
                                           regionSteps(same[s], d) | regionSteps(i, d)}));
        }
      auto add = [&](int64_t coef, const std::vector<unsigned> &fs, bool message) {
        CostTerm term = base;
        term.coef = coef;
        term.message = message;
        term.factors.insert(term.factors.end(), fs.begin(), fs.end());
        t.terms.push_back(std::move(term));
      };
      add(sign * eb, len, false);
      add(-sign * eb, overlap, false);
      if (messages) {
        add(sign, regionCells, true);
        add(-sign, insideCells, true);
      }
    }
  }
  const size_t k = n.inputs.size();
  const int64_t rho = v.p.partials(v.node, v.steps), inner = v.p.partials(v.node, v.steps, v.cut);
  const int64_t eb = v.p.tensors[n.output].resultBytes(rho > 1);
  CostTerm owned, computed, ownedCells, computedCells;
  owned.coef = rho * eb;
  computed.coef = -inner * eb;
  computed.factors = computedCells.factors = unitNonempty;
  ownedCells.coef = rho;
  computedCells.coef = -inner;
  ownedCells.message = computedCells.message = true;
  for (unsigned d = 0; d < dimSteps[k].size(); ++d) {
    const uint64_t made = dimSteps[k][d] | (varSteps[op.outputVars[d]] & v.unitMask);
    owned.factors.push_back(factor({CostFactor::TileLen, 0, 0, d, dimSteps[k][d]}));
    computed.factors.push_back(factor({CostFactor::TileComputed, 0, 0, d, made}));
    if (messages) {
      ownedCells.factors.push_back(factor({CostFactor::TileCells, 0, 0, d, dimSteps[k][d]}));
      computedCells.factors.push_back(factor({CostFactor::TileCellsComputed, 0, 0, d, made}));
    }
  }
  t.terms.push_back(std::move(owned));
  t.terms.push_back(std::move(computed));
  if (messages) {
    t.terms.push_back(std::move(ownedCells));
    t.terms.push_back(std::move(computedCells));
  }
  return t;
}

/// The connected sets of steps (two steps are connected when one factor depends on both),
/// as step masks, and last the empty set: the factors that depend on no step, one point.
std::vector<uint64_t> stepComponents(const std::vector<CostFactor> &factors) {
  std::vector<uint64_t> components;
  for (const CostFactor &f : factors) {
    uint64_t mask = f.steps;
    std::vector<uint64_t> rest;
    for (uint64_t c : components) {
      if (c & mask)
        mask |= c;
      else
        rest.push_back(c);
    }
    if (mask) {
      rest.push_back(mask);
      components = std::move(rest);
    }
  }
  components.push_back(0);
  return components;
}

/// Per component and term, the sum over the component's points (the coordinates of its
/// steps) of the product of the term's factors in the component. The ranges and tiles of
/// each level (a component's first x steps applied to a worker) are kept from one point
/// to the next, and from one component to the next.
class ComponentSums {
public:
  ComponentSums(const NodeAtSteps &v, const NodeTerms &t, const std::vector<uint64_t> &components)
      : v_(v), t_(t), components_(components), componentOf_(t.factors.size()),
        values_(t.factors.size(), 0), termMine_(t.terms.size()) {
    for (size_t f = 0; f < t.factors.size(); ++f)
      for (size_t c = 0; c < components.size(); ++c)
        if (t.factors[f].steps ? (t.factors[f].steps & components[c]) != 0 : components[c] == 0) {
          componentOf_[f] = static_cast<int>(c);
          break;
        }
    levelRanges_.resize(1);
    levelTiles_.assign(1, std::vector<Box>(v.slots));
    for (int64_t e : v.n.shapes.vars)
      levelRanges_[0].push_back({0, e});
    for (size_t k = 0; k < v.slots; ++k)
      for (int64_t e : v.p.tensors[v.slotTensor(k)].shape)
        levelTiles_[0][k].push_back({0, e});
    if (v.units) {
      unitLevelRanges_ = levelRanges_;
      unitLevelTiles_ = levelTiles_;
    }
  }

  /// Component `c`'s sum per term, into `sums`.
  void sum(size_t c, std::vector<int64_t> &sums) {
    const uint64_t mask = components_[c];
    members_.clear();
    for (size_t l = 0; l < v_.steps.size(); ++l)
      if (mask & (uint64_t(1) << l))
        members_.push_back(l);
    // The component's factors, and per term its factors in the component (the points below
    // evaluate only these).
    mine_.clear();
    for (size_t f = 0; f < t_.factors.size(); ++f)
      if (componentOf_[f] == int(c))
        mine_.push_back(static_cast<unsigned>(f));
    for (size_t t = 0; t < t_.terms.size(); ++t) {
      termMine_[t].clear();
      for (unsigned f : t_.terms[t].factors)
        if (componentOf_[f] == int(c))
          termMine_[t].push_back(f);
    }
    needRegions_ = false;
    for (unsigned f : mine_) {
      const CostFactor::Kind kind = t_.factors[f].kind;
      needRegions_ |= kind != CostFactor::Nonempty && kind != CostFactor::TileLen &&
                      kind != CostFactor::TileComputed && kind != CostFactor::TileCells &&
                      kind != CostFactor::TileCellsComputed;
    }
    sums.assign(t_.terms.size(), 0);
    // Per member step: the variable it splits and per slot the dimension it cuts (the same
    // at every point).
    const size_t M = members_.size();
    memberVar_.assign(M, 0);
    memberDim_.assign(M, std::vector<int>(v_.slots));
    for (size_t x = 0; x < M; ++x) {
      memberVar_[x] = v_.p.splitVar(v_.node, v_.steps[members_[x]].node[v_.node]);
      for (size_t k = 0; k < v_.slots; ++k)
        memberDim_[x][k] = v_.steps[members_[x]].tensor[v_.slotTensor(k)];
    }
    if (levelRanges_.size() < M + 1) {
      levelRanges_.resize(M + 1);
      levelTiles_.resize(M + 1, std::vector<Box>(v_.slots));
      if (v_.units) {
        unitLevelRanges_.resize(M + 1);
        unitLevelTiles_.resize(M + 1, std::vector<Box>(v_.slots));
      }
    }
    // The points in order, the last member's coordinate fastest; levels from `from` on are
    // recomputed from the one before (most points recompute only the last).
    std::vector<unsigned> coord(M, 0);
    size_t from = 0;
    for (;;) {
      for (size_t x = from; x < M; ++x)
        descend(x, coord[x]);
      evaluateFactors(M);
      for (size_t t = 0; t < t_.terms.size(); ++t) {
        int64_t prod = 1;
        for (unsigned f : termMine_[t])
          prod *= values_[f];
        sums[t] += prod;
      }
      size_t x = M;
      while (x > 0 && ++coord[x - 1] == v_.steps[members_[x - 1]].parts)
        coord[--x] = 0;
      if (x == 0)
        break;
      from = x - 1;
    }
  }

private:
  /// Level x + 1 from level x: member x's step at coordinate `w`.
  void descend(size_t x, unsigned w) {
    const unsigned parts = v_.steps[members_[x]].parts;
    levelRanges_[x + 1] = levelRanges_[x];
    if (memberVar_[x] >= 0)
      levelRanges_[x + 1][memberVar_[x]] = subRange(levelRanges_[x][memberVar_[x]], parts, w);
    for (size_t k = 0; k < v_.slots; ++k) {
      levelTiles_[x + 1][k] = levelTiles_[x][k];
      if (const int d = memberDim_[x][k]; d >= 0)
        levelTiles_[x + 1][k][d] = subRange(levelTiles_[x][k][d], parts, w);
    }
    if (!v_.units)
      return;
    // The unit's: cut by the first `cut` steps only.
    const bool cuts = members_[x] < v_.cut;
    unitLevelRanges_[x + 1] = unitLevelRanges_[x];
    if (cuts && memberVar_[x] >= 0)
      unitLevelRanges_[x + 1][memberVar_[x]] =
          subRange(unitLevelRanges_[x][memberVar_[x]], parts, w);
    for (size_t k = 0; k < v_.slots; ++k) {
      unitLevelTiles_[x + 1][k] = unitLevelTiles_[x][k];
      if (const int d = memberDim_[x][k]; cuts && d >= 0)
        unitLevelTiles_[x + 1][k][d] = subRange(unitLevelTiles_[x][k][d], parts, w);
    }
  }

  /// The component's factors at the point level M stands for.
  void evaluateFactors(size_t M) {
    const size_t out = v_.slots - 1;
    const std::vector<Range> &ranges = levelRanges_[M];
    const std::vector<Box> &tiles = levelTiles_[M];
    const std::vector<Range> &unitRanges = v_.units ? unitLevelRanges_[M] : ranges;
    const std::vector<Box> &unitTiles = v_.units ? unitLevelTiles_[M] : tiles;
    if (needRegions_)
      inputRegions(v_.op, *v_.n.reads, v_.n.shapes, ranges, regions_);
    auto overlap = [](Range a, Range b) {
      return std::max<int64_t>(0, std::min(a.hi, b.hi) - std::max(a.lo, b.lo));
    };
    const auto &cells = t_.cells;
    const std::vector<unsigned> &outputVars = v_.op.outputVars;
    for (unsigned f : mine_) {
      const CostFactor &x = t_.factors[f];
      int64_t &fv = values_[f];
      switch (x.kind) {
      case CostFactor::Nonempty:
        fv = (x.b ? unitRanges : ranges)[x.a].size() > 0;
        break;
      case CostFactor::RegionLen:
        fv = regions_[x.a][x.d].size();
        break;
      case CostFactor::RegionOverlap:
        fv = overlap(regions_[x.a][x.d], unitTiles[x.a][x.d]);
        break;
      case CostFactor::RegionEqual:
        fv = regions_[x.a][x.d] == regions_[x.b][x.d];
        break;
      case CostFactor::TileLen:
        fv = tiles[out][x.d].size();
        break;
      case CostFactor::TileComputed:
        fv = overlap(tiles[out][x.d], unitRanges[outputVars[x.d]]);
        break;
      case CostFactor::RegionCells:
        fv = cellsOver(cells[x.a][x.d], regions_[x.a][x.d]);
        break;
      case CostFactor::RegionCellsInside:
        fv = cellsOver(cells[x.a][x.d], overlapOf(regions_[x.a][x.d], unitTiles[x.a][x.d]));
        break;
      case CostFactor::TileCells:
        fv = cellsOver(cells[out][x.d], tiles[out][x.d]);
        break;
      case CostFactor::TileCellsComputed:
        fv = cellsOver(cells[out][x.d], overlapOf(tiles[out][x.d], unitRanges[outputVars[x.d]]));
        break;
      }
    }
  }

  const NodeAtSteps &v_;
  const NodeTerms &t_;
  const std::vector<uint64_t> &components_;
  std::vector<int> componentOf_;
  std::vector<int64_t> values_; ///< per factor, at the current point
  std::vector<std::vector<Range>> levelRanges_, unitLevelRanges_;
  std::vector<std::vector<Box>> levelTiles_, unitLevelTiles_;
  std::vector<Box> regions_;
  // The current component's.
  std::vector<size_t> members_;
  std::vector<unsigned> mine_;
  std::vector<std::vector<unsigned>> termMine_;
  bool needRegions_ = false;
  std::vector<int> memberVar_;
  std::vector<std::vector<int>> memberDim_;
};

} // namespace

int64_t CostModel::nodeCostEveryWorker(unsigned node, const std::vector<StepChoice> &steps,
                                       size_t cut, int64_t *messages) const {
  const ProblemNode &n = p_.nodes[node];
  const size_t m = steps.size();
  if (m == 0)
    return 0;
  if (m > 62 || !n.regionVars) // the terms do not factor here: every worker
    return nodeBruteForceCost(node, steps, cut, messages);
  cut = std::min(cut, m);
  const NodeAtSteps v(p_, node, steps, cut);
  const std::optional<NodeTerms> t = nodeTerms(v, messages != nullptr);
  if (!t)
    return nodeBruteForceCost(node, steps, cut, messages);
  // Per term, the product over components of its sums over the component's points.
  const std::vector<uint64_t> components = stepComponents(t->factors);
  ComponentSums componentSums(v, *t, components);
  std::vector<int64_t> value(t->terms.size(), 1), sums;
  uint64_t covered = 0;
  for (size_t c = 0; c < components.size(); ++c) {
    covered |= components[c];
    componentSums.sum(c, sums);
    for (size_t k = 0; k < sums.size(); ++k)
      value[k] *= sums[k];
  }
  int64_t untouched = 1; // workers that differ only in steps no factor depends on
  for (size_t l = 0; l < m; ++l)
    if (!(covered & (uint64_t(1) << l)))
      untouched *= steps[l].parts;
  int64_t total = 0, fetches = 0;
  for (size_t k = 0; k < t->terms.size(); ++k)
    (t->terms[k].message ? fetches : total) += t->terms[k].coef * value[k];
  if (messages)
    *messages += fetches * untouched;
  return total * untouched;
}

} // namespace tofu
