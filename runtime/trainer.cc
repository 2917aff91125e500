// The training loop as a library (trainer.h): values, batches, steps, evaluation and
// checkpoints; the first step's comparison is step_verify.h's.
#include "runtime/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "codegen/schedule.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/training.h"
#include "support/errors.h"

namespace tofu {
namespace {

/// A field of /proc/self/status in bytes (0 where there is none).
int64_t statusBytes(const char *field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0)
      return std::strtoll(line.c_str() + n, nullptr, 10) * 1024;
  return 0;
}
/// The process's peak resident memory (since the last resetPeakResident), and its current.
int64_t peakResidentBytes() { return statusBytes("VmHWM:"); }
int64_t currentResidentBytes() { return statusBytes("VmRSS:"); }
/// Starts the peak over from the current resident memory (Linux: clear_refs 5).
void resetPeakResident() { std::ofstream("/proc/self/clear_refs") << "5"; }

double secondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

/// Writes every tensor of `tensors` at `step` into `e`'s local tiles.
void setValues(Engine &e, const TrainingData &from, const std::vector<unsigned> &tensors,
               unsigned step) {
  for (unsigned t : tensors)
    e.setTiles(t, [&](const Box &tile, float *out) { from.fill(t, step, tile, out); });
}

} // namespace

llvm::Expected<EnginePlan> planForEngine(const Problem &p, const ExecPlan &exec,
                                         const MemoryPlan &memory,
                                         const std::vector<std::string> &outputs, bool fuse) {
  EnginePlan r{fuse ? fuseElementwise(p, exec, outputs) : FusedPlan{p, exec, 0, {}}, memory};
  if (fuse)
    r.memory = planMemory(r.fused.problem, r.fused.plan, outputs);
  if (std::string bad = checkMemoryPlan(r.memory); !bad.empty())
    return stringError("the fused plan's memory plan is unsound: " + bad);
  return r;
}

Tensor wholeTensor(const Engine &e, unsigned t, ProcessGroup &group) {
  Tensor x = e.get(t); // NaN where this process holds no tile
  if (!group.distributed())
    return x;
  const std::vector<double> all = group.allGather(x.data);
  const size_t n = x.data.size();
  for (size_t i = 0; i < n; ++i)
    for (int r = 0; r < group.size(); ++r)
      if (!std::isnan(all[r * n + i])) {
        x.data[i] = all[r * n + i];
        break;
      }
  return x;
}

double stepIterations(const Program &program) {
  std::vector<std::optional<KernelSchedule>> schedules(program.kernels.size());
  double total = 0;
  for (const ProgramNode &node : program.nodes) {
    const InstOp &op = *program.kernels[node.kernel].op;
    auto &s = schedules[node.kernel];
    if (!s)
      s = scheduleKernel(op, ScheduleTarget::Cpp);
    total += scheduledIterations(op, *s, fullRanges(node.shapes));
  }
  return total;
}

struct Trainer::Impl {
  Impl(const Problem &p, const Graph &training, TrainerOptions options, EngineFactory factory,
       ProcessGroup &group)
      : p(p), training(training), options(std::move(options)), factory(std::move(factory)),
        group(group) {}

  const Problem &p;
  const Graph &training;
  std::string loss;
  TrainerOptions options;
  EngineFactory factory;
  ProcessGroup &group;
  int64_t residentBefore = 0;

  // Resolved.
  unsigned stepsBefore = 0, steps = 1;
  std::optional<CheckpointReader> resumed;
  Optimizer kind = Optimizer::SGD;
  double lr = 0.1;
  TrainingHyper hyper;
  unsigned lossTensor = 0;
  bool realData = false;
  std::shared_ptr<const DataSet> ds;
  std::vector<DataBinding> bindings;
  int64_t dataBatch = 0, stepsPerEpoch = 1;
  std::unique_ptr<TrainingData> data;
  std::optional<BatchOrder> order; ///< the batches of the references verify() runs
  std::unique_ptr<Engine> engine;
  double buildSeconds = 0;

  // Evaluation.
  std::optional<EnginePlan> evalPlan;
  std::unique_ptr<Engine> evalEngine;
  std::unique_ptr<TrainingData> evalValues;
  std::optional<DataSet> evalDs; ///< options.eval's
  std::vector<DataBinding> evalBindings;
  std::string labelsArray, evalFeeds; ///< the labels' array; the other inputs' feeds

