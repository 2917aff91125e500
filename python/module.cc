// The native part of the `tofu` Python module (python/tofu/__init__.py): the pipeline
// tofu-plan runs (planner/pipeline.h), its documents (tofu_plan/report.h) and each worker's
// tiles, through the libraries the tools link. No tool is run. Errors are Python exceptions
// of tofu's kinds, made at import (set_errors), with the tools' messages.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "analysis/checked.h"
#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "codegen/program_builder.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/library.h"
#include "graph/training.h"
#include "planner/explain.h"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "planner/stages.h"
#include "planner/step_time.h"
#include "planner/topology.h"
#include "python/native.h"
#include "runtime/backend_registry.h"
#include "search/report.h"
#include "support/errors.h"
#include "support/units.h"
#include "support/version.h"
#include "tofu_plan/document.h"
#include "llvm/Support/raw_ostream.h"

namespace tofupy {
namespace {

/// tofu's exception types (python/tofu/errors.py), given at import.
struct ErrorTypes {
  py::object usage, model, plan, data, base;
};
ErrorTypes &errorTypes() {
  static ErrorTypes *types = new ErrorTypes(); // never destroyed: outlives the interpreter
  return *types;
}

/// Raises `type` (tofu.UsageError, ...) with `message`.
[[noreturn]] void raise(const py::object &type, const std::string &message) {
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

} // namespace

Failure failure(llvm::Error e, Failure::Kind kind) {
  const bool usage = e.isA<tofu::UsageError>();
  return {usage ? Failure::Usage : kind, llvm::toString(std::move(e))};
}

[[noreturn]] void raise(const Failure &f) {
  const ErrorTypes &t = errorTypes();
  raise(f.kind == Failure::Usage   ? t.usage
        : f.kind == Failure::Model ? t.model
        : f.kind == Failure::Data  ? t.data
        : f.kind == Failure::Plan  ? t.plan
                                   : t.base,
        f.message);
}

// The operator libraries loaded, by directory: loading and checking one takes a while, and a
// session plans many graphs.
const tofu::OpLibrary *library(const std::string &dir, Failure &failed) {
  static std::mutex mutex;
  static auto *loaded = new std::map<std::string, std::unique_ptr<tofu::OpLibrary>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto at = loaded->find(dir);
  if (at != loaded->end())
    return at->second.get();
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load(dir, diags);
  if (!lib) {
    std::string printed;
    llvm::raw_string_ostream os(printed);
    diags.print(os);
    os.flush();
    failed = {Failure::Usage, printed + "cannot load the operator library " + dir + ": " +
                                  llvm::toString(lib.takeError())};
    return nullptr;
  }
  return loaded->emplace(dir, std::make_unique<tofu::OpLibrary>(std::move(*lib)))
      .first->second.get();
}

tofu::GraphSource graphSource(const PlanArgs &a) {
  tofu::GraphSource source;
  source.model = a.model;
  source.onnxFile = a.onnxPath.empty() ? a.name : a.onnxPath;
  source.onnxBytes = std::string(a.onnxBytes);
  source.batch = a.batch > 0 ? a.batch : a.model.empty() ? 1 : 32;
  source.batchGiven = a.batch > 0;
  return source;
}

std::optional<Failure> runModel(const PlanArgs &a, const tofu::PipelineOptions &options,
                                const tofu::OpLibrary *&lib,
                                std::optional<tofu::PipelineResult> &result) {
  auto ops = tofu::findOpsDir(a.opsDir, !a.opsDir.empty(), a.anchor, "ops_dir");
  if (!ops)
    return failure(ops.takeError(), Failure::Usage);
  Failure f;
  if (!(lib = library(*ops, f)))
    return f;
  tofu::Stage stage = tofu::Stage::Graph;
  tofu::PipelineOptions o = options;
  if (const std::string micro(a.microOnnxBytes);
      !micro.empty() && options.stages.microbatches > 1) {
    tofu::GraphSource source = graphSource(a);
    source.onnxBytes = micro;
    std::string name;
    auto g = tofu::loadGraph(source, *lib, &name);
    if (!g)
      return failure(tofu::stringError("the module at the microbatch's batch: " +
                                       llvm::toString(g.takeError())),
                     Failure::Model);
    o.microbatchModel = std::make_shared<const tofu::Graph>(std::move(*g));
  }
  auto r = tofu::runPipeline(graphSource(a), *lib, o, &stage);
  if (!r)
    return failure(r.takeError(), stage <= tofu::Stage::Problem ? Failure::Model : Failure::Plan);
  result = std::move(*r);
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<tofu::Engine>>
makeEngine(const std::string &backend, tofu::ProcessGroup &group, const tofu::Problem &p,
           const tofu::ExecPlan &plan, const tofu::MemoryPlan &memory,
           const tofu::EngineOptions &options, bool local) {
  auto program = tofu::buildProgram(p, plan, memory);
  if (!program)
    return program.takeError();
  return tofu::findBackend(backend)->make(std::move(*program), options, {}, group, local);
}

namespace {

/// A plan, kept whole: its documents are made as asked.
class PlanHandle {
public:
  tofu::PipelineResult result;
  tofuplan::DocumentOptions document;
  /// What planned it, for explain(): the runner-ups are planned from the same.
  tofu::GraphSource source;
  tofu::PipelineOptions options;
  const tofu::OpLibrary *lib = nullptr;
  std::optional<tofu::Explanation> explanation;

  /// tofu-plan --explain's section as text, or as its JSON; the runner-ups are planned on
  /// the first call.
  std::string explain(bool json) {
    if (!explanation) {
      std::optional<llvm::Expected<tofu::Explanation>> x;
      {
        py::gil_scoped_release unlocked; // each runner-up is a plan of its own
        x.emplace(tofu::explainPlan(source, *lib, options, result));
      }
      if (!*x)
        raise(failure(x->takeError(), Failure::Plan));
      explanation = std::move(**x);
    }
    const tofuplan::Section s = tofuplan::explainSection(*explanation, document.device.name);
    return json ? s.json.dump(1) : s.text;
  }

  /// tofu-plan's text (summary: --summary's) or --format=json's document.
  std::string text(bool json, bool summary) const {
    tofuplan::DocumentOptions o = document;
    o.json = json;
    o.summary = summary;
    auto doc = tofuplan::planDocument(result, o);
    if (!doc)
      raise(failure(doc.takeError(), Failure::Plan));
    return *doc;
  }

  /// tofu-plan --svg's drawing of the weights' and activations' tiles.
  std::string svg() const {
    if (result.staged)
      raise(
          Failure{Failure::Usage, "svg draws one partition's tiles; a pipeline has one per stage"});
    return tofu::planSvg(*result.problem, result.plan, document.title);
  }

  /// Per worker, the tile of tensor `name` as [lo, hi) per dimension; an unknown name is
  /// a KeyError.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> tiles(const std::string &name) {
    const tofu::Problem &p = *result.problem;
    int t = -1;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == name)
        t = static_cast<int>(i);
    if (t < 0)
      throw py::key_error(fmt::format("no tensor '{}' in the planned graph", name));
    const tofu::ExecPlan &e = exec();
    std::vector<std::vector<std::pair<int64_t, int64_t>>> out;
    for (const std::vector<tofu::Box> &worker : e.tiles) {
      std::vector<std::pair<int64_t, int64_t>> box;
      for (const tofu::Range &r : worker[static_cast<size_t>(t)])
        box.push_back({r.lo, r.hi});
      out.push_back(std::move(box));
    }
    return out;
  }

  /// The memory planner's peak per worker (the arena: tiles, fetched inputs, partials).
  std::vector<int64_t> peaks() {
    if (!result.memory.workers.empty())
      return peaksOf(result.memory);
    if (!memory_)
      memory_ = tofu::planMemory(*result.problem, exec(), result.graph.outputs);
    return peaksOf(*memory_);
  }

private:
  std::optional<tofu::ExecPlan> exec_;
  std::optional<tofu::MemoryPlan> memory_;

  const tofu::ExecPlan &exec() {
    if (!result.exec.nodes.empty())
      return result.exec;
    if (!exec_)
      exec_ = tofu::buildExecPlan(*result.problem, result.plan);
    return *exec_;
  }
  static std::vector<int64_t> peaksOf(const tofu::MemoryPlan &m) {
    std::vector<int64_t> out;
    for (const tofu::WorkerMemory &w : m.workers)
      out.push_back(w.peak);
    return out;
  }
};

} // namespace

std::optional<Failure> pipelineOptions(const PlanArgs &a, tofu::PipelineOptions &o,
                                       std::optional<tofu::Topology> &topology,
                                       std::optional<int64_t> &budget) {
  auto usage = [](std::string m) { return Failure{Failure::Usage, std::move(m)}; };
  const tofu::SettingNames names;
  if (a.train) {
    auto opt = tofu::optimizerNamed(a.optimizer);
    if (!opt)
      return usage(fmt::format("optimizer '{}': not one of sgd, momentum, nesterov, adam, adamw",
                               a.optimizer));
    o.train = *opt;
  }
  auto precision = tofu::precisionNamed(a.precision);
  if (!precision)
    return usage(fmt::format("precision '{}': not fp32 or bf16", a.precision));
  o.precision = *precision;
  auto objective = tofu::objectiveNamed(a.objective);
  if (!objective)
    return usage(fmt::format("objective '{}': not time or bytes", a.objective));
  o.objective = *objective;
  o.until = tofu::Stage::Plan;
  if (a.workers == 0 || a.workers > tofu::kMaxWorkers)
    return usage(fmt::format("workers must be 1 to {}", tofu::kMaxWorkers));
  o.search.workers = a.workers;
  if (!a.topology.empty()) {
    auto t = tofu::parseTopology(a.topology);
    if (!t)
      return usage("topology: " + llvm::toString(t.takeError()));
    if (t->workers() != a.workers)
      return usage(fmt::format("workers={} but the topology '{}' has {} workers", a.workers,
                               a.topology, t->workers()));
    topology = std::move(*t);
    o.machine = topology;
  }
  tofu::AlgorithmChoice choice;
  auto algorithm = tofu::parseAlgorithm(a.algorithm);
  if (!algorithm)
    return usage(fmt::format("algorithm '{}': not one of {}", a.algorithm, tofu::algorithmNames()));
  if (*algorithm == tofu::Algorithm::SmallBatch || *algorithm == tofu::Algorithm::Swap)
    return usage(fmt::format("algorithm '{}' is an estimate of one worker, not a plan: "
                             "tofu-plan --algo {} gives it",
                             a.algorithm, a.algorithm));
  choice.algorithm = *algorithm;
  choice.algorithmGiven = a.algorithm != "tofu";
  choice.megatron = a.megatron;
  if (!a.stages.empty())
    if (llvm::Error e = tofu::parseStages(a.stages, o.stages))
      return usage("stages '" + a.stages + "': " + llvm::toString(std::move(e)));
  choice.stagesGiven = !a.stages.empty();
  if (a.microbatches > 0)
    o.stages.microbatches = a.microbatches;
  choice.microbatchesGiven = a.microbatches > 0;
  if (!a.schedule.empty()) {
    auto s = tofu::scheduleNamed(a.schedule);
    if (!s)
      return usage(fmt::format("schedule '{}': not gpipe or 1f1b", a.schedule));
    o.stages.schedule = *s;
  }
  if (llvm::Error e = tofu::applyAlgorithmChoice(choice, o.search, &o.stages, names))
    return failure(std::move(e), Failure::Usage);
  if (!a.memoryPerWorker.empty()) {
    auto bytes = tofu::parseBytes(a.memoryPerWorker);
    if (!bytes)
      return usage("memory_per_worker: " + llvm::toString(bytes.takeError()));
    budget = *bytes;
    o.memoryPerWorker = *bytes;
  }
  // Recomputation: auto by default under a budget, of a training step (tofu-plan's rule).
  std::optional<tofu::RecomputeMode> recompute;
  if (budget && a.train)
    recompute = tofu::RecomputeMode::Auto;
  if (!a.recompute.empty()) {
    auto m = tofu::recomputeModeNamed(a.recompute);
    if (!m)
      return usage(fmt::format("recompute '{}': not auto, sqrt or none", a.recompute));
    if (*m != tofu::RecomputeMode::None && !a.train)
      return usage("recompute applies to a training step (what its backward pass reads): "
                   "give train=True");
    if (*m == tofu::RecomputeMode::Auto && !budget)
      return usage("recompute='auto' recomputes what a memory budget needs: give "
                   "memory_per_worker (or recompute='sqrt')");
    recompute = *m;
  }
  if (recompute && *recompute != tofu::RecomputeMode::None)
    o.recompute = recompute;
  if (o.recompute && topology && !budget)
    o.until = tofu::Stage::Execution; // tofu-plan's: the machine's plan, its memory planned
  return std::nullopt;
}

namespace {

std::unique_ptr<PlanHandle> plan(const PlanArgs &a) {
  auto handle = std::make_unique<PlanHandle>();
  std::optional<Failure> failed;
  const tofu::GraphSource source = graphSource(a);
  tofu::PipelineOptions options;
  std::optional<tofu::Topology> topology;
  std::optional<int64_t> budget;
  tofu::DeviceModel device;
  failed = pipelineOptions(a, options, topology, budget);
  if (!failed) {
    auto d = tofu::deviceModelNamed(a.device);
    if (!d)
      failed = Failure{Failure::Usage, "device: " + llvm::toString(d.takeError())};
    else
      device = std::move(*d);
  }
  if (failed)
    raise(*failed);
  options.device = device;
  {
    py::gil_scoped_release unlocked; // planning may take minutes: other threads run
    const tofu::OpLibrary *lib = nullptr;
    std::optional<tofu::PipelineResult> r;
    failed = runModel(a, options, lib, r);
    if (r)
      handle->result = std::move(*r);
    handle->source = graphSource(a);
    handle->options = options;
    handle->lib = lib;
  }
  if (failed)
    raise(*failed);
  tofuplan::DocumentOptions &doc = handle->document;
  doc.title = handle->result.name + (a.train ? " training step" : "") +
              (a.model.empty() ? std::string() : fmt::format(" (batch {})", source.batch));
  doc.precision = options.precision;
  doc.budget = budget;
  doc.topology = topology;
  doc.device = device;
  return handle;
}

} // namespace
} // namespace tofupy

