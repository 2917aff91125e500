// tofu-run: trains a model partitioned across --workers workers on the engine (each worker
// in one float32 arena of its planned size; ops as library calls or kernels generated from
// TDL) for --steps steps, reporting per step the loss and time, and at the end the median
// step time, samples/s, every worker's peak memory and the bytes moved against the plan's
// prediction. --backend cpu runs workers as threads over host arenas (oneDNN + generated
// C++); --backend cuda as streams over device arenas on one GPU (cuBLAS, cuDNN + NVRTC
// kernels). --verify runs the same steps unpartitioned on the same backend and compares the
// weights and the loss. --kernels interp runs one step on the reference executor instead
// (every op in the TDL interpreter, double precision). Built as `tofu-run` (the CPU
// backends: cpu and mpi; it runs `tofu-run-gpu` in its place for cuda and nccl, so that a
// CPU run does not load the CUDA libraries), `tofu-run-gpu` (every backend) and
// `tofu-run-cuda` (the CUDA backend alone: no oneDNN, for the GPU bundle).
//
// A driver: it reads the options, runs the pipeline (planner/pipeline.h), picks the backend,
// and prints what the trainer (runtime/trainer.h: values, batches, steps, evaluation,
// checkpoints, verification) reports. The processes of an MPI run are a ProcessGroup
// (runtime/process_group.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "codegen/exec_plan.h"
#include "fmt/format.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "planner/step_time.h"
#include "runtime/backend_registry.h"
#include "runtime/data_feed.h"
#include "runtime/input_arrays.h"
#include "runtime/training_data.h"
#include "search/cost_model.h"
#include "search/search.h"
#include "support/errors.h"
#include "support/units.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {
namespace {

/// --backend cuda or nccl in the CPU build: replaces this process by tofu-run-gpu, the
/// build with every backend, from this binary's folder, with the same arguments (under
/// mpirun each process does so before MPI starts). Returns only when it cannot.
/// --eval-mode's choice.
tofu::EvalNorm evalNorm() {
  return evalModeOpt == "batch" ? tofu::EvalNorm::Batch : tofu::EvalNorm::Running;
}

int runGpuBuild(char **argv) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return fail("--backend " + backend +
                    ": cannot find this binary's folder (/proc/self/exe: " + ec.message() + ")",
                1);
  const std::string gpu = (self.parent_path() / "tofu-run-gpu").string();
  if (::access(gpu.c_str(), X_OK) != 0)
    return fail(fmt::format("--backend {} runs in tofu-run-gpu, the build with the CUDA "
                            "backends, which is not beside this tofu-run ({}: {}); build "
                            "//tofu_run:tofu-run-gpu or install it there",
                            std::string(backend), gpu, std::strerror(errno)),
                1);
  std::fflush(nullptr);
  ::execv(gpu.c_str(), argv);
  return fail(fmt::format("--backend {}: cannot run {}: {}", std::string(backend), gpu,
                          std::strerror(errno)),
              1);
}

/// An operator library loaded once by a --batch parent, for the runs it forks.
struct Preloaded {
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags{sources};
  std::optional<llvm::Expected<tofu::OpLibrary>> library;
};
std::map<std::string, std::unique_ptr<Preloaded>> &preloaded() {
  static std::map<std::string, std::unique_ptr<Preloaded>> libraries;
  return libraries;
}

int run(int argc, char **argv);

