// The partitioning problem: analysed nodes and the per-worker communication cost model.
#include "search/problem.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {
namespace {

Range subRange(Range r, unsigned parts, unsigned w) {
  Range p = partOf(r.size(), parts, w);
  return {r.lo + p.lo, r.lo + p.hi};
}

int64_t intersectElements(const Box &a, const Box &b) {
  int64_t n = 1;
  for (size_t d = 0; d < a.size(); ++d) {
    int64_t lo = std::max(a[d].lo, b[d].lo), hi = std::min(a[d].hi, b[d].hi);
    if (hi <= lo)
      return 0;
    n *= hi - lo;
  }
  return n;
}

/// Elements of `a` ∩ `b`, with `b`'s dimension `d` (when >= 0) replaced by `r`.
int64_t intersectElements(const Box &a, const Box &b, int d, Range r) {
  int64_t n = 1;
  for (size_t k = 0; k < a.size(); ++k) {
    const Range &bk = int(k) == d ? r : b[k];
    int64_t lo = std::max(a[k].lo, bk.lo), hi = std::min(a[k].hi, bk.hi);
    if (hi <= lo)
      return 0;
    n *= hi - lo;
  }
  return n;
}

int64_t elementsWith(const Box &b, int d, Range r) {
  int64_t n = 1;
  for (size_t k = 0; k < b.size(); ++k)
    n *= int(k) == d ? r.size() : b[k].size();
  return n;
}

/// Per input and dimension, the variables the region read along it depends on: those in the
/// affine coordinates of the input's reads (every variable where a coordinate is more than
/// arithmetic of variables and constants; none where it is read whole: data, slices).
std::vector<std::vector<std::vector<unsigned>>> regionVariables(const InstOp &op) {
  std::vector<std::vector<std::set<unsigned>>> deps(op.inputs.size());
  for (size_t i = 0; i < op.inputs.size(); ++i)
    deps[i].resize(op.inputs[i].rank);
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *r = llvm::dyn_cast<ir::Read>(&e);
    if (!r || r->input >= deps.size())
      return;
    for (size_t d = 0; d < r->coords.size() && d < deps[r->input].size(); ++d) {
      const ir::Coord &c = r->coords[d];
      if (c.kind != ir::Coord::Kind::Affine || !c.expr)
        continue;
      bool plain = true;
      ir::walk(*c.expr, [&](const ir::Expr &x) {
        if (const auto *v = llvm::dyn_cast<ir::VarRef>(&x))
          deps[r->input][d].insert(v->var);
        else if (!llvm::isa<ir::Const>(x) && !llvm::isa<ir::Binary>(x) &&
                 !llvm::isa<ir::Neg>(x) && !llvm::isa<ir::ExtentRef>(x))
          plain = false;
      });
      if (!plain)
        for (unsigned v = 0; v < op.vars.size(); ++v)
          deps[r->input][d].insert(v);
    }
  });
  std::vector<std::vector<std::vector<unsigned>>> out(deps.size());
  for (size_t i = 0; i < deps.size(); ++i)
    for (const std::set<unsigned> &vars : deps[i])
      out[i].emplace_back(vars.begin(), vars.end());
  return out;
}

std::string instantiationKey(const Node &n, const std::vector<unsigned> &ranks) {
  std::string key = n.op;
  for (const auto &[k, v] : n.attrs)
    key += fmt::format(" {}={}", k, v);
  for (const auto &[k, v] : n.groups)
    key += fmt::format(" {}#{}", k, v);
  for (unsigned r : ranks)
    key += fmt::format(" r{}", r);
  return key;
}

} // namespace

