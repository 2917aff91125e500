// Building the execution plan.
#include "codegen/exec_plan.h"

#include <algorithm>
#include <map>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace tofu {
namespace {

struct BoxLess {
  bool operator()(const Box &a, const Box &b) const {
    return std::lexicographical_compare(
        a.begin(), a.end(), b.begin(), b.end(),
        [](const Range &x, const Range &y) { return x.lo != y.lo ? x.lo < y.lo : x.hi < y.hi; });
  }
};

/// The distinct boxes among `boxes` of the workers `present` says hold one (workers holding
/// copies share one), each with the workers holding it, in worker order. (A scalar's box
/// is empty, so absence needs its own flag.)
std::vector<std::pair<Box, std::vector<unsigned>>> distinct(const std::vector<Box> &boxes,
                                                            const std::vector<bool> &present) {
  std::vector<std::pair<Box, std::vector<unsigned>>> out;
  std::map<Box, size_t, BoxLess> index;
  for (unsigned w = 0; w < boxes.size(); ++w) {
    if (!present[w] || boxElements(boxes[w]) == 0)
      continue;
    auto [it, fresh] = index.emplace(boxes[w], out.size());
    if (fresh)
      out.push_back({boxes[w], {}});
    out[it->second].second.push_back(w);
  }
  return out;
}

/// The parts of `region` for worker `w` from the distinct pieces: its own where it has the
/// piece, else the nearest holder: the one whose coordinates agree with w's over the most
/// leading recursion steps (the same group at the outermost steps, which a machine's outer
/// levels map to; see planner/topology.h), the first such in worker order.
std::vector<Fetch> cover(const Box &region, unsigned w,
                         const std::vector<std::pair<Box, std::vector<unsigned>>> &pieces,
                         const std::vector<std::vector<unsigned>> &coords) {
  std::vector<Fetch> parts;
  if (boxElements(region) == 0)
    return parts;
  auto shared = [&](unsigned v) {
    size_t l = 0;
    while (l < coords[w].size() && coords[w][l] == coords[v][l])
      ++l;
    return l;
  };
  for (const auto &[box, holders] : pieces) {
    auto part = overlap(region, box);
    if (!part)
      continue;
    unsigned from = holders.front();
    size_t best = shared(from);
    for (unsigned v : holders) {
      if (v == w) {
        from = w;
        break;
      }
      if (size_t s = shared(v); s > best) {
        best = s;
        from = v;
      }
    }
    parts.push_back({from, *part});
  }
  return parts;
}

} // namespace

std::vector<Fetch> fetchParts(const Box &region, unsigned w, const std::vector<Box> &tiles,
                              const std::vector<bool> &holds,
                              const std::vector<std::vector<unsigned>> &coords) {
  return cover(region, w, distinct(tiles, holds), coords);
}

ExecPlan buildExecPlan(const Problem &p, const PartitionPlan &plan) {
  ExecPlan e;
  e.workers = plan.workers;
  for (const StepChoice &s : plan.steps)
    e.parts.push_back(s.parts);
  const unsigned k = plan.workers;
  std::vector<std::vector<unsigned>> coords(k);
  for (unsigned w = 0; w < k; ++w)
    coords[w] = workerCoords(w, e.parts);
  e.tiles.assign(k, {});
  for (unsigned w = 0; w < k; ++w)
    for (unsigned t = 0; t < p.tensors.size(); ++t)
      e.tiles[w].push_back(p.tensorTile(t, plan.steps, coords[w]));
  std::vector<std::vector<std::pair<Box, std::vector<unsigned>>>> pieces(p.tensors.size());
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    std::vector<Box> boxes;
    for (unsigned w = 0; w < k; ++w)
      boxes.push_back(e.tiles[w][t]);
    pieces[t] = distinct(boxes, std::vector<bool>(k, true));
  }
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    NodeExec ne;
    ne.node = n;
    for (const StepChoice &s : plan.steps)
      if (p.isReduction(n, s.node[n]))
        ne.reducer = node.table->strategies[s.node[n]].reducer;
    std::vector<Box> produced(k);
    std::vector<std::vector<unsigned>> sliceOf(k); // the coordinates at reduction steps
    for (unsigned w = 0; w < k; ++w) {
      OpInstance inst;
      inst.ranges = p.nodeRanges(n, plan.steps, coords[w]);
      for (const Range &r : inst.ranges)
        inst.computes &= r.size() > 0;
      std::vector<Box> regions = inputRegions(node.table->op, node.shapes, inst.ranges);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        InputFetch f;
        f.tensor = node.inputs[i];
        f.region = regions[i];
        f.parts = cover(f.region, w, pieces[f.tensor], coords);
        f.repeats = repeatedRead(node.inputs, regions, i);
        inst.inputs.push_back(std::move(f));
      }
      for (unsigned v : node.table->op.outputVars)
        inst.produced.push_back(inst.computes ? inst.ranges[v] : Range{0, 0});
      produced[w] = inst.produced;
      for (size_t l = 0; l < plan.steps.size(); ++l)
        if (p.isReduction(n, plan.steps[l].node[n]))
          sliceOf[w].push_back(coords[w][l]);
      ne.workers.push_back(std::move(inst));
    }
    // Group the workers' results by reduction slice; within one, distinct produced boxes
    // partition the output (copies where a step ran the op whole).
    std::map<std::vector<unsigned>, std::vector<bool>> slices; // which workers are in each
    for (unsigned w = 0; w < k; ++w) {
      auto &members = slices[sliceOf[w]];
      members.resize(k, false);
      members[w] = ne.workers[w].computes;
    }
    std::vector<std::vector<std::pair<Box, std::vector<unsigned>>>> slicePieces;
    for (const auto &[key, members] : slices)
      slicePieces.push_back(distinct(produced, members));
    for (unsigned w = 0; w < k; ++w) {
      OutputAssembly a;
      a.owner = w;
      a.tile = e.tiles[w][node.output];
      if (boxElements(a.tile) == 0)
        continue;
      for (const auto &sp : slicePieces)
        a.slices.push_back(cover(a.tile, w, sp, coords));
      ne.assemble.push_back(std::move(a));
    }
    e.nodes.push_back(std::move(ne));
  }
  return e;
}

