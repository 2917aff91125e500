// Random shapes and inputs, poisoned workers, and the comparison with the whole op.
#include "analysis/verify.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "analysis/checked.h"
#include "analysis/reducer.h"
#include "analysis/report.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "llvm/Support/Path.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

/// Inputs whose values are used as indices, with the extent their values must stay under.
std::map<unsigned, int64_t> indexInputs(const InstOp &op, const Shapes &shapes) {
  std::map<unsigned, int64_t> out;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *r = dyn_cast<ir::Read>(&e);
    if (!r)
      return;
    for (unsigned d = 0; d < r->coords.size(); ++d) {
      if (r->coords[d].kind != ir::Coord::Kind::DataDependent)
        continue;
      int64_t extent = shapes.inputs[r->input][d];
      ir::walk(*r->coords[d].expr, [&](const ir::Expr &s) {
        if (const auto *inner = dyn_cast<ir::Read>(&s)) {
          auto it = out.find(inner->input);
          out[inner->input] = it == out.end() ? extent : std::min(it->second, extent);
        }
      });
    }
  });
  return out;
}

/// Inputs compared for equality with an index expression (`c == labels[n]`,
/// `idx[...] == (n * C + c) * W + w`) hold integers in that expression's range.
void comparedWithIndices(const InstOp &op, const Shapes &shapes, std::map<unsigned, int64_t> &out) {
  std::vector<Range> full = fullRanges(shapes);
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *b = dyn_cast<ir::Binary>(&e);
    if (!b || (b->op != ast::BinaryOp::Eq && b->op != ast::BinaryOp::Ne))
      return;
    for (auto [x, y] :
         {std::pair{b->lhs.get(), b->rhs.get()}, std::pair{b->rhs.get(), b->lhs.get()}}) {
      const auto *r = dyn_cast<ir::Read>(y);
      bool hasVar = false;
      ir::walk(*x, [&](const ir::Expr &s) { hasVar |= isa<ir::VarRef>(s); });
      if (!r || !hasVar)
        continue;
      auto range = indexValueRange(*x, shapes, full);
      if (!range || range->second < 0)
        continue;
      int64_t bound = range->second + 1;
      auto it = out.find(r->input);
      out[r->input] = it == out.end() ? bound : std::min(it->second, bound);
    }
  });
}

/// Matrices handed to opaque functions (two slice dimensions) get a dominant diagonal, so
/// Cholesky and inverses exist.
std::map<unsigned, std::pair<unsigned, unsigned>> matrixInputs(const InstOp &op) {
  std::map<unsigned, std::pair<unsigned, unsigned>> out;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *c = dyn_cast<ir::OpaqueCall>(&e);
    if (!c)
      return;
    for (const ir::ExprPtr &a : c->args) {
      const auto &r = cast<ir::Read>(*a);
      std::vector<unsigned> slices;
      for (unsigned d = 0; d < r.coords.size(); ++d)
        if (r.coords[d].kind == ir::Coord::Kind::Slice)
          slices.push_back(d);
      if (slices.size() == 2)
        out[r.input] = {slices[0], slices[1]};
    }
  });
  return out;
}

Tensor randomInput(unsigned i, const Shapes &shapes, const InputValueRule &rule,
                   std::pair<double, double> range, std::mt19937 &rng) {
  Tensor t(shapes.inputs[i]);
  std::uniform_real_distribution<double> value(range.first, range.second);
  for (double &v : t.data)
    v = rule.integers > 0
            ? static_cast<double>(std::uniform_int_distribution<int64_t>(0, rule.integers - 1)(rng))
            : value(rng);
  if (rule.diagonal) {
    auto [a, b] = *rule.diagonal;
    int64_t boost = t.shape[a] + t.shape[b] + 1;
    std::vector<int64_t> coords(t.shape.size());
    for (int64_t flat = 0; flat < t.size(); ++flat) {
      unflatten(flat, t.shape, coords.data());
      if (coords[a] == coords[b])
        t.data[flat] += static_cast<double>(boost);
    }
  }
  return t;
}

