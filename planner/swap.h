// The paper's Swapping baseline (EuroSys'19, Figures 8 and 9; its design after vDNN and
// Meng et al.): one worker trains the whole batch in less memory than its step needs, moving
// tensors to host memory and back over its host link. An estimate only: no engine runs it.
//
// - The step's nodes run in the worker's order, each once its inputs are on the device and
//   its output has room, for the time the step estimate gives it (planner/step_time.h).
// - A tensor is on the device from its production, or its arrival from the host, until its
//   last read in the step (weights, optimiser state and the graph's outputs: for good),
//   unless it is swapped out.
// - When a node's inputs and output do not fit, the least recently used tensors are swapped
//   out. Those the next `lookahead` nodes read are kept while any other can go (the paper's
//   dataflow rule). A tensor whose host copy is current (a weight not yet updated, a batch
//   input) is dropped, not copied: read-only tensors go to the host once.
// - Prefetch: as a node starts, the host-held inputs of the next `lookahead` nodes are
//   brought in, where memory allows without swapping out what those nodes read.
// - The host link moves one transfer at a time each way, both ways at once and beside the
//   compute: a transfer takes the link's latency plus its bytes over its bandwidth.
// - Steady state: two steps run, and the second is the estimate. Weights and optimiser state
//   start on the host, and the second step finds them where the first left them (an update's
//   result in place of what it updates).
//
// Tensors are counted whole, with no arena's gaps, scratch or fused-away intermediates: the
// memory planner's peak (codegen/memory_plan.h) is what the same step needs unswapped.
#ifndef TOFU_PLANNER_SWAP_H
#define TOFU_PLANNER_SWAP_H

#include <cstdint>
#include <string>
#include <vector>

#include "partition/problem.h"
#include "planner/pipeline.h"
#include "planner/step_time.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct SwapOptions {
  int64_t budget = 0;       ///< bytes of device memory
  double hostBandwidth = 0; ///< bytes per second each way
  double hostLatency = 0;   ///< seconds per transfer
  unsigned lookahead = 2;   ///< nodes ahead that prefetch serves and eviction spares
};

struct SwapEstimate {
  double seconds = 0;                ///< the step, swapping
  double computeSeconds = 0;         ///< its nodes' compute alone: the step with memory enough
  double stallSeconds = 0;           ///< compute waiting for transfers and memory
  int64_t bytesIn = 0, bytesOut = 0; ///< over the host link in the step
  int64_t transfersIn = 0, transfersOut = 0;
  int64_t droppedBytes = 0; ///< swapped out without a copy (the host's was current)
  int64_t peakBytes = 0;    ///< the most on the device at once
  int64_t wholeBytes = 0;   ///< the most live at once without a budget (tensors counted whole)
  std::string largestNode;  ///< the node whose inputs and output take the most at once
  int64_t largestNodeBytes = 0;
};

/// Simulates swapping for the step of `p` run in `order` (node indices), `seconds` per node.
/// Errors: a node whose inputs and output alone exceed the budget, a host link without
/// bandwidth.
llvm::Expected<SwapEstimate> estimateSwap(const Problem &p, const std::vector<unsigned> &order,
                                          const std::vector<double> &seconds,
                                          const SwapOptions &options);

/// The Swapping baseline of a model: its training step at `source.batch` on one worker of
/// `device` (`options`' optimiser, precision and loss), swapping within `options.budget`
/// over the host link given, and `workers` such workers credited with that many times its
/// samples a second (each its own replica and host link, nothing exchanged, as SmallBatch
/// is credited).
struct Swapping {
  std::string name;
  int64_t batch = 0;
  int64_t plannedPeak = 0; ///< the memory planner's peak of the step unswapped
  SwapEstimate swap;
  SwapOptions options;
  double samplesPerSecond = 0, allWorkers = 0;
};
llvm::Expected<Swapping> swapping(const GraphSource &source, const OpLibrary &lib,
                                  PipelineOptions pipeline, const SwapOptions &options,
                                  unsigned workers, const DeviceModel &device);

} // namespace tofu

#endif // TOFU_PLANNER_SWAP_H
