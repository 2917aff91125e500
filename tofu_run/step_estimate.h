// The estimates beside a tofu-run training run: the step time on the run's device model
// (planner/step_time.h), --profile-into's measured ops written back into that model, and
// --kernel-report's CUDA kernel estimates.
#ifndef TOFU_TOFU_RUN_STEP_ESTIMATE_H
#define TOFU_TOFU_RUN_STEP_ESTIMATE_H

#include <optional>
#include <string>
#include <vector>

#include "planner/step_time.h"
#include "runtime/trainer.h"
#include "llvm/Support/Error.h"

namespace tofurun {

/// The device model this run estimates its step on: the one --profile-into starts from,
/// --device's, or this machine's calibrated model where the backend is the CPU's and one
/// was calibrated. None: no device model. Errors are bad usage where an option names it.
llvm::Expected<std::optional<tofu::DeviceModel>> thisRunsDevice();

/// The step-time estimate (planner/step_time.h) on the device model this run has: the one
/// --profile-into starts from, --device's, or this machine's calibrated model where the
/// backend is the CPU's and one was calibrated. None: no device model. Errors are bad usage
/// where an option names the model.
llvm::Expected<std::optional<tofu::StepTimeEstimate>>
estimateThisStep(const tofu::Problem &p, const tofu::ExecPlan &exec,
                 const std::vector<std::string> &outputs);

/// --profile-into: each op instance's measured compute time (the run's average per step),
/// as a measured op of the device model the estimate used (the median of the instances
/// it stands for, replacing one the model had), written to `path`. Returns the line saying
/// so.
llvm::Expected<std::string>
storeMeasuredOps(const tofu::StepTimeEstimate &estimate,
                 const std::vector<std::vector<tofu::NodeTime>> &profile, unsigned steps,
                 unsigned workerCount, const std::string &path);

/// --kernel-report: the CUDA kernels' estimates for worker 0's share of every node.
int kernelReport(const tofu::EnginePlan &planned, const std::string &name);

} // namespace tofurun

#endif // TOFU_TOFU_RUN_STEP_ESTIMATE_H