  // Results.
  std::vector<double> stepSeconds, losses;
  int64_t moved = 0;
  std::vector<EvalRecord> evals;
  std::optional<BatchPrefetcher> prefetch;
  /// The first step's results verify() compares (the loss, then every update), as the
  /// local workers hold them.
  FirstStepRecord first;

  llvm::Error resume();
  llvm::Error resolveHyper();
  llvm::Error bindData();
  llvm::Error makeEval();
  /// Binds held-out data (`what` names it) to the evaluation graph's inputs as training's.
  llvm::Expected<std::vector<DataBinding>> bindHeldOut(const DataSet &held,
                                                       const std::string &what);
  /// The trained state scored on `held`, batch by batch.
  llvm::Expected<ClassifierScore> score(const DataSet &held,
                                        const std::vector<DataBinding> &heldBindings);
  /// Writes the values and the batch of step `step` (counted over every run) into `e`.
  void setBatch(Engine &e, unsigned step);
  llvm::Error evaluate(unsigned done, TrainerObserver &observer);
  std::string firstNonFiniteCarried();
  /// A reference engine (this process alone) with the first step's values set, not
  /// stepped: on `options`, named `what` in its errors.
  llvm::Expected<std::unique_ptr<Engine>> referenceReady(const EngineOptions &options,
                                                         const std::string &what);
};

llvm::Error Trainer::Impl::resume() {
  if (options.loadDir.empty())
    return llvm::Error::success();
  auto c = CheckpointReader::open(options.loadDir);
  if (!c)
    return c.takeError();
  const std::map<std::string, std::string> &was = c->metadata();
  // Every number the run takes from the metadata must be one, in its range: a damaged or
  // hand-edited checkpoint stops here rather than training at a rate of 0.
  const struct {
    const char *key;
    double lo, hi; ///< [lo, hi)
    bool whole;
  } ranges[] = {{"steps", 0, 2147483648.0, true},
                {"warmup", 0, 2147483648.0, true},
                {"lr", 0, 1e300, false},
                {"momentum", 0, 1, false},
                {"weight_decay", 0, 1e6, false}};
  for (const auto &r : ranges) {
    auto it = was.find(r.key);
    if (it == was.end())
      continue;
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod(it->second.c_str(), &end);
    const bool number = !it->second.empty() && *end == '\0' && errno == 0 && std::isfinite(v);
    if (!number || v < r.lo || v >= r.hi || (r.whole && v != std::floor(v)) ||
        (std::string(r.key) == "lr" && v <= 0))
      return usageError(fmt::format("{}: metadata '{}' is '{}', not {} (the checkpoint is damaged)",
                                    c->path(), r.key, it->second,
                                    r.whole ? "a whole number of steps below 2^31"
                                    : std::string(r.key) == "lr"
                                        ? "a positive finite rate"
                                        : fmt::format("a number in [{}, {})", r.lo, r.hi)));
  }
  if (auto it = was.find("steps"); it != was.end())
    stepsBefore = static_cast<unsigned>(std::strtoul(it->second.c_str(), nullptr, 10));
  if (auto it = was.find("optimizer");
      it != was.end() && it->second != optimizerName(options.optimizer))
    return usageError(fmt::format("{}: the checkpoint was trained with {} {}, this run "
                                  "uses {}: its state does not carry over (give {} {})",
                                  c->path(), options.names("optimizer"), it->second,
                                  optimizerName(options.optimizer), options.names("optimizer"),
                                  it->second));
  resumed = std::move(*c);
  return llvm::Error::success();
}

llvm::Error Trainer::Impl::resolveHyper() {
  static const std::map<std::string, std::string> none;
  const std::map<std::string, std::string> &was = resumed ? resumed->metadata() : none;
  // A hyper-parameter: the option where given, else the checkpoint's, else `otherwise`.
  auto hyperOf = [&](const std::optional<double> &o, const char *key, double otherwise) {
    if (o)
      return *o;
    if (auto it = was.find(key); it != was.end())
      return std::strtod(it->second.c_str(), nullptr);
    return otherwise;
  };
  kind = options.optimizer;
  lr = hyperOf(options.lr, "lr",
               kind == Optimizer::SGD                                       ? 0.1
               : kind == Optimizer::Momentum || kind == Optimizer::Nesterov ? 0.01
                                                                            : 0.001);
  hyper.momentum = hyperOf(options.momentum, "momentum", 0.9);
  hyper.weightDecay =
      hyperOf(options.weightDecay, "weight_decay", kind == Optimizer::AdamW ? 0.01 : 0.0);
  if (!options.weightDecay && hyper.weightDecay > 0 && kind != Optimizer::AdamW)
    return usageError(fmt::format("{}: the checkpoint was trained with {} {}: give "
                                  "it again (it shapes the training graph)",
                                  resumed->path(), options.names("weight-decay"),
                                  hyper.weightDecay));
  if (options.lrSchedule) {
    hyper.schedule = *options.lrSchedule;
  } else if (auto it = was.find("lr_schedule"); it != was.end()) {
    auto sc = parseLrSchedule(it->second, options.names);
    if (!sc)
      return usageError(resumed->path() +
                        ": metadata 'lr_schedule': " + llvm::toString(sc.takeError()));
    hyper.schedule = *sc;
  }
  hyper.schedule.warmup = options.warmup ? *options.warmup : 0;
  if (!options.warmup)
    if (auto it = was.find("warmup"); it != was.end())
      hyper.schedule.warmup = static_cast<unsigned>(std::strtoul(it->second.c_str(), nullptr, 10));
  return llvm::Error::success();
}

