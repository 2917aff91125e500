// The pipeline: model -> checked graph -> training graph -> analysis -> plan -> execution.
#include "planner/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <vector>

#include "analysis/checked.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "grammar/diagnostics.h"
#include "graph/microbatch.h"
#include "graph/onnx_import.h"
#include "graph/precision.h"
#include "graph/recompute.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "support/units.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tofu {
namespace {

/// Whether `dir` holds a .tdl file (in it or up to two folders down).
bool holdsTdl(const std::filesystem::path &dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return false;
  // Symbolic links inside are not followed and the walk stays shallow: a directory given by
  // mistake (/, a home) is answered quickly.
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tdl")
      return true;
    if (it.depth() >= 2)
      it.disable_recursion_pending();
  }
  return false;
}

} // namespace

llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave,
                                       const std::string &anchor, const std::string &label) {
  if (userGave) {
    if (!holdsTdl(given))
      return stringError(label + " " + given + ": no .tdl files there");
    return given;
  }
  std::vector<std::string> looked;
  if (const char *env = std::getenv("TOFU_OPS"); env && *env) {
    if (!holdsTdl(env))
      return stringError(std::string("TOFU_OPS=") + env + ": no .tdl files there");
    return std::string(env);
  }
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::canonical(anchor.empty() ? "/proc/self/exe" : anchor, ec);
  if (!ec) {
    // A Bazel build: the library is among the binary's runfiles.
    const std::filesystem::path runfiles = exe.string() + ".runfiles/tofu/ops";
    if (holdsTdl(runfiles))
      return runfiles.string();
    looked.push_back(runfiles.string());
  }
  if (!ec)
    for (std::filesystem::path d = exe.parent_path();; d = d.parent_path()) {
      for (const char *sub : {"share/tofu/ops", "ops"}) {
        const std::filesystem::path candidate = d / sub;
        if (holdsTdl(candidate))
          return candidate.string();
        looked.push_back(candidate.string());
      }
      if (d == d.parent_path())
        break;
    }
  if (holdsTdl("ops"))
    return std::string("ops");
  looked.push_back(std::filesystem::absolute("ops", ec).string());
  std::string list;
  std::sort(looked.begin(), looked.end());
  looked.erase(std::unique(looked.begin(), looked.end()), looked.end());
  for (const std::string &l : looked)
    list += "\n  " + l;
  return stringError("cannot find the operator library (.tdl files); give --ops DIR or set "
                     "TOFU_OPS. Looked in:" +
                     list);
}

const char kTrainableHelp[] =
    "With --onnx: float initializers to train whatever the import's rule says (by default "
    "an initializer holding a value that is not finite, or an anonymous one of one "
    "element, onnx::<op>_<n>, is a constant)";
const char *const kBf16PrecisionHelp =
    "as torch.autocast(dtype=torch.bfloat16): products and convolutions on bfloat16 operands, "
    "accumulating in float32; softmax, normalisations' statistics, losses, exp, log, pow and "
    "sums in float32; weights, gradients of weights and optimiser state float32";
const char kFrozenHelp[] =
    "With --onnx: float initializers to keep constant (not trained, not in checkpoints)";

namespace {

/// The graph a source names, not yet checked.
llvm::Expected<Graph> readGraph(const GraphSource &source, const OpLibrary &lib,
                                std::string *name) {
  if (!source.model.empty()) {
    *name = source.model;
    return buildModel(source.model, source.batch);
  }
  if (!source.onnxFile.empty()) {
    *name = source.onnxFile;
    OnnxImportOptions options;
    options.batch = source.batch;
    options.dataInputs = source.dataInputs;
    options.dataInputsExact = source.dataInputsGiven;
    options.batchExact = source.batchGiven;
    options.givenInputs = source.givenInputs;
    options.sampleShapes = source.sampleShapes;
    options.trainable = source.trainable;
    options.frozen = source.frozen;
    if (!source.onnxBytes.empty())
      return importOnnxBytes(source.onnxBytes, source.onnxFile, lib, options);
    return importOnnx(source.onnxFile, lib, options);
  }
  *name = source.graphFile;
  auto buf = llvm::MemoryBuffer::getFile(source.graphFile);
  if (!buf)
    return stringError("cannot read " + source.graphFile + ": " + buf.getError().message());
  auto g = graphFromJson((*buf)->getBuffer().str());
  if (!g)
    return stringError(source.graphFile + ": " + llvm::toString(g.takeError()));
  return g;
}

} // namespace

llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib,
                                std::string *name) {
  auto g = readGraph(source, lib, name);
  if (!g)
    return g.takeError();
  if (llvm::Error e = checkGraph(*g, lib))
    return stringError(*name + ": " + llvm::toString(std::move(e)));
  return g;
}

