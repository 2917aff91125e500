// Feeding a data set (runtime/dataset.h) to a partitioned model, and evaluating a
// classifier on held-out data, forward only, partitioned like training.
//
// Each worker writes only its own tile of each batch input (Engine::setTiles): the batch's
// sample indices are known to every process, and a tile copies just the rows and elements
// its box covers.
//
// Evaluation runs the forward graph (the model without its loss) on a second engine whose
// plan is the training plan restricted to the forward nodes and tensors: every weight has
// the same tiles on the same workers in both, so the weights pass from the training engine
// to the evaluation engine tile by tile, in each worker's own memory, with no communication.
// Loss and top-1 accuracy are computed from the logits on the host, row by row, so the
// last partial batch counts only its real samples (the rest of it repeats the first ones).
#ifndef TOFU_RUNTIME_DATA_FEED_H
#define TOFU_RUNTIME_DATA_FEED_H

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "partition/plan.h"
#include "partition/problem.h"
#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "support/errors.h"

namespace tofu {

/// A graph input fed from an array of a data set.
struct DataBinding {
  unsigned tensor = 0;
  std::string input;   ///< the tensor's name
  std::string array;   ///< the array's name in the data set
  bool labels = false; ///< integer classes, fed as they are
};

/// Binds `ds`'s arrays to the inputs of `p`:
/// - `feeds` (`INPUT=ARRAY,...`, may be empty) binds by name;
/// - otherwise an array `labels` feeds the loss's labels (the second input of
///   softmax_cross_entropy or softmax_cross_entropy_seq, `loss` naming its output; none
///   when `loss` is empty), and the one other array feeds the one data input (an input of
///   rank >= 1 that is not the labels and has no value of its own: a constant, a model's
///   initial value or, by `random`, a random input drawn at every step).
/// Each bound input's first dimension is the batch; an array's sample must have as many
/// elements as one batch row of the input; labels must be integers in [0, classes).
/// Errors name the input, the array and what does not fit; the feed setting as `names`
/// spells "feed".
llvm::Expected<std::vector<DataBinding>>
bindDataSet(const Problem &p, const std::string &loss, const DataSet &ds, const std::string &feeds,
            const std::map<std::string, std::vector<double>> &constants,
            const std::map<std::string, std::vector<float>> &initial,
            const std::map<std::string, RandomInput> &random = {}, const SettingNames &names = {});

/// The classes of `loss` (a softmax cross-entropy's): its logits' last dimension.
int64_t lossClasses(const Problem &p, const std::string &loss);

/// Why array `a` (`array` in the data set) cannot be the labels of `loss` over `classes`
/// classes: it holds no integers, or an element outside [0, classes).
llvm::Error checkLabels(const DataArray &a, const std::string &array, const std::string &loss,
                        int64_t classes);

/// The index of the tensor named `name` in `p`, or -1.
int findTensor(const Problem &p, const std::string &name);

/// The sample shape of each array of `ds` that will feed a named input, by the input's name
/// (`feeds` as bindDataSet reads it; when it would refuse them, none, for it to report),
/// or without `feeds`, of the one array besides `labels`, under "" (the one data input).
/// An ONNX import fixes its inputs' dynamic axes by them (OnnxImportOptions::sampleShapes).
std::map<std::string, std::vector<int64_t>> sampleShapesFed(const DataSet &ds,
                                                            const std::string &feeds);

/// Writes the batch of `samples` (one index per batch row) into every bound input's local
/// tiles.
void feedBatch(Engine &engine, const DataSet &ds, const std::vector<DataBinding> &bindings,
               const std::vector<int64_t> &samples, const Normalization &norm);

/// The samples of training step `step` (counted over every run, so a resumed run continues
/// the order): batch `step % stepsPerEpoch` of epoch `step / stepsPerEpoch`, taken from
/// that epoch's epochOrder. Keeps the last epoch's order (one instance per thread).
class BatchOrder {
public:
  /// With `shuffle` false every epoch takes the samples in file order (PyTorch's
  /// shuffle=False), else epochOrder(samples, seed, epoch).
  BatchOrder(int64_t samples, int64_t batch, uint64_t seed, bool shuffle = true)
      : samples_(samples), batch_(batch), seed_(seed), shuffle_(shuffle) {}
  int64_t stepsPerEpoch() const { return batch_ > 0 ? samples_ / batch_ : 0; }
  std::vector<int64_t> samplesOf(unsigned step);

private:
  int64_t samples_, batch_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int64_t> order_; ///< of epoch `epoch_`
  int64_t epoch_ = -1;
};

/// Feeds a training engine its batches, assembling the next step's tiles on a thread of
/// its own while the engine runs the current step, so that gathering, converting and
/// normalising samples overlaps the step: feed() waits for the tiles assembled ahead
/// (assembling them itself when the step is not the one expected), writes them into the
/// engine, and starts on the following step unless told it is the last. The data set and
/// the engine's program must outlive it; only feed() touches the engine.
class BatchPrefetcher {
public:
  BatchPrefetcher(const Engine &engine, const DataSet &ds, std::vector<DataBinding> bindings,
                  Normalization norm, int64_t batch, uint64_t seed, bool shuffle = true);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher &) = delete;
  BatchPrefetcher &operator=(const BatchPrefetcher &) = delete;
  void feed(Engine &engine, unsigned step, bool more);
  /// Seconds feed() waited for tiles assembled ahead, and spent assembling tiles itself.
  double waitSeconds() const { return wait_; }
  double assembleSeconds() const { return assemble_; }

private:
  struct Staged {
    unsigned step = 0;
    std::vector<std::vector<float>> tiles; ///< per binding and local worker holding a tile
  };
  Staged assemble(unsigned step);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  double wait_ = 0, assemble_ = 0;
};

/// Copies every tensor without a producer that both engines have by name and `to` holds
/// (weights, buffers) from `from`, tile by tile on each local worker. The tiles must agree
/// (restrictPlan's plans make them agree), else an error names a tensor whose tiles do not;
/// or, with `whole`, a tensor whose tiles differ (another plan of the model: a pipeline's
/// stages, the evaluation's partition) is taken whole from `from` by `whole(its index)`
/// (every process calls it for the same tensors in the same order) and each local tile of
/// `to` cut from it.
llvm::Error copyState(const Engine &from, Engine &to,
                      const std::function<Tensor(unsigned)> &whole = nullptr);

/// A classifier's loss and top-1 accuracy over some rows.
struct ClassifierScore {
  double lossSum = 0; ///< the softmax cross-entropy summed over the rows
  int64_t correct = 0;
  int64_t rows = 0;
  double loss() const { return rows > 0 ? lossSum / double(rows) : 0; }
  double accuracy() const { return rows > 0 ? double(correct) / double(rows) : 0; }
};

/// Adds the first `rows` rows of `logits` (rows of its last axis: [batch, classes], or
/// [batch, positions, classes] with a row per position) against `labels` (one per row) to
/// `score`. The argmax takes the first of equal maxima; a row with NaN is wrong.
void scoreRows(const Tensor &logits, const std::vector<double> &labels, int64_t rows,
               ClassifierScore &score);

} // namespace tofu

#endif // TOFU_RUNTIME_DATA_FEED_H
