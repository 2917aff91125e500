// Searching under a memory budget.
#include "planner/memory_fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "search/report.h"
#include "support/units.h"

namespace tofu {
namespace {

using Clock = std::chrono::steady_clock;

/// Whether the algorithm's objective takes PlanOptions::memoryWeight.
bool takesWeight(Algorithm a) { return a != Algorithm::Spartan && a != Algorithm::Exhaustive; }

struct Trial {
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
  int64_t peak = 0;
  double weight = 0;
  int64_t cost = 0; ///< its objective (planObjective): what the fitting plans are compared by
};

/// The nodes (Problem indices) running while some worker has more than `limit` bytes
/// live, less what its placement wastes (its arena beyond its most bytes live): those
/// whose buffers the price should shrink.
void markPressed(const Trial &t, int64_t limit, std::vector<bool> &pressed) {
  for (const WorkerMemory &w : t.memory.workers) {
    const auto profile = liveOverTime(w);
    int64_t most = 0;
    for (const auto &[time, live] : profile)
      most = std::max(most, live);
    const int64_t over = limit - (w.peak - most);
    for (size_t i = 0; i + 1 < profile.size(); ++i) {
      if (profile[i].second <= over)
        continue;
      // Live above the line over [this time, the next): the nodes of those times (node j
      // of the plan fetches and computes at 3j, assembles at 3j + 1).
      for (int64_t time = profile[i].first; time < profile[i + 1].first; ++time)
        if (time / 3 < int64_t(t.exec.nodes.size()))
          pressed[t.exec.nodes[time / 3].node] = true;
    }
  }
}

/// The search with the price on memory first when `leastMemoryFirst` (a scan over worker
/// counts, where most counts tried do not fit: one search decides them).
llvm::Expected<MemoryFit> search(const Problem &p, const PlanOptions &given, int64_t limit,
                                 const std::vector<std::string> &outputs, bool leastMemoryFirst) {
  const auto start = Clock::now();
  // The time objective's work per node, estimated once for every search below.
  PlanOptions options = given;
  if (options.time)
    options.time = withWorkOf(*options.time, p);
  MemoryFit out;
  out.limit = limit;
  std::vector<Trial> trials;
  std::vector<bool> pressed(p.nodes.size(), false);
  auto trial = [&](double weight) -> llvm::Expected<const Trial *> {
    PlanOptions o = options;
    o.memoryWeight = weight;
    o.pricedBuffers = pressed;
    auto plan = searchPlan(p, o);
    if (!plan)
      return plan.takeError();
    Trial t;
    t.plan = std::move(*plan);
    t.exec = buildExecPlan(p, t.plan);
    t.memory = planMemory(p, t.exec, outputs);
    t.peak = t.memory.largestPeak();
    t.weight = weight;
    // The bytes objective compares the plans' bytes, as the paper's budgets did.
    t.cost = t.plan.objective == "time" ? planObjective(p, options, t.plan) : t.plan.totalBytes;
    ++out.searches;
    markPressed(t, limit, pressed);
    trials.push_back(std::move(t));
    return &trials.back();
  };
  auto finish = [&](bool fits) {
    const Trial *pick = nullptr;
    for (const Trial &t : trials)
      if (!pick || (fits ? t.peak <= limit && (pick->peak > limit || t.cost < pick->cost ||
                                               (t.cost == pick->cost && t.weight < pick->weight))
                         : t.peak < pick->peak))
        pick = &t;
    out.fits = fits;
    out.plan = pick->plan;
    out.exec = pick->exec;
    out.memory = pick->memory;
    out.peak = pick->peak;
    out.peakWorker = pick->memory.largestPeakWorker();
    out.memoryWeight = pick->weight;
    out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return llvm::Expected<MemoryFit>(std::move(out));
  };
  // The highest price: as high as the objective's 64-bit sums allow (tiles and buffers
  // together are a few times the one-worker bytes), and far beyond where a byte of memory
  // outweighs the communication it costs to save (about k bytes).
  const int64_t single = p.workerTensorBytes({}, {});
  const double wmax = std::min(double(options.workers) * std::ldexp(1.0, 24),
                               1e16 / double(std::max<int64_t>(single, 1)));
  const bool priced = takesWeight(options.algorithm) && options.workers > 1;
  if (!leastMemoryFirst || !priced) {
    auto t0 = trial(0);
    if (!t0)
      return t0.takeError();
    if ((*t0)->peak <= limit || !priced)
      return finish((*t0)->peak <= limit);
  }
  // The highest price, again while it marks more nodes as pressed.
  bool fits = false;
  for (unsigned round = 0; round < 3 && !fits; ++round) {
    const std::vector<bool> before = pressed;
    auto hi = trial(wmax);
    if (!hi)
      return hi.takeError();
    fits = (*hi)->peak <= limit;
    if (pressed == before)
      break;
  }
  int64_t closest = INT64_MAX;
  for (const Trial &t : trials)
    closest = std::min(closest, t.peak);
  if (leastMemoryFirst) {
    // A scan over worker counts rejects a count the least memory misses by far.
    if (closest > limit + limit / 4)
      return finish(false);
    auto t0 = trial(0);
    if (!t0)
      return t0.takeError();
    if ((*t0)->peak <= limit)
      return finish(true);
  }
  // The peak is not monotone in the price (the price weighs every node's buffers, the peak
  // only the largest moment's): a ladder of prices, a factor of 8 apart, down to 2^-27 of
  // the highest; the fitting plan of least communication among all of them wins.
  const double top = std::log2(wmax);
  for (int e = -3; e >= -27; e -= 3) {
    auto t = trial(std::exp2(top + e));
    if (!t)
      return t.takeError();
    fits |= (*t)->peak <= limit;
  }
  return finish(fits);
}

/// search(), and under the time objective, where none of its plans fits, the same by bytes:
/// the time objective's replicas cost memory, and its prices do not always find as small a
/// peak as the bytes objective's (a budget never needs more workers by time than by bytes).
/// The plan that fits, else the smaller peak; the searches and seconds of both.
llvm::Expected<MemoryFit> searchEither(const Problem &p, const PlanOptions &options, int64_t limit,
                                       const std::vector<std::string> &outputs,
                                       bool leastMemoryFirst) {
  auto timed = search(p, options, limit, outputs, leastMemoryFirst);
  if (!timed || timed->fits || !options.time)
    return timed;
  PlanOptions bytes = options;
  bytes.time.reset();
  auto other = search(p, bytes, limit, outputs, leastMemoryFirst);
  if (!other)
    return other.takeError();
  MemoryFit &pick = other->fits || other->peak < timed->peak ? *other : *timed;
  pick.searches = timed->searches + other->searches;
  pick.seconds = timed->seconds + other->seconds;
  return std::move(pick);
}

} // namespace

llvm::Expected<MemoryFit> searchWithinMemory(const Problem &p, const PlanOptions &options,
                                             int64_t limit,
                                             const std::vector<std::string> &outputs) {
  if (limit <= 0)
    return stringError("the memory per worker must be positive");
  return searchEither(p, options, limit, outputs, false);
}

int64_t largestLiveBytes(const MemoryPlan &oneWorker) {
  int64_t most = 0;
  for (const WorkerMemory &w : oneWorker.workers)
    most = std::max(most, liveAtMost(w).total());
  return most;
}

llvm::Expected<WorkerCountFit>
fitWorkers(const Problem &p, const PlanOptions &options, int64_t limit,
           const std::vector<std::string> &outputs, unsigned maxWorkers,
           const std::function<void(unsigned k, const MemoryFit &)> &progress,
           const Topology *machine) {
  if (limit <= 0)
    return stringError("the memory per worker must be positive");
  if (maxWorkers == 0)
    return stringError("the largest number of workers to try must be at least 1");
  if (machine)
    maxWorkers = std::min(maxWorkers, machine->workers());
  PlanOptions one = options;
  one.workers = 1;
  one.factors.clear();
  one.prefixWeights = {};
  auto onePlan = searchPlan(p, one);
  if (!onePlan)
    return onePlan.takeError();
  const int64_t live = largestLiveBytes(planMemory(p, buildExecPlan(p, *onePlan), outputs));
  WorkerCountFit out;
  out.lowerBound = static_cast<unsigned>(std::max<int64_t>(1, (live + limit - 1) / limit));
  if (out.lowerBound > maxWorkers)
    return stringError(fmt::format(
        "no plan on at most {} workers can fit in {} per worker: {} of tensors are live at "
        "once, which needs at least {} workers",
        maxWorkers, humanBytes(double(limit)), humanBytes(double(live)), out.lowerBound));
  int64_t closest = 0; // at the last count tried
  unsigned last = 0;   // the last count tried
  for (unsigned k = out.lowerBound; k <= maxWorkers; ++k) {
    PlanOptions o = options;
    o.workers = k;
    if (machine) {
      const std::optional<Topology> part = topologyForWorkers(*machine, k);
      if (!part)
        continue;
      o = machineOptions(o, *part);
    }
    last = k;
    auto fit = searchEither(p, o, limit, outputs, true);
    if (!fit)
      return fit.takeError();
    out.tried.push_back({k, fit->peak});
    if (progress)
      progress(k, *fit);
    if (fit->fits) {
      out.fit = std::move(*fit);
      return llvm::Expected<WorkerCountFit>(std::move(out));
    }
    closest = fit->peak;
  }
  if (last == 0)
    return stringError(fmt::format("no plan on at most {} workers fits in {} per worker: no "
                                   "count from {} up fills part of the machine",
                                   maxWorkers, humanBytes(double(limit)), out.lowerBound));
  return stringError(fmt::format("no plan on at most {} workers fits in {} per worker: at {} "
                                 "workers the smallest planned peak found is {}, {} over",
                                 maxWorkers, humanBytes(double(limit)), last,
                                 humanBytes(double(closest)), humanBytes(double(closest - limit))));
}

} // namespace tofu
