// tofu-run: trains a model partitioned across --workers workers on the engine (each worker
// in one float32 arena of its planned size; ops as library calls or kernels generated from
// TDL) for --steps steps, reporting per step the loss and time, and at the end the median
// step time, samples/s, every worker's peak memory and the bytes moved against the plan's
// prediction. --backend cpu runs workers as threads over host arenas (oneDNN + generated
// C++); --backend cuda as streams over device arenas on one GPU (cuBLAS, cuDNN + NVRTC
// kernels). --verify runs the same steps unpartitioned on the same backend and compares the
// weights and the loss. --kernels interp runs one step on the reference executor instead
// (every op in the TDL interpreter, double precision). Built as `tofu-run` (both backends)
// and `tofu-run-cuda` (the CUDA backend alone: no oneDNN, for the GPU bundle).
//
// A driver: it reads the options, runs the pipeline (planner/pipeline.h), picks the backend,
// and prints what the trainer (runtime/trainer.h: values, batches, steps, evaluation,
// checkpoints, verification) reports. The processes of an MPI run are a ProcessGroup
// (runtime/process_group.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "analysis/checked.h"
#include "codegen/exec_plan.h"
#include "codegen/fusion.h"
#include "codegen/memory_plan.h"
#include "codegen/program_builder.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "planner/pipeline.h"
#include "runtime/backend_registry.h"
#include "runtime/cpu_executor.h"
#include "runtime/cuda/kernel_report.h"
#include "runtime/data_feed.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "runtime/input_arrays.h"
#include "runtime/process_group.h"
#include "runtime/trainer.h"
#include "runtime/training_data.h"
#include "search/report.h"
#include "search/search.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/units.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

cl::OptionCategory runCategory("tofu-run options");
cl::opt<std::string> model("model", cl::desc("A zoo model (see --help)"), cl::value_desc("NAME"),
                           cl::cat(runCategory));
cl::opt<std::string> graphFile("graph", cl::desc("A graph in JSON"), cl::value_desc("FILE.json"),
                               cl::cat(runCategory));
cl::opt<std::string> onnxFile("onnx", cl::desc("An ONNX model"), cl::value_desc("FILE.onnx"),
                              cl::cat(runCategory));
cl::opt<unsigned> dataInputs("data-inputs",
                             cl::desc("With --onnx: leading graph inputs that are "
                                      "data (default 1)"),
                             cl::init(1), cl::cat(runCategory));
cl::opt<int64_t> batch("batch", cl::desc("Batch size for zoo and ONNX models (default 2)"),
                       cl::init(2), cl::cat(runCategory));
cl::opt<unsigned>
    workers("workers",
            cl::desc("Workers to partition across (required; under mpirun, the process count)"),
            cl::value_desc("K"), cl::init(0), cl::cat(runCategory));
cl::opt<std::string> algo("algo", cl::desc("The search algorithm (default tofu)"), cl::init("tofu"),
                          cl::cat(runCategory));
cl::opt<std::string> backend("backend",
                             cl::desc("Executor: cpu (threads over host arenas), cuda (streams "
                                      "over arenas on one GPU; k workers share it), mpi (one "
                                      "process per worker, started by mpirun -np K; CPU "
                                      "kernels) or nccl (one process per worker and GPU under "
                                      "mpirun, regions over NCCL; CUDA kernels); the default "
                                      "is the first this build has"),
                             cl::cat(runCategory));
cl::opt<std::string> mpiTransport("mpi-transport",
                                  cl::desc("With --backend mpi: how regions cross processes: "
                                           "sendrecv (default: matched sends and receives) or "
                                           "get (one-sided reads of the owner's arena, an RMA "
                                           "window, with a barrier at every synchronisation "
                                           "point)"),
                                  cl::init("sendrecv"), cl::cat(runCategory));
cl::opt<bool> tf32("tf32",
                   cl::desc("With --backend cuda or nccl: let cuBLAS and cuDNN use TF32 tensor "
                            "cores (default off: float32 math)"),
                   cl::cat(runCategory));
cl::opt<std::string> optimizer("optimizer",
                               cl::desc("sgd (default), momentum (SGD with momentum, PyTorch's "
                                        "form: v = mu v + g, w -= lr v), nesterov (w -= lr (g + "
                                        "mu v)), adam or adamw (Adam with decoupled weight "
                                        "decay), each as torch.optim's"),
                               cl::init("sgd"), cl::cat(runCategory));
cl::opt<double> weightDecayOpt("weight-decay",
                               cl::desc("Weight decay: with sgd, momentum, nesterov and adam an "
                                        "L2 term added to the gradient (g + wd w, PyTorch's "
                                        "weight_decay); with adamw decoupled (w -= lr wd w; "
                                        "default 0.01 there, else 0)"),
                               cl::init(-1), cl::cat(runCategory));
cl::opt<std::string> lrScheduleOpt(
    "lr-schedule",
    cl::desc("How the learning rate moves per step: constant (default), step:EVERY[:GAMMA] "
             "(times GAMMA, default 0.1, every EVERY steps) or cosine[:HORIZON] (to 0 at step "
             "HORIZON, default the run's last step); after --warmup. Steps count over every "
             "run, so --load continues the schedule (and takes the checkpoint's when none is "
             "given)"),
    cl::value_desc("SCHEDULE"), cl::cat(runCategory));
cl::opt<unsigned> warmupOpt("warmup",
                            cl::desc("Steps of linear learning-rate warm-up, lr (t + 1) / "
                                     "(N + 1) at step t < N, before --lr-schedule (default 0)"),
                            cl::value_desc("N"), cl::cat(runCategory));
cl::opt<bool> infer("infer",
                    cl::desc("Run the model's forward graph once, partitioned, on the "
                             "inputs --input gives, and report (--output-dir: write) "
                             "every graph output; weights from the model's "
                             "initializers, --load, or drawn from --seed"),
                    cl::cat(runCategory));
cl::opt<std::string>
    inputOpt("input",
             cl::desc("With --infer: NAME=FILE,... (.npy, ONNX TensorProto .pb, IDX or "
                      "FILE.safetensors[:KEY]), one per data input. "
                      "Read before an ONNX model's import: each input "
                      "takes its array's shape (fixing dynamic "
                      "dimensions), and an op that needs an input as a "
                      "constant (a shape, axes, starts) takes the "
                      "values of an array of at most 4096 elements"),
             cl::value_desc("NAME=FILE,..."), cl::cat(runCategory));
