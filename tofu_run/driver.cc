// The driver's shared parts: the process group, fail(), the engine of --backend.
#include "tofu_run/driver.h"

#include <algorithm>

#include "codegen/program_builder.h"
#include "fmt/format.h"
#include "search/cost_model.h"
#include "support/errors.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

tofu::ProcessGroup *group = &tofu::localProcessGroup();

int fail(const std::string &msg, int code) {
  if (!group->distributed()) {
    llvm::errs() << "tofu-run: " << msg << "\n";
    return code;
  }
  llvm::errs() << fmt::format("tofu-run: rank {} of {}: {}\n", group->rank(), group->size(), msg);
  llvm::errs().flush();
  // The others may be waiting on this process in a collective: end the whole job.
  group->abort(code);
  return code;
}

int fail(llvm::Error e) {
  std::string message;
  const int status = tofu::exitStatusOf(std::move(e), message);
  return fail(message, status);
}

tofu::EngineOptions engineOptions() {
  tofu::EngineOptions options;
  options.names = tofu::SettingNames::flags();
  options.threadsPerWorker = threadsPerWorker;
  options.checking = checking;
  options.library = kernelsMode == Kernels::Compiled;
  options.profile = profileTop > 0 || !profileInto.empty();
  return options;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int64_t predictedBytes(const tofu::Problem &p, const tofu::PartitionPlan &plan,
                       const tofu::ExecPlan &exec) {
  return exec.stages > 1 ? plan.totalBytes : tofu::CostModel(p).bruteForceCost(plan.steps);
}

tofu::BackendSettings backendSettings() {
  tofu::BackendSettings settings;
  settings.names = tofu::SettingNames::flags();
  settings.tf32 = tf32;
  if (mpiTransport.getNumOccurrences() > 0)
    settings.mpiTransport = mpiTransport;
  return settings;
}

llvm::Expected<std::unique_ptr<tofu::Engine>>
makeEngine(const tofu::Problem &p, const tofu::ExecPlan &plan, const tofu::MemoryPlan &memory,
           const tofu::EngineOptions &options, bool local) {
  auto program = tofu::buildProgram(p, plan, memory);
  if (!program)
    return program.takeError();
  return tofu::findBackend(backend)->make(std::move(*program), options, backendSettings(), *group,
                                          local);
}

} // namespace tofurun
