// tofu-plan's reports beyond the plan's own tables (search/report.h): the precision policy's
// summary, the budget and --fit lines, the machine's levels, what recomputation cost, and
// --describe's table.
#ifndef TOFU_TOFU_PLAN_REPORT_H
#define TOFU_TOFU_PLAN_REPORT_H

#include <cstdint>
#include <optional>
#include <string>

#include "graph/graph.h"
#include "graph/precision.h"
#include "nlohmann/json.hpp"
#include "planner/explain.h"
#include "planner/pipeline.h"
#include "planner/small_batch.h"
#include "planner/step_time.h"
#include "planner/swap.h"
#include "planner/topology.h"
#include "search/report.h"

namespace tofuplan {

/// A report's text and its --format=json form.
struct Section {
  std::string text;
  nlohmann::ordered_json json;
};

/// Progress under a budget, a line each: a candidate set of recomputation planned (how many
/// tensors it drops, judged against the budget where `budgeted`), and a worker count --fit
/// decided (with recomputation `r`, what it recomputes there).
std::string candidateSetLine(size_t dropped, const tofu::MemoryFit &f, bool budgeted);
std::string workerCountLine(unsigned k, const tofu::MemoryFit &f, const tofu::RecomputePlan *r);

/// The bf16 policy's line: what it lowered and cast; `bf16Tensors` of `tensors` bfloat16.
std::string precisionLine(const tofu::PrecisionSummary &ps, size_t bf16Tensors, size_t tensors);
/// The same as --format=json gives it.
nlohmann::ordered_json precisionJson(tofu::Precision precision, const tofu::PrecisionSummary &ps,
                                     size_t bf16Tensors);

/// The report's memory figures: the plan's planned peak (`memory`), what is live then and at
/// which node, against `limit` (0: no budget).
void reportPeak(tofu::PlanReportOptions &report, const tofu::Problem &p,
                const tofu::MemoryPlan &memory, const tofu::ExecPlan &exec, int64_t limit);

/// The budget's lines (`budgeted`) and --fit's (`fit`: its scan into `fitJson`, which holds
/// the counts already tried where recomputation reported them as it went).
std::string budgetLines(const tofu::BudgetChoice &chosen, const tofu::PartitionPlan &plan, bool fit,
                        bool budgeted, unsigned maxWorkers, nlohmann::ordered_json &fitJson);

/// --fit's scan by time (tofu::FitByTime), its line, and its JSON into fitJson["by_time"];
/// `budget` is the bytes per worker it kept to.
std::string fitByTimeLine(const tofu::FitByTime &f, int64_t budget,
                          nlohmann::ordered_json &fitJson);

/// `--stages auto`'s search (tofu::StageSearch): each candidate's estimated step or why it was
/// not planned, and the one chosen.
Section stageSearchSection(const tofu::StageSearch &s);
/// One candidate, as its progress line says it.
std::string stageCandidateText(const tofu::StageCandidate &c);

/// The machine's levels the plan runs on (`part`): the traffic over each, against the plan of
/// least bytes' (`machine`) unless `budgeted` or `staged` (pipeline stages, each searched over
/// its part of the machine), and the estimated communication time.
Section machineSection(const tofu::Topology &part, const tofu::TopologyPlan &machine, bool budgeted,
                       int64_t planBytes, bool staged = false);

/// What recomputation dropped and what it costs: the planned peak against the plan without
/// (`fit`: the plan chosen) and the estimated step against `without` (0: not estimated).
Section recomputeSection(const tofu::RecomputePlan &r, const tofu::MemoryFit &fit, bool budgeted,
                         const tofu::StepTimeEstimate &stepTime, double without,
                         const std::string &deviceName);

/// --explain's section: the chosen plan's step split into compute, communication and bubble
/// on `device`, per stage its workers, time, memory and heaviest ops with their cuts, then
/// each runner-up with its step and what it costs more (or why it could not be planned).
Section explainSection(const tofu::Explanation &x, const std::string &device);

/// --algo smallbatch's and swap's options (`algo`): a training step (`train`) under a budget,
/// on one worker each: no --fit, --recompute or --stages, and no --topology but for swap's
/// host link. A usage error saying which.
llvm::Error checkOneWorker(tofu::Algorithm algo, bool train, bool budget, bool fit, bool topology,
                           bool recompute, bool stages);

/// --algo smallbatch's report: the largest batch that fits, of the `asked` one, and its
/// samples a second on one worker and on `workers`.
Section smallBatchSection(const tofu::SmallBatch &s, int64_t asked, int64_t budget,
                          unsigned workers);
/// --algo swap's report: the step unswapped and swapped, what moves over the host link, and
/// the samples a second on one worker and on `workers`. The host link is `topology`'s where
/// it gives one, else the device's; an error where neither does.
llvm::Expected<Section> swapReport(const tofu::GraphSource &source, const tofu::OpLibrary &lib,
                                   const tofu::PipelineOptions &options, int64_t budget,
                                   unsigned workers, const tofu::DeviceModel &device,
                                   const std::optional<tofu::Topology> &topology);
/// tofu::smallBatch's search, and its report.
llvm::Expected<Section> smallBatchReport(const tofu::GraphSource &source,
                                         const tofu::OpLibrary &lib,
                                         const tofu::PipelineOptions &options, int64_t budget,
                                         unsigned workers, const tofu::DeviceModel &device);

/// Why the model's flags do not go together, or null: --input without --onnx, --batch with
/// --graph.
const char *sourceConflict(bool input, bool onnx, bool batch, bool graph);

/// --describe's table: node and tensor counts and bytes per tensor role, under `headline`.
std::string describeTable(const tofu::Graph &g, const std::string &headline);

} // namespace tofuplan

#endif // TOFU_TOFU_PLAN_REPORT_H
