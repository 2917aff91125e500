// libtofu_plan's C++ API: a framework's graph (or an ONNX model) in, a partition plan out.
//
//   auto planner = tofu::api::Planner::open();            // the installed operator library
//   tofu::api::Graph g;
//   g.addInput("x", {64, 256});
//   g.addWeight("w", {256, 10});
//   g.addNode({"fc", "MatMul", {"x", "w"}, "y", {}, {{"b", 0}}});
//   g.setOutputs({"y"});
//   tofu::api::PlanOptions options;
//   options.workers = 8;
//   auto plan = planner->plan(g, options);                // Result<Plan>: value or message
//   if (!plan) { std::cerr << plan.error(); ... }
//   plan->tensor("w")->cut;                                // per step: the dimension cut
//
// Self-contained: this header and tofu/tofu.h are all a consumer needs (C++17, the
// standard library; no LLVM, no header of Tofu's source tree). Link -ltofu_plan
// (pkg-config tofu, or CMake's find_package(Tofu) and the target Tofu::plan). Every
// function reports failure as a value (Status, Result<T>); none throws.
#ifndef TOFU_PLAN_H
#define TOFU_PLAN_H

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tofu/tofu.h"

namespace tofu {
namespace api {

/// The library's version, "MAJOR.MINOR.PATCH" (TOFU_VERSION_* of the headers it was built with).
std::string version();

/// What failed (the C API's tofu_status codes).
enum class ErrorKind {
  None = TOFU_OK,
  Argument = TOFU_ERROR_ARGUMENT, ///< an option or argument out of range
  Library = TOFU_ERROR_LIBRARY,   ///< the operator library is missing or does not check
  Graph = TOFU_ERROR_GRAPH,       ///< the graph or model is malformed or does not check
  Plan = TOFU_ERROR_PLAN,         ///< the search failed (a time budget, a table limit)
};

/// Success, or an error with its kind and message.
class Status {
public:
  Status() = default;
  static Status error(std::string message, ErrorKind kind = ErrorKind::Graph) {
    return Status(kind == ErrorKind::None ? ErrorKind::Graph : kind, std::move(message));
  }
  bool ok() const { return kind_ == ErrorKind::None; }
  explicit operator bool() const { return ok(); }
  ErrorKind kind() const { return kind_; }
  /// Empty on success.
  const std::string &message() const { return message_; }

private:
  Status(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}
  ErrorKind kind_ = ErrorKind::None;
  std::string message_;
};

/// A value, or the error that stopped it from being made.
template <class T> class Result {
public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status error) : status_(std::move(error)) {
    if (status_.ok())
      status_ = Status::error("no value (an ok Status given for a Result)", ErrorKind::Argument);
  }
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  /// The error's message; empty when ok().
  const std::string &error() const { return status_.message(); }
  const Status &status() const { return status_; }
  /// The value; only when ok().
  T &value() { return *value_; }
  const T &value() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }

private:
  std::optional<T> value_;
  Status status_;
};

/// One op of the graph: `output = op<attributes>{groups}(inputs)`, op a name of the
/// operator library (tdlc --stats lists them; TDL.md describes attributes and groups).
struct Node {
  std::string name;
  std::string op;
  std::vector<std::string> inputs; ///< tensor names, in the op's parameter order
  std::string output;              ///< the tensor it produces (created by addNode)
  std::map<std::string, int64_t> attributes;
  /// How many dimensions each of the op's variadic dimension groups takes (e.g. MatMul's
  /// batch group `b`, an element-wise op's `i`).
  std::map<std::string, int64_t> groups;
};

/// A dataflow graph under construction. Graph inputs (data) and weights are declared;
/// every other tensor is the output of a node and gets its shape from the op.
class Graph {
public:
  Graph();
  Graph(const Graph &other);
  Graph &operator=(const Graph &other);
  Graph(Graph &&) noexcept;
  Graph &operator=(Graph &&) noexcept;
  ~Graph();

  /// A data input (a batch the framework feeds each step). dtype: "float32", "float16",
  /// "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool".
  Status addInput(const std::string &name, const std::vector<int64_t> &shape,
                  const std::string &dtype = "float32");
  /// A trainable weight (the training step computes its gradient and updates it).
  Status addWeight(const std::string &name, const std::vector<int64_t> &shape,
                   const std::string &dtype = "float32");
  /// An input whose value is fixed (row-major `values`, as many as the shape's elements).
  Status addConstant(const std::string &name, const std::vector<int64_t> &shape,
                     const std::vector<double> &values, const std::string &dtype = "float32");
  /// Adds a node; the names of nodes and of tensors are unique.
  Status addNode(const Node &node);
  /// The graph's outputs. To plan a training step, the single output is the scalar loss or
  /// a prediction a loss is added to (see PlanOptions::train).
  Status setOutputs(const std::vector<std::string> &names);

