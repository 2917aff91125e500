// tofu-run --kernels interp: one step of the plan on the reference executor (every op in
// the TDL interpreter, double precision), its bytes against the plan's prediction, and with
// --verify every tensor against the unpartitioned step.
#include <algorithm>
#include <chrono>

#include "fmt/format.h"
#include "graph/training.h"
#include "runtime/cpu_executor.h"
#include "support/units.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

int runOnExecutor(const tofu::Problem &p, const tofu::Graph &training, const std::string &name,
                  const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                  const tofu::SingleWorker &single, const tofu::PartitionPlan &plan) {
  if (tolerance < 0)
    tolerance = 1e-4;
  auto given = tofu::randomGraphInputs(p, seed);
  tofu::applyConstants(p, training.constants, given);
  auto start = std::chrono::steady_clock::now();
  auto result = tofu::runPlan(p, exec, given);
  if (!result)
    return fail(name + ": " + llvm::toString(result.takeError()));
  double runSeconds = seconds(start);
  const int64_t predicted = predictedBytes(p, plan, exec);

  llvm::outs() << fmt::format("{} training step ({}, batch {}): {} nodes on {} workers, algorithm "
                              "{}, CPU executor\n",
                              name, tofu::optimizerName(optimizer), batch, p.nodes.size(), workers,
                              plan.algorithm);
  llvm::outs() << fmt::format("partitioned step: {:.3f} s; bytes moved {} (the plan predicts {}: "
                              "{})\n",
                              runSeconds, result->bytesMoved, predicted,
                              result->bytesMoved == predicted ? "equal" : "DIFFERENT");
  const int64_t onePeak = single.memory.largestPeak();
  llvm::outs() << fmt::format("\n| worker | peak memory | / (single-worker peak / k) | tiles |\n"
                              "| ---: | ---: | ---: | ---: |\n");
  for (unsigned w = 0; w < workers; ++w)
    llvm::outs() << fmt::format("| {} | {} | {:.3f} | {} |\n", w,
                                tofu::humanBytes(double(memory.workers[w].peak)),
                                double(memory.workers[w].peak) * workers / double(onePeak),
                                tofu::humanBytes(double(memory.workers[w].tileBytes)));
  llvm::outs() << fmt::format("single-worker peak: {}\n", tofu::humanBytes(double(onePeak)));
  int status = result->bytesMoved == predicted ? 0 : 1;
  if (verify) {
    start = std::chrono::steady_clock::now();
    auto reference = tofu::runReference(p, given);
    if (!reference)
      return fail(name + ": the unpartitioned step: " + llvm::toString(reference.takeError()));
    llvm::outs() << fmt::format("\nunpartitioned step: {:.3f} s\n\n| tensor | role | largest "
                                "relative difference |\n| --- | --- | ---: |\n",
                                seconds(start));
    double worst = 0, worstAll = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i) {
      double e = tofu::maxRelativeError(result->tensors[i], (*reference)[i]);
      worstAll = std::max(worstAll, e);
      const tofu::ProblemTensor &pt = p.tensors[i];
      bool reported = pt.role == tofu::TensorRole::OptimizerState ||
                      std::find(training.outputs.begin(), training.outputs.end(), pt.name) !=
                          training.outputs.end();
      if (!reported || pt.producer < 0)
        continue;
      worst = std::max(worst, e);
      llvm::outs() << fmt::format("| {} | {} | {:.3g} |\n", pt.name, tofu::roleName(pt.role), e);
    }
    bool ok = worst <= tolerance && worstAll <= tolerance;
    llvm::outs() << fmt::format("\nverify: {} (largest relative difference {:.3g} over the "
                                "outputs and updated weights, {:.3g} over every tensor; "
                                "tolerance {:.0e})\n",
                                ok ? "PASSED" : "FAILED", worst, worstAll, double(tolerance));
    if (!ok)
      status = 1;
  }
  return status;
}

} // namespace tofurun
