// tofu-run's options and their checks.
#include "tofu_run/options.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "analysis/checked.h"
#include "fmt/format.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "runtime/lr_schedule.h"
#include "runtime/training_data.h"
#include "search/search.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/units.h"

namespace tofurun {

cl::OptionCategory runCategory("tofu-run options");

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

cl::opt<std::string> outputDir("output-dir",
                               cl::desc("With --infer: write each graph output to "
                                        "DIR/<name>.npy (float32)"),
                               cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<tofu::LossKind, false, tofu::ChoiceParser<tofu::LossKind>> lossKindOpt(
    "loss", cl::desc("The loss a model whose output is not a scalar trains with:"),
    cl::values(clEnumValN(tofu::LossKind::Auto, "auto",
                          "softmax cross-entropy against integer labels for [batch, classes] "
                          "logits, else the mean squared error against a target (default)"),
               clEnumValN(tofu::LossKind::CrossEntropy, "cross-entropy",
                          "softmax cross-entropy over the last axis, also for [batch, "
                          "positions, classes] logits with a label per position (a language "
                          "model's mean per-token loss; --data feeds labels of [positions] "
                          "per sample)"),
               clEnumValN(tofu::LossKind::Mse, "mse", "the mean squared error")),
    cl::init(tofu::LossKind::Auto), cl::cat(runCategory));
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
             "and the last partial batch is dropped. An ONNX input's dynamic axes after the "
             "batch take the extents of the samples that feed it. Or synthetic data: 'teacher' "
             "(default: a "
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
cl::opt<std::string> shuffleOpt("shuffle",
                                cl::desc("Over a data set: on (default) takes each epoch in its "
                                         "own order, drawn from --seed; off takes the samples "
                                         "in file order every epoch (PyTorch's shuffle=False)"),
                                cl::value_desc("on|off"), cl::init("on"), cl::cat(runCategory));
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
cl::opt<std::string> evalModeOpt(
    "eval-mode",
    cl::desc("How --eval and --infer run a batch norm that training normalises with the batch's "
             "statistics (a training-mode export): running (default) normalises with the "
             "running statistics training carried, as PyTorch's model.eval() does; batch with "
             "the batch's own, as in training"),
    cl::value_desc("running|batch"), cl::init("running"), cl::cat(runCategory));
cl::opt<unsigned> evalEvery("eval-every", cl::desc("Steps between evaluations (default: an epoch)"),
                            cl::init(0), cl::cat(runCategory));
cl::opt<unsigned> logEvery("log-every",
                           cl::desc("Print a row every N steps: the mean loss and "
                                    "step time of those N (default 1)"),
                           cl::init(1), cl::cat(runCategory));

cl::opt<double> tolerance("tolerance",
                          cl::desc("Largest relative difference --verify accepts "
                                   "(default 1e-3 on compiled kernels, float32; "
                                   "1e-4 with --kernels interp)"),
                          cl::init(-1), cl::cat(runCategory));
cl::opt<Kernels, false, tofu::ChoiceParser<Kernels>> kernelsMode(
    "kernels", cl::desc("What computes each op's share:"),
    cl::values(clEnumValN(Kernels::Compiled, "compiled",
                          "oneDNN for matrix products and convolutions, generated C++ kernels for "
                          "the rest, on float32 arenas (default)"),
               clEnumValN(Kernels::Generated, "generated", "generated kernels only"),
               clEnumValN(Kernels::Interp, "interp",
                          "one step with every op in the TDL interpreter (double); with "
                          "--infer, the forward graph in double precision, integers exact to "
                          "2^53 (the engines' float32 holds them to 2^24)")),
    cl::init(Kernels::Compiled), cl::cat(runCategory));
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
cl::opt<std::string> saveOnnx(
    "save-onnx",
    cl::desc("With --onnx: after the last step, write the model to FILE.onnx with its "
             "initializers replaced by the trained values (weights, running statistics), "
             "in their own element types; under MPI the first process gathers them. Past "
             "2 GiB of initializers (or with --save-onnx-external) they go to FILE.onnx.data "
             "beside it"),
    cl::value_desc("FILE.onnx"), cl::cat(runCategory));
cl::opt<bool> saveOnnxExternal("save-onnx-external",
                               cl::desc("--save-onnx writes initializers of 1 KiB or more to "
                                        "FILE.onnx.data (ONNX's external data) at any size"),
                               cl::init(false), cl::cat(runCategory));
cl::opt<std::string> saveDir("save",
                             cl::desc("After the last step, write every weight and "
                                      "optimiser-state tensor to DIR/model.safetensors "
                                      "(with --backend mpi or nccl: each process its own tiles "
                                      "to DIR/tiles-G-R.safetensors, and an index "
                                      "DIR/index.json)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<tofu::StoredType, false, tofu::ChoiceParser<tofu::StoredType>> saveType(
    "save-dtype",
    cl::desc("With --save: the element type the tensors are written in (the safetensors "
             "dtype; --load widens any of them to float32):"),
    cl::values(clEnumValN(tofu::StoredType::F32, "f32", "float32, exact (default)"),
               clEnumValN(tofu::StoredType::BF16, "bf16",
                          "bfloat16, half the bytes, rounded to 8 significant bits (to the "
                          "nearest, ties to even): weights to share or run; a run resumed "
                          "from it continues from the rounded weights and optimiser state"),
               clEnumValN(tofu::StoredType::F16, "f16",
                          "float16, half the bytes, 11 significant bits; values past 65504 "
                          "become infinite")),
    cl::init(tofu::StoredType::F32), cl::cat(runCategory));
cl::opt<std::string> loadDir("load",
                             cl::desc("Start from the checkpoint in DIR (written by --save, "
                                      "at any worker count, by threads or processes; each "
                                      "worker reads only its own tiles)"),
                             cl::value_desc("DIR"), cl::cat(runCategory));
cl::opt<std::string> calibrateOpt(
    "calibrate", cl::ValueOptional,
    cl::desc("Measure this machine for the step-time estimate (tofu-plan --device cpu): train "
             "three small models a few steps with every op timed, and write the rates they give "
             "to FILE (default $TOFU_CPU_MODEL, else ~/.cache/tofu/cpu-model.json); takes no "
             "model"),
    cl::value_desc("FILE"), cl::cat(runCategory));
cl::opt<unsigned> profileTop("profile",
                             cl::desc("Time every node on every worker; print each "
                                      "worker's compute, copy and waiting time and "
                                      "worker 0's N slowest nodes (0: off)"),
                             cl::init(0), cl::cat(runCategory));
cl::opt<std::string> profileInto(
    "profile-into",
    cl::desc("Time every node (as --profile does) and store each op's measured time in the "
             "device model FILE, read and extended where it exists, else made from --device's "
             "model (default cpu, the calibrated one): `tofu-plan --device FILE` and "
             "`tofu-run --device FILE` then estimate an op like one measured (the same op, "
             "kind, FLOPs, bytes and workers) at its measured time, the rest by the rates"),
    cl::value_desc("FILE"), cl::cat(runCategory));
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
cl::opt<std::string> metricsFile("metrics",
                                 cl::desc("Also write the run's figures as --format=json prints "
                                          "them (per-step losses and times, evaluations, "
                                          "memory) to FILE"),
                                 cl::value_desc("FILE.json"), cl::cat(runCategory));
cl::opt<std::string> planJson("exec-plan", cl::desc("Write the execution plan as JSON"),
                              cl::value_desc("FILE.json"), cl::cat(runCategory));
cl::opt<bool> dumpPlan("dump-plan", cl::desc("Print the execution plan, one line per op instance"),
                       cl::cat(runCategory));

tofu::Normalization normalization;
std::optional<tofu::LrSchedule> lrSchedule;

llvm::Error checkOptions(const tofu::BackendEntry &entry) {
  if (workers.getNumOccurrences() > 0 && workers == 0)
    return tofu::usageError("--workers must be at least 1");
  if (workers == 0 && infer && !entry.processes)
    workers = 1; // inference on one worker unless asked for more
  if (workers == 0)
    return tofu::usageError("--workers K is required (K >= 1)");
  if (workers > kMaxEngineWorkers && !entry.processes)
    return tofu::usageError(
        fmt::format("--workers {}: the {} engine runs every worker in this process (a "
                    "thread and an arena each) and takes at most {}; more workers run "
                    "as processes (--backend mpi)",
                    unsigned(workers), std::string(backend), kMaxEngineWorkers));
  if (workers > tofu::kMaxWorkers)
    return tofu::usageError(
        fmt::format("--workers must be at most {} (the search and the execution plans "
                    "are built for at most {} workers)",
                    tofu::kMaxWorkers, tofu::kMaxWorkers));
  {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (threadsPerWorker < 0 || threadsPerWorker > 4 * cores)
      return tofu::usageError(
          fmt::format("--worker-threads must be 0 (cores / workers) to {} (4 per core "
                      "of this machine)",
                      4 * cores));
  }
  if (recomputeOpt.getNumOccurrences()) {
    const tofu::RecomputeMode m = recomputeOpt;
    if (m != tofu::RecomputeMode::None && infer)
      return tofu::usageError("--recompute applies to training (what the backward pass reads); "
                              "--infer runs no backward pass");
    if (m == tofu::RecomputeMode::Auto && !memoryPerWorker.getNumOccurrences())
      return tofu::usageError("--recompute auto recomputes what a memory budget needs: give "
                              "--memory-per-worker (or --recompute sqrt)");
  }
  if (memoryPerWorker.getNumOccurrences() && infer)
    return tofu::usageError("--memory-per-worker plans a training step; --infer plans none");
  if (auto b = tofu::cli::memoryBudget(); !b)
    return b.takeError();
  if (!profileInto.empty() && infer)
    return tofu::usageError("--profile-into times a training step; --infer runs none");
  if (!profileInto.empty() && kernelsMode == Kernels::Interp)
    return tofu::usageError("--profile-into stores the CPU engine's times; --kernels interp "
                            "runs the reference interpreter, whose times say nothing of them");
  // Options that would do nothing in this mode are refused rather than ignored.
  if (deviceOpt.getNumOccurrences() > 0 && infer)
    return tofu::usageError("--device estimates a training step's time; --infer runs none");
  if (!profileInto.empty() && entry.gpu)
    return tofu::usageError("--profile-into stores the CPU engines' times (--backend cpu or "
                            "mpi)");
  if (tolerance.getNumOccurrences() > 0 && !(tolerance >= 0 && std::isfinite(tolerance)))
    return tofu::usageError("--tolerance must be a finite number at least 0");
  if (tolerance.getNumOccurrences() > 0 && !verify && kernelsMode != Kernels::Interp)
    return tofu::usageError(
        "--tolerance applies to --verify (and to --kernels interp's comparison)");
  if (tf32 && !entry.gpu)
    return tofu::usageError("--tf32 is for --backend cuda");
  if (entry.gpu && kernelsMode == Kernels::Interp)
    return tofu::usageError("--kernels interp is the CPU reference executor; use --backend cpu");
  if (momentumOpt.getNumOccurrences() > 0 && optimizer != tofu::Optimizer::Momentum &&
      optimizer != tofu::Optimizer::Nesterov)
    return tofu::usageError("--momentum is for --optimizer momentum or nesterov");
  if (!(momentumOpt >= 0 && momentumOpt < 1))
    return tofu::usageError("--momentum must be in [0, 1)");
  if (weightDecayOpt.getNumOccurrences() > 0 &&
      !(weightDecayOpt >= 0 && weightDecayOpt < 1e6 && std::isfinite(weightDecayOpt)))
    return tofu::usageError("--weight-decay must be a finite number at least 0");
  lrSchedule.reset();
  if (lrScheduleOpt.getNumOccurrences() > 0 && lrScheduleOpt.empty())
    return tofu::usageError("--lr-schedule is empty: give constant, step:EVERY[:GAMMA] or "
                            "cosine[:HORIZON]");
  if (!lrScheduleOpt.empty()) {
    auto s = tofu::parseLrSchedule(lrScheduleOpt, tofu::SettingNames::flags());
    if (!s)
      return tofu::usageError(llvm::toString(s.takeError()));
    lrSchedule = *s;
  }
  if (warmupOpt >= (1u << 31))
    return tofu::usageError("--warmup must be below 2^31 steps");
  if (infer) {
    for (const auto *o : {&verify, &kernelReportOpt})
      if (o->getNumOccurrences() > 0)
        return tofu::usageError(
            fmt::format("--{} is for training runs, not --infer", std::string(o->ArgStr)));
    if (!saveDir.empty() || steps.getNumOccurrences() > 0 || dataMode.getNumOccurrences() > 0 ||
        optimizer.getNumOccurrences() > 0 || learningRate.getNumOccurrences() > 0 ||
        weightDecayOpt.getNumOccurrences() > 0 || lrScheduleOpt.getNumOccurrences() > 0 ||
        warmupOpt.getNumOccurrences() > 0 || momentumOpt.getNumOccurrences() > 0)
      return tofu::usageError(
          "--infer runs the forward graph once: --save, --steps, --data, --optimizer, "
          "--lr, --lr-schedule, --warmup, --momentum and --weight-decay are for training");
  } else if (!inputOpt.empty() || !outputDir.empty()) {
    return tofu::usageError("--input and --output-dir are for --infer");
  }
  const bool realData = dataMode != "teacher" && dataMode != "fixed";
  if (realData && dataMode.empty())
    return tofu::usageError(
        "--data needs a data set (a directory or NAME=FILE,...), teacher or fixed");
  if (shuffleOpt != "on" && shuffleOpt != "off")
    return tofu::usageError("--shuffle must be on or off");
  for (const auto *o : {&feedOpt, &normalizeOpt, &evalOpt, &shuffleOpt})
    if (!realData && o->getNumOccurrences() > 0)
      return tofu::usageError(
          fmt::format("--{} is for training on a data set (--data PATH)", std::string(o->ArgStr)));
  if (!realData && epochs.getNumOccurrences() > 0)
    return tofu::usageError(
        "--epochs is for training on a data set (--data PATH); synthetic runs take "
        "--steps");
  if (epochs.getNumOccurrences() > 0 && steps.getNumOccurrences() > 0)
    return tofu::usageError("give --epochs or --steps, not both");
  if (epochs == 0)
    return tofu::usageError("--epochs must be at least 1");
  if (evalEvery.getNumOccurrences() > 0 && evalOpt.empty())
    return tofu::usageError("--eval-every needs --eval");
  if (!saveOnnx.empty() && onnxFile.empty())
    return tofu::usageError("--save-onnx writes an --onnx model with its trained values");
  if (saveOnnxExternal && saveOnnx.empty())
    return tofu::usageError("--save-onnx-external goes with --save-onnx");
  if (evalModeOpt != "running" && evalModeOpt != "batch")
    return tofu::usageError("--eval-mode must be running or batch");
  if (evalModeOpt.getNumOccurrences() > 0 && evalOpt.empty() && !infer)
    return tofu::usageError("--eval-mode is for --eval and --infer");
  if (logEvery == 0)
    return tofu::usageError("--log-every must be at least 1");
  if (realData && kernelsMode == Kernels::Interp)
    return tofu::usageError(
        "--kernels interp runs one step on synthetic values; train on a data set with "
        "the compiled kernels");
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
      return tofu::usageError("--normalize must be MEAN,STD: two finite numbers, STD > 0 (e.g. "
                              "0.2860,0.3530)");
  }
  if (learningRate.getNumOccurrences() > 0 && !(learningRate > 0 && std::isfinite(learningRate)))
    return tofu::usageError("--lr must be a positive finite number");
  if (steps == 0)
    return tofu::usageError("--steps must be at least 1");
  if (kernelsMode == Kernels::Interp && (!saveDir.empty() || !loadDir.empty()))
    return tofu::usageError(
        "--save and --load need the CPU engine (--kernels compiled or generated)");
  if (kernelsMode == Kernels::Interp && steps != 1)
    return tofu::usageError(
        "--kernels interp runs one step (the reference); use compiled kernels to train");
  if (saveType.getNumOccurrences() > 0 && saveDir.empty())
    return tofu::usageError("--save-dtype goes with --save");
  // Every file the run writes when it ends, checked before the work it would lose.
  const std::pair<const cl::opt<std::string> *, const char *> written[] = {
      {&saveOnnx, "an ONNX model"},
      {&profileInto, "a device model"},
      {&metricsFile, "metrics"},
      {&planJson, "an execution plan"}};
  for (const auto &[opt, what] : written)
    if (!opt->empty())
      if (llvm::Error e = tofu::checkWritable(*opt, what))
        return tofu::usageError(
            fmt::format("--{}: {}", opt->ArgStr.str(), llvm::toString(std::move(e))));
  if (!saveOnnx.empty())
    if (llvm::Error e = tofu::checkWritable(saveOnnx + ".data", "the model's external data"))
      return tofu::usageError("--save-onnx: " + llvm::toString(std::move(e)));
  // The --save folder must be one this run can write, before any training it would lose.
  if (!saveDir.empty()) {
    std::error_code ec;
    const std::filesystem::path savePath(saveDir.getValue());
    if (std::filesystem::exists(savePath, ec) && !std::filesystem::is_directory(savePath, ec))
      return tofu::usageError(
          fmt::format("--save {}: it exists and is not a directory", saveDir.getValue()));
    if (!tofu::makeDirs(saveDir))
      return tofu::usageError(fmt::format("--save {}: cannot create the directory: {}",
                                          saveDir.getValue(), std::strerror(errno)));
    if (::access(saveDir.c_str(), W_OK | X_OK) != 0)
      return tofu::usageError(fmt::format("--save {}: cannot write there: {}", saveDir.getValue(),
                                          std::strerror(errno)));
  }
  return llvm::Error::success();
}

} // namespace tofurun
