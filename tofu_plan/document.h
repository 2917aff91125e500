// tofu-plan's document of a plan: its report as text or as --format=json's JSON, from the
// pipeline's result and the flags given. tofu-plan prints it; the Python module
// (python/module.cc) gives it as Plan.summary(), text() and to_json().
#ifndef TOFU_TOFU_PLAN_DOCUMENT_H
#define TOFU_TOFU_PLAN_DOCUMENT_H

#include <cstdint>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "planner/pipeline.h"
#include "planner/step_time.h"
#include "planner/topology.h"
#include "tofu_plan/report.h"
#include "llvm/Support/Error.h"

namespace tofuplan {

/// Pipeline stages' report (--stages): the schedule, and per stage its workers, layers, the
/// cut it hands on, its nodes, its own plan's bytes and its workers' largest planned peak;
/// then the bytes between stages.
/// None where the plan has no stages.
std::optional<Section> stagesSection(const tofu::PipelineResult &r);
/// A pipelined plan's JSON ahead of its "pipeline" section: the graph (`title`), its workers,
/// algorithm, bytes and planned peak. A pipeline has a partition per stage, not one plan's
/// tensors and ops (search/report.h's planJson), so it lists none.
std::string stagedPlanJson(const std::string &title, const tofu::PipelineResult &r);

/// What a plan's document needs beside the pipeline's result: tofu-plan's flags as given.
struct DocumentOptions {
  std::string title;    ///< "mlp training step (batch 32)"
  bool json = false;    ///< --format=json's document (else the text)
  bool summary = false; ///< the text's summary only: no per-tensor and per-op tables
  tofu::Precision precision = tofu::Precision::FP32;
  std::optional<int64_t> budget; ///< --memory-per-worker's or --fit's bytes
  bool fit = false;
  unsigned maxWorkers = 0; ///< --fit's
  /// The counts --fit tried, where recomputation reported them as it went ("tried").
  nlohmann::ordered_json fitJson;
  std::optional<tofu::Topology> topology;
  tofu::DeviceModel device; ///< the step is estimated on it
  /// --explain's account of the plan, where asked for (its section ends the document).
  const tofu::Explanation *explanation = nullptr;
};

/// The precision policy's line, of the step `r` planned before any recomputation's copies;
/// empty unless `precision` is bf16.
std::string precisionLineOf(const tofu::PipelineResult &r, tofu::Precision precision);

/// tofu-plan's document of the plan `r` (Stage::Plan or later): the text of its budget,
/// recomputation and precision lines, its tables (or a pipeline's stages), the machine's
/// levels and the estimated step, or the same as one JSON object (with a newline). Errors:
/// the step's estimate failed.
llvm::Expected<std::string> planDocument(const tofu::PipelineResult &r, const DocumentOptions &o);

} // namespace tofuplan

#endif // TOFU_TOFU_PLAN_DOCUMENT_H
