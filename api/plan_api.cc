// libtofu_plan's C++ API (include/tofu/plan.h) over the pipeline (planner/pipeline.h).
#include "tofu/plan.h"

#include <dlfcn.h>

#include <limits>
#include <optional>
#include <set>

#include "api/api_internal.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/library.h"
#include "graph/onnx_import.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "planner/memory_fit.h"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "planner/step_time.h"
#include "search/report.h"
#include "support/version.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {
namespace api {

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// A declared tensor's element type, named `dtype`, and its shape: positive extents whose
/// product, in bytes, fits int64.
Result<ElementType> checkDeclared(const std::string &name, const std::vector<int64_t> &shape,
                                  const std::string &dtype) {
  if (name.empty())
    return Status::error("a tensor needs a name");
  const std::optional<ElementType> type = elementTypeNamed(dtype);
  if (!type)
    return Status::error("tensor '" + name + "': unknown dtype '" + dtype + "' (one of " +
                         elementTypeNames() + ")");
  int64_t bytes = elementTypeBytes(*type);
  for (int64_t e : shape) {
    if (e <= 0)
      return Status::error("tensor '" + name + "' has a non-positive extent in " +
                           shapeText(shape));
    if (bytes > std::numeric_limits<int64_t>::max() / e)
      return Status::error("tensor '" + name + "' of shape " + shapeText(shape) +
                           " has more bytes than a 64-bit count holds");
    bytes *= e;
  }
  return *type;
}

Status fromError(llvm::Error e) {
  if (!e)
    return Status();
  return Status::error(llvm::toString(std::move(e)), ErrorKind::Graph);
}

std::string anchorFile() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&tofu_version), &info) && info.dli_fname)
    return info.dli_fname;
  return "";
}

} // namespace

std::string version() { return tofuVersion(); }

