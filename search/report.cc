// Plan reports.
#include "search/report.h"

#include <algorithm>
#include <cstdlib>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/units.h"

namespace tofu {
namespace {

std::vector<unsigned> partsOf(const PartitionPlan &plan) {
  std::vector<unsigned> parts;
  for (const StepChoice &s : plan.steps)
    parts.push_back(s.parts);
  return parts;
}

/// Per dimension, into how many pieces the plan cuts the tensor.
std::vector<int64_t> grid(const Problem &p, const PartitionPlan &plan, unsigned t) {
  std::vector<int64_t> g(p.tensors[t].shape.size(), 1);
  for (const StepChoice &s : plan.steps)
    if (s.tensor[t] >= 0)
      g[s.tensor[t]] *= s.parts;
  return g;
}

std::string dims(const std::vector<int64_t> &v, const char *sep = "x") {
  if (v.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string tileShape(const Box &b) {
  std::vector<int64_t> v;
  for (const Range &r : b)
    v.push_back(r.size());
  return dims(v);
}

struct Memory {
  int64_t single = 0, worker0 = 0, largest = 0;
  bool allWorkers = false;
};

Memory memory(const Problem &p, const PartitionPlan &plan) {
  Memory m;
  for (const ProblemTensor &t : p.tensors) {
    int64_t e = t.elementBytes;
    for (int64_t d : t.shape)
      e *= d;
    m.single += e;
  }
  std::vector<unsigned> parts = partsOf(plan);
  m.worker0 = p.workerTensorBytes(plan.steps, std::vector<unsigned>(parts.size(), 0));
  m.largest = m.worker0;
  if (plan.workers <= 64) {
    m.allWorkers = true;
    for (unsigned w = 1; w < plan.workers; ++w)
      m.largest = std::max(m.largest, p.workerTensorBytes(plan.steps, workerCoords(w, parts)));
  }
  return m;
}

std::string stepsString(const PartitionPlan &plan) {
  std::string s;
  for (size_t i = 0; i < plan.steps.size(); ++i)
    s += (i ? " x " : "") + std::to_string(plan.steps[i].parts);
  return s.empty() ? "1" : s;
}

} // namespace

std::string planTable(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o) {
  std::string out;
  out += fmt::format("plan: {} on {} workers ({}), algorithm {}\n", o.title, plan.workers,
                     stepsString(plan), plan.algorithm);
  out += fmt::format("graph: {} nodes, {} tensors; DP variables after coarsening: {}; largest DP "
                     "table: {} entries\n",
                     p.nodes.size(), p.tensors.size(), plan.variables, plan.largestTable);
  if (plan.conditioned > 0)
    out += fmt::format("approximate: the graph is too wide for exact elimination; {} DP variables "
                       "were fixed by conditioning and the rest improved by coordinate descent\n",
                       plan.conditioned);
  out += fmt::format("search time: {:.3f} s\n", plan.searchSeconds);
  out +=
      fmt::format("objective: {}{}\n",
                  plan.objective == "time" ? "time (the estimated step: compute and communication)"
                                           : "bytes (the bytes every worker receives)",
                  o.objectiveNote);
  out += fmt::format("communication per step, every worker counted: {} ({} bytes)\n",
                     humanBytes(double(plan.totalBytes)), plan.totalBytes);
  if (o.exact && plan.workers > 1) {
    int64_t exact = CostModel(p).bruteForceCost(plan.steps);
    out += fmt::format("the same, worker by worker (check): {} ({} bytes)\n",
                       humanBytes(double(exact)), exact);
  }
  Memory m = memory(p, plan);
  out +=
      fmt::format("tensor memory: single worker {}; worker 0 {}{} (1/k of single: {})\n",
                  humanBytes(double(m.single)), humanBytes(double(m.worker0)),
                  m.allWorkers ? fmt::format(", largest worker {}", humanBytes(double(m.largest)))
                               : std::string(),
                  humanBytes(double(m.single) / plan.workers));
  if (o.plannedPeak >= 0) {
    out += fmt::format(
        "planned peak (memory planner: tiles, fetch buffers, partial results, "
        "with lifetimes): {} on worker {}{}\n",
        humanBytes(double(o.plannedPeak)), o.plannedPeakWorker,
        o.memoryLimit > 0
            ? fmt::format("; budget {} per worker ({} {})", humanBytes(double(o.memoryLimit)),
                          humanBytes(double(std::abs(o.memoryLimit - o.plannedPeak))),
                          o.memoryLimit >= o.plannedPeak ? "spare" : "over")
            : std::string());
    out += fmt::format("  live at its most: tiles {}, fetched inputs {}, partial results {}\n",
                       humanBytes(double(o.liveTiles)), humanBytes(double(o.liveFetches)),
                       humanBytes(double(o.livePartials)));
    if (o.liveTiles > 0)
      out +=
          fmt::format("  those tiles: weights {}, optimiser state {}, activations {}, gradients "
                      "{}, inputs {}; {} of them bfloat16\n",
                      humanBytes(double(o.liveWeights)), humanBytes(double(o.liveOptimizerState)),
                      humanBytes(double(o.liveActivations)), humanBytes(double(o.liveGradients)),
                      humanBytes(double(o.liveInputs)), humanBytes(double(o.liveBfloat16)));
    if (!o.peakNode.empty())
      out += fmt::format("  when the worker runs {}; the largest tiles then:", o.peakNode);
    else if (!o.liveLargest.empty())
      out += "  the largest tiles then:";
    for (size_t i = 0; i < o.liveLargest.size(); ++i)
      out += fmt::format("{} {} {}", i ? "," : "", o.liveLargest[i].first,
                         humanBytes(double(o.liveLargest[i].second)));
    if (!o.peakNode.empty() || !o.liveLargest.empty())
      out += "\n";
  }
  if (!plan.steps.empty()) {
    out += "\n| step | parts | communication added | share |\n| ---: | ---: | ---: | ---: |\n";
    for (size_t i = 0; i < plan.steps.size(); ++i)
      out += fmt::format("| {} | {} | {} | {:.1f}% |\n", i + 1, plan.steps[i].parts,
                         humanBytes(double(plan.stepBytes[i])),
                         plan.totalBytes ? 100.0 * plan.stepBytes[i] / plan.totalBytes : 0.0);
  }
  std::vector<unsigned> zeros(plan.steps.size(), 0);
  if (o.listTensors) {
    out += "\n| tensor | role | shape | cut per dimension | worker 0's tile |\n| --- | --- | --- | "
           "--- | --- |\n";
    for (unsigned t = 0; t < p.tensors.size(); ++t)
      out += fmt::format("| {} | {} | {} | {} | {} |\n", p.tensors[t].name,
                         roleName(p.tensors[t].role), dims(p.tensors[t].shape),
                         dims(grid(p, plan, t)), tileShape(p.tensorTile(t, plan.steps, zeros)));
  }
  if (o.listOps) {
    const std::vector<int64_t> &perNode = plan.nodeBytes;
    out += "\n| node | op | strategy per step | communication |\n| --- | --- | --- | ---: |\n";
    for (unsigned n : p.order) {
      std::string s;
      for (size_t i = 0; i < plan.steps.size(); ++i)
        s += (i ? " / " : "") + p.strategyName(n, plan.steps[i].node[n]);
      out += fmt::format("| {} | {} | {} | {} |\n", p.nodes[n].name, p.nodes[n].table->op.name,
                         s.empty() ? "-" : s, humanBytes(double(perNode[n])));
    }
  }
  return out;
}

std::string planJson(const Problem &p, const PartitionPlan &plan, const PlanReportOptions &o) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["graph"] = o.title;
  j["workers"] = plan.workers;
  j["factors"] = partsOf(plan);
  j["algorithm"] = plan.algorithm;
  j["search_seconds"] = plan.searchSeconds;
  j["objective"] = plan.objective;
  j["communication_bytes"] = plan.totalBytes;
  if (o.exact && plan.workers > 1)
    j["communication_bytes_every_worker"] = CostModel(p).bruteForceCost(plan.steps);
  j["step_communication_bytes"] = plan.stepBytes;
  Memory m = memory(p, plan);
  j["memory"] = {{"single_worker_bytes", m.single}, {"worker0_bytes", m.worker0}};
  if (m.allWorkers)
    j["memory"]["largest_worker_bytes"] = m.largest;
  if (o.plannedPeak >= 0) {
    j["memory"]["planned_peak_bytes"] = o.plannedPeak;
    j["memory"]["planned_peak_worker"] = o.plannedPeakWorker;
    j["memory"]["live_at_most"] = {
        {"tiles", o.liveTiles}, {"fetches", o.liveFetches}, {"partials", o.livePartials}};
    j["memory"]["live_tiles_at_most"] = {
        {"weights", o.liveWeights},         {"optimizer_state", o.liveOptimizerState},
        {"activations", o.liveActivations}, {"gradients", o.liveGradients},
        {"inputs", o.liveInputs},           {"bfloat16", o.liveBfloat16}};
    ordered_json largest = ordered_json::array();
    for (const auto &[name, bytes] : o.liveLargest)
      largest.push_back({{"tensor", name}, {"bytes", bytes}});
    j["memory"]["live_tiles_at_most"]["largest"] = largest;
    if (!o.peakNode.empty())
      j["memory"]["peak_node"] = o.peakNode;
  }
  if (o.memoryLimit > 0)
    j["memory"]["budget_bytes"] = o.memoryLimit;
  std::vector<unsigned> zeros(plan.steps.size(), 0);
  ordered_json tensors = ordered_json::array();
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    ordered_json jt;
    jt["name"] = p.tensors[t].name;
    jt["role"] = roleName(p.tensors[t].role);
    jt["shape"] = p.tensors[t].shape;
    jt["dtype"] = elementTypeName(p.tensors[t].dtype);
    std::vector<int> split;
    for (const StepChoice &s : plan.steps)
      split.push_back(s.tensor[t]);
    jt["split_dims"] = split; // per step; -1: whole on every group
    jt["grid"] = grid(p, plan, t);
    tensors.push_back(jt);
  }
  j["tensors"] = tensors;
  const std::vector<int64_t> &perNode = plan.nodeBytes;
  ordered_json ops = ordered_json::array();
  for (unsigned n : p.order) {
    ordered_json jn;
    jn["name"] = p.nodes[n].name;
    jn["op"] = p.nodes[n].table->op.name;
    std::vector<std::string> s;
    for (const StepChoice &st : plan.steps)
      s.push_back(p.strategyName(n, st.node[n]));
    jn["strategies"] = s;
    jn["communication_bytes"] = perNode[n];
    ops.push_back(jn);
  }
  j["ops"] = ops;
  return j.dump(1) + "\n";
}

std::string planSvg(const Problem &p, const PartitionPlan &plan, const std::string &title) {
  // Weights first, then the activations that weight-using ops read (the paper's Figure 10).
  std::vector<unsigned> weights, activations;
  std::vector<bool> taken(p.tensors.size(), false);
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    bool usesWeight = false;
    for (unsigned t : node.inputs)
      usesWeight |= p.tensors[t].role == TensorRole::Weight;
    if (!usesWeight)
      continue;
    for (unsigned t : node.inputs) {
      if (taken[t] || p.tensors[t].shape.empty())
        continue;
      taken[t] = true;
      (p.tensors[t].role == TensorRole::Weight ? weights : activations).push_back(t);
    }
  }
  const int cell = 64, gap = 22, perRow = 16, margin = 20;
  auto rowsOf = [&](size_t n) { return int((n + perRow - 1) / perRow); };
  int height =
      margin * 2 + 40 + (rowsOf(weights.size()) + rowsOf(activations.size())) * (cell + gap) + 40;
  int width = margin * 2 + perRow * (cell + gap);
  std::string s =
      fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                  "font-family=\"sans-serif\" "
                  "font-size=\"9\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                  "<text x=\"{}\" y=\"{}\" font-size=\"13\">{} on {} workers ({}): tiles coloured "
                  "by owning worker; "
                  "rows = dimension 0, columns = dimension 1</text>\n",
                  width, height, margin, margin + 4, title, plan.workers, plan.algorithm);
  std::vector<unsigned> parts = partsOf(plan);
  int y = margin + 24;
  auto section = [&](const std::vector<unsigned> &list, const char *label) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", margin, y + 10, label);
    y += 16;
    for (size_t i = 0; i < list.size(); ++i) {
      unsigned t = list[i];
      int x0 = margin + int(i % perRow) * (cell + gap);
      int y0 = y + int(i / perRow) * (cell + gap);
      const auto &shape = p.tensors[t].shape;
      int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
      for (unsigned w = 0; w < plan.workers; ++w) {
        Box b = p.tensorTile(t, plan.steps, workerCoords(w, parts));
        Range r = b[0], c = b.size() > 1 ? b[1] : Range{0, 1};
        double x = x0 + cell * double(c.lo) / cols, yy = y0 + cell * double(r.lo) / rows;
        double wdt = cell * double(c.size()) / cols, hgt = cell * double(r.size()) / rows;
        s += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
                         "fill=\"hsl({},70%,60%)\" stroke=\"black\" "
                         "stroke-width=\"0.3\"><title>{} worker {}</title></rect>\n",
                         x, yy, wdt, hgt, 360 * w / std::max(1u, plan.workers), p.tensors[t].name,
                         w);
      }
      s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x0, y0 + cell + 10,
                       p.tensors[t].name.substr(0, 14));
    }
    y += rowsOf(list.size()) * (cell + gap) + 8;
  };
  section(weights, "weights");
  section(activations, "activations read by weight-using ops");
  s += "</svg>\n";
  return s;
}

} // namespace tofu
