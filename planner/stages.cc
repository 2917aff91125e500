// Pipeline stages (stages.h): layers, the schedule, each node's chunk, the stages' searches
// and the execution plan that puts them side by side.
#include "planner/stages.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/microbatch.h"
#include "graph/recompute.h"
#include "graph/training.h"
#include "planner/memory_fit.h"
#include "support/errors.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace tofu {

const char *scheduleName(Schedule s) { return s == Schedule::GPipe ? "gpipe" : "1f1b"; }

std::optional<Schedule> scheduleNamed(const std::string &name) {
  if (name == "gpipe")
    return Schedule::GPipe;
  if (name == "1f1b")
    return Schedule::OneFOneB;
  return std::nullopt;
}

llvm::Error applyAlgorithmChoice(const AlgorithmChoice &c, PlanOptions &search, StageSpec *stages,
                                 const SettingNames &names) {
  search.algorithm = c.algorithm;
  if (c.algorithm == Algorithm::Placement) { // a layer per worker in turn, each its own group
    if (!stages)
      return usageError(names("algo") + " placement: this tool plans no pipeline stages");
    stages->stages = std::max(1u, search.workers);
    if (!c.microbatchesGiven)
      stages->microbatches = stages->stages;
  }
  if (stages && stages->automatic && (!c.megatron.empty() || c.algorithm == Algorithm::Placement))
    return usageError(
        fmt::format("{} auto chooses the stages: {} fixes them", names("stages"),
                    c.megatron.empty() ? names("algo") + " placement" : names("megatron")));
  if (c.megatron.empty())
    return llvm::Error::success();
  const std::string megatron = names("megatron");
  if (c.algorithmGiven && c.algorithm != Algorithm::Megatron)
    return usageError(fmt::format("{} configures {} megatron, not {} {}", megatron, names("algo"),
                                  names("algo"), algorithmName(c.algorithm)));
  llvm::SmallVector<llvm::StringRef, 3> parts;
  llvm::StringRef(c.megatron).split(parts, ',');
  unsigned v[3] = {0, 0, 0};
  if (parts.size() != 3 || llvm::any_of(parts, [](llvm::StringRef x) {
        unsigned n = 0;
        return x.trim().getAsInteger(10, n) || n == 0;
      }))
    return usageError(
        fmt::format("{} '{}': give TP,PP,DP, three positive integers", megatron, c.megatron));
  for (int k = 0; k < 3; ++k)
    parts[k].trim().getAsInteger(10, v[k]);
  const auto [tp, pp, dp] = std::tuple{v[0], v[1], v[2]};
  if (search.workers == 0) // (tofu-plan --fit: the count is what is searched)
    return usageError(fmt::format("{} {}: TP x PP x DP fixes the workers at {}: a search for the "
                                  "fewest that fit has no count to choose",
                                  megatron, c.megatron, uint64_t(tp) * pp * dp));
  if (uint64_t(tp) * pp * dp != search.workers)
    return usageError(fmt::format("{} {}: TP x PP x DP is {}, not the {} workers", megatron,
                                  c.megatron, uint64_t(tp) * pp * dp, search.workers));
  if (pp > 1) {
    if (!stages)
      return usageError(fmt::format("{} {}: this tool plans no pipeline stages (PP = {})", megatron,
                                    c.megatron, pp));
    if (c.stagesGiven && stages->stages != pp)
      return usageError(fmt::format("{} {} has {} pipeline stages and {} {}", megatron, c.megatron,
                                    pp, names("stages"), stages->stages));
    // Megatron's pipeline: PP stages under 1F1B, TP x DP inside each.
    stages->stages = pp;
    if (!c.microbatchesGiven)
      stages->microbatches = pp;
  }
  setMegatronSteps(search, tp, dp);
  return llvm::Error::success();
}

llvm::Error parseStages(const std::string &text, StageSpec &spec) {
  if (text == "auto") {
    spec.automatic = true;
    spec.stages = 1;
    spec.layers.clear();
    return llvm::Error::success();
  }
  std::vector<unsigned> counts;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos)
      comma = text.size();
    const std::string item = text.substr(at, comma - at);
    char *end = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || v > 100000)
      return stringError(fmt::format(
          "--stages '{}': give a number of stages (2), each stage's layers by commas (3,5), or "
          "auto; "
          "'{}' is not a positive count",
          text, item));
    counts.push_back(static_cast<unsigned>(v));
    at = comma + 1;
  }
  spec.layers.clear();
  if (counts.size() == 1) {
    spec.stages = counts[0];
  } else {
    spec.stages = static_cast<unsigned>(counts.size());
    spec.layers = counts;
  }
  return llvm::Error::success();
}

llvm::Expected<Layers> forwardLayers(const Graph &forward) {
  auto candidates = forwardCandidates(forward);
  if (!candidates)
    return candidates.takeError();
  std::set<std::string> cuts;
  for (const RecomputeCandidate &c : *candidates)
    if (c.cut)
      cuts.insert(c.tensor);
  auto order = forward.topologicalOrder();
  if (!order)
    return order.takeError();
  Layers l;
  l.ends.push_back("");
  for (size_t i = 0; i < order->size(); ++i) {
    const Node &n = forward.nodes()[(*order)[i]];
    l.ofNode[n.name] = l.count() - 1;
    if (cuts.count(n.output) && i + 1 < order->size()) {
      l.ends.back() = n.output;
      l.ends.push_back("");
    }
  }
  return l;
}

