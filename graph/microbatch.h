// A training step's forward graph over M microbatches (microbatch.cc): the model at batch B/M
// copied M times, each copy reading its slice of the full batch's inputs and every copy
// reading the same weights, with the loss the mean of the copies' losses. Differentiated by
// buildTrainingGraph, its weight gradients sum the copies' contributions, so one update per
// step sees the gradient of the full batch (pipeline stages run such a graph:
// planner/stages.h).
#ifndef TOFU_GRAPH_MICROBATCH_H
#define TOFU_GRAPH_MICROBATCH_H

#include <optional>
#include <string>

#include "graph/graph.h"
#include "graph/library.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The suffix of microbatch `m`'s copies of a tensor, node or group ("@mb2").
std::string microbatchSuffix(unsigned m);
/// The microbatch of a name with microbatchSuffix's suffix, and the name without it; unset
/// for other names.
std::optional<std::pair<std::string, unsigned>> splitMicrobatch(const std::string &name);

/// `full` and `micro` are one checked model with its loss (its one output, a scalar) at
/// batches B and B/M. The result has `full`'s inputs and weights, and per microbatch m a copy
/// of `micro`'s nodes and activations named with microbatchSuffix(m), whose inputs of the
/// batch read a Slice of `full`'s (the one axis where the shapes differ, by a factor of M).
/// Its output is the mean of the copies' losses (`<loss>_microbatches`). The copies are
/// declared last microbatch first, so that buildTrainingGraph, differentiating in reverse,
/// sums each weight's gradient in microbatch order as the backward passes come. A batch norm's
/// running statistics are updated by the first microbatch only (its statistics; one update per
/// step). Errors name an input whose shapes do not differ by one axis of M.
llvm::Expected<Graph> microbatchGraph(const Graph &full, const Graph &micro, unsigned m,
                                      const OpLibrary &lib);

} // namespace tofu

#endif // TOFU_GRAPH_MICROBATCH_H
