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
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "codegen/exec_plan.h"
#include "codegen/fusion.h"
#include "codegen/memory_plan.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"
#include "nlohmann/json.hpp"
#include "runtime/cpu_executor.h"
#include "runtime/data_feed.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "runtime/training_data.h"
#ifdef TOFU_CUDA_BACKEND
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/kernel_report.h"
#endif
#ifdef TOFU_MPI_BACKEND
#include <mpi.h>

#include "runtime/mpi/mpi_backend.h"
#endif
#if defined(TOFU_MPI_BACKEND) && defined(TOFU_CUDA_BACKEND)
#define TOFU_NCCL_BACKEND
#include "runtime/nccl/nccl_backend.h"
#endif
#include "analysis/checked.h"
#include "api/pipeline.h"
#include "search/report.h"
#include "search/search.h"
#include "support/files.h"
#include "support/units.h"
#include "tdlc/input_arrays.h"

namespace cl = llvm::cl;

namespace {

cl::OptionCategory runCategory("tofu-run options");
cl::opt<std::string> model("model", cl::desc("A zoo model (see --help)"),
                           cl::value_desc("NAME"), cl::cat(runCategory));
cl::opt<std::string> graphFile("graph", cl::desc("A graph in JSON"), cl::value_desc("FILE.json"),
                               cl::cat(runCategory));
cl::opt<std::string> onnxFile("onnx", cl::desc("An ONNX model"), cl::value_desc("FILE.onnx"),
                              cl::cat(runCategory));
cl::opt<unsigned> dataInputs("data-inputs", cl::desc("With --onnx: leading graph inputs that are "
                                                     "data (default 1)"),
                             cl::init(1), cl::cat(runCategory));
cl::opt<int64_t> batch("batch", cl::desc("Batch size for zoo and ONNX models (default 2)"),
                       cl::init(2), cl::cat(runCategory));
cl::opt<unsigned> workers("workers", cl::desc("Workers to partition across (required; under mpirun, the process count)"),
                          cl::value_desc("K"), cl::init(0), cl::cat(runCategory));
cl::opt<std::string> algo("algo", cl::desc("The search algorithm (default tofu)"), cl::init("tofu"),
                          cl::cat(runCategory));
#ifdef TOFU_CPU_BACKEND
constexpr const char *kDefaultBackend = "cpu";
#else
constexpr const char *kDefaultBackend = "cuda";
#endif
cl::opt<std::string> backend("backend",
                             cl::desc("Executor: cpu (threads over host arenas), cuda (streams "
                                      "over arenas on one GPU; k workers share it), mpi (one "
                                      "process per worker, started by mpirun -np K; CPU "
                                      "kernels) or nccl (one process per worker and GPU under "
                                      "mpirun, regions over NCCL; CUDA kernels); the default "
                                      "is the first this build has"),
                             cl::init(kDefaultBackend), cl::cat(runCategory));
cl::opt<std::string> mpiTransport("mpi-transport",
                                  cl::desc("With --backend mpi: how regions cross processes: "
                                           "sendrecv (default: matched sends and receives) or "
                                           "get (one-sided reads of the owner's arena, an RMA "
                                           "window, with a barrier at every synchronisation "
                                           "point)"),
                                  cl::init("sendrecv"), cl::cat(runCategory));
cl::opt<bool> tf32("tf32", cl::desc("With --backend cuda or nccl: let cuBLAS and cuDNN use TF32 tensor "
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
cl::opt<bool> infer("infer", cl::desc("Run the model's forward graph once, partitioned, on the "
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
cl::opt<std::string> outputDir("output-dir", cl::desc("With --infer: write each graph output to "
                                                      "DIR/<name>.npy (float32)"),
                               cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<std::string> lossOutput("loss-output",
                                cl::desc("A graph of several outputs trains on this one (default: "
                                         "the first)"),
                                cl::value_desc("NAME"), cl::cat(runCategory));
cl::opt<double> momentumOpt("momentum", cl::desc("With --optimizer momentum or nesterov: mu (default 0.9)"),
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
cl::opt<unsigned> epochs("epochs", cl::desc("With a data set: passes over it (default 1; or give "
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
cl::opt<unsigned> logEvery("log-every", cl::desc("Print a row every N steps: the mean loss and "
                                                 "step time of those N (default 1)"),
                           cl::init(1), cl::cat(runCategory));
/// The most workers the in-process engines (CPU, CUDA) run: each is a thread (or stream)
/// with its own arena in this process; 1024 take some 20 s and 3 GB to set up for an MLP.
constexpr unsigned kMaxEngineWorkers = 1024;

cl::opt<double> tolerance("tolerance", cl::desc("Largest relative difference --verify accepts "
                                                "(default 1e-3 on compiled kernels, float32; "
                                                "1e-4 with --kernels interp)"),
                          cl::init(-1), cl::cat(runCategory));
cl::opt<std::string> kernelsMode("kernels", cl::desc("compiled (default): oneDNN for matrix "
                                                     "products and convolutions, generated C++ "
                                                     "kernels for the rest, on float32 arenas; "
                                                     "generated: generated kernels only; interp: "
                                                     "one step with every op in the TDL "
                                                     "interpreter (double)"),
                                 cl::init("compiled"), cl::cat(runCategory));
cl::opt<unsigned> steps("steps", cl::desc("Training steps (default 1)"), cl::init(1),
                        cl::cat(runCategory));
cl::opt<double> learningRate("lr", cl::desc("Base learning rate (default 0.1 for sgd, 0.01 for momentum and nesterov, 0.001 for adam and adamw)"),
                             cl::init(-1), cl::cat(runCategory));
cl::opt<int> threadsPerWorker("worker-threads", cl::desc("OpenMP threads per worker (default: cores / "
                                                  "workers)"),
                              cl::init(0), cl::cat(runCategory));
cl::opt<bool> checking("check", cl::desc("Poison every buffer a step has not written with NaN "
                                         "(catches kernels or plans that read what they were "
                                         "not given)"),
                       cl::cat(runCategory));
cl::opt<std::string> saveDir("save", cl::desc("After the last step, write every weight and "
                                              "optimiser-state tensor to DIR/model.safetensors "
                                              "(with --backend mpi or nccl: each process its own tiles "
                                              "to DIR/tiles-G-R.safetensors, and an index "
                                              "DIR/index.json)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<std::string> loadDir("load", cl::desc("Start from the checkpoint in DIR (written by --save, "
                                              "at any worker count, by threads or processes; each "
                                              "worker reads only its own tiles)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<unsigned> profileTop("profile", cl::desc("Time every node on every worker; print each "
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
cl::opt<std::string> opsDir("ops", cl::desc("The operator library (default: $TOFU_OPS, else found beside the executable: its Bazel runfiles or PREFIX/share/tofu/ops, else ./ops)"), cl::init("ops"),
                            cl::value_desc("DIR"), cl::cat(runCategory));

/// With --backend mpi: this process among those mpirun started.
struct Processes {
  bool on = false;
  int rank = 0, size = 1;
};
Processes procs;

int fail(const std::string &msg, int code = 1) {
  if (!procs.on) {
    llvm::errs() << "tofu-run: " << msg << "\n";
    return code;
  }
  llvm::errs() << fmt::format("tofu-run: rank {} of {}: {}\n", procs.rank, procs.size, msg);
  llvm::errs().flush();
#ifdef TOFU_MPI_BACKEND
  // The others may be waiting on this process in a collective: end the whole job.
  MPI_Abort(MPI_COMM_WORLD, code);
#endif
  return code;
}

// Figures over every process (the value itself without MPI).
int64_t sumOverProcesses(int64_t x) {
#ifdef TOFU_MPI_BACKEND
  if (procs.on)
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
#endif
  return x;
}

std::vector<int64_t> gatherOverProcesses(int64_t x) {
  std::vector<int64_t> all(procs.size, x);
#ifdef TOFU_MPI_BACKEND
  if (procs.on)
    MPI_Allgather(&x, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
#endif
  return all;
}

/// Every process's `text`, on the first process (elsewhere: empty).
std::vector<std::string> gatherTextOnFirst(const std::string &text) {
  std::vector<std::string> out = {text};
#ifdef TOFU_MPI_BACKEND
  if (procs.on) {
    int n = static_cast<int>(text.size());
    std::vector<int> sizes(procs.size), starts(procs.size);
    MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<char> all;
    if (procs.rank == 0) {
      for (int r = 1; r < procs.size; ++r)
        starts[r] = starts[r - 1] + sizes[r - 1];
      all.resize(static_cast<size_t>(starts.back()) + sizes.back());
    }
    MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), starts.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    out.clear();
    for (int r = 0; procs.rank == 0 && r < procs.size; ++r)
      out.emplace_back(all.data() + starts[r], sizes[r]);
  }
#endif
  return out;
}

/// The first process's `text`, on every process.
std::string textFromFirst(std::string text) {
#ifdef TOFU_MPI_BACKEND
  if (procs.on) {
    uint64_t n = text.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    text.resize(n);
    MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  }
#endif
  return text;
}

/// The first process's `x`, on every process.
unsigned fromFirstProcess(unsigned x) {
#ifdef TOFU_MPI_BACKEND
  if (procs.on)
    MPI_Bcast(&x, 1, MPI_UNSIGNED, 0, MPI_COMM_WORLD);
#endif
  return x;
}

/// A whole tensor from the tiles every process holds (each element from a process that
/// holds it; get() leaves NaN where this process holds none).
tofu::Tensor wholeOverProcesses(const tofu::Engine &e, unsigned t) {
  tofu::Tensor x = e.get(t);
#ifdef TOFU_MPI_BACKEND
  if (procs.on) {
    std::vector<double> all(x.data.size() * procs.size);
    MPI_Allgather(x.data.data(), static_cast<int>(x.data.size()), MPI_DOUBLE, all.data(),
                  static_cast<int>(x.data.size()), MPI_DOUBLE, MPI_COMM_WORLD);
    for (size_t i = 0; i < x.data.size(); ++i)
      for (int r = 0; r < procs.size; ++r)
        if (!std::isnan(all[r * x.data.size() + i])) {
          x.data[i] = all[r * x.data.size() + i];
          break;
        }
  }
#endif
  return x;
}

/// The value of a rank-0 tensor, from whichever process holds it.
double scalarOverProcesses(const tofu::Engine &e, unsigned t) {
  return wholeOverProcesses(e, t).data.at(0);
}

/// The first tensor a step carries into the next (weights, optimiser state) that holds a
/// value that is not finite, over every process's tiles; empty when all are finite.
std::string firstNonFiniteCarried(const tofu::Problem &p, const tofu::Engine &e) {
  const auto &carries = e.carries();
  int64_t first = static_cast<int64_t>(carries.size()); // an index into carries
  for (size_t c = 0; c < carries.size() && first == int64_t(carries.size()); ++c)
    for (unsigned w : e.localWorkers())
      if (e.holdsTile(carries[c].second, w)) {
        const std::vector<float> tile = e.readTile(carries[c].second, w);
        if (!std::all_of(tile.begin(), tile.end(), [](float v) { return std::isfinite(v); })) {
          first = static_cast<int64_t>(c);
          break;
        }
      }
  const std::vector<int64_t> all = gatherOverProcesses(first);
  first = *std::min_element(all.begin(), all.end());
  return first < int64_t(carries.size()) ? p.tensors[carries[first].second].name : std::string();
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

/// The plan an engine runs: element-wise chains folded (codegen/fusion.h, unless
/// --fusion=false) and its memory planned again; `memory` is the unfused plan's.
struct EnginePlan {
  tofu::FusedPlan fused;
  tofu::MemoryPlan memory;
};
llvm::Expected<EnginePlan> enginePlan(const tofu::Problem &p, const tofu::ExecPlan &exec,
                                      const tofu::MemoryPlan &memory,
                                      const std::vector<std::string> &outputs) {
  EnginePlan r{fusion ? tofu::fuseElementwise(p, exec, outputs) : tofu::FusedPlan{p, exec, 0, {}},
               memory};
  if (fusion)
    r.memory = tofu::planMemory(r.fused.problem, r.fused.plan, outputs);
  if (std::string bad = tofu::checkMemoryPlan(r.memory); !bad.empty())
    return tofu::stringError("the fused plan's memory plan is unsound: " + bad);
  return r;
}

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

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// The backends this build has.
std::vector<std::string> backends() {
  std::vector<std::string> out;
#ifdef TOFU_CPU_BACKEND
  out.push_back("cpu");
#endif
#ifdef TOFU_CUDA_BACKEND
  out.push_back("cuda");
#endif
#ifdef TOFU_MPI_BACKEND
  out.push_back("mpi");
#endif
#ifdef TOFU_NCCL_BACKEND
  out.push_back("nccl");
#endif
  return out;
}

/// The work of one training step: the scheduled loops' iterations of every node over its
/// whole shapes (codegen/schedule.h), whatever the worker count and whichever library
/// computes a node. Its ratio between two batches is what a step's time should follow.
double stepIterations(const tofu::Program &program) {
  std::vector<std::optional<tofu::KernelSchedule>> schedules(program.kernels.size());
  double total = 0;
  for (const tofu::ProgramNode &node : program.nodes) {
    const tofu::InstOp &op = *program.kernels[node.kernel].op;
    auto &s = schedules[node.kernel];
    if (!s)
      s = tofu::scheduleKernel(op, tofu::ScheduleTarget::Cpp);
    total += tofu::scheduledIterations(op, *s, tofu::fullRanges(node.shapes));
  }
  return total;
}

/// The engine of --backend running `plan`.
/// `local`: the engine runs in this process alone (the unpartitioned reference of --verify).
llvm::Expected<std::unique_ptr<tofu::Engine>> makeEngine(const tofu::Problem &p,
                                                         const tofu::ExecPlan &plan,
                                                         const tofu::MemoryPlan &memory,
                                                         const tofu::EngineOptions &options,
                                                         bool local = false) {
#ifdef TOFU_MPI_BACKEND
  if (procs.on && !local) {
    auto program = tofu::buildProgram(p, plan, memory);
    if (!program)
      return program.takeError();
    // Every process imported the model and built the program on its own: they must agree.
    uint64_t h = std::hash<std::string>()(tofu::programDump(*program));
    uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the processes built different programs from the same "
                                     "model (were they given different options or operator "
                                     "libraries?)");
#ifdef TOFU_NCCL_BACKEND
    if (backend == "nccl") {
      tofu::NcclBackendOptions nccl;
      nccl.cuda.library = options.library;
      nccl.cuda.tf32 = tf32;
      return tofu::Engine::create(std::move(*program), tofu::makeNcclBackend(nccl), options);
    }
#endif
    tofu::MpiBackendOptions mpi;
    mpi.cpu.compile = options.compile;
    mpi.cpu.threadsPerWorker = options.threadsPerWorker;
    mpi.cpu.library = options.library;
    tofu::parseMpiTransport(mpiTransport, mpi.transport);
    return tofu::Engine::create(std::move(*program), tofu::makeMpiBackend(mpi), options);
  }
#endif
#ifdef TOFU_CUDA_BACKEND
  if (backend == "cuda" || backend == "nccl") { // nccl's local reference: this process's GPU
    auto program = tofu::buildProgram(p, plan, memory);
    if (!program)
      return program.takeError();
    tofu::CudaBackendOptions cuda;
#ifdef TOFU_NCCL_BACKEND
    if (backend == "nccl")
      cuda.device = tofu::ncclProcessDevice();
#endif
    cuda.library = options.library;
    cuda.tf32 = tf32;
    return tofu::Engine::create(std::move(*program), tofu::makeCudaBackend(cuda), options);
  }
#endif
#ifdef TOFU_CPU_BACKEND
  return tofu::Engine::create(p, plan, memory, options);
#else
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "this build has no CPU backend");
#endif
}

/// --save on one process: every tensor whole, in DIR/model.safetensors.
int saveWhole(const tofu::Engine &engine, const std::map<std::string, std::string> &metadata) {
  tofu::Checkpoint c = tofu::checkpointOf(engine);
  c.metadata = metadata;
  if (llvm::Error e = tofu::saveCheckpoint(saveDir, c))
    return fail(llvm::toString(std::move(e)));
  if (format != "json")
    llvm::outs() << fmt::format("saved {} tensors ({} steps trained) to {}\n", c.tensors.size(),
                                metadata.at("steps"), tofu::checkpointFile(saveDir));
  return 0;
}

/// --save under MPI: each process writes its own tiles, the first the index of them all
/// once every process's file is complete.
int saveTiles(const tofu::Engine &engine, const std::map<std::string, std::string> &metadata) {
  const unsigned generation = fromFirstProcess(tofu::nextCheckpointGeneration(saveDir));
  const std::vector<tofu::CheckpointTile> tiles = tofu::trainingTiles(engine);
  auto entries = tofu::writeTileFile(saveDir, tofu::tileFileName(generation, procs.rank), tiles);
  if (!entries)
    return fail(llvm::toString(entries.takeError()));
  int64_t bytes = 0;
  for (const tofu::CheckpointTile &t : tiles)
    bytes += static_cast<int64_t>(t.data.size()) * 4;
  bytes = sumOverProcesses(bytes);
  std::vector<std::string> parts = gatherTextOnFirst(tofu::encodeTileEntries(*entries));
  if (procs.rank == 0) {
    std::vector<tofu::TileEntry> all;
    for (const std::string &part : parts) {
      auto decoded = tofu::decodeTileEntries(part);
      if (!decoded)
        return fail(llvm::toString(decoded.takeError()));
      all.insert(all.end(), decoded->begin(), decoded->end());
    }
    if (llvm::Error e = tofu::writeCheckpointIndex(saveDir, generation, all, metadata))
      return fail(llvm::toString(std::move(e)));
    std::set<std::string> tensors;
    for (const tofu::TileEntry &e : all)
      tensors.insert(e.tensor);
    if (format != "json")
      llvm::outs() << fmt::format("saved {} tensors as {} tiles ({:.2f} MiB, {} steps trained) "
                                  "from {} processes to {}\n",
                                  tensors.size(), all.size(), bytes / 1048576.0,
                                  metadata.at("steps"), procs.size,
                                  tofu::checkpointIndexFile(saveDir));
  }
#ifdef TOFU_MPI_BACKEND
  MPI_Barrier(MPI_COMM_WORLD); // the checkpoint is whole when any process goes on
#endif
  return 0;
}

/// Trains on the engine: --steps steps, then the summary (and --verify's comparison).
int runCompiled(const tofu::Problem &p, const tofu::Graph &training, const std::string &loss,
                const std::string &name, const tofu::ExecPlan &exec,
                const tofu::MemoryPlan &memory, int64_t onePeak, int64_t predicted,
                const std::string &algorithm, const EvalSetup *evalSetup) {
  // The process's memory from here on: the values, the engine (arenas, kernels, input
  // tiles) and the steps, not the libraries, import, search and planning before.
  resetPeakResident();
  const int64_t residentBeforeEngine = currentResidentBytes();
  const bool json = format == "json";
  // mpirun hands its processes a terminal whatever its own output is: no progress line.
  const bool terminal = !json && !procs.on && ::isatty(STDOUT_FILENO);
  // --load: the checkpoint's metadata supplies the steps trained before and the
  // hyper-parameters this run does not give (a schedule continues where it stopped).
  unsigned stepsBefore = 0;
  std::optional<tofu::CheckpointReader> resumed;
  std::map<std::string, std::string> was; // the checkpoint's metadata
  if (!loadDir.empty()) {
    auto c = tofu::CheckpointReader::open(loadDir);
    if (!c)
      return fail(llvm::toString(c.takeError()));
    was = c->metadata();
    // Every number the run takes from the metadata must be one, in its range: a damaged or
    // hand-edited checkpoint stops here rather than training at a rate of 0.
    const struct {
      const char *key;
      double lo, hi; ///< [lo, hi)
      bool whole;
    } ranges[] = {{"steps", 0, 2147483648.0, true},  {"warmup", 0, 2147483648.0, true},
                  {"lr", 0, 1e300, false},           {"momentum", 0, 1, false},
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
        return fail(fmt::format("{}: metadata '{}' is '{}', not {} (the checkpoint is damaged)",
                                c->path(), r.key, it->second,
                                r.whole ? "a whole number of steps below 2^31"
                                : std::string(r.key) == "lr" ? "a positive finite rate"
                                : fmt::format("a number in [{}, {})", r.lo, r.hi)),
                    2);
    }
    if (auto it = was.find("steps"); it != was.end())
      stepsBefore = static_cast<unsigned>(std::strtoul(it->second.c_str(), nullptr, 10));
    if (auto it = was.find("optimizer"); it != was.end() && it->second != optimizer)
      return fail(fmt::format("{}: the checkpoint was trained with --optimizer {}, this run "
                              "uses {}: its state does not carry over (give --optimizer {})",
                              c->path(), it->second, std::string(optimizer), it->second),
                  2);
    resumed = std::move(*c);
  }
  // A hyper-parameter: the option where given, else the checkpoint's, else `otherwise`.
  auto hyperOf = [&](const cl::opt<double> &o, const char *key, double otherwise) {
    if (o.getNumOccurrences() > 0)
      return double(o);
    if (auto it = was.find(key); it != was.end())
      return std::strtod(it->second.c_str(), nullptr);
    return otherwise;
  };
  const tofu::Optimizer kind = *tofu::optimizerNamed(optimizer);
  const double lr = hyperOf(learningRate, "lr",
                            kind == tofu::Optimizer::SGD ? 0.1
                            : kind == tofu::Optimizer::Momentum || kind == tofu::Optimizer::Nesterov
                                ? 0.01
                                : 0.001);
  tofu::TrainingHyper hyper;
  hyper.momentum = hyperOf(momentumOpt, "momentum", 0.9);
  hyper.weightDecay =
      hyperOf(weightDecayOpt, "weight_decay", kind == tofu::Optimizer::AdamW ? 0.01 : 0.0);
  if (weightDecayOpt.getNumOccurrences() == 0 && hyper.weightDecay > 0 &&
      kind != tofu::Optimizer::AdamW)
    return fail(fmt::format("{}: the checkpoint was trained with --weight-decay {}: give it "
                            "again (it shapes the training graph)",
                            resumed->path(), hyper.weightDecay),
                2);
  {
    std::string text = lrScheduleOpt;
    if (text.empty())
      if (auto it = was.find("lr_schedule"); it != was.end())
        text = it->second;
    if (!text.empty()) {
      auto sc = tofu::parseLrSchedule(text);
      if (!sc)
        return fail((lrScheduleOpt.empty() ? resumed->path() + ": metadata 'lr_schedule': " : "") +
                        llvm::toString(sc.takeError()),
                    2);
      hyper.schedule = *sc;
    }
    hyper.schedule.warmup = warmupOpt.getNumOccurrences() > 0 ? unsigned(warmupOpt) : 0;
    if (warmupOpt.getNumOccurrences() == 0)
      if (auto it = was.find("warmup"); it != was.end())
        hyper.schedule.warmup = static_cast<unsigned>(std::strtoul(it->second.c_str(), nullptr, 10));
  }
  unsigned lossTensor = 0;
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].name == loss)
      lossTensor = t;
  const bool realData = dataMode != "teacher" && dataMode != "fixed";
  auto setValues = [&](tofu::Engine &e, const tofu::TrainingData &from,
                       const std::vector<unsigned> &tensors, unsigned step) {
    for (unsigned t : tensors)
      e.setTiles(t, [&](const tofu::Box &tile, float *out) { from.fill(t, step, tile, out); });
  };
  // A data set: its batches in a shuffled order per epoch (drawn from --seed).
  std::optional<tofu::DataSet> ds;
  std::vector<tofu::DataBinding> bindings;
  int64_t dataBatch = 0, stepsPerEpoch = 1;
  if (realData) {
    auto d = tofu::openDataSet(dataMode, "train");
    if (!d)
      return fail(llvm::toString(d.takeError()), 2);
    ds = std::move(*d);
    auto b = tofu::bindDataSet(p, loss, *ds, feedOpt, training.constants, training.initialValues);
    if (!b)
      return fail(fmt::format("{}: --data {}: {}", name, std::string(dataMode),
                              llvm::toString(b.takeError())),
                  2);
    bindings = std::move(*b);
    dataBatch = p.tensors[bindings[0].tensor].shape[0];
    for (const tofu::DataBinding &x : bindings)
      if (p.tensors[x.tensor].shape[0] != dataBatch)
        return fail(fmt::format("{}: inputs '{}' and '{}' take batches of {} and {} samples: "
                                "fed inputs share the batch",
                                name, bindings[0].input, x.input, dataBatch,
                                p.tensors[x.tensor].shape[0]),
                    2);
    stepsPerEpoch = ds->samples / dataBatch;
    if (steps.getNumOccurrences() == 0)
      steps = static_cast<unsigned>(std::min<int64_t>(int64_t(epochs) * stepsPerEpoch,
                                                      std::numeric_limits<unsigned>::max()));
  }
  // A cosine schedule with no horizon ends at this run's last step.
  if (hyper.schedule.kind == tofu::LrSchedule::Kind::Cosine && hyper.schedule.horizon == 0)
    hyper.schedule.horizon = stepsBefore + steps;
  if (hyper.schedule.kind == tofu::LrSchedule::Kind::Cosine &&
      hyper.schedule.horizon <= hyper.schedule.warmup)
    return fail(fmt::format("--lr-schedule {} ends at step {}, within the {} steps of --warmup",
                            hyper.schedule.str(), hyper.schedule.horizon, hyper.schedule.warmup),
                2);
  // Every worker draws its own tiles of every value: no process makes a whole tensor.
  const tofu::TrainingData data(p, loss, seed, lr, training.constants, dataMode == "teacher",
                                &training.initialValues, hyper);
  // The batch of a step, by its index counted over every run of a resumed training (the
  // training engine's batches come from a BatchPrefetcher, which assembles the next one
  // while a step runs; the references of --verify take theirs here).
  std::optional<tofu::BatchOrder> order;
  if (realData)
    order.emplace(ds->samples, dataBatch, seed);
  auto setBatch = [&](tofu::Engine &e, unsigned step) {
    setValues(e, data, data.scheduledTensors(), step);
    if (realData)
      tofu::feedBatch(e, *ds, bindings, order->samplesOf(step), normalization);
    else
      setValues(e, data, data.batchTensors(), step);
  };
  const tofu::EngineOptions options = engineOptions();
  auto start = std::chrono::steady_clock::now();
  // Element-wise chains folded (codegen/fusion.h): the engine runs the fused plan.
  auto planned = enginePlan(p, exec, memory, training.outputs);
  if (!planned)
    return fail(llvm::toString(planned.takeError()));
  const tofu::FusedPlan &fused = planned->fused;
  const tofu::MemoryPlan &fusedMemory = planned->memory;
  if (kernelReportOpt) {
    auto program = tofu::buildProgram(fused.problem, fused.plan, fusedMemory);
    if (!program)
      return fail(name + ": " + llvm::toString(program.takeError()));
    auto report = tofu::cuda::kernelReport(*program);
    if (!report)
      return fail(name + ": " + llvm::toString(report.takeError()));
    if (format == "json") {
      nlohmann::json j = nlohmann::json::array();
      for (const tofu::cuda::KernelEstimate &e : *report)
        j.push_back({{"node", e.node}, {"op", e.op}, {"how", e.how}, {"library", e.library},
                     {"launches", e.launches}, {"blocks", e.blocks}, {"threads", e.threads},
                     {"serial_chain", e.chain}, {"bytes", e.bytes}, {"min_bytes", e.minBytes},
                     {"flops", e.flops}, {"bound_seconds", e.boundSeconds},
                     {"estimate_seconds", e.estimateSeconds}});
      llvm::outs() << j.dump(1) << "\n";
    } else {
      llvm::outs() << fmt::format("{} (batch {}), worker 0 of {}:\n", name, batch, workers)
                   << tofu::cuda::formatKernelReport(*report, tofu::cuda::GpuModel{});
    }
    return 0;
  }
  auto engine = makeEngine(fused.problem, fused.plan, fusedMemory, options);
  if (!engine)
    return fail(name + ": " + llvm::toString(engine.takeError()));
  const double buildSeconds = seconds(start);
  const tofu::BackendStats bs = (*engine)->backendStats();
  const tofu::KernelCompileStats &cs = bs.compile;
  setValues(**engine, data, data.tensors(), 0);
  if (resumed)
    if (llvm::Error e = tofu::restore(**engine, *resumed))
      return fail(resumed->path() + ": " + llvm::toString(std::move(e)));
  // --eval: the forward graph on an engine of its own, its weights copied from training's
  // (tile by tile: both plans cut every weight alike).
  std::optional<EnginePlan> evalPlan;
  std::unique_ptr<tofu::Engine> evalEngine;
  std::unique_ptr<tofu::TrainingData> evalValues;
  std::optional<tofu::DataSet> evalDs;
  std::vector<tofu::DataBinding> evalBindings;
  std::string labelsArray;
  int64_t evalBatch = 0;
  nlohmann::json evalJson = nlohmann::json::array();
  if (evalSetup) {
    const tofu::Problem &ep = *evalSetup->forward.problem;
    auto d = tofu::openDataSet(evalOpt == "test" ? std::string(dataMode) : std::string(evalOpt),
                               "t10k");
    if (!d)
      return fail("--eval: " + llvm::toString(d.takeError()), 2);
    evalDs = std::move(*d);
    std::string feeds;
    for (const tofu::DataBinding &b : bindings)
      if (b.labels)
        labelsArray = b.array;
      else
        feeds += (feeds.empty() ? "" : ",") + b.input + "=" + b.array;
    if (labelsArray.empty())
      return fail(name + ": --eval scores a classifier: a model trained with softmax "
                         "cross-entropy against labels fed from the data set",
                  2);
    if (!evalDs->find(labelsArray))
      return fail(fmt::format("--eval {}: the data set has no array '{}' (the labels)",
                              std::string(evalOpt), labelsArray),
                  2);
    auto eb = tofu::bindDataSet(ep, "", *evalDs, feeds, training.constants,
                                training.initialValues);
    if (!eb)
      return fail(fmt::format("{}: --eval {}: {}", name, std::string(evalOpt),
                              llvm::toString(eb.takeError())),
                  2);
    evalBindings = std::move(*eb);
    evalBatch = ep.tensors[evalBindings[0].tensor].shape[0];
    auto ef = enginePlan(ep, evalSetup->forward.exec, evalSetup->forward.memory,
                         evalSetup->forward.graph.outputs);
    if (!ef)
      return fail(name + ": the evaluation plan: " + llvm::toString(ef.takeError()));
    evalPlan = std::move(*ef);
    auto e = makeEngine(evalPlan->fused.problem, evalPlan->fused.plan, evalPlan->memory, options);
    if (!e)
      return fail(name + ": the evaluation engine: " + llvm::toString(e.takeError()));
    evalEngine = std::move(*e);
    evalValues = std::make_unique<tofu::TrainingData>(ep, "", seed, lr, training.constants, false,
                                                      &training.initialValues);
    setValues(*evalEngine, *evalValues, evalValues->tensors(), 0);
  }
  // Evaluates the weights after `done` steps (counted over every run); prints and records.
  auto evaluate = [&](unsigned done) -> llvm::Error {
    const auto t0 = std::chrono::steady_clock::now();
    if (llvm::Error e = tofu::copyState(**engine, *evalEngine))
      return e;
    tofu::ClassifierScore score;
    const tofu::DataArray &labelArray = *evalDs->find(labelsArray);
    std::vector<int64_t> samples(evalBatch);
    std::vector<double> labels(evalBatch);
    for (int64_t start = 0; start < evalDs->samples; start += evalBatch) {
      const int64_t rows = std::min(evalBatch, evalDs->samples - start);
      for (int64_t r = 0; r < evalBatch; ++r) // a partial batch repeats the first samples
        samples[r] = r < rows ? start + r : (r - rows) % evalDs->samples;
      tofu::feedBatch(*evalEngine, *evalDs, evalBindings, samples, normalization);
      auto st = evalEngine->step();
      if (!st)
        return st.takeError();
      const tofu::Tensor logits = wholeOverProcesses(*evalEngine, evalSetup->logits);
      for (int64_t r = 0; r < rows; ++r)
        labels[r] = labelArray.at(samples[r]);
      tofu::scoreRows(logits, labels, rows, score);
    }
    const double secs = seconds(t0);
    const double epoch = double(done) / double(stepsPerEpoch);
    evalJson.push_back({{"step", done}, {"epoch", epoch}, {"loss", score.loss()},
                        {"accuracy", score.accuracy()}, {"samples", score.rows},
                        {"seconds", secs}});
    if (!json)
      llvm::outs() << fmt::format("eval after step {} (epoch {:.2f}): loss {:.4f}, accuracy "
                                  "{:.2f}% on {} held-out samples ({:.1f} s)\n",
                                  done, epoch, score.loss(), 100 * score.accuracy(), score.rows,
                                  secs);
    return llvm::Error::success();
  };
  // The optimiser as the header says it: "adamw, lr 0.001 (cosine:100 after 5 warm-up
  // steps), weight decay 0.01".
  std::string optimizerText = fmt::format("{}, lr {}", std::string(optimizer), lr);
  {
    std::vector<std::string> how;
    if (hyper.schedule.kind != tofu::LrSchedule::Kind::Constant)
      how.push_back(hyper.schedule.str());
    if (hyper.schedule.warmup > 0)
      how.push_back(fmt::format("{}{} warm-up steps", how.empty() ? "" : "after ",
                                hyper.schedule.warmup));
    if (!how.empty())
      optimizerText += fmt::format(" ({})", fmt::join(how, " "));
    if (kind == tofu::Optimizer::Momentum || kind == tofu::Optimizer::Nesterov)
      optimizerText += fmt::format(", momentum {}", hyper.momentum);
    if (hyper.weightDecay > 0 || kind == tofu::Optimizer::AdamW)
      optimizerText += fmt::format(", weight decay {}", hyper.weightDecay);
  }
  if (!json) {
    if (resumed)
      llvm::outs() << fmt::format("resumed from {} ({} steps trained before)\n",
                                  resumed->path(), stepsBefore);
    const bool gpu = backend == "cuda" || backend == "nccl";
    const std::string engineName =
        backend == "nccl" ? fmt::format("NCCL ({} processes, a GPU each) CUDA", procs.size)
        : gpu             ? "CUDA"
        : procs.on        ? fmt::format("MPI ({} processes, {} transport) CPU", procs.size,
                                        std::string(mpiTransport))
                          : "CPU";
    llvm::outs() << fmt::format(
        "{} training ({}, batch {}): {} nodes on {} workers, algorithm {}, {} engine "
        "(float32{}, {})\n",
        name, optimizerText, batch, p.nodes.size(), workers, algorithm, engineName,
        gpu && tf32 ? " with TF32 products" : "",
        !options.library ? "generated kernels"
        : gpu            ? "cuBLAS, cuDNN + generated kernels"
                         : "oneDNN + generated kernels");
    {
      unsigned weights = 0, given = 0;
      for (const tofu::ProblemTensor &t : p.tensors)
        if (t.role == tofu::TensorRole::Weight) {
          ++weights;
          given += training.initialValues.count(t.name) > 0;
        }
      if (!resumed && given > 0)
        llvm::outs() << fmt::format("weights: {} of {} from the model's initializers{}\n", given,
                                    weights, given < weights ? ", the rest drawn" : "");
      else if (!resumed && !onnxFile.empty())
        llvm::outs() << fmt::format("weights: the model has no initial values; all {} drawn "
                                    "(synthetic, from --seed)\n",
                                    weights);
    }
    if (realData)
      llvm::outs() << fmt::format("data: {}, {} samples; batch {}, {} steps per epoch ({} "
                                  "samples dropped), shuffled per epoch from seed {}; {}\n",
                                  ds->description, ds->samples, dataBatch, stepsPerEpoch,
                                  ds->samples - stepsPerEpoch * dataBatch, unsigned(seed),
                                  [&] {
                                    std::string f;
                                    for (const tofu::DataBinding &b : bindings)
                                      f += (f.empty() ? "" : ", ") + b.array + " -> " + b.input;
                                    return f;
                                  }());
    if (evalEngine)
      llvm::outs() << fmt::format("eval: {}, {} samples, forward only on {} workers (the "
                                  "training plan's cuts)\n",
                                  evalDs->description, evalDs->samples, unsigned(workers));
    if (fused.folded > 0)
      llvm::outs() << fmt::format("fusion: {} element-wise nodes folded into their readers ({} "
                                  "fused kernels, e.g. {})\n",
                                  fused.folded, fused.chains.size(), fused.chains.front());
    llvm::outs() << fmt::format("kernels: {} ({} units, {} compiled now, {} from the cache) in "
                                "{:.2f} s; {} op instances on library calls{}, {} on the "
                                "interpreter\n",
                                cs.kernels, cs.units, cs.unitsCompiled,
                                cs.units - cs.unitsCompiled, cs.seconds, bs.library,
                                bs.libraryDeclined > 0
                                    ? fmt::format(" ({} more the library declined: generated)",
                                                  bs.libraryDeclined)
                                    : std::string(),
                                bs.interpreted);
    if (!terminal)
      llvm::outs() << (logEvery > 1 ? fmt::format("\n| step | mean loss of {} steps | mean "
                                                  "seconds |\n| ---: | ---: | ---: |\n",
                                                  unsigned(logEvery))
                                    : std::string("\n| step | loss | seconds |\n| ---: | ---: | ---: |\n"));
    llvm::outs().flush();
  }
  std::vector<unsigned> compared = {lossTensor}; // with --verify: the loss and every update
  for (auto [upd, tgt] : (*engine)->carries())
    compared.push_back(tgt);
  // --verify: per compared tensor, the local workers' tiles after the first step.
  std::vector<std::vector<std::pair<unsigned, std::vector<float>>>> afterFirst;
  int64_t verifyCopyBytes = 0;
  std::vector<double> stepSeconds, losses;
  int64_t moved = 0;
  std::optional<tofu::BatchPrefetcher> prefetch;
  if (realData)
    prefetch.emplace(**engine, *ds, bindings, normalization, dataBatch, seed);
  for (unsigned s = 0; s < steps; ++s) {
    if (prefetch) {
      setValues(**engine, data, data.scheduledTensors(), stepsBefore + s);
      prefetch->feed(**engine, stepsBefore + s, s + 1 < steps);
    } else {
      setBatch(**engine, stepsBefore + s);
    }
    auto r = (*engine)->step();
    if (!r)
      return fail(fmt::format("{}: step {}: {}", name, s + 1, llvm::toString(r.takeError())));
    moved = sumOverProcesses(r->bytesMoved);
    if (s == 0 && verify) // --verify compares the first step: later steps compound rounding
      for (unsigned t : compared) {
        afterFirst.emplace_back();
        for (unsigned w : (*engine)->localWorkers())
          if ((*engine)->holdsTile(t, w)) {
            afterFirst.back().emplace_back(w, (*engine)->readTile(t, w));
            verifyCopyBytes += static_cast<int64_t>(afterFirst.back().back().second.size()) * 4;
          }
      }
    stepSeconds.push_back(r->seconds);
    losses.push_back(scalarOverProcesses(**engine, lossTensor));
    if (!std::isfinite(losses.back()) && !continueNonFinite) {
      if (terminal)
        llvm::outs() << "\n";
      const std::string bad = firstNonFiniteCarried(p, **engine);
      return fail(fmt::format("{}: step {}: the loss is {} (lr {}){}: training stopped{}; "
                              "--continue-on-nonfinite runs the remaining steps",
                              name, stepsBefore + s + 1, losses.back(), lr,
                              bad.empty() ? ", while every weight is finite"
                                          : ", and its update made '" + bad + "' non-finite",
                              saveDir.empty() ? ""
                                              : ", and nothing was saved to " + saveDir +
                                                    " (what it holds stays as it was)"));
    }
    const unsigned done = stepsBefore + s + 1;
    if (terminal) {
      const double elapsed = std::accumulate(stepSeconds.begin(), stepSeconds.end(), 0.0);
      const double eta = elapsed / double(s + 1) * double(steps - s - 1);
      llvm::outs() << (realData
                           ? fmt::format("\repoch {} step {}/{}: loss {:.4f}, {:.0f} samples/s, "
                                         "ETA {}:{:02d}   ",
                                         (done - 1) / stepsPerEpoch + 1,
                                         (done - 1) % stepsPerEpoch + 1, stepsPerEpoch,
                                         losses.back(), double(dataBatch) / r->seconds,
                                         int(eta) / 60, int(eta) % 60)
                           : fmt::format("\rstep {}/{}: loss {:.5f}, {:.3f} s", s + 1,
                                         unsigned(steps), losses.back(), r->seconds));
      llvm::outs().flush();
    } else if (!json && ((s + 1) % logEvery == 0 || s + 1 == steps)) {
      const size_t n = std::min<size_t>(logEvery, (s % logEvery) + 1);
      auto meanOfLast = [n](const std::vector<double> &v) {
        return std::accumulate(v.end() - n, v.end(), 0.0) / double(n);
      };
      llvm::outs() << fmt::format("| {} | {:.6f} | {:.4f} |\n", s + 1, meanOfLast(losses),
                                  meanOfLast(stepSeconds));
    }
    const bool last = s + 1 == steps;
    if (evalEngine && (last || (evalEvery > 0 ? done % evalEvery == 0
                                              : done % stepsPerEpoch == 0))) {
      if (terminal)
        llvm::outs() << "\n";
      if (llvm::Error e = evaluate(done))
        return fail(fmt::format("{}: evaluating after step {}: {}", name, done,
                                llvm::toString(std::move(e))));
    }
  }
  if (terminal)
    llvm::outs() << "\n";
  // The last step's update has no loss after it to show it: the weights themselves are
  // checked (and a checkpoint of non-finite weights is never written over a good one).
  // --verify, saving nothing, goes on to its comparison, which fails such a step itself.
  if (steps > 0 && (!verify || !saveDir.empty())) {
    if (const std::string bad = firstNonFiniteCarried(p, **engine); !bad.empty())
      return fail(fmt::format("{}: after step {}, '{}' is not finite (lr {}): {}", name,
                              stepsBefore + steps, bad, lr,
                              saveDir.empty()
                                  ? std::string("the trained weights are not usable")
                                  : "nothing was saved to " + saveDir +
                                        " (what it holds stays as it was)"));
  }
  if (!saveDir.empty()) {
    const std::map<std::string, std::string> metadata = {
        {"format", "tofu"},
        {"model", name},
        {"optimizer", optimizer},
        {"lr", fmt::format("{}", lr)},
        {"lr_schedule", hyper.schedule.str()},
        {"warmup", std::to_string(hyper.schedule.warmup)},
        {"momentum", fmt::format("{}", hyper.momentum)},
        {"weight_decay", fmt::format("{}", hyper.weightDecay)},
        {"steps", std::to_string(stepsBefore + steps)},
        {"workers", std::to_string(workers)}};
    if (int status = procs.on ? saveTiles(**engine, metadata) : saveWhole(**engine, metadata))
      return status;
  }
  std::vector<int64_t> peaks = (*engine)->arenaBytes();
  // Under MPI: what each process allocated for its worker's arena, and what the engine and
  // the steps (not --verify's reference, which runs after) added to its resident memory at
  // their peak: the arena, the kernels, the local tiles of inputs, MPI's buffers.
  std::vector<int64_t> allocated, residentBefore, residentPeak, verifyCopies;
  if (procs.on) {
    verifyCopies = gatherOverProcesses(verifyCopyBytes);
    allocated = gatherOverProcesses(bs.arenaBytes.at(procs.rank));
    residentBefore = gatherOverProcesses(residentBeforeEngine);
    residentPeak = gatherOverProcesses(peakResidentBytes());
  }
  const double med = median(stepSeconds);
  int status = moved == predicted ? 0 : 1;

  // --verify: the first step unpartitioned on the same engine.
  nlohmann::json verifyJson;
  double worst = 0;
  std::string worstName;
  if (verify) {
    if (tolerance < 0)
      tolerance = tofu::kFloat32StepTolerance;
    tofu::SingleWorker one = tofu::singleWorker(p, training.outputs);
    const tofu::ExecPlan &oneExec = one.exec;
    const tofu::MemoryPlan &oneMemory = one.memory;
    // Under MPI every process runs the reference itself and compares the tiles it holds.
    auto ref = makeEngine(p, oneExec, oneMemory, options, /*local=*/true);
    if (!ref)
      return fail("the unpartitioned run: " + llvm::toString(ref.takeError()));
    setValues(**ref, data, data.tensors(), 0);
    if (resumed)
      if (llvm::Error e = tofu::restore(**ref, *resumed))
        return fail(llvm::toString(std::move(e)));
    setBatch(**ref, stepsBefore);
    if (auto r = (*ref)->step(); !r)
      return fail("the unpartitioned run: " + llvm::toString(r.takeError()));
    // Per compared tensor: the largest relative difference of the partitioned step's tiles
    // (this process's) from the reference, and the reference's values.
    std::string nonFinite;
    std::vector<double> differs(compared.size(), 0.0);
    std::vector<std::vector<float>> wanted(compared.size());
    for (size_t i = 0; i < compared.size(); ++i) {
      unsigned t = compared[i];
      const tofu::Tensor expected = (*ref)->get(t);
      wanted[i].assign(expected.data.begin(), expected.data.end());
      const std::vector<float> &whole = wanted[i];
      const tofu::Box all = tofu::wholeBox(expected.shape);
      double &e = differs[i];
      for (const auto &[w, got] : afterFirst[i]) { // each tile this process holds
        const tofu::Box &tile = (*engine)->program().tensors[t].tiles[w];
        std::vector<float> want(got.size());
        tofu::copyBox(want.data(), tile, whole.data(), all, tile, nullptr);
        for (size_t x = 0; x < got.size(); ++x) {
          // A step that makes NaN or infinity fails, whatever the reference made.
          if (!std::isfinite(got[x]) && nonFinite.empty())
            nonFinite = p.tensors[t].name;
          e = std::isfinite(want[x])
                  ? std::max(e, double(std::abs(got[x] - want[x])) /
                                    std::max(1.0, double(std::abs(want[x]))))
                  : std::numeric_limits<double>::infinity();
        }
      }
    }
    ref->reset();
#ifdef TOFU_MPI_BACKEND
    if (procs.on) { // the worst over the processes, per tensor, and any non-finite tensor
      MPI_Allreduce(MPI_IN_PLACE, differs.data(), static_cast<int>(differs.size()), MPI_DOUBLE,
                    MPI_MAX, MPI_COMM_WORLD);
      char buf[256] = {};
      std::snprintf(buf, sizeof buf, "%s", nonFinite.c_str());
      std::vector<char> names(sizeof buf * procs.size);
      MPI_Allgather(buf, sizeof buf, MPI_CHAR, names.data(), sizeof buf, MPI_CHAR, MPI_COMM_WORLD);
      for (int r = 0; r < procs.size && nonFinite.empty(); ++r)
        nonFinite = std::string(names.data() + r * sizeof buf);
    }
#endif
    for (size_t i = 0; i < compared.size(); ++i)
      if (differs[i] > worst || worstName.empty()) {
        worst = std::max(worst, differs[i]);
        worstName = p.tensors[compared[i]].name;
      }
    // Beyond the tolerance: is it the partition, or a step so ill-conditioned that float32
    // rounding alone moves it that far? The same unpartitioned step in another summation
    // order (library calls for generated kernels, or the reverse) measures that noise per
    // compared tensor. When rounding alone moves some tensor beyond the tolerance the step
    // is ill-conditioned: float32 cannot tell a partition's error from its own noise (every
    // tensor downstream of the ill-conditioned ops scatters), and the verdict is undecided
    // (the double-precision interpreter decides: --kernels interp --verify). Otherwise the
    // partition, not rounding, makes the difference.
    std::vector<double> noise(compared.size(), 0.0);
    bool noiseMeasured = false;
    if (worst > tolerance && nonFinite.empty()) {
      tofu::EngineOptions swapped = options;
      swapped.library = !options.library;
      auto again = makeEngine(p, oneExec, oneMemory, swapped, /*local=*/true);
      if (!again)
        return fail("the unpartitioned run in another summation order: " +
                    llvm::toString(again.takeError()));
      setValues(**again, data, data.tensors(), 0);
      if (resumed)
        if (llvm::Error e = tofu::restore(**again, *resumed))
          return fail(llvm::toString(std::move(e)));
      setBatch(**again, stepsBefore);
      if (auto r = (*again)->step(); !r)
        return fail("the unpartitioned run in another summation order: " +
                    llvm::toString(r.takeError()));
      for (size_t i = 0; i < compared.size(); ++i) {
        const tofu::Tensor alt = (*again)->get(compared[i]);
        for (size_t x = 0; x < wanted[i].size(); ++x) {
          const float a = wanted[i][x], b = static_cast<float>(alt.data[x]);
          noise[i] = std::isfinite(a) && std::isfinite(b)
                         ? std::max(noise[i], double(std::abs(a - b)) /
                                                  std::max(1.0, double(std::abs(a))))
                         : std::numeric_limits<double>::infinity();
        }
      }
      noiseMeasured = true;
    }
    bool ok = nonFinite.empty();
    for (double d : differs)
      ok &= d <= tolerance;
    const double worstNoise = *std::max_element(noise.begin(), noise.end());
    size_t noisy = 0; // tensors that rounding alone moves beyond the tolerance
    for (double n : noise)
      noisy += n > tolerance;
    const bool undecided = noiseMeasured && !ok && worstNoise > tolerance;
    if (!ok)
      status = 1;
    verifyJson = {{"passed", ok}, {"largest_relative_difference", worst},
                  {"non_finite_tensor", nonFinite},
                  {"worst_tensor", worstName}, {"tolerance", double(tolerance)},
                  {"tensors_compared", compared.size()},
                  {"verdict", ok ? "passed" : undecided ? "ill-conditioned" : "failed"}};
    if (noiseMeasured) {
      verifyJson["float32_noise"] = worstNoise;
      verifyJson["noisy_tensors"] = noisy;
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
      for (unsigned st = 0; st < steps; ++st)
        rates.push_back(hyper.schedule.at(lr, stepsBefore + st));
      j["lr_per_step"] = rates;
    }
    j["batch"] = int64_t(batch);
    j["steps"] = unsigned(steps);
    j["step_seconds"] = stepSeconds;
    j["loss"] = losses;
    j["median_step_seconds"] = med;
    j["samples_per_second"] = med > 0 ? double(batch) / med : 0.0;
    j["worker_peak_bytes"] = peaks;
    if (procs.on) {
      j["processes"] = procs.size;
      j["mpi_transport"] = std::string(mpiTransport);
      j["process_arena_bytes"] = allocated;
      j["process_resident_before_engine_bytes"] = residentBefore;
      j["process_peak_resident_bytes"] = residentPeak;
      j["process_verify_copy_bytes"] = verifyCopies; // the tiles --verify keeps from step 1
    }
    j["single_worker_peak_bytes"] = onePeak;
    j["bytes_moved"] = moved;
    j["predicted_bytes"] = predicted;
    j["step_iterations"] = stepIterations((*engine)->program());
    if (realData) {
      j["data"] = ds->description;
      j["samples"] = ds->samples;
      j["steps_per_epoch"] = stepsPerEpoch;
      // Batches assembled ahead, while the previous step ran: the time the steps still
      // waited for them, and the time spent assembling a batch that was not ready.
      j["data_wait_seconds"] = prefetch ? prefetch->waitSeconds() : 0.0;
      j["data_assemble_seconds"] = prefetch ? prefetch->assembleSeconds() : 0.0;
    }
    if (evalEngine) {
      j["eval"] = evalJson;
      j["eval_arena_bytes"] = evalEngine->arenaBytes();
    }
    j["compile_seconds"] = cs.seconds;
    j["engine_build_seconds"] = buildSeconds;
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
      for (const std::vector<tofu::NodeTime> &worker : (*engine)->profile()) {
        nlohmann::json nodes = nlohmann::json::array();
        for (const tofu::NodeTime &n : worker)
          nodes.push_back({{"node", n.node}, {"op", n.op}, {"kernel", n.kernel},
                           {"compute_seconds", n.computeSeconds / steps},
                           {"copy_seconds", n.copySeconds / steps},
                           {"wait_seconds", n.waitSeconds / steps}});
        perWorker.push_back(nodes);
      }
      j["profile"] = perWorker; // per worker, per node in plan order
    }
    if (!metricsFile.empty() && procs.rank == 0) {
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
                              losses.front(), losses.back(), unsigned(steps), med,
                              med > 0 ? double(batch) / med : 0.0);
  if (losses.size() >= 20) { // one batch's loss is noisy: the trend over windows
    auto mean = [](auto from, auto to) { return std::accumulate(from, to, 0.0) / double(to - from); };
    llvm::outs() << fmt::format("mean loss of the first 10 steps {:.4f}, of the last 10 {:.4f}\n",
                                mean(losses.begin(), losses.begin() + 10),
                                mean(losses.end() - 10, losses.end()));
  }
  llvm::outs() << fmt::format("bytes moved per step {} (the plan predicts {}: {})\n", moved,
                              predicted, moved == predicted ? "equal" : "DIFFERENT");
  if (procs.on) {
    llvm::outs() << "\n| worker (process) | planned arena | allocated by its process | / "
                    "(single-worker peak / k) | process resident: before the engine | peak "
                    "training | growth |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (unsigned w = 0; w < workers; ++w)
      llvm::outs() << fmt::format("| {} | {} | {} | {:.3f} | {} | {} | {} |\n", w,
                                  tofu::humanBytes(double(peaks[w])),
                                  tofu::humanBytes(double(allocated[w])),
                                  double(peaks[w]) * workers / double(onePeak),
                                  tofu::humanBytes(double(residentBefore[w])),
                                  tofu::humanBytes(double(residentPeak[w])),
                                  tofu::humanBytes(double(residentPeak[w] - residentBefore[w])));
  } else {
    llvm::outs() << "\n| worker | peak memory (arena) | / (single-worker peak / k) |\n| ---: | ---: | ---: |\n";
    for (unsigned w = 0; w < workers; ++w)
      llvm::outs() << fmt::format("| {} | {} | {:.3f} |\n", w, tofu::humanBytes(double(peaks[w])),
                                  double(peaks[w]) * workers / double(onePeak));
  }
  llvm::outs() << fmt::format("single-worker peak: {}\n", tofu::humanBytes(double(onePeak)));
  {
    const std::vector<int64_t> &scratch = bs.extraBytes;
    int64_t most = scratch.empty() ? 0 : *std::max_element(scratch.begin(), scratch.end());
    if (procs.on) {
      const std::vector<int64_t> all = gatherOverProcesses(most);
      most = *std::max_element(all.begin(), all.end());
    }
    if (most > 0)
      llvm::outs() << fmt::format("scratch space beside the arenas (library calls, kernel "
                                  "temporaries): {} per worker (at most)\n",
                                  tofu::humanBytes(double(most)));
  }
  if (verify) {
    const std::string verdict = verifyJson["verdict"].get<std::string>();
    const std::string nonFinite = verifyJson["non_finite_tensor"].get<std::string>();
    llvm::outs() << fmt::format(
        "\nverify: {} (the first step against the unpartitioned step on the same engine: "
        "largest relative difference {:.3g} over the loss and {} updated weights and optimiser "
        "states, at '{}'; tolerance {:.0e}){}\n",
        verdict == "passed" ? "PASSED" : verdict == "failed" ? "FAILED" : "UNDECIDED", worst,
        verifyJson["tensors_compared"].get<size_t>() - 1, worstName, double(tolerance),
        nonFinite.empty() ? "" : fmt::format("; the step made '{}' NaN or infinite", nonFinite));
    if (verifyJson.contains("float32_noise")) {
      const std::string how = kernelsMode == "compiled" ? "generated kernels for library calls"
                                                        : "library calls for generated kernels";
      if (verdict == "failed")
        llvm::outs() << fmt::format(
            "verify: the unpartitioned step in another summation order ({}) reproduces itself "
            "within the tolerance (largest relative difference {:.3g}): the partition, not "
            "rounding, makes the difference\n",
            how, verifyJson["float32_noise"].get<double>());
      else
        llvm::outs() << fmt::format(
            "verify: this step is ill-conditioned in float32: the unpartitioned step in another "
            "summation order ({}) differs from itself by up to {:.3g}, on {} of the {} tensors, "
            "so rounding alone moves it beyond the tolerance and float32 cannot decide; "
            "--kernels interp --verify compares the partitioned step exactly, in double "
            "precision\n",
            how, verifyJson["float32_noise"].get<double>(),
            verifyJson["noisy_tensors"].get<size_t>(),
            verifyJson["tensors_compared"].get<size_t>());
    }
  }
  if (profileTop > 0) {
    const auto &profile = (*engine)->profile();
    llvm::outs() << "\n| per step | compute s | copies s | waiting s |\n| ---: | ---: | ---: | ---: |\n";
    for (unsigned w = 0; w < profile.size(); ++w) {
      double compute = 0, copy = 0, wait = 0;
      for (const tofu::NodeTime &n : profile[w])
        compute += n.computeSeconds, copy += n.copySeconds, wait += n.waitSeconds;
      llvm::outs() << fmt::format("| worker {} | {:.4f} | {:.4f} | {:.4f} |\n", w, compute / steps,
                                  copy / steps, wait / steps);
    }
    std::vector<tofu::NodeTime> nodes = profile[0];
    std::sort(nodes.begin(), nodes.end(), [](const auto &a, const auto &b) {
      return a.computeSeconds + a.copySeconds + a.waitSeconds >
             b.computeSeconds + b.copySeconds + b.waitSeconds;
    });
    llvm::outs() << fmt::format("\nworker 0's {} slowest nodes, per step:\n\n| node | op | kernel | "
                                "compute ms | copy ms | wait ms |\n| --- | --- | --- | ---: | ---: | "
                                "---: |\n",
                                std::min<size_t>(profileTop, nodes.size()));
    for (size_t i = 0; i < nodes.size() && i < profileTop; ++i)
      llvm::outs() << fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} |\n", nodes[i].node,
                                  nodes[i].op, nodes[i].kernel, 1e3 * nodes[i].computeSeconds / steps,
                                  1e3 * nodes[i].copySeconds / steps,
                                  1e3 * nodes[i].waitSeconds / steps);
  }
  return status;
}

/// --infer: the forward graph once on the given inputs; every output reported and written.
int runInference(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                 const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                 const tofu::InputArrays &inputs) {
  const bool json = format == "json";
  auto planned = enginePlan(p, exec, memory, g.outputs);
  if (!planned)
    return fail(name + ": " + llvm::toString(planned.takeError()));
  auto engine = makeEngine(planned->fused.problem, planned->fused.plan, planned->memory,
                           engineOptions());
  if (!engine)
    return fail(name + ": " + llvm::toString(engine.takeError()));
  // Weights: the model's initial values, else drawn; then --load over them.
  const tofu::TrainingData values(p, "", seed, 0.1, g.constants, false, &g.initialValues);
  for (unsigned t : values.tensors())
    (*engine)->setTiles(t, [&](const tofu::Box &tile, float *out) { values.fill(t, 0, tile, out); });
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
      missing += (missing.empty() ? "" : ", ") + fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", "));
  if (!missing.empty())
    return fail(name + ": --infer needs a value for every data input; --input gives none for " +
                    missing,
                2);
  // The output folder before the step, so that a step is never run for nothing.
  if (!outputDir.empty() && procs.rank == 0)
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
  j["bytes_moved"] = sumOverProcesses(r->bytesMoved);
  if (!json)
    llvm::outs() << fmt::format("{}: forward on {} workers in {:.4f} s\n\n| output | shape | min | "
                                "max | mean | file |\n| --- | --- | ---: | ---: | ---: | --- |\n",
                                name, unsigned(workers), r->seconds);
  for (const std::string &out : g.outputs) {
    unsigned t = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == out)
        t = i;
    const tofu::Tensor x = wholeOverProcesses(**engine, t);
    std::string file;
    if (!outputDir.empty()) {
      std::string safe = out;
      for (char &c : safe)
        if (c == '/' || c == '\\' || c == ':')
          c = '_';
      file = outputDir + "/" + safe + ".npy";
      if (procs.rank == 0)
        if (llvm::Error e = tofu::writeNpy(file, x.shape, std::vector<float>(x.data.begin(), x.data.end())))
          return fail(llvm::toString(std::move(e)));
    }
    double lo = x.data.empty() ? 0 : x.data[0], hi = lo, sum = 0;
    for (double v : x.data)
      lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    const double mean = x.data.empty() ? 0 : sum / double(x.data.size());
    j["outputs"][out] = {{"shape", x.shape}, {"file", file}, {"min", lo}, {"max", hi}, {"mean", mean}};
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
      "  tofu-run --onnx FILE.onnx --workers K --infer --input NAME=FILE.npy|.pb,... [--output-dir DIR]\n"
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
  {
    const std::vector<std::string> have = backends();
    if (std::find(have.begin(), have.end(), std::string(backend)) == have.end()) {
      std::string list;
      for (const std::string &b : have)
        list += (list.empty() ? "" : ", ") + b;
      return fail("--backend " + backend + " is not in this build (it has: " + list + ")", 2);
    }
  }
#ifdef TOFU_MPI_BACKEND
  if (backend == "mpi" || backend == "nccl") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    procs.on = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &procs.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &procs.size);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized)
        MPI_Finalize();
    });
    if (workers == 0)
      workers = static_cast<unsigned>(procs.size);
    if (workers != static_cast<unsigned>(procs.size))
      return fail(fmt::format("--workers {} but mpirun started {} processes: one process runs "
                              "each worker (mpirun -np {})",
                              unsigned(workers), procs.size, unsigned(workers)),
                  2);
    tofu::MpiTransport t;
    if (!tofu::parseMpiTransport(mpiTransport, t))
      return fail("--mpi-transport must be get or sendrecv", 2);
    if (backend == "nccl" && mpiTransport.getNumOccurrences() > 0)
      return fail("--mpi-transport is for --backend mpi (nccl moves regions with NCCL)", 2);
    if (kernelsMode == "interp")
      return fail("--kernels interp is the one-process reference executor; use --backend cpu", 2);
    // One report: the first process prints, the others only their errors.
    if (procs.rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
      return fail("cannot silence the standard output of process " + std::to_string(procs.rank));
  }
#endif
  if (mpiTransport.getNumOccurrences() > 0 && backend != "mpi")
    return fail("--mpi-transport is for --backend mpi", 2);
  if (workers == 0)
    return fail("--workers K is required (K >= 1)", 2);
  if (workers > kMaxEngineWorkers && backend != "mpi" && backend != "nccl")
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
  if (tf32 && backend != "cuda" && backend != "nccl")
    return fail("--tf32 is for --backend cuda", 2);
  if (backend == "cuda" && kernelsMode == "interp")
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
        return fail(fmt::format("--{} is for training runs, not --infer", std::string(o->ArgStr)), 2);
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
      return fail(fmt::format("--{} is for training on a data set (--data PATH)",
                              std::string(o->ArgStr)),
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
    const bool stdOk = !b.empty() && *end == 0 && std::isfinite(normalization.std) &&
                       normalization.std > 0;
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
    if (procs.rank == 0)
      plan = tofu::searchPlan(p, pipeline.search);
    if (!procs.on)
      return plan;
    // A failed search fails rank 0, and fail() ends the job (the others wait in the broadcast).
    std::string text;
    if (procs.rank == 0) {
      if (!plan)
        return plan;
      text = tofu::encodePlan(*plan);
    }
    auto decoded = tofu::decodePlan(textFromFirst(text), p);
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
  tofu::MemoryPlan single = tofu::singleWorker(p, t->outputs).memory;

  // --eval: the model's forward graph, planned as the training plan restricted to it.
  std::optional<EvalSetup> evalSetup;
  if (!evalOpt.empty()) {
    const tofu::GraphSource source = {model, graphFile, onnxFile, batch, dataInputs,
                                      dataInputs.getNumOccurrences() > 0};
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
    forward.plan = [&](const tofu::Problem &sub) { return tofu::restrictPlan(*plan, p, sub); };
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
    return runCompiled(p, *t, *loss, name, exec, memory, single.largestPeak(),
                       p.exactCost(plan->steps), plan->algorithm,
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
  const int64_t predicted = p.exactCost(plan->steps);

  llvm::outs() << fmt::format("{} training step ({}, batch {}): {} nodes on {} workers, algorithm "
                              "{}, CPU executor\n",
                              name, optimizer, batch, p.nodes.size(), workers, plan->algorithm);
  llvm::outs() << fmt::format("partitioned step: {:.3f} s; bytes moved {} (the plan predicts {}: "
                              "{})\n",
                              runSeconds, result->bytesMoved, predicted,
                              result->bytesMoved == predicted ? "equal" : "DIFFERENT");
  const int64_t onePeak = single.largestPeak();
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