/// A copy of `t` with everything outside `box` set to NaN.
Tensor poisoned(const Tensor &t, const Box &box) {
  Tensor out = t;
  std::vector<int64_t> coords(t.shape.size());
  for (int64_t flat = 0; flat < t.size(); ++flat) {
    unflatten(flat, t.shape, coords.data());
    bool inside = true;
    for (size_t d = 0; d < coords.size(); ++d)
      inside &= coords[d] >= box[d].lo && coords[d] < box[d].hi;
    if (!inside)
      out.data[flat] = std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

std::string shapeString(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "x" : "") + std::to_string(s[i]);
  return out + "]";
}

/// Runs one strategy on two workers and compares with `reference`.
StrategyCheck checkOne(const StrategyTable &t, const Strategy &s, const Shapes &shapes,
                       const std::vector<Tensor> &inputs, const Tensor &reference,
                       const VerifyOptions &options, const OpaqueRegistry &opaques) {
  const InstOp &op = t.op;
  StrategyCheck check;
  check.strategy = describeStrategy(t, s);
  Tensor combined;
  std::vector<Tensor> parts;
  for (unsigned w = 0; w < 2; ++w) {
    std::vector<Range> ranges = fullRanges(shapes);
    ranges[s.var] = partOf(shapes.vars[s.var], 2, w);
    std::vector<Box> regions = inputRegions(op, shapes, ranges);
    std::vector<Tensor> mine;
    for (unsigned i = 0; i < inputs.size(); ++i)
      mine.push_back(poisoned(inputs[i], regions[i]));
    std::vector<const Tensor *> ptrs;
    for (const Tensor &x : mine)
      ptrs.push_back(&x);
    auto part = options.evaluate ? options.evaluate(op, shapes, ptrs, ranges)
                                 : evaluate(op, shapes, ptrs, ranges, opaques);
    if (!part) {
      check.problem = llvm::toString(part.takeError());
      return check;
    }
    parts.push_back(std::move(*part));
  }
  if (s.kind == Strategy::Kind::Reduction) {
    combined = parts[0];
    for (int64_t k = 0; k < combined.size(); ++k)
      combined.data[k] = reducerCombine(s.reducer, parts[0].data[k], parts[1].data[k]);
  } else {
    // Concatenate along the split output dimension.
    combined = Tensor(reference.shape);
    int64_t split = parts[0].shape[s.outputDim];
    std::vector<int64_t> coords(reference.shape.size());
    for (int64_t flat = 0; flat < combined.size(); ++flat) {
      unflatten(flat, reference.shape, coords.data());
      unsigned w = coords[s.outputDim] < split ? 0 : 1;
      if (w == 1)
        coords[s.outputDim] -= split;
      combined.data[flat] = parts[w].data[parts[w].offset(coords.data())];
    }
  }
  for (int64_t k = 0; k < reference.size(); ++k) {
    double a = combined.data[k], b = reference.data[k];
    if (std::isnan(a)) {
      check.problem = fmt::format("element {} is NaN: a worker read input data outside the "
                                  "regions the analysis gave it",
                                  k);
      return check;
    }
    double rel = std::fabs(a - b) / std::max(1.0, std::fabs(b));
    check.maxRelError = std::max(check.maxRelError, rel);
  }
  check.ok = check.maxRelError <= options.tolerance;
  if (!check.ok)
    check.problem =
        fmt::format("relative error {:.3g} exceeds {:.3g}", check.maxRelError, options.tolerance);
  return check;
}

} // namespace

Instantiation completeForVerification(const ir::OpDef &op, Instantiation given,
                                      std::string *chosen) {
  for (const ir::Attr &a : op.attrs)
    if (!a.defaultValue && !given.attrs.count(a.name)) {
      given.attrs[a.name] = 1;
      if (chosen)
        *chosen += " " + a.name + "=1";
    }
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    if (!op.inputs[i].rank && (i >= given.inputRanks.size() || !given.inputRanks[i])) {
      // The first rank that the op's calls accept, matrices (2) first.
      given.inputRanks.resize(op.inputs.size());
      for (unsigned rank : {2u, 1u, 3u, 4u, 5u, 6u}) {
        given.inputRanks[i] = rank;
        auto probe = instantiate(op, given);
        if (probe)
          break;
        llvm::consumeError(probe.takeError());
      }
      if (chosen)
        *chosen += " rank(" + op.inputs[i].name + ")=" + std::to_string(*given.inputRanks[i]);
    }
  return given;
}