  /// The graph as DESIGN.md's JSON (what `tofu-plan --graph FILE` reads).
  std::string toJson() const;
  /// Reads that JSON.
  static Result<Graph> fromJson(const std::string &json);

  struct Impl;
  /// For the library's own use.
  const Impl &impl() const { return *impl_; }

private:
  std::unique_ptr<Impl> impl_;
};

enum class Optimizer { SGD, Adam };

/// The element types the step computes in. BF16 follows torch.autocast(dtype=bfloat16):
/// products and convolutions on bfloat16 operands (float32 accumulation), softmax, the
/// normalisations' statistics, losses, exp, log, pow and sums in float32, weights, their
/// gradients and the optimiser's state float32 (TensorPlan::dtype says which is which).
enum class Precision { FP32, BF16 };

struct PlanOptions {
  /// Workers to partition across (any k >= 1; the search factors it, largest prime first).
  unsigned workers = 8;
  /// Plan the training step (forward, backward, optimiser update) rather than the graph as
  /// given. A single output that is not a scalar gets a loss: softmax cross-entropy against
  /// a new int64 input `labels` for a rank-2 output, else the mean squared error against a
  /// new input `target` (Plan::lossNote says which).
  bool train = true;
  Optimizer optimizer = Optimizer::Adam;
  Precision precision = Precision::FP32;
  /// The search: "tofu" (the paper's recursive search), "dp-flat", "icml18", "equal-chop",
  /// "spartan", "all-row", "data-parallel", "exhaustive".
  std::string algorithm = "tofu";
  /// Budget of dp-flat and exhaustive, in seconds.
  double budgetSeconds = 60;
  /// Threads of the search (0: the machine's cores, at most 8). The plan is the same at any
  /// count.
  unsigned searchThreads = 0;
  /// Fill Plan::tensors[].tiles and Plan::workerMemory (the execution plan and the memory
  /// planner run for every worker; for thousands of workers on large graphs, turn it off).
  bool perWorker = true;
  /// The device Plan::stepTime is estimated on: "h100" (H100 SXM) or "a100" (A100 SXM
  /// 80GB) from their data sheets, "cpu" (this machine as `tofu-run --calibrate` measured
  /// it), or a device model file; "" for no estimate. The estimate reads every worker's
  /// share, so without perWorker it builds the execution plan for it alone.
  std::string device = "h100";
  /// The most bytes each worker's planned peak (the memory planner's arena) may take; 0 for
  /// no budget. With one, the plan is the one of least communication found that fits on
  /// every worker (tofu-plan --memory-per-worker), recomputing what `recompute` allows; when
  /// none fits, planning fails (ErrorKind::Plan) saying how close the closest plan came.
  int64_t memoryPerWorker = 0;
  /// What a training step recomputes instead of keeping for its backward pass (tofu-plan
  /// --recompute): "auto" (the default: with a budget, the least recomputation found that
  /// fits, nothing where the plan fits without; without one, nothing), "sqrt" (segment
  /// checkpointing, budget or not) or "none". Plan::recomputed lists what was dropped.
  std::string recompute = "auto";
  /// What the search minimises (tofu-plan --objective): "time" (the default), the step
  /// estimated on `device`, every worker's compute and communication (with device "", bytes);
  /// or "bytes", the bytes every worker receives: the paper's objective and plans.
  /// Plan::objective says which searched the plan.
  std::string objective = "time";
};

struct OnnxOptions {
  /// Substituted for every symbolic dimension (a dynamic batch).
  int64_t batch = 1;
  /// When weights are graph inputs (export_params=False): the first this many graph inputs
  /// are data, the rest weights.
  unsigned dataInputs = 1;
};

/// A half-open box of a tensor: per dimension [lo, hi).
struct Box {
  std::vector<int64_t> lo, hi;
};

struct TensorPlan {
  std::string name;
  /// "input", "weight", "activation", "gradient" or "optimizer_state".
  std::string role;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  /// Per step of the plan: the dimension the step cuts into Plan::steps[i].parts pieces,
  /// or -1 where every group of that step holds the whole (replicated).
  std::vector<int> cut;
  /// Per worker: the tile it holds (PlanOptions::perWorker).
  std::vector<Box> tiles;
};

