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
      shapes_[out] = c.shape;
      consts_[out] = std::move(c);
      return true;
    }
    return false;
  }
  if ((op == "Shape" || op == "Size") && in.size() == 1) {
    auto it = shapes_.find(in[0]);
    if (it == shapes_.end() || (!g_.tensor(in[0]) && !consts_.count(in[0])))
      return false;
    Const c;
    c.isInt = true;
    if (op == "Size") {
      int64_t count = 1;
      for (int64_t d : it->second)
        count *= d;
      c.v = {double(count)};
      shapes_[out] = c.shape;
      consts_[out] = std::move(c);
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
    shapes_[out] = c.shape;
    consts_[out] = std::move(c);
    return true;
  }
  if (op == "ConstantOfShape" && in.size() == 1) {
    // The shape may be a constant or an input given ahead: either way it fixes the output's
    // shape, so the output is a constant too.
    const Const *shape = known(in[0]);
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
    shapes_[out] = r.shape;
    consts_[out] = std::move(r);
    return true;
  }
  return false;
}

bool Importer::foldConstant(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  if (n.input_size() == 0)
    return false;
  bool allInt = true;
  for (const std::string &i : n.input()) {
    if (i.empty())
      continue;
    auto c = consts_.find(i);
    if (c == consts_.end())
      return false;
    allInt = allInt && c->second.isInt;
  }
  // Small results only: a large constant stays a computation of the graph. (An output whose
  // shape ONNX did not infer is measured once evaluated.)
  constexpr int64_t kLargest = int64_t(1) << 22;
  int64_t elements = 0;
  for (const std::string &o : n.output())
    if (auto it = shapes_.find(o); !o.empty() && it != shapes_.end())
      elements += elementCount(it->second);
  if (elements > kLargest)
    return false;
  // An empty result needs no evaluation (and the library's tensors cannot be empty): shape
  // arithmetic slices empty lists, as `x.shape[:0]`.
  bool empty = true;
  for (const std::string &o : n.output()) {
    auto it = shapes_.find(o);
    empty = empty && !o.empty() && it != shapes_.end() && elementCount(it->second) == 0;
  }
  if (empty) {
    for (const std::string &o : n.output()) {
      Const c;
      c.shape = shapes_[o];
      auto type = types_.find(o);
      c.isInt = type != types_.end() ? isIntType(type->second) : allInt;
      consts_[o] = std::move(c);
    }
    return true;
  }
  // The scratch translation's names are thrown away with it: the graph's own names are
  // numbered as if it never ran.
  const unsigned counter = counter_;
  Graph scratch;
  std::swap(g_, scratch);
  llvm::Error saved = std::move(error_);
  error_ = llvm::Error::success();
  llvm::Error e = translateWith(n, entry);
  bool ok = !e && !error_;
  llvm::consumeError(std::move(e));
  llvm::consumeError(std::move(error_));
  std::map<std::string, Tensor> values;
  for (const auto &[name, v] : g_.constants) {
    if (!g_.tensor(name)) { // a constant the graph refused (an empty one)
      ok = false;
      break;
    }
    Tensor t(g_.tensor(name)->shape);
    t.data = v;
    values[name] = std::move(t);
  }
  // The scratch graph's nodes in order (each was checked and shape-inferred as it was added).
  for (size_t k = 0; ok && k < g_.nodes().size(); ++k) {
    const Node &node = g_.nodes()[k];
    std::vector<const Tensor *> ptrs;
    for (const std::string &i : node.inputs) {
      auto it = values.find(i);
      if (it == values.end()) {
        ok = false;
        break;
      }
      ptrs.push_back(&it->second);
    }
    if (!ok)
      break;
    auto inst = instantiateNode(g_, node, lib_);
    if (!inst) {
      llvm::consumeError(inst.takeError());
      ok = false;
      break;
    }
    auto sh = concreteShapes(inst->op, inst->inputShapes, g_.tensor(node.output)->shape);
    if (!sh) {
      llvm::consumeError(sh.takeError());
      ok = false;
      break;
    }
    if (elementCount(g_.tensor(node.output)->shape) > kLargest) {
      ok = false;
      break;
    }
    auto r = evaluate(inst->op, *sh, ptrs, fullRanges(*sh));
    if (!r) {
      llvm::consumeError(r.takeError());
      ok = false;
      break;
    }
    values[node.output] = std::move(*r);
  }
  std::map<std::string, Const> results;
  for (const std::string &o : n.output()) {
    if (o.empty())
      continue;
    auto it = values.find(o);
    if (!ok || it == values.end()) {
      ok = false;
      break;
    }
    Const c;
    c.shape = it->second.shape;
    c.v = it->second.data;
    // ONNX's element type of the output: integer types truncate (integer Div, Cast), bool is
    // x != 0. Where ONNX inferred none, integers in give integers out.
    if (auto type = types_.find(o); type != types_.end())
      convertTo(c, type->second);
    else if (allInt)
      convertTo(c, onnx::TensorProto::INT64);
    results[o] = std::move(c);
  }
  std::swap(g_, scratch);
  error_ = std::move(saved);
  counter_ = counter;
  if (!ok)
    return false;
  for (auto &[name, c] : results) {
    shapes_[name] = c.shape;
    consts_[name] = std::move(c);
  }
  return true;
}

} // namespace onnximport
} // namespace tofu