llvm::Expected<Layers> weightLayers(const Graph &forward) {
  auto order = forward.topologicalOrder();
  if (!order)
    return order.takeError();
  // The weights' groups: union-find over the weights each op reads together.
  std::map<std::string, std::string> parent;
  std::function<std::string(const std::string &)> root = [&](const std::string &w) {
    auto it = parent.find(w);
    if (it == parent.end() || it->second == w)
      return w;
    return it->second = root(it->second);
  };
  auto isWeight = [&](const std::string &t) {
    const TensorInfo *info = forward.tensor(t);
    return info && info->role == TensorRole::Weight && !forward.producer(t);
  };
  for (const Node &n : forward.nodes()) {
    std::string first;
    for (const std::string &in : n.inputs)
      if (isWeight(in)) {
        parent.emplace(in, in);
        if (first.empty())
          first = root(in);
        else if (root(in) != first)
          parent[root(in)] = first;
      }
  }
  Layers l;
  std::map<std::string, unsigned> groupLayer; // a weight group's root -> its layer
  std::map<std::string, unsigned> tensorLayer;
  for (unsigned i : *order) {
    const Node &n = forward.nodes()[i];
    unsigned layer = 0;
    for (const std::string &in : n.inputs) {
      if (isWeight(in)) {
        auto it = groupLayer.emplace(root(in), static_cast<unsigned>(groupLayer.size())).first;
        layer = std::max(layer, it->second);
      } else if (auto it = tensorLayer.find(in); it != tensorLayer.end()) {
        layer = std::max(layer, it->second);
      }
    }
    l.ofNode[n.name] = layer; // ops ahead of the first weight: with it, in layer 0
    tensorLayer[n.output] = layer;
  }
  l.ends.assign(std::max<size_t>(1, groupLayer.size()), "");
  return l;
}

std::string StagedPlan::describe() const {
  const unsigned per = stages.empty() ? 1 : stages[0].workers;
  const std::string once = reducedOnce == 0 ? std::string()
                                            : fmt::format(", {} gradient{} reduced once a step",
                                                          reducedOnce, reducedOnce == 1 ? "" : "s");
  if (spec.roundRobin)
    return fmt::format(
        "placement: {} layers round-robin on {} {}{}{}, {} microbatch{}, {}{}", layers, spec.stages,
        per == 1 ? "worker" : "groups of workers",
        per == 1 ? (spec.stages == 1 ? "" : "s") : fmt::format(" ({} each)", per),
        layers < spec.stages ? fmt::format(" ({} idle)", spec.stages - layers) : std::string(),
        spec.microbatches, spec.microbatches == 1 ? "" : "es", scheduleName(spec.schedule), once);
  return fmt::format("{} stage{} x {} worker{}, {} microbatch{}, {}{}", spec.stages,
                     spec.stages == 1 ? "" : "s", per, per == 1 ? "" : "s", spec.microbatches,
                     spec.microbatches == 1 ? "" : "es", scheduleName(spec.schedule), once);
}

std::vector<Chunk> scheduleChunks(Schedule s, unsigned stages, unsigned microbatches) {
  const unsigned S = stages, M = microbatches;
  // Each stage's chunks in the order it runs them.
  std::vector<std::vector<Chunk>> seq(S);
  for (unsigned st = 0; st < S; ++st) {
    auto f = [&](unsigned m) { seq[st].push_back({ChunkPhase::Forward, st, m, 0}); };
    auto b = [&](unsigned m) { seq[st].push_back({ChunkPhase::Backward, st, m, 0}); };
    if (s == Schedule::GPipe) {
      for (unsigned m = 0; m < M; ++m)
        f(m);
      for (unsigned m = 0; m < M; ++m)
        b(m);
    } else {
      const unsigned warm = std::min(S - st - 1, M);
      for (unsigned m = 0; m < warm; ++m)
        f(m);
      for (unsigned i = 0; i + warm < M; ++i) {
        f(warm + i);
        b(i);
      }
      for (unsigned m = M - warm; m < M; ++m)
        b(m);
    }
  }
  // Simulated: a forward takes 1, a backward 2; a chunk starts when its stage is free and
  // what it reads is done (the previous stage's forward, the next stage's backward).
  std::map<std::tuple<int, unsigned, unsigned>, double> end;
  std::vector<size_t> next(S, 0);
  std::vector<double> free(S, 0);
  std::vector<Chunk> out;
  const double inf = std::numeric_limits<double>::infinity();
  while (out.size() < size_t(2) * S * M) {
    int pick = -1;
    double pickStart = inf;
    bool pickReceives = false;
    for (unsigned st = 0; st < S; ++st) {
      if (next[st] == seq[st].size())
        continue;
      const Chunk &c = seq[st][next[st]];
      double ready = free[st];
      bool receives = false, blocked = false;
      auto after = [&](int phase, unsigned stage, unsigned m, bool cross) {
        auto it = end.find({phase, stage, m});
        if (it == end.end()) {
          blocked = true;
          return;
        }
        ready = std::max(ready, it->second);
        receives = receives || cross;
      };
      if (c.phase == ChunkPhase::Forward && st > 0)
        after(0, st - 1, c.microbatch, true);
      if (c.phase == ChunkPhase::Backward)
        st + 1 < S ? after(1, st + 1, c.microbatch, true) : after(0, st, c.microbatch, false);
      if (blocked)
        continue;
      // Ties: a chunk that receives from another stage first, so that the sender passes its
      // hand-over before going on; then the later stage.
      if (ready < pickStart || (ready == pickStart && receives && !pickReceives)) {
        pick = static_cast<int>(st);
        pickStart = ready;
        pickReceives = receives;
      }
    }
    Chunk c = seq[pick][next[pick]++];
    c.start = pickStart;
    const double took = c.phase == ChunkPhase::Forward ? 1 : 2;
    free[pick] = pickStart + took;
    end[{c.phase == ChunkPhase::Forward ? 0 : 1, c.stage, c.microbatch}] = pickStart + took;
    out.push_back(c);
  }
  return out;
}

