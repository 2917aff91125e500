// Symbolic and concrete interval analysis of instantiated ops; strategy discovery.
#include "analysis/strategy.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "analysis/index_eval.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

// ---------------------------------------------------------------------------------------
// One evaluator of index expressions, over two domains: symbolic (SymInterval) and
// concrete (closed int64 intervals). A domain supplies the leaves and the arithmetic.
// ---------------------------------------------------------------------------------------

/// Per input, the hull of its reads' coordinates (readHulls), kept from one call to the
/// next so that evaluating many regions of one op allocates nothing once warm.
template <typename D> struct ReadHulls {
  std::vector<std::vector<typename D::Value>> box; ///< per input (meaningful where read)
  std::vector<char> read;                          ///< per input: some read of it seen
};

/// For every input, the hull of the coordinates of all its reads (`reads`: the body's, from
/// collectReads); a dimension read by data, a slice or an expression the domain cannot
/// bound is the whole dimension. Inputs that are never read get no region.
template <typename D>
void readHulls(const InstOp &op, const std::vector<const ir::Read *> &reads, const D &d,
               ReadHulls<D> &out) {
  out.box.resize(op.inputs.size());
  out.read.assign(op.inputs.size(), 0);
  for (const ir::Read *read : reads) {
    std::vector<typename D::Value> &region = out.box[read->input];
    const bool first = !out.read[read->input];
    out.read[read->input] = 1;
    if (first)
      region.clear();
    for (unsigned dim = 0; dim < read->coords.size(); ++dim) {
      const ir::Coord &c = read->coords[dim];
      std::optional<typename D::Value> iv;
      if (c.kind == ir::Coord::Kind::Affine)
        iv = evalIndex(*c.expr, d);
      typename D::Value v = iv ? *iv : d.wholeDim(read->input, dim);
      if (first) {
        region.push_back(std::move(v));
        continue;
      }
      auto h = d.hull(region[dim], v);
      region[dim] = h ? *h : d.wholeDim(read->input, dim);
    }
  }
}

/// readHulls as one optional box per input (none: never read).
template <typename D>
std::vector<std::optional<std::vector<typename D::Value>>>
readRegions(const InstOp &op, const std::vector<const ir::Read *> &reads, const D &d) {
  ReadHulls<D> hulls;
  readHulls(op, reads, d, hulls);
  std::vector<std::optional<std::vector<typename D::Value>>> out(op.inputs.size());
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    if (hulls.read[i])
      out[i] = std::move(hulls.box[i]);
  return out;
}

// --- The symbolic domain ---------------------------------------------------------------

/// Symbols are classes of extents known to be equal: a variable and every input dimension it
/// indexes exactly. Variables with explicit extents are constants.
class SymbolicDomain {
public:
  using Value = SymInterval;
  using Interval = SymInterval;

  explicit SymbolicDomain(const InstOp &op) : op_(op) {
    // Union-find over variables [0, V) and input dimensions [V, V + sum(ranks)).
    unsigned n = static_cast<unsigned>(op.vars.size());
    for (unsigned i = 0; i < op.inputs.size(); ++i) {
      dimBase_.push_back(n);
      n += op.inputs[i].rank;
    }
    parent_.resize(n);
    std::iota(parent_.begin(), parent_.end(), 0);
    ir::walk(*op.body, [&](const ir::Expr &e) {
      if (const auto *r = dyn_cast<ir::Read>(&e))
        for (unsigned d = 0; d < r->coords.size(); ++d)
          if (auto v = ir::exactVar(r->coords[d]); v && !op.vars[*v].fixedExtent)
            unite(*v, dimBase_[r->input] + d);
    });
    // Name each class: by its first variable (outputs come first), else by `x.d`.
    symbolOf_.assign(n, ~0u);
    auto nameClass = [&](unsigned node, const std::string &name) {
      unsigned root = find(node);
      if (symbolOf_[root] == ~0u) {
        symbolOf_[root] = static_cast<unsigned>(names_.size());
        names_.push_back(name);
      }
    };
    for (unsigned v = 0; v < op.vars.size(); ++v)
      if (!op.vars[v].fixedExtent)
        nameClass(v, upper(op.vars[v].name));
    for (unsigned i = 0; i < op.inputs.size(); ++i)
      for (unsigned d = 0; d < op.inputs[i].rank; ++d)
        nameClass(dimBase_[i] + d, fmt::format("{}.{}", op.inputs[i].name, d));
    ranges_.resize(op.vars.size());
    for (unsigned v = 0; v < op.vars.size(); ++v)
      ranges_[v] = {AffineExpr(Rational(0)), extentOf(v) - AffineExpr(Rational(1))};
  }

