// The paper's SmallBatch baseline (EuroSys'19, Figures 8 and 9): one worker trains the
// largest batch whose step fits its memory, and k such workers would train k times its
// samples a second. An estimate only: no engine runs it.
#ifndef TOFU_PLANNER_SMALL_BATCH_H
#define TOFU_PLANNER_SMALL_BATCH_H

#include <cstdint>
#include <optional>
#include <string>

#include "planner/pipeline.h"
#include "planner/step_time.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct SmallBatch {
  std::string name;      ///< the model or file, for messages
  int64_t batch = 0;     ///< the largest batch whose step fits (at most the one asked for)
  int64_t peak = 0;      ///< its planned peak (the memory planner's)
  int64_t over = 0;      ///< the smallest batch found not to fit (0: the one asked for fits)
  int64_t overPeak = 0;  ///< its planned peak
  unsigned tried = 0;    ///< the batches planned
  StepTimeEstimate step; ///< the step at `batch` on one worker
  /// Samples a second: one worker's, and `workers` of them, each its own replica (the
  /// paper's ideal: nothing exchanged).
  double samplesPerSecond = 0, allWorkers = 0;
};

/// The largest batch up to `source.batch` whose training step (`options`' optimiser,
/// precision and loss; nothing recomputed) has a planned peak within `budget` bytes on one
/// worker, found by bisection (the peak grows with the batch), and its step estimated on
/// `device`. An error where even a batch of 1 does not fit, saying by how much, or where
/// the source has no batch to change (a graph JSON).
llvm::Expected<SmallBatch> smallBatch(GraphSource source, const OpLibrary &lib,
                                      PipelineOptions options, int64_t budget, unsigned workers,
                                      const DeviceModel &device);

} // namespace tofu

#endif // TOFU_PLANNER_SMALL_BATCH_H