/// `tofu-run --batch FILE`: many --infer runs in one process. Each line of FILE is a JSON
/// object {"args": [ARG, ...], "stdout": PATH, "stderr": PATH, "timeout": SECONDS}: a
/// tofu-run command line without the program's name, where its output goes, and how long
/// it may take. The operator library is loaded once (and the tool's libraries linked
/// once); each run is a child forked from that state, so that runs share nothing else, a
/// crash ends only its own run, and a run past its timeout is killed. For each line, in
/// order, one JSON line on the standard output: {"line": N, "exit": STATUS}, {"line": N,
/// "signal": SIGNAL} or {"line": N, "timeout": SECONDS}, each with the run's "seconds". ONNX's node
/// tests run so (tools/onnx_node_tests.py): a run of tofu-run costs 0.25 s, most of it linking and
/// parsing the library, against a few milliseconds of work for a node test.
int runBatch(const char *argv0, const std::string &file) {
  std::ifstream in(file);
  if (!in)
    return fail("--batch: cannot read " + file, 2);
  std::string text;
  for (unsigned lineNo = 1; std::getline(in, text); ++lineNo) {
    if (text.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::vector<std::string> args;
    std::string out = "/dev/null", err = "/dev/null";
    double timeout = 0;
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      args = j.at("args").get<std::vector<std::string>>();
      out = j.value("stdout", out);
      err = j.value("stderr", err);
      timeout = j.value("timeout", 0.0);
    } catch (const std::exception &e) {
      return fail(fmt::format("--batch: {} line {}: not a run ({})", file, lineNo, e.what()), 2);
    }
    if (std::find(args.begin(), args.end(), "--infer") == args.end())
      return fail(fmt::format("--batch: {} line {}: a batch runs --infer runs only", file, lineNo),
                  2);
    // The library, loaded here once for every run that names the same directory.
    std::string given;
    for (size_t a = 0; a + 1 < args.size(); ++a)
      if (args[a] == "--ops")
        given = args[a + 1];
      else if (args[a].rfind("--ops=", 0) == 0)
        given = args[a].substr(6);
    if (auto dir = tofu::findOpsDir(given, !given.empty())) {
      std::unique_ptr<Preloaded> &p = preloaded()[*dir];
      if (!p) {
        p = std::make_unique<Preloaded>();
        p->library.emplace(tofu::OpLibrary::load(*dir, p->diags));
        if (!*p->library) { // each run loads it again, and reports why it fails
          llvm::consumeError(p->library->takeError());
          preloaded().erase(*dir);
        } else if (llvm::Error e = tofu::prepareOnnxImport(**p->library)) {
          llvm::consumeError(std::move(e)); // each run's import reports it
        }
      }
    } else {
      llvm::consumeError(dir.takeError());
    }
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child < 0)
      return fail(fmt::format("--batch: cannot fork: {}", std::strerror(errno)));
    if (child == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0)
        ::_exit(127);
      ::close(o);
      ::close(e);
      std::vector<char *> av = {const_cast<char *>(argv0)};
      for (std::string &a : args)
        av.push_back(a.data());
      av.push_back(nullptr);
      int code = 1;
      try {
        code = run(static_cast<int>(av.size()) - 1, av.data());
      } catch (const std::bad_alloc &) {
        code = fail("out of memory");
      }
      llvm::outs().flush();
      llvm::errs().flush();
      std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
      std::exit(code); // LeakSanitizer checks the run at exit
#else
      ::_exit(code); // the teardown of the parent's state (a tenth of a run) is left undone
#endif
    }
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    bool late = false;
    while (true) {
      const pid_t r = ::waitpid(child, &status, WNOHANG);
      if (r == child || (r < 0 && errno != EINTR))
        break;
      if (timeout > 0 && !late &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
              timeout) {
        ::kill(child, SIGKILL);
        late = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string result =
        late ? fmt::format("{{\"line\": {}, \"timeout\": {}, \"seconds\": {:.3f}}}", lineNo,
                           timeout, seconds)
        : WIFSIGNALED(status) ? fmt::format("{{\"line\": {}, \"signal\": {}, \"seconds\": {:.3f}}}",
                                            lineNo, WTERMSIG(status), seconds)
                              : fmt::format("{{\"line\": {}, \"exit\": {}, \"seconds\": {:.3f}}}",
                                            lineNo, WEXITSTATUS(status), seconds);
    std::printf("%s\n", result.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int run(int argc, char **argv) {
  tofu::cli::ToolDefaults defaults;
  defaults.batch = 2;
  defaults.batchWhy = "what this machine's CPU trains in seconds; tofu-plan's is 32, a batch one "
                      "GPU of a training job takes";
  defaults.optimizer = tofu::Optimizer::SGD;
  defaults.optimizerWhy = "with lr 0.1, as the examples train; tofu-plan's is adam, whose "
                          "state is the memory most training plans must hold";
  tofu::cli::initStepFlags(runCategory, defaults);
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
      "  tofu-run --batch RUNS.jsonl  (many --infer runs in one process, each forked: a line "
      "per run, {\"args\": [...], \"stdout\": PATH, \"stderr\": PATH, \"timeout\": S})\n"
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
  const bool calibrating = calibrateOpt.getNumOccurrences() > 0;
  if (calibrating && (!model.empty() || !graphFile.empty() || !onnxFile.empty()))
    return fail("--calibrate measures the machine on models of its own: give no model", 2);
  if (!calibrating && int(!model.empty()) + int(!graphFile.empty()) + int(!onnxFile.empty()) != 1)
    return fail("give exactly one of --model, --graph or --onnx (see --help)", 2);
  // The backends this build links (runtime/backend_registry.h); the default is the first.
  const std::vector<std::string> have = tofu::backendNames();
  if (have.empty())
    return fail("this build has no backend", 1);
  if (backend.empty())
    backend = have.front();
  const tofu::BackendEntry *entry = tofu::findBackend(backend);
  if (!entry && (backend == "cuda" || backend == "nccl"))
    return runGpuBuild(argv);
  if (!entry) {
    std::string list;
    for (const std::string &b : have)
      list += (list.empty() ? "" : ", ") + b;
    if (!tofu::findBackend("cuda"))
      list += "; cuda and nccl run in tofu-run-gpu";
    return fail("--backend " + backend + " is not in this build (it has: " + list + ")", 2);
  }
  // The operator library (--ops): the one a --batch parent loaded before it forked this
  // run, else our own. Errors are bad usage for the folder, a failure for the library.
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  std::optional<llvm::Expected<tofu::OpLibrary>> own;
  auto library = [&]() -> llvm::Expected<const tofu::OpLibrary *> {
    auto ops = tofu::findOpsDir(opsDir, opsDir.getNumOccurrences() > 0);
    if (!ops)
      return tofu::usageError(llvm::toString(ops.takeError()));
    if (auto it = preloaded().find(*ops); it != preloaded().end())
      return &**it->second->library;
    own.emplace(tofu::OpLibrary::load(*ops, diags));
    if (!*own) {
      diags.print(llvm::errs());
      return tofu::stringError("cannot load the operator library: " +
                               llvm::toString(own->takeError()));
    }
    return &**own;
  };
  if (calibrating) {
    if (entry->processes || entry->gpu)
      return fail("--calibrate measures the CPU engine: use --backend cpu (the default)", 2);
    auto lib = library();
    if (!lib)
      return fail(lib.takeError());
    return runCalibration(**lib, calibrateOpt.empty() ? tofu::defaultCpuModelPath()
                                                      : std::string(calibrateOpt));
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
    if (kernelsMode == Kernels::Interp)
      return fail("--kernels interp is the one-process reference executor; use --backend cpu", 2);
    // One report: the first process prints, the others only their errors.
    if (group->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
      return fail("cannot silence the standard output of process " + std::to_string(group->rank()));
  }
  if (llvm::Error e = checkOptions(*entry))
    return fail(std::move(e));
  const tofu::Optimizer optimizerKind = optimizer;

  auto loaded = library();
  if (!loaded)
    return fail(loaded.takeError());
  const tofu::OpLibrary *lib = *loaded;
  tofu::PipelineOptions pipeline;
  pipeline.train = optimizerKind;
  pipeline.weightDecay = weightDecayOpt > 0;
  pipeline.lossOutput = lossOutput;
  pipeline.loss = lossKindOpt;
  if (infer)
    pipeline.train.reset(); // the forward graph
  pipeline.until = tofu::Stage::Execution;
  pipeline.precision = precisionOpt;
  pipeline.search.workers = workers;
  pipeline.search.algorithm = algo;
  // Under MPI the first process chooses (what to recompute, the plan) and hands its choice to
  // the others. A failed choice fails the first process, and fail() ends the job (the others
  // wait in the broadcast).
  if (group->distributed())
    pipeline.agree = [](const std::function<llvm::Expected<std::string>()> &choose)
        -> llvm::Expected<std::string> {
      std::string text;
      if (group->rank() == 0) {
        auto chosen = choose();
        if (!chosen)
          return chosen.takeError();
        text = std::move(*chosen);
      }
      return group->fromFirst(text);
    };
  // --memory-per-worker and --recompute: the pipeline chooses what to recompute and the plan
  // (planner/recompute.h), auto by default.
  const bool recomputing =
      !infer && (memoryPerWorker.getNumOccurrences() || recomputeOpt.getNumOccurrences());
  if (recomputing) {
    pipeline.memoryPerWorker = llvm::cantFail(tofu::cli::memoryBudget()); // checked
    pipeline.recompute =
        recomputeOpt.getNumOccurrences() ? recomputeOpt.getValue() : tofu::RecomputeMode::Auto;
    pipeline.noFitHint = " (tofu-plan --fit finds how many workers it needs)";
  }
  // --infer's inputs, read before the import: an ONNX model takes their shapes (fixing its
  // dynamic dimensions) and the small integer values its ops need as constants.
  tofu::InputArrays inputArrays;
  if (infer) {
    auto read = tofu::readInputArrays(inputItems());
    if (!read)
      return fail(llvm::toString(read.takeError()), 2);
    inputArrays = std::move(*read);
  }
  tofu::GraphSource source = tofu::cli::graphSource();

  if (!onnxFile.empty())
    source.givenInputs = inputArrays.forImport();
  if (onnxFile.empty() && (!trainableOpt.empty() || !frozenOpt.empty()))
    return fail("--trainable and --frozen name initializers of an --onnx model", 2);
  // Training on a data set: it is opened before an ONNX import, whose dynamic axes after
  // the batch (a sequence's length) its samples fix; the trainer takes it as opened.
  std::shared_ptr<const tofu::DataSet> dataSet;
  if (!infer && !onnxFile.empty() && dataMode != "teacher" && dataMode != "fixed" &&
      !dataMode.empty()) {
    auto opened = tofu::openDataSet(dataMode, "train");
    if (!opened)
      return fail(llvm::toString(opened.takeError()), 2);
    dataSet = std::make_shared<const tofu::DataSet>(std::move(*opened));
    source.sampleShapes = tofu::sampleShapesFed(*dataSet, feedOpt);
  }
  // --infer of a model whose every output is empty: nothing to plan or run.
  llvm::Expected<tofu::PipelineResult> pipelined = tofu::PipelineResult();
  if (infer) {
    std::string loaded;
    auto g = tofu::loadGraph(source, *lib, &loaded);
    if (!g)
      return fail(llvm::toString(g.takeError()));
    if (g->outputs.empty() && !g->emptyOutputs.empty())
      return inferEmptyOutputs(*g, loaded);
    auto norms = tofu::evaluationGraph(*g, *lib, evalNorm());
    if (!norms)
      return fail(loaded + ": " + llvm::toString(norms.takeError()));
    if (*norms > 0 && format != Format::Json)
      llvm::outs() << fmt::format("{}: {} batch norm{} of training mode normalise with {} "
                                  "running statistics (--eval-mode running)\n",
                                  loaded, *norms, *norms == 1 ? "" : "s",
                                  *norms == 1 ? "its" : "their");
    pipelined = tofu::runPipeline(std::move(*g), loaded, *lib, pipeline);
  } else {
    pipelined = tofu::runPipeline(source, *lib, pipeline);
  }
  if (!pipelined)
    return fail(llvm::toString(pipelined.takeError()));
  // What was recomputed: for the report (the first process's), the budget check and --verify.
  std::optional<RecomputeRun> recomputeRun;
  if (recomputing) {
    recomputeRun.emplace();
    RecomputeRun &rr = *recomputeRun;
    rr.budget = pipeline.memoryPerWorker;
    rr.dropped = pipelined->recomputed.dropped.size();
    if (pipelined->budget && pipelined->budget->recompute) { // the process that chose
      const tofu::RecomputePlan &r = *pipelined->budget->recompute;
      const tofu::MemoryFit &fit = pipelined->budget->fit;
      const tofu::RecomputeMode mode = *pipeline.recompute;
      rr.json = {{"mode", tofu::recomputeModeName(mode)},
                 {"budget_bytes", rr.budget},
                 {"candidates", r.candidates},
                 {"dropped", r.summary.dropped},
                 {"copies", r.summary.copies.size()},
                 {"planned_peak_bytes", fit.peak},
                 {"planned_peak_bytes_without", r.peakWithout},
                 {"candidate_sets_planned", r.tried}};
      rr.line =
          r.summary.copies.empty()
              ? fmt::format("recomputation ({}): none; planned peak {} per worker{}\n",
                            tofu::recomputeModeName(mode), tofu::humanBytes(double(fit.peak)),
                            rr.budget > 0 ? " (the plan fits without)" : "")
              : fmt::format("recomputation ({}): {} of {} forward tensors recomputed "
                            "before the backward pass by {} copies of their ops; planned "
                            "peak {} per worker against {} without\n",
                            tofu::recomputeModeName(mode), r.summary.dropped.size(), r.candidates,
                            r.summary.copies.size(), tofu::humanBytes(double(fit.peak)),
                            tofu::humanBytes(double(r.peakWithout)));
    }
    if (verify && pipelined->withoutRecomputation) { // the step without, for --verify
      auto plain = tofu::Problem::build(*pipelined->withoutRecomputation, *lib);
      if (!plain)
        return fail(plain.takeError());
      rr.plain = std::move(*plain);
      rr.plainOne = tofu::singleWorker(*rr.plain, pipelined->withoutRecomputation->outputs);
    }
  }
  const std::string &name = pipelined->name;
  if (infer)
    return runInference(*pipelined->problem, pipelined->graph, name, pipelined->exec,
                        pipelined->memory, inputArrays);
  if (!pipelined->lossNote.empty() && format != Format::Json)
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
    // Evaluation leaves the running statistics as training carried them, and normalises
    // with them (--eval-mode running) or with the batch's own.
    if (auto norms = tofu::evaluationGraph(*fwd, *lib, evalNorm()); !norms)
      return fail(fwdName + ": " + llvm::toString(norms.takeError()));
    if (!lossOutput.empty())
      fwd->outputs = {lossOutput}; // the pipeline checked it is an output
    else if (fwd->outputs.size() > 1)
      fwd->outputs.resize(1);
    const tofu::TensorInfo *out = fwd->outputs.size() == 1 ? fwd->tensor(fwd->outputs[0]) : nullptr;
    if (!out || (out->shape.size() != 2 && out->shape.size() != 3))
      return fail(name + ": --eval scores a classifier: a model whose one output is [batch, "
                         "classes] logits, or [batch, positions, classes] with a class per "
                         "position",
                  2);
    tofu::PipelineOptions forward;
    forward.until = tofu::Stage::Execution;
    // In the training's precision: a bf16 run evaluates in bf16, as PyTorch's evaluates
    // under autocast (until 2026-11-29 it evaluated in float32).
    forward.precision = precisionOpt;
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
  if (kernelsMode != Kernels::Interp)
    return runTraining(p, *t, *loss, name, exec, memory, single,
                       tofu::CostModel(p).bruteForceCost(plan->steps), plan->algorithm,
                       evalSetup ? &*evalSetup : nullptr, std::move(dataSet),
                       recomputeRun ? &*recomputeRun : nullptr);

  return runOnExecutor(p, *t, name, exec, memory, single, *plan);
}

} // namespace
} // namespace tofurun

int main(int argc, char **argv) {
  if (argc == 3 && std::string(argv[1]) == "--batch")
    return tofurun::runBatch(argv[0], argv[2]);
  try {
    return tofurun::run(argc, argv);
  } catch (const std::bad_alloc &) {
    // Under MPI the other processes wait on this one: fail() ends the job.
    return tofurun::fail("out of memory");
  }
}
