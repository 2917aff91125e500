// ONNX import through Debian's libonnx: protobuf parsing, shape inference, node translation.
#include "graph/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace tofu {
namespace {

/// Reasons the importer gives for operators it does not translate.
std::string whyNot(const std::string &opType) {
  static const std::map<std::string, std::string> notDescribable = {
      {"If", "control flow"}, {"Loop", "control flow"}, {"Scan", "control flow"},
      {"NonZero", "the output shape depends on the data"},
      {"Unique", "the output shape depends on the data"},
      {"Compress", "the output shape depends on the data"},
      {"NonMaxSuppression", "the output shape depends on the data"},
      {"RandomNormal", "random generation"}, {"RandomUniform", "random generation"},
      {"RandomNormalLike", "random generation"}, {"RandomUniformLike", "random generation"},
      {"Multinomial", "random generation"}, {"Bernoulli", "random generation"}};
  if (auto it = notDescribable.find(opType); it != notDescribable.end())
    return "TDL cannot describe it (" + it->second + ")";
  return "the importer does not translate it yet (ops/onnx_mapping.json says which TDL ops "
         "implement it)";
}

std::vector<int64_t> intsAttr(const onnx::NodeProto &n, const std::string &name,
                              std::vector<int64_t> dflt) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
  return dflt;
}

std::optional<int64_t> intAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.i();
  return std::nullopt;
}

std::optional<float> floatAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.f();
  return std::nullopt;
}

