// --verify's verdict as tofu-run prints it (train_report.h).
#include "fmt/format.h"
#include "tofu_run/options.h"
#include "tofu_run/train_report.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

nlohmann::json verifyJson(const tofu::VerifyReport &v) {
  nlohmann::json j = {{"passed", v.passed},
                      {"largest_relative_difference", v.worst},
                      {"non_finite_tensor", v.nonFiniteTensor},
                      {"worst_tensor", v.worstTensor},
                      {"tolerance", v.tolerance},
                      {"tensors_compared", v.compared},
                      {"verdict", v.verdict}};
  if (v.noiseMeasured) {
    j["float32_noise"] = v.noise;
    j["noisy_tensors"] = v.noisy;
  }
  if (v.plainCompared)
    j["recomputing_against_plain"] = {{"bit_identical", v.plainDiffering == 0},
                                      {"tensors_differing", v.plainDiffering},
                                      {"largest_relative_difference", v.plainWorst},
                                      {"worst_tensor", v.plainWorstTensor}};
  return j;
}

void printVerify(const tofu::VerifyReport &v) {
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
                         : fmt::format("verify: the recomputing step differs from the step without "
                                       "recomputation in {} of {} tensors (unpartitioned; largest "
                                       "relative difference {:.3g}, at '{}'){}\n",
                                       v.plainDiffering, v.compared, v.plainWorst,
                                       v.plainWorstTensor,
                                       v.plainWorst > v.tolerance ? ", beyond the tolerance" : ""));
}

} // namespace tofurun