llvm::Expected<Problem> Problem::build(const Graph &g, const OpLibrary &lib) {
  Problem p;
  std::map<std::string, unsigned> tensorIndex;
  for (unsigned i = 0; i < g.tensors().size(); ++i) {
    const TensorInfo &t = g.tensors()[i];
    if (!t.shapeKnown)
      return stringError(fmt::format("tensor '{}' has no known shape (check the graph first)", t.name));
    ProblemTensor pt;
    pt.graphTensor = i;
    pt.name = t.name;
    pt.shape = t.shape;
    pt.elementBytes = static_cast<unsigned>(dtypeSize(t.dtype));
    pt.role = t.role;
    pt.group = t.group.empty() ? t.name : t.group;
    tensorIndex[t.name] = i;
    p.tensors.push_back(std::move(pt));
  }
  std::map<std::string, std::shared_ptr<const StrategyTable>> tables;
  std::map<const StrategyTable *, std::shared_ptr<const std::vector<std::vector<std::vector<unsigned>>>>>
      regionVars;
  std::map<const StrategyTable *, std::shared_ptr<const std::vector<const ir::Read *>>> reads;
  for (unsigned i = 0; i < g.nodes().size(); ++i) {
    const Node &n = g.nodes()[i];
    auto where = [&](const std::string &msg) {
      return stringError(fmt::format("node '{}' (op {}): {}", n.name, n.op, msg));
    };
    const ir::OpDef *op = lib.find(n.op);
    if (!op)
      return where(fmt::format("unknown op '{}'", n.op));
    ProblemNode pn;
    pn.graphNode = i;
    pn.name = n.name;
    pn.coalesce = n.coalesce;
    pn.group = n.group.empty() ? n.name : n.group;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<unsigned> ranks;
    for (const std::string &in : n.inputs) {
      auto it = tensorIndex.find(in);
      if (it == tensorIndex.end())
        return where(fmt::format("input tensor '{}' does not exist", in));
      pn.inputs.push_back(it->second);
      shapes.push_back(p.tensors[it->second].shape);
      ranks.push_back(static_cast<unsigned>(shapes.back().size()));
    }
    auto out = tensorIndex.find(n.output);
    if (out == tensorIndex.end())
      return where(fmt::format("output tensor '{}' does not exist", n.output));
    pn.output = out->second;
    std::string key = instantiationKey(n, ranks);
    auto &table = tables[key];
    if (!table) {
      Instantiation inst;
      inst.attrs = n.attrs;
      inst.groups = n.groups;
      for (unsigned r : ranks)
        inst.inputRanks.push_back(r);
      auto t = analyzeOp(*op, inst);
      if (!t)
        return where(llvm::toString(t.takeError()));
      table = std::make_shared<StrategyTable>(std::move(*t));
    }
    pn.table = table;
    auto &deps = regionVars[table.get()];
    if (!deps)
      deps = std::make_shared<const std::vector<std::vector<std::vector<unsigned>>>>(
          regionVariables(table->op));
    pn.regionVars = deps;
    auto &rs = reads[table.get()];
    if (!rs)
      rs = std::make_shared<const std::vector<const ir::Read *>>(collectReads(table->op));
    pn.reads = rs;
    auto concrete = concreteShapes(table->op, shapes, p.tensors[pn.output].shape);
    if (!concrete)
      return where(llvm::toString(concrete.takeError()));
    pn.shapes = std::move(*concrete);
    p.tensors[pn.output].producer = static_cast<int>(i);
    for (unsigned t : pn.inputs)
      if (std::find(p.tensors[t].consumers.begin(), p.tensors[t].consumers.end(), i) ==
          p.tensors[t].consumers.end())
        p.tensors[t].consumers.push_back(i);
    p.nodes.push_back(std::move(pn));
  }
  auto order = g.topologicalOrder();
  if (!order)
    return order.takeError();
  p.order = std::move(*order);
  return p;
}

int Problem::splitVar(unsigned node, int strategy) const {
  if (strategy < 0)
    return -1;
  return static_cast<int>(nodes[node].table->strategies[strategy].var);
}

bool Problem::isReduction(unsigned node, int strategy) const {
  return strategy >= 0 &&
         nodes[node].table->strategies[strategy].kind == Strategy::Kind::Reduction;
}