cl::opt<std::string> outputDir("output-dir",
                               cl::desc("With --infer: write each graph output to "
                                        "DIR/<name>.npy (float32)"),
                               cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<std::string> lossOutput("loss-output",
                                cl::desc("A graph of several outputs trains on this one (default: "
                                         "the first)"),
                                cl::value_desc("NAME"), cl::cat(runCategory));
cl::opt<double> momentumOpt("momentum",
                            cl::desc("With --optimizer momentum or nesterov: mu (default 0.9)"),
                            cl::init(0.9), cl::cat(runCategory));
cl::opt<bool> verify("verify", cl::desc("Also run the step unpartitioned and compare"),
                     cl::cat(runCategory));
cl::opt<unsigned> seed("seed", cl::desc("Seed of the random inputs and weights (default 1)"),
                       cl::init(1), cl::cat(runCategory));
cl::opt<bool> fusion("fusion",
                     cl::desc("Fold element-wise nodes into their one reader, so one kernel "
                              "computes both and the intermediate is never stored (default on; "
                              "--fusion=false turns it off)"),
                     cl::init(true), cl::cat(runCategory));
cl::opt<std::string> dataMode(
    "data",
    cl::desc("What the model trains on: a data set — a directory of the MNIST family (its "
             "train split: train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz], e.g. "
             "/usr/share/datasets/fashion-mnist), a .safetensors file (each tensor an array, by "
             "its key) or NAME=FILE,... of IDX (.gz), .npy and FILE.safetensors[:KEY] arrays "
             "whose first dimension counts samples; batches are shuffled per epoch from --seed "
             "and the last partial batch is dropped. Or synthetic data: 'teacher' (default: a "
             "fresh batch every step, labels or targets from a fixed random teacher) or 'fixed' "
             "(one random batch for every step: the model memorises it)"),
    cl::value_desc("PATH|teacher|fixed"), cl::init("teacher"), cl::cat(runCategory));
cl::opt<std::string> feedOpt("feed",
                             cl::desc("With a data set: which array feeds which graph input, "
                                      "INPUT=ARRAY,... (default: the array 'labels' feeds the "
                                      "loss's labels, the other array the one data input)"),
                             cl::value_desc("INPUT=ARRAY,..."), cl::cat(runCategory));
cl::opt<std::string> normalizeOpt("normalize",
                                  cl::desc("With a data set: MEAN,STD: inputs become (x - MEAN) "
                                           "/ STD, after byte arrays are scaled to [0, 1] "
                                           "(default 0,1)"),
                                  cl::value_desc("MEAN,STD"), cl::cat(runCategory));
cl::opt<unsigned> epochs("epochs",
                         cl::desc("With a data set: passes over it (default 1; or give "
                                  "--steps)"),
                         cl::init(1), cl::cat(runCategory));
cl::opt<std::string> evalOpt("eval",
                             cl::desc("With a data set: evaluate the loss and top-1 accuracy on "
                                      "held-out data, forward only, partitioned like training: "
                                      "'test' (the --data directory's t10k split) or a data set "
                                      "as --data takes; at each epoch's end (or every "
                                      "--eval-every steps) and after the last step"),
                             cl::value_desc("test|PATH"), cl::cat(runCategory));
cl::opt<unsigned> evalEvery("eval-every", cl::desc("Steps between evaluations (default: an epoch)"),
                            cl::init(0), cl::cat(runCategory));
cl::opt<unsigned> logEvery("log-every",
                           cl::desc("Print a row every N steps: the mean loss and "
                                    "step time of those N (default 1)"),
                           cl::init(1), cl::cat(runCategory));
/// The most workers the in-process engines (CPU, CUDA) run: each is a thread (or stream)
/// with its own arena in this process; 1024 take some 20 s and 3 GB to set up for an MLP.
constexpr unsigned kMaxEngineWorkers = 1024;

cl::opt<double> tolerance("tolerance",
                          cl::desc("Largest relative difference --verify accepts "
                                   "(default 1e-3 on compiled kernels, float32; "
                                   "1e-4 with --kernels interp)"),
                          cl::init(-1), cl::cat(runCategory));
cl::opt<std::string> kernelsMode("kernels",
                                 cl::desc("compiled (default): oneDNN for matrix "
                                          "products and convolutions, generated C++ "
                                          "kernels for the rest, on float32 arenas; "
                                          "generated: generated kernels only; interp: "
                                          "one step with every op in the TDL "
                                          "interpreter (double)"),
                                 cl::init("compiled"), cl::cat(runCategory));
cl::opt<unsigned> steps("steps", cl::desc("Training steps (default 1)"), cl::init(1),
                        cl::cat(runCategory));
cl::opt<double> learningRate("lr",
                             cl::desc("Base learning rate (default 0.1 for sgd, 0.01 for momentum "
                                      "and nesterov, 0.001 for adam and adamw)"),
                             cl::init(-1), cl::cat(runCategory));
cl::opt<int> threadsPerWorker("worker-threads",
                              cl::desc("OpenMP threads per worker (default: cores / "
                                       "workers)"),
                              cl::init(0), cl::cat(runCategory));
cl::opt<bool> checking("check",
                       cl::desc("Poison every buffer a step has not written with NaN "
                                "(catches kernels or plans that read what they were "
                                "not given)"),
                       cl::cat(runCategory));
cl::opt<std::string> saveDir("save",
                             cl::desc("After the last step, write every weight and "
                                      "optimiser-state tensor to DIR/model.safetensors "
                                      "(with --backend mpi or nccl: each process its own tiles "
                                      "to DIR/tiles-G-R.safetensors, and an index "
                                      "DIR/index.json)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<std::string> loadDir("load",
                             cl::desc("Start from the checkpoint in DIR (written by --save, "
                                      "at any worker count, by threads or processes; each "
                                      "worker reads only its own tiles)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<unsigned> profileTop("profile",
                             cl::desc("Time every node on every worker; print each "
                                      "worker's compute, copy and waiting time and "
                                      "worker 0's N slowest nodes (0: off)"),
                             cl::init(0), cl::cat(runCategory));
cl::opt<bool> continueNonFinite(
    "continue-on-nonfinite",
    cl::desc("Keep training after a step whose loss is not finite (by default training stops "
             "there with exit status 1, saving nothing)"),
    cl::cat(runCategory));
cl::opt<bool> kernelReportOpt(
    "kernel-report",
    cl::desc("Print the CUDA kernels of one step of worker 0 as the CUDA backend would run "
             "them (library call or generated variant, grid and block, the longest serial "
             "chain of one thread, bytes, FLOPs) with a roofline estimate on an H100 against "
             "its bound; needs no device, runs no step"),
    cl::cat(runCategory));
cl::opt<std::string> format("format", cl::desc("table (default) or json"), cl::init("table"),
                            cl::cat(runCategory));
cl::opt<std::string> metricsFile("metrics",
                                 cl::desc("Also write the run's figures as --format=json prints "
                                          "them (per-step losses and times, evaluations, "
                                          "memory) to FILE"),
                                 cl::value_desc("FILE.json"), cl::cat(runCategory));
cl::opt<std::string> planJson("exec-plan", cl::desc("Write the execution plan as JSON"),
                              cl::value_desc("FILE.json"), cl::cat(runCategory));
cl::opt<bool> dumpPlan("dump-plan", cl::desc("Print the execution plan, one line per op instance"),
                       cl::cat(runCategory));
cl::opt<std::string>
    opsDir("ops",
           cl::desc("The operator library (default: $TOFU_OPS, else found beside the executable: "
                    "its Bazel runfiles or PREFIX/share/tofu/ops, else ./ops)"),
           cl::init("ops"), cl::value_desc("DIR"), cl::cat(runCategory));

/// The processes of this run: this one alone, or those mpirun started (--backend mpi, nccl).
tofu::ProcessGroup *group = &tofu::localProcessGroup();

int fail(const std::string &msg, int code = 1) {
  if (!group->distributed()) {
    llvm::errs() << "tofu-run: " << msg << "\n";
    return code;
  }
  llvm::errs() << fmt::format("tofu-run: rank {} of {}: {}\n", group->rank(), group->size(), msg);
  llvm::errs().flush();
  // The others may be waiting on this process in a collective: end the whole job.
  group->abort(code);
  return code;
}

/// fail() with an error's message and status (2 for bad usage, support/errors.h).
int fail(llvm::Error e) {
  std::string message;
  const int status = tofu::exitStatusOf(std::move(e), message);
  return fail(message, status);
}

/// --eval's forward graph (the model without its loss), planned as the training plan
/// restricted to it.
struct EvalSetup {
  tofu::PipelineResult forward;
  unsigned logits = 0; ///< the output tensor
};

/// --normalize, parsed.
tofu::Normalization normalization;

/// The engine options the command line gives.
tofu::EngineOptions engineOptions() {
  tofu::EngineOptions options;
  options.threadsPerWorker = threadsPerWorker;
  options.checking = checking;
  options.library = kernelsMode == "compiled";
  options.profile = profileTop > 0;
  return options;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// --tf32 and --mpi-transport, for the backends that read them.
tofu::BackendSettings backendSettings() {
  tofu::BackendSettings settings;
  settings.tf32 = tf32;
  if (mpiTransport.getNumOccurrences() > 0)
    settings.mpiTransport = mpiTransport;
  return settings;
}

/// The engine of --backend running `plan` (runtime/backend_registry.h).
/// `local`: the engine runs in this process alone (the unpartitioned reference of --verify).
llvm::Expected<std::unique_ptr<tofu::Engine>>
makeEngine(const tofu::Problem &p, const tofu::ExecPlan &plan, const tofu::MemoryPlan &memory,
           const tofu::EngineOptions &options, bool local = false) {
  auto program = tofu::buildProgram(p, plan, memory);
  if (!program)
    return program.takeError();
  return tofu::findBackend(backend)->make(std::move(*program), options, backendSettings(), *group,
                                          local);
}

/// --kernel-report: the CUDA kernels' estimates for worker 0's share of every node.
int kernelReport(const tofu::EnginePlan &planned, const std::string &name) {
  auto program = tofu::buildProgram(planned.fused.problem, planned.fused.plan, planned.memory);
  if (!program)
    return fail(name + ": " + llvm::toString(program.takeError()));
  auto report = tofu::cuda::kernelReport(*program);
  if (!report)
    return fail(name + ": " + llvm::toString(report.takeError()));
  if (format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const tofu::cuda::KernelEstimate &e : *report)
      j.push_back({{"node", e.node},
                   {"op", e.op},
                   {"how", e.how},
                   {"library", e.library},
                   {"launches", e.launches},
                   {"blocks", e.blocks},
                   {"threads", e.threads},
                   {"serial_chain", e.chain},
                   {"bytes", e.bytes},
                   {"min_bytes", e.minBytes},
                   {"flops", e.flops},
                   {"bound_seconds", e.boundSeconds},
                   {"estimate_seconds", e.estimateSeconds}});
    llvm::outs() << j.dump(1) << "\n";
  } else {
    llvm::outs() << fmt::format("{} (batch {}), worker 0 of {}:\n", name, batch, workers)
                 << tofu::cuda::formatKernelReport(*report, tofu::cuda::GpuModel{});
  }
  return 0;
}

/// What the trainer reports, printed as tofu-run prints it: a progress line on a terminal,
/// else a table row every --log-every steps; each evaluation.
class Printer : public tofu::TrainerObserver {
public:
  Printer(const tofu::Trainer &trainer, bool json, bool terminal)
      : trainer_(trainer), json_(json), terminal_(terminal) {}
  void stepped(const tofu::StepRecord &r) override {
    const unsigned steps = trainer_.steps();
    const std::vector<double> &losses = trainer_.losses();
    const std::vector<double> &times = trainer_.stepSeconds();
    if (terminal_) {
      const double elapsed = std::accumulate(times.begin(), times.end(), 0.0);
      const double eta = elapsed / double(r.index + 1) * double(steps - r.index - 1);
      const int64_t perEpoch = trainer_.stepsPerEpoch();
      llvm::outs() << (trainer_.dataSet()
                           ? fmt::format("\repoch {} step {}/{}: loss {:.4f}, {:.0f} samples/s, "
                                         "ETA {}:{:02d}   ",
                                         (r.done - 1) / perEpoch + 1, (r.done - 1) % perEpoch + 1,
                                         perEpoch, r.loss, double(trainer_.dataBatch()) / r.seconds,
                                         int(eta) / 60, int(eta) % 60)
                           : fmt::format("\rstep {}/{}: loss {:.5f}, {:.3f} s", r.index + 1, steps,
                                         r.loss, r.seconds));
      llvm::outs().flush();
      open_ = true;
    } else if (!json_ && ((r.index + 1) % logEvery == 0 || r.index + 1 == steps)) {
      const size_t n = std::min<size_t>(logEvery, (r.index % logEvery) + 1);
      auto meanOfLast = [n](const std::vector<double> &v) {
        return std::accumulate(v.end() - n, v.end(), 0.0) / double(n);
      };
      llvm::outs() << fmt::format("| {} | {:.6f} | {:.4f} |\n", r.index + 1, meanOfLast(losses),
                                  meanOfLast(times));
    }
  }
  void evaluating() override { closeLine(); }
  void evaluated(const tofu::EvalRecord &e) override {
    if (!json_)
      llvm::outs() << fmt::format("eval after step {} (epoch {:.2f}): loss {:.4f}, accuracy "
                                  "{:.2f}% on {} held-out samples ({:.1f} s)\n",
                                  e.step, e.epoch, e.score.loss(), 100 * e.score.accuracy(),
                                  e.score.rows, e.seconds);
  }
  /// Ends the progress line, if one is open.
  void closeLine() {
    if (open_)
      llvm::outs() << "\n";
    open_ = false;
  }

private:
  const tofu::Trainer &trainer_;
  bool json_, terminal_, open_ = false;
};

/// Trains on the engine: --steps steps, then the summary (and --verify's comparison).
int runCompiled(const tofu::Problem &p, const tofu::Graph &training, const std::string &loss,
                const std::string &name, const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                const tofu::SingleWorker &one, int64_t predicted, const std::string &algorithm,
                const EvalSetup *evalSetup) {
  const bool json = format == "json";
  // mpirun hands its processes a terminal whatever its own output is: no progress line.
  const bool terminal = !json && !group->distributed() && ::isatty(STDOUT_FILENO);
  const int64_t onePeak = one.memory.largestPeak();
  // Element-wise chains folded (codegen/fusion.h): the engine runs the fused plan.
  auto planned = tofu::planForEngine(p, exec, memory, training.outputs, fusion);
  if (!planned)
    return fail(llvm::toString(planned.takeError()));
  const tofu::FusedPlan &fused = planned->fused;
  if (kernelReportOpt)
    return kernelReport(*planned, name);

  tofu::TrainerOptions options;
  options.name = name;
  options.optimizer = optimizer;
  auto given = [](const auto &o) {
    using T = std::decay_t<decltype(o.getValue())>;
    return o.getNumOccurrences() > 0 ? std::optional<T>(o.getValue()) : std::nullopt;
  };
  options.lr = given(learningRate);
  options.momentum = given(momentumOpt);
  options.weightDecay = given(weightDecayOpt);
  options.lrSchedule = lrScheduleOpt;
  options.warmup = given(warmupOpt);
  options.steps = given(steps);
  options.epochs = epochs;
  options.seed = seed;
  options.data = dataMode;
  options.feeds = feedOpt;
  options.normalization = normalization;
  std::optional<tofu::EvalGraph> evalGraph;
  if (evalSetup) {
    evalGraph.emplace();
    evalGraph->problem = &*evalSetup->forward.problem;
    evalGraph->exec = &evalSetup->forward.exec;
    evalGraph->memory = &evalSetup->forward.memory;
    evalGraph->outputs = evalSetup->forward.graph.outputs;
    evalGraph->logits = evalSetup->logits;
    options.eval = evalOpt;
    options.evalEvery = evalEvery;
    options.evalGraph = &*evalGraph;
  }
  options.loadDir = loadDir;
  options.saveDir = saveDir;
  options.continueNonFinite = continueNonFinite;
  options.verify = verify;
  options.referenceExec = &one.exec;
  options.referenceMemory = &one.memory;
  options.engine = engineOptions();
  options.workers = static_cast<int>(workers);
  auto made = tofu::Trainer::create(
      p, training, loss, *planned, options,
      [](const tofu::Problem &pp, const tofu::ExecPlan &plan, const tofu::MemoryPlan &m,
         const tofu::EngineOptions &o, bool local) { return makeEngine(pp, plan, m, o, local); },
      *group);
  if (!made)
    return fail(made.takeError());
  tofu::Trainer &trainer = **made;
  tofu::Engine &engine = trainer.engine();
  const tofu::BackendStats bs = engine.backendStats();
  const tofu::KernelCompileStats &cs = bs.compile;
  const tofu::TrainingHyper &hyper = trainer.hyper();
  const double lr = trainer.lr();
  const unsigned stepCount = trainer.steps();
  const tofu::DataSet *ds = trainer.dataSet();
  const tofu::Optimizer kind = *tofu::optimizerNamed(optimizer);
  // The optimiser as the header says it: "adamw, lr 0.001 (cosine:100 after 5 warm-up
  // steps), weight decay 0.01".
  std::string optimizerText = fmt::format("{}, lr {}", std::string(optimizer), lr);
  {
    std::vector<std::string> how;
    if (hyper.schedule.kind != tofu::LrSchedule::Kind::Constant)
      how.push_back(hyper.schedule.str());
    if (hyper.schedule.warmup > 0)
      how.push_back(
          fmt::format("{}{} warm-up steps", how.empty() ? "" : "after ", hyper.schedule.warmup));
    if (!how.empty())
      optimizerText += fmt::format(" ({})", fmt::join(how, " "));
    if (kind == tofu::Optimizer::Momentum || kind == tofu::Optimizer::Nesterov)
      optimizerText += fmt::format(", momentum {}", hyper.momentum);
    if (hyper.weightDecay > 0 || kind == tofu::Optimizer::AdamW)
      optimizerText += fmt::format(", weight decay {}", hyper.weightDecay);
  }
  if (!json) {
    if (trainer.resumed())
      llvm::outs() << fmt::format("resumed from {} ({} steps trained before)\n",
                                  trainer.resumed()->path(), trainer.stepsBefore());
    const bool gpu = tofu::findBackend(backend)->gpu;
    const std::string engineName =
        backend == "nccl"      ? fmt::format("NCCL ({} processes, a GPU each) CUDA", group->size())
        : gpu                  ? "CUDA"
        : group->distributed() ? fmt::format("MPI ({} processes, {} transport) CPU", group->size(),
                                             std::string(mpiTransport))
                               : "CPU";
    llvm::outs() << fmt::format(
        "{} training ({}, batch {}): {} nodes on {} workers, algorithm {}, {} engine "
        "(float32{}, {})\n",
        name, optimizerText, batch, p.nodes.size(), workers, algorithm, engineName,
        gpu && tf32 ? " with TF32 products" : "",
        !options.engine.library ? "generated kernels"
        : gpu                   ? "cuBLAS, cuDNN + generated kernels"
                                : "oneDNN + generated kernels");
    {
      unsigned weights = 0, fromModel = 0;
      for (const tofu::ProblemTensor &t : p.tensors)
        if (t.role == tofu::TensorRole::Weight) {
          ++weights;
          fromModel += training.initialValues.count(t.name) > 0;
        }
      if (!trainer.resumed() && fromModel > 0)
        llvm::outs() << fmt::format("weights: {} of {} from the model's initializers{}\n",
                                    fromModel, weights,
                                    fromModel < weights ? ", the rest drawn" : "");
      else if (!trainer.resumed() && !onnxFile.empty())
        llvm::outs() << fmt::format("weights: the model has no initial values; all {} drawn "
                                    "(synthetic, from --seed)\n",
                                    weights);
    }
    if (ds)
      llvm::outs() << fmt::format(
          "data: {}, {} samples; batch {}, {} steps per epoch ({} "
          "samples dropped), shuffled per epoch from seed {}; {}\n",
          ds->description, ds->samples, trainer.dataBatch(), trainer.stepsPerEpoch(),
          ds->samples - trainer.stepsPerEpoch() * trainer.dataBatch(), unsigned(seed), [&] {
            std::string f;
            for (const tofu::DataBinding &b : trainer.bindings())
              f += (f.empty() ? "" : ", ") + b.array + " -> " + b.input;
            return f;
          }());
    if (const tofu::DataSet *eds = trainer.evalDataSet())
      llvm::outs() << fmt::format("eval: {}, {} samples, forward only on {} workers (the "
                                  "training plan's cuts)\n",
                                  eds->description, eds->samples, unsigned(workers));
    if (fused.folded > 0)
      llvm::outs() << fmt::format("fusion: {} element-wise nodes folded into their readers ({} "
                                  "fused kernels, e.g. {})\n",
                                  fused.folded, fused.chains.size(), fused.chains.front());
    llvm::outs() << fmt::format(
        "kernels: {} ({} units, {} compiled now, {} from the cache) in "
        "{:.2f} s; {} op instances on library calls{}, {} on the "
        "interpreter\n",
        cs.kernels, cs.units, cs.unitsCompiled, cs.units - cs.unitsCompiled, cs.seconds, bs.library,
        bs.libraryDeclined > 0
            ? fmt::format(" ({} more the library declined: generated)", bs.libraryDeclined)
            : std::string(),
        bs.interpreted);
    if (!terminal)
      llvm::outs() << (logEvery > 1
                           ? fmt::format("\n| step | mean loss of {} steps | mean "
                                         "seconds |\n| ---: | ---: | ---: |\n",
                                         unsigned(logEvery))
                           : std::string("\n| step | loss | seconds |\n| ---: | ---: | ---: |\n"));
    llvm::outs().flush();
  }
  Printer printer(trainer, json, terminal);
  if (llvm::Error e = trainer.train(printer)) {
    printer.closeLine();
    return fail(std::move(e));
  }
  printer.closeLine();
  if (!saveDir.empty()) {
    auto saved = trainer.save(saveDir);
    if (!saved)
      return fail(saved.takeError());
    if (!json && group->rank() == 0)
      llvm::outs() << (saved->tiles == 0
                           ? fmt::format("saved {} tensors ({} steps trained) to {}\n",
                                         saved->tensors, saved->stepsTrained, saved->path)
                           : fmt::format("saved {} tensors as {} tiles ({:.2f} MiB, {} steps "
                                         "trained) from {} processes to {}\n",
                                         saved->tensors, saved->tiles, saved->bytes / 1048576.0,
                                         saved->stepsTrained, group->size(), saved->path));
  }
  const std::vector<double> &losses = trainer.losses();
  const std::vector<double> &stepSeconds = trainer.stepSeconds();
  const int64_t moved = trainer.bytesMoved();
  const std::vector<int64_t> peaks = engine.arenaBytes();
  const tofu::ProcessMemory pm = trainer.processMemory();
  const double med = median(stepSeconds);
  int status = moved == predicted ? 0 : 1;

  // --verify: the first step unpartitioned on the same engine.
  nlohmann::json verifyJson;
  std::optional<tofu::VerifyReport> checked;
  if (verify) {
    auto v = trainer.verify(tolerance);
    if (!v)
      return fail(v.takeError());
    checked = std::move(*v);
    if (!checked->passed)
      status = 1;
    verifyJson = {{"passed", checked->passed},
                  {"largest_relative_difference", checked->worst},
                  {"non_finite_tensor", checked->nonFiniteTensor},
                  {"worst_tensor", checked->worstTensor},
                  {"tolerance", checked->tolerance},
                  {"tensors_compared", checked->compared},
                  {"verdict", checked->verdict}};
    if (checked->noiseMeasured) {
      verifyJson["float32_noise"] = checked->noise;
      verifyJson["noisy_tensors"] = checked->noisy;
    }
  }

  if (json || !metricsFile.empty()) {
    nlohmann::json j;
    j["model"] = name;
    j["workers"] = unsigned(workers);
    j["optimizer"] = std::string(optimizer);
    j["lr"] = lr;
    j["lr_schedule"] = hyper.schedule.str();
    j["warmup"] = hyper.schedule.warmup;
    j["weight_decay"] = hyper.weightDecay;
    {
      std::vector<double> rates; // the learning rate of each step of this run
      for (unsigned st = 0; st < stepCount; ++st)
        rates.push_back(hyper.schedule.at(lr, trainer.stepsBefore() + st));
      j["lr_per_step"] = rates;
    }
    j["batch"] = int64_t(batch);
    j["steps"] = stepCount;
    j["step_seconds"] = stepSeconds;
    j["loss"] = losses;
    j["median_step_seconds"] = med;
    j["samples_per_second"] = med > 0 ? double(batch) / med : 0.0;
    j["worker_peak_bytes"] = peaks;
    if (group->distributed()) {
      j["processes"] = group->size();
      j["mpi_transport"] = std::string(mpiTransport);
      j["process_arena_bytes"] = pm.arena;
      j["process_resident_before_engine_bytes"] = pm.residentBefore;
      j["process_peak_resident_bytes"] = pm.residentPeak;
      j["process_verify_copy_bytes"] = pm.verifyCopies; // the tiles --verify keeps from step 1
    }
    j["single_worker_peak_bytes"] = onePeak;
    j["bytes_moved"] = moved;
    j["predicted_bytes"] = predicted;
    j["step_iterations"] = tofu::stepIterations(engine.program());
    if (ds) {
      j["data"] = ds->description;
      j["samples"] = ds->samples;
      j["steps_per_epoch"] = trainer.stepsPerEpoch();
      // Batches assembled ahead, while the previous step ran: the time the steps still
      // waited for them, and the time spent assembling a batch that was not ready.
      j["data_wait_seconds"] = trainer.dataWaitSeconds();
      j["data_assemble_seconds"] = trainer.dataAssembleSeconds();
    }
    if (const tofu::Engine *ee = trainer.evalEngine()) {
      nlohmann::json evals = nlohmann::json::array();
      for (const tofu::EvalRecord &e : trainer.evaluations())
        evals.push_back({{"step", e.step},
                         {"epoch", e.epoch},
                         {"loss", e.score.loss()},
                         {"accuracy", e.score.accuracy()},
                         {"samples", e.score.rows},
                         {"seconds", e.seconds}});
      j["eval"] = evals;
      j["eval_arena_bytes"] = ee->arenaBytes();
    }
    j["compile_seconds"] = cs.seconds;
    j["engine_build_seconds"] = trainer.buildSeconds();
    j["kernels"] = cs.kernels;
    j["fused_nodes"] = fused.folded;
    j["library_instances"] = bs.library;
    j["library_declined"] = bs.libraryDeclined;
    j["library_scratch_bytes"] = bs.extraBytes;
    j["kernel_units_compiled"] = cs.unitsCompiled;
    if (verify)
      j["verify"] = verifyJson;
    if (profileTop > 0) {
      nlohmann::json perWorker = nlohmann::json::array();
      for (const std::vector<tofu::NodeTime> &worker : engine.profile()) {
        nlohmann::json nodes = nlohmann::json::array();
        for (const tofu::NodeTime &n : worker)
          nodes.push_back({{"node", n.node},
                           {"op", n.op},
                           {"kernel", n.kernel},
                           {"compute_seconds", n.computeSeconds / stepCount},
                           {"copy_seconds", n.copySeconds / stepCount},
                           {"wait_seconds", n.waitSeconds / stepCount}});
        perWorker.push_back(nodes);
      }
      j["profile"] = perWorker; // per worker, per node in plan order
    }
    if (!metricsFile.empty() && group->rank() == 0) {
      std::ofstream f(metricsFile);
      f << j.dump(1) << "\n";
      if (!f)
        return fail("cannot write " + metricsFile);
    }
    if (json) {
      llvm::outs() << j.dump(2) << "\n";
      return status;
    }
  }
  llvm::outs() << fmt::format("\nloss {:.6f} -> {:.6f} over {} steps; median step {:.4f} s, {:.1f} "
                              "samples/s\n",
                              losses.front(), losses.back(), stepCount, med,
                              med > 0 ? double(batch) / med : 0.0);
  if (losses.size() >= 20) { // one batch's loss is noisy: the trend over windows
    auto mean = [](auto from, auto to) {
      return std::accumulate(from, to, 0.0) / double(to - from);
    };
    llvm::outs() << fmt::format("mean loss of the first 10 steps {:.4f}, of the last 10 {:.4f}\n",
                                mean(losses.begin(), losses.begin() + 10),
                                mean(losses.end() - 10, losses.end()));
  }
  llvm::outs() << fmt::format("bytes moved per step {} (the plan predicts {}: {})\n", moved,
                              predicted, moved == predicted ? "equal" : "DIFFERENT");
  if (group->distributed()) {
    llvm::outs() << "\n| worker (process) | planned arena | allocated by its process | / "
                    "(single-worker peak / k) | process resident: before the engine | peak "
                    "training | growth |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (unsigned w = 0; w < workers; ++w)
      llvm::outs() << fmt::format(
          "| {} | {} | {} | {:.3f} | {} | {} | {} |\n", w, tofu::humanBytes(double(peaks[w])),
          tofu::humanBytes(double(pm.arena[w])), double(peaks[w]) * workers / double(onePeak),
          tofu::humanBytes(double(pm.residentBefore[w])),
          tofu::humanBytes(double(pm.residentPeak[w])),
          tofu::humanBytes(double(pm.residentPeak[w] - pm.residentBefore[w])));
  } else {
    llvm::outs() << "\n| worker | peak memory (arena) | / (single-worker peak / k) |\n| ---: | "
                    "---: | ---: |\n";
    for (unsigned w = 0; w < workers; ++w)
      llvm::outs() << fmt::format("| {} | {} | {:.3f} |\n", w, tofu::humanBytes(double(peaks[w])),
                                  double(peaks[w]) * workers / double(onePeak));
  }
  llvm::outs() << fmt::format("single-worker peak: {}\n", tofu::humanBytes(double(onePeak)));
  {
    const std::vector<int64_t> &scratch = bs.extraBytes;
    int64_t most = scratch.empty() ? 0 : *std::max_element(scratch.begin(), scratch.end());
    if (group->distributed()) {
      const std::vector<int64_t> all = group->allGather(most);
      most = *std::max_element(all.begin(), all.end());
    }
    if (most > 0)
      llvm::outs() << fmt::format("scratch space beside the arenas (library calls, kernel "
                                  "temporaries): {} per worker (at most)\n",
                                  tofu::humanBytes(double(most)));
  }
  if (checked) {
    const tofu::VerifyReport &v = *checked;
    llvm::outs() << fmt::format(
        "\nverify: {} (the first step against the unpartitioned step on the same engine: "
        "largest relative difference {:.3g} over the loss and {} updated weights and optimiser "
        "states, at '{}'; tolerance {:.0e}){}\n",
        v.verdict == "passed"   ? "PASSED"
        : v.verdict == "failed" ? "FAILED"
                                : "UNDECIDED",
        v.worst, v.compared - 1, v.worstTensor, v.tolerance,
        v.nonFiniteTensor.empty()
            ? ""
            : fmt::format("; the step made '{}' NaN or infinite", v.nonFiniteTensor));
    if (v.noiseMeasured) {
      const std::string how = kernelsMode == "compiled" ? "generated kernels for library calls"
                                                        : "library calls for generated kernels";
      if (v.verdict == "failed")
        llvm::outs() << fmt::format(
            "verify: the unpartitioned step in another summation order ({}) reproduces itself "
            "within the tolerance (largest relative difference {:.3g}): the partition, not "
            "rounding, makes the difference\n",
            how, v.noise);
      else
        llvm::outs() << fmt::format(
            "verify: this step is ill-conditioned in float32: the unpartitioned step in another "
            "summation order ({}) differs from itself by up to {:.3g}, on {} of the {} tensors, "
            "so rounding alone moves it beyond the tolerance and float32 cannot decide; "
            "--kernels interp --verify compares the partitioned step exactly, in double "
            "precision\n",
            how, v.noise, v.noisy, v.compared);
    }
  }
  if (profileTop > 0) {
    const auto &profile = engine.profile();
    llvm::outs()
        << "\n| per step | compute s | copies s | waiting s |\n| ---: | ---: | ---: | ---: |\n";
    for (unsigned w = 0; w < profile.size(); ++w) {
      double compute = 0, copy = 0, wait = 0;
      for (const tofu::NodeTime &n : profile[w])
        compute += n.computeSeconds, copy += n.copySeconds, wait += n.waitSeconds;
      llvm::outs() << fmt::format("| worker {} | {:.4f} | {:.4f} | {:.4f} |\n", w,
                                  compute / stepCount, copy / stepCount, wait / stepCount);
    }
    std::vector<tofu::NodeTime> nodes = profile[0];
    std::sort(nodes.begin(), nodes.end(), [](const auto &a, const auto &b) {
      return a.computeSeconds + a.copySeconds + a.waitSeconds >
             b.computeSeconds + b.copySeconds + b.waitSeconds;
    });
    llvm::outs() << fmt::format(
        "\nworker 0's {} slowest nodes, per step:\n\n| node | op | kernel | "
        "compute ms | copy ms | wait ms |\n| --- | --- | --- | ---: | ---: | "
        "---: |\n",
        std::min<size_t>(profileTop, nodes.size()));
    for (size_t i = 0; i < nodes.size() && i < profileTop; ++i)
      llvm::outs() << fmt::format(
          "| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} |\n", nodes[i].node, nodes[i].op,
          nodes[i].kernel, 1e3 * nodes[i].computeSeconds / stepCount,
          1e3 * nodes[i].copySeconds / stepCount, 1e3 * nodes[i].waitSeconds / stepCount);
  }
  return status;
}

/// --infer: the forward graph once on the given inputs; every output reported and written.
int runInference(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                 const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                 const tofu::InputArrays &inputs) {
  const bool json = format == "json";
  auto planned = tofu::planForEngine(p, exec, memory, g.outputs, fusion);
  if (!planned)
    return fail(name + ": " + llvm::toString(planned.takeError()));
  auto engine =
      makeEngine(planned->fused.problem, planned->fused.plan, planned->memory, engineOptions());
  if (!engine)
    return fail(name + ": " + llvm::toString(engine.takeError()));
  // Weights: the model's initial values, else drawn; then --load over them.
  const tofu::TrainingData values(p, "", seed, 0.1, g.constants, false, &g.initialValues);
  for (unsigned t : values.tensors())
    (*engine)->setTiles(t,
                        [&](const tofu::Box &tile, float *out) { values.fill(t, 0, tile, out); });
  if (!loadDir.empty()) {
    auto c = tofu::CheckpointReader::open(loadDir);
    if (!c)
      return fail(llvm::toString(c.takeError()));
    if (llvm::Error e = tofu::restore(**engine, *c, /*forwardOnly=*/true))
      return fail(c->path() + ": " + llvm::toString(std::move(e)));
  }
  // Inputs by name, each of its tensor's exact shape.
  std::set<std::string> given;
  for (const auto &[input, array] : inputs.arrays) {
    const tofu::DataArray *a = &array;
    const std::string &file = a->path;
    int t = -1;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == input)
        t = static_cast<int>(i);
    const tofu::TensorInfo *info = g.tensor(input);
    if (t < 0 && info && info->role == tofu::TensorRole::Input) {
      // An input no op reads: the importer took its values as a constant (a shape, axes).
      given.insert(input);
      continue;
    }
    if (t < 0 || p.tensors[t].producer >= 0 || p.tensors[t].role != tofu::TensorRole::Input)
      return fail(fmt::format("--input: the model has no input '{}'", input), 2);
    given.insert(input);
    if (a->shape != p.tensors[t].shape)
      return fail(fmt::format("--input {}: {} has shape [{}]; the input's is [{}]", input, file,
                              fmt::join(a->shape, ", "), fmt::join(p.tensors[t].shape, ", ")),
                  2);
    // The array as one batch: row r is its sample r, values as they are.
    std::vector<int64_t> rows(static_cast<size_t>(a->samples()));
    std::iota(rows.begin(), rows.end(), 0);
    (*engine)->setTiles(static_cast<unsigned>(t), [&](const tofu::Box &tile, float *out) {
      tofu::fillBatch(*a, rows, p.tensors[t].shape, tile, /*raw=*/true, {}, out);
    });
  }
  std::string missing;
  for (const tofu::ProblemTensor &t : p.tensors)
    if (t.producer < 0 && t.role == tofu::TensorRole::Input && !t.shape.empty() &&
        !given.count(t.name) && !g.constants.count(t.name) && !g.initialValues.count(t.name))
      missing +=
          (missing.empty() ? "" : ", ") + fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", "));
  if (!missing.empty())
    return fail(name + ": --infer needs a value for every data input; --input gives none for " +
                    missing,
                2);
  // The output folder before the step, so that a step is never run for nothing.
  if (!outputDir.empty() && group->rank() == 0)
    if (std::error_code ec = std::error_code();
        !std::filesystem::create_directories(std::string(outputDir), ec) && ec)
      return fail(fmt::format("--output-dir {}: {}", std::string(outputDir), ec.message()), 2);
  auto r = (*engine)->step();
  if (!r)
    return fail(name + ": " + llvm::toString(r.takeError()));
  nlohmann::json j;
  j["model"] = name;
  j["workers"] = unsigned(workers);
  j["seconds"] = r->seconds;
  j["bytes_moved"] = group->sum(r->bytesMoved);
  if (!json)
    llvm::outs() << fmt::format("{}: forward on {} workers in {:.4f} s\n\n| output | shape | min | "
                                "max | mean | file |\n| --- | --- | ---: | ---: | ---: | --- |\n",
                                name, unsigned(workers), r->seconds);
  for (const std::string &out : g.outputs) {
    unsigned t = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == out)
        t = i;
    const tofu::Tensor x = tofu::wholeTensor(**engine, t, *group);
    std::string file;
    if (!outputDir.empty()) {
      std::string safe = out;
      for (char &c : safe)
        if (c == '/' || c == '\\' || c == ':')
          c = '_';
      file = outputDir + "/" + safe + ".npy";
      if (group->rank() == 0)
        if (llvm::Error e =
                tofu::writeNpy(file, x.shape, std::vector<float>(x.data.begin(), x.data.end())))
          return fail(llvm::toString(std::move(e)));
    }
    double lo = x.data.empty() ? 0 : x.data[0], hi = lo, sum = 0;
    for (double v : x.data)
      lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    const double mean = x.data.empty() ? 0 : sum / double(x.data.size());
    j["outputs"][out] = {
        {"shape", x.shape}, {"file", file}, {"min", lo}, {"max", hi}, {"mean", mean}};
    if (!json)
      llvm::outs() << fmt::format("| {} | [{}] | {:.6g} | {:.6g} | {:.6g} | {} |\n", out,
                                  fmt::join(x.shape, ", "), lo, hi, mean, file);
  }
  if (json)
    llvm::outs() << j.dump(2) << "\n";
  return 0;
}