// --- Graph -------------------------------------------------------------------------------

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::Graph(const Graph &other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Graph &Graph::operator=(const Graph &other) {
  if (this != &other)
    impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Graph::Graph(Graph &&other) noexcept : impl_(std::move(other.impl_)) {
  other.impl_ = std::make_unique<Impl>();
}
Graph &Graph::operator=(Graph &&other) noexcept {
  std::swap(impl_, other.impl_);
  return *this;
}
Graph::~Graph() = default;

namespace {

Status declare(::tofu::Graph &g, const std::string &name, const std::vector<int64_t> &shape,
               const std::string &dtype, TensorRole role) {
  auto type = checkDeclared(name, shape, dtype);
  if (!type)
    return type.status();
  TensorInfo t;
  t.name = name;
  t.group = name;
  t.shape = shape;
  t.shapeKnown = true;
  t.dtype = *type;
  t.role = role;
  return fromError(g.addTensor(std::move(t)));
}

} // namespace

Status Graph::addInput(const std::string &name, const std::vector<int64_t> &shape,
                       const std::string &dtype) {
  return declare(impl_->graph, name, shape, dtype, TensorRole::Input);
}

Status Graph::addWeight(const std::string &name, const std::vector<int64_t> &shape,
                        const std::string &dtype) {
  return declare(impl_->graph, name, shape, dtype, TensorRole::Weight);
}

Status Graph::addConstant(const std::string &name, const std::vector<int64_t> &shape,
                          const std::vector<double> &values, const std::string &dtype) {
  if (auto type = checkDeclared(name, shape, dtype); !type)
    return type.status();
  int64_t elements = 1;
  for (int64_t e : shape)
    elements *= e;
  if (static_cast<int64_t>(values.size()) != elements)
    return Status::error("constant '" + name + "' of shape " + shapeText(shape) + " needs " +
                         std::to_string(elements) + " values; " + std::to_string(values.size()) +
                         " given");
  if (Status s = declare(impl_->graph, name, shape, dtype, TensorRole::Input); !s)
    return s;
  impl_->graph.constants[name] = values;
  return Status();
}

Status Graph::addNode(const Node &node) {
  ::tofu::Node n;
  n.name = node.name;
  n.op = node.op;
  n.inputs = node.inputs;
  n.output = node.output;
  n.attrs = node.attributes;
  n.groups = node.groups;
  if (node.op.empty())
    return Status::error("node '" + node.name + "' names no op");
  for (const std::string &in : node.inputs)
    if (in.empty())
      return Status::error("node '" + node.name + "' has an input with no name");
  return fromError(impl_->graph.addNode(std::move(n)));
}

Status Graph::setOutputs(const std::vector<std::string> &names) {
  for (const std::string &n : names)
    if (!impl_->graph.tensor(n))
      return Status::error("output '" + n + "' is not a tensor of the graph");
  impl_->graph.outputs = names;
  return Status();
}

std::string Graph::toJson() const { return graphToJson(impl_->graph); }

Result<Graph> Graph::fromJson(const std::string &json) {
  auto g = graphFromJson(json);
  if (!g)
    return Status::error(llvm::toString(g.takeError()));
  Graph out;
  out.impl_->graph = std::move(*g);
  return out;
}

// --- Plan --------------------------------------------------------------------------------

const TensorPlan *Plan::tensor(const std::string &name) const {
  for (const TensorPlan &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

const NodePlan *Plan::node(const std::string &name) const {
  for (const NodePlan &n : nodes)
    if (n.name == name)
      return &n;
  return nullptr;
}

namespace {

Box publicBox(const ::tofu::Box &b) {
  Box out;
  for (const Range &r : b) {
    out.lo.push_back(r.lo);
    out.hi.push_back(r.hi);
  }
  return out;
}

/// The public plan of a pipeline's result, and its JSON.
Plan publicPlan(const PipelineResult &r, bool perWorker, const std::optional<DeviceModel> &device,
                const std::vector<std::string> &recomputed = {}, int64_t budget = 0) {
  const Problem &p = *r.problem;
  const PartitionPlan &pp = r.plan;
  Plan out;
  out.graph = r.name;
  out.algorithm = pp.algorithm;
  out.objective = pp.objective;
  out.workers = pp.workers;
  out.communicationBytes = pp.totalBytes;
  out.searchSeconds = pp.searchSeconds;
  out.loss = r.loss;
  out.lossNote = r.lossNote;
  for (size_t i = 0; i < pp.steps.size(); ++i)
    out.steps.push_back({pp.steps[i].parts, i < pp.stepBytes.size() ? pp.stepBytes[i] : 0});
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    TensorPlan tp;
    tp.name = pt.name;
    tp.role = roleName(pt.role);
    const TensorInfo &info = r.graph.tensors()[pt.graphTensor];
    tp.dtype = elementTypeName(info.dtype);
    tp.shape = pt.shape;
    tp.bytes = info.bytes();
    out.singleWorkerBytes += tp.bytes;
    for (const StepChoice &s : pp.steps)
      tp.cut.push_back(s.tensor[t]);
    if (perWorker)
      for (unsigned w = 0; w < r.exec.tiles.size(); ++w)
        tp.tiles.push_back(publicBox(r.exec.tiles[w][t]));
    out.tensors.push_back(std::move(tp));
  }
  for (unsigned n : p.order) {
    NodePlan np;
    np.name = p.nodes[n].name;
    np.op = p.nodes[n].table->op.name;
    for (const StepChoice &s : pp.steps)
      np.strategy.push_back(p.strategyName(n, s.node[n]));
    np.communicationBytes = n < pp.nodeBytes.size() ? pp.nodeBytes[n] : 0;
    out.nodes.push_back(std::move(np));
  }
  if (perWorker)
    for (const ::tofu::WorkerMemory &m : r.memory.workers)
      out.workerMemory.push_back({m.tileBytes, m.peak});
  out.plannedPeakBytes = r.memory.workers.empty() ? 0 : r.memory.largestPeak();
  out.recomputed = recomputed;

  PlanReportOptions report;
  report.title = r.name;
  report.exact = pp.workers <= 64;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(planJson(p, pp, report));
  if (device) {
    const ExecPlan built = perWorker ? ExecPlan() : buildExecPlan(p, pp);
    auto e = estimateStepTime(p, perWorker ? r.exec : built, r.graph.outputs, *device);
    if (e) {
      const WorkerTime &w = e->perWorker[e->slowest];
      out.stepTime = {device->name, e->seconds, e->overlappedSeconds, w.phase[0],
                      w.phase[1],   w.phase[2], w.communication};
      j["step_time"] = nlohmann::ordered_json::parse(stepTimeJson(*e));
    } else {
      llvm::consumeError(e.takeError()); // a model read and checked before the search
    }
  }
  j["loss"] = r.loss;
  j["loss_note"] = r.lossNote;
  if (out.plannedPeakBytes > 0) {
    j["memory"]["planned_peak_bytes"] = out.plannedPeakBytes;
    if (budget > 0)
      j["memory"]["budget_bytes"] = budget;
  }
  j["recomputed"] = recomputed;
  if (perWorker) {
    nlohmann::ordered_json workers = nlohmann::ordered_json::array();
    for (unsigned w = 0; w < out.workerMemory.size(); ++w) {
      nlohmann::ordered_json jw;
      jw["worker"] = w;
      jw["tile_bytes"] = out.workerMemory[w].tileBytes;
      jw["peak_bytes"] = out.workerMemory[w].peakBytes;
      nlohmann::ordered_json tiles = nlohmann::ordered_json::object();
      for (const TensorPlan &t : out.tensors) {
        nlohmann::ordered_json box = nlohmann::ordered_json::array();
        for (size_t d = 0; d < t.tiles[w].lo.size(); ++d)
          box.push_back({t.tiles[w].lo[d], t.tiles[w].hi[d]});
        tiles[t.name] = box;
      }
      jw["tiles"] = tiles;
      workers.push_back(jw);
    }
    j["worker_details"] = workers;
  }
  out.json = j.dump(1) + "\n";
  return out;
}

} // namespace

// --- Planner -----------------------------------------------------------------------------

Planner::~Planner() = default;

Result<Planner> Planner::open(const std::string &opsDir) {
  auto dir = findOpsDir(opsDir, !opsDir.empty(), anchorFile(), "the operator library");
  if (!dir)
    return Status::error(llvm::toString(dir.takeError()), ErrorKind::Library);
  SourceManager sources;
  DiagnosticEngine diags(sources);
  auto lib = OpLibrary::load(*dir, diags);
  if (!lib) {
    std::string text;
    llvm::raw_string_ostream os(text);
    diags.print(os);
    os.flush();
    return Status::error("cannot load the operator library '" + *dir + "': " +
                             llvm::toString(lib.takeError()) + (text.empty() ? "" : "\n" + text),
                         ErrorKind::Library);
  }
  auto impl = std::make_shared<Impl>();
  impl->dir = *dir;
  impl->library = std::move(*lib);
  Planner p;
  p.impl_ = std::move(impl);
  return p;
}

const std::string &Planner::opsDir() const { return impl_->dir; }

std::vector<std::string> Planner::ops() const {
  std::vector<std::string> names;
  for (const auto &op : impl_->library.ops())
    names.push_back(op.first);
  return names;
}

namespace {

Result<PipelineOptions> pipelineOptions(const PlanOptions &o) {
  if (o.workers == 0)
    return Status::error("workers must be at least 1", ErrorKind::Argument);
  auto algorithm = parseAlgorithm(o.algorithm);
  if (!algorithm)
    return Status::error("unknown algorithm '" + o.algorithm + "' (one of " + algorithmNames() +
                             ")",
                         ErrorKind::Argument);
  if (!(o.budgetSeconds > 0))
    return Status::error("the search budget must be a positive number of seconds",
                         ErrorKind::Argument);
  PipelineOptions p;
  if (o.train)
    p.train = o.optimizer == Optimizer::SGD ? ::tofu::Optimizer::SGD : ::tofu::Optimizer::Adam;
  p.precision = o.precision == Precision::BF16 ? ::tofu::Precision::BF16 : ::tofu::Precision::FP32;
  p.until = o.perWorker ? Stage::Execution : Stage::Plan;
  p.search.workers = o.workers;
  p.search.algorithm = *algorithm;
  p.search.budgetSeconds = o.budgetSeconds;
  p.search.threads = o.searchThreads;
  return p;
}

Result<Plan> finish(::tofu::Graph g, const std::string &name, const OpLibrary &lib,
                    const PipelineOptions &options, const PlanOptions &plan) {
  std::optional<DeviceModel> device;
  if (!plan.device.empty()) {
    auto d = deviceModelNamed(plan.device);
    if (!d)
      return Status::error("device: " + llvm::toString(d.takeError()), ErrorKind::Argument);
    device = std::move(*d);
  }
  auto mode = recomputeModeNamed(plan.recompute);
  if (!mode)
    return Status::error("unknown recompute mode '" + plan.recompute + "' (auto, sqrt or none)",
                         ErrorKind::Argument);
  if (plan.memoryPerWorker < 0)
    return Status::error("memoryPerWorker must be 0 (no budget) or a number of bytes",
                         ErrorKind::Argument);
  auto objective = objectiveNamed(plan.objective);
  if (!objective)
    return Status::error("unknown objective '" + plan.objective + "' (time or bytes)",
                         ErrorKind::Argument);
  PipelineOptions o = options;
  o.objective = *objective;
  o.device = device; // the time objective's
  o.memoryPerWorker = plan.memoryPerWorker;
  // Recomputation is planned for a training step under a budget (auto) or as asked (sqrt).
  if (options.train &&
      (*mode == RecomputeMode::Sqrt || (*mode == RecomputeMode::Auto && plan.memoryPerWorker > 0)))
    o.recompute = *mode;
  Stage failed = Stage::Graph;
  auto r = runPipeline(std::move(g), name, lib, o, &failed);
  if (!r)
    return Status::error(llvm::toString(r.takeError()),
                         failed == Stage::Plan ? ErrorKind::Plan : ErrorKind::Graph);
  return publicPlan(*r, plan.perWorker, device, r->recomputed.dropped, plan.memoryPerWorker);
}

} // namespace

Result<Plan> Planner::plan(const Graph &graph, const PlanOptions &options) const {
  auto po = pipelineOptions(options);
  if (!po)
    return po.status();
  return finish(graph.impl().graph, "graph", impl_->library, *po, options);
}

Result<Plan> Planner::planOnnx(const std::string &bytes, const OnnxOptions &onnx,
                               const PlanOptions &options, const std::string &name) const {
  auto po = pipelineOptions(options);
  if (!po)
    return po.status();
  if (onnx.batch < 1)
    return Status::error("the ONNX batch must be at least 1", ErrorKind::Argument);
  OnnxImportOptions io;
  io.batch = onnx.batch;
  io.dataInputs = onnx.dataInputs;
  auto g = importOnnxBytes(bytes, name, impl_->library, io);
  if (!g)
    return Status::error(llvm::toString(g.takeError()), ErrorKind::Graph);
  return finish(std::move(*g), name, impl_->library, *po, options);
}

} // namespace api
} // namespace tofu