std::vector<Chunk> placementChunks(const std::vector<unsigned> &groupOf,
                                   const std::vector<double> &work, unsigned microbatches) {
  const unsigned V = static_cast<unsigned>(groupOf.size()), M = microbatches;
  unsigned G = 0;
  for (unsigned g : groupOf)
    G = std::max(G, g + 1);
  // A chunk whose inputs are done, from `at`: first by `at`, then forwards, the earlier
  // microbatch, and (forward) the earlier or (backward) the later layer.
  struct Ready {
    double at;
    Chunk chunk;
    auto key() const {
      const bool back = chunk.phase == ChunkPhase::Backward;
      return std::tuple(at, back, chunk.microbatch, back ? -int(chunk.stage) : int(chunk.stage));
    }
    bool operator>(const Ready &o) const { return key() > o.key(); }
  };
  using Queue = std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>>;
  std::vector<Queue> ready(G);
  std::vector<std::vector<Ready>> parked(G); // backwards until the group's forwards are done
  std::vector<unsigned> forwardsLeft(G, 0);
  for (unsigned v = 0; v < V; ++v)
    forwardsLeft[groupOf[v]] += M;
  auto release = [&](Ready r) {
    const unsigned g = groupOf[r.chunk.stage];
    if (r.chunk.phase == ChunkPhase::Backward && forwardsLeft[g] > 0)
      parked[g].push_back(r);
    else
      ready[g].push(r);
  };
  if (V > 0)
    for (unsigned m = 0; m < M; ++m)
      release({0, {ChunkPhase::Forward, 0, m, 0}});
  std::vector<double> free(G, 0);
  std::vector<Chunk> out;
  while (out.size() < size_t(2) * V * M) {
    int pick = -1;
    double pickStart = 0;
    for (unsigned g = 0; g < G; ++g) {
      if (ready[g].empty())
        continue;
      const double start = std::max(free[g], ready[g].top().at);
      if (pick < 0 || start < pickStart) {
        pick = static_cast<int>(g);
        pickStart = start;
      }
    }
    Chunk c = ready[pick].top().chunk;
    ready[pick].pop();
    c.start = pickStart;
    const bool forward = c.phase == ChunkPhase::Forward;
    const double end = pickStart + (forward ? 1 : 2) * work[c.stage];
    free[pick] = end;
    out.push_back(c);
    if (forward) {
      if (c.stage + 1 < V)
        release({end, {ChunkPhase::Forward, c.stage + 1, c.microbatch, 0}});
      else
        release({end, {ChunkPhase::Backward, c.stage, c.microbatch, 0}});
      if (--forwardsLeft[pick] == 0) {
        for (const Ready &r : parked[pick])
          ready[pick].push(r);
        parked[pick].clear();
      }
    } else if (c.stage > 0) {
      release({end, {ChunkPhase::Backward, c.stage - 1, c.microbatch, 0}});
    }
  }
  return out;
}

