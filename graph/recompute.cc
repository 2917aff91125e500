// Recomputation as a graph rewrite (graph.h: applyRecomputation): a dropped forward tensor's
// backward readers read a copy of its node, declared just before the first of them.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/graph.h"
#include "graph/recompute.h"
#include "graph/training.h"

namespace tofu {

namespace {

/// The training graph's forward part: the node positions (in topological order) before the
/// first node whose result is a gradient. buildTrainingGraph declares every forward node
/// before the backward ones, and the order breaks ties by declaration.
struct ForwardPart {
  std::vector<unsigned> order;
  size_t backwardFrom = 0; ///< position of the first backward node (order.size() if none)
};

llvm::Expected<ForwardPart> forwardPart(const Graph &g) {
  auto order = g.topologicalOrder();
  if (!order)
    return order.takeError();
  ForwardPart f;
  f.order = std::move(*order);
  f.backwardFrom = f.order.size();
  for (size_t i = 0; i < f.order.size(); ++i)
    if (g.tensor(g.nodes()[f.order[i]].output)->role == TensorRole::Gradient) {
      f.backwardFrom = i;
      break;
    }
  return f;
}

/// Why a forward node's result cannot be dropped, or an empty string.
std::string notRecomputable(const Graph &g, const Node &n) {
  const TensorInfo *t = g.tensor(n.output);
  if (t->role != TensorRole::Activation)
    return fmt::format("it is a {}, not an activation", roleName(t->role));
  if (isStateUpdate(n.op))
    return "it updates state (" + n.op + ")";
  if (std::find(g.outputs.begin(), g.outputs.end(), n.output) != g.outputs.end())
    return "it is an output of the graph";
  return "";
}

} // namespace

namespace {

/// The candidates of the forward part `part` of `g`.
std::vector<RecomputeCandidate> candidatesOf(const Graph &g, const ForwardPart *part) {
  std::set<std::string> backwardReads;
  for (size_t i = part->backwardFrom; i < part->order.size(); ++i)
    for (const std::string &in : g.nodes()[part->order[i]].inputs)
      backwardReads.insert(in);
  // Each forward tensor's last forward reader (its position in the order).
  std::map<std::string, size_t> lastForwardRead;
  for (size_t i = 0; i < part->backwardFrom; ++i)
    for (const std::string &in : g.nodes()[part->order[i]].inputs)
      lastForwardRead[in] = i;
  std::vector<RecomputeCandidate> out;
  size_t spanEnd = 0; // the last forward read of any candidate before the current position
  for (size_t i = 0; i < part->backwardFrom; ++i) {
    const Node &n = g.nodes()[part->order[i]];
    if (!notRecomputable(g, n).empty())
      continue;
    const bool cut = spanEnd <= i;
    if (auto it = lastForwardRead.find(n.output); it != lastForwardRead.end())
      spanEnd = std::max(spanEnd, it->second);
    const TensorInfo *t = g.tensor(n.output);
    RecomputeCandidate c;
    c.tensor = n.output;
    c.node = n.name;
    c.readByBackward = backwardReads.count(n.output) > 0;
    c.cut = cut;
    c.elements = 1;
    for (int64_t e : t->shape)
      c.elements *= e;
    c.bytes = c.elements * (g.precision == Precision::BF16
                                ? elementTypeBytes(t->dtype)
                                : std::max<int64_t>(4, elementTypeBytes(t->dtype)));
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace

llvm::Expected<std::vector<RecomputeCandidate>> recomputeCandidates(const Graph &g) {
  auto part = forwardPart(g);
  if (!part)
    return part.takeError();
  if (part->backwardFrom == part->order.size())
    return std::vector<RecomputeCandidate>{};
  return candidatesOf(g, &*part);
}

llvm::Expected<std::vector<RecomputeCandidate>> forwardCandidates(const Graph &forward) {
  auto part = forwardPart(forward);
  if (!part)
    return part.takeError();
  part->backwardFrom = part->order.size(); // every node is of the forward pass
  return candidatesOf(forward, &*part);
}

llvm::Expected<RecomputeSummary> applyRecomputation(Graph &g,
                                                    const std::vector<std::string> &dropped) {
  RecomputeSummary summary;
  if (dropped.empty())
    return summary;
  auto part = forwardPart(g);
  if (!part)
    return part.takeError();
  std::map<std::string, size_t> position; // node name -> position in the order
  for (size_t i = 0; i < part->order.size(); ++i)
    position[g.nodes()[part->order[i]].name] = i;
  std::set<std::string> drop;
  for (const std::string &name : dropped) {
    const TensorInfo *t = g.tensor(name);
    if (!t)
      return stringError(fmt::format("cannot recompute '{}': the graph has no such tensor", name));
    const Node *n = g.producer(name);
    if (!n)
      return stringError(fmt::format("cannot recompute '{}': no node computes it (it is an {})",
                                     name, roleName(t->role)));
    if (position.at(n->name) >= part->backwardFrom)
      return stringError(fmt::format(
          "cannot recompute '{}': it is computed by the backward pass (node '{}'), not the forward",
          name, n->name));
    if (std::string why = notRecomputable(g, *n); !why.empty())
      return stringError(fmt::format("cannot recompute '{}': {}", name, why));
    drop.insert(name);
  }

  std::set<std::string> usedNames;
  for (const TensorInfo &t : g.tensors())
    usedNames.insert(t.name);
  for (const Node &n : g.nodes())
    usedNames.insert(n.name);
  std::vector<Node> nodes;                   // the new declaration order
  std::vector<TensorInfo> added;             // the copies' results
  std::map<std::string, std::string> copyOf; // dropped tensor -> its recomputed copy
  // The copy of dropped tensor `x`, declared now (after the copies of the dropped tensors its
  // node reads) unless it exists.
  std::function<std::string(const std::string &)> copy = [&](const std::string &x) {
    if (auto it = copyOf.find(x); it != copyOf.end())
      return it->second;
    Node n = *g.producer(x);
    for (std::string &in : n.inputs)
      if (drop.count(in))
        in = copy(in);
    n.name = freshName(n.name + "_recompute", usedNames);
    if (!n.coalesce.empty())
      n.coalesce += "/recompute";
    TensorInfo t = *g.tensor(x);
    t.name = freshName(x + "_recompute", usedNames);
    n.output = t.name;
    summary.bytes += t.shapeKnown ? [&] {
      int64_t e = 1;
      for (int64_t d : t.shape)
        e *= d;
      return e * elementTypeBytes(t.dtype);
    }()
                                  : 0;
    added.push_back(t);
    nodes.push_back(std::move(n));
    summary.copies.push_back({x, t.name});
    copyOf[x] = t.name;
    return t.name;
  };
  for (size_t i = 0; i < part->order.size(); ++i) {
    Node n = g.nodes()[part->order[i]];
    if (i >= part->backwardFrom)
      for (std::string &in : n.inputs)
        if (drop.count(in))
          in = copy(in);
    nodes.push_back(std::move(n));
  }
  summary.dropped.assign(drop.begin(), drop.end());
  // A dropped tensor that only the backward pass read is now read by nothing: its forward
  // node goes (the copy computes it), and so, in turn, does a dropped tensor only it read.
  std::set<std::string> gone;
  for (bool removed = true; removed;) {
    removed = false;
    std::map<std::string, unsigned> readers;
    for (const Node &n : nodes)
      for (const std::string &in : n.inputs)
        ++readers[in];
    for (size_t i = 0; i < nodes.size(); ++i)
      if (drop.count(nodes[i].output) && !readers.count(nodes[i].output)) {
        gone.insert(nodes[i].output);
        nodes.erase(nodes.begin() + static_cast<long>(i));
        ++summary.removed;
        removed = true;
        break;
      }
  }

  Graph out = g.withoutNodes();
  for (const TensorInfo &t : g.tensors())
    if (gone.count(t.name) == 0)
      if (llvm::Error e = out.addTensor(t))
        return llvm::Expected<RecomputeSummary>(std::move(e));
  for (TensorInfo &t : added)
    if (llvm::Error e = out.addTensor(std::move(t)))
      return llvm::Expected<RecomputeSummary>(std::move(e));
  for (Node &n : nodes)
    if (llvm::Error e = out.addNode(std::move(n)))
      return llvm::Expected<RecomputeSummary>(std::move(e));
  g = std::move(out);
  return summary;
}

std::vector<std::string> segmentCheckpoints(const std::vector<RecomputeCandidate> &candidates) {
  // Chen et al.'s sqrt(n) checkpointing: the forward chain cut into segments of about
  // sqrt(n) tensors; each segment's last tensor is kept, the rest are recomputed from the
  // previous checkpoint when the backward pass reaches the segment.
  std::vector<std::string> dropped;
  const size_t n = candidates.size();
  if (n < 2)
    return dropped;
  size_t s = 1;
  while (s * s < n)
    ++s;
  for (size_t i = 0; i < n; ++i)
    if ((i + 1) % s != 0)
      dropped.push_back(candidates[i].tensor);
  return dropped;
}

} // namespace tofu
