// The values of a synthetic training run, drawn so that any worker can draw any box of any
// tensor alone: every element is a pure function of the seed, the tensor's name, the step
// (for data) and the element's index (a counter-based generator: SplitMix64 over the
// element's index in a stream keyed by the rest). One process per worker then writes its
// own tiles without any process holding a whole tensor, and the unpartitioned reference
// draws exactly the same values.
#ifndef TOFU_RUNTIME_TRAINING_DATA_H
#define TOFU_RUNTIME_TRAINING_DATA_H

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/strategy.h"
#include "partition/problem.h"
#include "runtime/lr_schedule.h"

namespace tofu {

/// Every tensor without a producer of a training graph whose loss is `loss`:
///
/// - inputs as the op that reads them first needs them (analysis/verify.h's
///   inputValueRules): uniform in [-1, 1], integers in range for indices, labels and
///   conditions, a dominant diagonal for matrices handed to opaque functions; 0.5 for
///   tensors nothing reads;
/// - the loss gradient's seed `d_<loss>` 1, the learning rate `lr` at each step by
///   `TrainingHyper::schedule`, Adam's moments 0.9 and 0.999 with the bias corrections of
///   each step (1 - beta^t at the t-th update), epsilon 1e-8, normalisation epsilons
///   (rank-0 inputs named *eps) 0.1, matrices and filters uniform in ±1/sqrt(fan-in) and
///   optimiser state zero (eps 0.1, not PyTorch's 1e-5: the synthetic runs use batch 2, and
///   a small WResNet's last stage has 1x1 maps, so batch norm divides by the deviation of two
///   values; with 1e-3 two correct float32 runs part within a few steps, with 0.1 they agree
///   to 6e-8);
/// - `constants` (Graph::constants: an imported model's constant inputs) keep their values,
///   and so do the tensors `initial` gives values (Graph::initialValues: an imported
///   model's weights and buffers), unless a checkpoint is loaded over them;
/// - `momentum` (SGD with momentum, Nesterov) and `weight_decay` from `TrainingHyper`;
/// - the random inputs `random` names (Graph::randomInputs: a training-mode Dropout's mask,
///   ONNX's random generators) drawn afresh at every step from their distributions, unless
///   `constants` gives them values (evaluation gives a mask its expectation).
///
/// With `teacher`, every step draws a fresh batch: every data input (an input of rank >= 1
/// other than the labels or target) afresh — uniform in [-1, 1], or integers in its range —
/// and the labels or target computed from the largest data input by a fixed random teacher
/// (fixed by the seed): the input split into one row per label, each row folded onto 64
/// features, a fixed random linear map to the classes, and the argmax over the first 16
/// classes (softmax cross-entropy) or tanh (MSE target). A model can learn it, so the loss
/// can fall. Without a teacher (or when the loss is neither of those two, or the largest
/// input does not split into one row per label) the data stays fixed.
/// Hyper-parameters a training graph reads besides the base learning rate.
struct TrainingHyper {
  double momentum = 0.9;
  double weightDecay = 0;
  LrSchedule schedule;
};

class TrainingData {
public:
  TrainingData(const Problem &p, const std::string &loss, unsigned seed, double lr,
               const std::map<std::string, std::vector<double>> &constants = {},
               bool teacher = true,
               const std::map<std::string, std::vector<float>> *initial = nullptr,
               TrainingHyper hyper = TrainingHyper(),
               const std::map<std::string, RandomInput> *random = nullptr);
  /// The tensors whose values came from `initial`.
  unsigned initialized() const { return initialized_; }
  TrainingData(const TrainingData &) = delete; // rules point into constants_
  TrainingData &operator=(const TrainingData &) = delete;
  /// Every tensor without a producer.
  const std::vector<unsigned> &tensors() const { return tensors_; }
  /// The tensors whose values change from step to step (empty without a teacher).
  const std::vector<unsigned> &batchTensors() const { return batch_; }
  /// The tensors written before every step, with data or without: the hyper-parameters
  /// whose values change from step to step (the learning rate under a schedule, Adam's bias
  /// corrections) and the random inputs.
  const std::vector<unsigned> &scheduledTensors() const { return scheduled_; }
  /// Writes `box` of tensor `t` at step `step` (counted from the first step ever trained,
  /// so a resumed run continues the sequence) to `out`, row-major over the box. Tensors
  /// that are not batch tensors have the same value at every step.
  void fill(unsigned t, unsigned step, const Box &box, float *out) const;
  /// The whole tensor (for references that run unpartitioned).
  Tensor value(unsigned t, unsigned step) const;

private:
  enum class Kind { Fill, Given, GivenFloat, Uniform, Integers, Labels, Scheduled, Random };
  struct Rule {
    Kind kind = Kind::Fill;
    double a = 0, b = 0;  ///< Fill: a; Uniform: [a, b); Random: the distribution's a, b
    int64_t integers = 0; ///< Integers: [0, integers)
    std::optional<std::pair<unsigned, unsigned>> diagonal; ///< Uniform: boosted dimensions
    const std::vector<double> *given = nullptr;            ///< Given
    const std::vector<float> *givenFloat = nullptr;        ///< GivenFloat
    uint64_t stream = 0;                                   ///< from the seed and the tensor's name
    RandomInput::Kind random = RandomInput::Kind::Uniform; ///< Random: the distribution
    bool batch = false;                                    ///< drawn afresh each step
    std::function<double(unsigned)> schedule;              ///< Scheduled: the value at a step
  };
  /// Element `flat` (at `coords`) of tensor `t` under `rule` at step `step`.
  double element(const Rule &rule, unsigned t, unsigned step, int64_t flat,
                 const int64_t *coords) const;
  /// The teacher's label row `row` at step `step` into `scores` (one per class).
  void teacherScores(unsigned step, int64_t row, std::vector<double> &scores) const;

  const Problem &p_;
  std::vector<unsigned> tensors_, batch_, scheduled_;
  std::map<unsigned, Rule> rules_;
  std::map<std::string, std::vector<double>> constants_;
  unsigned initialized_ = 0;
  // The teacher.
  int input_ = -1; ///< the largest data input
  bool classify_ = false;
  int64_t rows_ = 0, width_ = 0, features_ = 0, classes_ = 0, picked_ = 0;
  std::vector<double> map_; ///< features x classes
};

/// Every tensor without a producer, whole, at step 0 (see TrainingData).
std::map<unsigned, Tensor>
trainingValues(const Problem &p, const std::string &loss, unsigned seed, double lr,
               const std::map<std::string, std::vector<double>> &constants = {});

/// Sets the tensors of `values` that `constants` names (by graph name) to their values.
void applyConstants(const Problem &p, const std::map<std::string, std::vector<double>> &constants,
                    std::map<unsigned, Tensor> &values);

} // namespace tofu

#endif // TOFU_RUNTIME_TRAINING_DATA_H
