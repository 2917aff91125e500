// Pipeline stages: --stages' forms, the schedules' orders (1F1B's warm-up of S - s - 1
// forwards, GPipe's forwards first), and planned steps: every stage ends at a cut, each
// worker computes only its own stage's nodes, and GPipe holds more microbatches' activations
// at once than 1F1B.
#include "planner/stages.h"

#include <algorithm>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(Stages, ParsesCountsAndLayers) {
  StageSpec s;
  ASSERT_FALSE(bool(parseStages("4", s)));
  EXPECT_EQ(s.stages, 4u);
  EXPECT_TRUE(s.layers.empty());
  ASSERT_FALSE(bool(parseStages("3,5", s)));
  EXPECT_EQ(s.stages, 2u);
  EXPECT_EQ(s.layers, (std::vector<unsigned>{3, 5}));
  for (const char *bad : {"0", "", "2,", "a", "2,-1"}) {
    llvm::Error e = parseStages(bad, s);
    ASSERT_TRUE(bool(e)) << bad;
    EXPECT_NE(llvm::toString(std::move(e)).find("not a positive count"), std::string::npos);
  }
}

/// Stage s's chunks in order, as "F0 B0 ...".
std::string stageOrder(const std::vector<Chunk> &chunks, unsigned s) {
  std::string out;
  for (const Chunk &c : chunks)
    if (c.stage == s)
      out += (out.empty() ? "" : " ") + std::string(c.phase == ChunkPhase::Forward ? "F" : "B") +
             std::to_string(c.microbatch);
  return out;
}