  const std::vector<std::string> &names() const { return names_; }

  /// The symbolic extent of variable v (a constant for explicit extents).
  AffineExpr extentOf(unsigned v) const {
    if (op_.vars[v].fixedExtent)
      return AffineExpr(Rational(*op_.vars[v].fixedExtent));
    return AffineExpr::symbol(symbolOf_[find(v)]);
  }

  /// Restricts variable v to part w of `parts` equal parts.
  void split(unsigned v, unsigned parts, unsigned w) {
    AffineExpr e = extentOf(v);
    ranges_[v] = {e * Rational(w, parts), e * Rational(w + 1, parts) - AffineExpr(Rational(1))};
  }

  std::optional<Interval> constant(int64_t c) const {
    return Interval{AffineExpr(Rational(c)), AffineExpr(Rational(c))};
  }
  std::optional<Interval> var(unsigned v) const { return ranges_[v]; }
  std::optional<Interval> attr(unsigned) const { return std::nullopt; } // folded already
  std::optional<Interval> extent(unsigned input, unsigned dim) const {
    AffineExpr s = dimSymbol(input, dim);
    return Interval{s, s};
  }
  Interval wholeDim(unsigned input, unsigned dim) const {
    return {AffineExpr(Rational(0)), dimSymbol(input, dim) - AffineExpr(Rational(1))};
  }
  std::optional<Interval> neg(const Interval &a) const { return -a; }
  std::optional<Interval> add(const Interval &a, const Interval &b) const { return a + b; }
  std::optional<Interval> mod(const Interval &, const Interval &) const {
    return std::nullopt; // not affine
  }
  std::optional<Interval> mul(const Interval &a, const Interval &b) const {
    if (a.isPoint() && a.lo.isConstant())
      return b * a.lo.constantTerm();
    if (b.isPoint() && b.lo.isConstant())
      return a * b.lo.constantTerm();
    return std::nullopt; // not affine (e.g. a variable times a symbolic extent)
  }
  std::optional<Interval> div(const Interval &a, const Interval &b) const {
    if (!b.isPoint() || !b.lo.isConstant() || !b.lo.constantTerm().isInteger() ||
        b.lo.constantTerm().sign() <= 0)
      return std::nullopt;
    return a.floorDiv(b.lo.constantTerm().num());
  }
  std::optional<Interval> hull(const Interval &a, const Interval &b) const {
    std::optional<AffineExpr> lo, hi;
    if ((b.lo - a.lo).provablyNonNegative())
      lo = a.lo;
    else if ((a.lo - b.lo).provablyNonNegative())
      lo = b.lo;
    if ((a.hi - b.hi).provablyNonNegative())
      hi = a.hi;
    else if ((b.hi - a.hi).provablyNonNegative())
      hi = b.hi;
    if (!lo || !hi)
      return std::nullopt; // incomparable: the caller takes the whole dimension
    return Interval{*lo, *hi};
  }

private:
  AffineExpr dimSymbol(unsigned input, unsigned dim) const {
    return AffineExpr::symbol(symbolOf_[find(dimBase_[input] + dim)]);
  }
  static std::string upper(std::string s) {
    for (char &c : s)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
  unsigned find(unsigned x) const {
    while (parent_[x] != x)
      x = parent_[x];
    return x;
  }
  void unite(unsigned a, unsigned b) {
    a = find(a);
    b = find(b);
    if (a != b)
      parent_[std::max(a, b)] = std::min(a, b); // keep variables (lower ids) as roots
  }

  const InstOp &op_;
  std::vector<unsigned> dimBase_, parent_, symbolOf_;
  std::vector<std::string> names_;
  std::vector<Interval> ranges_;
};

// --- The concrete domain ---------------------------------------------------------------

struct ClosedRange {
  int64_t lo, hi;
};

class ConcreteDomain {
public:
  using Value = ClosedRange;
  using Interval = ClosedRange;

  ConcreteDomain(const Shapes &shapes, const std::vector<Range> &ranges)
      : shapes_(shapes), ranges_(ranges) {}

