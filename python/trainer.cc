// The training half of the native part: tofu.Trainer's plan, engine and trainer
// (runtime/trainer.h, the loop tofu-run drives), fed the batches Python hands over, one a
// step. The steps run without the GIL; each batch, each step's report and the question
// whether to stop (Ctrl-C) take it back briefly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "fmt/format.h"
#include "graph/onnx_import.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "python/native.h"
#include "runtime/backend_registry.h"
#include "runtime/data_feed.h"
#include "runtime/lr_schedule.h"
#include "runtime/process_group.h"
#include "runtime/trainer.h"
#include "support/files.h"
#include "tofu_run/evaluation.h"

namespace tofupy {
namespace {

/// What tofu.Trainer was asked, beside the plan's settings.
struct TrainArgs {
  PlanArgs plan;
  double lr = NAN, momentum = NAN, weightDecay = NAN; ///< NaN: the optimiser's default
  std::string lrSchedule;
  int warmup = -1; ///< -1: none given
  unsigned steps = 1, seed = 1;
  int threadsPerWorker = 0;
  std::string load;            ///< a checkpoint save() wrote, to go on from (empty: none)
  std::string backend = "cpu"; ///< cpu (threads) or mpi (this process one of mpirun's)
};

/// The processes of `backend`: this one alone, or under mpi those mpirun started (MPI
/// initialised on the first call, finalised at exit). Open MPI loads its components with
/// dlopen, and they need libmpi's symbols global: an extension module's libraries are
/// loaded local, so libmpi is made global first.
std::optional<Failure> processGroup(const std::string &backend, unsigned workers,
                                    tofu::ProcessGroup *&group) {
  const tofu::BackendEntry *entry = tofu::findBackend(backend);
  if (!entry || entry->gpu)
    return Failure{Failure::Usage,
                   fmt::format("backend '{}': not cpu (threads of this process) or mpi (one "
                               "process per worker, under mpirun)",
                               backend)};
  group = &tofu::localProcessGroup();
  if (!entry->processes)
    return std::nullopt;
  if (!dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
    return Failure{Failure::Usage, std::string("backend 'mpi': libmpi.so.40 (Open MPI 4) is not "
                                               "loaded: ") +
                                       dlerror()};
  static int argc = 1;
  static char name[] = "python3";
  static char *args[] = {name, nullptr};
  static char **argv = args;
  group = &entry->processes(argc, argv);
  if (workers != static_cast<unsigned>(group->size()))
    return Failure{Failure::Usage,
                   fmt::format("workers={} but mpirun started {} processes: one process runs "
                               "each worker (mpirun -np {})",
                               workers, group->size(), workers)};
  return std::nullopt;
}

/// A batch (name -> array) as a data set of its samples.
std::optional<Failure> batchOf(const py::dict &arrays, tofu::DataSet &out) {
  out.description = "batches from Python";
  for (auto [key, value] : arrays) {
    const std::string name = py::str(key);
    tofu::DataArray a;
    if (auto f = arrayOf(name, py::array::ensure(value), a))
      return f;
    if (!out.arrays.empty() && a.samples() != out.samples)
      return Failure{Failure::Data,
                     fmt::format("batch arrays '{}' and '{}' hold {} and {} samples", name,
                                 out.arrays.front().first, a.samples(), out.samples)};
    out.samples = a.samples();
    out.arrays.emplace_back(name, std::move(a));
  }
  if (out.arrays.empty())
    return Failure{Failure::Data, "a batch with no arrays"};
  return std::nullopt;
}

/// Ctrl-C while the steps run. Python raises KeyboardInterrupt at whichever bytecode runs next,
/// and that may be inside a conversion that pybind11 tries and clears (a batch's arrays): the
/// interrupt was then lost and training went on. So, while Python's own handler is SIGINT's,
/// train() catches the signal itself: the first stops the run after the step it is in, and is
/// handed back to Python once the steps end (PyErr_SetInterrupt: its handler, KeyboardInterrupt
/// raised there and then); a second goes to Python's handler at once.
class InterruptGuard {
public:
  InterruptGuard() {
    py::object signal = py::module_::import("signal");
    if (!signal.attr("getsignal")(SIGINT).is(signal.attr("default_int_handler")))
      return; // someone else's handler, or Ctrl-C ignored: theirs to act on
    struct sigaction mine {};
    mine.sa_handler = &InterruptGuard::caught;
    sigemptyset(&mine.sa_mask);
    requested.store(false);
    installed_ = sigaction(SIGINT, &mine, &previous) == 0;
  }
  ~InterruptGuard() { restore(); }
  InterruptGuard(const InterruptGuard &) = delete;
  InterruptGuard &operator=(const InterruptGuard &) = delete;
  /// Puts Python's handler back and, where Ctrl-C came, runs it (with the GIL held): raises
  /// what it raises.
  void handBack() {
    restore();
    if (requested.exchange(false)) {
      PyErr_SetInterrupt();
      if (PyErr_CheckSignals() != 0)
        throw py::error_already_set();
    }
  }
  static bool stopRequested() { return requested.load(); }

private:
  static inline std::atomic<bool> requested{false};
  static inline struct sigaction previous {};
  bool installed_ = false;
  static void caught(int signo) {
    if (!requested.exchange(true))
      return;
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN)
      previous.sa_handler(signo); // (Python's handler only marks the signal: safe here)
  }
  void restore() {
    if (installed_)
      sigaction(SIGINT, &previous, nullptr);
    installed_ = false;
  }
};

/// Each step reported to Python, and Python asked whether to stop, with the GIL held.
class Observer : public tofu::TrainerObserver {
public:
  explicit Observer(py::object onStep) : onStep_(std::move(onStep)) {}
  std::optional<py::error_already_set> error; ///< what Python raised (Ctrl-C included)