namespace {

/// Layers [first[s], first[s + 1]) per stage, balancing the stages' work (the least largest
/// stage, by dynamic programming over the cut positions).
std::vector<unsigned> balance(const std::vector<double> &work, unsigned stages) {
  const unsigned L = static_cast<unsigned>(work.size());
  std::vector<double> prefix(L + 1, 0);
  for (unsigned i = 0; i < L; ++i)
    prefix[i + 1] = prefix[i] + work[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least largest stage putting layers [0, i) into s stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<unsigned>> from(stages + 1, std::vector<unsigned>(L + 1, 0));
  best[0][0] = 0;
  for (unsigned s = 1; s <= stages; ++s)
    for (unsigned i = s; i <= L - (stages - s); ++i)
      for (unsigned j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          from[s][i] = j;
        }
      }
  std::vector<unsigned> first(stages + 1, L);
  unsigned i = L;
  for (unsigned s = stages; s >= 1; --s) {
    first[s] = i;
    i = from[s][i];
  }
  first[0] = 0;
  return first;
}

/// Stage s's nodes as a problem of their own: the tensors they touch, those of other stages
/// as its inputs. `tensorOf` gets each of its tensors' index in `p`.
Problem stageProblem(const Problem &p, const std::vector<unsigned> &nodes,
                     std::vector<unsigned> &tensorOf) {
  Problem sub;
  std::map<unsigned, unsigned> local;
  auto tensor = [&](unsigned t) {
    auto [it, fresh] = local.emplace(t, static_cast<unsigned>(sub.tensors.size()));
    if (fresh) {
      ProblemTensor pt = p.tensors[t];
      pt.producer = -1;
      pt.consumers.clear();
      sub.tensors.push_back(std::move(pt));
      tensorOf.push_back(t);
    }
    return it->second;
  };
  for (unsigned n : nodes) {
    ProblemNode pn = p.nodes[n];
    const unsigned i = static_cast<unsigned>(sub.nodes.size());
    for (unsigned &t : pn.inputs) {
      t = tensor(t);
      auto &c = sub.tensors[t].consumers;
      if (std::find(c.begin(), c.end(), i) == c.end())
        c.push_back(i);
    }
    pn.output = tensor(pn.output);
    sub.tensors[pn.output].producer = static_cast<int>(i);
    sub.nodes.push_back(std::move(pn));
    sub.order.push_back(i);
  }
  return sub;
}

/// What a stage's search depends on, as numbers: its problem's nodes and tensors by their
/// local indices, which follow the schedule's order (ops, shapes, element types, roles,
/// edges, the coalescing and group names by first appearance), and which tensors are the
/// step's outputs. Two stages of one key are the same problem under other names (a GPT's
/// middle stages under GPipe, or those 1F1B runs all forwards first): the deterministic
/// search finds the same plan for both, so the later one takes the earlier one's. The
/// order matters: the time objective's work per node is estimated with element-wise chains
/// fused as they run (planner/step_time.h), and a budget's memory plans follow it.
std::vector<int64_t> stageKey(const Problem &sub, const std::vector<std::string> &outputs) {
  std::vector<int64_t> key;
  std::map<std::string, int64_t> groups, coalesced;
  auto idOf = [](std::map<std::string, int64_t> &ids, const std::string &name) -> int64_t {
    if (name.empty())
      return -1;
    return ids.emplace(name, int64_t(ids.size())).first->second;
  };
  auto list = [&](int64_t mark, const auto &xs) {
    key.push_back(mark);
    key.push_back(int64_t(xs.size()));
    for (auto x : xs)
      key.push_back(int64_t(x));
  };
  key.push_back(int64_t(sub.nodes.size()));
  key.push_back(int64_t(sub.tensors.size()));
  for (const ProblemNode &n : sub.nodes) {
    key.push_back(reinterpret_cast<intptr_t>(n.table.get()));
    key.push_back(reinterpret_cast<intptr_t>(n.regionVars.get()));
    key.push_back(reinterpret_cast<intptr_t>(n.reads.get()));
    list(-1, n.shapes.vars);
    for (const std::vector<int64_t> &in : n.shapes.inputs)
      list(-2, in);
    list(-3, n.inputs);
    key.push_back(n.output);
    key.push_back(idOf(coalesced, n.coalesce));
    key.push_back(idOf(groups, n.group));
  }
  for (const ProblemTensor &t : sub.tensors) {
    list(-4, t.shape);
    key.push_back(int64_t(t.dtype));
    key.push_back(t.elementBytes);
    key.push_back(int64_t(t.storage));
    key.push_back(int64_t(t.role));
    key.push_back(idOf(groups, t.group));
    key.push_back(t.producer);
    list(-5, t.consumers);
    key.push_back(std::find(outputs.begin(), outputs.end(), t.name) != outputs.end());
  }
  list(-6, sub.order);
  return key;
}

} // namespace

