// Constant nodes evaluated at import: shape arithmetic in C++, and any node the table maps
// to library ops through the interpreter.
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

bool Importer::fold(const onnx::NodeProto &n) {
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
  // ConstantOfShape's shape may also be an input given ahead: its output is then a constant
  // too (other ops fold only what the importer evaluated itself).
  for (const std::string &i : in)
    if (!consts_.count(i) && !(op == "ConstantOfShape" && given_.count(i)))
      return false;
  if (in.empty())
    return false;
  const Const &a = *known(in[0]);
  Const r;
  // Integer shape arithmetic stays here (ONNX's integer semantics: Div truncates); other
  // constant nodes are evaluated through the interpreter (foldByInterpreter).
  static const std::map<std::string, std::function<double(double, double)>> binary = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Equal", [](double x, double y) { return double(x == y); }}};
  if (auto it = binary.find(op);
      it != binary.end() && in.size() == 2 && a.isInt && consts_[in[1]].isInt) {
    auto b = broadcast(a, consts_[in[1]], it->second);
    if (!b)
      return false;
    r = *b;
  } else if (op == "Div" && in.size() == 2 && a.isInt && consts_[in[1]].isInt) {
    auto b = broadcast(a, consts_[in[1]],
                       [](double x, double y) { return y == 0 ? 0.0 : std::trunc(x / y); });
    if (!b)
      return false;
    r = *b;
  } else if ((op == "Identity" || op == "Cast") && in.size() == 1) {
    r = a;
    if (op == "Cast")
      convertTo(r, int32_t(intAttr(n, "to").value_or(onnx::TensorProto::FLOAT)));
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = intsAttr(n, "axes", {});
    if (in.size() > 1)
      for (double x : consts_[in[1]].v)
        axes.push_back(asInt(x));
    r = a;
    r.shape = op == "Unsqueeze" ? unsqueezed(a.shape, axes) : squeezed(a.shape, axes);
  } else if (op == "Concat" && a.shape.size() == 1) {
    r.isInt = a.isInt;
    for (const std::string &i : in) {
      if (consts_[i].shape.size() != 1)
        return false;
      r.v.insert(r.v.end(), consts_[i].v.begin(), consts_[i].v.end());
    }
    r.shape = {int64_t(r.v.size())};
  } else if (op == "Gather" && in.size() == 2 && intAttr(n, "axis").value_or(0) == 0 &&
             a.shape.size() == 1) {
    const Const &idx = consts_[in[1]];
    r.isInt = a.isInt;
    r.shape = idx.shape;
    for (double x : idx.v) {
      int64_t k = asInt(x) < 0 ? asInt(x) + a.shape[0] : asInt(x);
      if (k < 0 || k >= a.shape[0])
        return false;
      r.v.push_back(a.v[k]);
    }
  } else if (op == "Slice" && a.shape.size() == 1 && in.size() >= 3) {
    int64_t m = a.shape[0];
    int64_t start = asInt(consts_[in[1]].v.at(0)), end = asInt(consts_[in[2]].v.at(0));
    int64_t step = in.size() > 4 ? asInt(consts_[in[4]].v.at(0)) : 1;
    if (step <= 0)
      return false;
    start = bound(start, m);
    end = bound(end, m);
    r.isInt = a.isInt;
    for (int64_t k = start; k < end; k += step)
      r.v.push_back(a.v[k]);
    r.shape = {int64_t(r.v.size())};
  } else if (op == "Reshape" && in.size() == 2) {
    r = a;
    std::vector<int64_t> to;
    for (double x : consts_[in[1]].v)
      to.push_back(asInt(x));
    r.shape = reshapeTarget(a.shape, to, false);
    if (r.size() != a.size())
      return false;
  } else if (op == "ScatterND" && in.size() == 3) {
    // A constant tensor written by constant index tuples (Swin's shifted-window mask:
    // slice assignments into zeros); data-dependent scatters are translated instead.
    const Const &idx = consts_[in[1]], &upd = consts_[in[2]];
    const std::string reduction = stringAttr(n, "reduction", "none");
    if (idx.shape.empty() || a.shape.empty())
      return false;
    const size_t q = idx.shape.size();
    const int64_t k = idx.shape.back();
    if (k < 1 || k > int64_t(a.shape.size()))
      return false;
    int64_t tuples = 1, slice = 1;
    for (size_t d = 0; d + 1 < q; ++d)
      tuples *= idx.shape[d];
    for (size_t d = size_t(k); d < a.shape.size(); ++d)
      slice *= a.shape[d];
    if (upd.size() != tuples * slice)
      return false;
    r = a;
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t at = 0;
      for (int64_t d = 0; d < k; ++d) {
        int64_t i = asInt(idx.v[size_t(t * k + d)]);
        if (i < 0)
          i += a.shape[size_t(d)];
        if (i < 0 || i >= a.shape[size_t(d)])
          return false; // out of range: left to the translation, which reports it
        at = at * a.shape[size_t(d)] + i;
      }
      for (int64_t e = 0; e < slice; ++e) {
        double &x = r.v[size_t(at * slice + e)];
        const double u = upd.v[size_t(t * slice + e)];
        if (reduction == "none")
          x = u;
        else if (reduction == "add")
          x += u;
        else if (reduction == "mul")
          x *= u;
        else if (reduction == "max")
          x = std::max(x, u);
        else if (reduction == "min")
          x = std::min(x, u);
        else
          return false;
      }
    }
  } else if (op == "ConstantOfShape" && in.size() == 1) {
    r.isInt = false;
    double value = 0;
    for (const onnx::AttributeProto &attr : n.attribute())
      if (attr.name() == "value")
        if (auto v = constOf(attr.t()); v && !v->v.empty()) {
          value = v->v[0];
          r.isInt = v->isInt;
        }
    for (double x : a.v)
      r.shape.push_back(asInt(x));
    if (r.size() > (1 << 20))
      return false; // a large constant: leave it to the graph
    r.v.assign(size_t(r.size()), value);
  } else {
    return false;
  }
  shapes_[out] = r.shape;
  consts_[out] = std::move(r);
  return true;
}

bool Importer::foldByInterpreter(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  if (n.input_size() == 0)
    return false;
  for (const std::string &i : n.input())
    if (!i.empty() && !consts_.count(i))
      return false;
  // Small results only: a large constant stays a computation of the graph. (An output whose
  // shape ONNX did not infer is measured once evaluated.)
  constexpr int64_t kLargest = int64_t(1) << 22;
  int64_t elements = 0;
  for (const std::string &o : n.output())
    if (auto it = shapes_.find(o); !o.empty() && it != shapes_.end())
      elements += elementCount(it->second);
  if (elements > kLargest)
    return false;
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
    if (auto type = types_.find(o); type != types_.end())
      convertTo(c, type->second);
    results[o] = std::move(c);
  }
  std::swap(g_, scratch);
  error_ = std::move(saved);
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
