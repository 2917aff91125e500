// Graph construction, validation with shape inference, topological order, JSON.
#include "graph/graph.h"

#include <queue>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace tofu {

int64_t dtypeSize(const std::string &dtype) {
  if (dtype == "float64" || dtype == "int64")
    return 8;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16")
    return 2;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool")
    return 1;
  return 4;
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

int64_t TensorInfo::bytes() const { return elements() * dtypeSize(dtype); }

llvm::Error Graph::addTensor(TensorInfo t) {
  if (t.name.empty())
    return stringError("a tensor needs a name");
  if (tensorIndex_.count(t.name))
    return stringError(fmt::format("tensor '{}' is declared twice", t.name));
  for (int64_t e : t.shape)
    if (e <= 0)
      return stringError(fmt::format("tensor '{}' has a non-positive extent in {}", t.name,
                              shapeString(t.shape)));
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
    return stringError(fmt::format("node '{}': tensor '{}' is already produced by node '{}'", n.name,
                            n.output, nodes_[it->second].name));
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
    return where(fmt::format("op {} takes {} inputs but the node gives {}", n.op,
                             op->inputs.size(), n.inputs.size()));
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

llvm::Error checkGraph(Graph &g, const OpLibrary &lib) {
  for (const TensorInfo &t : g.tensors()) {
    const Node *p = g.producer(t.name);
    if (!p && (t.role == TensorRole::Activation || t.role == TensorRole::Gradient))
      return stringError(fmt::format("tensor '{}' ({}) is produced by no node", t.name,
                              roleName(t.role)));
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
  return llvm::Error::success();
}

llvm::Expected<Graph> graphFromJson(const std::string &text) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error &e) {
    return stringError(fmt::format("graph JSON: {}", e.what()));
  }
  Graph g;
  try {
    if (!j.is_object())
      return stringError("graph JSON: the top level must be an object");
    for (const json &t : j.value("tensors", json::array())) {
      TensorInfo info;
      info.name = t.at("name").get<std::string>();
      if (t.contains("shape")) {
        info.shape = t["shape"].get<std::vector<int64_t>>();
        info.shapeKnown = true;
      }
      info.dtype = t.value("dtype", std::string("float32"));
      info.group = t.value("group", std::string());
      std::string role = t.value("role", std::string("activation"));
      auto r = parseRole(role);
      if (!r)
        return stringError(fmt::format("graph JSON: tensor '{}' has unknown role '{}'", info.name, role));
      info.role = *r;
      if (llvm::Error e = g.addTensor(std::move(info)))
        return stringError("graph JSON: " + llvm::toString(std::move(e)));
    }
    for (const json &jn : j.value("nodes", json::array())) {
      Node n;
      n.name = jn.at("name").get<std::string>();
      n.op = jn.at("op").get<std::string>();
      n.group = jn.value("group", std::string());
      n.coalesce = jn.value("coalesce", std::string());
      json attrs = jn.value("attrs", json::object());
      for (auto it = attrs.begin(); it != attrs.end(); ++it)
        n.attrs[it.key()] = it.value().get<int64_t>();
      json groups = jn.value("groups", json::object());
      for (auto it = groups.begin(); it != groups.end(); ++it)
        n.groups[it.key()] = it.value().get<int64_t>();
      n.inputs = jn.value("inputs", std::vector<std::string>{});
      n.output = jn.at("output").get<std::string>();
      if (llvm::Error e = g.addNode(std::move(n)))
        return stringError("graph JSON: " + llvm::toString(std::move(e)));
    }
    g.outputs = j.value("outputs", std::vector<std::string>{});
  } catch (const json::exception &e) {
    return stringError(fmt::format("graph JSON: {}", e.what()));
  }
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
    jt["dtype"] = t.dtype;
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
  return j.dump(2) + "\n";
}

} // namespace tofu