llvm::Expected<std::map<std::string, Example>> loadExamples(const std::string &dir) {
  std::map<std::string, Example> out;
  std::string path = dir + "/verify_examples.json";
  std::ifstream in(path);
  if (!in)
    return out;
  auto fail = [&](const std::string &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s", path.c_str(),
                                   msg.c_str());
  };
  nlohmann::json j;
  try {
    in >> j;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const nlohmann::json &e = it.value();
      Example ex;
      if (e.contains("attrs"))
        for (auto a = e["attrs"].begin(); a != e["attrs"].end(); ++a)
          ex.inst.attrs[a.key()] = a.value().get<int64_t>();
      if (e.contains("groups"))
        for (auto g = e["groups"].begin(); g != e["groups"].end(); ++g)
          ex.inst.groups[g.key()] = g.value().get<int64_t>();
      for (const auto &shape : e.at("inputs"))
        ex.inputShapes.push_back(shape.get<std::vector<int64_t>>());
      ex.straightThrough = e.value("straight_through", "");
      const std::string &name = it.key();
      for (const auto &shape : ex.inputShapes)
        ex.inst.inputRanks.push_back(static_cast<unsigned>(shape.size()));
      out[name] = std::move(ex);
    }
  } catch (const nlohmann::json::exception &e) {
    return fail(e.what());
  }
  return out;
}

std::vector<OpCheck> verifyFile(const ir::Module &module, const std::string &file,
                                const VerifyOptions &baseOptions) {
  std::vector<OpCheck> out;
  auto examples = loadExamples(std::string(llvm::sys::path::parent_path(file)));
  if (!examples) {
    OpCheck c;
    c.op = file;
    c.problem = llvm::toString(examples.takeError());
    out.push_back(std::move(c));
    return out;
  }
  for (const ir::OpDef *op : module.opsInFile(file)) {
    VerifyOptions options = baseOptions;
    Instantiation given;
    if (auto it = examples->find(op->name); it != examples->end()) {
      given = it->second.inst;
      options.exampleShapes = &it->second.inputShapes;
    }
    auto table = analyzeOp(*op, completeForVerification(*op, given, nullptr));
    if (!table) {
      OpCheck c;
      c.op = op->name;
      c.problem = llvm::toString(table.takeError());
      out.push_back(std::move(c));
      continue;
    }
    out.push_back(verifyStrategies(*table, options));
  }
  return out;
}

std::vector<Tensor> randomInputs(const InstOp &op, const Shapes &shapes, unsigned seed,
                                 std::pair<double, double> range) {
  std::mt19937 rng(seed);
  const std::vector<InputValueRule> rules = inputValueRules(op, shapes);
  std::vector<Tensor> inputs;
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    inputs.push_back(randomInput(i, shapes, rules[i], range, rng));
  return inputs;
}

std::vector<InputValueRule> inputValueRules(const InstOp &op, const Shapes &shapes) {
  auto indices = indexInputs(op, shapes);
  comparedWithIndices(op, shapes, indices);
  // select(c[...], a, b): c holds booleans, integers in [0, 2).
  ir::walk(*op.body, [&](const ir::Expr &e) {
    if (const auto *a = dyn_cast<ir::Apply>(&e); a && a->fn == ir::Builtin::Select)
      if (const auto *r = dyn_cast<ir::Read>(a->args[0].get()); r && !indices.count(r->input))
        indices[r->input] = 2;
  });
  auto matrices = matrixInputs(op);
  std::vector<InputValueRule> rules(op.inputs.size());
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *a = dyn_cast<ir::Apply>(&e);
    if (!a ||
        (a->fn != ir::Builtin::Sqrt && a->fn != ir::Builtin::Rsqrt && a->fn != ir::Builtin::Log))
      return;
    ir::walk(*a->args[0], [&](const ir::Expr &x) {
      if (const auto *r = dyn_cast<ir::Read>(&x))
        rules[r->input].positive = true;
    });
  });
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    if (auto it = indices.find(i); it != indices.end())
      rules[i].integers = it->second;
    else if (auto m = matrices.find(i); m != matrices.end())
      rules[i].diagonal = m->second;
  }
  return rules;
}

bool OpCheck::ok() const {
  if (!problem.empty())
    return false;
  for (const StrategyCheck &s : strategies)
    if (!s.ok)
      return false;
  return true;
}