std::string Problem::strategyName(unsigned node, int strategy) const {
  if (strategy < 0)
    return "replicate";
  const StrategyTable &t = *nodes[node].table;
  const Strategy &s = t.strategies[strategy];
  const std::string &var = t.op.vars[s.var].name;
  return s.kind == Strategy::Kind::Reduction ? "reduce " + var : var;
}

std::vector<Range> Problem::nodeRanges(unsigned node, const std::vector<StepChoice> &steps,
                                       const std::vector<unsigned> &coords) const {
  std::vector<Range> ranges = fullRanges(nodes[node].shapes);
  for (size_t l = 0; l < steps.size(); ++l) {
    int v = splitVar(node, steps[l].node[node]);
    if (v >= 0)
      ranges[v] = subRange(ranges[v], steps[l].parts, coords[l]);
  }
  return ranges;
}

Box Problem::tensorTile(unsigned tensor, const std::vector<StepChoice> &steps,
                        const std::vector<unsigned> &coords) const {
  Box box;
  for (int64_t e : tensors[tensor].shape)
    box.push_back({0, e});
  for (size_t l = 0; l < steps.size(); ++l) {
    int d = steps[l].tensor[tensor];
    if (d >= 0)
      box[d] = subRange(box[d], steps[l].parts, coords[l]);
  }
  return box;
}

int64_t Problem::partials(unsigned node, const std::vector<StepChoice> &steps) const {
  int64_t rho = 1;
  for (const StepChoice &s : steps)
    if (isReduction(node, s.node[node]))
      rho *= s.parts;
  return rho;
}

int64_t Problem::workerNodeBytes(unsigned node, const std::vector<StepChoice> &steps,
                                 const std::vector<unsigned> &coords) const {
  const ProblemNode &n = nodes[node];
  std::vector<Range> ranges = nodeRanges(node, steps, coords);
  std::vector<Box> regions = inputRegions(n.table->op, *n.reads, n.shapes, ranges);
  int64_t bytes = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (repeatedRead(n.inputs, regions, i) >= 0)
      continue;
    const ProblemTensor &t = tensors[n.inputs[i]];
    Box local = tensorTile(n.inputs[i], steps, coords);
    bytes += (boxElements(regions[i]) - intersectElements(regions[i], local)) * t.elementBytes;
  }
  bool computes = true;
  for (const Range &r : ranges)
    computes &= r.size() > 0;
  Box produced;
  for (unsigned v : n.table->op.outputVars)
    produced.push_back(computes ? ranges[v] : Range{0, 0});
  const ProblemTensor &out = tensors[n.output];
  Box owned = tensorTile(n.output, steps, coords);
  int64_t have = computes ? intersectElements(owned, produced) : 0;
  bytes += (partials(node, steps) * boxElements(owned) - have) * out.elementBytes;
  return bytes;
}

namespace {

/// The weight of the prefix of j + 1 steps among the first m steps of a plan: its own, and
/// for the last of them those of the steps to come (they cut finer: their bytes are counted
/// there for now).
double prefixWeight(const std::vector<double> &prefixWeights, size_t j, size_t m) {
  double w = j < prefixWeights.size() ? prefixWeights[j] : 0;
  if (j + 1 == m)
    for (size_t q = j + 1; q < prefixWeights.size(); ++q)
      w += prefixWeights[q];
  return w;
}

} // namespace

