#include "planner/explain.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "analysis/strategy.h"
#include "fmt/format.h"
#include "support/errors.h"
#include "support/units.h"

namespace tofu {
namespace {

/// A plan as the estimate saw it: the step estimated, and the execution and memory plans it
/// was estimated from (`r`'s own, or built here where `r` has none).
struct Costed {
  StepTimeEstimate estimate;
  ExecPlan built;
  MemoryPlan planned;
  const ExecPlan *given = nullptr;         ///< r's, else `built`
  const MemoryPlan *givenMemory = nullptr; ///< r's, else `planned`
  StepCost cost;
  const ExecPlan &exec() const { return given ? *given : built; }
  const MemoryPlan &memory() const { return givenMemory ? *givenMemory : planned; }
};

llvm::Expected<Costed> costPlan(const PipelineResult &r, const DeviceModel &device,
                                const std::optional<Topology> &machine) {
  Costed c;
  const Problem &p = *r.problem;
  if (r.exec.nodes.empty())
    c.built = buildExecPlan(p, r.plan);
  else
    c.given = &r.exec;
  if (r.memory.workers.empty())
    c.planned = planMemory(p, c.exec(), r.graph.outputs);
  else
    c.givenMemory = &r.memory;
  auto e = estimateStepTime(p, c.exec(), r.graph.outputs, device, machine);
  if (!e)
    return e.takeError();
  c.estimate = std::move(*e);
  StepCost &s = c.cost;
  s.seconds = c.estimate.seconds;
  double most = -1;
  for (unsigned w = 0; w < c.estimate.perWorker.size(); ++w) {
    const WorkerTime &t = c.estimate.perWorker[w];
    s.bytes += t.bytesReceived;
    if (t.total() > most) {
      most = t.total();
      s.worker = w;
    }
  }
  const WorkerTime &t = c.estimate.perWorker[s.worker];
  s.compute = t.compute();
  s.communication = t.communication;
  s.bubble = std::max(0.0, s.seconds - t.total());
  s.peak = c.memory().largestPeak();
  return c;
}

/// How worker `w` computes node `n` of `p` in `exec`: each variable it holds a part of, over
/// how many parts.
std::string cutOf(const Problem &p, const ExecPlan &exec, const std::vector<int> &execOf,
                  unsigned n, unsigned w) {
  if (execOf[n] < 0)
    return "-";
  const OpInstance &inst = exec.nodes[execOf[n]].workers[w];
  if (!inst.computes)
    return "idle";
  const std::vector<Range> full = fullRanges(p.nodes[n].shapes);
  const StrategyTable &table = *p.nodes[n].table;
  std::vector<std::string> parts;
  bool partial = false;
  for (size_t v = 0; v < full.size() && v < inst.ranges.size(); ++v) {
    const int64_t whole = full[v].size(), held = inst.ranges[v].size();
    if (held >= whole || held == 0)
      continue;
    parts.push_back(fmt::format("{}/{}", table.op.vars[v].name,
                                static_cast<int64_t>(std::llround(double(whole) / double(held)))));
    partial |=
        std::any_of(table.strategies.begin(), table.strategies.end(), [&](const Strategy &s) {
          return s.var == v && s.kind == Strategy::Kind::Reduction;
        });
  }
  if (parts.empty())
    return "whole";
  return fmt::format("{}{}", fmt::join(parts, " "), partial ? " (partial sums)" : "");
}

/// `name` without its microbatches' suffixes ("lm_head@mb3" and "lm_head_grad_W@mb3" are
/// one node each microbatch: graph/microbatch.h).
std::string withoutMicrobatch(const std::string &name) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    size_t digits = i + 3;
    if (name.compare(i, 3, "@mb") == 0) {
      while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9')
        ++digits;
      if (digits > i + 3) {
        i = digits;
        continue;
      }
    }
    out += name[i++];
  }
  return out;
}

