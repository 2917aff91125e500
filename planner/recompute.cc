// Choosing what a training step recomputes.
#include "planner/recompute.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/recompute.h"
#include "support/units.h"

namespace tofu {

const char *recomputeModeName(RecomputeMode m) {
  switch (m) {
  case RecomputeMode::None:
    return "none";
  case RecomputeMode::Sqrt:
    return "sqrt";
  case RecomputeMode::Auto:
    return "auto";
  }
  return "?";
}

std::optional<RecomputeMode> recomputeModeNamed(const std::string &name) {
  for (RecomputeMode m : {RecomputeMode::None, RecomputeMode::Sqrt, RecomputeMode::Auto})
    if (name == recomputeModeName(m))
      return m;
  return std::nullopt;
}

namespace {

using Clock = std::chrono::steady_clock;

/// One candidate set planned: the rewritten graph, its problem and its plan.
struct Trial {
  Graph graph;
  RecomputeSummary summary;
  std::optional<Problem> problem;
  MemoryFit fit;
};

/// `dropped` recomputed, planned: with `budgeted` and a limit by the memory-budgeted search
/// (a ladder of prices), else by the plain search, judged against `limit` (if any) by its
/// planned peak.
llvm::Expected<Trial> planDropping(const Graph &training, const OpLibrary &lib,
                                   const PlanOptions &options, int64_t limit,
                                   const std::vector<std::string> &dropped, bool budgeted = true) {
  Trial t;
  t.graph = training;
  auto summary = applyRecomputation(t.graph, dropped);
  if (!summary)
    return summary.takeError();
  t.summary = std::move(*summary);
  auto problem = Problem::build(t.graph, lib);
  if (!problem)
    return problem.takeError();
  t.problem = std::move(*problem);
  if (limit > 0 && budgeted) {
    auto fit = searchWithinMemory(*t.problem, options, limit, t.graph.outputs);
    if (!fit)
      return fit.takeError();
    t.fit = std::move(*fit);
    return t;
  }
  const auto start = Clock::now();
  auto plan = searchPlan(*t.problem, options);
  if (!plan)
    return plan.takeError();
  t.fit.plan = std::move(*plan);
  t.fit.exec = buildExecPlan(*t.problem, t.fit.plan);
  t.fit.memory = planMemory(*t.problem, t.fit.exec, t.graph.outputs);
  t.fit.peak = t.fit.memory.largestPeak();
  t.fit.peakWorker = t.fit.memory.largestPeakWorker();
  t.fit.fits = limit <= 0 || t.fit.peak <= limit;
  t.fit.limit = limit;
  t.fit.searches = 1;
  t.fit.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

RecomputePlan result(Trial &&t, RecomputeMode mode) {
  RecomputePlan r;
  r.mode = mode;
  r.graph = std::move(t.graph);
  r.summary = std::move(t.summary);
  r.problem = std::move(t.problem);
  r.fit = std::move(t.fit);
  return r;
}

/// Node name -> the size of its iteration space: the work a copy of it repeats.
std::map<std::string, double> iterationsOf(const Problem &p) {
  std::map<std::string, double> iterations;
  for (const ProblemNode &n : p.nodes) {
    double it = 1;
    for (int64_t v : n.shapes.vars)
      it *= double(std::max<int64_t>(v, 1));
    iterations[n.name] = it;
  }
  return iterations;
}

/// The candidates the backward pass reads, ranked for auto: most bytes per iteration of their
/// node (`iterations`: the work its recomputation repeats) first, ties in forward order.
/// With `longestRun` < n, a candidate whose dropping would make a run of more than that many
/// consecutive dropped candidates (in forward order) is left out: it stays as a checkpoint. A copy
/// reads the copies of the dropped tensors before it, so such a run is recomputed at once when the
/// backward pass reaches it, and all of it lives until its own backward readers: dropping a whole
/// chain (an RNN's states over time) saves nothing. A candidate `kept` holds is never dropped:
/// the forward pass's cuts (RecomputeCandidate::cut), say, where a run then ends, so what a copy
/// recomputes is bounded by the segment between two cuts (a transformer's sublayer), however far
/// the ranking goes.
using Kept = std::function<bool(const RecomputeCandidate &)>;

std::vector<std::string> ranked(const std::vector<RecomputeCandidate> &candidates,
                                const std::map<std::string, double> &iterations, size_t longestRun,
                                const Kept &kept) {
  std::vector<size_t> backward; // candidates the backward pass reads, in forward order
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].readByBackward && !kept(candidates[i]))
      backward.push_back(i);
  std::vector<std::pair<double, size_t>> order; // bytes per iteration, position
  for (size_t at = 0; at < backward.size(); ++at) {
    const RecomputeCandidate &c = candidates[backward[at]];
    auto it = iterations.find(c.node);
    order.push_back({double(c.bytes) / (it == iterations.end() ? 1.0 : it->second), at});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  std::vector<bool> dropped(backward.size(), false);
  std::vector<std::string> out;
  for (const auto &[ratio, at] : order) {
    size_t left = at, right = at;
    while (left > 0 && dropped[left - 1])
      --left;
    while (right + 1 < backward.size() && dropped[right + 1])
      ++right;
    if (right - left + 1 > longestRun)
      continue;
    dropped[at] = true;
    out.push_back(candidates[backward[at]].tensor);
  }
  return out;
}

/// `dropped` with what its copies would otherwise keep alive: a copy reads its node's
/// inputs, so a forward tensor that only the forward pass read (it died there) would live
/// until the copy runs, in the backward pass; such an input is dropped too, and recomputed
/// with it (a softmax's masked scores, when the softmax is), in turn. A candidate `kept` holds
/// stays (a copy reads it as a checkpoint: a cut, say). In candidate order.
std::vector<std::string> closed(const Graph &training,
                                const std::vector<RecomputeCandidate> &candidates,
                                const std::vector<std::string> &dropped, const Kept &kept) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < candidates.size(); ++i)
    index[candidates[i].tensor] = i;
  std::vector<bool> in(candidates.size(), false);
  std::vector<std::string> todo;
  for (const std::string &t : dropped)
    if (auto it = index.find(t); it != index.end() && !in[it->second]) {
      in[it->second] = true;
      todo.push_back(t);
    }
  while (!todo.empty()) {
    const std::string t = std::move(todo.back());
    todo.pop_back();
    const Node *n = training.producer(t);
    if (!n)
      continue;
    for (const std::string &input : n->inputs) {
      auto it = index.find(input);
      if (it == index.end() || in[it->second])
        continue;
      const RecomputeCandidate &c = candidates[it->second];
      if (c.readByBackward || kept(c))
        continue;
      in[it->second] = true;
      todo.push_back(input);
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (in[i])
      out.push_back(candidates[i].tensor);
  return out;
}

} // namespace

double weightAndStateBytes(const Graph &training) {
  double bytes = 0;
  for (const TensorInfo &t : training.tensors())
    if (t.role == TensorRole::Weight || t.role == TensorRole::OptimizerState)
      bytes += double(t.bytes());
  return bytes;
}

std::vector<std::string> recomputeRanking(const std::vector<RecomputeCandidate> &candidates,
                                          const Problem &p, const std::set<std::string> &kept) {
  return ranked(candidates, iterationsOf(p), candidates.size(),
                [&](const RecomputeCandidate &c) { return kept.count(c.tensor) > 0; });
}

std::vector<std::string> recomputeClosure(const Graph &training,
                                          const std::vector<RecomputeCandidate> &candidates,
                                          const std::vector<std::string> &dropped,
                                          const std::set<std::string> &kept) {
  return closed(training, candidates, dropped,
                [&](const RecomputeCandidate &c) { return kept.count(c.tensor) > 0; });
}

llvm::Expected<RecomputePlan>
planWithRecomputation(const Graph &training, const OpLibrary &lib, const PlanOptions &options,
                      int64_t limit, RecomputeMode mode,
                      const std::function<void(size_t, const MemoryFit &)> &progress) {
  const auto start = Clock::now();
  if (mode == RecomputeMode::Auto && limit <= 0)
    return stringError("recomputation 'auto' needs a memory budget per worker (it recomputes "
                       "only what the budget needs); give one, or choose 'sqrt' or 'none'");
  auto candidates = recomputeCandidates(training);
  if (!candidates)
    return candidates.takeError();
  unsigned tried = 0;
  auto attempt = [&](const std::vector<std::string> &dropped,
                     bool budgeted = true) -> llvm::Expected<Trial> {
    auto t = planDropping(training, lib, options, limit, dropped, budgeted);
    if (!t)
      return t.takeError();
    ++tried;
    if (progress)
      progress(dropped.size(), t->fit);
    return t;
  };
  std::optional<Trial> plainKept; // the plan without, where another is chosen
  auto finish = [&](Trial &&t, int64_t peakWithout, bool fitsWithout) {
    RecomputePlan r = result(std::move(t), mode);
    if (plainKept && !r.summary.copies.empty()) {
      r.problemWithout = std::move(plainKept->problem);
      r.execWithout = std::move(plainKept->fit.exec);
    }
    r.peakWithout = peakWithout;
    r.fitsWithout = fitsWithout;
    r.candidates = static_cast<unsigned>(candidates->size());
    r.tried = tried;
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  };

  auto plain = attempt({});
  if (!plain)
    return plain.takeError();
  const int64_t peakWithout = plain->fit.peak;
  const bool fitsWithout = plain->fit.fits;
  if (mode == RecomputeMode::None || (mode == RecomputeMode::Auto && fitsWithout))
    return finish(std::move(*plain), peakWithout, fitsWithout);
  plainKept = std::move(*plain);
  if (mode == RecomputeMode::Sqrt) {
    auto t = attempt(segmentCheckpoints(*candidates));
    if (!t)
      return t.takeError();
    return finish(std::move(*t), peakWithout, fitsWithout);
  }

  // auto: for each bound on the runs of dropped tensors (none, and sqrt(n) as segment
  // checkpointing keeps), the shortest prefix of the ranking that fits, by bisection
  // (dropping more needs no more memory, so the prefixes that fit are the longer ones; where
  // the search's choices break that, the bisection still ends on a prefix that fits). Of
  // those that fit, the one repeating the least work (its dropped nodes' iterations) wins.
  size_t n = 0;
  for (const RecomputeCandidate &c : *candidates)
    n += c.readByBackward;
  size_t root = 1;
  while (root * root < n)
    ++root;
  // The rankings: every candidate; runs bounded by sqrt(n); and the forward pass's cuts
  // kept, where the backward pass reads one (else that ranking is the first's).
  bool cutRead = false;
  for (const RecomputeCandidate &c : *candidates)
    cutRead = cutRead || (c.readByBackward && c.cut);
  std::vector<std::pair<size_t, bool>> rankings = {{n, false}, {root, false}};
  if (cutRead)
    rankings.push_back({n, true});
  const std::map<std::string, double> iterations = iterationsOf(*plainKept->problem);
  std::map<std::string, std::string> producerName; // tensor -> its node
  for (const RecomputeCandidate &c : *candidates)
    producerName[c.tensor] = c.node;
  std::optional<Trial> best, closest;
  double bestWork = 0;
  for (const auto &[longestRun, keepCuts] : rankings) {
    const Kept kept = [keepCuts = keepCuts](const RecomputeCandidate &c) {
      return keepCuts && c.cut;
    };
    const std::vector<std::string> order = ranked(*candidates, iterations, longestRun, kept);
    // A prefix of the ranking; where cuts are kept, with the inputs its copies would keep
    // alive (closed), so that each segment between cuts is recomputed whole from its cut.
    auto prefix = [&, keepCuts = keepCuts](size_t m) {
      std::vector<std::string> p(order.begin(), order.begin() + static_cast<long>(m));
      return keepCuts ? closed(training, *candidates, p, kept) : p;
    };
    // The candidate sets are judged by the plain search's plan (one search each) unless the
    // longest does not fit that way and the budgeted search's does.
    bool budgeted = false;
    const std::vector<std::string> whole = prefix(order.size());
    auto all = attempt(whole, false);
    if (!all)
      return all.takeError();
    if (!all->fit.fits) {
      budgeted = true;
      all = attempt(whole, true);
      if (!all)
        return all.takeError();
    }
    if (!all->fit.fits) {
      if (!closest || all->fit.peak < closest->fit.peak)
        closest = std::move(*all);
      continue;
    }
    size_t lo = 0, hi = order.size(); // prefix(lo) does not fit, prefix(hi) does
    Trial fitting = std::move(*all);
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      auto t = attempt(prefix(mid), budgeted);
      if (!t)
        return t.takeError();
      if (t->fit.fits) {
        hi = mid;
        fitting = std::move(*t);
      } else {
        lo = mid;
      }
    }
    // The work the fitting set repeats: its dropped nodes' iterations.
    double work = 0;
    for (const std::string &t : fitting.summary.dropped)
      if (auto it = iterations.find(producerName.at(t)); it != iterations.end())
        work += it->second;
    if (!best || work < bestWork) {
      bestWork = work;
      best = std::move(fitting);
    }
  }
  if (best)
    return finish(std::move(*best), peakWithout, false);
  // Neither ranking fits: segment checkpointing over every forward tensor (those only the
  // forward pass reads too), which keeps a chain's every ceil(sqrt(n))-th.
  for (bool budgeted : {false, true}) {
    auto t = attempt(segmentCheckpoints(*candidates), budgeted);
    if (!t)
      return t.takeError();
    if (t->fit.fits)
      return finish(std::move(*t), peakWithout, false);
    if (!closest || t->fit.peak < closest->fit.peak)
      closest = std::move(*t);
  }
  // None fits: the closest, the smaller of its peak and the plan's without.
  return closest && closest->fit.peak <= peakWithout
             ? finish(std::move(*closest), peakWithout, false)
             : finish(std::move(*plainKept), peakWithout, false);
}