TEST(Stages, SchedulesOrderChunks) {
  const auto f1b = scheduleChunks(Schedule::OneFOneB, 3, 4);
  EXPECT_EQ(stageOrder(f1b, 0), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(stageOrder(f1b, 1), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(stageOrder(f1b, 2), "F0 B0 F1 B1 F2 B2 F3 B3");
  const auto gpipe = scheduleChunks(Schedule::GPipe, 2, 3);
  EXPECT_EQ(stageOrder(gpipe, 0), "F0 F1 F2 B0 B1 B2");
  // In start order, and each chunk after what it reads.
  for (const auto &chunks : {f1b, gpipe})
    for (size_t i = 1; i < chunks.size(); ++i)
      EXPECT_LE(chunks[i - 1].start, chunks[i].start);
  // 1F1B's last stage runs microbatch 0's backward at time 3 + 1 (three forwards before it).
  for (const Chunk &c : f1b)
    if (c.stage == 2 && c.phase == ChunkPhase::Backward && c.microbatch == 0)
      EXPECT_EQ(c.start, 3);
}

/// Group g's chunks in order, as "F<layer>.<microbatch> ...".
std::string groupOrder(const std::vector<Chunk> &chunks, const std::vector<unsigned> &groupOf,
                       unsigned g) {
  std::string out;
  for (const Chunk &c : chunks)
    if (groupOf[c.stage] == g)
      out += (out.empty() ? "" : " ") + std::string(c.phase == ChunkPhase::Forward ? "F" : "B") +
             std::to_string(c.stage) + "." + std::to_string(c.microbatch);
  return out;
}

TEST(Stages, PlacementRunsChunksAsTheyBecomeReady) {
  // Three layers round-robin on two groups, two microbatches, a forward 1 and a backward 2:
  // group 0 runs layer 2's forwards as soon as layer 1's arrive, then (its forwards done) the
  // backwards as the later layers hand them back.
  const std::vector<unsigned> groupOf = {0, 1, 0};
  const auto chunks = placementChunks(groupOf, {1, 1, 1}, 2);
  ASSERT_EQ(chunks.size(), 12u);
  EXPECT_EQ(groupOrder(chunks, groupOf, 0), "F0.0 F0.1 F2.0 F2.1 B2.0 B2.1 B0.0 B0.1");
  EXPECT_EQ(groupOrder(chunks, groupOf, 1), "F1.0 F1.1 B1.0 B1.1");
  for (size_t i = 1; i < chunks.size(); ++i)
    EXPECT_LE(chunks[i - 1].start, chunks[i].start);
  // Layer 0's last backward starts at 10: the step is 12, against 9 on one worker.
  EXPECT_EQ(chunks.back().start, 10);
  // A layer's work sets its chunks' length: a heavy middle layer delays the last one.
  const auto heavy = placementChunks(groupOf, {1, 3, 1}, 2);
  for (const Chunk &c : heavy)
    if (c.stage == 2 && c.phase == ChunkPhase::Forward && c.microbatch == 0)
      EXPECT_EQ(c.start, 4);
}

/// A training step (SGD) of `model` at `batch` on `workers`, staged as `spec`, planned to its
/// execution.
struct StagedStep {
  GraphSource source;
  PipelineOptions options;
  llvm::Expected<PipelineResult> run() const { return runPipeline(source, testLibrary(), options); }
};
StagedStep setup(const std::string &model, int64_t batch, unsigned workers, const StageSpec &spec) {
  StagedStep s;
  s.source.model = model;
  s.source.batch = batch;
  s.source.batchGiven = true;
  s.options.train = Optimizer::SGD;
  s.options.until = Stage::Execution;
  s.options.search.workers = workers;
  s.options.stages = spec;
  return s;
}

PipelineResult planned(const StagedStep &step) {
  auto r = step.run();
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return r ? std::move(*r) : PipelineResult();
}

PipelineResult planned(const std::string &model, int64_t batch, unsigned workers,
                       const StageSpec &spec) {
  return planned(setup(model, batch, workers, spec));
}

TEST(Stages, PlansStagesOnTheirWorkers) {
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 2;
  const PipelineResult r = planned("gpt-2-64-4-16", 8, 4, spec);
  ASSERT_TRUE(r.staged);
  const StagedPlan &s = *r.staged;
  ASSERT_EQ(s.stages.size(), 2u);
  EXPECT_EQ(s.stages[0].workers, 2u);
  EXPECT_EQ(s.stages[1].firstWorker, 2u);
  EXPECT_EQ(s.stages[0].layers + s.stages[1].layers, s.layers);
  EXPECT_FALSE(s.stages[0].boundary.empty());
  EXPECT_EQ(r.exec.stages, 2u);
  // Every node computes on its own stage's workers only.
  for (const NodeExec &ne : r.exec.nodes) {
    const unsigned stage = s.chunks[s.nodeChunk[ne.node]].stage;
    for (unsigned w = 0; w < 4; ++w)
      if (ne.workers[w].computes)
        EXPECT_EQ(w / 2, stage) << r.problem->nodes[ne.node].name;
  }
  EXPECT_EQ(checkMemoryPlan(r.memory), "");
  // The plan's bytes are its execution plan's, the stages' own and those between them.
  EXPECT_EQ(r.plan.totalBytes, r.exec.bytesMoved(*r.problem));
}

/// `model` at `batch` on 4 workers as 2 stages over 4 microbatches of `algorithm` in each,
/// planned with the gradients reduced once a step where that helps (`once`) and every
/// microbatch (`every`).
struct OnceAndEvery {
  StagedStep step;
  PipelineResult once, every;
};
OnceAndEvery onceAndEvery(const std::string &model, int64_t batch, Algorithm algorithm) {
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 4;
  OnceAndEvery out{setup(model, batch, 4, spec), {}, {}};
  out.step.options.search.algorithm = algorithm;
  out.once = planned(out.step);
  out.step.options.stages.reduceOnce = false;
  out.every = planned(out.step);
  out.step.options.stages.reduceOnce = true;
  return out;
}

TEST(Stages, ReducesDataParallelGradientsOnceAStep) {
  // 2 stages of 2 data-parallel workers over 4 microbatches: each weight's gradient is summed
  // over the microbatches on each worker and combined across the stage's two once, at the
  // last microbatch's backward, moving a quarter of those bytes.
  OnceAndEvery runs = onceAndEvery("gpt-2-64-4-16", 32, Algorithm::DataParallel);
  const PipelineResult *once = &runs.once, *every = &runs.every;
  ASSERT_TRUE(once->staged && every->staged);
  EXPECT_EQ(every->staged->reducedOnce, 0u);
  const Problem &p = *once->problem;
  unsigned weights = 0;
  for (const ProblemTensor &t : p.tensors)
    weights += t.role == TensorRole::Weight;
  EXPECT_EQ(once->staged->reducedOnce, weights);
  EXPECT_NE(
      once->staged->describe().find(fmt::format(", {} gradients reduced once a step", weights)),
      std::string::npos)
      << once->staged->describe();
  EXPECT_EQ(once->plan.totalBytes, once->exec.bytesMoved(p));
  // Data parallelism moves little but the gradients (the batch's tiles stay where they are
  // drawn): the step moves over 3 times less (43.0 against 169.5 MB).
  EXPECT_LT(3 * once->plan.totalBytes, every->plan.totalBytes);
  EXPECT_EQ(checkMemoryPlan(once->memory), "");
  // Each contribution is kept on the workers that compute it and read in place by its sum;
  // only each gradient's last sum fetches, combining the workers' accumulators.
  unsigned combined = 0;
  for (const NodeExec &ne : once->exec.nodes) {
    const ProblemNode &node = p.nodes[ne.node];
    const std::vector<unsigned> &readers = p.tensors[node.output].consumers;
    const bool summed = readers.size() == 1 && isGradientSumName(p.nodes[readers[0]].name);
    if (!summed && !isGradientSumName(node.name))
      continue;
    ExecPlan alone;
    alone.workers = once->exec.workers;
    alone.nodes = {ne};
    if (summed) {
      for (const OutputAssembly &a : ne.assemble)
        for (const auto &slice : a.slices)
          for (const Fetch &f : slice)
            EXPECT_EQ(f.from, a.owner) << node.name;
    } else if (alone.bytesMoved(p) > 0) {
      ++combined;
    }
  }
  EXPECT_EQ(combined, weights);
}

TEST(Stages, ABudgetTheAccumulatorsOverflowReducesEveryMicrobatch) {
  // Under zero3 each worker keeps a shard of each gradient; reduced once a step, it holds an
  // accumulator of the whole weight instead. A budget between the two peaks: the stages
  // reduce every microbatch again, and fit.
  OnceAndEvery runs = onceAndEvery("gpt-2-256-4-16", 8, Algorithm::Zero3);
  const PipelineResult *once = &runs.once, *every = &runs.every;
  ASSERT_TRUE(once->staged && every->staged);
  ASSERT_GT(once->staged->reducedOnce, 0u);
  const int64_t high = once->memory.largestPeak(), low = every->memory.largestPeak();
  ASSERT_LT(low, high); // 118.9 against 121.0 MB
  StagedStep &step = runs.step;
  step.options.memoryPerWorker = (low + high) / 2;
  auto fitted = step.run();
  ASSERT_TRUE(bool(fitted)) << llvm::toString(fitted.takeError());
  EXPECT_LT(fitted->staged->reducedOnce, once->staged->reducedOnce);
  EXPECT_LE(fitted->memory.largestPeak(), (low + high) / 2);
  EXPECT_EQ(checkMemoryPlan(fitted->memory), "");
}

TEST(Stages, PlacementPutsEachRnnLayerOnAWorkerInTurn) {
  // rnn-4-64's layers are its four LSTM cells (each cell's weights over every timestep),
  // round-robin on 3 workers: layer 3 on worker 0 again.
  StageSpec spec;
  spec.roundRobin = true;
  spec.stages = 3;
  spec.microbatches = 2;
  spec.schedule = Schedule::GPipe;
  const PipelineResult r = planned("rnn-4-64", 6, 3, spec);
  ASSERT_TRUE(r.staged);
  const StagedPlan &s = *r.staged;
  ASSERT_EQ(s.layers, 4u);
  ASSERT_EQ(s.stages.size(), 4u);
  for (unsigned v = 0; v < 4; ++v) {
    EXPECT_EQ(s.stages[v].firstWorker, v % 3);
    EXPECT_EQ(s.stages[v].workers, 1u);
  }
  EXPECT_EQ(r.exec.stages, 3u);
  EXPECT_EQ(s.describe(), "placement: 4 layers round-robin on 3 workers, 2 microbatches, gpipe");
  // A cell's forward ops (lstm<l>_t<t>_...) run on its layer's worker, and only there.
  unsigned cells = 0;
  for (const NodeExec &ne : r.exec.nodes) {
    const std::string &name = r.problem->nodes[ne.node].name;
    if (name.rfind("lstm", 0) != 0)
      continue;
    const unsigned layer = unsigned(name[4] - '1');
    ++cells;
    EXPECT_EQ(s.chunks[s.nodeChunk[ne.node]].stage, layer) << name;
    for (unsigned w = 0; w < 3; ++w)
      EXPECT_EQ(ne.workers[w].computes, w == layer % 3) << name << " on worker " << w;
  }
  EXPECT_GT(cells, 0u);
  EXPECT_EQ(checkMemoryPlan(r.memory), "");
  EXPECT_EQ(r.plan.totalBytes, r.exec.bytesMoved(*r.problem));
  EXPECT_GT(r.plan.totalBytes, 0);
  // More workers than layers: the last ones idle, as the paper's RNN-6 on 8 GPUs.
  spec.stages = 5;
  const PipelineResult idle = planned("rnn-4-64", 6, 5, spec);
  ASSERT_TRUE(idle.staged);
  EXPECT_EQ(idle.staged->describe(),
            "placement: 4 layers round-robin on 5 workers (1 idle), 2 microbatches, gpipe");
  for (const NodeExec &ne : idle.exec.nodes)
    EXPECT_FALSE(ne.workers[4].computes) << idle.problem->nodes[ne.node].name;
  EXPECT_EQ(checkMemoryPlan(idle.memory), "");
  spec.stages = 3;
  // 1F1B over round-robin layers is not built: refused by name.
  spec.schedule = Schedule::OneFOneB;
  auto refused = setup("rnn-4-64", 6, 3, spec).run();
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("Megatron's interleaved schedule"),
            std::string::npos);
}

/// A plan as text, less the seconds its search took.
std::string untimed(PartitionPlan plan) {
  plan.searchSeconds = 0;
  return encodePlan(plan);
}

TEST(Stages, StagesOfOneProblemShareASearch) {
  // A GPT's middle stages are one problem under other names where they run their nodes in
  // one order: every stage under GPipe, and under 1F1B those whose warm-up holds every
  // microbatch's forward (here 2 microbatches, and stage 1 warms up with two forwards as
  // stage 2 runs F F B B too). The later takes the first one's plan, and it is the plan its
  // own search finds (shareSearches false), under the time objective and within a budget.
  struct Case {
    Schedule schedule;
    unsigned microbatches;
    int64_t budget;
  };
  for (const Case &c : {Case{Schedule::OneFOneB, 2, 0}, Case{Schedule::GPipe, 4, 30 << 20}}) {
    SCOPED_TRACE(scheduleName(c.schedule));
    StageSpec spec;
    spec.stages = 4;
    spec.microbatches = c.microbatches;
    spec.schedule = c.schedule;
    StagedStep step = setup("gpt-8-64-4-16", 8, 8, spec);
    step.options.device = llvm::cantFail(deviceModelNamed("h100"));
    step.options.memoryPerWorker = c.budget;
    const PipelineResult shared = planned(step);
    step.options.stages.shareSearches = false;
    const PipelineResult searched = planned(step);
    ASSERT_TRUE(shared.staged && searched.staged);
    const std::vector<StageSummary> &a = shared.staged->stages, &b = searched.staged->stages;
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    EXPECT_EQ(a[0].planOf, -1);
    EXPECT_EQ(a[1].planOf, -1);
    EXPECT_EQ(a[2].planOf, 1); // the middle stages' four layers each
    EXPECT_EQ(a[3].planOf, -1);
    for (unsigned s = 0; s < 4; ++s) {
      EXPECT_EQ(b[s].planOf, -1);
      EXPECT_EQ(untimed(a[s].plan), untimed(b[s].plan)) << "stage " << s;
      EXPECT_EQ(a[s].searches, b[s].searches) << "stage " << s;
    }
    EXPECT_EQ(shared.plan.totalBytes, searched.plan.totalBytes);
    EXPECT_EQ(shared.memory.largestPeak(), searched.memory.largestPeak());
  }
}

TEST(Stages, GPipeHoldsMoreActivationsThan1F1B) {
  // The last stage holds one microbatch's logits under 1F1B (each backward follows its
  // forward) against GPipe's four; stage 0 two against four.
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 4;
  const PipelineResult f1b = planned("gpt-2-64-4-16", 32, 2, spec);
  spec.schedule = Schedule::GPipe;
  const PipelineResult gpipe = planned("gpt-2-64-4-16", 32, 2, spec);
  ASSERT_EQ(f1b.memory.workers.size(), 2u);
  ASSERT_EQ(gpipe.memory.workers.size(), 2u);
  EXPECT_LE(f1b.memory.workers[0].peak, gpipe.memory.workers[0].peak);
  EXPECT_LT(1.5 * double(f1b.memory.workers[1].peak), double(gpipe.memory.workers[1].peak));
}

TEST(Stages, RecomputeWithinEachStage) {
  // Segment checkpointing with the model's cuts kept: every copy runs in its own stage's
  // backward, and stage 0 holds less than without.
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 4;
  StagedStep step = setup("wresnet-50-1-i32-c8-k10", 32, 2, spec);
  auto plain = step.run();
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  step.options.recompute = RecomputeMode::Sqrt;
  auto sqrt = step.run();
  ASSERT_TRUE(bool(sqrt)) << llvm::toString(sqrt.takeError());
  ASSERT_TRUE(sqrt->staged && sqrt->withoutRecomputation);
  EXPECT_FALSE(sqrt->recomputed.copies.empty());
  EXPECT_EQ(checkMemoryPlan(sqrt->memory), "");
  EXPECT_LT(sqrt->memory.workers[0].peak, plain->memory.workers[0].peak);
  EXPECT_LE(sqrt->memory.workers[1].peak, plain->memory.workers[1].peak);
  // A copy runs in the backward chunk of its forward op's stage and microbatch.
  const StagedPlan &s = *sqrt->staged;
  for (unsigned n = 0; n < sqrt->problem->nodes.size(); ++n) {
    const std::string &name = sqrt->problem->nodes[n].name;
    if (name.find("_recompute") == std::string::npos)
      continue;
    EXPECT_EQ(s.chunks[s.nodeChunk[n]].phase, ChunkPhase::Backward) << name;
  }
}

TEST(Stages, BudgetRecomputesWhatEachStageNeeds) {
  // GPipe holds all four microbatches' activations on both stages. A budget between the
  // stages' peaks: the stage over it recomputes, the other keeps its plan; every worker's
  // planned peak then fits, the copies run in their own stage's backward, and what a stage
  // hands on is never dropped.
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 4;
  spec.schedule = Schedule::GPipe;
  StagedStep step = setup("wresnet-50-1-i32-c8-k10", 32, 2, spec);
  auto plain = step.run();
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  const std::vector<int64_t> before = stagePeaks(*plain->staged, plain->memory);
  ASSERT_EQ(before.size(), 2u);
  const unsigned big = before[0] > before[1] ? 0 : 1;
  const int64_t small = before[1 - big];
  ASSERT_LT(double(small), 0.9 * double(before[big])) << "the stages' peaks are too close";
  const int64_t limit = (small + before[big]) / 2;
  step.options.memoryPerWorker = limit;
  step.options.recompute = RecomputeMode::Auto;
  auto fitted = step.run();
  ASSERT_TRUE(bool(fitted)) << llvm::toString(fitted.takeError());
  const StagedPlan &s = *fitted->staged;
  for (const WorkerMemory &w : fitted->memory.workers)
    EXPECT_LE(w.peak, limit);
  EXPECT_EQ(checkMemoryPlan(fitted->memory), "");
  EXPECT_GT(s.stages[big].recomputed, 0u);
  EXPECT_EQ(s.stages[1 - big].recomputed, 0u);
  EXPECT_EQ(stagePeaks(s, fitted->memory)[1 - big], small);
  ASSERT_TRUE(fitted->budget && fitted->budget->recompute);
  const RecomputePlan &rp = *fitted->budget->recompute;
  EXPECT_EQ(rp.peakWithout, before[big]);
  EXPECT_FALSE(rp.fitsWithout);
  EXPECT_GE(rp.tried, 3u); // without, everything, and a bisection
  EXPECT_TRUE(rp.problemWithout.has_value());
  for (unsigned m = 0; m < 4; ++m) {
    const std::string handed = s.stages[0].boundary + "@mb" + std::to_string(m);
    EXPECT_EQ(
        std::count(fitted->recomputed.dropped.begin(), fitted->recomputed.dropped.end(), handed), 0)
        << handed;
  }
  for (unsigned n = 0; n < fitted->problem->nodes.size(); ++n) {
    const std::string &name = fitted->problem->nodes[n].name;
    if (name.find("_recompute") == std::string::npos)
      continue;
    EXPECT_EQ(s.chunks[s.nodeChunk[n]].phase, ChunkPhase::Backward) << name;
    EXPECT_EQ(s.chunks[s.nodeChunk[n]].stage, big) << name;
  }
  // Without recomputation the budget is searched per stage, and misses: the error names the
  // stage over it and what it holds at its peak.
  step.options.recompute.reset();
  auto missed = step.run();
  ASSERT_FALSE(bool(missed));
  const std::string why = llvm::toString(missed.takeError());
  EXPECT_NE(why.find("without recomputation: stage " + std::to_string(big) + " ("),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("--recompute auto"), std::string::npos) << why;
  // A budget the weights alone overflow: no recomputation helps, and the error says so.
  step.options.recompute = RecomputeMode::Auto;
  step.options.memoryPerWorker = 64 << 10;
  auto tiny = step.run();
  ASSERT_FALSE(bool(tiny));
  const std::string tinyWhy = llvm::toString(tiny.takeError());
  EXPECT_NE(tinyWhy.find("with every forward tensor of its layers recomputed"), std::string::npos)
      << tinyWhy;
  EXPECT_NE(tinyWhy.find("of weights and optimiser state"), std::string::npos) << tinyWhy;
}

TEST(Stages, FitFindsTheFewestWorkersTheStagesFitOn) {
  // A budget between the stages' peaks at 4 workers and at 2: --fit without recomputation
  // takes 4 (2 tried and over), with auto 2 (what a stage recomputes fits it).
  StageSpec spec;
  spec.stages = 2;
  spec.microbatches = 4;
  spec.schedule = Schedule::GPipe;
  StagedStep step = setup("wresnet-50-1-i32-c8-k10", 32, 2, spec);
  auto two = step.run();
  ASSERT_TRUE(bool(two)) << llvm::toString(two.takeError());
  step.options.search.workers = 4;
  auto four = step.run();
  ASSERT_TRUE(bool(four)) << llvm::toString(four.takeError());
  const int64_t peak2 = two->memory.largestPeak(), peak4 = four->memory.largestPeak();
  ASSERT_LT(double(peak4), 0.95 * double(peak2));
  const int64_t limit = (peak2 + peak4) / 2;
  step.options.search.workers = 0;
  step.options.memoryPerWorker = limit;
  step.options.fitWorkersUpTo = 64;
  std::vector<unsigned> heard;
  step.options.onWorkerCount = [&](unsigned k, const MemoryFit &, const RecomputePlan *) {
    heard.push_back(k);
  };
  auto fitted = step.run();
  ASSERT_TRUE(bool(fitted)) << llvm::toString(fitted.takeError());
  EXPECT_EQ(fitted->plan.workers, 4u);
  EXPECT_EQ(fitted->staged->stages[1].firstWorker, 2u);
  for (const WorkerMemory &w : fitted->memory.workers)
    EXPECT_LE(w.peak, limit);
  ASSERT_TRUE(fitted->budget);
  const BudgetChoice &b = *fitted->budget;
  EXPECT_EQ(b.fitStages, 2u);
  ASSERT_EQ(b.tried.size(), 2u);
  EXPECT_EQ(b.tried[0].first, 2u);
  EXPECT_GT(b.tried[0].second, limit);
  EXPECT_EQ(b.tried[1], std::make_pair(4u, fitted->memory.largestPeak()));
  EXPECT_EQ(heard, (std::vector<unsigned>{2, 4}));
  // With recomputation the fewest is 2: its step recomputes what the stage over needs.
  step.options.recompute = RecomputeMode::Auto;
  auto recomputing = step.run();
  ASSERT_TRUE(bool(recomputing)) << llvm::toString(recomputing.takeError());
  EXPECT_EQ(recomputing->plan.workers, 2u);
  EXPECT_FALSE(recomputing->recomputed.dropped.empty());
  EXPECT_LE(recomputing->memory.largestPeak(), limit);
  // Too few workers to try: the error says how close the most came.
  step.options.recompute.reset();
  step.options.fitWorkersUpTo = 3;
  auto few = step.run();
  ASSERT_FALSE(bool(few));
  const std::string why = llvm::toString(few.takeError());
  EXPECT_NE(why.find("no plan on at most 2 workers fits"), std::string::npos) << why;
  EXPECT_NE(why.find("at 2 workers without recomputation: stage "), std::string::npos) << why;
}

TEST(Stages, RefusesWhatCannotBeStaged) {
  GraphSource source;
  source.model = "gpt-1-64-4-16";
  source.batch = 6;
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.search.workers = 3;
  o.stages.stages = 2;
  auto r = runPipeline(source, testLibrary(), o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("2 stages need a number of workers they divide"),
            std::string::npos);
  o.search.workers = 2;
  o.stages.microbatches = 4;
  r = runPipeline(source, testLibrary(), o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("--batch 6 does not split into 4 microbatches"),
            std::string::npos);
  o.stages.microbatches = 1;
  o.stages.layers = {1, 100};
  r = runPipeline(source, testLibrary(), o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError())
                .find("the stages' layers add up to 101, and the model "
                      "has"),
            std::string::npos);
}