  void stepped(const tofu::StepRecord &r) override {
    py::gil_scoped_acquire held;
    try {
      stop_ = py::cast<bool>(onStep_(r.index, r.done, r.loss, r.seconds));
    } catch (py::error_already_set &e) {
      error.emplace(std::move(e));
      stop_ = true;
    }
  }
  bool stopRequested() override { return stop_ || InterruptGuard::stopRequested(); }

private:
  py::object onStep_;
  bool stop_ = false;
};

class TrainerHandle {
public:
  tofu::PipelineResult result;
  std::optional<tofurun::EvalSetup> eval; ///< the forward graph evaluate() scores with
  tofu::EvalGraph evalGraph;
  std::optional<tofu::EnginePlan> planned;
  std::unique_ptr<tofu::Trainer> trainer;
  py::object nextBatch; ///< step -> {name: array}
  std::string onnx;     ///< the module's export, which save_onnx() writes with trained values
  tofu::ProcessGroup *group = nullptr;
  std::string backend;
  std::optional<py::error_already_set> batchError;
  bool trained = false;

  /// Runs the steps; `onStep(index, done, loss, seconds)` returns whether to stop.
  void train(py::object onStep) {
    if (trained)
      raise(Failure{Failure::Usage, "this trainer has run its steps: fit() once per Trainer "
                                    "(a new Trainer can load() what save() wrote)"});
    trained = true;
    Observer observer(std::move(onStep));
    llvm::Error e = llvm::Error::success();
    InterruptGuard interrupts;
    {
      py::gil_scoped_release unlocked;
      e = trainer->train(observer);
    }
    try {
      interrupts.handBack();
    } catch (py::error_already_set &) {
      llvm::consumeError(std::move(e));
      throw;
    }
    if (batchError) {
      llvm::consumeError(std::move(e));
      throw std::move(*batchError);
    }
    if (observer.error) {
      llvm::consumeError(std::move(e));
      throw std::move(*observer.error);
    }
    if (e) { // the batches' checks are bad usage of the data; a non-finite loss is neither
      const bool data = e.isA<tofu::UsageError>();
      raise(Failure{data ? Failure::Data : Failure::Other, llvm::toString(std::move(e))});
    }
  }