/// Worker `w`'s three costliest nodes (the estimate's fused nodes, a microbatched node's
/// copies together), each found in `p` by name, or by the first node of a fused chain
/// ("a+b+c"), for how it is cut.
std::vector<HeavyOp> heaviestOps(const Problem &p, const Costed &c, unsigned w) {
  std::map<std::string, unsigned> byName;
  for (unsigned n = 0; n < p.nodes.size(); ++n)
    byName.emplace(p.nodes[n].name, n);
  std::vector<int> execOf(p.nodes.size(), -1);
  for (size_t i = 0; i < c.exec().nodes.size(); ++i)
    execOf[c.exec().nodes[i].node] = static_cast<int>(i);
  struct Group {
    double seconds = 0;
    unsigned copies = 0;
    unsigned first = 0; ///< a fused node of it
  };
  std::map<std::string, Group> groups;
  std::map<unsigned, double> perNode;
  for (const OpTimeEstimate &o : c.estimate.workerOps[w])
    perNode[o.node] += o.seconds;
  for (const auto &[node, seconds] : perNode) {
    auto [it, fresh] = groups.emplace(withoutMicrobatch(c.estimate.nodeNames[node]), Group());
    it->second.seconds += seconds;
    ++it->second.copies;
    if (fresh)
      it->second.first = node;
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto &[name, g] : groups)
    order.push_back({g.seconds, name});
  std::sort(order.begin(), order.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<HeavyOp> out;
  for (size_t i = 0; i < order.size() && i < 3; ++i) {
    const Group &g = groups[order[i].second];
    HeavyOp h;
    h.node = order[i].second;
    if (g.copies > 1)
      h.node += fmt::format(" (x{})", g.copies);
    h.op = c.estimate.nodeOps[g.first];
    h.seconds = order[i].first;
    const std::string &name = c.estimate.nodeNames[g.first];
    auto it = byName.find(name);
    if (it == byName.end())
      it = byName.find(name.substr(0, name.find('+')));
    h.cut = it == byName.end() ? "-" : cutOf(p, c.exec(), execOf, it->second, w);
    out.push_back(std::move(h));
  }
  return out;
}

std::string chosenDescription(const PipelineResult &r) {
  if (r.staged)
    return r.staged->describe();
  std::string what = r.plan.algorithm;
  if (!r.megatronGrid.empty()) {
    const MegatronConfig *best = &r.megatronGrid[0];
    for (const MegatronConfig &c : r.megatronGrid)
      if (c.seconds < best->seconds)
        best = &c;
    what = fmt::format("Megatron-LM TP {} x DP {}", best->tp, best->dp);
  }
  return what + " by " + r.plan.objective;
}

/// The kind `r`'s plan is of, as the runner-ups name theirs.
std::string kindOf(const PipelineResult &r, Algorithm a) {
  if (r.staged)
    return r.staged->spec.roundRobin  ? "placement"
           : a == Algorithm::Megatron ? "megatron-stages"
                                      : "pipeline";
  if (a == Algorithm::Megatron)
    return "megatron";
  if (a == Algorithm::Zero3)
    return "zero3";
  return a == Algorithm::Tofu ? "no-pipeline" : algorithmName(a);
}

} // namespace

llvm::Expected<StepCost> stepCostOf(const PipelineResult &r, const DeviceModel &device,
                                    const std::optional<Topology> &machine) {
  auto c = costPlan(r, device, machine);
  if (!c)
    return c.takeError();
  return c->cost;
}

std::string costsMore(const StepCost &runnerUp, const StepCost &chosen) {
  const double more = runnerUp.seconds - chosen.seconds;
  const std::pair<const char *, double> parts[] = {
      {"compute", runnerUp.compute - chosen.compute},
      {"communication", runnerUp.communication - chosen.communication},
      {"bubble", runnerUp.bubble - chosen.bubble}};
  const auto *most = &parts[0];
  for (const auto &p : parts)
    if (more >= 0 ? p.second > most->second : p.second < most->second)
      most = &p;
  std::string out = more >= 0 ? fmt::format("+{:.3f} ms, mostly {} (+{:.3f} ms)", 1e3 * more,
                                            most->first, 1e3 * std::max(0.0, most->second))
                              : fmt::format("{:.3f} ms shorter, mostly by {} ({:.3f} ms)",
                                            -1e3 * more, most->first, -1e3 * most->second);
  const int64_t memory = runnerUp.peak - chosen.peak;
  if (memory != 0)
    out += fmt::format("; {} {} memory", humanBytes(double(std::abs(memory))),
                       memory > 0 ? "more" : "less");
  return out;
}