llvm::Error Trainer::Impl::bindData() {
  steps = options.steps ? *options.steps : 1;
  realData = options.data != "teacher" && options.data != "fixed";
  if (!realData)
    return llvm::Error::success();
  // A data set: its batches in a shuffled order per epoch (drawn from the seed).
  if (options.dataSet) {
    ds = options.dataSet;
  } else {
    auto d = openDataSet(options.data, "train", options.names);
    if (!d)
      return usageError(llvm::toString(d.takeError()));
    ds = std::make_shared<const DataSet>(std::move(*d));
  }
  auto b = bindDataSet(p, loss, *ds, options.feeds, training.constants, training.initialValues,
                       training.randomInputs, options.names);
  if (!b)
    return usageError(fmt::format("{}: {} {}: {}", options.name, options.names("data"),
                                  options.data, llvm::toString(b.takeError())));
  bindings = std::move(*b);
  dataBatch = p.tensors[bindings[0].tensor].shape[0];
  for (const DataBinding &x : bindings)
    if (p.tensors[x.tensor].shape[0] != dataBatch)
      return usageError(fmt::format("{}: inputs '{}' and '{}' take batches of {} and {} samples: "
                                    "fed inputs share the batch",
                                    options.name, bindings[0].input, x.input, dataBatch,
                                    p.tensors[x.tensor].shape[0]));
  stepsPerEpoch = ds->samples / dataBatch;
  if (!options.steps)
    steps = static_cast<unsigned>(std::min<int64_t>(int64_t(options.epochs) * stepsPerEpoch,
                                                    std::numeric_limits<unsigned>::max()));
  order.emplace(ds->samples, dataBatch, options.seed, options.shuffle);
  return llvm::Error::success();
}

llvm::Error Trainer::Impl::makeEval() {
  if (options.eval.empty() && !options.evalGraph)
    return llvm::Error::success();
  if (!options.evalGraph || !ds)
    return usageError("evaluation needs the forward graph and a data set to train on");
  if (!options.eval.empty()) {
    // The test split is a directory's: a data set of arrays has none, and its training data
    // would be scored as held-out.
    if (options.eval == "test" && !hasMnistSplit(options.data, "t10k"))
      return usageError(fmt::format(
          "{} test scores the test split (t10k) of an MNIST-family directory; {} '{}' has none: "
          "give the held-out data ({} NAME=FILE,... or FILE.safetensors)",
          options.names("eval"), options.names("data"), options.data, options.names("eval")));
    auto d =
        openDataSet(options.eval == "test" ? options.data : options.eval, "t10k", options.names);
    if (!d)
      return usageError(options.names("eval") + ": " + llvm::toString(d.takeError()));
    evalDs = std::move(*d);
  }
  for (const DataBinding &b : bindings)
    if (b.labels)
      labelsArray = b.array;
    else
      evalFeeds += (evalFeeds.empty() ? "" : ",") + b.input + "=" + b.array;
  if (labelsArray.empty())
    return usageError(options.name + ": " + options.names("eval") +
                      " scores a classifier: a model trained with softmax cross-entropy against "
                      "labels fed from the data set");
  const Problem &ep = *options.evalGraph->problem;
  auto ef = planForEngine(ep, *options.evalGraph->exec, *options.evalGraph->memory,
                          options.evalGraph->outputs, /*fuse=*/true);
  if (!ef)
    return stringError(options.name + ": the evaluation plan: " + llvm::toString(ef.takeError()));
  evalPlan = std::move(*ef);
  auto e = factory(evalPlan->fused.problem, evalPlan->fused.plan, evalPlan->memory, options.engine,
                   /*local=*/false);
  if (!e)
    return stringError(options.name + ": the evaluation engine: " + llvm::toString(e.takeError()));
  evalEngine = std::move(*e);
  // Evaluation is inference: a training-mode Dropout's mask is its expectation (the keep
  // probability), so that x * mask / keep is x; other random inputs are drawn.
  std::map<std::string, std::vector<double>> evalConstants = training.constants;
  for (const ProblemTensor &t : ep.tensors)
    if (auto m = training.randomInputs.find(t.name);
        m != training.randomInputs.end() && m->second.kind == RandomInput::Kind::Mask)
      evalConstants[t.name].assign(size_t(boxElements(wholeBox(t.shape))), m->second.a);
  evalValues = std::make_unique<TrainingData>(ep, "", options.seed, lr, evalConstants, false,
                                              &training.initialValues, TrainingHyper(),
                                              &training.randomInputs);
  setValues(*evalEngine, *evalValues, evalValues->tensors(), 0);
  if (!evalDs) // held-out data the caller gives evaluateOn()
    return llvm::Error::success();
  auto eb = bindHeldOut(*evalDs, options.eval);
  if (!eb)
    return eb.takeError();
  evalBindings = std::move(*eb);
  return llvm::Error::success();
}

