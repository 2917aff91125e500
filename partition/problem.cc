// The partitioning problem's geometry: every node analysed on concrete shapes, and what a
// plan's steps give each worker (variable ranges, tensor tiles, partial results).
#include "partition/problem.h"

#include <algorithm>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

Range subRange(Range r, unsigned parts, unsigned w) {
  Range p = partOf(r.size(), parts, w);
  return {r.lo + p.lo, r.lo + p.hi};
}

namespace {

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
        else if (!llvm::isa<ir::Const>(x) && !llvm::isa<ir::Binary>(x) && !llvm::isa<ir::Neg>(x) &&
                 !llvm::isa<ir::ExtentRef>(x))
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
      return stringError(
          fmt::format("tensor '{}' has no known shape (check the graph first)", t.name));
    ProblemTensor pt;
    pt.graphTensor = i;
    pt.name = t.name;
    pt.shape = t.shape;
    pt.dtype = t.dtype;
    pt.elementBytes = elementTypeBytes(t.dtype);
    pt.storage = g.precision == Precision::BF16 && t.dtype == ElementType::BFloat16
                     ? ElementType::BFloat16
                     : ElementType::Float32;
    pt.role = t.role;
    pt.group = t.group.empty() ? t.name : t.group;
    tensorIndex[t.name] = i;
    p.tensors.push_back(std::move(pt));
  }
  std::map<std::string, std::shared_ptr<const StrategyTable>> tables;
  std::map<const StrategyTable *,
           std::shared_ptr<const std::vector<std::vector<std::vector<unsigned>>>>>
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
  return strategy >= 0 && nodes[node].table->strategies[strategy].kind == Strategy::Kind::Reduction;
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
                                       const std::vector<unsigned> &coords, size_t cut) const {
  std::vector<Range> ranges = fullRanges(nodes[node].shapes);
  for (size_t l = 0; l < std::min(cut, steps.size()); ++l) {
    int v = splitVar(node, steps[l].node[node]);
    if (v >= 0)
      ranges[v] = subRange(ranges[v], steps[l].parts, coords[l]);
  }
  return ranges;
}

Box Problem::tensorTile(unsigned tensor, const std::vector<StepChoice> &steps,
                        const std::vector<unsigned> &coords, size_t cut) const {
  Box box;
  for (int64_t e : tensors[tensor].shape)
    box.push_back({0, e});
  for (size_t l = 0; l < std::min(cut, steps.size()); ++l) {
    int d = steps[l].tensor[tensor];
    if (d >= 0)
      box[d] = subRange(box[d], steps[l].parts, coords[l]);
  }
  return box;
}

int64_t Problem::partials(unsigned node, const std::vector<StepChoice> &steps, size_t from) const {
  int64_t rho = 1;
  for (size_t l = from; l < steps.size(); ++l)
    if (isReduction(node, steps[l].node[node]))
      rho *= steps[l].parts;
  return rho;
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
