// Learning-rate schedules and the per-step hyper-parameters of the optimisers: values a
// training run writes into its rank-0 inputs before every step, as functions of the step's
// index counted from the first step ever trained (so a run resumed from a checkpoint
// continues the schedule where it stopped).
#ifndef TOFU_RUNTIME_LR_SCHEDULE_H
#define TOFU_RUNTIME_LR_SCHEDULE_H

#include <string>

#include "support/errors.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The learning rate at step t (from 0) for a base rate `lr`:
///
/// - a linear warm-up over the first `warmup` steps: lr * (t + 1) / (warmup + 1), PyTorch's
///   LinearLR(start_factor = 1 / (warmup + 1), total_iters = warmup);
/// - then, at u = t - warmup: `Constant` lr; `Step` lr * gamma^floor(u / every) (StepLR);
///   `Cosine` lr * (1 + cos(pi * u / (horizon - warmup))) / 2 up to the horizon, 0 after it
///   (CosineAnnealingLR with T_max = horizon - warmup, eta_min = 0), `horizon` counting the
///   warm-up's steps.
///
/// The whole schedule is the one PyTorch's SequentialLR([warm-up, main], milestones =
/// [warmup]) steps through, stepped once per training step.
struct LrSchedule {
  enum class Kind { Constant, Step, Cosine };
  Kind kind = Kind::Constant;
  unsigned every = 0;   ///< Step: steps between decays
  double gamma = 0.1;   ///< Step: the factor of each decay
  unsigned horizon = 0; ///< Cosine: the step at which the rate reaches 0 (0: not yet set)
  unsigned warmup = 0;  ///< steps of linear warm-up before the schedule

  double at(double lr, unsigned step) const;
  /// The form parseLrSchedule reads back ("constant", "step:30:0.1", "cosine:1000").
  std::string str() const;
};

/// Reads `constant`, `step:EVERY[:GAMMA]` (GAMMA default 0.1) or `cosine[:HORIZON]`. A
/// cosine without a horizon gets one later (the run's last step). Errors say what is wrong,
/// naming the setting as `names` spells "lr-schedule".
llvm::Expected<LrSchedule> parseLrSchedule(const std::string &text, const SettingNames &names = {});

/// Adam's bias corrections after `step` + 1 updates: 1 - beta^(step + 1).
double adamBiasCorrection(double beta, unsigned step);

} // namespace tofu

#endif // TOFU_RUNTIME_LR_SCHEDULE_H
