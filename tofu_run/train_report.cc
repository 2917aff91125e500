// tofu-run's words on a training run (train_report.h).
#include "tofu_run/train_report.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"
#include "support/files.h"
#include "support/units.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

void Printer::stepped(const tofu::StepRecord &r) {
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

void Printer::evaluated(const tofu::EvalRecord &e) {
  if (!json_)
    llvm::outs() << fmt::format(
        "eval after step {} (epoch {:.2f}): loss {:.4f}, accuracy "
        "{:.2f}% on {} held-out samples{} ({:.1f} s)\n",
        e.step, e.epoch, e.score.loss(), 100 * e.score.accuracy(), e.samples,
        e.score.rows != e.samples ? fmt::format(" ({} positions, a label each)", e.score.rows)
                                  : std::string(),
        e.seconds);
}

void Printer::closeLine() {
  if (open_)
    llvm::outs() << "\n";
  open_ = false;
}

namespace {

/// The optimiser as the header says it: "adamw, lr 0.001 (cosine:100 after 5 warm-up
/// steps), weight decay 0.01".
std::string optimizerText(const tofu::Trainer &trainer) {
  const tofu::TrainingHyper &hyper = trainer.hyper();
  const tofu::Optimizer kind = trainer.optimizer();
  std::string text = fmt::format("{}, lr {}", tofu::optimizerName(kind), trainer.lr());
  std::vector<std::string> how;
  if (hyper.schedule.kind != tofu::LrSchedule::Kind::Constant)
    how.push_back(hyper.schedule.str());
  if (hyper.schedule.warmup > 0)
    how.push_back(
        fmt::format("{}{} warm-up steps", how.empty() ? "" : "after ", hyper.schedule.warmup));
  if (!how.empty())
    text += fmt::format(" ({})", fmt::join(how, " "));
  if (kind == tofu::Optimizer::Momentum || kind == tofu::Optimizer::Nesterov)
    text += fmt::format(", momentum {}", hyper.momentum);
  if (hyper.weightDecay > 0 || kind == tofu::Optimizer::AdamW)
    text += fmt::format(", weight decay {}", hyper.weightDecay);
  return text;
}

} // namespace

void printTrainingHeader(const tofu::Trainer &trainer, const TrainingSetup &setup) {
  const tofu::Problem &p = setup.problem;
  const tofu::Graph &training = setup.training;
  const std::string &name = setup.name;
  const std::string &algorithm = setup.algorithm;
  const tofu::FusedPlan &fused = setup.planned.fused;
  const RecomputeRun *recompute = setup.recompute;
  const bool terminal = setup.terminal;
  const tofu::DataSet *ds = trainer.dataSet();
  const tofu::BackendStats bs = trainer.engine().backendStats();
  const tofu::KernelCompileStats &cs = bs.compile;
  const std::string optimizerText = tofurun::optimizerText(trainer);
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
      !setup.library ? "generated kernels"
      : gpu          ? "cuBLAS, cuDNN + generated kernels"
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
                         : fmt::format("; {} more initializer{} constant (not trained: the "
                                       "importer's rule, --frozen, or no loss reaching them; "
                                       "--trainable NAME trains one the rule holds)",
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

int reportTraining(tofu::Trainer &trainer, const TrainingOutcome &outcome) {
  const bool json = format == Format::Json;
  const TrainingSetup &setup = outcome.setup;
  const std::string &name = setup.name;
  const tofu::FusedPlan &fused = setup.planned.fused;
  const RecomputeRun *recompute = setup.recompute;
  const std::optional<tofu::StepTimeEstimate> &estimate = outcome.estimate;
  const std::optional<tofu::VerifyReport> &checked = outcome.verified;
  const std::string &profileLine = outcome.profileLine;
  const std::string &budgetLine = outcome.budgetLine;
  const int64_t predicted = outcome.predicted;
  const int64_t onePeak = outcome.one.memory.largestPeak();
  int status = outcome.status;
  tofu::Engine &engine = trainer.engine();
  const tofu::BackendStats bs = engine.backendStats();
  const tofu::KernelCompileStats &cs = bs.compile;
  const tofu::TrainingHyper &hyper = trainer.hyper();
  const double lr = trainer.lr();
  const unsigned stepCount = trainer.steps();
  const tofu::DataSet *ds = trainer.dataSet();
  const std::vector<double> &losses = trainer.losses();
  const std::vector<double> &stepSeconds = trainer.stepSeconds();
  const int64_t moved = trainer.bytesMoved();
  const std::vector<int64_t> peaks = engine.arenaBytes();
  const tofu::ProcessMemory &pm = outcome.processMemory;
  const double med = median(stepSeconds);

  if (json || !metricsFile.empty()) {
    nlohmann::json j;
    j["model"] = name;
    j["workers"] = unsigned(workers);
    j["optimizer"] = tofu::optimizerName(trainer.optimizer());
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
    if (checked)
      j["verify"] = verifyJson(*checked);
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
    if (!metricsFile.empty() && group->rank() == 0)
      if (llvm::Error e = tofu::writeFileAtomically(metricsFile, j.dump(1) + "\n", "metrics"))
        return fail(std::move(e));
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
  if (checked)
    printVerify(*checked);
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