/// A small constant tensor the importer evaluates itself (shape computations, scalars).
struct Const {
  std::vector<int64_t> shape;
  std::vector<double> v; ///< row-major
  bool isInt = false;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// Reads a TensorProto's values (float, double, int32, int64, bool; raw or typed fields).
std::optional<Const> constOf(const onnx::TensorProto &t) {
  Const c;
  c.shape.assign(t.dims().begin(), t.dims().end());
  const int64_t n = c.size();
  const std::string &raw = t.raw_data();
  auto fromRaw = [&](auto tag) {
    using T = decltype(tag);
    if (raw.size() != size_t(n) * sizeof(T))
      return false;
    for (int64_t k = 0; k < n; ++k) {
      T x;
      std::memcpy(&x, raw.data() + k * sizeof(T), sizeof(T));
      c.v.push_back(static_cast<double>(x));
    }
    return true;
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (!raw.empty() ? !fromRaw(float()) : (c.v.assign(t.float_data().begin(), t.float_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::DOUBLE:
    if (!raw.empty() ? !fromRaw(double()) : (c.v.assign(t.double_data().begin(), t.double_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::INT64:
    c.isInt = true;
    if (!raw.empty() ? !fromRaw(int64_t()) : (c.v.assign(t.int64_data().begin(), t.int64_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL:
    c.isInt = true;
    if (!raw.empty() ? !(t.data_type() == onnx::TensorProto::BOOL ? fromRaw(uint8_t()) : fromRaw(int32_t()))
                     : (c.v.assign(t.int32_data().begin(), t.int32_data().end()), false))
      return std::nullopt;
    break;
  default:
    return std::nullopt;
  }
  if (int64_t(c.v.size()) != n)
    return std::nullopt;
  return c;
}

/// Numpy-style broadcast of two constants through `f`.
std::optional<Const> broadcast(const Const &a, const Const &b, const std::function<double(double, double)> &f) {
  size_t rank = std::max(a.shape.size(), b.shape.size());
  auto dimOf = [&](const Const &c, size_t d) {
    size_t off = rank - c.shape.size();
    return d < off ? int64_t(1) : c.shape[d - off];
  };
  Const out;
  out.isInt = a.isInt && b.isInt;
  for (size_t d = 0; d < rank; ++d) {
    int64_t x = dimOf(a, d), y = dimOf(b, d);
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    out.shape.push_back(std::max(x, y));
  }
  auto index = [&](const Const &c, const std::vector<int64_t> &at) {
    int64_t k = 0;
    size_t off = rank - c.shape.size();
    for (size_t d = off; d < rank; ++d)
      k = k * c.shape[d - off] + (c.shape[d - off] == 1 ? 0 : at[d]);
    return k;
  };
  std::vector<int64_t> at(rank, 0);
  for (int64_t k = 0; k < out.size(); ++k) {
    int64_t r = k;
    for (size_t d = rank; d-- > 0;) {
      at[d] = r % out.shape[d];
      r /= out.shape[d];
    }
    out.v.push_back(f(a.v[index(a, at)], b.v[index(b, at)]));
  }
  return out;
}

/// An ONNX index bound: negative counts from the end; clamped to [0, m].
int64_t bound(int64_t x, int64_t m) { return std::clamp(x < 0 ? x + m : x, int64_t(0), m); }

/// The shape after ONNX Unsqueeze: `axes` index the output (negative from its end).
std::vector<int64_t> unsqueezed(std::vector<int64_t> shape, std::vector<int64_t> axes) {
  int64_t rank = int64_t(shape.size() + axes.size());
  for (int64_t &x : axes)
    x = x < 0 ? x + rank : x;
  std::sort(axes.begin(), axes.end());
  for (int64_t x : axes)
    shape.insert(shape.begin() + std::clamp<int64_t>(x, 0, int64_t(shape.size())), 1);
  return shape;
}

/// The shape after ONNX Squeeze: the listed axes go, or every size-1 axis when none is.
std::vector<int64_t> squeezed(const std::vector<int64_t> &shape, std::vector<int64_t> axes) {
  int64_t rank = int64_t(shape.size());
  for (int64_t &x : axes)
    x = x < 0 ? x + rank : x;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d)
    if (!(axes.empty() ? shape[d] == 1 : std::count(axes.begin(), axes.end(), d) > 0))
      kept.push_back(shape[d]);
  return kept;
}

/// ONNX Reshape's target for an input of shape `from`: 0 copies the input's dimension
/// (unless `allowZero`), -1 takes the elements left (0 when the rest is empty).
std::vector<int64_t> reshapeTarget(const std::vector<int64_t> &from, std::vector<int64_t> to,
                                   bool allowZero) {
  int64_t known = 1, infer = -1, total = 1;
  for (int64_t d : from)
    total *= d;
  for (size_t d = 0; d < to.size(); ++d) {
    if (to[d] == 0 && !allowZero)
      to[d] = d < from.size() ? from[d] : 0;
    if (to[d] == -1)
      infer = int64_t(d);
    else
      known *= to[d];
  }
  if (infer >= 0)
    to[infer] = known ? total / known : 0;
  return to;
}

class Importer {
public:
  Importer(const OpLibrary &lib, const OnnxImportOptions &options) : lib_(lib), options_(options) {}

  llvm::Expected<Graph> run(onnx::ModelProto &model);

private:
  llvm::Error translate(const onnx::NodeProto &n);
  std::string node(const std::string &name, const std::string &op, std::vector<std::string> in,
                   std::map<std::string, int64_t> attrs = {},
                   std::map<std::string, int64_t> groups = {}, const std::string &output = "");
  std::string scalar(const std::string &name) {
    TensorInfo t;
    t.name = name;
    t.group = name;
    t.shapeKnown = true;
    t.role = TensorRole::Input;
    keep(g_.addTensor(std::move(t)));
    return name;
  }
  const std::vector<int64_t> &shapeOf(const std::string &tensor) { return shapes_[tensor]; }
  void keep(llvm::Error e) {
    if (e && !error_)
      error_ = std::move(e);
    else
      llvm::consumeError(std::move(e));
  }

  /// Evaluates `n` when all its inputs are constants (shape arithmetic); false when it
  /// is not foldable.
  bool fold(const onnx::NodeProto &n);
  /// A constant consumed by a translated node becomes a graph input of its shape.
  void materialize(const std::string &name);
  /// The values of a constant input, or an error naming what is needed.
  llvm::Expected<std::vector<int64_t>> ints(const std::string &tensor, const std::string &what);
  /// The axes of Unsqueeze, Squeeze and reductions: the `axes` attribute (opsets before
  /// 13/18) or the constant second input.
  llvm::Expected<std::vector<int64_t>> axesOf(const onnx::NodeProto &n,
                                              const std::vector<std::string> &in) {
    if (in.size() > 1)
      return ints(in[1], "axes");
    return intsAttr(n, "axes", {});
  }
  /// Reshape `x` (of `from`) to `to` (same element count) with split/merge/squeeze ops.
  std::string reshape(const std::string &name, std::string x, std::vector<int64_t> from,
                      const std::vector<int64_t> &to, const std::string &out);

  std::map<std::string, Const> consts_;
  const OpLibrary &lib_;
  OnnxImportOptions options_;
  Graph g_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::string group_; // the ONNX node being translated: all its TDL nodes share its group
  llvm::Error error_ = llvm::Error::success();
  unsigned counter_ = 0;
};

std::string Importer::node(const std::string &name, const std::string &op,
                           std::vector<std::string> in, std::map<std::string, int64_t> attrs,
                           std::map<std::string, int64_t> groups, const std::string &output) {
  Node n;
  n.name = name;
  n.group = group_;
  n.op = op;
  n.inputs = std::move(in);
  n.attrs = std::move(attrs);
  n.groups = std::move(groups);
  n.output = output.empty() ? fmt::format("{}__{}", name, counter_++) : output;
  std::string out = n.output;
  if (!g_.tensor(out)) {
    TensorInfo t;
    t.name = out;
    t.group = out;
    // Declared with ONNX's inferred shape when it has one: checkGraph compares.
    if (auto it = shapes_.find(out); it != shapes_.end()) {
      t.shape = it->second;
      t.shapeKnown = true;
    }
    keep(g_.addTensor(std::move(t)));
  }
  keep(g_.addNode(std::move(n)));
  // Infer the output's shape now: later nodes (reshapes, slices) read it.
  if (!error_) {
    keep(inferNode(g_, g_.nodes().back(), lib_));
    if (const TensorInfo *t = g_.tensor(out); t && t->shapeKnown)
      shapes_[out] = t->shape;
  }
  return out;
}

void Importer::materialize(const std::string &name) {
  auto it = consts_.find(name);
  if (it == consts_.end() || g_.tensor(name))
    return;
  TensorInfo t;
  t.name = name;
  t.group = name;
  t.shape = it->second.shape;
  t.shapeKnown = true;
  t.dtype = it->second.isInt ? "int64" : "float32";
  t.role = TensorRole::Input;
  shapes_[name] = t.shape;
  g_.constants[name] = it->second.v;
  keep(g_.addTensor(std::move(t)));
}

llvm::Expected<std::vector<int64_t>> Importer::ints(const std::string &tensor,
                                                     const std::string &what) {
  auto it = consts_.find(tensor);
  if (it == consts_.end())
    return stringError(fmt::format("its {} ('{}') must be a constant the importer can evaluate",
                                   what, tensor));
  std::vector<int64_t> v;
  for (double x : it->second.v)
    v.push_back(static_cast<int64_t>(x));
  return v;
}

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
      consts_[out] = std::move(c);
      return true;
    }
    return false;
  }
  if (op == "Shape" && in.size() == 1) {
    auto it = shapes_.find(in[0]);
    if (it == shapes_.end() || (!g_.tensor(in[0]) && !consts_.count(in[0])))
      return false;
    Const c;
    c.isInt = true;
    c.shape = {int64_t(it->second.size())};
    for (int64_t d : it->second)
      c.v.push_back(double(d));
    int64_t rank = int64_t(it->second.size());
    int64_t start = intAttr(n, "start").value_or(0), end = intAttr(n, "end").value_or(rank);
    start = bound(start, rank);
    end = bound(end, rank);
    c.v = std::vector<double>(c.v.begin() + start, c.v.begin() + std::max(start, end));
    c.shape = {int64_t(c.v.size())};
    consts_[out] = std::move(c);
    return true;
  }
  for (const std::string &i : in)
    if (!consts_.count(i))
      return false;
  if (in.empty())
    return false;
  const Const &a = consts_[in[0]];
  Const r;
  static const std::map<std::string, std::function<double(double, double)>> binary = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Pow", [](double x, double y) { return std::pow(x, y); }},
      {"Equal", [](double x, double y) { return double(x == y); }}};
  if (auto it = binary.find(op); it != binary.end() && in.size() == 2) {
    auto b = broadcast(a, consts_[in[1]], it->second);
    if (!b)
      return false;
    r = *b;
    if (op == "Equal")
      r.isInt = true;
  } else if (op == "Div" && in.size() == 2) {
    bool isInt = a.isInt && consts_[in[1]].isInt;
    auto b = broadcast(a, consts_[in[1]], [isInt](double x, double y) {
      return isInt ? (y == 0 ? 0.0 : std::trunc(x / y)) : x / y;
    });
    if (!b)
      return false;
    r = *b;
  } else if ((op == "Identity" || op == "Cast") && in.size() == 1) {
    r = a;
    if (op == "Cast") {
      int64_t to = intAttr(n, "to").value_or(1);
      r.isInt = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32 ||
                to == onnx::TensorProto::BOOL;
      if (r.isInt)
        for (double &x : r.v)
          x = std::trunc(x);
    }
  } else if ((op == "Sqrt" || op == "Neg") && in.size() == 1) {
    r = a;
    for (double &x : r.v)
      x = op == "Sqrt" ? std::sqrt(x) : -x;
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = intsAttr(n, "axes", {});
    if (in.size() > 1)
      for (double x : consts_[in[1]].v)
        axes.push_back(int64_t(x));
    r = a;
    r.shape = op == "Unsqueeze" ? unsqueezed(a.shape, axes) : squeezed(a.shape, axes);
  } else if (op == "Concat") {
    if (a.shape.size() != 1)
      return false;
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
      int64_t k = int64_t(x) < 0 ? int64_t(x) + a.shape[0] : int64_t(x);
      if (k < 0 || k >= a.shape[0])
        return false;
      r.v.push_back(a.v[k]);
    }
  } else if (op == "Slice" && a.shape.size() == 1 && in.size() >= 3) {
    int64_t m = a.shape[0];
    int64_t start = int64_t(consts_[in[1]].v.at(0)), end = int64_t(consts_[in[2]].v.at(0));
    int64_t step = in.size() > 4 ? int64_t(consts_[in[4]].v.at(0)) : 1;
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
      to.push_back(int64_t(x));
    r.shape = reshapeTarget(a.shape, to, false);
    if (r.size() != a.size())
      return false;
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
      r.shape.push_back(int64_t(x));
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

std::string Importer::reshape(const std::string &name, std::string x, std::vector<int64_t> from,
                              const std::vector<int64_t> &to, const std::string &out) {
  // Size-1 axes first leave (Squeeze) and finally come back (Unsqueeze); in between, the
  // axes are grouped where the two shapes' running products meet, and each group of
  // source axes is merged into one and split into the group's target axes.
  struct Step {
    std::string op;
    std::map<std::string, int64_t> attrs, groups;
  };
  std::vector<Step> steps;
  auto add = [&](const std::string &op, std::map<std::string, int64_t> attrs,
                 std::map<std::string, int64_t> groups) {
    steps.push_back({op, std::move(attrs), std::move(groups)});
  };
  std::vector<int64_t> cur = from;
  for (size_t d = cur.size(); d-- > 0;)
    if (cur[d] == 1) {
      add("Squeeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d - 1)}});
      cur.erase(cur.begin() + d);
    }
  std::vector<int64_t> target;
  for (int64_t d : to)
    if (d != 1)
      target.push_back(d);
  size_t i = 0, j = 0;
  while (i < cur.size() && j < target.size()) {
    size_t i2 = i + 1, j2 = j + 1;
    int64_t a = cur[i], b = target[j];
    while (a != b) {
      if (a < b)
        a *= cur[i2++];
      else
        b *= target[j2++];
    }
    // Merge cur[i, i2) into one axis at pos, then split it into target[j, j2).
    size_t rank = cur.size();
    for (size_t k = i + 1; k < i2; ++k) {
      int64_t inner = cur[i + 1];
      int64_t merged = cur[i] * inner;
      add("ReshapeMerge", {{"n", inner}, {"m", merged}},
          {{"pre", int64_t(i)}, {"post", int64_t(rank - i - 2)}});
      cur[i] = merged;
      cur.erase(cur.begin() + i + 1);
      rank = cur.size();
    }
    for (size_t k = j2 - 1; k > j; --k) {
      int64_t inner = target[k];
      int64_t outer = cur[i] / inner;
      add("ReshapeSplit", {{"n", inner}, {"outer", outer}},
          {{"pre", int64_t(i)}, {"post", int64_t(cur.size() - i - 1)}});
      cur[i] = outer;
      cur.insert(cur.begin() + i + 1, inner);
    }
    i += j2 - j;
    j = j2;
  }
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] == 1) {
      add("Unsqueeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d)}});
      cur.insert(cur.begin() + d, 1);
    }
  if (steps.empty())
    return node(name, "Identity", {x}, {}, {}, out);
  for (size_t k = 0; k < steps.size(); ++k)
    x = node(fmt::format("{}_{}{}", name, steps[k].op, k), steps[k].op, {x}, steps[k].attrs,
             steps[k].groups, k + 1 == steps.size() ? out : "");
  return x;
}

llvm::Error Importer::translate(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  std::string name = n.name().empty() ? fmt::format("{}_{}", op, counter_++) : n.name();
  group_ = name;
  auto where = [&](const std::string &msg) {
    return stringError(fmt::format("node '{}' (ONNX {}): {}", name, op, msg));
  };
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return where(fmt::format("operators of domain '{}' are not supported", n.domain()));
  if (fold(n))
    return llvm::Error::success();
  std::vector<std::string> in(n.input().begin(), n.input().end());
  while (!in.empty() && in.back().empty())
    in.pop_back(); // optional inputs left out
  if (n.output_size() < 1)
    return where("has no output");
  const std::string out = n.output(0);
  // Inputs that only describe shapes or axes stay constants; data inputs become tensors.
  static const std::map<std::string, size_t> dataInputs = {
      {"Reshape", 1}, {"Unsqueeze", 1}, {"Squeeze", 1}, {"Slice", 1}, {"Expand", 1}};
  size_t data = in.size();
  if (auto it = dataInputs.find(op); it != dataInputs.end())
    data = std::min(data, it->second);
  for (size_t k = 0; k < data; ++k)
    materialize(in[k]);
  for (size_t k = 0; k < data; ++k)
    if (!g_.tensor(in[k]))
      return where(fmt::format("input '{}' is not produced before it", in[k]));
  unsigned rank = in.empty() ? 0 : static_cast<unsigned>(shapeOf(in[0]).size());

  static const std::map<std::string, std::string> unary = {
      {"Relu", "Relu"}, {"Sigmoid", "Sigmoid"}, {"Tanh", "Tanh"}, {"Exp", "Exp"},
      {"Log", "Log"},   {"Sqrt", "Sqrt"},       {"Neg", "Neg"},   {"Abs", "Abs"},
      {"Erf", "Erf"},   {"Identity", "Identity"}, {"Softplus", "Softplus"}};
  if (auto it = unary.find(op); it != unary.end()) {
    node(name, it->second, {in[0]}, {}, {}, out);
    return llvm::Error::success();
  }
  if (op == "Dropout") { // inference: the identity (the mask output is not supported)
    if (n.output_size() > 1 && !n.output(1).empty())
      return where("its mask output is not supported");
    node(name, "Identity", {in[0]}, {}, {}, out);
    return llvm::Error::success();
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow") {
    std::string x = in[0], y = in[1];
    std::vector<int64_t> a = shapeOf(x), b = shapeOf(y);
    bool commutative = op == "Add" || op == "Mul";
    if (commutative && a.size() < b.size()) {
      std::swap(x, y);
      std::swap(a, b);
    }
    // Size-1 axes of one operand facing longer axes of the other are expanded.
    auto expand = [&](std::string &t, std::vector<int64_t> &ts, const std::vector<int64_t> &other,
                      const std::string &tag) {
      size_t off = other.size() - ts.size();
      for (size_t d = 0; d < ts.size(); ++d)
        if (ts[d] == 1 && other[off + d] != 1) {
          t = node(fmt::format("{}_expand{}{}", name, tag, d), "ExpandAxis", {t},
                   {{"n", other[off + d]}},
                   {{"pre", int64_t(d)}, {"post", int64_t(ts.size() - d - 1)}});
          ts[d] = other[off + d];
        }
    };
    if (a.size() >= b.size()) {
      expand(y, b, a, "b");
      if (a.size() == b.size())
        expand(x, a, b, "a");
    }
    if (a == b) {
      node(name, op, {x, y}, {}, {}, out);
      return llvm::Error::success();
    }
    if (b.size() < a.size() && std::equal(b.begin(), b.end(), a.end() - b.size())) {
      node(name, op + "Bcast", {x, y}, {},
           {{"p", static_cast<int64_t>(a.size() - b.size())}, {"i", static_cast<int64_t>(b.size())}},
           out);
      return llvm::Error::success();
    }
    return where("this broadcast (the first operand of lower rank) is not translated yet");
  }
  if (op == "Reshape") {
    auto target = ints(in[1], "shape");
    if (!target)
      return where(llvm::toString(target.takeError()));
    const auto &from = shapeOf(in[0]);
    std::vector<int64_t> to = reshapeTarget(from, *target, intAttr(n, "allowzero").value_or(0));
    int64_t count = 1, total = 1;
    for (int64_t d : to)
      count *= d;
    for (int64_t d : from)
      total *= d;
    if (count != total) {
      auto str = [](const std::vector<int64_t> &v) {
        std::string t;
        for (int64_t d : v)
          t += (t.empty() ? "" : ", ") + std::to_string(d);
        return "[" + t + "]";
      };
      return where(fmt::format("the target shape {} (from {}) does not keep the element count "
                               "of {}",
                               str(to), str(*target), str(from)));
    }
    reshape(name, in[0], from, to, out);
    return llvm::Error::success();
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    auto axesOrError = axesOf(n, in);
    if (!axesOrError)
      return where(llvm::toString(axesOrError.takeError()));
    std::vector<int64_t> axes = *axesOrError;
    std::vector<int64_t> to =
        op == "Unsqueeze" ? unsqueezed(shapeOf(in[0]), axes) : squeezed(shapeOf(in[0]), axes);
    reshape(name, in[0], shapeOf(in[0]), to, out);
    return llvm::Error::success();
  }
  if (op == "Slice") {
    auto starts = ints(in[1], "starts");
    auto ends = in.size() > 2 ? ints(in[2], "ends") : stringError("Slice needs ends");
    if (!starts || !ends)
      return where(llvm::toString(starts ? ends.takeError() : starts.takeError()));
    std::vector<int64_t> axes, steps;
    if (in.size() > 3) {
      auto a = ints(in[3], "axes");
      if (!a)
        return where(llvm::toString(a.takeError()));
      axes = *a;
    } else {
      for (size_t k = 0; k < starts->size(); ++k)
        axes.push_back(int64_t(k));
    }
    if (in.size() > 4) {
      auto st = ints(in[4], "steps");
      if (!st)
        return where(llvm::toString(st.takeError()));
      steps = *st;
    }
    std::string x = in[0];
    std::vector<int64_t> shape = shapeOf(x);
    const int64_t r = int64_t(shape.size());
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t axis = axes[k] < 0 ? axes[k] + r : axes[k];
      int64_t step = k < steps.size() ? steps[k] : 1;
      if (axis < 0 || axis >= r)
        return where(fmt::format("axis {} is out of range", axes[k]));
      if (step <= 0)
        return where("only positive steps are translated");
      int64_t m = shape[axis];
      int64_t b = bound((*starts)[k], m), e = bound((*ends)[k], m);
      int64_t count = e > b ? (e - b + step - 1) / step : 0;
      if (count == 0)
        return where("an empty slice is not translated");
      if (b == 0 && count == m && step == 1)
        continue;
      bool last = k + 1 == axes.size();
      x = node(fmt::format("{}_axis{}", name, axis), "Slice", {x},
               {{"start", b}, {"n", count}, {"step", step}, {"m", m}},
               {{"pre", axis}, {"post", r - axis - 1}}, last ? out : "");
      shape[axis] = count;
    }
    if (x != out)
      node(name, "Identity", {x}, {}, {}, out);
    return llvm::Error::success();
  }
  if (op == "Concat") {
    int64_t r = int64_t(shapeOf(in[0]).size());
    int64_t axis = intAttr(n, "axis").value_or(0);
    axis = axis < 0 ? axis + r : axis;
    if (in.size() == 1) {
      node(name, "Identity", {in[0]}, {}, {}, out);
      return llvm::Error::success();
    }
    std::string x = in[0];
    int64_t have = shapeOf(in[0]).at(axis);
    for (size_t k = 1; k < in.size(); ++k) {
      int64_t more = shapeOf(in[k]).at(axis);
      x = node(fmt::format("{}_{}", name, k), "Concat", {x, in[k]}, {{"n", have}, {"m", have + more}},
               {{"pre", axis}, {"post", r - axis - 1}}, k + 1 == in.size() ? out : "");
      have += more;
    }
    return llvm::Error::success();
  }
  if (op == "Gather") {
    int64_t r = int64_t(shapeOf(in[0]).size());
    int64_t axis = intAttr(n, "axis").value_or(0);
    axis = axis < 0 ? axis + r : axis;
    node(name, "Gather", {in[0], in[1]}, {},
         {{"pre", axis}, {"q", int64_t(shapeOf(in[1]).size())}, {"post", r - axis - 1}}, out);
    return llvm::Error::success();
  }
  if (op == "ReduceMean" || op == "ReduceSum") {
    auto axesOrError = axesOf(n, in);
    if (!axesOrError)
      return where(llvm::toString(axesOrError.takeError()));
    std::vector<int64_t> axes = *axesOrError;
    int64_t r = int64_t(rank);
    if (axes.size() != 1)
      return where("only a reduction over one axis is translated");
    int64_t axis = axes[0] < 0 ? axes[0] + r : axes[0];
    bool keepDims = intAttr(n, "keepdims").value_or(1) != 0;
    std::string tdl = op + (keepDims ? "Keep" : "");
    if (!lib_.find(tdl))
      return where(fmt::format("the library has no {}", tdl));
    std::map<std::string, int64_t> groups = {{"pre", axis}, {"post", r - axis - 1}};
    if (!keepDims)
      groups["r"] = 1;
    node(name, tdl, {in[0]}, {}, groups, out);
    return llvm::Error::success();
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    if (rank != 4)
      return where(fmt::format("only 2-D (rank 4) inputs are translated; this one has rank {}",
                               rank));
    std::string autoPad;
    for (const onnx::AttributeProto &a : n.attribute())
      if (a.name() == "auto_pad")
        autoPad = a.s();
    if (!autoPad.empty() && autoPad != "NOTSET")
      return where("auto_pad is not translated; export with explicit pads");
    if (intAttr(n, "ceil_mode").value_or(0) != 0)
      return where("ceil_mode = 1 is not supported");
    auto s = intsAttr(n, "strides", {1, 1});
    auto p = intsAttr(n, "pads", {0, 0, 0, 0});
    auto d = intsAttr(n, "dilations", {1, 1});
    std::map<std::string, int64_t> attrs = {{"sh", s[0]}, {"sw", s[1]}, {"ph", p[0]},
                                            {"pw", p[1]}, {"peh", p[2]}, {"pew", p[3]}};
    if (op == "Conv") {
      attrs["dh"] = d[0];
      attrs["dw"] = d[1];
      int64_t group = intAttr(n, "group").value_or(1);
      std::string conv;
      if (group == 1) {
        conv = node(name, "Conv2d", {in[0], in[1]}, attrs, {}, in.size() > 2 ? "" : out);
      } else {
        attrs["cog"] = shapeOf(in[1])[0] / group;
        conv = node(name, "Conv2dGrouped", {in[0], in[1]}, attrs, {}, in.size() > 2 ? "" : out);
      }
      if (in.size() > 2)
        node(name + "_bias", "ConvBias", {conv, in[2]}, {}, {{"s", 2}}, out);
      return llvm::Error::success();
    }
    auto k = intsAttr(n, "kernel_shape", {});
    if (k.size() != 2)
      return where("kernel_shape must give two extents");
    attrs["kh"] = k[0];
    attrs["kw"] = k[1];
    if (op == "MaxPool") {
      if (n.output_size() > 1 && !n.output(1).empty())
        return where("the Indices output is not supported");
      attrs["dh"] = d[0];
      attrs["dw"] = d[1];
      node(name, "MaxPool2d", {in[0]}, attrs, {}, out);
    } else {
      bool include = intAttr(n, "count_include_pad").value_or(0) != 0;
      node(name, include ? "AveragePool2d" : "AveragePool2dExcl", {in[0]}, attrs, {}, out);
    }
    return llvm::Error::success();
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (rank != 4)
      return where("only rank-4 inputs are translated");
    node(name, op, {in[0]}, {}, {}, out);
    return llvm::Error::success();
  }
  if (op == "BatchNormalization") {
    if (in.size() != 5 || n.output_size() > 1)
      return where("only the inference form (5 inputs, one output) is translated");
    std::string eps = scalar(name + "_epsilon");
    // The running statistics are not trained.
    for (int k : {3, 4})
      if (TensorInfo *t = g_.tensor(in[k]); t && !g_.producer(in[k]))
        t->role = TensorRole::Input;
    node(name, "BatchNormalization", {in[0], in[1], in[2], in[3], in[4], eps}, {},
         {{"s", static_cast<int64_t>(rank) - 2}}, out);
    return llvm::Error::success();
  }
  if (op == "Flatten") {
    int64_t axis = intAttr(n, "axis").value_or(1);
    if (axis == 1 && rank == 4)
      node(name, "Flatten4", {in[0]}, {}, {}, out);
    else if (axis == 1 && rank == 2)
      node(name, "Flatten2", {in[0]}, {}, {}, out);
    else
      return where(fmt::format("axis {} of a rank-{} input is not translated", axis, rank));
    return llvm::Error::success();
  }
  if (op == "Gemm") {
    float alpha = floatAttr(n, "alpha").value_or(1), beta = floatAttr(n, "beta").value_or(1);
    std::string a = in[0], b = in[1];
    if (intAttr(n, "transA").value_or(0))
      a = node(name + "_transA", "Transpose_10", {a});
    if (intAttr(n, "transB").value_or(0))
      b = node(name + "_transB", "Transpose_10", {b});
    bool more = in.size() > 2 || alpha != 1;
    std::string y = node(name, "MatMul", {a, b}, {}, {}, more ? "" : out);
    if (alpha != 1) {
      std::string s = scalar(name + "_alpha");
      y = node(name + "_alpha_scale", "MulBcast", {y, s}, {}, {{"p", 2}, {"i", 0}},
               in.size() > 2 ? "" : out);
    }
    if (in.size() > 2) {
      if (beta != 1)
        return where("beta other than 1 is not translated");
      const auto &c = shapeOf(in[2]);
      if (c.size() == 2)
        node(name + "_bias", "Add", {y, in[2]}, {}, {}, out);
      else
        node(name + "_bias", "AddBcast", {y, in[2]}, {},
             {{"p", 2 - static_cast<int64_t>(c.size())}, {"i", static_cast<int64_t>(c.size())}},
             out);
    }
    return llvm::Error::success();
  }
  if (op == "MatMul") {
    const auto &a = shapeOf(in[0]), &b = shapeOf(in[1]);
    if (a.size() >= 2 && b.size() == 2)
      node(name, a.size() == 2 ? "MatMul" : "MatMulBcastB", {in[0], in[1]}, {},
           {{"b", static_cast<int64_t>(a.size()) - 2}}, out);
    else if (a.size() == b.size() && a.size() >= 2)
      node(name, "MatMul", {in[0], in[1]}, {}, {{"b", static_cast<int64_t>(a.size()) - 2}}, out);
    else
      return where("this broadcast of matrix products is not translated");
    return llvm::Error::success();
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    int64_t axis = intAttr(n, "axis").value_or(-1);
    if (axis < 0)
      axis += rank;
    node(name, op, {in[0]}, {},
         {{"pre", axis}, {"post", static_cast<int64_t>(rank) - axis - 1}}, out);
    return llvm::Error::success();
  }
  if (op == "Transpose") {
    auto perm = intsAttr(n, "perm", {});
    if (perm.empty())
      for (int64_t k = rank - 1; k >= 0; --k)
        perm.push_back(k);
    std::string opName = "Transpose_";
    for (int64_t p : perm)
      opName += std::to_string(p);
    if (!lib_.find(opName))
      return where(fmt::format("permutation {} has no op in the library (ranks 2 to 4)", opName));
    node(name, opName, {in[0]}, {}, {}, out);
    return llvm::Error::success();
  }
  return where(whyNot(op));
}

/// Why a shape cannot be a tensor's (a negative extent, more elements than 64-bit byte
/// counts hold), or empty.
std::string badShape(const std::vector<int64_t> &dims) {
  int64_t bytes = 8; // the widest element
  for (int64_t d : dims) {
    if (d < 0)
      return fmt::format("negative extent {}", d);
    if (d > 0 && bytes > std::numeric_limits<int64_t>::max() / d)
      return fmt::format("shape [{}] has more bytes than a 64-bit count holds", fmt::join(dims, ", "));
    bytes *= std::max<int64_t>(d, 1);
  }
  return "";
}

llvm::Expected<Graph> Importer::run(onnx::ModelProto &model) {
  onnx::GraphProto *graph = model.mutable_graph();
  // The model against ONNX's schemas first: opsets and domains known, every node's input
  // and output counts and attribute types its operator's, names defined before use (no
  // cycles). The checker's messages name the node.
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' '))
      what.pop_back();
    return stringError("not a valid ONNX model: " + what);
  }
  if (graph->output_size() == 0)
    return stringError("not a valid ONNX model: its graph has no outputs");
  // Opsets newer than this ONNX release knows would be read with older operators' meanings.
  const auto &known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const onnx::OperatorSetIdProto &o : model.opset_import()) {
    const std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
    auto it = known.find(domain);
    if (it == known.end())
      return stringError(fmt::format("the model imports the unknown operator domain '{}'", o.domain()));
    if (o.version() < it->second.first || o.version() > it->second.second)
      return stringError(fmt::format(
          "the model imports opset {} of the {} domain; this importer knows opsets {} to {}",
          o.version(), domain.empty() ? "ONNX" : "'" + domain + "'", it->second.first,
          it->second.second));
  }
  // Symbolic dimensions (a dynamic batch) become the batch size.
  for (onnx::ValueInfoProto &v : *graph->mutable_input())
    if (v.type().has_tensor_type())
      for (auto &dim : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
        if (!dim.has_dim_value())
          dim.set_dim_value(options_.batch);
  try {
    // Strict: a node whose inputs do not fit its operator (ranks, an attribute out of
    // range) is an error naming it, not an unknown shape.
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true,
                                                                   /*error_mode=*/1));
  } catch (const std::exception &e) {
    return stringError(std::string("ONNX shape inference failed: ") + e.what());
  }
  auto record = [&](const onnx::ValueInfoProto &v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return;
    std::vector<int64_t> dims;
    for (const auto &d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return;
      dims.push_back(d.dim_value());
    }
    if (std::string bad = badShape(dims); !bad.empty())
      keep(stringError(fmt::format("tensor '{}': {}", v.name(), bad)));
    shapes_[v.name()] = dims;
  };
  for (const auto &v : graph->input())
    record(v);
  for (const auto &v : graph->value_info())
    record(v);
  for (const auto &v : graph->output())
    record(v);
  std::set<std::string> initializers;
  for (const onnx::TensorProto &t : graph->initializer()) {
    initializers.insert(t.name());
    if (std::string bad = badShape({t.dims().begin(), t.dims().end()}); !bad.empty())
      return stringError(fmt::format("initializer '{}': {}", t.name(), bad));
    shapes_[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    TensorInfo info;
    info.name = t.name();
    info.group = t.name();
    info.shape = shapes_[t.name()];
    info.shapeKnown = true;
    info.role = TensorRole::Weight;
    keep(g_.addTensor(std::move(info)));
  }
  unsigned dataSeen = 0;
  for (const onnx::ValueInfoProto &v : graph->input()) {
    if (initializers.count(v.name()))
      continue;
    auto it = shapes_.find(v.name());
    if (it == shapes_.end())
      return stringError(fmt::format("graph input '{}' has no static shape", v.name()));
    TensorInfo info;
    info.name = v.name();
    info.group = v.name();
    info.shape = it->second;
    info.shapeKnown = true;
    info.role = dataSeen++ < options_.dataInputs ? TensorRole::Input : TensorRole::Weight;
    keep(g_.addTensor(std::move(info)));
  }
  if (error_)
    return std::move(error_);
  // Every node is tried, so that one import lists every node it cannot translate; nodes
  // that read what an untranslated node would have produced are skipped (and counted).
  std::vector<std::string> untranslated;
  std::set<std::string> lost;
  unsigned skipped = 0;
  for (const onnx::NodeProto &n : graph->node()) {
    bool reachesLost = false;
    for (const std::string &in : n.input())
      reachesLost |= lost.count(in) > 0;
    if (reachesLost) {
      ++skipped;
      lost.insert(n.output().begin(), n.output().end());
      continue;
    }
    // The checks above should leave nothing that throws; should a translation still meet
    // what it did not expect, the model is refused naming the node, never a crash.
    llvm::Error e = [&]() -> llvm::Error {
      try {
        return translate(n);
      } catch (const std::exception &x) {
        return stringError(fmt::format("node '{}' (ONNX {}): cannot translate it: {}", n.name(),
                                       n.op_type(), x.what()));
      }
    }();
    if (error_) { // a tensor or node the translation added was refused
      if (e)
        llvm::consumeError(std::move(error_));
      else
        e = std::move(error_);
    }
    if (e) {
      untranslated.push_back(llvm::toString(std::move(e)));
      lost.insert(n.output().begin(), n.output().end());
    }
  }
  if (untranslated.size() == 1 && skipped == 0)
    return stringError(untranslated[0]);
  if (!untranslated.empty()) {
    std::string list;
    for (const std::string &u : untranslated)
      list += "\n  " + u;
    return stringError(fmt::format("{} nodes cannot be translated ({} more read their results):{}",
                                   untranslated.size(), skipped, list));
  }
  for (const onnx::ValueInfoProto &v : graph->output())
    g_.outputs.push_back(v.name());
  if (llvm::Error e = checkGraph(g_, lib_))
    return stringError("the imported graph does not check: " + llvm::toString(std::move(e)));
  return llvm::Expected<Graph>(std::move(g_));
}

} // namespace

llvm::Expected<Graph> importOnnxBytes(const std::string &bytes, const std::string &name,
                                      const OpLibrary &lib, const OnnxImportOptions &options) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return stringError(fmt::format("'{}' is not an ONNX model (protobuf parsing failed)", name));
  if (!model.has_graph())
    return stringError(fmt::format("'{}' has no graph", name));
  auto g = Importer(lib, options).run(model);
  if (!g)
    return stringError(fmt::format("{}: {}", name, llvm::toString(g.takeError())));
  return g;
}

llvm::Expected<Graph> importOnnx(const std::string &path, const OpLibrary &lib,
                                 const OnnxImportOptions &options) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return stringError(fmt::format("cannot open '{}'", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  return importOnnxBytes(bytes.str(), path, lib, options);
}

} // namespace tofu