llvm::Expected<StagedPlan> planStages(const Problem &p, const Graph &microForward,
                                      const std::set<std::string> &forwardNodes,
                                      const StageSpec &spec, const PlanOptions &search,
                                      const std::vector<double> &nodeWork, int64_t memoryLimit,
                                      const std::vector<std::string> &outputs) {
  const unsigned S = spec.stages, M = spec.microbatches, k = search.workers;
  if (S == 0 || M == 0)
    return stringError("--stages and --microbatches must be at least 1");
  if (k % S != 0)
    return stringError(fmt::format("{} stages need a number of workers they divide (each stage "
                                   "runs on its own group); --workers is {}",
                                   S, k));
  if (spec.roundRobin && spec.schedule != Schedule::GPipe)
    return stringError("operator placement runs GPipe's order (every forward, then every "
                       "backward): 1F1B over round-robin layers is Megatron's interleaved "
                       "schedule, which is not built");
  auto layers = spec.roundRobin ? weightLayers(microForward) : forwardLayers(microForward);
  if (!layers)
    return layers.takeError();
  const unsigned L = layers->count();
  if (!spec.roundRobin && S > L) // (placement leaves the groups past the layers idle)
    return stringError(
        fmt::format("{} stages need at least {} layers, and the model has {} (its forward graph's "
                    "segments between cuts, the tensors a stage can hand the next one alone)",
                    S, S, L));
  StagedPlan out;
  out.spec = spec;
  out.layers = L;
  // Each layer's forward work, from microbatch 0's copy of its nodes.
  std::map<std::string, unsigned> nodeIndex;
  for (unsigned n = 0; n < p.nodes.size(); ++n)
    nodeIndex[p.nodes[n].name] = n;
  std::vector<double> work(L, 0);
  for (const auto &[name, layer] : layers->ofNode)
    if (auto it = nodeIndex.find(M > 1 ? name + microbatchSuffix(0) : name); it != nodeIndex.end())
      work[layer] += nodeWork.at(it->second);
  // The schedule's stages: S, or under placement every layer, stage v on group groupOf[v].
  const unsigned V = spec.roundRobin ? L : S;
  std::vector<unsigned> groupOf(V);
  for (unsigned v = 0; v < V; ++v)
    groupOf[v] = v % S;
  std::vector<unsigned> first;
  if (spec.roundRobin) {
    for (unsigned l = 0; l <= L; ++l)
      first.push_back(l);
  } else if (!spec.layers.empty()) {
    unsigned sum = 0;
    for (unsigned l : spec.layers)
      sum += l;
    if (spec.layers.size() != S || sum != L)
      return stringError(fmt::format("--stages {}: the stages' layers add up to {}, and the "
                                     "model has {} (its segments between cuts)",
                                     fmt::join(spec.layers, ","), sum, L));
    first.push_back(0);
    for (unsigned l : spec.layers)
      first.push_back(first.back() + l);
  } else {
    first = balance(work, S);
  }

  std::vector<unsigned> stageOfLayer(L);
  for (unsigned s = 0; s < V; ++s)
    for (unsigned l = first[s]; l < first[s + 1]; ++l)
      stageOfLayer[l] = s;
  const unsigned per = k / S;
  for (unsigned s = 0; s < V; ++s) {
    StageSummary st;
    st.firstWorker = groupOf[s] * per;
    st.workers = per;
    st.firstLayer = first[s];
    st.layers = first[s + 1] - first[s];
    st.boundary = s + 1 < V ? layers->ends[first[s + 1] - 1] : "";
    out.stages.push_back(std::move(st));
  }
  // Each forward group's stage: that of its first node.
  std::map<std::string, unsigned> groupStage;
  {
    auto order = microForward.topologicalOrder();
    if (!order)
      return order.takeError();
    for (unsigned i : *order) {
      const Node &n = microForward.nodes()[i];
      groupStage.emplace(n.group.empty() ? n.name : n.group,
                         stageOfLayer[layers->ofNode.at(n.name)]);
    }
  }
  out.chunks =
      spec.roundRobin ? placementChunks(groupOf, work, M) : scheduleChunks(spec.schedule, S, M);
  std::map<std::tuple<int, unsigned, unsigned>, unsigned> rank;
  for (unsigned i = 0; i < out.chunks.size(); ++i) {
    const Chunk &c = out.chunks[i];
    rank[{c.phase == ChunkPhase::Forward ? 0 : 1, c.stage, c.microbatch}] = i;
  }
  // Each node's chunk: by its group where that is a layer's op (forward, or its backward),
  // else (gradient sums, updates, the loss's mean) the latest chunk it reads from, else (it
  // reads only inputs and weights) the earliest that reads it.
  const unsigned unset = std::numeric_limits<unsigned>::max();
  out.nodeChunk.assign(p.nodes.size(), unset);
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    std::optional<std::pair<std::string, unsigned>> split =
        M > 1 ? splitMicrobatch(node.group) : std::pair{node.group, 0u};
    auto it = split ? groupStage.find(split->first) : groupStage.end();
    if (it != groupStage.end() && !isGradientSumName(node.name)) {
      out.nodeChunk[n] =
          rank.at({forwardNodes.count(node.name) ? 0 : 1, it->second, split->second});
      continue;
    }
    for (unsigned t : node.inputs)
      if (int prod = p.tensors[t].producer; prod >= 0 && out.nodeChunk[prod] != unset)
        out.nodeChunk[n] = out.nodeChunk[n] == unset
                               ? out.nodeChunk[prod]
                               : std::max(out.nodeChunk[n], out.nodeChunk[prod]);
  }
  for (auto it = p.order.rbegin(); it != p.order.rend(); ++it) {
    const unsigned n = *it;
    if (out.nodeChunk[n] != unset)
      continue;
    unsigned earliest = unset;
    for (unsigned c : p.tensors[p.nodes[n].output].consumers)
      earliest = std::min(earliest, out.nodeChunk[c]);
    out.nodeChunk[n] = earliest == unset ? 0 : earliest;
  }
  // The schedule's order: by chunk, and within one as the graph's.
  std::vector<unsigned> position(p.nodes.size());
  for (unsigned i = 0; i < p.order.size(); ++i)
    position[p.order[i]] = i;
  std::vector<unsigned> order = p.order;
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) {
    return out.nodeChunk[a] != out.nodeChunk[b] ? out.nodeChunk[a] < out.nodeChunk[b]
                                                : position[a] < position[b];
  });
  {
    std::vector<bool> done(p.nodes.size(), false);
    for (unsigned n : order) {
      for (unsigned t : p.nodes[n].inputs)
        if (int prod = p.tensors[t].producer; prod >= 0 && !done[prod])
          return stringError(
              fmt::format("the {} schedule would run '{}' before '{}', whose result it reads",
                          scheduleName(spec.schedule), p.nodes[n].name, p.nodes[prod].name));
      done[n] = true;
    }
  }
  auto stageOf = [&](unsigned n) { return out.chunks[out.nodeChunk[n]].stage; };
  // Each tensor's home: the stage of its producer, else of its first reader.
  std::vector<int> home(p.tensors.size(), -1);
  for (unsigned n : order) {
    for (unsigned t : p.nodes[n].inputs)
      if (home[t] < 0 && p.tensors[t].producer < 0)
        home[t] = static_cast<int>(stageOf(n));
    home[p.nodes[n].output] = static_cast<int>(stageOf(n));
  }
  // The stages' searches and execution plans.
  std::vector<std::vector<unsigned>> stageNodes(V);
  for (unsigned n : order)
    stageNodes[stageOf(n)].push_back(n);
  ExecPlan &e = out.exec;
  e.workers = k;
  e.parts = {S, per};
  e.stages = S;
  std::vector<std::vector<unsigned>> coords(k);
  for (unsigned w = 0; w < k; ++w)
    coords[w] = {w / per, w % per};
  e.tiles.assign(k, std::vector<Box>(p.tensors.size()));
  std::vector<std::vector<bool>> holds(p.tensors.size(), std::vector<bool>(k, false));
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    for (unsigned w = 0; w < k; ++w) {
      e.tiles[w][t] = Box(p.tensors[t].shape.size(), Range{0, 0}); // none (a scalar's: whole)
      holds[t][w] = p.tensors[t].shape.empty();                    // scalars: every worker
    }
  std::vector<ExecPlan> subExec(V);
  std::vector<std::vector<unsigned>> subTensorOf(V);
  std::vector<std::map<unsigned, unsigned>> subNodeOf(V); // global node -> its NodeExec
  // Every stage's search: its workers' share of the options.
  PlanOptions o = search;
  o.workers = per;
  if (o.algorithm == Algorithm::Placement) // the layers' placement; inside a group, Tofu's
    o.algorithm = Algorithm::Tofu;
  // Steps given for a stage's workers (Megatron's TP x DP inside each stage, the levels of
  // the machine's part it runs on, with their weights) stay; steps of every worker do not
  // apply.
  unsigned product = 1;
  for (unsigned f : o.factors)
    product *= f;
  if (product != per || o.factors.empty()) {
    o.factors.clear();
    o.stepAlgorithms.clear();
    o.prefixWeights = {};
  }
  o.pricedBuffers.clear();
  std::map<std::vector<int64_t>, unsigned> searched; // a stage's key -> the first stage of it
  for (unsigned s = 0; s < V; ++s) {
    Problem sub = stageProblem(p, stageNodes[s], subTensorOf[s]);
    auto [same, fresh] = spec.shareSearches ? searched.emplace(stageKey(sub, outputs), s)
                                            : std::pair{searched.end(), true};
    if (!fresh) { // the problem of an earlier stage: its plan, not another search
      const StageSummary &first = out.stages[same->second];
      StageSummary &here = out.stages[s];
      here.plan = first.plan;
      here.plan.searchSeconds = 0;
      here.planOf = static_cast<int>(same->second);
      here.searches = first.searches;
      here.memoryWeight = first.memoryWeight;
      here.fits = first.fits;
      subExec[s] = buildExecPlan(sub, here.plan);
    } else {
      if (memoryLimit > 0) {
        auto fit = searchWithinMemory(sub, o, memoryLimit, outputs);
        if (!fit)
          return stringError(fmt::format("stage {}: {}", s, llvm::toString(fit.takeError())));
        subExec[s] = std::move(fit->exec);
        out.stages[s].plan = std::move(fit->plan);
        out.stages[s].searches = fit->searches;
        out.stages[s].memoryWeight = fit->memoryWeight;
        out.stages[s].fits = fit->fits;
      } else {
        auto plan = searchPlan(sub, o);
        if (!plan)
          return stringError(fmt::format("stage {}: {}", s, llvm::toString(plan.takeError())));
        subExec[s] = buildExecPlan(sub, *plan);
        out.stages[s].plan = std::move(*plan);
      }
    }
    out.stages[s].nodes = static_cast<unsigned>(stageNodes[s].size());
    for (size_t i = 0; i < subExec[s].nodes.size(); ++i)
      subNodeOf[s][stageNodes[s][subExec[s].nodes[i].node]] = static_cast<unsigned>(i);
    for (unsigned lt = 0; lt < subTensorOf[s].size(); ++lt) {
      const unsigned t = subTensorOf[s][lt];
      if (home[t] != static_cast<int>(s))
        continue;
      for (unsigned j = 0; j < per; ++j) {
        e.tiles[out.stages[s].firstWorker + j][t] = subExec[s].tiles[j][lt];
        holds[t][out.stages[s].firstWorker + j] = true;
      }
    }
  }
  // Each tensor's tiles across the workers, gathered once where another stage reads it.
  std::map<unsigned, std::vector<Box>> columns;
  auto tilesOf = [&](unsigned t) -> const std::vector<Box> & {
    auto [it, fresh] = columns.emplace(t, std::vector<Box>());
    if (fresh)
      for (unsigned w = 0; w < k; ++w)
        it->second.push_back(e.tiles[w][t]);
    return it->second;
  };
  for (unsigned n : order) {
    const unsigned s = stageOf(n);
    const ProblemNode &node = p.nodes[n];
    const NodeExec &sn = subExec[s].nodes[subNodeOf[s].at(n)];
    const std::vector<unsigned> &tensorOf = subTensorOf[s];
    NodeExec ne;
    ne.node = n;
    ne.reducer = sn.reducer;
    const unsigned base = out.stages[s].firstWorker;
    for (unsigned w = 0; w < k; ++w) {
      OpInstance inst;
      if (w / per != groupOf[s]) { // another stage's node: nothing to do
        inst.computes = false;
        inst.ranges.assign(sn.workers[0].ranges.size(), Range{0, 0});
        for (unsigned t : node.inputs) {
          InputFetch f;
          f.tensor = t;
          f.region = Box(p.tensors[t].shape.size(), Range{0, 0});
          inst.inputs.push_back(std::move(f));
        }
        inst.produced = Box(p.tensors[node.output].shape.size(), Range{0, 0});
        ne.workers.push_back(std::move(inst));
        continue;
      }
      const unsigned j = w % per;
      inst = sn.workers[j];
      for (InputFetch &f : inst.inputs) {
        const unsigned t = tensorOf[f.tensor];
        f.tensor = t;
        if (home[t] == static_cast<int>(s) && !p.tensors[t].shape.empty()) {
          for (Fetch &part : f.parts)
            part.from += base; // as the stage's plan fetches it
          continue;
        }
        f.parts = fetchParts(f.region, w, tilesOf(t), holds[t], coords);
      }
      ne.workers.push_back(std::move(inst));
    }
    std::vector<bool> owns(k, false);
    for (const OutputAssembly &a : sn.assemble) {
      OutputAssembly g = a;
      g.owner += base;
      for (auto &slice : g.slices)
        for (Fetch &f : slice)
          f.from += base;
      owns[g.owner] = true;
      ne.assemble.push_back(std::move(g));
    }
    // Another stage's workers hold a scalar too: assembled as the stage's first owner is.
    if (p.tensors[node.output].shape.empty() && !sn.assemble.empty())
      for (unsigned w = 0; w < k; ++w)
        if (!owns[w]) {
          OutputAssembly g = ne.assemble.front();
          g.owner = w;
          ne.assemble.push_back(std::move(g));
        }
    std::sort(ne.assemble.begin(), ne.assemble.end(),
              [](const OutputAssembly &a, const OutputAssembly &b) { return a.owner < b.owner; });
    e.nodes.push_back(std::move(ne));
  }
  return out;
}