std::vector<std::vector<int64_t>>
Problem::stepTerms(unsigned node, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
                   int s, const std::vector<std::vector<int>> &configs,
                   const std::vector<double> &prefixWeights) const {
  if (prefixWeights.empty())
    return terms(node, steps, i, parts, s, configs, false);
  const size_t m = std::max(steps.size(), i + 1);
  std::vector<std::vector<double>> sum(configs.size());
  for (size_t k = 0; k < configs.size(); ++k)
    sum[k].assign(configs[k].size(), 0);
  for (size_t j = 0; j < m; ++j) {
    const double w = prefixWeight(prefixWeights, j, m);
    if (w == 0)
      continue;
    std::vector<StepChoice> prefix(steps.begin(), steps.begin() + std::min(steps.size(), j + 1));
    if (j < i) { // the prefix does not hold step i: per slot, the same for every candidate
      const ProblemNode &n = nodes[node];
      std::vector<std::vector<int>> own(configs.size());
      for (size_t k = 0; k < configs.size(); ++k)
        if (!configs[k].empty())
          own[k] = {prefix[j].tensor[k < n.inputs.size() ? n.inputs[k] : n.output]};
      const auto t = terms(node, prefix, j, prefix[j].parts, prefix[j].node[node], own, false);
      for (size_t k = 0; k < configs.size(); ++k)
        for (double &v : sum[k])
          v += w * double(t[k].empty() ? 0 : t[k][0]);
      continue;
    }
    const auto t = terms(node, prefix, i, parts, s, configs, false);
    for (size_t k = 0; k < configs.size(); ++k)
      for (size_t c = 0; c < configs[k].size(); ++c)
        sum[k][c] += w * double(t[k][c]);
  }
  std::vector<std::vector<int64_t>> out(configs.size());
  for (size_t k = 0; k < configs.size(); ++k)
    for (double v : sum[k])
      out[k].push_back(std::llround(v));
  return out;
}

int64_t Problem::weightedCost(const std::vector<StepChoice> &steps,
                              const std::vector<double> &prefixWeights) const {
  if (prefixWeights.empty())
    return modelCost(steps);
  double total = 0;
  for (size_t j = 0; j < steps.size(); ++j) {
    const double w = prefixWeight(prefixWeights, j, steps.size());
    if (w != 0)
      total += w * double(modelCost(std::vector<StepChoice>(steps.begin(), steps.begin() + j + 1)));
  }
  return std::llround(total);
}

std::vector<std::vector<int64_t>>
Problem::stepBuffers(unsigned node, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
                     int s, const std::vector<std::vector<int>> &configs) const {
  return terms(node, steps, i, parts, s, configs, true);
}