llvm::Expected<std::vector<DataBinding>> Trainer::Impl::bindHeldOut(const DataSet &held,
                                                                    const std::string &what) {
  if (!held.find(labelsArray))
    return usageError(fmt::format("{} {}: the data set has no array '{}' (the labels)",
                                  options.names("eval"), what, labelsArray));
  // Held-out labels as the training ones: a class outside the logits would be read past them.
  if (llvm::Error e = checkLabels(*held.find(labelsArray), labelsArray, loss, lossClasses(p, loss)))
    return usageError(fmt::format("{}: {} {}: {}", options.name, options.names("eval"), what,
                                  llvm::toString(std::move(e))));
  auto eb = bindDataSet(*options.evalGraph->problem, "", held, evalFeeds, training.constants,
                        training.initialValues, training.randomInputs, options.names);
  if (!eb)
    return usageError(fmt::format("{}: {} {}: {}", options.name, options.names("eval"), what,
                                  llvm::toString(eb.takeError())));
  return eb;
}

void Trainer::Impl::setBatch(Engine &e, unsigned step) {
  setValues(e, *data, data->scheduledTensors(), step);
  if (realData)
    feedBatch(e, *ds, bindings, order->samplesOf(step), options.normalization);
  else
    setValues(e, *data, data->batchTensors(), step);
}

llvm::Expected<ClassifierScore> Trainer::Impl::score(const DataSet &held,
                                                     const std::vector<DataBinding> &heldBindings) {
  // (A pipeline's weights are laid out as its stages cut them, the evaluation's as its own
  // plan does: each is then gathered whole and cut again.)
  if (llvm::Error e = copyState(*engine, *evalEngine,
                                [&](unsigned t) { return wholeTensor(*engine, t, group); }))
    return std::move(e);
  const int64_t evalBatch = options.evalGraph->problem->tensors[heldBindings[0].tensor].shape[0];
  ClassifierScore score;
  const DataArray &labelArray = *held.find(labelsArray);
  // A label per sample, or one per position of a sequence (a language model's logits are
  // [batch, positions, classes]).
  const int64_t positions = labelArray.sampleElements();
  std::vector<int64_t> samples(evalBatch);
  std::vector<double> labels(evalBatch * positions);
  for (int64_t start = 0; start < held.samples; start += evalBatch) {
    const int64_t rows = std::min(evalBatch, held.samples - start);
    for (int64_t r = 0; r < evalBatch; ++r) // a partial batch repeats the first samples
      samples[r] = r < rows ? start + r : (r - rows) % held.samples;
    feedBatch(*evalEngine, held, heldBindings, samples, options.normalization);
    auto st = evalEngine->step();
    if (!st)
      return st.takeError();
    const Tensor logits = wholeTensor(*evalEngine, options.evalGraph->logits, group);
    if (logits.data.size() !=
        size_t(evalBatch * positions * (logits.shape.empty() ? 1 : logits.shape.back())))
      return stringError(fmt::format(
          "{}: {}: the logits [{}] do not hold a row of classes for each of the batch's "
          "{} samples x {} labels",
          options.name, options.names("eval"), fmt::join(logits.shape, ", "), evalBatch,
          positions));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < positions; ++j)
        labels[r * positions + j] = labelArray.at(samples[r] * positions + j);
    scoreRows(logits, labels, rows * positions, score);
  }
  return score;
}

