// Verifying a partitioned training step against the unpartitioned step (tofu-run --verify).
//
// The partitioned run keeps the first step's results (FirstStepRecord): the loss and every
// tensor the step carries to the next (updated weights, optimiser states), tile by tile as
// this process holds them. verifyFirstStep then runs the same first step on one worker, from
// the same values, and compares. Where the partitioned step differs beyond the tolerance it
// also measures float32's own noise (the unpartitioned step in another summation order from
// weights moved by one rounding) to tell a wrong partition from an ill-conditioned step.
// Where the step recomputes, it also compares the recomputing step with the step without
// recomputation, bit for bit.
//
// The trainer (runtime/trainer.h) makes the engines; this module only decides. It prints
// nothing, and its errors name no command-line option.
#ifndef TOFU_RUNTIME_STEP_VERIFY_H
#define TOFU_RUNTIME_STEP_VERIFY_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "partition/problem.h"
#include "runtime/engine.h"
#include "runtime/process_group.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// How far `got` lies from `want`, relative to `want` and never to less than 1:
/// |got - want| / max(1, |want|). Infinite where either is not finite.
double relativeDifference(float got, float want);

/// verifyFirstStep's comparison of the first step with the unpartitioned step.
struct VerifyReport {
  bool passed = false;
  std::string verdict; ///< passed, failed or ill-conditioned
  double worst = 0;    ///< the largest relative difference over the compared tensors
  std::string worstTensor;
  std::string nonFiniteTensor; ///< the first the partitioned step made NaN or infinite
  double tolerance = 0;
  size_t compared = 0; ///< the loss, then every updated weight and optimiser state
  bool noiseMeasured = false;
  double noise = 0; ///< float32 noise: the unpartitioned step in another summation order
  size_t noisy = 0; ///< tensors that rounding alone moves beyond the tolerance
  /// Where the step recomputes: the unpartitioned recomputing step against the unpartitioned
  /// step without recomputation, over the same compared tensors (by name).
  bool plainCompared = false;
  size_t plainDiffering = 0; ///< tensors not bit-identical
  double plainWorst = 0;     ///< their largest relative difference
  std::string plainWorstTensor;
};

/// The partitioned step's first results, as this process holds them.
class FirstStepRecord {
public:
  /// `compared`: the loss tensor, then every tensor the step carries.
  void setCompared(std::vector<unsigned> compared) { compared_ = std::move(compared); }
  const std::vector<unsigned> &compared() const { return compared_; }
  /// Before the first step: the carried tiles holding a value that is not finite (a mask of
  /// -inf trained with --trainable). Where the step leaves such a value as it was, and the
  /// reference does too, the comparison counts it equal.
  void before(const Engine &e);
  /// After the first step: every compared tile this process holds.
  void after(const Engine &e);
  bool kept() const { return !compared_.empty() && after_.size() == compared_.size(); }
  /// The bytes of the tiles kept.
  int64_t bytes() const { return bytes_; }
  /// The tiles of compared tensor `i` after the step: (worker, values) per tile held.
  const std::vector<std::pair<unsigned, std::vector<float>>> &after(size_t i) const {
    return after_[i];
  }
  /// Worker `w`'s tile of compared tensor `i` before the step, where it was not finite.
  const std::vector<float> *nonFiniteBefore(size_t i, unsigned w) const;

private:
  std::vector<unsigned> compared_;
  /// Per compared tensor: (worker, its tile) for each tile this process holds.
  std::vector<std::vector<std::pair<unsigned, std::vector<float>>>> after_;
  /// Per (compared index, worker): the tile before the step, where it was not finite.
  std::map<std::pair<size_t, unsigned>, std::vector<float>> nonFiniteBefore_;
  int64_t bytes_ = 0;
};

/// The unpartitioned engines verifyFirstStep runs, made by the trainer. Each returns an
/// engine in this process alone holding the first step's values, not yet stepped.
struct VerifyRuns {
  /// The step as the run planned it, with library calls (`library`) or generated kernels;
  /// `what` names the run in its errors.
  std::function<llvm::Expected<std::unique_ptr<Engine>>(bool library, const std::string &what)>
      reference;
  /// The library setting the partitioned run used.
  bool library = true;
  /// Where the step recomputes: the problem without recomputation and its engine (values
  /// not set); unset otherwise.
  const Problem *plain = nullptr;
  std::function<llvm::Expected<std::unique_ptr<Engine>>()> plainEngine;
};

/// Moves each element of every weight `e` holds to the neighbouring float32 above or below
/// it with probability 1/2 each way (a fixed SplitMix64 draw per element): the weights as a
/// different rounding would have left them. Where a step is chaotic (a ReLU or clip whose
/// input lies within rounding of its threshold, a normalisation over a few values), such a
/// change moves the step as far as any other float32 summation order may.
void nudgeWeights(Engine &e, const Problem &p);

/// Compares `partitioned`'s first step (`kept`) with the unpartitioned step of `p`.
/// `tolerance` < 0: the engine's own (kFloat32StepTolerance, or kBfloat16StepTolerance where
/// the program stores tensors in bfloat16). Under several processes every process runs the
/// reference itself, compares the tiles it holds, and the report is the same on each.
llvm::Expected<VerifyReport> verifyFirstStep(const Problem &p, const Engine &partitioned,
                                             const FirstStepRecord &kept, double tolerance,
                                             ProcessGroup &group, const VerifyRuns &runs);

} // namespace tofu

#endif // TOFU_RUNTIME_STEP_VERIFY_H