  /// Every weight and state tensor, whole, as float32 arrays.
  py::dict state() {
    std::map<std::string, tofu::Tensor> whole;
    {
      py::gil_scoped_release unlocked;
      whole = trainer->wholeState();
    }
    py::dict out;
    for (const auto &[name, t] : whole)
      out[py::str(name)] = numpyOf(t);
    return out;
  }

  /// The trained state scored on held-out `arrays` (as a batch's: "input", "labels"):
  /// {loss, accuracy, samples, seconds}.
  py::dict evaluate(py::dict arrays) {
    if (!eval)
      raise(Failure{Failure::Usage,
                    "evaluate scores a classifier: a model whose one output is [batch, classes] "
                    "logits"});
    tofu::DataSet held;
    if (auto f = batchOf(arrays, held))
      raise(*f);
    held.description = "held-out data from Python";
    llvm::Expected<tofu::EvalRecord> r = tofu::EvalRecord();
    {
      py::gil_scoped_release unlocked;
      r = trainer->evaluateOn(held, "data");
    }
    if (!r)
      raise(failure(r.takeError(), Failure::Data));
    py::dict out;
    out["loss"] = r->score.loss();
    out["accuracy"] = r->score.accuracy();
    out["samples"] = r->samples;
    out["seconds"] = r->seconds;
    out["step"] = r->step;
    return out;
  }

  /// The exported model with every trained initializer's values (tofu-run --save-onnx).
  py::dict saveOnnx(const std::string &path) {
    std::optional<Failure> failed;
    tofu::OnnxSaveReport report;
    {
      py::gil_scoped_release unlocked;
      const std::map<std::string, tofu::Tensor> state = trainer->wholeState();
      // saveOnnxWithValues reads a file: the export, written beside the output first.
      const std::string in = path + ".export.tmp";
      if (llvm::Error e = tofu::writeFileAtomically(in, onnx, "the module's export")) {
        failed = failure(std::move(e), Failure::Usage);
      } else {
        auto wrote = tofu::saveOnnxWithValues(in, path, state);
        std::remove(in.c_str());
        if (!wrote)
          failed = failure(wrote.takeError(), Failure::Usage);
        else
          report = *wrote;
      }
    }
    if (failed)
      raise(*failed);
    py::dict out;
    out["path"] = path;
    out["initializers"] = report.replaced;
    out["bytes"] = report.bytes;
    return out;
  }