int64_t bytesMoved(const Problem &p, const NodeExec &ne) {
  int64_t bytes = 0;
  forEachTransfer(p, ne, [&](unsigned, unsigned, int64_t b) { bytes += b; });
  return bytes;
}

int64_t ExecPlan::bytesMoved(const Problem &p) const {
  int64_t bytes = 0;
  for (const NodeExec &ne : nodes)
    bytes += tofu::bytesMoved(p, ne);
  return bytes;
}

namespace {

nlohmann::ordered_json boxJson(const Box &b) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const Range &r : b)
    j.push_back({r.lo, r.hi});
  return j;
}

std::string boxString(const Box &b) {
  std::string s = "[";
  for (size_t d = 0; d < b.size(); ++d)
    s += fmt::format("{}{}:{}", d ? ", " : "", b[d].lo, b[d].hi);
  return s + "]";
}

nlohmann::ordered_json fetchesJson(const std::vector<Fetch> &parts) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const Fetch &f : parts)
    j.push_back({{"from", f.from}, {"box", boxJson(f.box)}});
  return j;
}

} // namespace

std::string execPlanJson(const Problem &p, const ExecPlan &plan) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["workers"] = plan.workers;
  j["factors"] = plan.parts;
  ordered_json nodes = ordered_json::array();
  for (const NodeExec &ne : plan.nodes) {
    const ProblemNode &node = p.nodes[ne.node];
    ordered_json jn;
    jn["node"] = node.name;
    jn["op"] = node.table->op.name;
    jn["output"] = p.tensors[node.output].name;
    jn["reducer"] = ir::reducerName(ne.reducer);
    ordered_json ws = ordered_json::array();
    for (const OpInstance &inst : ne.workers) {
      ordered_json jw;
      jw["computes"] = inst.computes;
      ordered_json ranges = ordered_json::object();
      for (size_t v = 0; v < inst.ranges.size(); ++v)
        ranges[node.table->op.vars[v].name] = {inst.ranges[v].lo, inst.ranges[v].hi};
      jw["ranges"] = ranges;
      ordered_json ins = ordered_json::array();
      for (const InputFetch &f : inst.inputs)
        ins.push_back({{"tensor", p.tensors[f.tensor].name},
                       {"region", boxJson(f.region)},
                       {"parts", fetchesJson(f.parts)}});
      jw["inputs"] = ins;
      jw["produced"] = boxJson(inst.produced);
      ws.push_back(jw);
    }
    jn["workers"] = ws;
    ordered_json as = ordered_json::array();
    for (const OutputAssembly &a : ne.assemble) {
      ordered_json slices = ordered_json::array();
      for (const auto &slice : a.slices)
        slices.push_back(fetchesJson(slice));
      as.push_back({{"owner", a.owner}, {"tile", boxJson(a.tile)}, {"slices", slices}});
    }
    jn["assemble"] = as;
    nodes.push_back(jn);
  }
  j["nodes"] = nodes;
  return j.dump(1) + "\n";
}

std::string execPlanDump(const Problem &p, const ExecPlan &plan) {
  std::string out = fmt::format("execution plan: {} workers\n", plan.workers);
  for (const NodeExec &ne : plan.nodes) {
    const ProblemNode &node = p.nodes[ne.node];
    out += fmt::format("{} = {}(...)\n", node.name, node.table->op.name);
    for (unsigned w = 0; w < ne.workers.size(); ++w) {
      const OpInstance &inst = ne.workers[w];
      if (!inst.computes) {
        out += fmt::format("  w{}: nothing\n", w);
        continue;
      }
      std::string reads;
      for (const InputFetch &f : inst.inputs) {
        unsigned remote = 0;
        for (const Fetch &part : f.parts)
          remote += part.from != w;
        reads +=
            fmt::format(" {}{}{}", p.tensors[f.tensor].name, boxString(f.region),
                        remote ? fmt::format(" (fetch {} part{})", remote, remote > 1 ? "s" : "")
                               : std::string());
      }
      out += fmt::format("  w{}: computes {} reading{}\n", w, boxString(inst.produced), reads);
    }
    for (const OutputAssembly &a : ne.assemble) {
      unsigned remote = 0, parts = 0;
      for (const auto &slice : a.slices)
        for (const Fetch &f : slice) {
          ++parts;
          remote += f.from != a.owner;
        }
      out += fmt::format("  w{} owns {}{}: {} part{}, {} remote{}\n", a.owner,
                         p.tensors[node.output].name, boxString(a.tile), parts,
                         parts == 1 ? "" : "s", remote,
                         a.slices.size() > 1 ? fmt::format(", {} partials {}", a.slices.size(),
                                                           ir::reducerName(ne.reducer))
                                             : std::string());
    }
  }
  return out;
}

} // namespace tofu