  std::optional<Interval> constant(int64_t c) const { return Interval{c, c}; }
  std::optional<Interval> attr(unsigned) const { return std::nullopt; } // folded already
  std::optional<Interval> var(unsigned v) const {
    return Interval{ranges_[v].lo, ranges_[v].hi - 1};
  }
  std::optional<Interval> extent(unsigned input, unsigned dim) const {
    int64_t e = shapes_.inputs[input][dim];
    return Interval{e, e};
  }
  Interval wholeDim(unsigned input, unsigned dim) const {
    return {0, shapes_.inputs[input][dim] - 1};
  }
  std::optional<Interval> neg(const Interval &a) const { return Interval{-a.hi, -a.lo}; }
  std::optional<Interval> add(const Interval &a, const Interval &b) const {
    return Interval{a.lo + b.lo, a.hi + b.hi};
  }
  std::optional<Interval> mod(const Interval &, const Interval &) const {
    return std::nullopt; // not affine: the caller reads the whole dimension
  }
  std::optional<Interval> mul(const Interval &a, const Interval &b) const {
    if (a.lo == a.hi)
      return scale(b, a.lo);
    if (b.lo == b.hi)
      return scale(a, b.lo);
    return std::nullopt;
  }
  std::optional<Interval> div(const Interval &a, const Interval &b) const {
    if (b.lo != b.hi || b.lo <= 0)
      return std::nullopt;
    return Interval{floorDiv(a.lo, b.lo), floorDiv(a.hi, b.lo)};
  }
  std::optional<Interval> hull(const Interval &a, const Interval &b) const {
    return Interval{std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
  }

private:
  static Interval scale(const Interval &a, int64_t k) {
    return k >= 0 ? Interval{a.lo * k, a.hi * k} : Interval{a.hi * k, a.lo * k};
  }

  const Shapes &shapes_;
  const std::vector<Range> &ranges_;
};

SymRegion toRegion(const std::optional<std::vector<SymInterval>> &r) {
  SymRegion out;
  if (!r)
    return out;
  out.read = true;
  for (const SymInterval &iv : *r)
    out.dims.push_back({iv.lo, iv.hi + AffineExpr(Rational(1))});
  return out;
}

/// Classifies one dimension from the two workers' closed intervals and the whole op's.
Access classify(const SymInterval &w0, const SymInterval &w1, const SymInterval &whole) {
  if (w0 == whole && w1 == whole)
    return Access::Full;
  auto disjoint = [](const SymInterval &a, const SymInterval &b) {
    return (b.lo - a.hi - AffineExpr(Rational(1))).provablyNonNegative();
  };
  if (disjoint(w0, w1) || disjoint(w1, w0))
    return Access::Split;
  return Access::Halo;
}

} // namespace

const char *accessName(Access a) {
  switch (a) {
  case Access::Split:
    return "split";
  case Access::Halo:
    return "halo";
  case Access::Full:
    return "full";
  }
  return "?";
}

std::string StrategyTable::regionString(unsigned input, const SymRegion &r) const {
  auto name = [this](unsigned s) { return symbols.at(s); };
  std::string out = op.inputs[input].name + "[";
  if (!r.read)
    return out + "not read]";
  for (size_t d = 0; d < r.dims.size(); ++d)
    out += (d ? ", " : "") + r.dims[d].first.str(name) + ":" + r.dims[d].second.str(name);
  return out + "]";
}

llvm::Expected<StrategyTable> analyzeOp(const ir::OpDef &def, const Instantiation &inst) {
  auto instOp = instantiate(def, inst);
  if (!instOp)
    return instOp.takeError();
  StrategyTable table;
  table.op = std::move(*instOp);
  const InstOp &op = table.op;
  table.elementwise = op.isElementwise();
  ir::walk(*op.body, [&](const ir::Expr &e) { table.opaque |= isa<ir::OpaqueCall>(e); });

  SymbolicDomain whole(op);
  table.symbols = whole.names();
  const std::vector<const ir::Read *> reads = collectReads(op);
  auto wholeRegions = readRegions(op, reads, whole);
  for (const auto &r : wholeRegions)
    table.whole.push_back(toRegion(r));

  auto addStrategy = [&](Strategy s) {
    SymbolicDomain d0(op), d1(op);
    d0.split(s.var, 2, 0);
    d1.split(s.var, 2, 1);
    auto r0 = readRegions(op, reads, d0), r1 = readRegions(op, reads, d1);
    for (unsigned i = 0; i < op.inputs.size(); ++i) {
      InputStrategy in;
      in.worker0 = toRegion(r0[i]);
      in.worker1 = toRegion(r1[i]);
      for (unsigned d = 0; d < op.inputs[i].rank; ++d)
        in.access.push_back(r0[i] ? classify((*r0[i])[d], (*r1[i])[d], (*wholeRegions[i])[d])
                                  : Access::Full);
      s.inputs.push_back(std::move(in));
    }
    table.strategies.push_back(std::move(s));
  };
  for (unsigned k = 0; k < op.outputVars.size(); ++k) {
    Strategy s;
    s.kind = Strategy::Kind::Output;
    s.var = op.outputVars[k];
    s.outputDim = k;
    addStrategy(std::move(s));
  }
  if (const ir::Reduce *red = op.topReduce())
    for (unsigned v : red->vars) {
      Strategy s;
      s.kind = Strategy::Kind::Reduction;
      s.var = v;
      s.reducer = red->reducer;
      addStrategy(std::move(s));
    }
  return table;
}

// --- Concrete ------------------------------------------------------------------------------

std::vector<Range> fullRanges(const Shapes &shapes) {
  std::vector<Range> out;
  out.reserve(shapes.vars.size());
  for (int64_t e : shapes.vars)
    out.push_back({0, e});
  return out;
}

llvm::Expected<Shapes> concreteShapes(const InstOp &op,
                                      const std::vector<std::vector<int64_t>> &inputShapes,
                                      const std::optional<std::vector<int64_t>> &outputShape) {
  if (inputShapes.size() != op.inputs.size())
    return stringError(fmt::format("op '{}' takes {} inputs but {} shapes were given", op.name,
                                   op.inputs.size(), inputShapes.size()));
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    if (inputShapes[i].size() != op.inputs[i].rank)
      return stringError(
          fmt::format("op '{}': input '{}' has rank {} but its shape has {} dimensions", op.name,
                      op.inputs[i].name, op.inputs[i].rank, inputShapes[i].size()));
    for (int64_t e : inputShapes[i])
      if (e <= 0)
        return stringError(fmt::format("op '{}': input '{}' has a non-positive extent", op.name,
                                       op.inputs[i].name));
  }
  std::optional<std::vector<int64_t>> out = outputShape;
  if (!out)
    out = op.outputShape(inputShapes);
  if (out && out->size() != op.outputVars.size())
    return stringError(
        fmt::format("op '{}' has output rank {} but the output shape has {} dimensions", op.name,
                    op.outputVars.size(), out->size()));
  Shapes s;
  s.inputs = inputShapes;
  s.vars.assign(op.vars.size(), 0);
  for (unsigned v = 0; v < op.vars.size(); ++v) {
    const InstVar &var = op.vars[v];
    if (var.fixedExtent)
      s.vars[v] = *var.fixedExtent;
    else if (var.extentDim && var.role == ir::IndexVar::Role::Reduction)
      s.vars[v] = inputShapes[var.extentDim->first][var.extentDim->second];
  }
  for (unsigned k = 0; k < op.outputVars.size(); ++k) {
    unsigned v = op.outputVars[k];
    const InstVar &var = op.vars[v];
    if (out)
      s.vars[v] = (*out)[k];
    else if (var.extentDim)
      s.vars[v] = inputShapes[var.extentDim->first][var.extentDim->second];
    else
      return stringError(
          fmt::format("op '{}': the extent of output coordinate '{}' cannot be inferred "
                      "from the inputs; give the output shape",
                      op.name, var.name));
    if (s.vars[v] <= 0)
      return stringError(fmt::format("op '{}': output coordinate '{}' has extent {}", op.name,
                                     var.name, s.vars[v]));
  }
  // An input dimension that every read addresses with exactly one variable is that
  // variable's axis: its size must be the variable's extent, where the extent comes from
  // the inputs: a reduction variable's, and an output coordinate's when the shape clause
  // sizes it by the variable (`*i`, `v`) rather than by one tensor's dimension or an
  // attribute (an LSTM cell reads a prefix of its gates, a concatenation reads its first
  // operand past its end, by design). Dimensions also addressed with offsets are left alone.
  std::vector<bool> fromInputs(op.vars.size(), false);
  for (unsigned v = 0; v < op.vars.size(); ++v)
    fromInputs[v] = op.vars[v].role == ir::IndexVar::Role::Reduction && !op.vars[v].fixedExtent &&
                    op.vars[v].extentDim;
  for (unsigned k = 0; k < op.outputVars.size(); ++k) {
    const InstVar &var = op.vars[op.outputVars[k]];
    bool clauseNamesVar = k < op.shapeNamesVar.size() && op.shapeNamesVar[k];
    fromInputs[op.outputVars[k]] = var.extentDim && (!op.shape || clauseNamesVar);
  }
  constexpr int kMixed = -1, kUnseen = -2;
  std::map<std::pair<unsigned, unsigned>, int> axisOf; // (input, dim) -> var, or kMixed
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *read = dyn_cast<ir::Read>(&e);
    if (!read)
      return;
    for (unsigned d = 0; d < read->coords.size(); ++d) {
      auto var = ir::exactVar(read->coords[d]);
      auto [it, fresh] = axisOf.emplace(std::make_pair(read->input, d), kUnseen);
      int want = var ? static_cast<int>(*var) : kMixed;
      it->second = (fresh || it->second == want) ? want : kMixed;
    }
  });
  std::map<unsigned, std::pair<unsigned, unsigned>> firstAxis; // var -> (input, dim)
  for (const auto &[key, v] : axisOf) {
    if (v < 0 || !fromInputs[v])
      continue;
    auto [input, dim] = key;
    auto [first, fresh] = firstAxis.emplace(v, key);
    int64_t extent = inputShapes[input][dim];
    auto [fi, fd] = first->second;
    if (extent != s.vars[v] || extent != inputShapes[fi][fd]) {
      const InstVar &var = op.vars[v];
      if (fresh) { // the variable's extent came from elsewhere (the output shape)
        fi = input;
        fd = dim;
      }
      return stringError(fmt::format(
          "op '{}': {} '{}' indexes dimension {} of '{}' ({}) and dimension {} of '{}' ({}), "
          "which differ",
          op.name,
          var.role == ir::IndexVar::Role::Reduction ? "reduction variable" : "output coordinate",
          var.name, fd, op.inputs[fi].name, fresh ? s.vars[v] : inputShapes[fi][fd], dim,
          op.inputs[input].name, extent));
    }
  }
  return s;
}