Shapes randomShapes(const InstOp &op, unsigned seed, int64_t minExtent, int64_t maxExtent) {
  std::mt19937 rng(seed);
  auto draw = [&] { return std::uniform_int_distribution<int64_t>(minExtent, maxExtent)(rng); };
  Shapes s;
  s.vars.assign(op.vars.size(), 0);
  s.inputs.resize(op.inputs.size());
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    s.inputs[i].assign(op.inputs[i].rank, 0);
  // Variables that index one input dimension exactly share its extent.
  std::map<std::pair<unsigned, unsigned>, int64_t> dimExtent;
  auto visitExact = [&](auto &&fn) {
    ir::walk(*op.body, [&](const ir::Expr &e) {
      if (const auto *r = dyn_cast<ir::Read>(&e))
        for (unsigned d = 0; d < r->coords.size(); ++d)
          if (auto v = ir::exactVar(r->coords[d]))
            fn(*v, r->input, d);
    });
  };
  for (unsigned v = 0; v < op.vars.size(); ++v)
    if (op.vars[v].fixedExtent)
      s.vars[v] = *op.vars[v].fixedExtent;
  // Output extents that the shape clause fixes without looking at the inputs.
  if (op.shape)
    for (unsigned k = 0; k < op.outputVars.size() && k < op.shape->size(); ++k)
      if (auto c = evalConstant(*(*op.shape)[k], nullptr); c && *c > 0)
        s.vars[op.outputVars[k]] = *c;
  // Propagate equalities to a fixpoint (a variable and a dimension are one class; the two
  // dimensions of a matrix handed to an opaque function are one class too).
  auto matrices = matrixInputs(op);
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto &[input, dims] : matrices) {
      auto a = dimExtent.find({input, dims.first}), b = dimExtent.find({input, dims.second});
      if (a != dimExtent.end() && b == dimExtent.end()) {
        dimExtent[{input, dims.second}] = a->second;
        changed = true;
      } else if (b != dimExtent.end() && a == dimExtent.end()) {
        dimExtent[{input, dims.first}] = b->second;
        changed = true;
      }
    }
    visitExact([&](unsigned v, unsigned input, unsigned d) {
      auto key = std::make_pair(input, d);
      auto it = dimExtent.find(key);
      if (s.vars[v] == 0 && it != dimExtent.end()) {
        s.vars[v] = it->second;
        changed = true;
      } else if (s.vars[v] != 0 && it == dimExtent.end()) {
        dimExtent[key] = s.vars[v];
        changed = true;
      }
    });
    if (!changed)
      for (unsigned v = 0; v < op.vars.size(); ++v)
        if (s.vars[v] == 0) {
          s.vars[v] = draw();
          changed = true;
          break;
        }
  }
  for (const auto &[key, extent] : dimExtent)
    s.inputs[key.first][key.second] = extent;
  // Other dimensions: a provisional extent, then as large as the whole op's reads need.
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    for (int64_t &e : s.inputs[i])
      if (e == 0)
        e = -draw(); // negative: provisional
  for (auto &dims : s.inputs)
    for (int64_t &e : dims)
      e = std::abs(e);
  Shapes probe = s;
  auto regionsNeeded = [&](const Shapes &sh) {
    // Unclipped hulls: evaluate with huge inputs so that clipping does not hide needs.
    Shapes big = sh;
    for (auto &dims : big.inputs)
      for (int64_t &e : dims)
        e = std::numeric_limits<int32_t>::max();
    return inputRegions(op, big, fullRanges(sh));
  };
  // Matrices handed to opaque functions are square.
  for (const auto &[input, dims] : matrices) {
    auto [a, b] = dims;
    if (!dimExtent.count({input, b}))
      s.inputs[input][b] = s.inputs[input][a];
    else if (!dimExtent.count({input, a}))
      s.inputs[input][a] = s.inputs[input][b];
  }
  probe = s;
  std::vector<Box> need = regionsNeeded(probe);
  // A dimension no variable owns is exactly as large as the reads need (a squeezed axis is
  // 1), unless nothing bounds it (data-dependent or whole reads keep the drawn extent).
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    for (unsigned d = 0; d < op.inputs[i].rank; ++d)
      if (!dimExtent.count({i, d}) && need[i][d].hi < std::numeric_limits<int32_t>::max())
        s.inputs[i][d] = std::max<int64_t>(1, need[i][d].hi);
  // Output extents the shape clause computes from the inputs.
  if (auto out = op.outputShape(s.inputs))
    for (unsigned k = 0; k < op.outputVars.size(); ++k)
      if ((*out)[k] > 0)
        s.vars[op.outputVars[k]] = (*out)[k];
  return s;
}