llvm::Error Trainer::Impl::evaluate(unsigned done, TrainerObserver &observer) {
  observer.evaluating();
  const auto t0 = std::chrono::steady_clock::now();
  auto score = this->score(*evalDs, evalBindings);
  if (!score)
    return score.takeError();
  EvalRecord record{done, double(done) / double(stepsPerEpoch), *score, secondsSince(t0),
                    evalDs->samples};
  evals.push_back(record);
  observer.evaluated(record);
  return llvm::Error::success();
}

/// The first tensor a step carries into the next (weights, optimiser state) that holds a
/// value that is not finite, over every process's tiles; empty when all are finite.
std::string Trainer::Impl::firstNonFiniteCarried() {
  const auto &carries = engine->carries();
  int64_t first = static_cast<int64_t>(carries.size()); // an index into carries
  for (size_t c = 0; c < carries.size() && first == int64_t(carries.size()); ++c)
    for (unsigned w : engine->localWorkers())
      if (engine->holdsTile(carries[c].second, w)) {
        const std::vector<float> tile = engine->readTile(carries[c].second, w);
        if (!std::all_of(tile.begin(), tile.end(), [](float v) { return std::isfinite(v); })) {
          first = static_cast<int64_t>(c);
          break;
        }
      }
  const std::vector<int64_t> all = group.allGather(first);
  first = *std::min_element(all.begin(), all.end());
  return first < int64_t(carries.size()) ? p.tensors[carries[first].second].name : std::string();
}

llvm::Expected<std::unique_ptr<Trainer>>
Trainer::create(const Problem &p, const Graph &training, const std::string &loss,
                const EnginePlan &plan, TrainerOptions options, EngineFactory factory,
                ProcessGroup &group) {
  auto impl = std::make_unique<Impl>(p, training, std::move(options), std::move(factory), group);
  Impl &m = *impl;
  m.loss = loss;
  // The process's memory from here on: the values, the engine (arenas, kernels, input
  // tiles) and the steps, not the libraries, import, search and planning before.
  resetPeakResident();
  m.residentBefore = currentResidentBytes();
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].name == loss)
      m.lossTensor = t;
  if (llvm::Error e = m.resume())
    return std::move(e);
  if (llvm::Error e = m.resolveHyper())
    return std::move(e);
  if (llvm::Error e = m.bindData())
    return std::move(e);
  // A cosine schedule with no horizon ends at this run's last step.
  LrSchedule &schedule = m.hyper.schedule;
  if (schedule.kind == LrSchedule::Kind::Cosine && schedule.horizon == 0)
    schedule.horizon = m.stepsBefore + m.steps;
  if (schedule.kind == LrSchedule::Kind::Cosine && schedule.horizon <= schedule.warmup)
    return usageError(fmt::format("{} {} ends at step {}, within the {} steps of {}",
                                  m.options.names("lr-schedule"), schedule.str(), schedule.horizon,
                                  schedule.warmup, m.options.names("warmup")));
  // Every worker draws its own tiles of every value: no process makes a whole tensor.
  m.data = std::make_unique<TrainingData>(p, loss, m.options.seed, m.lr, training.constants,
                                          m.options.data == "teacher", &training.initialValues,
                                          m.hyper, &training.randomInputs);
  const auto start = std::chrono::steady_clock::now();
  auto engine = m.factory(plan.fused.problem, plan.fused.plan, plan.memory, m.options.engine,
                          /*local=*/false);
  if (!engine)
    return stringError(m.options.name + ": " + llvm::toString(engine.takeError()));
  m.engine = std::move(*engine);
  m.buildSeconds = secondsSince(start);
  setValues(*m.engine, *m.data, m.data->tensors(), 0);
  if (m.resumed)
    if (llvm::Error e = restore(*m.engine, *m.resumed, /*forwardOnly=*/false, m.options.names))
      return stringError(m.resumed->path() + ": " + llvm::toString(std::move(e)));
  // Evaluation: the forward graph on an engine of its own, its weights copied from
  // training's (tile by tile: both plans cut every weight alike).
  if (llvm::Error e = m.makeEval())
    return std::move(e);
  std::vector<unsigned> compared = {m.lossTensor};
  for (auto [upd, tgt] : m.engine->carries())
    compared.push_back(tgt);
  m.first.setCompared(std::move(compared));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

