// What tofu-run prints of a training run (train.cc drives it): the header before the steps,
// the steps and evaluations as they come, and the summary after them, as text or JSON.
#ifndef TOFU_TOFU_RUN_TRAIN_REPORT_H
#define TOFU_TOFU_RUN_TRAIN_REPORT_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "planner/step_time.h"
#include "runtime/trainer.h"
#include "tofu_run/driver.h"
#include "llvm/Support/Error.h"

namespace tofurun {

/// What the trainer reports, printed as tofu-run prints it: a progress line on a terminal,
/// else a table row every --log-every steps; each evaluation.
class Printer : public tofu::TrainerObserver {
public:
  Printer(const tofu::Trainer &trainer, bool json, bool terminal)
      : trainer_(trainer), json_(json), terminal_(terminal) {}
  void stepped(const tofu::StepRecord &r) override;
  void evaluating() override { closeLine(); }
  void evaluated(const tofu::EvalRecord &e) override;
  /// Ends the progress line, if one is open.
  void closeLine();

private:
  const tofu::Trainer &trainer_;
  bool json_, terminal_, open_ = false;
};

/// The run as the lines before its steps say it.
struct TrainingSetup {
  const tofu::Problem &problem;
  const tofu::Graph &training;
  const std::string &name;
  const std::string &algorithm;
  const tofu::EnginePlan &planned;
  const RecomputeRun *recompute = nullptr;
  bool library = true;   ///< library calls beside the generated kernels
  bool terminal = false; ///< steps print as a progress line, not as a table
};

/// The header: the run, the weights' origin, the data, the evaluation, recomputation,
/// fusion and kernels, then the head of the steps' table.
void printTrainingHeader(const tofu::Trainer &trainer, const TrainingSetup &setup);

/// The run after its steps, for the summary.
struct TrainingOutcome {
  const TrainingSetup &setup;
  const tofu::SingleWorker &one;
  int64_t predicted = 0; ///< the bytes the plan moves per step
  const std::optional<tofu::StepTimeEstimate> &estimate;
  const std::optional<tofu::VerifyReport> &verified;
  const tofu::ProcessMemory &processMemory; ///< before --verify's reference ran
  std::string profileLine;                  ///< --profile-into's
  std::string budgetLine;                   ///< each arena against the memory budget
  int status = 0;                           ///< the exit status so far
};

/// --verify's verdict (runtime/step_verify.h), for the JSON and as the summary says it:
/// the verdict, the float32 noise where it was measured, and the recomputing step against
/// the plain one.
nlohmann::json verifyJson(const tofu::VerifyReport &v);
void printVerify(const tofu::VerifyReport &v);

/// Prints the summary (or the JSON, and writes --metrics) and returns the exit status.
int reportTraining(tofu::Trainer &trainer, const TrainingOutcome &outcome);

} // namespace tofurun

#endif // TOFU_TOFU_RUN_TRAIN_REPORT_H
