// The estimates beside a tofu-run training run (step_estimate.h).
#include "tofu_run/step_estimate.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "codegen/program_builder.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "runtime/cuda/kernel_report.h"
#include "support/errors.h"
#include "support/files.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

llvm::Expected<std::optional<tofu::DeviceModel>> thisRunsDevice() {
  std::optional<tofu::DeviceModel> device;
  if (!profileInto.empty() && std::ifstream(profileInto).good()) {
    auto d = tofu::deviceModelNamed(profileInto);
    if (!d)
      return tofu::usageError("--profile-into: " + llvm::toString(d.takeError()));
    device = std::move(*d);
  } else if (deviceOpt.getNumOccurrences()) {
    auto d = tofu::deviceModelNamed(deviceOpt);
    if (!d)
      return tofu::usageError("--device: " + llvm::toString(d.takeError()));
    device = std::move(*d);
  } else if ((backend == "cpu" || backend == "mpi") &&
             std::ifstream(tofu::defaultCpuModelPath()).good()) {
    auto d = tofu::deviceModelNamed("cpu");
    if (!d)
      return tofu::stringError(
          "the calibrated model of this machine: " + llvm::toString(d.takeError()) +
          " (tofu-run --calibrate writes it again)");
    device = std::move(*d);
  }
  if (!device && !profileInto.empty())
    return tofu::usageError(fmt::format("--profile-into {}: no device model to start it from: "
                                        "give --device, or run tofu-run --calibrate for this "
                                        "machine's",
                                        std::string(profileInto)));
  return device;
}

llvm::Expected<std::optional<tofu::StepTimeEstimate>>
estimateThisStep(const tofu::Problem &p, const tofu::ExecPlan &exec,
                 const std::vector<std::string> &outputs) {
  auto device = thisRunsDevice();
  if (!device)
    return device.takeError();
  if (!*device)
    return std::nullopt;
  auto e = tofu::estimateStepTime(p, exec, outputs, **device);
  if (!e)
    return e.takeError();
  return std::optional<tofu::StepTimeEstimate>(std::move(*e));
}

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
  if (llvm::Error e = tofu::writeFileAtomically(path, tofu::deviceModelJson(d), "a device model"))
    return tofu::stringError("--profile-into: " + llvm::toString(std::move(e)));
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

} // namespace tofurun