llvm::Error Trainer::train(TrainerObserver &observer) {
  Impl &m = *impl_;
  Engine &engine = *m.engine;
  const std::string &name = m.options.name;
  if (m.realData && !m.options.batches)
    m.prefetch.emplace(engine, *m.ds, m.bindings, m.options.normalization, m.dataBatch,
                       m.options.seed, m.options.shuffle);
  for (unsigned s = 0; s < m.steps; ++s) {
    const unsigned step = m.stepsBefore + s; // counted over every run
    if (m.options.batches) {
      auto batch = m.options.batches(s);
      if (!batch) {
        m.steps = s; // what was trained: save() counts it
        return stringError(
            fmt::format("{}: step {}: {}", name, s + 1, llvm::toString(batch.takeError())));
      }
      if ((*batch)->samples != m.dataBatch)
        return usageError(fmt::format("{}: step {}: a batch of {} samples, where the plan takes "
                                      "{}",
                                      name, s + 1, (*batch)->samples, m.dataBatch));
      // Each batch's labels against the classes, as a data set's are before a run: one outside
      // them would read past the logits.
      for (const DataBinding &b : m.bindings) {
        const DataArray *a = (*batch)->find(b.array);
        if (!a)
          return usageError(fmt::format("{}: step {}: the batch has no array '{}' (for input "
                                        "'{}')",
                                        name, s + 1, b.array, b.input));
        if (a->sampleElements() != (*m.ds->find(b.array)).sampleElements())
          return usageError(fmt::format("{}: step {}: array '{}' holds {} elements a sample, "
                                        "where the first batch's held {}",
                                        name, s + 1, b.array, a->sampleElements(),
                                        m.ds->find(b.array)->sampleElements()));
        if (b.labels)
          if (llvm::Error e = checkLabels(*a, b.array, m.loss, lossClasses(m.p, m.loss)))
            return usageError(
                fmt::format("{}: step {}: {}", name, s + 1, llvm::toString(std::move(e))));
      }
      std::vector<int64_t> rows(static_cast<size_t>(m.dataBatch));
      std::iota(rows.begin(), rows.end(), 0);
      setValues(engine, *m.data, m.data->scheduledTensors(), step);
      feedBatch(engine, **batch, m.bindings, rows, m.options.normalization);
    } else if (m.prefetch) {
      setValues(engine, *m.data, m.data->scheduledTensors(), step);
      m.prefetch->feed(engine, step, s + 1 < m.steps);
    } else {
      m.setBatch(engine, step);
    }
    if (s == 0 && m.options.verify)
      m.first.before(engine);
    auto r = engine.step();
    if (!r)
      return stringError(
          fmt::format("{}: step {}: {}", name, s + 1, llvm::toString(r.takeError())));
    m.moved = m.group.sum(r->bytesMoved);
    if (s == 0 && m.options.verify) // verify() compares the first step: later ones compound
      m.first.after(engine);
    m.stepSeconds.push_back(r->seconds);
    m.losses.push_back(wholeTensor(engine, m.lossTensor, m.group).data.at(0));
    if (!std::isfinite(m.losses.back()) && !m.options.continueNonFinite) {
      const std::string bad = m.firstNonFiniteCarried();
      return stringError(fmt::format("{}: step {}: the loss is {} (lr {}){}: training stopped{}; "
                                     "{} runs the remaining steps",
                                     name, step + 1, m.losses.back(), m.lr,
                                     bad.empty() ? ", while every weight is finite"
                                                 : ", and its update made '" + bad + "' non-finite",
                                     m.options.saveDir.empty()
                                         ? ""
                                         : ", and nothing was saved to " + m.options.saveDir +
                                               " (what it holds stays as it was)",
                                     m.options.names("continue-on-nonfinite")));
    }
    const unsigned done = step + 1;
    observer.stepped(StepRecord{s, done, m.losses.back(), r->seconds});
    const bool last = s + 1 == m.steps;
    if (m.evalDs && (last || (m.options.evalEvery > 0 ? done % m.options.evalEvery == 0
                                                      : done % m.stepsPerEpoch == 0)))
      if (llvm::Error e = m.evaluate(done, observer))
        return stringError(fmt::format("{}: evaluating after step {}: {}", name, done,
                                       llvm::toString(std::move(e))));
    // Where several processes run the step, one asked to stop (Ctrl-C reaches each at its
    // own time) stops them all after this step: a process gone on alone would wait forever.
    if (m.group.sum(observer.stopRequested() ? 1 : 0) > 0) {
      m.steps = s + 1; // what was trained: save() counts it, and the checks below see it
      break;
    }
  }
  // The last step's update has no loss after it to show it: the weights themselves are
  // checked (and a checkpoint of non-finite weights is never written over a good one).
  // A verifying run that saves nothing goes on to its comparison, which fails such a step.
  if (m.steps > 0 && (!m.options.verify || !m.options.saveDir.empty()))
    if (const std::string bad = m.firstNonFiniteCarried(); !bad.empty())
      return stringError(fmt::format("{}: after step {}, '{}' is not finite (lr {}): {}", name,
                                     m.stepsBefore + m.steps, bad, m.lr,
                                     m.options.saveDir.empty()
                                         ? std::string("the trained weights are not usable")
                                         : "nothing was saved to " + m.options.saveDir +
                                               " (what it holds stays as it was)"));
  return llvm::Error::success();
}