namespace {

/// The search's options under a budget: on a machine (and the worker count given), every
/// plan searched over its levels.
PlanOptions budgetedSearch(const PipelineOptions &o) {
  if (o.machine && o.memoryPerWorker > 0 && o.fitWorkersUpTo == 0)
    return machineOptions(o.search, *o.machine);
  return o.search;
}

/// The plan `choose` gives, through PipelineOptions::agree where given: then every process
/// takes the plan decoded from the chooser's text, the chooser too, so that all run the same.
llvm::Expected<PartitionPlan>
agreedPlan(const PipelineOptions &o, const Problem &p,
           const std::function<llvm::Expected<PartitionPlan>()> &choose) {
  if (!o.agree)
    return choose();
  auto text = o.agree([&]() -> llvm::Expected<std::string> {
    auto plan = choose();
    if (!plan)
      return plan.takeError();
    return encodePlan(*plan);
  });
  if (!text)
    return text.takeError();
  auto decoded = decodePlan(*text, p);
  if (!decoded)
    return stringError("the first process's plan: " + llvm::toString(decoded.takeError()));
  return decoded;
}

/// `f`'s figures (peak, price, searches) without its plans, which the result holds.
MemoryFit figuresOnly(MemoryFit f) {
  f.plan = PartitionPlan();
  f.exec = ExecPlan();
  f.memory = MemoryPlan();
  return f;
}

/// The budgeted plan of r.problem without recomputation: the one of least communication that
/// fits (or with fitWorkersUpTo, at the fewest workers that fit).
llvm::Error planWithinBudget(PipelineResult &r, const PipelineOptions &o, bool &ready) {
  const int64_t limit = o.memoryPerWorker;
  const PlanOptions search = budgetedSearch(o);
  std::optional<BudgetChoice> chosen;
  auto plan = agreedPlan(o, *r.problem, [&]() -> llvm::Expected<PartitionPlan> {
    BudgetChoice b;
    b.limit = limit;
    if (o.fitWorkersUpTo > 0) {
      auto found = fitWorkers(
          *r.problem, search, limit, r.graph.outputs, o.fitWorkersUpTo,
          [&](unsigned k, const MemoryFit &f) {
            if (o.onWorkerCount)
              o.onWorkerCount(k, f, nullptr);
          },
          o.machine ? &*o.machine : nullptr);
      if (!found)
        return found.takeError();
      b.fit = std::move(found->fit);
      b.lowerBound = found->lowerBound;
      b.tried = std::move(found->tried);
    } else {
      auto found = searchWithinMemory(*r.problem, search, limit, r.graph.outputs);
      if (!found)
        return found.takeError();
      if (!found->fits)
        return stringError(noPlanFitsMessage(search.workers, limit, *found, std::nullopt) +
                           o.noFitHint);
      b.fit = std::move(*found);
    }
    chosen = std::move(b);
    return chosen->fit.plan;
  });
  if (!plan)
    return plan.takeError();
  r.plan = std::move(*plan);
  if (chosen && !o.agree) { // the budgeted search's own execution and memory plans
    r.exec = std::move(chosen->fit.exec);
    r.memory = std::move(chosen->fit.memory);
    ready = true;
  }
  if (chosen) {
    chosen->fit = figuresOnly(std::move(chosen->fit));
    r.budget = std::move(chosen);
  }
  return llvm::Error::success();
}

std::vector<std::string> splitLines(const std::string &text) {
  std::vector<std::string> out;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

/// The training step r.graph with recomputation planned (planner/recompute.h): what it drops,
/// the rewritten graph, its analysis and plan.
llvm::Error planRecomputing(PipelineResult &r, const OpLibrary &lib, const PipelineOptions &o,
                            bool &ready) {
  const int64_t limit = o.memoryPerWorker;
  const RecomputeMode mode = *o.recompute;
  const PlanOptions search = budgetedSearch(o);
  std::optional<RecomputePlan> mine;
  auto choose = [&]() -> llvm::Expected<std::string> {
    llvm::Expected<RecomputePlan> rp =
        o.fitWorkersUpTo > 0
            ? fitWorkersRecomputing(
                  r.graph, lib, search, limit, mode, o.fitWorkersUpTo,
                  [&](unsigned k, const RecomputePlan &p) {
                    if (o.onWorkerCount)
                      o.onWorkerCount(k, p.fit, &p);
                  },
                  o.machine ? &*o.machine : nullptr)
            : planWithRecomputation(r.graph, lib, search, limit, mode, o.onCandidateSet);
    if (!rp)
      return rp.takeError();
    if (limit > 0 && !rp->fit.fits)
      return stringError(noPlanFitsMessage(search.workers, limit, rp->fit, mode) + o.noFitHint);
    mine = std::move(*rp);
    std::string names; // one a line
    for (const std::string &t : mine->summary.dropped)
      names += t + "\n";
    return names;
  };
  auto text = o.agree ? o.agree(choose) : choose();
  if (!text)
    return text.takeError();
  const std::vector<std::string> dropped = splitLines(*text);
  if (mine) { // the planner's own graph and analysis
    if (!dropped.empty())
      r.withoutRecomputation = std::move(r.graph);
    r.graph = std::move(mine->graph);
    r.problem = std::move(mine->problem);
    r.recomputed = mine->summary;
  } else { // the chooser's set, rewritten here the same way
    Graph rewritten = r.graph;
    auto summary = applyRecomputation(rewritten, dropped);
    if (!summary)
      return summary.takeError();
    r.recomputed = std::move(*summary);
    if (!dropped.empty())
      r.withoutRecomputation = std::move(r.graph);
    r.graph = std::move(rewritten);
    auto problem = Problem::build(r.graph, lib);
    if (!problem)
      return problem.takeError();
    r.problem = std::move(*problem);
  }
  if (mine && !o.agree) { // the planner's own plans
    r.plan = std::move(mine->fit.plan);
    r.exec = std::move(mine->fit.exec);
    r.memory = std::move(mine->fit.memory);
    ready = true;
  } else {
    auto plan = agreedPlan(o, *r.problem,
                           [&]() -> llvm::Expected<PartitionPlan> { return mine->fit.plan; });
    if (!plan)
      return plan.takeError();
    r.plan = std::move(*plan);
  }
  if (mine) {
    BudgetChoice b;
    b.limit = limit;
    b.fit = figuresOnly(std::move(mine->fit));
    mine->fit = MemoryFit();
    b.recompute = std::move(mine);
    r.budget = std::move(b);
  }
  return llvm::Error::success();
}

/// The cuts of the model (`microForward`) in the step, in each of its `microbatches` copies:
/// what recomputation within stages keeps (a stage ends at one).
llvm::Expected<std::set<std::string>> stepCuts(const Graph &microForward, unsigned microbatches) {
  auto modelCandidates = forwardCandidates(microForward);
  if (!modelCandidates)
    return modelCandidates.takeError();
  std::set<std::string> cuts;
  for (const RecomputeCandidate &c : *modelCandidates)
    if (c.cut)
      for (unsigned m = 0; m < microbatches; ++m)
        cuts.insert(microbatches > 1 ? c.tensor + microbatchSuffix(m) : c.tensor);
  return cuts;
}

/// Stages' recomputation (--recompute sqrt) into `r`: what segment checkpointing drops of its
/// training graph, but every cut of the model in the step (`cuts`, stepCuts) kept, so that each
/// copy runs in its own stage's backward (a stage ends at a cut). The step's own graph has no
/// cut before the copies' mean of losses.
llvm::Error recomputeWithinStages(PipelineResult &r, const std::set<std::string> &cuts) {
  auto candidates = recomputeCandidates(r.graph);
  if (!candidates)
    return candidates.takeError();
  std::vector<std::string> dropped;
  for (const std::string &t : segmentCheckpoints(*candidates))
    if (!cuts.count(t))
      dropped.push_back(t);
  Graph rewritten = r.graph;
  auto summary = applyRecomputation(rewritten, dropped);
  if (!summary)
    return summary.takeError();
  if (!summary->dropped.empty())
    r.withoutRecomputation = std::move(r.graph);
  r.graph = std::move(rewritten);
  r.recomputed = std::move(*summary);
  return llvm::Error::success();
}

/// A staged plan of a training graph: its problem, the stages' plans side by side, the step's
/// memory plan and each stage's peak in it.
struct StagedTrial {
  Graph graph;
  RecomputeSummary summary;
  std::optional<Problem> problem;
  StagedPlan staged;
  MemoryPlan memory;
  std::vector<int64_t> peaks; ///< per stage
  double seconds = 0;
  bool fits(int64_t limit) const {
    return std::all_of(peaks.begin(), peaks.end(), [&](int64_t p) { return p <= limit; });
  }
  int64_t peak() const { return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end()); }
};

/// What every staged trial shares: the stages' search options, the device balancing them.
struct StagedSetting {
  const PipelineOptions &o;
  const OpLibrary &lib;
  const Graph &microForward;
  const std::set<std::string> &forwardNodes;
  PlanOptions search;
  DeviceModel device;
};

/// `training` with `dropped` recomputed (its problem given as `built` when nothing is), planned
/// as stages: each stage searched under `pricedLimit` where that is positive (planStages).
llvm::Expected<StagedTrial> stagedTrial(const StagedSetting &c, const Graph &training,
                                        const std::vector<std::string> &dropped,
                                        std::optional<Problem> built, int64_t pricedLimit,
                                        const StageSpec &spec) {
  const auto t0 = std::chrono::steady_clock::now();
  StagedTrial t;
  t.graph = training;
  if (!dropped.empty()) {
    auto summary = applyRecomputation(t.graph, dropped);
    if (!summary)
      return summary.takeError();
    t.summary = std::move(*summary);
    built.reset();
  }
  if (!built) {
    auto problem = Problem::build(t.graph, c.lib);
    if (!problem)
      return problem.takeError();
    built = std::move(*problem);
  }
  t.problem = std::move(built);
  const Problem &p = *t.problem;
  const SingleWorker one = singleWorker(p, t.graph.outputs);
  auto alone = estimateStepTime(p, one.exec, t.graph.outputs, c.device);
  if (!alone)
    return alone.takeError();
  std::vector<double> work(p.nodes.size(), 0);
  for (const OpTimeEstimate &op : alone->workerOps[0])
    work[op.node] += op.seconds;
  auto staged = planStages(p, c.microForward, c.forwardNodes, spec, c.search, work, pricedLimit,
                           t.graph.outputs);
  if (!staged)
    return staged.takeError();
  t.staged = std::move(*staged);
  std::vector<ReducedGradient> reduced;
  if (spec.reduceOnce)
    reduced = reduceGradientsOnce(p, t.staged.exec);
  // Kept where the step is estimated shorter so: the reductions then wait for the last
  // microbatch, where each microbatch's could run in the schedule's bubbles.
  std::optional<Topology> machine;
  if (c.o.machine)
    machine = topologyForWorkers(*c.o.machine, c.search.workers);
  if (!reduced.empty()) {
    auto once = estimateStepTime(p, t.staged.exec, t.graph.outputs, c.device, machine);
    if (!once)
      return once.takeError();
    for (ReducedGradient &g : reduced)
      swapGradient(t.staged.exec, g);
    auto every = estimateStepTime(p, t.staged.exec, t.graph.outputs, c.device, machine);
    if (!every)
      return every.takeError();
    t.staged.reduceOnceSeconds = once->seconds;
    t.staged.reduceEachSeconds = every->seconds;
    if (once->seconds < every->seconds)
      for (ReducedGradient &g : reduced)
        swapGradient(t.staged.exec, g); // the rewrite back
    else
      reduced.clear();
  }
  t.memory = planMemory(p, t.staged.exec, t.graph.outputs);
  t.peaks = stagePeaks(t.staged, t.memory);
  // Under a budget, the stages whose accumulators take them over it reduce every microbatch.
  const int64_t limit = c.o.memoryPerWorker;
  unsigned restored = 0;
  if (limit > 0 && !t.fits(limit)) {
    for (ReducedGradient &g : reduced)
      for (size_t s = 0; s < t.peaks.size(); ++s) {
        const StageSummary &st = t.staged.stages[s];
        if (t.peaks[s] > limit && g.firstWorker >= st.firstWorker &&
            g.firstWorker < st.firstWorker + st.workers) {
          swapGradient(t.staged.exec, g);
          ++restored;
          break;
        }
      }
    if (restored > 0) {
      t.memory = planMemory(p, t.staged.exec, t.graph.outputs);
      t.peaks = stagePeaks(t.staged, t.memory);
      if (restored < reduced.size()) { // the step as planned, with the rest reduced once
        auto some = estimateStepTime(p, t.staged.exec, t.graph.outputs, c.device, machine);
        if (!some)
          return some.takeError();
        t.staged.reduceOnceSeconds = some->seconds;
      }
    }
  }
  t.staged.reducedOnce = static_cast<unsigned>(reduced.size()) - restored;
  t.staged.reducedEachForBudget = restored;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

/// The stages whose peak in `t` is over `limit`, each with what its worker of that peak holds
/// then: "stage 1 (140.63 MiB: 98.00 MiB of weights and optimiser state, ...)".
std::string stagesOver(const StagedTrial &t, int64_t limit) {
  std::vector<std::string> over;
  for (size_t s = 0; s < t.peaks.size(); ++s) {
    if (t.peaks[s] <= limit)
      continue;
    const StageSummary &st = t.staged.stages[s];
    unsigned worst = st.firstWorker;
    for (unsigned w = st.firstWorker; w < st.firstWorker + st.workers; ++w)
      if (t.memory.workers[w].peak > t.memory.workers[worst].peak)
        worst = w;
    const WorkerMemory &wm = t.memory.workers[worst];
    const LiveAtMost most = liveAtMost(wm);
    const LiveTiles live = liveTilesAt(*t.problem, wm, most.time);
    over.push_back(fmt::format(
        "stage {} ({}: {} of weights and optimiser state, {} of gradients, {} of activations "
        "and inputs, {} of buffers)",
        s, humanBytes(double(t.peaks[s])), humanBytes(double(live.weights + live.optimizerState)),
        humanBytes(double(live.gradients)), humanBytes(double(live.activations + live.inputs)),
        humanBytes(double(most.fetches + most.partials))));
  }
  return fmt::format("{}", fmt::join(over, ", "));
}

/// A staged trial's figures as a budgeted search gives them (its progress lines).
MemoryFit figures(const StagedTrial &t, int64_t limit) {
  MemoryFit f;
  f.fits = t.fits(limit);
  f.peak = t.peak();
  f.peakWorker = t.memory.largestPeakWorker();
  f.limit = limit;
  f.searches = 0;
  for (const StageSummary &st : t.staged.stages) {
    f.searches += st.searches;
    f.memoryWeight = std::max(f.memoryWeight, st.memoryWeight);
  }
  f.seconds = t.seconds;
  return f;
}

/// Auto's recomputation per stage, for the stages of `plain` (the step without any) over
/// `limit`: each such stage's own candidates (its layers' forward tensors the backward pass
/// reads; what it hands the next stage kept, so that each copy runs in its stage), ranked as auto
/// ranks them, a tensor of the model dropped in every microbatch at once; the shortest prefix of
/// each stage's ranking that fits, by bisections run side by side (a stage's peak depends on what
/// it recomputes, not on what the others do: each trial plans every stage's current prefix at
/// once). Judged by the plain search of each stage, or, where even every candidate dropped does not
/// fit that way, by the budgeted one. `tried` counts the trials. Where a stage does not fit with
/// every candidate of its layers recomputed, that trial is the result (it does not fit).
llvm::Expected<StagedTrial> recomputePerStage(const StagedSetting &c, const StagedTrial &plain,
                                              int64_t limit, unsigned &tried, bool &priced) {
  const Graph &training = plain.graph;
  // What the stages hand on, in every microbatch: never dropped.
  const unsigned M = c.o.stages.microbatches;
  std::set<std::string> cuts;
  for (const StageSummary &st : plain.staged.stages)
    if (!st.boundary.empty())
      for (unsigned m = 0; m < M; ++m)
        cuts.insert(M > 1 ? st.boundary + microbatchSuffix(m) : st.boundary);
  auto candidates = recomputeCandidates(training);
  if (!candidates)
    return candidates.takeError();
  auto layers =
      c.o.stages.roundRobin ? weightLayers(c.microForward) : forwardLayers(c.microForward);
  if (!layers)
    return layers.takeError();
  const std::vector<StageSummary> &stages = plain.staged.stages;
  std::vector<unsigned> stageOfLayer(layers->count(), 0);
  for (unsigned s = 0; s < stages.size(); ++s)
    for (unsigned l = stages[s].firstLayer; l < stages[s].firstLayer + stages[s].layers; ++l)
      stageOfLayer[l] = s;
  std::map<std::string, std::string> nodeOf; // candidate tensor -> its node
  for (const RecomputeCandidate &rc : *candidates)
    nodeOf[rc.tensor] = rc.node;
  // Per stage, the model's tensors in ranking order, and each one's copies in the step.
  const unsigned S = static_cast<unsigned>(stages.size());
  std::vector<std::vector<std::string>> order(S);
  std::map<std::string, std::vector<std::string>> copiesOf;
  for (const std::string &t : recomputeRanking(*candidates, *plain.problem, cuts)) {
    auto tensor = splitMicrobatch(t);
    auto node = splitMicrobatch(nodeOf.at(t));
    const std::string base = tensor ? tensor->first : t;
    auto layer = layers->ofNode.find(node ? node->first : nodeOf.at(t));
    if (layer == layers->ofNode.end())
      continue; // (not a model op's: a microbatch's slice of the batch)
    auto &copies = copiesOf[base];
    if (copies.empty())
      order[stageOfLayer[layer->second]].push_back(base);
    copies.push_back(t);
  }
  std::vector<size_t> lo(S, 0), hi(S, 0); // per stage: prefix lo does not fit, hi does
  for (unsigned s = 0; s < S; ++s)
    if (plain.peaks[s] > limit)
      hi[s] = order[s].size();
  auto dropping = [&](const std::vector<size_t> &count) {
    std::vector<std::string> dropped;
    for (unsigned s = 0; s < S; ++s)
      for (size_t i = 0; i < count[s]; ++i)
        for (const std::string &t : copiesOf.at(order[s][i]))
          dropped.push_back(t);
    return recomputeClosure(training, *candidates, dropped, cuts);
  };
  // The stages keep plain's layers: the copies' work would balance them otherwise, and a
  // boundary may then be a tensor recomputed.
  StageSpec spec = c.o.stages;
  if (!spec.roundRobin) {
    spec.layers.clear();
    for (const StageSummary &st : stages)
      spec.layers.push_back(st.layers);
  }
  auto attempt = [&](const std::vector<size_t> &count) -> llvm::Expected<StagedTrial> {
    const std::vector<std::string> dropped = dropping(count);
    auto t = stagedTrial(c, training, dropped, std::nullopt, priced ? limit : 0, spec);
    if (!t)
      return t.takeError();
    ++tried;
    if (c.o.onCandidateSet)
      c.o.onCandidateSet(dropped.size(), figures(*t, limit));
    return t;
  };
  auto best = attempt(hi);
  if (!best)
    return best.takeError();
  if (!best->fits(limit)) {
    priced = true;
    best = attempt(hi);
    if (!best)
      return best.takeError();
  }
  if (!best->fits(limit))
    return best; // (the closest: every candidate of each stage over the budget dropped)
  std::vector<size_t> bestCount = hi;
  for (;;) {
    std::vector<size_t> mid = hi;
    bool open = false;
    for (unsigned s = 0; s < S; ++s)
      if (hi[s] - lo[s] > 1) {
        mid[s] = lo[s] + (hi[s] - lo[s]) / 2;
        open = true;
      }
    if (!open)
      break;
    auto t = attempt(mid);
    if (!t)
      return t.takeError();
    for (unsigned s = 0; s < S; ++s)
      if (mid[s] != hi[s])
        (t->peaks[s] <= limit ? hi[s] : lo[s]) = mid[s];
    if (t->fits(limit)) {
      best = std::move(t);
      bestCount = mid;
    }
  }
  if (bestCount != hi) { // each stage's shortest fitting prefix, planned together
    auto t = attempt(hi);
    if (!t)
      return t.takeError();
    if (t->fits(limit))
      best = std::move(t);
  }
  return best;
}

/// The stages' search options on `workers` workers: on a machine each stage is searched over
/// the part of it that its workers fill (its levels' steps and weights): a stage of a node's
/// GPUs, or of whole nodes. (--megatron's steps inside each stage stay as it gives them.)
/// Errors: stages whose workers fill no part of the machine.
llvm::Expected<PlanOptions> stagesSearch(const PipelineOptions &o, unsigned workers) {
  PlanOptions search = o.search;
  search.workers = workers;
  if (o.machine && search.stepAlgorithms.empty()) {
    const unsigned groups = std::max(1u, o.stages.stages);
    const unsigned per = workers / groups;
    auto part = workers % groups == 0 ? topologyForWorkers(*o.machine, per) : std::nullopt;
    if (!part)
      return stringError(fmt::format(
          "{} stages of {} workers: a stage's workers fill no part of the machine ({}) that its "
          "search could use; give stages of the innermost level's workers or of whole units",
          groups, per, describeTopology(*o.machine)));
    search = machineOptions(search, *part);
    search.workers = workers;
  }
  return search;
}

/// The staged plan of one worker count under the budget: the step without recomputation, and
/// with auto where that does not fit, recomputePerStage's. Not fitting is a result (`why`
/// says how), not an error.
struct StagedChoice {
  std::optional<StagedTrial> plain, chosen;
  unsigned workers = 0, tried = 1;
  /// Where nothing fits: how (" without recomputation: stage 1 (...) over", or ": with every
  /// ..."), and what would help.
  std::string why;
  StagedTrial &best() { return chosen ? *chosen : *plain; }
};

llvm::Expected<StagedChoice> chooseStaged(const StagedSetting &setting, const Graph &training,
                                          std::optional<Problem> problem, bool sqrtRecomputed) {
  const PipelineOptions &o = setting.o;
  const int64_t limit = o.memoryPerWorker;
  const bool autoMode = limit > 0 && o.recompute && *o.recompute == RecomputeMode::Auto;
  StagedChoice c;
  c.workers = setting.search.workers;
  bool priced = limit > 0 && !autoMode;
  auto plain = stagedTrial(setting, training, {}, std::move(problem), priced ? limit : 0, o.stages);
  if (!plain)
    return plain.takeError();
  c.plain = std::move(*plain);
  if (autoMode && o.onCandidateSet)
    o.onCandidateSet(0, figures(*c.plain, limit));
  if (autoMode && !c.plain->fits(limit)) {
    // Only its peaks (known) and its execution plan (the step without, estimated) are used
    // from here: a large model's memory plan is gigabytes.
    c.plain->memory = MemoryPlan();
    auto t = recomputePerStage(setting, *c.plain, limit, c.tried, priced);
    if (!t)
      return t.takeError();
    c.chosen = std::move(*t);
    if (!c.chosen->fits(limit))
      c.why = fmt::format(
          ": with every forward tensor of its layers recomputed (but what it hands on), {} still "
          "over; more stages, or more workers a stage, hold less each",
          stagesOver(*c.chosen, limit));
  } else if (limit > 0 && !c.plain->fits(limit)) {
    c.why = fmt::format("{}: {} over{}",
                        sqrtRecomputed ? " with segment checkpointing (--recompute sqrt)"
                                       : " without recomputation",
                        stagesOver(*c.plain, limit),
                        o.recompute ? "" : "; --recompute auto recomputes what each stage needs");
  }
  return c;
}

/// --fit over stages: the fewest workers, a multiple of the stages (on a machine, stages that
/// fill part of it), whose staged plan fits, by bisection from the bound the weights and
/// optimiser state set (no recomputation drops them; fewer workers hold more of everything).
/// `b` gets the bound and each count tried. Errors: none up to the most fits, saying how close
/// the largest tried came.
llvm::Expected<StagedChoice> fitStagedWorkers(const PipelineOptions &o, const StagedSetting &base,
                                              PipelineResult &r, BudgetChoice &b) {
  const int64_t limit = o.memoryPerWorker;
  const unsigned S = std::max(1u, o.stages.stages);
  if (o.stages.roundRobin || !o.search.stepAlgorithms.empty())
    return stringError(o.stages.roundRobin
                           ? "--algo placement makes each worker a stage: --fit has no count "
                             "to choose"
                           : "--megatron TP,PP,DP fixes the workers: --fit has no count to "
                             "choose");
  const double kept = weightAndStateBytes(r.graph);
  const unsigned most =
      o.machine ? std::min(o.fitWorkersUpTo, o.machine->workers()) : o.fitWorkersUpTo;
  std::vector<unsigned> counts;
  for (unsigned k = S; k <= most; k += S)
    if (double(k) * double(limit) >= kept && (!o.machine || topologyForWorkers(*o.machine, k / S)))
      counts.push_back(k);
  b.lowerBound = static_cast<unsigned>(std::max(1.0, std::ceil(kept / double(limit))));
  if (counts.empty())
    return stringError(fmt::format(
        "no plan on at most {} workers fits in {} per worker as {} stages: the weights and "
        "optimiser state alone ({}) need {} workers{}",
        most, humanBytes(double(limit)), S, humanBytes(kept), b.lowerBound,
        o.machine ? ", in stages that fill part of the machine" : ""));
  std::optional<StagedChoice> best, closest;
  std::optional<Problem> problem = std::move(r.problem); // the first count's; the rest analyse
  // Is counts[i] enough? (A larger count searches longer: the scan gallops up from the bound,
  // counts[0], [1], [3], [7], ..., then bisects below the first that fits.)
  auto enough = [&](size_t i) -> llvm::Expected<bool> {
    const unsigned k = counts[i];
    auto search = stagesSearch(o, k);
    if (!search)
      return search.takeError();
    const StagedSetting setting{o,       base.lib,   base.microForward, base.forwardNodes,
                                *search, base.device};
    auto c = chooseStaged(setting, r.graph, std::move(problem), !r.recomputed.copies.empty());
    problem.reset();
    if (!c)
      return c.takeError();
    StagedTrial &t = c->best();
    b.tried.push_back({k, t.peak()});
    if (o.onWorkerCount)
      o.onWorkerCount(k, figures(t, limit), nullptr);
    const bool fits = c->why.empty();
    (fits ? best : closest) = std::move(*c);
    return fits;
  };
  size_t lo = 0, up = counts.size(); // counts[up] fits (or none is known to); below lo do not
  for (size_t i = 0; i < counts.size(); i = 2 * i + 1) {
    auto fits = enough(i);
    if (!fits)
      return fits.takeError();
    if (*fits) {
      up = i;
      break;
    }
    lo = i + 1;
  }
  while (lo < up) {
    const size_t mid = lo + (up - lo) / 2;
    auto fits = enough(mid);
    if (!fits)
      return fits.takeError();
    (*fits ? up : lo) = *fits ? mid : mid + 1;
  }
  if (!best)
    return stringError(fmt::format("no plan on at most {} workers fits in {} per worker as {} "
                                   "stages: at {} workers{}",
                                   counts.back(), humanBytes(double(limit)), S, closest->workers,
                                   closest->why));
  return std::move(*best);
}

/// Pipeline stages' plan (planner/stages.h) into `r`: the stages balanced by their ops' time
/// on one worker of the device (an H100's data sheet where none is given: the ratios are
/// what count), each searched over its workers; the execution plan and its memory. Under a
/// budget: each stage searched under it (recomputation none or sqrt), or (auto) the plan
/// without recomputation where it fits, else recomputePerStage's; with fitWorkersUpTo, at the
/// fewest workers that fit (fitStagedWorkers).
llvm::Error planStaged(PipelineResult &r, const PipelineOptions &o, const OpLibrary &lib,
                       const Graph &microForward, const std::set<std::string> &forwardNodes) {
  const auto start = std::chrono::steady_clock::now();
  auto device = o.device ? llvm::Expected<DeviceModel>(*o.device) : deviceModelNamed("h100");
  if (!device)
    return device.takeError();
  const int64_t limit = o.memoryPerWorker;
  BudgetChoice b;
  b.limit = limit;
  std::optional<StagedChoice> choice;
  if (o.fitWorkersUpTo > 0) {
    const StagedSetting base{o, lib, microForward, forwardNodes, o.search, *device};
    auto c = fitStagedWorkers(o, base, r, b);
    if (!c)
      return c.takeError();
    choice = std::move(*c);
    b.fitStages = std::max(1u, o.stages.stages);
  } else {
    auto search = stagesSearch(o, o.search.workers);
    if (!search)
      return search.takeError();
    const StagedSetting setting{o, lib, microForward, forwardNodes, *search, *device};
    auto c = chooseStaged(setting, r.graph, std::move(r.problem), !r.recomputed.copies.empty());
    if (!c)
      return c.takeError();
    if (!c->why.empty())
      return stringError(
          fmt::format("no plan fits in {} per worker{}", humanBytes(double(limit)), c->why));
    choice = std::move(*c);
  }
  std::optional<StagedTrial> &plain = choice->plain, &chosen = choice->chosen;
  const unsigned tried = choice->tried;
  const int64_t peakWithout = plain->peak();
  const bool fitsWithout = limit > 0 && plain->fits(limit);
  StagedTrial &t = chosen ? *chosen : *plain;
  if (chosen) {
    r.withoutRecomputation = r.graph;
    r.recomputed = t.summary;
  }
  r.graph = std::move(t.graph);
  r.problem = std::move(t.problem);
  r.exec = std::move(t.staged.exec);
  r.plan = PartitionPlan();
  r.plan.algorithm = t.staged.describe();
  r.plan.workers = choice->workers;
  r.plan.totalBytes = r.exec.bytesMoved(*r.problem);
  r.memory = std::move(t.memory);
  // Each stage's recomputed tensors (the step's, every microbatch's).
  if (!r.recomputed.dropped.empty()) {
    auto layers = o.stages.roundRobin ? weightLayers(microForward) : forwardLayers(microForward);
    if (!layers)
      return layers.takeError();
    for (const std::string &name : r.recomputed.dropped) {
      const Node *n = r.withoutRecomputation ? r.withoutRecomputation->producer(name) : nullptr;
      if (!n)
        continue;
      auto split = splitMicrobatch(n->name);
      auto layer = layers->ofNode.find(split ? split->first : n->name);
      if (layer == layers->ofNode.end())
        continue;
      for (StageSummary &st : t.staged.stages)
        if (layer->second >= st.firstLayer && layer->second < st.firstLayer + st.layers)
          ++st.recomputed;
    }
  }
  if (limit > 0 || o.recompute) {
    b.fit.fits = limit <= 0 || t.fits(limit);
    b.fit.peak = r.memory.largestPeak();
    b.fit.peakWorker = r.memory.largestPeakWorker();
    b.fit.limit = limit;
    for (const StageSummary &st : t.staged.stages) {
      b.fit.searches += st.searches;
      b.fit.memoryWeight = std::max(b.fit.memoryWeight, st.memoryWeight);
    }
    b.fit.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (o.recompute) {
      RecomputePlan rp;
      rp.mode = *o.recompute;
      rp.summary = r.recomputed;
      rp.peakWithout = chosen ? peakWithout : 0;
      rp.fitsWithout = fitsWithout;
      if (chosen) {
        rp.problemWithout = std::move(plain->problem);
        rp.execWithout = std::move(plain->staged.exec);
      }
      auto candidates =
          recomputeCandidates(r.withoutRecomputation ? *r.withoutRecomputation : r.graph);
      if (!candidates)
        return candidates.takeError();
      rp.candidates = static_cast<unsigned>(candidates->size());
      rp.tried = tried;
      rp.seconds = b.fit.seconds;
      b.recompute = std::move(rp);
    }
    r.budget = std::move(b);
  }
  r.staged = std::move(t.staged);
  return llvm::Error::success();
}

/// A training step's loss on `g` (PipelineOptions::lossOutput, loss): each output's, then
/// their weighted sum, which becomes the graph's one output. `note` gets what was chosen.
llvm::Expected<std::string> addTrainingLoss(Graph &g, const OpLibrary &lib,
                                            const PipelineOptions &options, std::string *note) {
  if (g.outputs.empty())
    return stringError("a training step needs a graph with an output (the loss, or the "
                       "prediction a loss is added to); this one has none");
  auto terms = lossTerms(options.lossOutput);
  if (!terms)
    return terms.takeError();
  std::vector<std::string> notes;
  if (terms->empty()) {
    terms->push_back({g.outputs[0], 1.0});
    if (g.outputs.size() > 1)
      notes.push_back(fmt::format("the graph has {} outputs ({}): training on the first, "
                                  "'{}' (--loss-output names another)",
                                  g.outputs.size(), fmt::join(g.outputs, ", "), g.outputs[0]));
  }
  for (const LossTerm &t : *terms)
    if (std::find(g.outputs.begin(), g.outputs.end(), t.output) == g.outputs.end())
      return stringError(fmt::format("the loss output '{}' is not an output of the "
                                     "graph (its outputs: {})",
                                     t.output, fmt::join(g.outputs, ", ")));
  // Each output's loss, then their weighted sum; addLossOf says which it chose by the
  // node it added.
  std::vector<std::pair<std::string, double>> losses;
  for (const LossTerm &t : *terms) {
    auto loss = addLossOf(g, lib, t.output, options.loss);
    if (!loss)
      return loss.takeError();
    if (*loss != t.output) {
      const Node *added = g.producer(*loss);
      notes.push_back(fmt::format(
          "the output '{}' is not a scalar: training with {} against the new input '{}'", t.output,
          added->op == "softmax_cross_entropy"       ? "softmax cross-entropy"
          : added->op == "softmax_cross_entropy_seq" ? "softmax cross-entropy at every position"
                                                     : "the mean squared error",
          added->inputs[1]));
    }
    losses.push_back({*loss, t.weight});
  }
  auto loss = addWeightedSum(g, lib, losses, "total_loss");
  if (!loss)
    return loss.takeError();
  if (terms->size() > 1 || terms->front().weight != 1) {
    std::vector<std::string> parts;
    for (const LossTerm &t : *terms)
      parts.push_back(fmt::format("{} x loss('{}')", t.weight, t.output));
    notes.push_back(fmt::format("training on {}", fmt::join(parts, " + ")));
  }
  g.outputs = {*loss};
  if (auto frozen = freezeWeightsNotReaching(g, *loss); !frozen.empty())
    notes.push_back(fmt::format(
        "{} (as PyTorch leaves a parameter with no gradient): {}",
        frozen.size() == 1
            ? std::string("1 weight reaches no loss and stays as it is")
            : fmt::format("{} weights reach no loss and stay as they are", frozen.size()),
        fmt::join(frozen, ", ")));
  *note = fmt::format("{}", fmt::join(notes, "; "));
  return *loss;
}

} // namespace

std::string noPlanFitsMessage(unsigned workers, int64_t limit, const MemoryFit &closest,
                              std::optional<RecomputeMode> mode) {
  std::string how;
  if (mode == RecomputeMode::None)
    how = " without recomputation";
  else if (mode == RecomputeMode::Auto)
    how = ", even recomputing every forward tensor the backward pass reads";
  else if (mode)
    how = fmt::format(" with recomputation '{}'", recomputeModeName(*mode));
  return fmt::format("no plan found for {} workers fits in {} per worker{}: the closest ({}) has "
                     "a planned peak of {} on worker {}, {} over",
                     workers, humanBytes(double(limit)), how, closest.plan.algorithm,
                     humanBytes(double(closest.peak)), closest.peakWorker,
                     humanBytes(double(closest.peak - limit)));
}

llvm::Expected<std::vector<LossTerm>> lossTerms(const std::string &spec) {
  std::vector<LossTerm> terms;
  if (spec.empty())
    return terms;
  llvm::SmallVector<llvm::StringRef, 4> items;
  llvm::StringRef(spec).split(items, ',');
  for (llvm::StringRef item : items) {
    auto [output, weight] = item.split(':');
    LossTerm t;
    t.output = output.trim().str();
    if (t.output.empty())
      return stringError(fmt::format("--loss-output '{}': an empty output name (give NAME or "
                                     "NAME:WEIGHT, separated by commas)",
                                     spec));
    if (item.contains(':')) {
      std::string w = weight.trim().str();
      char *end = nullptr;
      t.weight = std::strtod(w.c_str(), &end);
      if (w.empty() || *end != '\0' || !std::isfinite(t.weight) || t.weight <= 0)
        return stringError(fmt::format("--loss-output '{}': the weight '{}' of '{}' is not a "
                                       "positive number",
                                       spec, w, t.output));
    }
    for (const LossTerm &o : terms)
      if (o.output == t.output)
        return stringError(
            fmt::format("--loss-output '{}': the output '{}' is named twice", spec, t.output));
    terms.push_back(std::move(t));
  }
  return terms;
}

const char kObjectiveHelp[] =
    "What the search minimises: time (the default), the step estimated on --device: every "
    "worker's compute (an op a plan repeats on every worker counts on each) and communication "
    "(over the --topology levels, else the device's link, each message at its latency); or "
    "bytes, the bytes every worker receives (over a --topology, their time), the paper's "
    "objective and plans";

const char *objectiveName(PlanObjective o) { return o == PlanObjective::Time ? "time" : "bytes"; }

std::optional<PlanObjective> objectiveNamed(const std::string &name) {
  if (name == "time")
    return PlanObjective::Time;
  if (name == "bytes")
    return PlanObjective::Bytes;
  return std::nullopt;
}

std::vector<double> nodeWorkSeconds(const Problem &p, const DeviceModel &device) {
  PlanOptions o;
  o.workers = 1;
  const ExecPlan exec = buildExecPlan(p, llvm::cantFail(searchPlan(p, o)));
  std::vector<double> work(p.nodes.size(), 0);
  auto e = estimateStepTime(p, exec, {}, device);
  if (!e) { // an op the model cannot estimate: no compute (the search's objective is its bytes)
    llvm::consumeError(e.takeError());
    return work;
  }
  for (const OpTimeEstimate &op : e->workerOps[0])
    work[op.node] += op.measured ? std::max(0.0, op.seconds - opLaunchSeconds(device, op))
                                 : opWorkSeconds(device, op);
  return work;
}

TimeObjective stepTimeObjective(const DeviceModel &device, const std::optional<Topology> &machine) {
  TimeObjective t;
  t.bytesPerSecond = machine ? machine->levels.back().bandwidth : device.linkBandwidth;
  t.messageSeconds = device.linkLatency;
  t.nodeSeconds = [device](const Problem &p) { return nodeWorkSeconds(p, device); };
  return t;
}

namespace {

llvm::Expected<PipelineResult> runPipelineAs(Graph g, const std::string &name, const OpLibrary &lib,
                                             const PipelineOptions &options, Stage *failed) {
  Stage stage = Stage::Graph;
  auto fail = [&](llvm::Error e) {
    if (failed)
      *failed = stage;
    return stringError(name + ": " + llvm::toString(std::move(e)));
  };
  PipelineResult r;
  r.name = name;
  if (llvm::Error e = checkGraph(g, lib))
    return fail(std::move(e));
  const StageSpec &stages = options.stages;
  if (options.machine && !options.search.stepAlgorithms.empty() && !stages.active())
    return fail(stringError(
        "--megatron's steps (data parallelism outside, Megatron's cuts inside) over a "
        "--topology's levels are not built: give --megatron without --topology, or with PP > 1 "
        "(each stage then searched as Megatron's TP x DP)"));
  Graph microForward; // with stages: the model at the microbatch's batch, with its loss
  if (options.train) {
    auto loss = addTrainingLoss(g, lib, options, &r.lossNote);
    if (!loss)
      return fail(loss.takeError());
    r.loss = *loss;
  }
  if (stages.active()) {
    const char *with = options.plan ? "a plan given" : !options.train ? "" : nullptr;
    if (with)
      return fail(stringError(*with
                                  ? fmt::format("pipeline stages do not combine with {} yet", with)
                                  : std::string("pipeline stages run a training step (--train)")));
    if (stages.microbatches > 1) {
      if (!options.microbatchModel)
        return fail(stringError("microbatches need the model at the microbatch's batch (a "
                                "model or ONNX file whose batch can be set)"));
      microForward = *options.microbatchModel;
      if (llvm::Error e = checkGraph(microForward, lib))
        return fail(std::move(e));
      std::string ignored;
      auto loss = addTrainingLoss(microForward, lib, options, &ignored);
      if (!loss)
        return fail(loss.takeError());
      auto split = microbatchGraph(g, microForward, stages.microbatches, lib);
      if (!split)
        return fail(split.takeError());
      g = std::move(*split);
      r.loss = g.outputs[0];
    } else {
      microForward = g;
    }
  }
  // The policy sees the loss a training step adds, and the backward ops follow its types.
  auto mixed = applyPrecision(g, lib, options.precision);
  if (!mixed)
    return fail(mixed.takeError());
  r.precision = *mixed;
  std::set<std::string> forwardNodes;
  if (stages.active())
    for (const Node &n : g.nodes())
      forwardNodes.insert(n.name);
  if (options.train) {
    auto t = buildTrainingGraph(g, r.loss, lib, *options.train, options.weightDecay);
    if (!t)
      return fail(t.takeError());
    g = std::move(*t);
  }
  r.graph = std::move(g);
  if (options.until == Stage::Graph)
    return llvm::Expected<PipelineResult>(std::move(r));
  const bool recomputing = options.recompute.has_value();
  if (recomputing && !options.train)
    return fail(stringError("recomputation applies to a training step (what its backward pass "
                            "reads)"));
  if (stages.active() && recomputing && *options.recompute == RecomputeMode::Sqrt) {
    auto cuts = stepCuts(microForward, stages.microbatches);
    if (!cuts)
      return fail(cuts.takeError());
    if (llvm::Error e = recomputeWithinStages(r, *cuts))
      return fail(std::move(e));
  }
  stage = Stage::Problem;
  // Recomputation analyses each candidate graph itself; the step's analysis is its chosen one
  // (with stages, the one rewritten above).
  if (!recomputing || stages.active() || options.until == Stage::Problem) {
    auto t0 = std::chrono::steady_clock::now();
    auto problem = Problem::build(r.graph, lib);
    if (!problem)
      return fail(problem.takeError());
    r.analysisSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.problem = std::move(*problem);
    if (options.until == Stage::Problem)
      return llvm::Expected<PipelineResult>(std::move(r));
  }
  stage = Stage::Plan;
  bool ready = false; // r.exec and r.memory are r.plan's
  if (stages.active()) {
    if (llvm::Error e = planStaged(r, options, lib, microForward, forwardNodes))
      return fail(std::move(e));
    ready = true;
  } else if (recomputing) {
    if (llvm::Error e = planRecomputing(r, lib, options, ready))
      return fail(std::move(e));
  } else if (options.memoryPerWorker > 0) {
    if (llvm::Error e = planWithinBudget(r, options, ready))
      return fail(std::move(e));
  }
  // (Stages refuse a budget, and search each stage over its part of a machine: they were
  // planned above.)
  if (options.machine && options.memoryPerWorker == 0 && !stages.active()) {
    // The machine's search beside the plan of least bytes (with recomputation, of the
    // rewritten graph).
    std::optional<TopologyPlan> searched;
    auto plan = agreedPlan(options, *r.problem, [&]() -> llvm::Expected<PartitionPlan> {
      auto t = searchForTopology(*r.problem, options.search, *options.machine);
      if (!t)
        return t.takeError();
      searched = std::move(*t);
      return searched->plan;
    });
    if (!plan)
      return fail(plan.takeError());
    r.plan = std::move(*plan);
    r.machine = std::move(searched);
    // Plans of the recomputation's own plan, not this one: planned anew at Execution.
    r.exec = ExecPlan();
    r.memory = MemoryPlan();
    ready = false;
  } else if (!stages.active() && !recomputing && options.memoryPerWorker == 0) {
    const bool grid = options.device && options.search.algorithm == Algorithm::Megatron &&
                      options.search.factors.empty() && options.search.workers > 1;
    auto plan = options.plan ? options.plan(*r.problem) : agreedPlan(options, *r.problem, [&] {
      if (grid)
        return megatronGridPlan(*r.problem, options.search, *options.device, r.graph.outputs,
                                &r.megatronGrid);
      return options.search.time && options.device
                 ? timedPlan(*r.problem, options.search, *options.device, r.graph.outputs,
                             r.objectiveChoice)
                 : searchPlan(*r.problem, options.search);
    });
    if (!plan)
      return fail(plan.takeError());
    r.plan = std::move(*plan);
  }
  if (options.until == Stage::Plan)
    return llvm::Expected<PipelineResult>(std::move(r));
  stage = Stage::Execution;
  if (!ready) {
    r.exec = buildExecPlan(*r.problem, r.plan);
    r.memory = planMemory(*r.problem, r.exec, r.graph.outputs);
  }
  if (std::string bad = checkMemoryPlan(r.memory); !bad.empty())
    return fail(stringError("the memory plan is unsound: " + bad));
  return llvm::Expected<PipelineResult>(std::move(r));
}

} // namespace

llvm::Expected<PartitionPlan> timedPlan(const Problem &p, const PlanOptions &search,
                                        const DeviceModel &device,
                                        const std::vector<std::string> &outputs,
                                        std::optional<ObjectiveChoice> &choice) {
  auto timed = searchPlan(p, search);
  if (!timed)
    return timed.takeError();
  if (timed->objective != "time") // an algorithm of fixed rules: nothing to compare
    return timed;
  PlanOptions o = search;
  o.time.reset();
  auto bytes = searchPlan(p, o);
  if (!bytes)
    return bytes.takeError();
  auto step = [&](const PartitionPlan &plan) -> llvm::Expected<double> {
    auto e = estimateStepTime(p, buildExecPlan(p, plan), outputs, device);
    if (!e)
      return e.takeError();
    return e->seconds;
  };
  auto t = step(*timed);
  if (!t)
    return t.takeError();
  auto b = step(*bytes);
  if (!b)
    return b.takeError();
  choice = ObjectiveChoice{*t, *b, *b < *t};
  return *b < *t ? std::move(*bytes) : std::move(*timed);
}

namespace {

/// `r`'s step estimated on `device` over `machine` (its execution plan built where `r` has
/// none).
llvm::Expected<double> estimatedStep(const PipelineResult &r, const DeviceModel &device,
                                     const std::optional<Topology> &machine) {
  ExecPlan built;
  if (r.exec.nodes.empty())
    built = buildExecPlan(*r.problem, r.plan);
  auto e = estimateStepTime(*r.problem, r.exec.nodes.empty() ? built : r.exec, r.graph.outputs,
                            device, machine);
  if (!e)
    return e.takeError();
  return e->seconds;
}

/// FitByTime's scan beyond `fewest`, the plan --fit found for `g` (a copy of the graph it
/// was planned from).
llvm::Expected<FitByTime> scanByTime(
    const Graph &g, const PipelineOptions &options, const PipelineResult &fewest,
    const std::function<llvm::Expected<PipelineResult>(Graph, const PipelineOptions &)> &plan) {
  const DeviceModel &device = *options.device;
  auto part = [&](unsigned k) -> std::optional<Topology> {
    if (!options.machine)
      return std::nullopt;
    return topologyForWorkers(*options.machine, k);
  };
  FitByTime out;
  const unsigned k0 = fewest.plan.workers;
  auto s0 = estimatedStep(fewest, device, part(k0));
  if (!s0)
    return s0.takeError();
  out.counts.push_back({k0, *s0});
  for (unsigned doubling = 0;; ++doubling) {
    const unsigned k = out.counts.back().workers * 2;
    if (doubling == 2) {
      out.stopped = "two doublings planned";
      break;
    }
    if (k > options.fitWorkersUpTo || k > kMaxWorkers) {
      out.stopped = fmt::format("{} workers is over the most to try", k);
      break;
    }
    if (options.machine && !part(k)) {
      out.stopped = fmt::format("{} workers fill no part of the machine", k);
      break;
    }
    PipelineOptions o = options;
    o.fitWorkersUpTo = 0;
    o.search.workers = k;
    o.machine = part(k);
    o.onWorkerCount = nullptr;
    o.onCandidateSet = nullptr;
    auto r = plan(g, o);
    if (!r) {
      out.stopped = fmt::format("{} workers: {}", k, llvm::toString(r.takeError()));
      break;
    }
    auto s = estimatedStep(*r, device, o.machine);
    if (!s)
      return s.takeError();
    out.counts.push_back({k, *s});
    if (options.onTimedCount)
      options.onTimedCount(k, *s);
    if (out.counts.back().workerSeconds() >= out.counts[out.least].workerSeconds()) {
      out.stopped = fmt::format("{} workers cost more worker-seconds than {}", k,
                                out.counts[out.least].workers);
      break;
    }
    out.least = static_cast<unsigned>(out.counts.size() - 1);
  }
  return out;
}

} // namespace

/// runPipeline, but for --fit's scan by time.
static llvm::Expected<PipelineResult> runPlanned(Graph g, const std::string &name,
                                                 const OpLibrary &lib,
                                                 const PipelineOptions &options, Stage *failed) {
  const bool time = options.objective == PlanObjective::Time && options.device;
  if (!time || options.search.time) {
    auto r = runPipelineAs(std::move(g), name, lib, options, failed);
    if (r)
      r->objective = options.search.time ? PlanObjective::Time : PlanObjective::Bytes;
    return r;
  }
  PipelineOptions timed = options;
  timed.search.time = stepTimeObjective(*options.device, options.machine);
  auto r = runPipelineAs(std::move(g), name, lib, timed, failed);
  if (r) {
    r->objective = PlanObjective::Time;
    if (r->staged) // its stages were searched by time
      r->plan.objective = "time";
  }
  return r;
}

llvm::Expected<PipelineResult> runPipeline(Graph g, const std::string &name, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed) {
  if (options.stages.automatic) {
    if (failed)
      *failed = Stage::Plan;
    return usageError("--stages auto plans the model at each candidate's microbatch: give a "
                      "model or ONNX file (a GraphSource), not a built graph");
  }
  const bool time = options.objective == PlanObjective::Time && options.device;
  if (!time || options.fitWorkersUpTo == 0 || options.agree || options.until < Stage::Plan)
    return runPlanned(std::move(g), name, lib, options, failed);
  // --fit by time: the fewest workers that fit, then the scan for the least worker-seconds.
  const Graph copy = g;
  auto r = runPlanned(std::move(g), name, lib, options, failed);
  if (!r)
    return r;
  auto scan = scanByTime(copy, options, *r, [&](Graph graph, const PipelineOptions &o) {
    return runPlanned(std::move(graph), name, lib, o, nullptr);
  });
  if (!scan)
    return scan.takeError();
  r->fitByTime = std::move(*scan);
  return r;
}

llvm::Expected<PartitionPlan> megatronGridPlan(const Problem &p, const PlanOptions &search,
                                               const DeviceModel &device,
                                               const std::vector<std::string> &outputs,
                                               std::vector<MegatronConfig> *grid) {
  std::optional<PartitionPlan> best;
  double bestSeconds = 0;
  for (unsigned tp = search.workers; tp >= 1; --tp) {
    if (search.workers % tp != 0)
      continue;
    const unsigned dp = search.workers / tp;
    if (llvm::Error small = batchPartsError(p, dp, Algorithm::DataParallel)) {
      llvm::consumeError(std::move(small)); // more groups than samples: not in the grid
      continue;
    }
    PlanOptions o = search;
    setMegatronSteps(o, tp, dp);
    auto plan = searchPlan(p, o);
    if (!plan)
      return plan.takeError();
    auto step = estimateStepTime(p, buildExecPlan(p, *plan), outputs, device);
    if (!step)
      return step.takeError();
    if (grid)
      grid->push_back({tp, dp, step->seconds, plan->totalBytes});
    if (!best || step->seconds < bestSeconds) {
      bestSeconds = step->seconds;
      best = std::move(*plan);
    }
  }
  return std::move(*best);
}

std::string megatronGridLines(const std::vector<MegatronConfig> &grid, const std::string &device,
                              const std::string &prefix) {
  if (grid.empty())
    return "";
  const MegatronConfig *best = &grid[0];
  std::vector<std::string> each;
  for (const MegatronConfig &c : grid) {
    each.push_back(fmt::format("{},1,{} {:.3f} ms ({})", c.tp, c.dp, 1e3 * c.seconds,
                               humanBytes(double(c.bytes))));
    if (c.seconds < best->seconds)
      best = &c;
  }
  return fmt::format("{}megatron: TP,PP,DP by the step estimated on {}: {}; {},1,{} chosen "
                     "(--megatron picks one)\n",
                     prefix, device, fmt::join(each, ", "), best->tp, best->dp);
}

namespace {

/// StageSearch's candidates for `o`: (1, 1), then per S its microbatches.
std::vector<StageCandidate> stageCandidates(const PipelineOptions &o, const GraphSource &source) {
  const unsigned k = o.search.workers;
  std::set<unsigned> counts;
  for (unsigned s = 2; s <= k; s *= 2)
    if (k % s == 0)
      counts.insert(s);
  if (o.machine && o.machine->levels.size() > 1 && o.machine->levels[0].count > 1 &&
      k % o.machine->levels[0].count == 0)
    counts.insert(o.machine->levels[0].count);
  std::vector<StageCandidate> out{StageCandidate()};
  const bool batchKnown = !source.model.empty() || source.batchGiven;
  for (unsigned s : counts)
    for (unsigned m : {s, 2 * s, 4 * s})
      if (!batchKnown || (source.batch % m == 0 && source.batch / m > 0))
        out.push_back({s, m, 0, ""});
  return out;
}

/// `--stages auto`: every candidate planned, the one of least estimated step kept.
llvm::Expected<PipelineResult> chooseStages(const GraphSource &source, const OpLibrary &lib,
                                            const PipelineOptions &options, Stage *failed) {
  auto refuse = [&](const std::string &why) {
    if (failed)
      *failed = Stage::Plan;
    return usageError("--stages auto " + why);
  };
  if (!options.device)
    return refuse("chooses by the estimated step: it needs a device model (--device, or tofu-run "
                  "--calibrate's model of this machine)");
  if (!options.train)
    return refuse("chooses pipeline stages, which run a training step (--train)");
  if (options.fitWorkersUpTo > 0)
    return refuse("plans the stages for a number of workers: give --workers, not --fit");
  if (options.agree || options.plan)
    return refuse("is chosen by tofu-plan: give the stages and microbatches it chose");
  const auto t0 = std::chrono::steady_clock::now();
  StageSearch search;
  std::optional<PipelineResult> best;
  std::vector<std::string> errors;
  Stage firstFailed = Stage::Plan;
  // Each S's microbatches are doubled while its step falls (more microbatches shrink the
  // bubble, but every op then runs once more and on less).
  std::map<unsigned, double> bestOf;
  std::set<unsigned> done;
  for (const StageCandidate &next : stageCandidates(options, source)) {
    if (done.count(next.stages))
      continue;
    search.candidates.push_back(next);
    const size_t i = search.candidates.size() - 1;
    StageCandidate &c = search.candidates[i];
    PipelineOptions o = options;
    o.stages.automatic = false;
    o.stages.stages = c.stages;
    o.stages.microbatches = c.microbatches;
    o.stages.layers.clear();
    o.microbatchModel = nullptr;
    Stage stage = Stage::Plan;
    auto r = runPipeline(source, lib, o, &stage);
    if (r) {
      auto seconds = estimatedStep(*r, *options.device, options.machine);
      if (!seconds)
        return seconds.takeError();
      c.seconds = *seconds;
    } else {
      c.error = llvm::toString(r.takeError());
      if (stage < Stage::Plan) // the model itself fails: every candidate would
        return refuse(c.error);
      if (errors.empty())
        firstFailed = stage;
      errors.push_back(fmt::format("{} stage{}, {} microbatch{}: {}", c.stages,
                                   c.stages == 1 ? "" : "s", c.microbatches,
                                   c.microbatches == 1 ? "" : "es", c.error));
    }
    if (options.onStageCandidate)
      options.onStageCandidate(c);
    auto was = bestOf.find(c.stages);
    if (!r || (was != bestOf.end() && c.seconds >= was->second))
      done.insert(c.stages);
    else
      bestOf[c.stages] = c.seconds;
    if (r && (!best || c.seconds < search.candidates[search.chosen].seconds)) {
      best = std::move(*r);
      search.chosen = static_cast<unsigned>(i);
    }
  }
  if (!best) {
    if (failed)
      *failed = firstFailed;
    return stringError(
        fmt::format("--stages auto: no candidate could be planned: {}", fmt::join(errors, "; ")));
  }
  search.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  best->stageSearch = std::move(search);
  return std::move(*best);
}

} // namespace

llvm::Expected<PipelineResult> runPipeline(const GraphSource &source, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed) {
  if (options.stages.automatic)
    return chooseStages(source, lib, options, failed);
  std::string name;
  auto g = readGraph(source, lib, &name);
  if (!g) {
    if (failed)
      *failed = Stage::Graph;
    return g.takeError();
  }
  const unsigned m = options.stages.microbatches;
  if (m > 1 && !options.microbatchModel) {
    auto refuse = [&](const std::string &why) {
      if (failed)
        *failed = Stage::Graph;
      return stringError(name + ": " + why);
    };
    if (!source.graphFile.empty())
      return refuse("--microbatches needs a model whose batch can be set (--model or --onnx); "
                    "a graph file's shapes are fixed");
    // An ONNX model's batch, where none is given, is its own: its first data input's.
    int64_t batch = source.batch;
    if (!source.batchGiven && source.model.empty())
      for (const TensorInfo &t : g->tensors())
        if (t.role == TensorRole::Input && !t.shape.empty()) {
          batch = t.shape[0];
          break;
        }
    if (batch % m != 0)
      return refuse(
          fmt::format("--batch {} does not split into {} microbatches of one size", batch, m));
    GraphSource micro = source;
    micro.batch = batch / m;
    micro.batchGiven = true;
    std::string ignored;
    auto small = readGraph(micro, lib, &ignored);
    if (!small)
      return refuse("the model at the microbatch's batch " + std::to_string(micro.batch) + ": " +
                    llvm::toString(small.takeError()));
    PipelineOptions o = options;
    o.microbatchModel = std::make_shared<const Graph>(std::move(*small));
    return runPipeline(std::move(*g), name, lib, o, failed);
  }
  return runPipeline(std::move(*g), name, lib, options, failed);
}

SingleWorker singleWorker(const Problem &problem, const std::vector<std::string> &outputs) {
  SingleWorker one;
  PlanOptions o;
  o.workers = 1;
  // One worker's plan has no steps (every node whole): the search has nothing to fail on.
  one.plan = llvm::cantFail(searchPlan(problem, o));
  one.exec = buildExecPlan(problem, one.plan);
  one.memory = planMemory(problem, one.exec, outputs);
  return one;
}

} // namespace tofu