OpCheck verifyStrategies(const StrategyTable &table, const VerifyOptions &options,
                         const OpaqueRegistry &opaques) {
  const InstOp &op = table.op;
  OpCheck result;
  result.op = op.name;
  std::map<std::string, size_t> index;
  for (unsigned trial = 0; trial < options.trials; ++trial) {
    unsigned seed = options.seed * 7919 + trial;
    // Shapes drawn with extents up to `maxExtent`, made consistent.
    auto draw = [&](int64_t maxExtent) -> llvm::Expected<Shapes> {
      Shapes shapes = randomShapes(op, seed, options.minExtent, maxExtent);
      std::optional<std::vector<int64_t>> out;
      if (trial == 0 && options.exampleShapes) {
        shapes.inputs = *options.exampleShapes; // the output follows the shape clause
      } else {
        out.emplace();
        for (unsigned v : op.outputVars)
          out->push_back(shapes.vars[v]);
      }
      return concreteShapes(op, shapes.inputs, out);
    };
    // The most elements a tensor may have (an op of high rank at 5 per dimension would
    // need 5^rank): past it the extents are drawn again at the smallest, and an op still
    // past it is not verified.
    const int64_t kMaxElements = int64_t(1) << 16;
    auto largest = [&](const Shapes &shapes) {
      int64_t most = 0;
      std::vector<std::vector<int64_t>> all = shapes.inputs;
      all.emplace_back();
      for (unsigned v : op.outputVars)
        all.back().push_back(shapes.vars[v]);
      for (const auto &shape : all)
        most = std::max(most, checkedProduct(shape).value_or(std::numeric_limits<int64_t>::max()));
      return most;
    };
    auto checked = draw(options.maxExtent);
    if (checked && largest(*checked) > kMaxElements && options.maxExtent > options.minExtent)
      checked = draw(options.minExtent);
    if (!checked) {
      result.problem = "no consistent shapes: " + llvm::toString(checked.takeError());
      return result;
    }
    Shapes shapes = std::move(*checked);
    if (int64_t most = largest(shapes); most > kMaxElements) {
      result.problem = fmt::format(
          "too large to verify by execution: at the smallest extents a tensor has {} elements "
          "(at most {})",
          most == std::numeric_limits<int64_t>::max() ? std::string("more than 2^63")
                                                      : std::to_string(most),
          kMaxElements);
      return result;
    }
    std::vector<int64_t> outShape;
    for (unsigned v : op.outputVars)
      outShape.push_back(shapes.vars[v]);
    std::string desc;
    for (unsigned i = 0; i < op.inputs.size(); ++i)
      desc += (i ? " " : "") + op.inputs[i].name + shapeString(shapes.inputs[i]);
    desc += " -> " + shapeString(outShape);
    result.shapes += (trial ? "; " : "") + desc;

    // Values where the op is defined: positive first (log, sqrt), then above 1 (acosh),
    // then negative; the first range whose unpartitioned result is finite is used.
    const auto &kRanges = kValueRanges;
    std::vector<Tensor> inputs;
    std::optional<Tensor> reference;
    for (const auto &range : kRanges) {
      inputs = randomInputs(op, shapes, seed, range);
      if (options.quantize) {
        const std::vector<InputValueRule> rules = inputValueRules(op, shapes);
        for (size_t i = 0; i < inputs.size(); ++i)
          if (rules[i].integers == 0)
            for (double &v : inputs[i].data)
              v = options.quantize(v);
      }
      std::vector<const Tensor *> ptrs;
      for (const Tensor &t : inputs)
        ptrs.push_back(&t);
      auto r = evaluate(op, shapes, ptrs, fullRanges(shapes), opaques);
      if (!r) {
        result.problem = llvm::toString(r.takeError());
        return result;
      }
      bool finite =
          std::all_of(r->data.begin(), r->data.end(), [](double v) { return std::isfinite(v); });
      if (finite) {
        reference = std::move(*r);
        break;
      }
    }
    if (!reference) {
      result.problem = "the unpartitioned result is not finite on random inputs in any of "
                       "[0.25, 1], [1.25, 2], [-1, -0.25]";
      return result;
    }
    for (const Strategy &s : table.strategies) {
      StrategyCheck c = checkOne(table, s, shapes, inputs, *reference, options, opaques);
      auto it = index.find(c.strategy);
      if (it == index.end()) {
        index[c.strategy] = result.strategies.size();
        result.strategies.push_back(std::move(c));
        continue;
      }
      StrategyCheck &prev = result.strategies[it->second];
      prev.maxRelError = std::max(prev.maxRelError, c.maxRelError);
      if (prev.ok && !c.ok) {
        prev.ok = false;
        prev.problem = c.problem + " (shapes " + desc + ")";
      }
    }
  }
  return result;
}

} // namespace tofu