std::vector<std::vector<int64_t>>
Problem::terms(unsigned node, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
               int s, const std::vector<std::vector<int>> &configs, bool buffers) const {
  const ProblemNode &n = nodes[node];
  const size_t m = std::max(steps.size(), i + 1);
  auto partsAt = [&](size_t l) { return l == i ? parts : steps[l].parts; };
  std::vector<unsigned> earlier;
  int64_t mult = 1, rho = 1;
  for (size_t l = 0; l + 1 < m; ++l) {
    earlier.push_back(partsAt(l));
    mult *= partsAt(l);
  }
  const bool exact = mult <= kExactGroups && !buffers; // buffers: worker 0's only
  for (size_t l = 0; l < m; ++l)
    if (isReduction(node, l == i ? s : steps[l].node[node]))
      rho *= partsAt(l);
  const size_t slots = n.inputs.size() + 1;
  auto slotTensor = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : n.output; };
  std::vector<std::vector<int64_t>> out(slots);
  for (size_t k = 0; k < slots; ++k)
    out[k].assign(configs[k].size(), 0);
  const unsigned lastParts = partsAt(m - 1);
  // Buffers reused from one call to the next (the search calls this many times).
  struct Scratch {
    std::vector<Range> base, ranges;
    std::vector<std::vector<std::pair<Box, int>>> tiles; // per slot and configuration
    std::vector<Box> regions;
    Box produced;
  };
  thread_local Scratch scratch;
  std::vector<Range> &base = scratch.base, &ranges = scratch.ranges;
  std::vector<std::vector<std::pair<Box, int>>> &tiles = scratch.tiles;
  std::vector<Box> &regions = scratch.regions;
  Box &produced = scratch.produced;
  if (tiles.size() < slots)
    tiles.resize(slots);
  for (int64_t g = 0; g < (exact ? mult : 1); ++g) {
    // The earlier steps' coordinates of this group (exact: every group; else group 0).
    const std::vector<unsigned> coords = workerCoords(static_cast<unsigned>(g), earlier);
    base.clear();
    for (int64_t e : n.shapes.vars)
      base.push_back({0, e});
    int lastVar = -1;
    for (size_t l = 0; l < m; ++l) {
      int v = splitVar(node, l == i ? s : steps[l].node[node]);
      if (l + 1 == m)
        lastVar = v;
      else if (v >= 0)
        base[v] = subRange(base[v], partsAt(l), coords[l]);
    }
    for (size_t k = 0; k < slots; ++k) {
      tiles[k].resize(configs[k].size());
      for (size_t c = 0; c < configs[k].size(); ++c) {
        unsigned t = slotTensor(k);
        Box &box = tiles[k][c].first;
        box.clear();
        for (int64_t e : tensors[t].shape)
          box.push_back({0, e});
        int last = -1;
        for (size_t l = 0; l < m; ++l) {
          int d = l == i ? configs[k][c] : steps[l].tensor[t];
          if (l + 1 == m)
            last = d;
          else if (d >= 0)
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
      produced.clear();
      for (unsigned var : n.table->op.outputVars)
        produced.push_back(computes ? ranges[var] : Range{0, 0});
      for (size_t k = 0; k < slots; ++k) {
        bool output = k == n.inputs.size();
        unsigned t = slotTensor(k);
        if (!output && repeatedRead(n.inputs, regions, k) >= 0)
          continue;
        for (size_t c = 0; c < configs[k].size(); ++c) {
          const Box &tile = tiles[k][c].first;
          int d = tiles[k][c].second;
          Range r = d >= 0 ? subRange(tile[d], lastParts, j) : Range{};
          int64_t elems = output ? rho * elementsWith(tile, d, r) -
                                       intersectElements(produced, tile, d, r)
                                 : boxElements(regions[k]) - intersectElements(regions[k], tile, d, r);
          if (buffers) {
            // Whole buffers, where any of it is someone else's: a fetched region, or a
            // partial result that is not exactly the worker's tile.
            if (output) {
              const bool direct =
                  rho == 1 && elementsWith(tile, d, r) == boxElements(produced) &&
                  intersectElements(produced, tile, d, r) == boxElements(produced);
              elems = computes && !direct ? boxElements(produced) : 0;
            } else {
              elems = elems > 0 ? boxElements(regions[k]) : 0;
            }
          }
          out[k][c] += elems * tensors[t].elementBytes * weight;
        }
      }
    }
  }
  return out;
}

int64_t Problem::modelCost(const std::vector<StepChoice> &steps,
                           std::vector<int64_t> *perNode) const {
  if (perNode)
    perNode->assign(nodes.size(), 0);
  if (steps.empty())
    return 0;
  int64_t total = 0;
  for (unsigned n = 0; n < nodes.size(); ++n) {
    const int64_t c = nodeCostEveryWorker(n, steps);
    if (perNode)
      (*perNode)[n] = c;
    total += c;
  }
  return total;
}

namespace {

/// One factor of a node's cost terms: a one-dimensional quantity of a worker.
struct CostFactor {
  enum Kind {
    Nonempty,      ///< var a's range is not empty (0 or 1)
    RegionLen,     ///< input a's region along dimension d
    RegionOverlap, ///< ... intersected with the input's tile
    RegionEqual,   ///< inputs a and b read the same range along dimension d (0 or 1)
    TileLen,       ///< the output tile along dimension d
    TileComputed,  ///< ... intersected with the range the worker computes
  } kind;
  unsigned a = 0, b = 0, d = 0;
  uint64_t steps = 0; ///< the steps whose coordinates it depends on (bit l: step l)
};

/// A product of factors times a coefficient.
struct CostTerm {
  int64_t coef = 0;
  std::vector<unsigned> factors;
};

} // namespace

int64_t Problem::nodeCostEveryWorker(unsigned node, const std::vector<StepChoice> &steps) const {
  const ProblemNode &n = nodes[node];
  const InstOp &op = n.table->op;
  const size_t m = steps.size();
  if (m == 0)
    return 0;
  if (m > 62 || !n.regionVars) // the terms do not factor here: every worker
    return nodeCostWorkerByWorker(node, steps);
  const std::vector<std::vector<std::vector<unsigned>>> &regionVars = *n.regionVars;
  const size_t slots = n.inputs.size() + 1;
  auto slotTensor = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : n.output; };
  // Which steps split each variable and each dimension of each slot's tensor.
  std::vector<uint64_t> varSteps(op.vars.size(), 0);
  std::vector<std::vector<uint64_t>> dimSteps(slots);
  for (size_t k = 0; k < slots; ++k)
    dimSteps[k].assign(tensors[slotTensor(k)].shape.size(), 0);
  for (size_t l = 0; l < m; ++l) {
    int v = splitVar(node, steps[l].node[node]);
    if (v >= 0)
      varSteps[v] |= uint64_t(1) << l;
    for (size_t k = 0; k < slots; ++k) {
      int d = steps[l].tensor[slotTensor(k)];
      if (d >= 0)
        dimSteps[k][d] |= uint64_t(1) << l;
    }
  }
  auto regionSteps = [&](unsigned i, unsigned d) {
    uint64_t mask = 0;
    for (unsigned v : regionVars[i][d])
      mask |= varSteps[v];
    return mask;
  };
  std::vector<CostFactor> factors;
  auto factor = [&](CostFactor f) {
    factors.push_back(f);
    return static_cast<unsigned>(factors.size() - 1);
  };
  std::vector<unsigned> nonempty;
  for (unsigned v = 0; v < op.vars.size(); ++v)
    nonempty.push_back(factor({CostFactor::Nonempty, v, 0, 0, varSteps[v]}));
  std::vector<CostTerm> terms;
  for (unsigned i = 0; i < n.inputs.size(); ++i) {
    const int64_t eb = tensors[n.inputs[i]].elementBytes;
    const unsigned rank = static_cast<unsigned>(regionVars[i].size());
    // Not fetched again where an earlier input reads the same tensor over the same region:
    // Π_j (1 - [region j == region i]), expanded over the subsets of those inputs.
    std::vector<unsigned> same;
    for (unsigned j = 0; j < i; ++j)
      if (n.inputs[j] == n.inputs[i])
        same.push_back(j);
    if (same.size() > 8)
      return nodeCostWorkerByWorker(node, steps);
    std::vector<unsigned> len, overlap;
    for (unsigned d = 0; d < rank; ++d) {
      len.push_back(factor({CostFactor::RegionLen, i, 0, d, regionSteps(i, d)}));
      overlap.push_back(factor({CostFactor::RegionOverlap, i, 0, d,
                                regionSteps(i, d) | dimSteps[i][d]}));
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
      CostTerm read = base, held = base;
      read.coef = sign * eb;
      read.factors.insert(read.factors.end(), len.begin(), len.end());
      held.coef = -sign * eb;
      held.factors.insert(held.factors.end(), overlap.begin(), overlap.end());
      terms.push_back(std::move(read));
      terms.push_back(std::move(held));
    }
  }
  {
    const size_t k = n.inputs.size();
    const int64_t eb = tensors[n.output].elementBytes;
    CostTerm owned, computed;
    owned.coef = partials(node, steps) * eb;
    computed.coef = -eb;
    computed.factors = nonempty;
    for (unsigned d = 0; d < dimSteps[k].size(); ++d) {
      owned.factors.push_back(factor({CostFactor::TileLen, 0, 0, d, dimSteps[k][d]}));
      computed.factors.push_back(factor({CostFactor::TileComputed, 0, 0, d,
                                         dimSteps[k][d] | varSteps[op.outputVars[d]]}));
    }
    terms.push_back(std::move(owned));
    terms.push_back(std::move(computed));
  }
  // Connected sets of steps (two steps are connected when one factor depends on both).
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
  components.push_back(0); // the factors that depend on no step: one point
  uint64_t covered = 0;
  for (uint64_t c : components)
    covered |= c;
  // Per term, the product over components of the sum over the component's points of the
  // product of the term's factors in it.
  std::vector<int64_t> value(terms.size(), 1);
  std::vector<int> componentOf(factors.size());
  for (size_t f = 0; f < factors.size(); ++f)
    for (size_t c = 0; c < components.size(); ++c)
      if (factors[f].steps ? (factors[f].steps & components[c]) != 0 : components[c] == 0) {
        componentOf[f] = static_cast<int>(c);
        break;
      }
  auto overlap = [](Range a, Range b) {
    return std::max<int64_t>(0, std::min(a.hi, b.hi) - std::max(a.lo, b.lo));
  };
  std::vector<int64_t> fv(factors.size(), 0);
  std::vector<int64_t> sums(terms.size());
  // Per level x (the component's first x steps applied to a worker, reused from one point to
  // the next), the variable ranges and the tiles per slot; and the input regions.
  std::vector<std::vector<Range>> levelRanges(1);
  std::vector<std::vector<Box>> levelTiles(1, std::vector<Box>(slots));
  for (int64_t e : n.shapes.vars)
    levelRanges[0].push_back({0, e});
  for (size_t k = 0; k < slots; ++k)
    for (int64_t e : tensors[slotTensor(k)].shape)
      levelTiles[0][k].push_back({0, e});
  std::vector<Box> regions;
  std::vector<unsigned> mine;
  std::vector<std::vector<unsigned>> termMine(terms.size());
  for (size_t c = 0; c < components.size(); ++c) {
    const uint64_t mask = components[c];
    std::vector<size_t> members;
    for (size_t l = 0; l < m; ++l)
      if (mask & (uint64_t(1) << l))
        members.push_back(l);
    // The component's factors, and per term its factors in the component (the points below
    // evaluate only these).
    mine.clear();
    for (size_t f = 0; f < factors.size(); ++f)
      if (componentOf[f] == int(c))
        mine.push_back(static_cast<unsigned>(f));
    for (size_t t = 0; t < terms.size(); ++t) {
      termMine[t].clear();
      for (unsigned f : terms[t].factors)
        if (componentOf[f] == int(c))
          termMine[t].push_back(f);
    }
    bool needRegions = false;
    for (unsigned f : mine)
      needRegions |= factors[f].kind != CostFactor::Nonempty &&
                     factors[f].kind != CostFactor::TileLen && factors[f].kind != CostFactor::TileComputed;
    std::fill(sums.begin(), sums.end(), 0);
    // Per member step: the variable it splits and per slot the dimension it cuts (the same
    // at every point).
    const size_t M = members.size();
    std::vector<int> memberVar(M);
    std::vector<std::vector<int>> memberDim(M, std::vector<int>(slots));
    for (size_t x = 0; x < M; ++x) {
      memberVar[x] = splitVar(node, steps[members[x]].node[node]);
      for (size_t k = 0; k < slots; ++k)
        memberDim[x][k] = steps[members[x]].tensor[slotTensor(k)];
    }
    if (levelRanges.size() < M + 1) {
      levelRanges.resize(M + 1);
      levelTiles.resize(M + 1, std::vector<Box>(slots));
    }
    // The points in order, the last member's coordinate fastest; levels from `from` on are
    // recomputed from the one before (most points recompute only the last).
    std::vector<unsigned> coord(M, 0);
    size_t from = 0;
    for (;;) {
      for (size_t x = from; x < M; ++x) {
        const unsigned parts = steps[members[x]].parts;
        levelRanges[x + 1] = levelRanges[x];
        if (memberVar[x] >= 0)
          levelRanges[x + 1][memberVar[x]] =
              subRange(levelRanges[x][memberVar[x]], parts, coord[x]);
        for (size_t k = 0; k < slots; ++k) {
          levelTiles[x + 1][k] = levelTiles[x][k];
          if (const int d = memberDim[x][k]; d >= 0)
            levelTiles[x + 1][k][d] = subRange(levelTiles[x][k][d], parts, coord[x]);
        }
      }
      const std::vector<Range> &ranges = levelRanges[M];
      const std::vector<Box> &tiles = levelTiles[M];
      if (needRegions)
        inputRegions(op, *n.reads, n.shapes, ranges, regions);
      for (unsigned f : mine) {
        const CostFactor &x = factors[f];
        switch (x.kind) {
        case CostFactor::Nonempty: fv[f] = ranges[x.a].size() > 0; break;
        case CostFactor::RegionLen: fv[f] = regions[x.a][x.d].size(); break;
        case CostFactor::RegionOverlap:
          fv[f] = overlap(regions[x.a][x.d], tiles[x.a][x.d]);
          break;
        case CostFactor::RegionEqual: fv[f] = regions[x.a][x.d] == regions[x.b][x.d]; break;
        case CostFactor::TileLen: fv[f] = tiles[slots - 1][x.d].size(); break;
        case CostFactor::TileComputed:
          fv[f] = overlap(tiles[slots - 1][x.d], ranges[op.outputVars[x.d]]);
          break;
        }
      }
      for (size_t t = 0; t < terms.size(); ++t) {
        int64_t prod = 1;
        for (unsigned f : termMine[t])
          prod *= fv[f];
        sums[t] += prod;
      }
      size_t x = M;
      while (x > 0 && ++coord[x - 1] == steps[members[x - 1]].parts)
        coord[--x] = 0;
      if (x == 0)
        break;
      from = x - 1;
    }
    for (size_t t = 0; t < terms.size(); ++t)
      value[t] *= sums[t];
  }
  int64_t untouched = 1; // workers that differ only in steps no factor depends on
  for (size_t l = 0; l < m; ++l)
    if (!(covered & (uint64_t(1) << l)))
      untouched *= steps[l].parts;
  int64_t total = 0;
  for (size_t t = 0; t < terms.size(); ++t)
    total += terms[t].coef * value[t];
  return total * untouched;
}