std::vector<const ir::Read *> collectReads(const InstOp &op) {
  std::vector<const ir::Read *> reads;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    if (const auto *read = dyn_cast<ir::Read>(&e))
      reads.push_back(read);
  });
  return reads;
}

std::vector<Box> inputRegions(const InstOp &op, const Shapes &shapes,
                              const std::vector<Range> &ranges) {
  return inputRegions(op, collectReads(op), shapes, ranges);
}

std::vector<Box> inputRegions(const InstOp &op, const std::vector<const ir::Read *> &reads,
                              const Shapes &shapes, const std::vector<Range> &ranges) {
  std::vector<Box> out;
  inputRegions(op, reads, shapes, ranges, out);
  return out;
}

void inputRegions(const InstOp &op, const std::vector<const ir::Read *> &reads,
                  const Shapes &shapes, const std::vector<Range> &ranges, std::vector<Box> &out) {
  ConcreteDomain d(shapes, ranges);
  thread_local ReadHulls<ConcreteDomain> hulls;
  readHulls(op, reads, d, hulls);
  // An empty range of any variable means the worker computes nothing and reads nothing.
  bool computes = true;
  for (const Range &r : ranges)
    computes &= r.size() > 0;
  out.resize(op.inputs.size());
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    Box &box = out[i];
    box.clear();
    for (unsigned dim = 0; dim < op.inputs[i].rank; ++dim) {
      if (!hulls.read[i] || !computes) {
        box.push_back({0, 0});
        continue;
      }
      ClosedRange r = hulls.box[i][dim];
      int64_t lo = std::max<int64_t>(r.lo, 0);
      int64_t hi = std::min<int64_t>(r.hi + 1, shapes.inputs[i][dim]);
      box.push_back({lo, std::max(lo, hi)});
    }
  }
}

std::optional<std::pair<int64_t, int64_t>> indexValueRange(const ir::Expr &e, const Shapes &shapes,
                                                           const std::vector<Range> &ranges) {
  ConcreteDomain d(shapes, ranges);
  auto iv = evalIndex(e, d);
  if (!iv)
    return std::nullopt;
  return std::make_pair(iv->lo, iv->hi);
}

WorkerCost workerCost(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                      unsigned dtypeBytes) {
  WorkerCost c;
  for (const Box &b : inputRegions(op, shapes, ranges))
    c.inputBytes.push_back(boxElements(b) * dtypeBytes);
  int64_t out = 1;
  for (unsigned v : op.outputVars)
    out *= ranges[v].size();
  c.outputBytes = out * dtypeBytes;
  for (unsigned v : op.topReductionVars())
    c.partialOutput |= ranges[v].size() != shapes.vars[v];
  return c;
}

} // namespace tofu
