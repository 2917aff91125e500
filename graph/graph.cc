// Graph construction, validation with shape inference, topological order, JSON.
#include "graph/graph.h"

#include "analysis/checked.h"

#include <algorithm>
#include <queue>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/json_at.h"

namespace tofu {

std::string freshName(const std::string &base, std::set<std::string> &used) {
  std::string name = base;
  for (int k = 2; used.count(name); ++k)
    name = fmt::format("{}_{}", base, k);
  used.insert(name);
  return name;
}

namespace {

std::string shapeString(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

} // namespace

const char *roleName(TensorRole r) {
  switch (r) {
  case TensorRole::Input:
    return "input";
  case TensorRole::Weight:
    return "weight";
  case TensorRole::Activation:
    return "activation";
  case TensorRole::Gradient:
    return "gradient";
  case TensorRole::OptimizerState:
    return "optimizer_state";
  }
  return "?";
}

std::optional<TensorRole> parseRole(const std::string &s) {
  for (TensorRole r : {TensorRole::Input, TensorRole::Weight, TensorRole::Activation,
                       TensorRole::Gradient, TensorRole::OptimizerState})
    if (s == roleName(r))
      return r;
  return std::nullopt;
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t e : shape)
    n *= e;
  return n;
}

int64_t TensorInfo::bytes() const { return elements() * elementTypeBytes(dtype); }

llvm::Error Graph::addTensor(TensorInfo t) {
  if (t.name.empty())
    return stringError("a tensor needs a name");
  if (tensorIndex_.count(t.name))
    return stringError(fmt::format("tensor '{}' is declared twice", t.name));
  for (int64_t e : t.shape)
    if (e <= 0)
      return stringError(
          fmt::format("tensor '{}' has a non-positive extent in {}", t.name, shapeString(t.shape)));
  tensorIndex_[t.name] = static_cast<unsigned>(tensors_.size());
  tensors_.push_back(std::move(t));
  return llvm::Error::success();
}

llvm::Error Graph::addNode(Node n) {
  if (n.name.empty())
    return stringError("a node needs a name");
  if (nodeIndex_.count(n.name))
    return stringError(fmt::format("node '{}' is declared twice", n.name));
  if (n.output.empty())
    return stringError(fmt::format("node '{}' has no output", n.name));
  if (auto it = producerIndex_.find(n.output); it != producerIndex_.end())
    return stringError(fmt::format("node '{}': tensor '{}' is already produced by node '{}'",
                                   n.name, n.output, nodes_[it->second].name));
  if (!tensorIndex_.count(n.output)) {
    TensorInfo t;
    t.name = n.output;
    if (llvm::Error e = addTensor(std::move(t)))
      return e;
  }
  unsigned index = static_cast<unsigned>(nodes_.size());
  producerIndex_[n.output] = index;
  nodeIndex_[n.name] = index;
  nodes_.push_back(std::move(n));
  return llvm::Error::success();
}

Graph Graph::withoutNodes() const {
  Graph g = *this;
  g.tensors_.clear();
  g.nodes_.clear();
  g.tensorIndex_.clear();
  g.producerIndex_.clear();
  g.nodeIndex_.clear();
  return g;
}

const TensorInfo *Graph::tensor(const std::string &name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

TensorInfo *Graph::tensor(const std::string &name) {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

const Node *Graph::producer(const std::string &tensor) const {
  auto it = producerIndex_.find(tensor);
  return it == producerIndex_.end() ? nullptr : &nodes_[it->second];
}

llvm::Expected<std::vector<unsigned>> Graph::topologicalOrder() const {
  std::vector<unsigned> indegree(nodes_.size(), 0);
  std::vector<std::vector<unsigned>> users(nodes_.size());
  for (unsigned i = 0; i < nodes_.size(); ++i)
    for (const std::string &in : nodes_[i].inputs)
      if (auto it = producerIndex_.find(in); it != producerIndex_.end()) {
        users[it->second].push_back(i);
        ++indegree[i];
      }
  // Kahn's algorithm; ties broken by declaration order, so the order is deterministic.
  std::priority_queue<unsigned, std::vector<unsigned>, std::greater<unsigned>> ready;
  for (unsigned i = 0; i < nodes_.size(); ++i)
    if (indegree[i] == 0)
      ready.push(i);
  std::vector<unsigned> order;
  while (!ready.empty()) {
    unsigned n = ready.top();
    ready.pop();
    order.push_back(n);
    for (unsigned u : users[n])
      if (--indegree[u] == 0)
        ready.push(u);
  }
  if (order.size() != nodes_.size())
    for (unsigned i = 0; i < nodes_.size(); ++i)
      if (indegree[i] != 0)
        return stringError(fmt::format("node '{}' is on a cycle", nodes_[i].name));
  return order;
}

/// An error about node `n`, naming it and its op.
llvm::Error nodeError(const Node &n, const std::string &msg) {
  return stringError(fmt::format("node '{}' (op {}): {}", n.name, n.op, msg));
}

llvm::Expected<NodeInstance> instantiateNode(const Graph &g, const Node &n, const OpLibrary &lib) {
  auto where = [&](const std::string &msg) { return nodeError(n, msg); };
  const ir::OpDef *op = lib.find(n.op);
  if (!op)
    return where(fmt::format("unknown op '{}'", n.op));
  if (n.inputs.size() != op->inputs.size())
    return where(fmt::format("op {} takes {} inputs but the node gives {}", n.op, op->inputs.size(),
                             n.inputs.size()));
  Instantiation inst;
  inst.attrs = n.attrs;
  inst.groups = n.groups;
  std::vector<std::vector<int64_t>> shapes;
  for (const std::string &in : n.inputs) {
    const TensorInfo *t = g.tensor(in);
    if (!t)
      return where(fmt::format("input tensor '{}' does not exist", in));
    if (!t->shapeKnown)
      return where(fmt::format("the shape of input '{}' is unknown", in));
    inst.inputRanks.push_back(static_cast<unsigned>(t->shape.size()));
    shapes.push_back(t->shape);
  }
  auto instOp = instantiate(*op, inst);
  if (!instOp)
    return where(llvm::toString(instOp.takeError()));
  return NodeInstance{std::move(*instOp), std::move(shapes)};
}

llvm::Error inferNode(Graph &g, const Node &n, const OpLibrary &lib) {
  auto where = [&](const std::string &msg) { return nodeError(n, msg); };
  auto inst = instantiateNode(g, n, lib);
  if (!inst)
    return inst.takeError();
  const InstOp *instOp = &inst->op;
  const std::vector<std::vector<int64_t>> &shapes = inst->inputShapes;
  TensorInfo *out = g.tensor(n.output);
  std::optional<std::vector<int64_t>> declared;
  if (out->shapeKnown)
    declared = out->shape;
  if (auto byClause = instOp->outputShape(shapes); byClause && declared && *byClause != *declared)
    return where(fmt::format("output '{}' is declared {} but the op's shape clause gives {}",
                             n.output, shapeString(*declared), shapeString(*byClause)));
  auto concrete = concreteShapes(*instOp, shapes, declared);
  if (!concrete)
    return where(llvm::toString(concrete.takeError()));
  std::vector<int64_t> inferred;
  for (unsigned v : instOp->outputVars)
    inferred.push_back(concrete->vars[v]);
  out->shape = inferred;
  out->shapeKnown = true;
  return llvm::Error::success();
}

namespace {
/// Every tensor's size, and all of them together, inside kMaxGraphBytes (analysis/checked.h):
/// later sums of byte counts cannot overflow. Tensors whose shape is not known yet are
/// skipped.
llvm::Error checkSizes(const Graph &g) {
  int64_t total = 0;
  for (const TensorInfo &t : g.tensors()) {
    if (!t.shapeKnown)
      continue;
    auto elements = checkedProduct(t.shape);
    auto bytes = elements ? checkedMul(*elements, elementTypeBytes(t.dtype)) : std::nullopt;
    if (!bytes || *bytes > kMaxGraphBytes)
      return stringError(fmt::format("tensor '{}' of shape [{}] holds more than {} bytes (1 PiB), "
                                     "the most a graph may hold",
                                     t.name, fmt::join(t.shape, ", "), kMaxGraphBytes));
    total += *bytes;
    if (total > kMaxGraphBytes)
      return stringError(fmt::format("the graph's tensors hold more than {} bytes (1 PiB) "
                                     "together, the most a graph may hold (at tensor '{}')",
                                     kMaxGraphBytes, t.name));
  }
  return llvm::Error::success();
}
} // namespace

llvm::Error checkGraph(Graph &g, const OpLibrary &lib) {
  if (llvm::Error e = checkSizes(g))
    return e;
  for (const TensorInfo &t : g.tensors()) {
    const Node *p = g.producer(t.name);
    if (!p && (t.role == TensorRole::Activation || t.role == TensorRole::Gradient))
      return stringError(
          fmt::format("tensor '{}' ({}) is produced by no node", t.name, roleName(t.role)));
    if (p && (t.role == TensorRole::Input || t.role == TensorRole::Weight))
      return stringError(fmt::format("tensor '{}' is a {} but node '{}' produces it", t.name,
                                     roleName(t.role), p->name));
    if (!p && !t.shapeKnown)
      return stringError(fmt::format("tensor '{}' ({}) needs a shape", t.name, roleName(t.role)));
    if (p && t.shapeKnown && t.role == TensorRole::Gradient)
      continue; // a gradient declares its input's shape; the producer's inference checks it
  }
  for (const std::string &o : g.outputs)
    if (!g.tensor(o))
      return stringError(fmt::format("graph output '{}' is not a tensor of the graph", o));
  auto order = g.topologicalOrder();
  if (!order)
    return order.takeError();
  for (unsigned index : *order)
    if (llvm::Error e = inferNode(g, g.nodes()[index], lib))
      return e;
  return checkSizes(g);
}

using nlohmann::json;

llvm::Expected<Graph> graphFromJson(const std::string &text) {
  auto parsed = parseJson(text, "graph JSON");
  if (!parsed)
    return parsed.takeError();
  const json &j = *parsed;
  Graph g;
  const JsonAt top{j, "the top level", "graph JSON"};
  if (llvm::Error e =
          top.object({"tensors", "nodes", "outputs", "precision"}, {"tensors", "nodes"}))
    return std::move(e);
  if (j.contains("precision")) {
    std::string name;
    if (llvm::Error e = top.optionalString("precision", &name))
      return std::move(e);
    auto p = precisionNamed(name);
    if (!p)
      return top["precision"].fail(fmt::format("unknown precision '{}' (fp32 or bf16)", name));
    g.precision = *p;
  }
  const JsonAt tensors{j.at("tensors"), "tensors", "graph JSON"},
      nodes{j.at("nodes"), "nodes", "graph JSON"};
  if (llvm::Error e = tensors.array())
    return std::move(e);
  if (llvm::Error e = nodes.array())
    return std::move(e);
  for (size_t i = 0; i < tensors.v.size(); ++i) {
    const JsonAt t = tensors[i];
    if (llvm::Error e = t.object({"name", "shape", "dtype", "role", "group"}, {"name"}))
      return std::move(e);
    TensorInfo info;
    std::string role = roleName(info.role);
    std::string dtype = elementTypeName(info.dtype);
    for (auto [key, field] : {std::pair<const char *, std::string *>{"name", &info.name},
                              {"dtype", &dtype},
                              {"group", &info.group},
                              {"role", &role}})
      if (llvm::Error e = t.optionalString(key, field))
        return std::move(e);
    if (t.v.contains("shape")) {
      const JsonAt shape = t["shape"];
      if (llvm::Error e = shape.array())
        return std::move(e);
      for (size_t d = 0; d < shape.v.size(); ++d) {
        auto n = shape[d].integer();
        if (!n)
          return n.takeError();
        if (*n <= 0)
          return shape[d].fail(fmt::format("an extent must be positive, not {}", *n));
        info.shape.push_back(*n);
      }
      info.shapeKnown = true;
    }
    const std::optional<ElementType> type = elementTypeNamed(dtype);
    if (!type)
      return t["dtype"].fail(
          fmt::format("unknown dtype '{}' (one of: {})", dtype, elementTypeNames()));
    info.dtype = *type;
    auto r = parseRole(role);
    if (!r)
      return t["role"].fail(fmt::format("tensor '{}' has unknown role '{}'", info.name, role));
    info.role = *r;
    if (llvm::Error e = g.addTensor(std::move(info)))
      return t.fail(llvm::toString(std::move(e)));
  }
  for (size_t i = 0; i < nodes.v.size(); ++i) {
    const JsonAt jn = nodes[i];
    if (llvm::Error e =
            jn.object({"name", "op", "group", "coalesce", "attrs", "groups", "inputs", "output"},
                      {"name", "op", "output"}))
      return std::move(e);
    Node n;
    for (auto [key, field] : {std::pair<const char *, std::string *>{"name", &n.name},
                              {"op", &n.op},
                              {"group", &n.group},
                              {"coalesce", &n.coalesce},
                              {"output", &n.output}})
      if (llvm::Error e = jn.optionalString(key, field))
        return std::move(e);
    for (auto [key, field] :
         {std::pair<const char *, std::map<std::string, int64_t> *>{"attrs", &n.attrs},
          {"groups", &n.groups}}) {
      if (!jn.v.contains(key))
        continue;
      auto m = jn[key].integers();
      if (!m)
        return m.takeError();
      *field = std::move(*m);
    }
    if (jn.v.contains("inputs")) {
      auto inputs = jn["inputs"].strings();
      if (!inputs)
        return inputs.takeError();
      n.inputs = std::move(*inputs);
    }
    if (llvm::Error e = g.addNode(std::move(n)))
      return jn.fail(llvm::toString(std::move(e)));
  }
  if (j.contains("outputs")) {
    auto outputs = JsonAt{j.at("outputs"), "outputs", "graph JSON"}.strings();
    if (!outputs)
      return outputs.takeError();
    g.outputs = std::move(*outputs);
  }
  if (g.nodes().empty())
    return stringError("graph JSON: the graph has no nodes: nothing to plan");
  return llvm::Expected<Graph>(std::move(g));
}

std::string graphToJson(const Graph &g) {
  using json = nlohmann::ordered_json;
  json j;
  json tensors = json::array();
  for (const TensorInfo &t : g.tensors()) {
    json jt;
    jt["name"] = t.name;
    if (t.shapeKnown)
      jt["shape"] = t.shape;
    jt["dtype"] = elementTypeName(t.dtype);
    jt["role"] = roleName(t.role);
    if (!t.group.empty())
      jt["group"] = t.group;
    tensors.push_back(jt);
  }
  json nodes = json::array();
  for (const Node &n : g.nodes()) {
    json jn;
    jn["name"] = n.name;
    jn["op"] = n.op;
    if (!n.group.empty())
      jn["group"] = n.group;
    if (!n.coalesce.empty())
      jn["coalesce"] = n.coalesce;
    jn["attrs"] = json::object();
    for (const auto &[k, v] : n.attrs)
      jn["attrs"][k] = v;
    jn["groups"] = json::object();
    for (const auto &[k, v] : n.groups)
      jn["groups"][k] = v;
    jn["inputs"] = n.inputs;
    jn["output"] = n.output;
    nodes.push_back(jn);
  }
  j["tensors"] = tensors;
  j["nodes"] = nodes;
  j["outputs"] = g.outputs;
  if (g.precision != Precision::FP32)
    j["precision"] = precisionName(g.precision);
  return j.dump(2) + "\n";
}

} // namespace tofu