TEST(Stages, AutoKeepsTheCandidateOfLeastEstimatedStep) {
  GraphSource source;
  source.model = "gpt-2-64-4-16";
  source.batch = 8;
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.search.workers = 4;
  o.stages.automatic = true;
  // Without a device there is no step to choose by.
  auto refused = runPipeline(source, testLibrary(), o);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("it needs a device model"), std::string::npos);
  o.device = llvm::cantFail(deviceModelNamed("h100"));
  auto r = runPipeline(source, testLibrary(), o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_TRUE(r->stageSearch);
  const StageSearch &s = *r->stageSearch;
  // No stages first, then S = 2 and 4 (powers of two dividing the workers), each from M = S.
  ASSERT_GE(s.candidates.size(), 3u);
  EXPECT_EQ(s.candidates[0].stages, 1u);
  EXPECT_EQ(s.candidates[1].stages, 2u);
  EXPECT_EQ(s.candidates[1].microbatches, 2u);
  bool four = false;
  for (const StageCandidate &c : s.candidates) {
    EXPECT_TRUE(c.error.empty()) << c.stages << "," << c.microbatches << ": " << c.error;
    EXPECT_EQ(c.microbatches % c.stages, 0u);
    EXPECT_GE(c.seconds, s.candidates[s.chosen].seconds);
    four |= c.stages == 4;
  }
  EXPECT_TRUE(four);
  const StageCandidate &chosen = s.candidates[s.chosen];
  EXPECT_EQ(r->staged.has_value(), chosen.stages > 1);
  if (r->staged) {
    EXPECT_EQ(r->staged->spec.stages, chosen.stages);
    EXPECT_EQ(r->staged->spec.microbatches, chosen.microbatches);
  }
  // --fit chooses the workers the stages need; auto needs them given.
  o.fitWorkersUpTo = 8;
  o.memoryPerWorker = 1 << 30;
  refused = runPipeline(source, testLibrary(), o);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("give --workers, not --fit"),
            std::string::npos);
}

} // namespace
} // namespace tofu