int64_t Problem::exactCost(const std::vector<StepChoice> &steps) const {
  int64_t total = 0;
  for (unsigned n = 0; n < nodes.size(); ++n)
    total += nodeCostWorkerByWorker(n, steps);
  return total;
}

int64_t Problem::nodeCostWorkerByWorker(unsigned node, const std::vector<StepChoice> &steps) const {
  if (steps.empty())
    return 0;
  std::vector<unsigned> parts;
  unsigned k = 1;
  for (const StepChoice &s : steps) {
    parts.push_back(s.parts);
    k *= s.parts;
  }
  int64_t total = 0;
  for (unsigned w = 0; w < k; ++w)
    total += workerNodeBytes(node, steps, workerCoords(w, parts));
  return total;
}

int64_t Problem::workerTensorBytes(const std::vector<StepChoice> &steps,
                                   const std::vector<unsigned> &coords) const {
  int64_t bytes = 0;
  for (unsigned t = 0; t < tensors.size(); ++t)
    bytes += boxElements(tensorTile(t, steps, coords)) * tensors[t].elementBytes;
  return bytes;
}

int repeatedRead(const std::vector<unsigned> &inputs, const std::vector<Box> &regions, size_t i) {
  for (size_t j = 0; j < i; ++j)
    if (inputs[j] == inputs[i] && regions[j] == regions[i])
      return static_cast<int>(j);
  return -1;
}

std::vector<unsigned> factorWorkers(unsigned k) {
  std::vector<unsigned> f;
  for (unsigned p = 2; p * p <= k; ++p)
    while (k % p == 0) {
      f.push_back(p);
      k /= p;
    }
  if (k > 1)
    f.push_back(k);
  std::sort(f.rbegin(), f.rend());
  return f;
}

std::vector<unsigned> workerCoords(unsigned w, const std::vector<unsigned> &parts) {
  std::vector<unsigned> c(parts.size(), 0);
  for (size_t l = parts.size(); l-- > 0;) {
    c[l] = w % parts[l];
    w /= parts[l];
  }
  return c;
}

} // namespace tofu