llvm::Expected<EvalRecord> Trainer::evaluateOn(const DataSet &held, const std::string &what) {
  Impl &m = *impl_;
  if (!m.evalEngine)
    return usageError(m.options.name + ": evaluation needs the forward graph (an EvalGraph)");
  const auto t0 = std::chrono::steady_clock::now();
  auto b = m.bindHeldOut(held, what);
  if (!b)
    return b.takeError();
  auto score = m.score(held, *b);
  if (!score)
    return score.takeError();
  const unsigned done = m.stepsBefore + static_cast<unsigned>(m.losses.size());
  return EvalRecord{done, double(done) / double(m.stepsPerEpoch), *score, secondsSince(t0),
                    held.samples};
}

std::map<std::string, Tensor> Trainer::wholeState() {
  Impl &m = *impl_;
  if (!m.group.distributed())
    return checkpointOf(*m.engine).tensors;
  std::map<std::string, Tensor> out;
  for (auto [upd, tgt] : m.engine->carries())
    out[m.p.tensors[tgt].name] = wholeTensor(*m.engine, tgt, m.group);
  return out;
}

llvm::Expected<SaveReport> Trainer::save(const std::string &dir) {
  Impl &m = *impl_;
  const std::map<std::string, std::string> metadata = {
      {"format", "tofu"},
      {"model", m.options.name},
      {"optimizer", optimizerName(m.options.optimizer)},
      {"lr", fmt::format("{}", m.lr)},
      {"lr_schedule", m.hyper.schedule.str()},
      {"warmup", std::to_string(m.hyper.schedule.warmup)},
      {"momentum", fmt::format("{}", m.hyper.momentum)},
      {"weight_decay", fmt::format("{}", m.hyper.weightDecay)},
      {"steps", std::to_string(m.stepsBefore + m.steps)},
      {"workers", std::to_string(m.options.workers)}};
  SaveReport report;
  report.stepsTrained = m.stepsBefore + m.steps;
  if (!m.group.distributed()) { // every tensor whole, in DIR/model.safetensors
    Checkpoint c = checkpointOf(*m.engine);
    c.metadata = metadata;
    if (llvm::Error e = saveCheckpoint(dir, c, m.options.saveType))
      return std::move(e);
    report.path = checkpointFile(dir);
    report.tensors = c.tensors.size();
    return report;
  }
  // Each process writes its own tiles, the first the index of them all once every
  // process's file is complete.
  const unsigned generation =
      static_cast<unsigned>(m.group.fromFirst(uint64_t(nextCheckpointGeneration(dir))));
  const std::vector<CheckpointTile> tiles = trainingTiles(*m.engine);
  auto entries =
      writeTileFile(dir, tileFileName(generation, m.group.rank()), tiles, m.options.saveType);
  if (!entries)
    return entries.takeError();
  for (const CheckpointTile &t : tiles)
    report.bytes += static_cast<int64_t>(t.data.size()) * storedTypeBytes(m.options.saveType);
  report.bytes = m.group.sum(report.bytes);
  std::vector<std::string> parts = m.group.gatherOnFirst(encodeTileEntries(*entries));
  if (m.group.rank() == 0) {
    std::vector<TileEntry> all;
    for (const std::string &part : parts) {
      auto decoded = decodeTileEntries(part);
      if (!decoded)
        return decoded.takeError();
      all.insert(all.end(), decoded->begin(), decoded->end());
    }
    if (llvm::Error e = writeCheckpointIndex(dir, generation, all, metadata))
      return std::move(e);
    std::set<std::string> tensors;
    for (const TileEntry &e : all)
      tensors.insert(e.tensor);
    report.tensors = tensors.size();
    report.tiles = all.size();
    report.path = checkpointIndexFile(dir);
  }
  m.group.barrier(); // the checkpoint is whole when any process goes on
  return report;
}

