// Constants at import. One evaluator computes them: the interpreter runs the library ops the
// translation table maps a node to, when every input is a constant (foldConstant). What
// precedes it are the values the importer holds without computing anything (readConstant):
// a Constant's value, the Shape and Size of a static shape, and ConstantOfShape's fill.
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>

#include "analysis/checked.h"
#include "analysis/interpreter.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_rules.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

namespace tofu {
namespace onnximport {

llvm::Expected<bool> Importer::readConstant(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  if (n.output_size() != 1)
    return false;
  const std::string &out = n.output(0);
  std::vector<std::string> in(n.input().begin(), n.input().end());
  while (!in.empty() && in.back().empty())
    in.pop_back();
  if (op == "Constant") {
    for (const onnx::AttributeProto &a : n.attribute()) {
      Const c;
      if (a.name() == "value") {
        auto v = constOf(a.t());
        if (!v)
          return false;
        c = *v;
      } else if (a.name() == "value_int") {
        c.isInt = true;
        c.v = {double(a.i())};
      } else if (a.name() == "value_float") {
        c.v = {double(a.f())};
      } else if (a.name() == "value_ints") {
        c.isInt = true;
        c.shape = {a.ints_size()};
        c.v.assign(a.ints().begin(), a.ints().end());
      } else if (a.name() == "value_floats") {
        c.shape = {a.floats_size()};
        c.v.assign(a.floats().begin(), a.floats().end());
      } else {
        continue;
      }
      facts_.shapes[out] = c.shape;
      facts_.consts[out] = std::move(c);
      return true;
    }
    return false;
  }
  if ((op == "Shape" || op == "Size") && in.size() == 1) {
    auto it = facts_.shapes.find(in[0]);
    if (it == facts_.shapes.end() || (!b_->graph().tensor(in[0]) && !facts_.consts.count(in[0])))
      return false;
    Const c;
    c.isInt = true;
    if (op == "Size") {
      int64_t count = 1;
      for (int64_t d : it->second)
        count *= d;
      c.v = {double(count)};
      facts_.shapes[out] = c.shape;
      facts_.consts[out] = std::move(c);
      return true;
    }
    for (int64_t d : it->second)
      c.v.push_back(double(d));
    int64_t rank = int64_t(it->second.size());
    int64_t start = intAttr(n, "start").value_or(0), end = intAttr(n, "end").value_or(rank);
    start = bound(start, rank);
    end = bound(end, rank);
    c.v = std::vector<double>(c.v.begin() + start, c.v.begin() + std::max(start, end));
    c.shape = {int64_t(c.v.size())};
    facts_.shapes[out] = c.shape;
    facts_.consts[out] = std::move(c);
    return true;
  }
  if (llvm::Expected<bool> empty = emptyReduction(n, in); !empty || *empty)
    return empty;
  if (op == "ConstantOfShape" && in.size() == 1) {
    // The shape may be a constant or an input given ahead: either way it fixes the output's
    // shape, so the output is a constant too.
    const Const *shape = valueOf(in[0]);
    if (!shape)
      return false;
    Const r;
    double value = 0;
    for (const onnx::AttributeProto &attr : n.attribute())
      if (attr.name() == "value")
        if (auto v = constOf(attr.t()); v && !v->v.empty()) {
          value = v->v[0];
          r.isInt = v->isInt;
        }
    for (double x : shape->v)
      r.shape.push_back(asInt(x));
    if (std::string bad = badShape(r.shape); !bad.empty())
      return where(n, "its shape input: " + bad);
    if (r.size() > (1 << 20))
      return false; // a large constant: the graph computes it
    r.v.assign(size_t(r.size()), value);
    facts_.shapes[out] = r.shape;
    facts_.consts[out] = std::move(r);
    return true;
  }
  return false;
}

llvm::Expected<bool> Importer::emptyReduction(const onnx::NodeProto &n,
                                              const std::vector<std::string> &in) {
  // ONNX's values over an empty set (opset 18's reductions say so; a product over a
  // zero-length axis is a sum of no terms).
  const double inf = std::numeric_limits<double>::infinity();
  static const std::map<std::string, double> overNothing = {
      {"ReduceSum", 0},
      {"ReduceSumSquare", 0},
      {"ReduceL1", 0},
      {"ReduceL2", 0},
      {"MatMul", 0},
      {"ReduceProd", 1},
      {"ReduceMax", -inf},
      {"ReduceLogSum", -inf},
      {"ReduceLogSumExp", -inf},
      {"ReduceMin", inf},
      {"ReduceMean", std::numeric_limits<double>::quiet_NaN()}};
  const std::string &op = n.op_type();
  auto identity = overNothing.find(op);
  if (identity == overNothing.end() || in.empty())
    return false;
  // The data a reduction reads is its first input (the second is its axes); a product's
  // are both.
  const size_t data = op == "MatMul" ? std::min<size_t>(in.size(), 2) : 1;
  auto out = facts_.shapes.find(n.output(0));
  if (out == facts_.shapes.end() ||
      std::none_of(in.begin(), in.begin() + data, [&](const std::string &x) { return isEmpty(x); }))
    return false;
  const double value = identity->second;
  Const r;
  r.shape = out->second;
  auto type = facts_.types.find(n.output(0));
  r.isInt = type != facts_.types.end() && isIntType(type->second);
  if (r.isInt && !std::isfinite(value))
    return where(n, fmt::format("{} over an empty set of integers has no value Tofu holds", op));
  if (r.size() > (1 << 20))
    return where(n, fmt::format("its input is empty, and its result of {} elements (all {}) is "
                                "too large to hold as a constant",
                                r.size(), value));
  r.v.assign(size_t(r.size()), value);
  facts_.consts[n.output(0)] = std::move(r);
  return true;
}

const Const *Importer::valueOf(const std::string &name, int depth) {
  if (const Const *c = known(name))
    return c;
  auto p = producers_.find(name);
  if (name.empty() || depth > 64 || underivable_.count(name) || p == producers_.end())
    return nullptr;
  const onnx::NodeProto &n = *p->second;
  const onnxrules::Entry *entry = table_.find(n.op_type());
  bool derivable =
      entry && entry->domain.empty() && (!entry->rules.empty() || !entry->handler.empty());
  for (const std::string &o : n.output()) {
    auto s = facts_.shapes.find(o);
    derivable = derivable &&
                (o.empty() || (s != facts_.shapes.end() && elementCount(s->second) <= kMaxDerived));
  }
  // The inputs' values stand as constants while the producer is evaluated, then go.
  std::vector<std::string> lent;
  for (const std::string &i : n.input()) {
    if (!derivable || i.empty() || facts_.consts.count(i))
      continue;
    const Const *c = valueOf(i, depth + 1);
    if (!c) {
      derivable = false;
      break;
    }
    Const copy = *c;
    facts_.consts[i] = std::move(copy);
    lent.push_back(i);
  }
  const bool folded = derivable && foldConstant(n, *entry);
  for (const std::string &i : lent)
    facts_.consts.erase(i);
  if (folded)
    for (const std::string &o : n.output())
      if (auto c = facts_.consts.find(o); !o.empty() && c != facts_.consts.end()) {
        derived_[o] = std::move(c->second);
        facts_.consts.erase(c);
      }
  if (auto d = derived_.find(name); d != derived_.end())
    return &d->second;
  underivable_.insert(name);
  return nullptr;
}

bool Importer::foldConstant(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  if (n.input_size() == 0)
    return false;
  bool allInt = true;
  for (const std::string &i : n.input()) {
    if (i.empty())
      continue;
    auto c = facts_.consts.find(i);
    if (c == facts_.consts.end())
      return false;
    allInt = allInt && c->second.isInt;
  }
  // Small results only: a large constant stays a computation of the graph. (An output whose
  // shape ONNX did not infer is measured once evaluated.)
  constexpr int64_t kLargest = int64_t(1) << 22;
  int64_t elements = 0;
  for (const std::string &o : n.output())
    if (auto it = facts_.shapes.find(o); !o.empty() && it != facts_.shapes.end())
      elements += elementCount(it->second);
  if (elements > kLargest)
    return false;
  // An empty result needs no evaluation (and the library's tensors cannot be empty): shape
  // arithmetic slices empty lists, as `x.shape[:0]`.
  bool empty = true;
  for (const std::string &o : n.output()) {
    auto it = facts_.shapes.find(o);
    empty = empty && !o.empty() && it != facts_.shapes.end() && elementCount(it->second) == 0;
  }
  if (empty) {
    for (const std::string &o : n.output()) {
      Const c;
      c.shape = facts_.shapes[o];
      auto type = facts_.types.find(o);
      c.isInt = type != facts_.types.end() ? isIntType(type->second) : allInt;
      facts_.consts[o] = std::move(c);
    }
    return true;
  }
  // The node's library ops, built in a scratch graph of their own. Its names are thrown away
  // with it: the model's graph is numbered as if it never ran.
  GraphBuilder scratch(lib_, facts_, b_->counter);
  scratch.group = b_->group;
  GraphBuilder *const model = b_;
  b_ = &scratch;
  llvm::Error translated = translateWith(n, entry);
  b_ = model;
  if (translated) { // not foldable: the node is translated into the model's graph instead
    llvm::consumeError(std::move(translated));
    return false;
  }
  const Graph &g = scratch.graph();
  std::map<std::string, Tensor> values;
  for (const auto &[name, v] : g.constants) {
    Tensor t(g.tensor(name)->shape);
    t.data = v;
    values[name] = std::move(t);
  }
  // The scratch graph's nodes in order (each was checked and shape-inferred as it was added).
  // Any step that fails leaves the node to the graph.
  for (const Node &node : g.nodes()) {
    std::vector<const Tensor *> ptrs;
    for (const std::string &i : node.inputs) {
      auto it = values.find(i);
      if (it == values.end())
        return false;
      ptrs.push_back(&it->second);
    }
    if (elementCount(g.tensor(node.output)->shape) > kLargest)
      return false;
    auto inst = instantiateNode(g, node, lib_);
    if (!inst) {
      llvm::consumeError(inst.takeError());
      return false;
    }
    auto sh = concreteShapes(inst->op, inst->inputShapes, g.tensor(node.output)->shape);
    if (!sh) {
      llvm::consumeError(sh.takeError());
      return false;
    }
    auto r = evaluate(inst->op, *sh, ptrs, fullRanges(*sh));
    if (!r) {
      llvm::consumeError(r.takeError());
      return false;
    }
    values[node.output] = std::move(*r);
  }
  std::map<std::string, Const> results;
  for (const std::string &o : n.output()) {
    if (o.empty())
      continue;
    auto it = values.find(o);
    if (it == values.end())
      return false;
    Const c;
    c.shape = it->second.shape;
    c.v = it->second.data;
    // ONNX's element type of the output: integer types truncate (integer Div, Cast), bool is
    // x != 0. Where ONNX inferred none, integers in give integers out.
    if (auto type = facts_.types.find(o); type != facts_.types.end())
      convertTo(c, type->second);
    else if (allInt)
      convertTo(c, onnx::TensorProto::INT64);
    results[o] = std::move(c);
  }
  for (auto &[name, c] : results) {
    facts_.shapes[name] = c.shape;
    facts_.consts[name] = std::move(c);
  }
  return true;
}

} // namespace onnximport
} // namespace tofu