llvm::Expected<Explanation> explainPlan(const GraphSource &source, const OpLibrary &lib,
                                        const PipelineOptions &options,
                                        const PipelineResult &chosen,
                                        const std::function<void(const RunnerUp &)> &progress) {
  if (!options.device)
    return stringError("explaining a plan estimates its step: it needs a device model");
  const DeviceModel &device = *options.device;
  const unsigned k = chosen.plan.workers;
  // The part of the machine the plan runs on: all of it, or what --fit's count fills.
  std::optional<Topology> machine = options.machine;
  if (machine && options.memoryPerWorker > 0)
    machine = topologyForWorkers(*machine, k);
  Explanation x;
  x.plan = chosenDescription(chosen);
  x.workers = k;
  auto costed = costPlan(chosen, device, machine);
  if (!costed)
    return costed.takeError();
  x.cost = costed->cost;
  const Problem &p = *chosen.problem;
  auto stageOf = [&](unsigned first, unsigned workers, unsigned heavy) {
    StageCost s;
    s.firstWorker = first;
    s.workers = workers;
    for (unsigned w = first; w < first + workers; ++w) {
      const WorkerTime &t = costed->estimate.perWorker[w];
      s.compute = std::max(s.compute, t.compute());
      s.communication = std::max(s.communication, t.communication);
      s.peak = std::max(s.peak, costed->memory().workers[w].peak);
    }
    s.heaviest = heaviestOps(p, *costed, heavy);
    return s;
  };
  if (chosen.staged) {
    for (const StageSummary &st : chosen.staged->stages) {
      StageCost s = stageOf(st.firstWorker, st.workers, st.firstWorker);
      s.firstLayer = st.firstLayer;
      s.layers = st.layers;
      x.stages.push_back(std::move(s));
    }
  } else {
    x.stages.push_back(stageOf(0, k, x.cost.worker));
  }

  // The runner-ups: the same step at the same workers, another algorithm or other stages.
  PipelineOptions base = options;
  base.fitWorkersUpTo = 0;
  base.search.workers = k;
  base.search.factors.clear();
  base.search.stepAlgorithms.clear();
  base.search.prefixWeights = {};
  base.machine = machine;
  base.onCandidateSet = nullptr;
  base.onWorkerCount = nullptr;
  base.agree = nullptr;
  base.plan = nullptr;
  base.until = Stage::Execution;
  base.stages = StageSpec();
  base.microbatchModel = nullptr;
  const std::string chosenKind = kindOf(chosen, options.search.algorithm);
  const StageSpec *chosenStages =
      chosen.staged && !chosen.staged->spec.roundRobin ? &chosen.staged->spec : nullptr;
  struct Candidate {
    RunnerUp r;
    PipelineOptions o;
  };
  std::vector<Candidate> candidates;
  auto add = [&](const std::string &kind, const std::string &plan, const std::string &flags,
                 const PipelineOptions &o) {
    if (kind != chosenKind)
      candidates.push_back({RunnerUp{kind, plan, flags, std::nullopt, ""}, o});
  };
  {
    PipelineOptions o = base;
    o.search.algorithm = Algorithm::Megatron;
    add("megatron", "Megatron-LM, the best TP x DP", "--algo megatron", o);
  }
  if (chosenStages && chosenStages->stages > 1 && k % chosenStages->stages == 0) {
    PipelineOptions o = base;
    o.stages = *chosenStages;
    const unsigned tp = k / chosenStages->stages;
    setMegatronSteps(o.search, tp, 1);
    o.search.algorithm = Algorithm::Megatron;
    add("megatron-stages",
        fmt::format("Megatron-LM TP {} x PP {} (the same stages)", tp, chosenStages->stages),
        fmt::format("--megatron {},{},1 --microbatches {}", tp, chosenStages->stages,
                    chosenStages->microbatches),
        o);
  }
  {
    PipelineOptions o = base;
    o.search.algorithm = Algorithm::Zero3;
    add("zero3", "ZeRO-3 (FSDP's full sharding)", "--algo zero3", o);
  }
  {
    PipelineOptions o = base;
    o.search.algorithm = Algorithm::Tofu;
    add("no-pipeline", "tofu over every worker, no stages", "--algo tofu", o);
  }
  if (options.train && k > 1) {
    PipelineOptions o = base;
    o.search.algorithm = Algorithm::Tofu;
    if (chosenStages) {
      o.stages = *chosenStages;
    } else {
      // Stages across the machine's outermost level, else two.
      unsigned s = machine && machine->levels.size() > 1 && machine->levels[0].count > 1
                       ? machine->levels[0].count
                       : 2;
      if (k % s != 0)
        s = 2;
      o.stages.stages = s;
      o.stages.microbatches = source.batch % (2 * s) == 0 ? 2 * s : s;
    }
    if (k % o.stages.stages == 0)
      add("pipeline", fmt::format("tofu in each of {} stages", o.stages.stages),
          fmt::format("--stages {} --microbatches {}", o.stages.stages, o.stages.microbatches), o);
  }
  for (Candidate &c : candidates) {
    if (progress)
      progress(c.r);
    auto r = runPipeline(source, lib, c.o);
    if (!r) {
      c.r.whyNot = llvm::toString(r.takeError());
    } else {
      if (c.r.kind == "megatron") { // the grid's choice, or TP over every worker
        const std::string d = chosenDescription(*r);
        c.r.plan = r->megatronGrid.empty() ? fmt::format("Megatron-LM TP {}", k)
                                           : d.substr(0, d.rfind(" by "));
      }
      auto cost = stepCostOf(*r, device, machine);
      if (!cost)
        c.r.whyNot = llvm::toString(cost.takeError());
      else
        c.r.cost = *cost;
    }
    x.runnerUps.push_back(std::move(c.r));
  }
  return x;
}

} // namespace tofu