llvm::Expected<std::unique_ptr<Engine>> Trainer::Impl::referenceReady(const EngineOptions &with,
                                                                      const std::string &what) {
  if (!options.referenceExec || !options.referenceMemory)
    return stringError("verify: no unpartitioned plan (TrainerOptions::referenceExec)");
  auto ref = factory(p, *options.referenceExec, *options.referenceMemory, with, /*local=*/true);
  if (!ref)
    return stringError(what + ": " + llvm::toString(ref.takeError()));
  setValues(**ref, *data, data->tensors(), 0);
  if (resumed)
    if (llvm::Error e = restore(**ref, *resumed, /*forwardOnly=*/false, options.names))
      return std::move(e);
  setBatch(**ref, stepsBefore);
  return ref;
}

llvm::Expected<VerifyReport> Trainer::verify(double tolerance) {
  Impl &m = *impl_;
  VerifyRuns runs;
  runs.library = m.options.engine.library;
  runs.reference = [&m](bool library, const std::string &what) {
    EngineOptions with = m.options.engine;
    with.library = library;
    return m.referenceReady(with, what);
  };
  if (m.options.plainProblem && m.options.plainExec && m.options.plainMemory) {
    runs.plain = m.options.plainProblem;
    runs.plainEngine = [&m] {
      return m.factory(*m.options.plainProblem, *m.options.plainExec, *m.options.plainMemory,
                       m.options.engine, /*local=*/true);
    };
  }
  return verifyFirstStep(m.p, *m.engine, m.first, tolerance, m.group, runs);
}

ProcessMemory Trainer::processMemory() {
  Impl &m = *impl_;
  ProcessMemory pm;
  if (!m.group.distributed())
    return pm;
  // What each process allocated for its worker's arena, and what the engine and the steps
  // (not verify()'s reference, which runs after) added to its resident memory at their
  // peak: the arena, the kernels, the local tiles of inputs, the transport's buffers.
  pm.verifyCopies = m.group.allGather(m.first.bytes());
  pm.arena = m.group.allGather(m.engine->backendStats().arenaBytes.at(m.group.rank()));
  pm.residentBefore = m.group.allGather(m.residentBefore);
  pm.residentPeak = m.group.allGather(peakResidentBytes());
  return pm;
}

Optimizer Trainer::optimizer() const { return impl_->options.optimizer; }
double Trainer::lr() const { return impl_->lr; }
const TrainingHyper &Trainer::hyper() const { return impl_->hyper; }
unsigned Trainer::steps() const { return impl_->steps; }
unsigned Trainer::stepsBefore() const { return impl_->stepsBefore; }
const CheckpointReader *Trainer::resumed() const {
  return impl_->resumed ? &*impl_->resumed : nullptr;
}
const DataSet *Trainer::dataSet() const { return impl_->ds ? &*impl_->ds : nullptr; }
const std::vector<DataBinding> &Trainer::bindings() const { return impl_->bindings; }
int64_t Trainer::dataBatch() const { return impl_->dataBatch; }
int64_t Trainer::stepsPerEpoch() const { return impl_->stepsPerEpoch; }
const DataSet *Trainer::evalDataSet() const { return impl_->evalDs ? &*impl_->evalDs : nullptr; }
Engine &Trainer::engine() { return *impl_->engine; }
const Engine &Trainer::engine() const { return *impl_->engine; }
const Engine *Trainer::evalEngine() const { return impl_->evalEngine.get(); }
double Trainer::buildSeconds() const { return impl_->buildSeconds; }
const std::vector<double> &Trainer::losses() const { return impl_->losses; }
const std::vector<double> &Trainer::stepSeconds() const { return impl_->stepSeconds; }
int64_t Trainer::bytesMoved() const { return impl_->moved; }
const std::vector<EvalRecord> &Trainer::evaluations() const { return impl_->evals; }
double Trainer::dataWaitSeconds() const {
  return impl_->prefetch ? impl_->prefetch->waitSeconds() : 0.0;
}
double Trainer::dataAssembleSeconds() const {
  return impl_->prefetch ? impl_->prefetch->assembleSeconds() : 0.0;
}

} // namespace tofu