llvm::Expected<RecomputePlan>
fitWorkersRecomputing(const Graph &training, const OpLibrary &lib, const PlanOptions &options,
                      int64_t limit, RecomputeMode mode, unsigned maxWorkers,
                      const std::function<void(unsigned, const RecomputePlan &)> &progress,
                      const Topology *machine) {
  if (limit <= 0)
    return stringError("fitting workers needs a memory budget per worker");
  const auto start = Clock::now();
  // Without recomputation first (planner/memory_fit.h's scan, from the bound the tensors live
  // at once set): the count to beat.
  auto problem = Problem::build(training, lib);
  if (!problem)
    return problem.takeError();
  PlanOptions base = options;
  base.factors.clear();
  auto plain = fitWorkers(*problem, base, limit, training.outputs, maxWorkers, nullptr, machine);
  std::optional<RecomputePlan> best;
  unsigned hi = maxWorkers + 1; // the smallest count known to fit
  unsigned workersWithout = 0;
  if (plain) {
    RecomputePlan r;
    r.mode = mode;
    r.graph = training;
    r.problem = std::move(*problem);
    r.fit = std::move(plain->fit);
    r.peakWithout = r.fit.peak;
    r.fitsWithout = true;
    hi = workersWithout = r.fit.plan.workers;
    if (progress)
      progress(hi, r);
    best = std::move(r);
  } else {
    llvm::consumeError(plain.takeError());
  }
  if (mode == RecomputeMode::None) {
    if (!best)
      return stringError(fmt::format("no plan on at most {} workers fits in {} per worker "
                                     "without recomputation",
                                     maxWorkers, humanBytes(double(limit))));
    best->workersWithout = workersWithout;
    best->seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return std::move(*best);
  }
  // With recomputation, by bisection between a bound no recomputation can beat (the weights
  // and optimiser state live through the whole step: their bytes over the budget) and that
  // count: fewer workers hold more of everything, so the counts that fit are the larger ones.
  const double kept = weightAndStateBytes(training);
  const double bound = std::ceil(kept / double(limit));
  // The counts to bisect: from the bound up to below the count that fits without (or the
  // most), those that fill part of the machine where there is one.
  std::vector<unsigned> counts;
  const unsigned top = machine ? std::min(maxWorkers, machine->workers()) : maxWorkers;
  for (unsigned k = std::max(1u, static_cast<unsigned>(std::min(bound, double(top + 1))));
       k < hi && k <= top; ++k)
    if (!machine || topologyForWorkers(*machine, k))
      counts.push_back(k);
  std::optional<RecomputePlan> closest;
  unsigned tried = best ? best->tried : 0;
  size_t lo = 0, up = counts.size(); // counts[up] (or hi) fits; below counts[lo] do not
  while (lo < up) {
    const size_t mid = lo + (up - lo) / 2;
    const unsigned k = counts[mid];
    PlanOptions o = options;
    o.workers = k;
    o.factors.clear();
    o.prefixWeights = {};
    if (machine)
      o = machineOptions(o, *topologyForWorkers(*machine, k));
    auto r = planWithRecomputation(training, lib, o, limit, mode);
    if (!r)
      return r.takeError();
    tried += r->tried;
    if (progress)
      progress(k, *r);
    if (r->fit.fits) {
      up = mid;
      best = std::move(*r);
    } else {
      lo = mid + 1;
      closest = std::move(*r);
    }
  }
  if (!best)
    return stringError(fmt::format(
        "no plan on at most {} workers fits in {} per worker with recomputation '{}'{}", maxWorkers,
        humanBytes(double(limit)), recomputeModeName(mode),
        closest ? fmt::format(": at {} workers the smallest planned peak found is {}",
                              closest->fit.plan.workers, humanBytes(double(closest->fit.peak)))
                : fmt::format(": the weights and optimiser state alone ({}) need {} workers",
                              humanBytes(kept), bound)));
  best->workersWithout = workersWithout;
  best->tried = tried;
  best->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return std::move(*best);
}

