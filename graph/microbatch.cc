// The microbatched forward graph (microbatch.h).
#include "graph/microbatch.h"

#include <map>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/training.h"

namespace tofu {

std::string microbatchSuffix(unsigned m) { return fmt::format("@mb{}", m); }

std::optional<std::pair<std::string, unsigned>> splitMicrobatch(const std::string &name) {
  const size_t at = name.rfind("@mb");
  if (at == std::string::npos || at + 3 == name.size())
    return std::nullopt;
  unsigned m = 0;
  for (size_t i = at + 3; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return std::nullopt;
    m = m * 10 + static_cast<unsigned>(name[i] - '0');
  }
  return std::pair{name.substr(0, at), m};
}

namespace {

/// The axis along which `micro`'s shape is `full`'s split `m` ways, or -1.
int batchAxis(const std::vector<int64_t> &full, const std::vector<int64_t> &micro, unsigned m) {
  if (full.size() != micro.size())
    return -1;
  int axis = -1;
  for (size_t d = 0; d < full.size(); ++d) {
    if (full[d] == micro[d])
      continue;
    if (axis >= 0 || full[d] != micro[d] * static_cast<int64_t>(m))
      return -1;
    axis = static_cast<int>(d);
  }
  return axis;
}

std::string shapeText(const std::vector<int64_t> &s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

} // namespace

llvm::Expected<Graph> microbatchGraph(const Graph &full, const Graph &micro, unsigned m,
                                      const OpLibrary &lib) {
  if (m < 2)
    return stringError("microbatches: at least 2 are needed to split a batch");
  if (full.outputs.size() != 1 || micro.outputs.size() != 1 || full.outputs != micro.outputs)
    return stringError("microbatches: the step needs its loss as its one output");
  auto order = micro.topologicalOrder();
  if (!order)
    return order.takeError();
  Graph g = full.withoutNodes();
  for (const TensorInfo &t : full.tensors())
    if (!full.producer(t.name))
      if (llvm::Error e = g.addTensor(t))
        return std::move(e);
  // Each input of the batch: the axis it is sliced along, and the group of its first reader
  // (the slice runs with it).
  std::map<std::string, int> sliced;
  std::map<std::string, std::string> firstReader;
  for (unsigned i : *order)
    for (const std::string &in : micro.nodes()[i].inputs)
      if (!firstReader.count(in)) {
        const Node &n = micro.nodes()[i];
        firstReader[in] = n.group.empty() ? n.name : n.group;
      }
  for (const TensorInfo &t : micro.tensors()) {
    if (micro.producer(t.name))
      continue;
    const TensorInfo *whole = full.tensor(t.name);
    if (!whole)
      return stringError(fmt::format("microbatches: '{}' of the model at batch B/M is not a "
                                     "tensor of the model at batch B",
                                     t.name));
    if (whole->shape == t.shape)
      continue;
    const int axis = batchAxis(whole->shape, t.shape, m);
    if (axis < 0 || t.role != TensorRole::Input)
      return stringError(fmt::format(
          "microbatches: the {} '{}' is {} at the full batch and {} at 1/{} of it: not one "
          "axis split {} ways, so the batch cannot be cut into microbatches",
          roleName(whole->role), t.name, shapeText(whole->shape), shapeText(t.shape), m, m));
    sliced[t.name] = axis;
  }
  const std::string loss = micro.outputs[0];
  std::vector<std::pair<std::string, double>> terms(m);
  for (unsigned c = m; c-- > 0;) {
    const std::string suffix = microbatchSuffix(c);
    auto renamed = [&](const std::string &name) {
      return micro.producer(name) || sliced.count(name) ? name + suffix : name;
    };
    for (const auto &[name, axis] : sliced) {
      const TensorInfo &whole = *full.tensor(name);
      const int64_t n = micro.tensor(name)->shape[axis];
      TensorInfo t = *micro.tensor(name);
      t.name = name + suffix;
      t.role = TensorRole::Activation;
      t.group = firstReader[name] + suffix;
      if (llvm::Error e = g.addTensor(t))
        return std::move(e);
      Node s;
      s.name = "slice_" + name + suffix;
      s.group = t.group;
      s.op = "Slice";
      s.attrs = {{"start", n * c}, {"n", n}, {"step", 1}, {"m", whole.shape[axis]}};
      s.groups = {{"pre", axis}, {"post", static_cast<int64_t>(whole.shape.size()) - axis - 1}};
      s.inputs = {name};
      s.output = t.name;
      if (llvm::Error e = g.addNode(std::move(s)))
        return std::move(e);
    }
    for (unsigned i : *order) {
      const Node &src = micro.nodes()[i];
      // One update of the running statistics per step: the first microbatch's.
      if (c > 0 && isRunningStatistic(src.op) && carriesState(micro, src))
        continue;
      TensorInfo t = *micro.tensor(src.output);
      t.name = src.output + suffix;
      t.group = (t.group.empty() ? src.output : t.group) + suffix;
      if (llvm::Error e = g.addTensor(t))
        return std::move(e);
      Node n = src;
      n.name = src.name + suffix;
      n.group = (src.group.empty() ? src.name : src.group) + suffix;
      if (!n.coalesce.empty())
        n.coalesce += suffix;
      for (std::string &in : n.inputs)
        in = renamed(in);
      n.output = t.name;
      if (llvm::Error e = g.addNode(std::move(n)))
        return std::move(e);
    }
    terms[c] = {loss + suffix, 1.0 / m};
  }
  auto mean = addWeightedSum(g, lib, terms, loss + "_microbatches");
  if (!mean)
    return mean.takeError();
  g.outputs = {*mean};
  if (llvm::Error e = checkGraph(g, lib))
    return std::move(e);
  return g;
}

} // namespace tofu