int run(int argc, char **argv) {
  cl::HideUnrelatedOptions(runCategory);
  // Bad usage exits 2, as --help says (llvm's parser would exit 1).
  const bool parsed = cl::ParseCommandLineOptions(
      argc, argv,
      "tofu-run - train a model partitioned across workers (threads, or processes under mpirun) "
      "on the CPU or CUDA engine, and "
      "check it against the unpartitioned run\n\n"
      "  tofu-run --model NAME [--batch B] --workers K [--steps N] [--verify]\n"
      "  tofu-run --graph FILE.json --workers K [--steps N] [--verify]\n"
      "  tofu-run --onnx FILE.onnx [--batch B] --workers K [--steps N] [--verify]\n"
      "  tofu-run --onnx FILE.onnx --batch B --workers K --data DIR|NAME=FILE,... [--epochs E] "
      "[--eval test|PATH] [--optimizer momentum]\n"
      "  tofu-run --onnx FILE.onnx --workers K --infer --input NAME=FILE.npy|.pb,... [--output-dir "
      "DIR]\n"
      "  mpirun -np K tofu-run --backend mpi --model NAME [--steps N] [--verify]\n"
      "  mpirun -np K tofu-run --backend nccl --model NAME [--steps N] [--verify]  (a GPU each)\n\n"
      "Kernels are generated from the ops' TDL, compiled by the host C++ compiler ($CXX, else "
      "c++) and cached in $TOFU_KERNEL_CACHE (default ~/.cache/tofu/kernels): a second run "
      "compiles nothing. Data comes from a data set (--data DIR or NAME=FILE,...: IDX or .npy "
      "arrays, shuffled per epoch from --seed) or is synthetic: by default a fresh batch every "
      "step, labelled by a fixed random teacher (--seed), so the loss falls as the model learns "
      "it; each worker writes only its own tiles of every value. An ONNX model's initializers "
      "are its initial weights.\n\n" +
          tofu::zooHelp() +
          "\n\nA graph whose output is a prediction gets a loss (softmax cross-entropy for rank-2 "
          "logits, else MSE). Exit status: 0 when every step ran, moved the predicted bytes (and, "
          "with --verify, matched), 1 "
          "otherwise, 2 on bad usage.\n",
      &llvm::errs());
  if (!parsed)
    return 2;
  if (int(!model.empty()) + int(!graphFile.empty()) + int(!onnxFile.empty()) != 1)
    return fail("give exactly one of --model, --graph or --onnx (see --help)", 2);
  // The backends this build links (runtime/backend_registry.h); the default is the first.
  const std::vector<std::string> have = tofu::backendNames();
  if (have.empty())
    return fail("this build has no backend", 1);
  if (backend.empty())
    backend = have.front();
  const tofu::BackendEntry *entry = tofu::findBackend(backend);
  if (!entry) {
    std::string list;
    for (const std::string &b : have)
      list += (list.empty() ? "" : ", ") + b;
    return fail("--backend " + backend + " is not in this build (it has: " + list + ")", 2);
  }
  if (entry->processes) {
    group = &entry->processes(argc, argv);
    if (workers == 0)
      workers = static_cast<unsigned>(group->size());
    if (workers != static_cast<unsigned>(group->size()))
      return fail(fmt::format("--workers {} but mpirun started {} processes: one process runs "
                              "each worker (mpirun -np {})",
                              unsigned(workers), group->size(), unsigned(workers)),
                  2);
  }
  if (std::string bad = tofu::checkSettings(*entry, backendSettings()); !bad.empty())
    return fail(bad, 2);
  if (entry->processes) {
    if (kernelsMode == "interp")
      return fail("--kernels interp is the one-process reference executor; use --backend cpu", 2);
    // One report: the first process prints, the others only their errors.
    if (group->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
      return fail("cannot silence the standard output of process " + std::to_string(group->rank()));
  }
  if (workers == 0)
    return fail("--workers K is required (K >= 1)", 2);
  if (workers > kMaxEngineWorkers && !entry->processes)
    return fail(fmt::format("--workers {}: the {} engine runs every worker in this process (a "
                            "thread and an arena each) and takes at most {}; more workers run "
                            "as processes (--backend mpi)",
                            unsigned(workers), std::string(backend), kMaxEngineWorkers),
                2);
  if (workers > tofu::kMaxWorkers)
    return fail(fmt::format("--workers must be at most {} (the search and the execution plans "
                            "are built for at most {} workers)",
                            tofu::kMaxWorkers, tofu::kMaxWorkers),
                2);
  {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (threadsPerWorker < 0 || threadsPerWorker > 4 * cores)
      return fail(fmt::format("--worker-threads must be 0 (cores / workers) to {} (4 per core "
                              "of this machine)",
                              4 * cores),
                  2);
  }
  if (tolerance.getNumOccurrences() > 0 && !(tolerance >= 0 && std::isfinite(tolerance)))
    return fail("--tolerance must be a finite number at least 0", 2);
  if (tolerance.getNumOccurrences() > 0 && !verify && kernelsMode != "interp")
    return fail("--tolerance applies to --verify (and to --kernels interp's comparison)", 2);
  if (tf32 && !entry->gpu)
    return fail("--tf32 is for --backend cuda", 2);
  if (entry->gpu && kernelsMode == "interp")
    return fail("--kernels interp is the CPU reference executor; use --backend cpu", 2);
  const std::optional<tofu::Optimizer> optimizerKind = tofu::optimizerNamed(optimizer);
  if (!optimizerKind)
    return fail("--optimizer must be sgd, momentum, nesterov, adam or adamw", 2);
  if (momentumOpt.getNumOccurrences() > 0 && *optimizerKind != tofu::Optimizer::Momentum &&
      *optimizerKind != tofu::Optimizer::Nesterov)
    return fail("--momentum is for --optimizer momentum or nesterov", 2);
  if (!(momentumOpt >= 0 && momentumOpt < 1))
    return fail("--momentum must be in [0, 1)", 2);
  if (weightDecayOpt.getNumOccurrences() > 0 &&
      !(weightDecayOpt >= 0 && weightDecayOpt < 1e6 && std::isfinite(weightDecayOpt)))
    return fail("--weight-decay must be a finite number at least 0", 2);
  if (!lrScheduleOpt.empty())
    if (auto s = tofu::parseLrSchedule(lrScheduleOpt); !s)
      return fail(llvm::toString(s.takeError()), 2);
  if (warmupOpt >= (1u << 31))
    return fail("--warmup must be below 2^31 steps", 2);
  if (kernelsMode != "compiled" && kernelsMode != "generated" && kernelsMode != "interp")
    return fail("--kernels must be compiled, generated or interp", 2);
  if (format != "table" && format != "json")
    return fail("--format must be table or json", 2);
  if (infer) {
    for (const auto *o : {&verify, &kernelReportOpt})
      if (o->getNumOccurrences() > 0)
        return fail(fmt::format("--{} is for training runs, not --infer", std::string(o->ArgStr)),
                    2);
    if (!saveDir.empty() || steps.getNumOccurrences() > 0 || dataMode.getNumOccurrences() > 0 ||
        optimizer.getNumOccurrences() > 0 || learningRate.getNumOccurrences() > 0 ||
        weightDecayOpt.getNumOccurrences() > 0 || lrScheduleOpt.getNumOccurrences() > 0 ||
        warmupOpt.getNumOccurrences() > 0 || momentumOpt.getNumOccurrences() > 0)
      return fail("--infer runs the forward graph once: --save, --steps, --data, --optimizer, "
                  "--lr, --lr-schedule, --warmup, --momentum and --weight-decay are for training",
                  2);
    if (kernelsMode == "interp")
      return fail("--infer runs on the engine (--kernels compiled or generated)", 2);
  } else if (!inputOpt.empty() || !outputDir.empty()) {
    return fail("--input and --output-dir are for --infer", 2);
  }
  const bool realData = dataMode != "teacher" && dataMode != "fixed";
  if (realData && dataMode.empty())
    return fail("--data needs a data set (a directory or NAME=FILE,...), teacher or fixed", 2);
  for (const auto *o : {&feedOpt, &normalizeOpt, &evalOpt})
    if (!realData && o->getNumOccurrences() > 0)
      return fail(
          fmt::format("--{} is for training on a data set (--data PATH)", std::string(o->ArgStr)),
          2);
  if (!realData && epochs.getNumOccurrences() > 0)
    return fail("--epochs is for training on a data set (--data PATH); synthetic runs take "
                "--steps",
                2);
  if (epochs.getNumOccurrences() > 0 && steps.getNumOccurrences() > 0)
    return fail("give --epochs or --steps, not both", 2);
  if (epochs == 0)
    return fail("--epochs must be at least 1", 2);
  if (evalEvery.getNumOccurrences() > 0 && evalOpt.empty())
    return fail("--eval-every needs --eval", 2);
  if (logEvery == 0)
    return fail("--log-every must be at least 1", 2);
  if (realData && kernelsMode == "interp")
    return fail("--kernels interp runs one step on synthetic values; train on a data set with "
                "the compiled kernels",
                2);
  if (!normalizeOpt.empty()) {
    const size_t comma = normalizeOpt.find(',');
    char *end = nullptr;
    const std::string a = normalizeOpt.substr(0, comma);
    const std::string b = comma == std::string::npos ? "" : normalizeOpt.substr(comma + 1);
    normalization.mean = std::strtod(a.c_str(), &end);
    const bool meanOk = !a.empty() && *end == 0 && std::isfinite(normalization.mean);
    normalization.std = std::strtod(b.c_str(), &end);
    const bool stdOk =
        !b.empty() && *end == 0 && std::isfinite(normalization.std) && normalization.std > 0;
    if (!meanOk || !stdOk)
      return fail("--normalize must be MEAN,STD: two finite numbers, STD > 0 (e.g. "
                  "0.2860,0.3530)",
                  2);
  }
  if (learningRate.getNumOccurrences() > 0 && !(learningRate > 0 && std::isfinite(learningRate)))
    return fail("--lr must be a positive finite number", 2);
  if (steps == 0)
    return fail("--steps must be at least 1", 2);
  if (kernelsMode == "interp" && (!saveDir.empty() || !loadDir.empty()))
    return fail("--save and --load need the CPU engine (--kernels compiled or generated)", 2);
  if (kernelsMode == "interp" && steps != 1)
    return fail("--kernels interp runs one step (the reference); use compiled kernels to train", 2);
  // The --save folder must be one this run can write, before any training it would lose.
  if (!saveDir.empty()) {
    std::error_code ec;
    const std::filesystem::path savePath(saveDir.getValue());
    if (std::filesystem::exists(savePath, ec) && !std::filesystem::is_directory(savePath, ec))
      return fail(fmt::format("--save {}: it exists and is not a directory", saveDir.getValue()),
                  2);
    if (!tofu::makeDirs(saveDir))
      return fail(fmt::format("--save {}: cannot create the directory: {}", saveDir.getValue(),
                              std::strerror(errno)),
                  2);
    if (::access(saveDir.c_str(), W_OK | X_OK) != 0)
      return fail(fmt::format("--save {}: cannot write there: {}", saveDir.getValue(),
                              std::strerror(errno)),
                  2);
  }
  auto algorithm = tofu::parseAlgorithm(algo);
  if (!algorithm)
    return fail("unknown --algo '" + algo + "' (one of " + tofu::algorithmNames() + ")", 2);

  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto ops = tofu::findOpsDir(opsDir, opsDir.getNumOccurrences() > 0);
  if (!ops)
    return fail(llvm::toString(ops.takeError()), 2);
  auto lib = tofu::OpLibrary::load(*ops, diags);
  if (!lib) {
    diags.print(llvm::errs());
    return fail("cannot load the operator library: " + llvm::toString(lib.takeError()));
  }
  tofu::PipelineOptions pipeline;
  pipeline.train = *optimizerKind;
  pipeline.weightDecay = weightDecayOpt > 0;
  pipeline.lossOutput = lossOutput;
  if (infer)
    pipeline.train.reset(); // the forward graph
  pipeline.until = tofu::Stage::Execution;
  pipeline.search.workers = workers;
  pipeline.search.algorithm = *algorithm;
  // Under MPI the first process searches and hands its plan to the others.
  pipeline.plan = [&](const tofu::Problem &p) -> llvm::Expected<tofu::PartitionPlan> {
    llvm::Expected<tofu::PartitionPlan> plan = tofu::PartitionPlan();
    if (group->rank() == 0)
      plan = tofu::searchPlan(p, pipeline.search);
    if (!group->distributed())
      return plan;
    // A failed search fails rank 0, and fail() ends the job (the others wait in the broadcast).
    std::string text;
    if (group->rank() == 0) {
      if (!plan)
        return plan;
      text = tofu::encodePlan(*plan);
    }
    auto decoded = tofu::decodePlan(group->fromFirst(text), p);
    if (!decoded)
      return tofu::stringError("the first process's plan: " + llvm::toString(decoded.takeError()));
    return decoded;
  };
  // --infer's inputs, read before the import: an ONNX model takes their shapes (fixing its
  // dynamic dimensions) and the small integer values its ops need as constants.
  tofu::InputArrays inputArrays;
  if (infer) {
    auto read = tofu::readInputArrays(inputOpt);
    if (!read)
      return fail(llvm::toString(read.takeError()), 2);
    inputArrays = std::move(*read);
  }
  tofu::GraphSource source = {model,
                              graphFile,
                              onnxFile,
                              batch,
                              dataInputs,
                              dataInputs.getNumOccurrences() > 0,
                              batch.getNumOccurrences() > 0,
                              {}};
  if (!onnxFile.empty())
    source.givenInputs = inputArrays.forImport();
  auto pipelined = tofu::runPipeline(source, *lib, pipeline);
  if (!pipelined)
    return fail(llvm::toString(pipelined.takeError()));
  const std::string &name = pipelined->name;
  if (infer)
    return runInference(*pipelined->problem, pipelined->graph, name, pipelined->exec,
                        pipelined->memory, inputArrays);
  if (!pipelined->lossNote.empty() && format != "json")
    llvm::outs() << name << ": " << pipelined->lossNote << "\n";
  const tofu::Graph *t = &pipelined->graph;
  const std::string *loss = &pipelined->loss;
  const tofu::Problem &p = *pipelined->problem;
  const tofu::PartitionPlan *plan = &pipelined->plan;
  const tofu::ExecPlan &exec = pipelined->exec;
  const tofu::MemoryPlan &memory = pipelined->memory;
  if (!planJson.empty()) {
    std::ofstream f(planJson);
    f << tofu::execPlanJson(p, exec);
    if (!f)
      return fail("cannot write " + planJson);
  }
  if (dumpPlan)
    llvm::outs() << tofu::execPlanDump(p, exec) << "\n";
  const tofu::SingleWorker single = tofu::singleWorker(p, t->outputs);

  // --eval: the model's forward graph, planned as the training plan restricted to it.
  std::optional<EvalSetup> evalSetup;
  if (!evalOpt.empty()) {
    // The same source as training's (the same batch and data inputs), without the loss.
    std::string fwdName;
    auto fwd = tofu::loadGraph(source, *lib, &fwdName);
    if (!fwd)
      return fail(llvm::toString(fwd.takeError()));
    if (!lossOutput.empty())
      fwd->outputs = {lossOutput}; // the pipeline checked it is an output
    else if (fwd->outputs.size() > 1)
      fwd->outputs.resize(1);
    const tofu::TensorInfo *out = fwd->outputs.size() == 1 ? fwd->tensor(fwd->outputs[0]) : nullptr;
    if (!out || out->shape.size() != 2)
      return fail(name + ": --eval scores a classifier: a model whose one output is [batch, "
                         "classes] logits",
                  2);
    tofu::PipelineOptions forward;
    forward.until = tofu::Stage::Execution;
    forward.plan = [&](const tofu::Problem &sub) -> llvm::Expected<tofu::PartitionPlan> {
      auto restricted = tofu::restrictPlan(*plan, p, sub);
      if (restricted)
        restricted->totalBytes = tofu::CostModel(sub).bruteForceCost(restricted->steps);
      return restricted;
    };
    auto r = tofu::runPipeline(std::move(*fwd), fwdName, *lib, forward);
    if (!r)
      return fail("--eval: the forward graph: " + llvm::toString(r.takeError()));
    evalSetup.emplace();
    evalSetup->forward = std::move(*r);
    const tofu::Problem &ep = *evalSetup->forward.problem;
    for (unsigned i = 0; i < ep.tensors.size(); ++i)
      if (ep.tensors[i].name == evalSetup->forward.graph.outputs[0])
        evalSetup->logits = i;
  }
  if (kernelsMode != "interp")
    return runCompiled(p, *t, *loss, name, exec, memory, single,
                       tofu::CostModel(p).bruteForceCost(plan->steps), plan->algorithm,
                       evalSetup ? &*evalSetup : nullptr);

  if (tolerance < 0)
    tolerance = 1e-4;
  auto given = tofu::randomGraphInputs(p, seed);
  tofu::applyConstants(p, t->constants, given);
  auto start = std::chrono::steady_clock::now();
  auto result = tofu::runPlan(p, exec, given);
  if (!result)
    return fail(name + ": " + llvm::toString(result.takeError()));
  double runSeconds = seconds(start);
  const int64_t predicted = tofu::CostModel(p).bruteForceCost(plan->steps);

  llvm::outs() << fmt::format("{} training step ({}, batch {}): {} nodes on {} workers, algorithm "
                              "{}, CPU executor\n",
                              name, optimizer, batch, p.nodes.size(), workers, plan->algorithm);
  llvm::outs() << fmt::format("partitioned step: {:.3f} s; bytes moved {} (the plan predicts {}: "
                              "{})\n",
                              runSeconds, result->bytesMoved, predicted,
                              result->bytesMoved == predicted ? "equal" : "DIFFERENT");
  const int64_t onePeak = single.memory.largestPeak();
  llvm::outs() << fmt::format("\n| worker | peak memory | / (single-worker peak / k) | tiles |\n"
                              "| ---: | ---: | ---: | ---: |\n");
  for (unsigned w = 0; w < workers; ++w)
    llvm::outs() << fmt::format("| {} | {} | {:.3f} | {} |\n", w,
                                tofu::humanBytes(double(memory.workers[w].peak)),
                                double(memory.workers[w].peak) * workers / double(onePeak),
                                tofu::humanBytes(double(memory.workers[w].tileBytes)));
  llvm::outs() << fmt::format("single-worker peak: {}\n", tofu::humanBytes(double(onePeak)));
  int status = result->bytesMoved == predicted ? 0 : 1;
  if (verify) {
    start = std::chrono::steady_clock::now();
    auto reference = tofu::runReference(p, given);
    if (!reference)
      return fail(name + ": the unpartitioned step: " + llvm::toString(reference.takeError()));
    llvm::outs() << fmt::format("\nunpartitioned step: {:.3f} s\n\n| tensor | role | largest "
                                "relative difference |\n| --- | --- | ---: |\n",
                                seconds(start));
    double worst = 0, worstAll = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i) {
      double e = tofu::maxRelativeError(result->tensors[i], (*reference)[i]);
      worstAll = std::max(worstAll, e);
      const tofu::ProblemTensor &pt = p.tensors[i];
      bool reported = pt.role == tofu::TensorRole::OptimizerState ||
                      std::find(t->outputs.begin(), t->outputs.end(), pt.name) != t->outputs.end();
      if (!reported || pt.producer < 0)
        continue;
      worst = std::max(worst, e);
      llvm::outs() << fmt::format("| {} | {} | {:.3g} |\n", pt.name, tofu::roleName(pt.role), e);
    }
    bool ok = worst <= tolerance && worstAll <= tolerance;
    llvm::outs() << fmt::format("\nverify: {} (largest relative difference {:.3g} over the "
                                "outputs and updated weights, {:.3g} over every tensor; "
                                "tolerance {:.0e})\n",
                                ok ? "PASSED" : "FAILED", worst, worstAll, double(tolerance));
    if (!ok)
      status = 1;
  }
  return status;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    // Under MPI the other processes wait on this one: fail() ends the job.
    return fail("out of memory");
  }
}
