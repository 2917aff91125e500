// ONNX import through Debian's libonnx: protobuf parsing, shape inference, node translation.
#include "graph/onnx_import.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "fmt/format.h"
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
  return out;
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
  std::vector<std::string> in(n.input().begin(), n.input().end());
  while (!in.empty() && in.back().empty())
    in.pop_back(); // optional inputs left out
  if (n.output_size() < 1)
    return where("has no output");
  const std::string out = n.output(0);
  for (const std::string &i : in)
    if (!g_.tensor(i))
      return where(fmt::format("input '{}' is not produced before it", i));
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
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const auto &a = shapeOf(in[0]), &b = shapeOf(in[1]);
    if (a == b) {
      node(name, op, {in[0], in[1]}, {}, {}, out);
      return llvm::Error::success();
    }
    if (b.size() < a.size() && std::equal(b.begin(), b.end(), a.end() - b.size())) {
      node(name, op + "Bcast", {in[0], in[1]}, {},
           {{"p", static_cast<int64_t>(a.size() - b.size())}, {"i", static_cast<int64_t>(b.size())}},
           out);
      return llvm::Error::success();
    }
    return where("this broadcast (size-1 dimensions, or the first operand the smaller) is not "
                 "translated yet");
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

llvm::Expected<Graph> Importer::run(onnx::ModelProto &model) {
  onnx::GraphProto *graph = model.mutable_graph();
  // Symbolic dimensions (a dynamic batch) become the batch size.
  for (onnx::ValueInfoProto &v : *graph->mutable_input())
    if (v.type().has_tensor_type())
      for (auto &dim : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
        if (!dim.has_dim_value())
          dim.set_dim_value(options_.batch);
  try {
    onnx::shape_inference::InferShapes(model);
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
  for (const onnx::NodeProto &n : graph->node()) {
    if (llvm::Error e = translate(n))
      return llvm::Expected<Graph>(std::move(e));
    if (error_)
      return std::move(error_);
  }
  for (const onnx::ValueInfoProto &v : graph->output())
    g_.outputs.push_back(v.name());
  if (llvm::Error e = checkGraph(g_, lib_))
    return stringError("the imported graph does not check: " + llvm::toString(std::move(e)));
  return llvm::Expected<Graph>(std::move(g_));
}

} // namespace

llvm::Expected<Graph> importOnnx(const std::string &path, const OpLibrary &lib,
                                 const OnnxImportOptions &options) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return stringError(fmt::format("cannot open '{}'", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes.str()))
    return stringError(fmt::format("'{}' is not an ONNX model (protobuf parsing failed)", path));
  if (!model.has_graph())
    return stringError(fmt::format("'{}' has no graph", path));
  auto g = Importer(lib, options).run(model);
  if (!g)
    return stringError(fmt::format("{}: {}", path, llvm::toString(g.takeError())));
  return g;
}

} // namespace tofu