namespace {

/// A result's groups: per slice of its assembly (one, or a reduction's), the workers whose
/// results it takes (each with its produced box), gathered from every owner's fetches. Empty
/// where owners differ in their slice count.
std::vector<std::map<unsigned, Box>> reductionGroups(const NodeExec &ne) {
  std::vector<std::map<unsigned, Box>> groups;
  for (const OutputAssembly &a : ne.assemble) {
    if (groups.empty())
      groups.resize(a.slices.size());
    if (a.slices.size() != groups.size())
      return {};
    for (size_t i = 0; i < a.slices.size(); ++i)
      for (const Fetch &f : a.slices[i])
        groups[i].emplace(f.from, ne.workers[f.from].produced);
  }
  return groups;
}

/// The assembly of a result each worker keeps whole: its own box, from itself.
std::vector<OutputAssembly> keptWhole(const std::vector<Box> &boxes) {
  std::vector<OutputAssembly> out;
  for (unsigned w = 0; w < boxes.size(); ++w)
    if (boxElements(boxes[w]) > 0)
      out.push_back({w, boxes[w], {{Fetch{w, boxes[w]}}}});
  return out;
}

} // namespace

std::vector<ReducedGradient> reduceGradientsOnce(const Problem &p, ExecPlan &e) {
  const unsigned k = e.workers;
  std::vector<int> at(p.nodes.size(), -1);
  for (size_t i = 0; i < e.nodes.size(); ++i)
    at[e.nodes[i].node] = static_cast<int>(i);
  auto isSum = [&](int n) {
    return n >= 0 && at[n] >= 0 && isGradientSumName(p.nodes[n].name) &&
           p.nodes[n].inputs.size() == 2;
  };
  std::vector<std::vector<unsigned>> coords(k);
  for (unsigned w = 0; w < k; ++w)
    coords[w] = workerCoords(w, e.parts);
  std::vector<ReducedGradient> out;
  for (unsigned last : p.order) {
    if (!isSum(static_cast<int>(last)))
      continue;
    const unsigned total = p.nodes[last].output;
    bool end = true; // no later sum of the chain reads it
    for (unsigned c : p.tensors[total].consumers)
      end &= !(isSum(static_cast<int>(c)) && p.nodes[c].inputs[0] == total);
    if (!end)
      continue;
    // The chain, first sum first: sums[i] adds contributions[i + 1] to what came before.
    std::vector<unsigned> sums, contributions;
    for (unsigned s = last;;) {
      sums.push_back(s);
      const std::vector<unsigned> &in = p.nodes[s].inputs;
      contributions.push_back(in[1]);
      const int before = p.tensors[in[0]].producer;
      if (isSum(before) && p.tensors[in[0]].consumers.size() == 1) {
        s = static_cast<unsigned>(before);
        continue;
      }
      contributions.push_back(in[0]);
      break;
    }
    std::reverse(sums.begin(), sums.end());
    std::reverse(contributions.begin(), contributions.end());
    // Every contribution alike on every worker (the same boxes, combined alike), of two
    // microbatches or more.
    const ProblemTensor &result = p.tensors[total];
    bool ok = !result.shape.empty();
    std::set<unsigned> microbatches;
    std::vector<Box> boxes(k);
    std::vector<std::map<unsigned, Box>> groups;
    for (size_t i = 0; ok && i < contributions.size(); ++i) {
      const ProblemTensor &t = p.tensors[contributions[i]];
      const int producer = t.producer;
      ok = producer >= 0 && at[producer] >= 0 && !isSum(producer) && t.consumers.size() == 1 &&
           t.shape == result.shape && t.storage == result.storage;
      if (!ok)
        break;
      const NodeExec &ne = e.nodes[at[producer]];
      auto mb = splitMicrobatch(p.nodes[producer].group);
      auto g = reductionGroups(ne);
      ok = mb && (g.size() == 1 || ne.reducer == ir::Reducer::Sum);
      if (!ok)
        break;
      microbatches.insert(mb->second);
      std::vector<Box> produced(k);
      for (unsigned w = 0; w < k; ++w)
        produced[w] =
            ne.workers[w].computes ? ne.workers[w].produced : Box(t.shape.size(), Range{0, 0});
      if (i == 0) {
        groups = std::move(g);
        boxes = std::move(produced);
        ok = !groups.empty();
      } else {
        ok = g == groups && produced == boxes;
      }
    }
    ok = ok && microbatches.size() >= 2;
    // The sums: element-wise over the result's box, each input read at the same box.
    std::vector<std::vector<std::vector<Range>>> ranges(sums.size(),
                                                        std::vector<std::vector<Range>>(k));
    for (size_t i = 0; ok && i < sums.size(); ++i) {
      const ProblemNode &node = p.nodes[sums[i]];
      const auto &op = node.table->op;
      ok = p.tensors[node.output].storage == result.storage &&
           op.outputVars.size() == op.vars.size() && op.outputVars.size() == result.shape.size();
      for (unsigned w = 0; ok && w < k; ++w) {
        if (boxElements(boxes[w]) == 0)
          continue;
        std::vector<Range> r(op.vars.size());
        for (size_t d = 0; d < op.outputVars.size(); ++d)
          r[op.outputVars[d]] = boxes[w][d];
        for (const Box &region : inputRegions(op, node.shapes, r))
          ok &= region == boxes[w];
        ranges[i][w] = std::move(r);
      }
    }
    if (!ok)
      continue;
    // The rewrite, kept only where it moves fewer bytes.
    std::vector<NodeExec> rewrittenNodes;
    int64_t before = 0, after = 0;
    for (unsigned t : contributions) {
      NodeExec ne = e.nodes[at[p.tensors[t].producer]];
      before += bytesMoved(p, ne);
      ne.assemble = keptWhole(boxes);
      after += bytesMoved(p, ne);
      rewrittenNodes.push_back(std::move(ne));
    }
    for (size_t i = 0; i < sums.size(); ++i) {
      const ProblemNode &node = p.nodes[sums[i]];
      NodeExec ne = e.nodes[at[sums[i]]];
      before += bytesMoved(p, ne);
      for (unsigned w = 0; w < k; ++w) {
        OpInstance inst;
        inst.computes = boxElements(boxes[w]) > 0;
        inst.ranges = inst.computes ? ranges[i][w]
                                    : std::vector<Range>(node.table->op.vars.size(), Range{0, 0});
        for (unsigned t : node.inputs) {
          InputFetch f;
          f.tensor = t;
          f.region = boxes[w];
          if (inst.computes)
            f.parts = {Fetch{w, boxes[w]}};
          inst.inputs.push_back(std::move(f));
        }
        inst.produced = boxes[w];
        ne.workers[w] = std::move(inst);
      }
      ne.reducer = ir::Reducer::Sum;
      if (i + 1 < sums.size()) {
        ne.assemble = keptWhole(boxes);
      } else { // the gradient's own tiles, from every group's accumulators
        for (OutputAssembly &a : ne.assemble) {
          a.slices.clear();
          for (const auto &group : groups) {
            std::vector<bool> holds(k, false);
            for (const auto &member : group)
              holds[member.first] = true;
            a.slices.push_back(fetchParts(a.tile, a.owner, boxes, holds, coords));
          }
        }
      }
      after += bytesMoved(p, ne);
      rewrittenNodes.push_back(std::move(ne));
    }
    if (after >= before)
      continue;
    ReducedGradient r;
    r.gradient = total;
    r.firstWorker = k;
    for (unsigned w = 0; w < k; ++w)
      if (boxElements(boxes[w]) > 0)
        r.firstWorker = std::min(r.firstWorker, w);
    for (NodeExec &ne : rewrittenNodes) {
      const unsigned out = p.nodes[ne.node].output;
      if (ne.node != last) {
        std::vector<Box> tiles(k);
        for (unsigned w = 0; w < k; ++w) {
          tiles[w] = std::move(e.tiles[w][out]);
          e.tiles[w][out] = boxes[w];
        }
        r.tiles.push_back({out, std::move(tiles)});
      }
      const unsigned i = static_cast<unsigned>(at[ne.node]);
      r.replaced.push_back({i, std::move(e.nodes[i])});
      e.nodes[i] = std::move(ne);
    }
    out.push_back(std::move(r));
  }
  return out;
}