struct NodePlan {
  std::string name;
  std::string op;
  /// Per step: the strategy (`b` for the variable it splits, `reduce k` for a split
  /// reduction whose partial results are summed, `replicate`).
  std::vector<std::string> strategy;
  /// Its share of the plan's communication.
  int64_t communicationBytes = 0;
};

struct StepPlan {
  unsigned parts = 1;             ///< groups this step divides each earlier group into
  int64_t communicationBytes = 0; ///< what this step adds
};

struct WorkerMemory {
  int64_t tileBytes = 0; ///< its tiles of every tensor
  int64_t peakBytes = 0; ///< the memory planner's arena: tiles, fetched inputs, partials
};

/// A partition plan: the recursion's steps (k = parts of every step multiplied), how each
/// step cuts every tensor and partitions every op, and what it costs.
/// A training step's estimated time on a device (tofu-plan's "estimated step time"): every
/// worker's ops by their FLOPs and bytes against the device's rates, plus the plan's traffic
/// over the device's link, with no overlap assumed. Seconds, of the slowest worker.
struct StepTime {
  std::string device;           ///< the model's name ("" when PlanOptions::device was "")
  double seconds = 0;           ///< compute plus communication
  double overlappedSeconds = 0; ///< the larger of the two: transfers hidden behind compute
  double forward = 0, backward = 0, update = 0, communication = 0;
};

struct Plan {
  std::string graph;     ///< what the graph was called (the ONNX name, or "graph")
  std::string algorithm; ///< the search that made it
  std::string objective; ///< what it minimised: "time" or "bytes" (PlanOptions::objective)
  unsigned workers = 1;
  std::vector<StepPlan> steps;
  std::vector<TensorPlan> tensors;        ///< every tensor of the planned (training) graph
  std::vector<NodePlan> nodes;            ///< in a topological order
  std::vector<WorkerMemory> workerMemory; ///< per worker (PlanOptions::perWorker)
  int64_t communicationBytes = 0; ///< per training step, summed over workers (the cost model)
  int64_t singleWorkerBytes = 0;  ///< every tensor once (one worker's tiles)
  double searchSeconds = 0;
  std::string loss;     ///< the loss tensor of a training step
  std::string lossNote; ///< how a loss was added, if one was
  StepTime stepTime;    ///< on PlanOptions::device
  /// The forward tensors the step drops after the forward pass and recomputes for the
  /// backward pass (PlanOptions::recompute), sorted; empty where nothing is.
  std::vector<std::string> recomputed;
  /// The largest worker's planned peak (the memory planner's arena), where memory was
  /// planned (PlanOptions::perWorker or a memory budget); else 0.
  int64_t plannedPeakBytes = 0;
  /// The plan as JSON: tofu-plan --format=json's fields (with "step_time" where a device was
  /// given), plus "loss", "loss_note" and
  /// with perWorker, "worker_details" (per worker: tile_bytes, peak_bytes, tiles by tensor).
  std::string json;

  /// The tensor or node of that name, or null.
  const TensorPlan *tensor(const std::string &name) const;
  const NodePlan *node(const std::string &name) const;
};

/// The operator library, loaded and checked once; plans any number of graphs.
class Planner {
public:
  /// Loads every .tdl file under `opsDir`; with an empty `opsDir`, from $TOFU_OPS, else the
  /// library installed beside libtofu_plan (PREFIX/share/tofu/ops). Errors carry the
  /// library's diagnostics, or every place looked.
  static Result<Planner> open(const std::string &opsDir = "");

  /// Checks `graph` (inferring shapes), builds its training step when options.train, and
  /// searches its partition on options.workers workers.
  Result<Plan> plan(const Graph &graph, const PlanOptions &options) const;
  /// The same for a serialized ONNX model (ModelProto bytes). `name` stands for it in
  /// messages and in Plan::graph.
  Result<Plan> planOnnx(const std::string &bytes, const OnnxOptions &onnx,
                        const PlanOptions &options, const std::string &name = "model.onnx") const;

  /// Where the library was loaded from.
  const std::string &opsDir() const;
  /// Names of the library's ops.
  std::vector<std::string> ops() const;

  Planner(const Planner &) = default;
  Planner &operator=(const Planner &) = default;
  Planner(Planner &&) noexcept = default;
  Planner &operator=(Planner &&) noexcept = default;
  ~Planner();

  struct Impl;

private:
  Planner() = default;
  std::shared_ptr<const Impl> impl_;
};

} // namespace api
} // namespace tofu

#endif // TOFU_PLAN_H