llvm::Expected<ExactRecompute> exactRecomputation(const Graph &training, const OpLibrary &lib,
                                                  const PlanOptions &options, int64_t limit,
                                                  const DeviceModel &device,
                                                  unsigned maxCandidates) {
  auto candidates = recomputeCandidates(training);
  if (!candidates)
    return candidates.takeError();
  // Every candidate, those only the forward pass reads too: dropping one of them matters
  // where a copy reads it (the copy then reads its copy instead of keeping it alive).
  std::vector<std::string> names;
  for (const RecomputeCandidate &c : *candidates)
    names.push_back(c.tensor);
  if (names.size() > maxCandidates)
    return stringError(fmt::format("the exact recomputation tries every subset of the forward "
                                   "tensors it may drop: this graph has {}, more than {}",
                                   names.size(), maxCandidates));
  ExactRecompute best;
  for (uint64_t mask = 0; mask < (uint64_t(1) << names.size()); ++mask) {
    std::vector<std::string> dropped;
    for (size_t i = 0; i < names.size(); ++i)
      if (mask >> i & 1)
        dropped.push_back(names[i]);
    auto t = planDropping(training, lib, options, 0, dropped);
    if (!t)
      return t.takeError();
    ++best.tried;
    if (t->fit.peak > limit)
      continue;
    auto e = estimateStepTime(*t->problem, t->fit.exec, t->graph.outputs, device);
    if (!e)
      return e.takeError();
    if (!best.fits || e->seconds < best.seconds ||
        (e->seconds == best.seconds && t->fit.peak < best.peak)) {
      best.fits = true;
      best.seconds = e->seconds;
      best.peak = t->fit.peak;
      best.dropped = dropped;
    }
  }
  return best;
}

} // namespace tofu