PYBIND11_MODULE(_tofu, m) {
  using namespace tofupy;
  m.doc() = "Tofu's native part: python/tofu/__init__.py is its interface.";
  m.def("version", &tofu::tofuVersion);
  m.def(
      "set_errors",
      [](py::object usage, py::object model, py::object plan, py::object data, py::object base) {
        errorTypes() = {std::move(usage), std::move(model), std::move(plan), std::move(data),
                        std::move(base)};
      },
      "The exception types raised for bad usage, a model that fails, a plan that fails, data "
      "that does not fit, and any other failure.");
  py::class_<PlanArgs>(m, "PlanArgs")
      .def(py::init<>())
      .def_readwrite("model", &PlanArgs::model)
      .def_readwrite("onnx_path", &PlanArgs::onnxPath)
      .def_readwrite("onnx_bytes", &PlanArgs::onnxBytes)
      .def_readwrite("micro_onnx_bytes", &PlanArgs::microOnnxBytes)
      .def_readwrite("name", &PlanArgs::name)
      .def_readwrite("batch", &PlanArgs::batch)
      .def_readwrite("workers", &PlanArgs::workers)
      .def_readwrite("train", &PlanArgs::train)
      .def_readwrite("optimizer", &PlanArgs::optimizer)
      .def_readwrite("precision", &PlanArgs::precision)
      .def_readwrite("algorithm", &PlanArgs::algorithm)
      .def_readwrite("megatron", &PlanArgs::megatron)
      .def_readwrite("stages", &PlanArgs::stages)
      .def_readwrite("microbatches", &PlanArgs::microbatches)
      .def_readwrite("schedule", &PlanArgs::schedule)
      .def_readwrite("memory_per_worker", &PlanArgs::memoryPerWorker)
      .def_readwrite("recompute", &PlanArgs::recompute)
      .def_readwrite("topology", &PlanArgs::topology)
      .def_readwrite("device", &PlanArgs::device)
      .def_readwrite("objective", &PlanArgs::objective)
      .def_readwrite("anchor", &PlanArgs::anchor)
      .def_readwrite("ops_dir", &PlanArgs::opsDir);
  py::class_<PlanHandle>(m, "PlanHandle")
      .def("text", &PlanHandle::text, py::arg("json"), py::arg("summary"))
      .def("tiles", &PlanHandle::tiles)
      .def("svg", &PlanHandle::svg)
      .def("explain", &PlanHandle::explain, py::arg("json"))
      .def("peaks", &PlanHandle::peaks, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("loss_note", [](const PlanHandle &h) { return h.result.lossNote; })
      .def_property_readonly("recomputed",
                             [](const PlanHandle &h) { return h.result.recomputed.dropped; })
      .def_property_readonly("megatron_grid", [](const PlanHandle &h) {
        return tofu::megatronGridLines(h.result.megatronGrid, h.document.device.name, "");
      });
  m.def("plan", &plan, py::arg("args"));
  bindTrainer(m);
  bindInfer(m);
}
