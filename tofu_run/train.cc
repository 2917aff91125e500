// tofu-run training on the engine: the trainer (runtime/trainer.h) driven, its steps and
// evaluations printed as they come, then the summary: losses, step times, bytes moved
// against the plan's prediction, every worker's memory, --verify's verdict, --profile.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>

#include "codegen/fusion.h"
#include "codegen/program_builder.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_import.h"
#include "nlohmann/json.hpp"
#include "planner/step_time.h"
#include "runtime/cuda/kernel_report.h"
#include "runtime/trainer.h"
#include "support/units.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {
namespace {

/// --profile-into: each op instance's measured compute time (the run's average per step),
/// as a measured op of the device model the estimate used (the median of the instances
/// it stands for, replacing one the model had), written to `path`. Returns the line saying
/// so.
llvm::Expected<std::string>
storeMeasuredOps(const tofu::StepTimeEstimate &estimate,
                 const std::vector<std::vector<tofu::NodeTime>> &profile, unsigned steps,
                 unsigned workerCount, const std::string &path) {
  std::map<std::string, std::pair<tofu::MeasuredOp, std::vector<double>>> samples;
  size_t instances = 0;
  for (unsigned w = 0; w < profile.size() && w < estimate.workerOps.size(); ++w) {
    std::map<std::string, double> measured; // node -> compute seconds per step
    for (const tofu::NodeTime &n : profile[w])
      measured[n.node] += n.computeSeconds / std::max(1u, steps);
    if (measured.empty())
      continue; // another process's worker
    for (const tofu::OpTimeEstimate &o : estimate.workerOps[w]) {
      auto it = measured.find(estimate.nodeNames[o.node]);
      if (it == measured.end())
        continue;
      tofu::MeasuredOp m =
          tofu::measuredOpOf(estimate.nodeOps[o.node], o, workerCount, estimate.device.shared);
      auto &entry = samples[tofu::measuredKey(m)];
      entry.first = m;
      entry.second.push_back(it->second);
      ++instances;
    }
  }
  tofu::DeviceModel d = estimate.device;
  std::map<std::string, size_t> at; // key -> index in d.measured
  for (size_t i = 0; i < d.measured.size(); ++i)
    at[tofu::measuredKey(d.measured[i])] = i;
  for (auto &[key, entry] : samples) {
    std::vector<double> &v = entry.second;
    std::sort(v.begin(), v.end());
    tofu::MeasuredOp m = entry.first;
    m.seconds = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    m.samples = static_cast<unsigned>(v.size());
    if (auto it = at.find(key); it != at.end())
      d.measured[it->second] = m;
    else
      d.measured.push_back(m);
  }
  const std::string note = " + ops measured by tofu-run --profile-into";
  if (d.source.find(note) == std::string::npos)
    d.source += note;
  std::ofstream f(path);
  f << tofu::deviceModelJson(d);
  if (!f)
    return tofu::stringError("--profile-into: cannot write " + path);
  return fmt::format("profile-into: {} op instances measured as {} ops, stored in {} ({} "
                     "measured ops in the model of {})\n",
                     instances, samples.size(), path, d.measured.size(), d.name);
}

/// --kernel-report: the CUDA kernels' estimates for worker 0's share of every node.
int kernelReport(const tofu::EnginePlan &planned, const std::string &name) {
  auto program = tofu::buildProgram(planned.fused.problem, planned.fused.plan, planned.memory);
  if (!program)
    return fail(name + ": " + llvm::toString(program.takeError()));
  auto report = tofu::cuda::kernelReport(*program);
  if (!report)
    return fail(name + ": " + llvm::toString(report.takeError()));
  if (format == Format::Json) {
    nlohmann::json j = nlohmann::json::array();
    for (const tofu::cuda::KernelEstimate &e : *report)
      j.push_back({{"node", e.node},
                   {"op", e.op},
                   {"how", e.how},
                   {"library", e.library},
                   {"tensor_cores", e.tensorCores},
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
      llvm::outs() << fmt::format(
          "eval after step {} (epoch {:.2f}): loss {:.4f}, accuracy "
          "{:.2f}% on {} held-out samples{} ({:.1f} s)\n",
          e.step, e.epoch, e.score.loss(), 100 * e.score.accuracy(), e.samples,
          e.score.rows != e.samples ? fmt::format(" ({} positions, a label each)", e.score.rows)
                                    : std::string(),
          e.seconds);
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

} // namespace

int runTraining(const tofu::Problem &p, const tofu::Graph &training, const std::string &loss,
                const std::string &name, const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                const tofu::SingleWorker &one, int64_t predicted, const std::string &algorithm,
                const EvalSetup *evalSetup, std::shared_ptr<const tofu::DataSet> dataSet,
                const RecomputeRun *recompute) {
  const bool json = format == Format::Json;
  // mpirun hands its processes a terminal whatever its own output is: no progress line.
  const bool terminal = !json && !group->distributed() && ::isatty(STDOUT_FILENO);
  const int64_t onePeak = one.memory.largestPeak();
  // The estimated step time (planner/step_time.h), beside the measured one: on --device,
  // or on this machine's calibrated model where there is one and the backend is the CPU's.
  std::optional<tofu::StepTimeEstimate> estimate;
  {
    std::optional<tofu::DeviceModel> device;
    if (!profileInto.empty() && std::ifstream(profileInto).good()) {
      auto d = tofu::deviceModelNamed(profileInto);
      if (!d)
        return fail("--profile-into: " + llvm::toString(d.takeError()), 2);
      device = std::move(*d);
    } else if (deviceOpt.getNumOccurrences()) {
      auto d = tofu::deviceModelNamed(deviceOpt);
      if (!d)
        return fail("--device: " + llvm::toString(d.takeError()), 2);
      device = std::move(*d);
    } else if ((backend == "cpu" || backend == "mpi") &&
               std::ifstream(tofu::defaultCpuModelPath()).good()) {
      auto d = tofu::deviceModelNamed("cpu");
      if (!d)
        return fail("the calibrated model of this machine: " + llvm::toString(d.takeError()) +
                        " (tofu-run --calibrate writes it again)",
                    1);
      device = std::move(*d);
    }
    if (!device && !profileInto.empty())
      return fail(fmt::format("--profile-into {}: no device model to start it from: give "
                              "--device, or run tofu-run --calibrate for this machine's",
                              std::string(profileInto)),
                  2);
    if (device) {
      auto e = tofu::estimateStepTime(p, exec, training.outputs, *device);
      if (!e)
        return fail(e.takeError());
      estimate = std::move(*e);
    }
  }
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
  options.shuffle = shuffleOpt == "on";
  options.data = dataMode;
  options.dataSet = std::move(dataSet);
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
  options.saveType = saveType;
  options.continueNonFinite = continueNonFinite;
  options.verify = verify;
  options.referenceExec = &one.exec;
  options.referenceMemory = &one.memory;
  if (recompute && recompute->plain && recompute->plainOne) {
    options.plainProblem = &*recompute->plain;
    options.plainExec = &recompute->plainOne->exec;
    options.plainMemory = &recompute->plainOne->memory;
  }
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
  const tofu::Optimizer kind = optimizer;
  // The optimiser as the header says it: "adamw, lr 0.001 (cosine:100 after 5 warm-up
  // steps), weight decay 0.01".
  std::string optimizerText = fmt::format("{}, lr {}", tofu::optimizerName(optimizer), lr);
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
        "({}{}, {})\n",
        name, optimizerText, batch, p.nodes.size(), workers, algorithm, engineName,
        precisionOpt == tofu::Precision::BF16 ? "bf16 as torch.autocast" : "float32",
        gpu && tf32 ? " with TF32 products" : "",
        !options.engine.library ? "generated kernels"
        : gpu                   ? "cuBLAS, cuDNN + generated kernels"
                                : "oneDNN + generated kernels");
    {
      unsigned weights = 0, fromModel = 0, constants = 0;
      for (const tofu::ProblemTensor &t : p.tensors)
        if (t.role == tofu::TensorRole::Weight) {
          ++weights;
          fromModel += training.initialValues.count(t.name) > 0;
        } else if (t.role == tofu::TensorRole::Input && t.producer < 0 &&
                   training.initialValues.count(t.name)) {
          ++constants;
        }
      if (!trainer.resumed() && fromModel > 0)
        llvm::outs() << fmt::format(
            "weights: {} of {} from the model's initializers{}{}\n", fromModel, weights,
            fromModel < weights ? ", the rest drawn" : "",
            constants == 0 ? ""
                           : fmt::format("; {} more initializer{} constant (not trained: "
                                         "--trainable NAME trains one)",
                                         constants, constants == 1 ? " is" : "s are"));
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
    if (recompute && !recompute->line.empty())
      llvm::outs() << recompute->line;
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
                           ? fmt::format(
                                 "saved {} tensors ({} steps trained{}) to {}\n", saved->tensors,
                                 saved->stepsTrained,
                                 saveType == tofu::StoredType::F32
                                     ? std::string()
                                     : fmt::format(", in {}", tofu::storedTypeName(saveType)),
                                 saved->path)
                           : fmt::format("saved {} tensors as {} tiles ({:.2f} MiB in {}, {} "
                                         "steps trained) from {} processes to {}\n",
                                         saved->tensors, saved->tiles, saved->bytes / 1048576.0,
                                         tofu::storedTypeName(saveType), saved->stepsTrained,
                                         group->size(), saved->path));
  }
  if (!saveOnnx.empty()) { // every process gathers; the first writes
    const std::map<std::string, tofu::Tensor> state = trainer.wholeState();
    if (group->rank() == 0) {
      auto wrote = tofu::saveOnnxWithValues(onnxFile, saveOnnx, state, saveOnnxExternal);
      if (!wrote)
        return fail("--save-onnx: " + llvm::toString(wrote.takeError()));
      if (!json)
        llvm::outs() << fmt::format(
            "wrote {}: {} initializers with their trained values ({:.2f} MiB{})\n",
            std::string(saveOnnx), wrote->replaced, wrote->bytes / 1048576.0,
            wrote->externalData ? fmt::format(", {:.2f} MiB of them in {}",
                                              wrote->externalBytes / 1048576.0, wrote->dataFile)
                                : std::string());
    }
    group->barrier();
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
    if (checked->plainCompared) {
      verifyJson["recomputing_against_plain"] = {
          {"bit_identical", checked->plainDiffering == 0},
          {"tensors_differing", checked->plainDiffering},
          {"largest_relative_difference", checked->plainWorst},
          {"worst_tensor", checked->plainWorstTensor}};
      // Recomputing must not change what the step computes beyond float32 rounding.
      if (checked->plainWorst > checked->tolerance)
        status = 1;
    }
  }
  // --profile-into: each op's measured time into the device model.
  std::string profileLine;
  if (!profileInto.empty() && group->rank() == 0) {
    auto written =
        storeMeasuredOps(*estimate, engine.profile(), stepCount, unsigned(workers), profileInto);
    if (!written)
      return fail(written.takeError());
    profileLine = *written;
  }
  // Each worker's arena against the budget it was planned within.
  std::string budgetLine;
  if (recompute && recompute->budget > 0) {
    const int64_t largest = *std::max_element(peaks.begin(), peaks.end());
    const auto over =
        std::find_if(peaks.begin(), peaks.end(), [&](int64_t b) { return b > recompute->budget; });
    if (over == peaks.end()) {
      budgetLine = fmt::format("memory budget {} per worker: every arena within it (the largest "
                               "{}, {:.3f} of the budget)\n",
                               tofu::humanBytes(double(recompute->budget)),
                               tofu::humanBytes(double(largest)),
                               double(largest) / double(recompute->budget));
    } else {
      budgetLine = fmt::format("memory budget {} per worker: worker {}'s arena is {}, over it\n",
                               tofu::humanBytes(double(recompute->budget)), over - peaks.begin(),
                               tofu::humanBytes(double(*over)));
      status = 1;
    }
  }

  if (json || !metricsFile.empty()) {
    nlohmann::json j;
    j["model"] = name;
    j["workers"] = unsigned(workers);
    j["optimizer"] = tofu::optimizerName(optimizer);
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
    if (estimate) {
      j["estimated_step"] = nlohmann::json::parse(tofu::stepTimeJson(*estimate));
      j["measured_over_estimated"] = med / estimate->seconds;
    }
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
                         {"samples", e.samples},
                         {"labels", e.score.rows},
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
    if (recompute)
      j["recompute"] = recompute->json;
    if (!profileLine.empty())
      j["profile_into"] = std::string(profileInto);
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
  if (estimate)
    llvm::outs() << fmt::format("measured median step {:.4f} s against the estimate's {:.4f} s: "
                                "{:.2f}x; ",
                                med, estimate->seconds, med / estimate->seconds)
                 << tofu::formatStepTime(*estimate);
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
  llvm::outs() << budgetLine << profileLine;
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
        "states, at '{}'; tolerance {}){}\n",
        v.verdict == "passed"   ? "PASSED"
        : v.verdict == "failed" ? "FAILED"
                                : "UNDECIDED",
        v.worst, v.compared - 1, v.worstTensor,
        v.tolerance == tofu::kBfloat16StepTolerance
            ? fmt::format("{:.1e}, bfloat16 storage's: values stored rounded to 8 significant "
                          "bits",
                          v.tolerance)
            : fmt::format("{:.0e}", v.tolerance),
        v.nonFiniteTensor.empty()
            ? ""
            : fmt::format("; the step made '{}' NaN or infinite", v.nonFiniteTensor));
    if (v.noiseMeasured) {
      const std::string how = kernelsMode == Kernels::Compiled
                                  ? "generated kernels for library calls, weights moved by at "
                                    "most one float32 step"
                                  : "library calls for generated kernels, weights moved by at "
                                    "most one float32 step";
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
    if (v.plainCompared)
      llvm::outs() << (v.plainDiffering == 0
                           ? fmt::format("verify: the recomputing step equals the step without "
                                         "recomputation bit for bit (unpartitioned, over the "
                                         "same {} tensors)\n",
                                         v.compared)
                           : fmt::format(
                                 "verify: the recomputing step differs from the step without "
                                 "recomputation in {} of {} tensors (unpartitioned; largest "
                                 "relative difference {:.3g}, at '{}'){}\n",
                                 v.plainDiffering, v.compared, v.plainWorst, v.plainWorstTensor,
                                 v.plainWorst > v.tolerance ? ", beyond the tolerance" : ""));
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

} // namespace tofurun
