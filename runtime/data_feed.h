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

#include <string>
#include <vector>

#include "runtime/dataset.h"
#include "runtime/engine.h"
#include "search/problem.h"
#include "search/search.h"

namespace tofu {

/// A graph input fed from an array of a data set.
struct DataBinding {
  unsigned tensor = 0;
  std::string input; ///< the tensor's name
  std::string array; ///< the array's name in the data set
  bool labels = false; ///< integer classes, fed as they are
};

/// Binds `ds`'s arrays to the inputs of `p`:
/// - `feeds` (`INPUT=ARRAY,...`, may be empty) binds by name;
/// - otherwise an array `labels` feeds the loss's labels (the second input of
///   softmax_cross_entropy, `loss` naming its output; none when `loss` is empty), and the
///   one other array feeds the one data input (an input of rank >= 1 that is not the labels
///   and has no value of its own: a constant or a model's initial value).
/// Each bound input's first dimension is the batch; an array's sample must have as many
/// elements as one batch row of the input; labels must be integers in [0, classes).
/// Errors name the input, the array and what does not fit.
llvm::Expected<std::vector<DataBinding>> bindDataSet(
    const Problem &p, const std::string &loss, const DataSet &ds, const std::string &feeds,
    const std::map<std::string, std::vector<double>> &constants,
    const std::map<std::string, std::vector<float>> &initial);

/// Writes the batch of `samples` (one index per batch row) into every bound input's local
/// tiles.
void feedBatch(Engine &engine, const DataSet &ds, const std::vector<DataBinding> &bindings,
               const std::vector<int64_t> &samples, const Normalization &norm);

/// `train` restricted to `sub`, whose nodes and tensors are some of `full`'s by name (the
/// forward graph of a training graph): each keeps its choice at every step. Errors name a
/// node or tensor `full` does not have.
llvm::Expected<PartitionPlan> restrictPlan(const PartitionPlan &train, const Problem &full,
                                           const Problem &sub);

/// Copies every tensor without a producer that both engines have by name and `to` holds
/// (weights, buffers) from `from`, tile by tile on each local worker. The tiles must agree
/// (restrictPlan's plans make them agree); an error names a tensor whose tiles do not.
llvm::Error copyState(const Engine &from, Engine &to);

/// A classifier's loss and top-1 accuracy over some rows.
struct ClassifierScore {
  double lossSum = 0; ///< the softmax cross-entropy summed over the rows
  int64_t correct = 0;
  int64_t rows = 0;
  double loss() const { return rows > 0 ? lossSum / double(rows) : 0; }
  double accuracy() const { return rows > 0 ? double(correct) / double(rows) : 0; }
};

/// Adds the first `rows` rows of `logits` ([batch, classes]) against `labels` (one per row)
/// to `score`. The argmax takes the first of equal maxima; a row with NaN is wrong.
void scoreRows(const Tensor &logits, const std::vector<double> &labels, int64_t rows,
               ClassifierScore &score);

} // namespace tofu

#endif // TOFU_RUNTIME_DATA_FEED_H
