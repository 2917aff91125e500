// SmallBatch (planner/small_batch.h): the largest batch one worker fits, by bisection over
// the memory planner's peak.
#include "planner/small_batch.h"

#include <utility>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "support/units.h"

namespace tofu {

llvm::Expected<SmallBatch> smallBatch(GraphSource source, const OpLibrary &lib,
                                      PipelineOptions options, int64_t budget, unsigned workers,
                                      const DeviceModel &device) {
  if (!source.graphFile.empty())
    return stringError("smallbatch changes the batch: give --model or --onnx (a graph JSON's "
                       "shapes are its own)");
  if (budget <= 0)
    return stringError("smallbatch needs the memory of a worker: give --memory-per-worker");
  options.search.workers = 1;
  options.search.algorithm = Algorithm::Tofu; // one worker: the plan is the whole step
  options.until = Stage::Execution;
  options.memoryPerWorker = 0; // judged here, on the plan alone
  options.recompute.reset();
  options.fitWorkersUpTo = 0;
  options.machine.reset();
  SmallBatch r;
  const int64_t asked = source.batch;
  // The planned peak of a batch, and its pipeline (kept for the largest that fits).
  std::optional<PipelineResult> best;
  auto peakOf = [&](int64_t batch) -> llvm::Expected<int64_t> {
    source.batch = batch;
    source.batchGiven = true;
    auto piped = runPipeline(source, lib, options);
    if (!piped)
      return piped.takeError();
    ++r.tried;
    const int64_t peak = piped->memory.largestPeak();
    if (peak <= budget && batch > r.batch) {
      r.batch = batch;
      r.peak = peak;
      best = std::move(*piped);
    } else if (peak > budget && (r.over == 0 || batch < r.over)) {
      r.over = batch;
      r.overPeak = peak;
    }
    return peak;
  };
  auto top = peakOf(asked);
  if (!top)
    return top.takeError();
  if (*top > budget) {
    auto one = asked == 1 ? llvm::Expected<int64_t>(*top) : peakOf(1);
    if (!one)
      return one.takeError();
    if (*one > budget)
      return stringError(fmt::format(
          "smallbatch: even a batch of 1 does not fit one worker in {}: its planned peak is "
          "{}, {} over",
          humanBytes(double(budget)), humanBytes(double(*one)), humanBytes(double(*one - budget))));
    int64_t lo = 1, hi = asked; // lo fits, hi does not
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      auto peak = peakOf(mid);
      if (!peak)
        return peak.takeError();
      (*peak <= budget ? lo : hi) = mid;
    }
  }
  auto step = estimateStepTime(*best->problem, best->exec, best->graph.outputs, device);
  if (!step)
    return step.takeError();
  r.step = std::move(*step);
  r.name = best->name;
  r.samplesPerSecond = r.step.seconds > 0 ? double(r.batch) / r.step.seconds : 0;
  r.allWorkers = r.samplesPerSecond * workers;
  return r;
}

} // namespace tofu