  py::dict save(const std::string &dir) {
    auto r = trainer->save(dir);
    if (!r)
      raise(failure(r.takeError(), Failure::Usage));
    py::dict out;
    out["path"] = r->path;
    out["tensors"] = r->tensors;
    out["steps_trained"] = r->stepsTrained;
    return out;
  }
};

std::unique_ptr<TrainerHandle> makeTrainer(const TrainArgs &a, py::dict first, py::object next) {
  auto handle = std::make_unique<TrainerHandle>();
  handle->nextBatch = std::move(next);
  handle->onnx = std::string(a.plan.onnxBytes);
  tofu::PipelineOptions options;
  std::optional<tofu::Topology> topology;
  std::optional<int64_t> budget;
  if (auto f = pipelineOptions(a.plan, options, topology, budget))
    raise(*f);
  if (auto f = processGroup(a.backend, a.plan.workers, handle->group))
    raise(*f);
  handle->backend = a.backend;
  options.until = tofu::Stage::Execution;
  auto data = std::make_shared<tofu::DataSet>();
  if (auto f = batchOf(first, *data))
    raise(*f);
  tofu::TrainerOptions t;
  t.name = a.plan.name;
  t.optimizer = *options.train;
  auto given = [](double x) { return std::isnan(x) ? std::nullopt : std::optional<double>(x); };
  t.lr = given(a.lr);
  t.momentum = given(a.momentum);
  t.weightDecay = given(a.weightDecay);
  if (!a.lrSchedule.empty()) {
    auto s = tofu::parseLrSchedule(a.lrSchedule, t.names);
    if (!s)
      raise(failure(s.takeError(), Failure::Usage));
    t.lrSchedule = *s;
  }
  if (a.warmup >= 0)
    t.warmup = static_cast<unsigned>(a.warmup);
  t.steps = a.steps;
  t.seed = a.seed;
  t.loadDir = a.load;
  t.shuffle = false;
  t.data = data->description;
  t.dataSet = data;
  TrainerHandle *h = handle.get();
  t.batches = [h](unsigned step) -> llvm::Expected<std::shared_ptr<const tofu::DataSet>> {
    py::gil_scoped_acquire held;
    auto batch = std::make_shared<tofu::DataSet>();
    try {
      py::dict arrays = h->nextBatch(step);
      if (auto f = batchOf(arrays, *batch))
        return tofu::usageError(f->message);
    } catch (py::error_already_set &e) {
      h->batchError.emplace(std::move(e));
      return tofu::usageError("the data raised an exception");
    }
    return std::shared_ptr<const tofu::DataSet>(std::move(batch));
  };
  t.engine.threadsPerWorker = a.threadsPerWorker;
  t.workers = static_cast<int>(a.plan.workers);
  std::optional<Failure> failed;
  {
    py::gil_scoped_release unlocked;
    const tofu::OpLibrary *lib = nullptr;
    std::optional<tofu::PipelineResult> piped;
    failed = runModel(a.plan, options, lib, piped);
    if (piped)
      handle->result = std::move(*piped);
    if (!failed) {
      tofu::PipelineResult &r = handle->result;
      auto p = tofu::planForEngine(*r.problem, r.exec, r.memory, r.graph.outputs, true);
      if (!p)
        failed = failure(p.takeError(), Failure::Plan);
      else
        handle->planned = std::move(*p);
    }
    if (!failed) { // the forward graph evaluate() scores with, where the model is a classifier
      tofu::PipelineResult &r = handle->result;
      // (A pipeline's forward graph is searched over the same workers: tofu_run/evaluation.h.)
      tofu::PlanOptions evalSearch;
      evalSearch.workers = options.search.workers;
      auto e = tofurun::evaluationSetup(
          graphSource(a.plan), *lib, *r.problem, r.plan, options.precision, tofu::EvalNorm::Running,
          "", a.plan.name, tofu::SettingNames(), nullptr, r.staged ? &evalSearch : nullptr);
      if (e) {
        handle->eval = std::move(*e);
        tofu::EvalGraph &g = handle->evalGraph;
        g.problem = &*handle->eval->forward.problem;
        g.exec = &handle->eval->forward.exec;
        g.memory = &handle->eval->forward.memory;
        g.outputs = handle->eval->forward.graph.outputs;
        g.logits = handle->eval->logits;
        t.evalGraph = &g;
      } else if (e.errorIsA<tofu::UsageError>()) {
        llvm::consumeError(e.takeError()); // not a classifier: evaluate() says so
      } else {
        failed = failure(e.takeError(), Failure::Plan);
      }
    }
    if (!failed) { // the first batch against the inputs, as the trainer binds it
      tofu::PipelineResult &r = handle->result;
      auto bound = tofu::bindDataSet(*r.problem, r.loss, *data, "", r.graph.constants,
                                     r.graph.initialValues, r.graph.randomInputs);
      if (!bound)
        failed = Failure{Failure::Data,
                         fmt::format("{}: {}", a.plan.name, llvm::toString(bound.takeError()))};
    }
    if (!failed) {
      tofu::PipelineResult &r = handle->result;
      auto made = tofu::Trainer::create(
          *r.problem, r.graph, r.loss, *handle->planned, t,
          [h = handle.get()](const tofu::Problem &pp, const tofu::ExecPlan &plan,
                             const tofu::MemoryPlan &m, const tofu::EngineOptions &o, bool local) {
            return makeEngine(h->backend, *h->group, pp, plan, m, o, local);
          },
          *handle->group);
      if (!made)
        failed = failure(made.takeError(), Failure::Data);
      else
        handle->trainer = std::move(*made);
    }
  }
  if (handle->batchError)
    throw std::move(*handle->batchError);
  if (failed)
    raise(*failed);
  return handle;
}

} // namespace

std::optional<Failure> arrayOf(const std::string &name, const py::array &given,
                               tofu::DataArray &out) {
  py::array a = py::array::ensure(given, py::array::c_style);
  if (!a)
    return Failure{Failure::Data, fmt::format("batch array '{}' is not an array", name)};
  const char kind = a.dtype().kind();
  const auto size = a.dtype().itemsize();
  using T = tofu::ElementType;
  std::optional<T> type;
  if (kind == 'f' && size == 4)
    type = T::Float32;
  else if (kind == 'f' && size == 8)
    type = T::Float64;
  else if (kind == 'i')
    type = size == 1 ? T::Int8 : size == 2 ? T::Int16 : size == 4 ? T::Int32 : T::Int64;
  else if ((kind == 'u' && size == 1) || kind == 'b')
    type = T::UInt8;
  if (!type || (kind == 'i' && size != 1 && size != 2 && size != 4 && size != 8))
    return Failure{Failure::Data,
                   fmt::format("batch array '{}' has dtype {}, which tofu does not feed (float32, "
                               "float64, int8 to int64, uint8, bool)",
                               name, std::string(py::str(a.dtype())))};
  if (a.ndim() < 1)
    return Failure{Failure::Data,
                   fmt::format("batch array '{}' is a scalar: its first dimension counts the "
                               "batch's samples",
                               name)};
  out.path = name;
  out.type = *type;
  out.shape.assign(a.shape(), a.shape() + a.ndim());
  const auto *bytes = static_cast<const unsigned char *>(a.data());
  out.bytes.assign(bytes, bytes + a.nbytes());
  return std::nullopt;
}

py::array_t<float> numpyOf(const tofu::Tensor &t) {
  py::array_t<float> a(t.shape);
  float *to = a.mutable_data();
  for (size_t i = 0; i < t.data.size(); ++i)
    to[i] = static_cast<float>(t.data[i]);
  return a;
}

void bindTrainer(py::module_ &m) {
  py::class_<TrainArgs>(m, "TrainArgs")
      .def(py::init<>())
      .def_readwrite("plan", &TrainArgs::plan)
      .def_readwrite("lr", &TrainArgs::lr)
      .def_readwrite("momentum", &TrainArgs::momentum)
      .def_readwrite("weight_decay", &TrainArgs::weightDecay)
      .def_readwrite("lr_schedule", &TrainArgs::lrSchedule)
      .def_readwrite("warmup", &TrainArgs::warmup)
      .def_readwrite("steps", &TrainArgs::steps)
      .def_readwrite("seed", &TrainArgs::seed)
      .def_readwrite("threads_per_worker", &TrainArgs::threadsPerWorker)
      .def_readwrite("load", &TrainArgs::load)
      .def_readwrite("backend", &TrainArgs::backend);
  py::class_<TrainerHandle>(m, "TrainerHandle")
      .def("train", &TrainerHandle::train, py::arg("on_step"))
      .def("state", &TrainerHandle::state)
      .def("save", &TrainerHandle::save, py::arg("dir"))
      .def("evaluate", &TrainerHandle::evaluate, py::arg("arrays"))
      .def("save_onnx", &TrainerHandle::saveOnnx, py::arg("path"))
      .def_property_readonly("rank", [](const TrainerHandle &h) { return h.group->rank(); })
      .def_property_readonly("processes", [](const TrainerHandle &h) { return h.group->size(); })
      .def_property_readonly("steps_before",
                             [](const TrainerHandle &h) { return h.trainer->stepsBefore(); })
      .def_property_readonly("losses", [](const TrainerHandle &h) { return h.trainer->losses(); })
      .def_property_readonly("step_seconds",
                             [](const TrainerHandle &h) { return h.trainer->stepSeconds(); })
      .def_property_readonly("batch", [](const TrainerHandle &h) { return h.trainer->dataBatch(); })
      .def_property_readonly("lr", [](const TrainerHandle &h) { return h.trainer->lr(); })
      .def_property_readonly("build_seconds",
                             [](const TrainerHandle &h) { return h.trainer->buildSeconds(); });
  m.def("make_trainer", &makeTrainer, py::arg("args"), py::arg("first"), py::arg("next_batch"));
}

} // namespace tofupy
