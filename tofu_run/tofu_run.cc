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
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "fmt/format.h"
#include "graph/onnx_import.h"
#include "graph/training.h"
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
#include "support/files.h"
#include "support/units.h"
#include "support/version.h"
#include "tofu_run/driver.h"
#include "tofu_run/evaluation.h"
#include "tofu_run/options.h"
#include "tofu_run/step_estimate.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {
namespace {

/// Whether `g` normalises by batch statistics anywhere (what --eval-mode chooses for).
bool hasBatchNorms(const tofu::Graph &g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const tofu::Node &n) {
    return n.op == "batch_norm_train" || n.op == "BatchNormalization";
  });
}

/// --eval-mode given for a model it does nothing to: said, as it is harmless.
void warnNoBatchNorms(const std::string &model) {
  llvm::errs() << fmt::format("tofu-run: warning: --eval-mode {} changes only how batch norms "
                              "normalise, and {} has none: it does nothing here\n",
                              std::string(evalModeOpt), model);
}

/// --eval-mode's choice.
tofu::EvalNorm evalNorm() {
  return evalModeOpt == "batch" ? tofu::EvalNorm::Batch : tofu::EvalNorm::Running;
}

int run(int argc, char **argv) {
  tofu::cli::ToolDefaults defaults;
  defaults.batch = 2;
  defaults.batchWhy = "what this machine's CPU trains in seconds; tofu-plan's is 32, a batch one "
                      "GPU of a training job takes";
  defaults.optimizer = tofu::Optimizer::SGD;
  defaults.optimizerWhy = "with lr 0.1, as the examples train; tofu-plan's is adam, whose "
                          "state is the memory most training plans must hold";
  defaults.workersHelp = "required to train; --infer defaults to 1; under mpirun, the process "
                         "count";
  defaults.inputWhen = "With --infer, one per data input";
  defaults.deviceHelp = "tofu-run searches the plan by the step estimated on it (--objective "
                        "time; without a device, by bytes) and prints that estimate beside the "
                        "measured step (default: cpu where --calibrate has written its model and "
                        "the backend is cpu or mpi, else none)";
  tofu::cli::initStepFlags(runCategory, defaults);
  tofu::setToolVersion("tofu-run", "engine: trains and runs partitioned plans, verified");
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
  if (calibrating && (steps.getNumOccurrences() > 0 || workers.getNumOccurrences() > 0))
    return fail("--calibrate runs models, steps and workers of its own: give no --steps or "
                "--workers",
                2);
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
  // Under mpirun a one-process backend would run the whole model in every process, each
  // alone, and every one would exit 0: refused, saying how to run.
  if (!entry->processes)
    for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
      if (const char *size = std::getenv(var); size && std::atoi(size) > 1)
        return fail(fmt::format("mpirun started {} processes ({}), but --backend {} runs every "
                                "worker inside one process: each would train alone. Give "
                                "--backend mpi (CPUs) or nccl (GPUs) for one worker per process, "
                                "or run tofu-run without mpirun",
                                size, var, std::string(backend)),
                    2);
  // The operator library (--ops): the one a --batch parent loaded before it forked this
  // run, else our own. Errors are bad usage for the folder, a failure for the library.
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  std::optional<llvm::Expected<tofu::OpLibrary>> own;
  auto library = [&]() -> llvm::Expected<const tofu::OpLibrary *> {
    auto ops = tofu::findOpsDir(opsDir, opsDir.getNumOccurrences() > 0);
    if (!ops)
      return tofu::usageError(llvm::toString(ops.takeError()));
    if (const tofu::OpLibrary *loaded = preloadedLibrary(*ops))
      return loaded;
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
  auto stages = tofu::cli::stageSpec();
  if (!stages)
    return fail(stages.takeError());
  pipeline.stages = *stages;
  if (llvm::Error e = tofu::cli::applyAlgorithm(pipeline.search, &pipeline.stages))
    return fail(std::move(e));
  pipeline.objective = objectiveOpt;
  // The time objective and Megatron's grid estimate the step on this run's device model.
  if (pipeline.objective == tofu::PlanObjective::Time ||
      pipeline.search.algorithm == tofu::Algorithm::Megatron) {
    auto device = thisRunsDevice();
    if (!device)
      return fail(device.takeError());
    pipeline.device = std::move(*device);
    if (!pipeline.device && objectiveOpt.getNumOccurrences() > 0 &&
        pipeline.objective == tofu::PlanObjective::Time && (!group || group->rank() == 0))
      llvm::errs() << "tofu-run: --objective time: no device model to estimate the step on "
                      "(give --device, or run tofu-run --calibrate for this machine's); the "
                      "plan is searched by bytes\n";
  }
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
    auto read = tofu::readInputArrays(inputItems(), tofu::SettingNames::flags());
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
    auto opened = tofu::openDataSet(dataMode, "train", tofu::SettingNames::flags());
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
    if (evalModeOpt.getNumOccurrences() > 0 && !hasBatchNorms(*g))
      warnNoBatchNorms(loaded);
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
  if (format != Format::Json && pipeline.device)
    llvm::outs() << tofu::megatronGridLines(pipelined->megatronGrid, pipeline.device->name,
                                            name + ": ");
  const tofu::Graph *t = &pipelined->graph;
  // A step that updates nothing is no training: refused, not run in silence.
  if (std::none_of(t->tensors().begin(), t->tensors().end(),
                   [](const tofu::TensorInfo &x) { return x.role == tofu::TensorRole::Weight; }))
    return fail(name + ": there is nothing to train: the model has no weights (each of its "
                       "float initializers, if any, is frozen or a constant)");
  const std::string *loss = &pipelined->loss;
  const tofu::Problem &p = *pipelined->problem;
  const tofu::PartitionPlan *plan = &pipelined->plan;
  const tofu::ExecPlan &exec = pipelined->exec;
  const tofu::MemoryPlan &memory = pipelined->memory;
  if (!planJson.empty())
    if (llvm::Error e =
            tofu::writeFileAtomically(planJson, tofu::execPlanJson(p, exec), "an execution plan"))
      return fail(std::move(e));
  if (dumpPlan)
    llvm::outs() << tofu::execPlanDump(p, exec) << "\n";
  const tofu::SingleWorker single = tofu::singleWorker(p, t->outputs);

  // --eval: the model's forward graph, planned as the training plan restricted to it (a
  // pipeline's: searched over the same workers, as Tofu's plan).
  std::optional<EvalSetup> evalSetup;
  if (!evalOpt.empty()) {
    unsigned batchNorms = 0;
    tofu::PlanOptions evalSearch;
    evalSearch.workers = pipeline.search.workers;
    evalSearch.threads = pipeline.search.threads;
    auto e = evaluationSetup(source, *lib, p, *plan, precisionOpt, evalNorm(), lossOutput, name,
                             tofu::SettingNames::flags(), &batchNorms,
                             pipelined->staged ? &evalSearch : nullptr);
    if (!e)
      return fail(e.takeError());
    if (evalModeOpt.getNumOccurrences() > 0 && !hasBatchNorms(e->forward.graph))
      warnNoBatchNorms(name);
    evalSetup = std::move(*e);
  }
  if (kernelsMode != Kernels::Interp)
    return runTraining(p, *t, *loss, name, exec, memory, single, predictedBytes(p, *plan, exec),
                       plan->algorithm, evalSetup ? &*evalSetup : nullptr, std::move(dataSet),
                       recomputeRun ? &*recomputeRun : nullptr);

  return runOnExecutor(p, *t, name, exec, memory, single, *plan);
}

} // namespace
} // namespace tofurun

int main(int argc, char **argv) {
  if (argc == 3 && std::string(argv[1]) == "--batch")
    return tofurun::runBatch(argv[0], argv[2], tofurun::run);
  try {
    return tofurun::run(argc, argv);
  } catch (const std::bad_alloc &) {
    // Under MPI the other processes wait on this one: fail() ends the job.
    return tofurun::fail("out of memory");
  }
}