void swapGradient(ExecPlan &e, ReducedGradient &r) {
  for (auto &[i, ne] : r.replaced)
    std::swap(e.nodes[i], ne);
  for (auto &[t, tiles] : r.tiles)
    for (unsigned w = 0; w < tiles.size(); ++w)
      std::swap(e.tiles[w][t], tiles[w]);
}

std::vector<int64_t> stageBytes(const Problem &p, const StagedPlan &staged, const ExecPlan &e) {
  std::vector<int64_t> bytes(staged.stages.size(), 0);
  const unsigned per = staged.stages.empty() ? 1 : std::max(1u, staged.stages[0].workers);
  for (const NodeExec &ne : e.nodes) {
    int64_t &into = bytes[staged.chunks[staged.nodeChunk[ne.node]].stage];
    forEachTransfer(p, ne, [&](unsigned from, unsigned to, int64_t n) {
      if (from / per == to / per)
        into += n;
    });
  }
  return bytes;
}

std::vector<int64_t> stagePeaks(const StagedPlan &staged, const MemoryPlan &memory) {
  std::vector<int64_t> peaks;
  for (const StageSummary &st : staged.stages) {
    int64_t peak = 0;
    for (unsigned w = st.firstWorker; w < st.firstWorker + st.workers; ++w)
      peak = std::max(peak, memory.workers.at(w).peak);
    peaks.push_back(peak);
  }
  return peaks;
}

} // namespace tofu
