// Machine levels: the search's prefix weights, traffic per level (reading them: topology_spec).
#include "planner/topology.h"

#include <algorithm>
#include <map>

#include "fmt/format.h"

namespace tofu {

std::vector<unsigned> topologyFactors(const Topology &t) {
  std::vector<unsigned> out;
  for (const TopologyLevel &l : t.levels)
    for (unsigned f : factorWorkers(l.count))
      out.push_back(f);
  return out;
}

std::optional<Topology> topologyForWorkers(const Topology &t, unsigned k) {
  if (k == 0 || t.levels.empty())
    return std::nullopt;
  uint64_t inside = 1; // workers in one unit of the levels inside level i
  for (size_t i = t.levels.size(); i-- > 0;) {
    if (k % inside != 0)
      return std::nullopt;
    const uint64_t m = k / inside;
    if (m <= t.levels[i].count) {
      Topology out;
      out.levels.assign(t.levels.begin() + static_cast<long>(i), t.levels.end());
      out.levels.front().count = static_cast<unsigned>(m);
      return out;
    }
    inside *= t.levels[i].count;
  }
  return std::nullopt;
}

PlanOptions machineOptions(PlanOptions options, const Topology &t) {
  options.workers = t.workers();
  options.factors = topologyFactors(t);
  options.prefixWeights = topologyWeights(t);
  if (options.time) // the weights' unit: a byte over the innermost level
    options.time->bytesPerSecond = t.levels.back().bandwidth;
  return options;
}

PrefixWeights topologyWeights(const Topology &t) {
  PrefixWeights out;
  const double inner = t.levels.back().bandwidth;
  bool latency = false;
  for (size_t i = 0; i < t.levels.size(); ++i) {
    const bool last = i + 1 == t.levels.size();
    const double wb =
        (1 / t.levels[i].bandwidth - (last ? 0 : 1 / t.levels[i + 1].bandwidth)) * inner;
    const double wm = (t.levels[i].latency - (last ? 0 : t.levels[i + 1].latency)) * inner;
    latency |= t.levels[i].latency > 0;
    const size_t steps = factorWorkers(t.levels[i].count).size();
    if (steps == 0) { // one unit: its prefix is the level outside's (none moves nothing)
      if (!out.bytes.empty()) {
        out.bytes.back() += wb;
        out.messages.back() += wm;
      }
      continue;
    }
    for (size_t s = 0; s + 1 < steps; ++s) {
      out.bytes.push_back(0);
      out.messages.push_back(0);
    }
    out.bytes.push_back(wb);
    out.messages.push_back(wm);
  }
  if (!latency)
    out.messages.clear();
  return out;
}

TopologyTraffic topologyTraffic(const Problem &p, const ExecPlan &plan, const Topology &t) {
  TopologyTraffic out;
  const size_t L = t.levels.size();
  out.levels.assign(L, {});
  std::vector<std::vector<LevelTraffic>> perWorker(plan.workers, std::vector<LevelTraffic>(L));
  auto count = [&](unsigned from, unsigned to, int64_t bytes) {
    const unsigned l = levelBetween(t, from, to);
    if (l >= L)
      return;
    out.levels[l].bytes += bytes;
    ++out.levels[l].messages;
    perWorker[to][l].bytes += bytes;
    ++perWorker[to][l].messages;
  };
  for (const NodeExec &ne : plan.nodes)
    forEachTransfer(p, ne, count);
  out.workerSeconds.assign(plan.workers, 0);
  out.workerBytes.assign(plan.workers, 0);
  out.workerMessages.assign(plan.workers, 0);
  for (unsigned w = 0; w < plan.workers; ++w) {
    for (size_t l = 0; l < L; ++l) {
      out.workerBytes[w] += perWorker[w][l].bytes;
      out.workerMessages[w] += perWorker[w][l].messages;
    }
    for (size_t l = 0; l < L; ++l)
      out.workerSeconds[w] += double(perWorker[w][l].bytes) / t.levels[l].bandwidth +
                              double(perWorker[w][l].messages) * t.levels[l].latency;
    if (out.workerSeconds[w] > out.slowestSeconds) {
      out.slowestSeconds = out.workerSeconds[w];
      out.slowestWorker = w;
    }
  }
  return out;
}

llvm::Expected<TopologyPlan> searchForTopology(const Problem &p, PlanOptions options,
                                               const Topology &t) {
  if (options.workers != t.workers())
    return stringError(
        fmt::format("{} workers but the topology has {}", options.workers, t.workers()));
  TopologyPlan out;
  if (options.time) // estimated once for the machine's search and the two plans' compute
    options.time = withWorkOf(*options.time, p);
  options.factors.clear();
  options.prefixWeights = {};
  PlanOptions bytesOnly = options;
  bytesOnly.time.reset();
  auto blind = searchPlan(p, bytesOnly);
  if (!blind)
    return blind.takeError();
  out.leastBytes = std::move(*blind);
  out.leastBytesTraffic = topologyTraffic(p, buildExecPlan(p, out.leastBytes), t);
  auto weighted = searchPlan(p, machineOptions(options, t));
  if (!weighted)
    return weighted.takeError();
  out.weighted = std::move(*weighted);
  out.weightedTraffic = topologyTraffic(p, buildExecPlan(p, out.weighted), t);
  // Under the time objective each plan's compute counts too (a worker's, on average).
  auto compute = [&](const PartitionPlan &plan) {
    return options.time ? planComputeSeconds(p, *options.time, plan.steps) : 0.0;
  };
  out.leastBytesChosen = out.leastBytesTraffic.slowestSeconds + compute(out.leastBytes) <
                         out.weightedTraffic.slowestSeconds + compute(out.weighted);
  out.plan = out.leastBytesChosen ? out.leastBytes : out.weighted;
  out.traffic = out.leastBytesChosen ? out.leastBytesTraffic : out.weightedTraffic;
  return out;
}

} // namespace tofu
