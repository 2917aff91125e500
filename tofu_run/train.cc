// tofu-run training on the engine: the trainer (runtime/trainer.h) driven, its steps and
// evaluations printed as they come (train_report.h), then the checks after them: --verify's
// comparison, the arenas against the memory budget, --profile-into, and the summary.
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "codegen/fusion.h"
#include "fmt/format.h"
#include "graph/onnx_import.h"
#include "runtime/trainer.h"
#include "support/units.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "tofu_run/step_estimate.h"
#include "tofu_run/train_report.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

int runTraining(const tofu::Problem &p, const tofu::Graph &training, const std::string &loss,
                const std::string &name, const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                const tofu::SingleWorker &one, int64_t predicted, const std::string &algorithm,
                const EvalSetup *evalSetup, std::shared_ptr<const tofu::DataSet> dataSet,
                const RecomputeRun *recompute) {
  const bool json = format == Format::Json;
  // mpirun hands its processes a terminal whatever its own output is: no progress line.
  const bool terminal = !json && !group->distributed() && ::isatty(STDOUT_FILENO);
  // The estimated step time (planner/step_time.h), beside the measured one.
  auto estimate = estimateThisStep(p, exec, training.outputs);
  if (!estimate)
    return fail(estimate.takeError());
  // Element-wise chains folded (codegen/fusion.h): the engine runs the fused plan.
  auto planned = tofu::planForEngine(p, exec, memory, training.outputs, fusion);
  if (!planned)
    return fail(llvm::toString(planned.takeError()));
  if (kernelReportOpt)
    return kernelReport(*planned, name);

  tofu::TrainerOptions options;
  options.names = tofu::SettingNames::flags();
  options.name = name;
  options.optimizer = optimizer;
  auto given = [](const auto &o) {
    using T = std::decay_t<decltype(o.getValue())>;
    return o.getNumOccurrences() > 0 ? std::optional<T>(o.getValue()) : std::nullopt;
  };
  options.lr = given(learningRate);
  options.momentum = given(momentumOpt);
  options.weightDecay = given(weightDecayOpt);
  options.lrSchedule = lrSchedule;
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
  const TrainingSetup setup{
      p, training, name, algorithm, *planned, recompute, options.engine.library, terminal};
  if (!json)
    printTrainingHeader(trainer, setup);
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
  int status = trainer.bytesMoved() == predicted ? 0 : 1;
  // Each process's memory, before --verify's reference adds its own.
  const tofu::ProcessMemory processMemory = trainer.processMemory();

  // --verify: the first step unpartitioned on the same engine.
  std::optional<tofu::VerifyReport> checked;
  if (verify) {
    auto v = trainer.verify(tolerance);
    if (!v)
      return fail(v.takeError());
    checked = std::move(*v);
    if (!checked->passed)
      status = 1;
    // Recomputing must not change what the step computes beyond float32 rounding.
    if (checked->plainCompared && checked->plainWorst > checked->tolerance)
      status = 1;
  }
  // --profile-into: each op's measured time into the device model.
  std::string profileLine;
  if (!profileInto.empty() && group->rank() == 0) {
    auto written = storeMeasuredOps(**estimate, engine.profile(), trainer.steps(),
                                    unsigned(workers), profileInto);
    if (!written)
      return fail(written.takeError());
    profileLine = *written;
  }
  // Each worker's arena against the budget it was planned within.
  std::string budgetLine;
  if (recompute && recompute->budget > 0) {
    const std::vector<int64_t> peaks = engine.arenaBytes();
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

  return reportTraining(trainer, TrainingOutcome{setup, one, predicted, *estimate, checked,
                                                 processMemory, profileLine, budgetLine, status});
}

} // namespace tofurun
