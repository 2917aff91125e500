#include "tofu_plan/document.h"

#include <algorithm>

#include "codegen/exec_plan.h"
#include "fmt/format.h"
#include "search/report.h"
#include "support/units.h"
#include "tofu_plan/report.h"

namespace tofuplan {

std::optional<Section> stagesSection(const tofu::PipelineResult &r) {
  if (!r.staged)
    return std::nullopt;
  const tofu::StagedPlan &staged = *r.staged;
  const tofu::MemoryPlan &memory = r.memory;
  Section out;
  const int64_t total = r.plan.totalBytes; // planStaged's count of r.exec's bytes
  int64_t within = 0;
  const std::vector<int64_t> inside = tofu::stageBytes(*r.problem, staged, r.exec);
  // A column of what each stage recomputes, where one does.
  const bool recomputes =
      std::any_of(staged.stages.begin(), staged.stages.end(),
                  [](const tofu::StageSummary &st) { return st.recomputed > 0; });
  out.text =
      fmt::format("pipeline: {}; the model's {} layers ({})\n\n"
                  "| stage | workers | layers | hands on | nodes | bytes inside it | "
                  "planned peak |{}\n| ---: | --- | --- | --- | ---: | ---: | ---: |{}\n",
                  staged.describe(), staged.layers,
                  staged.spec.roundRobin ? "its groups of weights, each the ops that read one"
                                         : "forward segments between cuts",
                  recomputes ? " recomputed tensors |" : "", recomputes ? " ---: |" : "");
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  size_t taken = 0; // the stages whose plans are an earlier stage's
  for (size_t s = 0; s < staged.stages.size(); ++s) {
    const tofu::StageSummary &st = staged.stages[s];
    int64_t peak = 0;
    for (unsigned w = st.firstWorker; w < st.firstWorker + st.workers; ++w)
      peak = std::max(peak, memory.workers[w].peak);
    within += inside[s];
    out.text += fmt::format(
        "| {} | {}{} | {}-{} | {} | {} | {} | {} |{}\n", s, st.firstWorker,
        st.workers > 1 ? fmt::format("-{}", st.firstWorker + st.workers - 1) : std::string(),
        st.firstLayer, st.firstLayer + st.layers - 1, st.boundary.empty() ? "-" : st.boundary,
        st.nodes, tofu::humanBytes(double(inside[s])), tofu::humanBytes(double(peak)),
        recomputes ? fmt::format(" {} |", st.recomputed) : std::string());
    stages.push_back({{"first_worker", st.firstWorker},
                      {"workers", st.workers},
                      {"first_layer", st.firstLayer},
                      {"layers", st.layers},
                      {"boundary", st.boundary},
                      {"nodes", st.nodes},
                      {"bytes_inside", inside[s]},
                      {"planned_peak_bytes", peak},
                      {"recomputed_tensors", st.recomputed}});
    if (st.planOf >= 0) {
      stages.back()["plan_of_stage"] = st.planOf;
      ++taken;
    }
  }
  if (taken > 0)
    out.text +=
        fmt::format("\nstage plans: {} searched, {} taken from an earlier stage of the same "
                    "problem under other names\n",
                    staged.stages.size() - taken, taken);
  out.text +=
      fmt::format("\nbytes per step: {} in all, {} between stages (the cuts and their "
                  "gradients, shared weights, scalars)\n",
                  tofu::humanBytes(double(total)), tofu::humanBytes(double(total - within)));
  const std::string forBudget =
      staged.reducedEachForBudget == 0
          ? std::string()
          : fmt::format("; {} every microbatch, their accumulators over the budget",
                        staged.reducedEachForBudget);
  if (staged.reduceOnceSeconds > 0 && staged.reducedOnce > 0)
    out.text += fmt::format("gradients: {} reduced once a step, not every microbatch (the step "
                            "estimated {:.3f} ms so, against {:.3f} ms){}\n",
                            staged.reducedOnce, 1e3 * staged.reduceOnceSeconds,
                            1e3 * staged.reduceEachSeconds, forBudget);
  else if (staged.reducedEachForBudget > 0)
    out.text += fmt::format("gradients: reduced every microbatch, their accumulators over the "
                            "budget once a step\n");
  else if (staged.reduceOnceSeconds > 0)
    out.text += fmt::format("gradients: reduced every microbatch (the step estimated {:.3f} ms "
                            "so, against {:.3f} ms reduced once a step)\n",
                            1e3 * staged.reduceEachSeconds, 1e3 * staged.reduceOnceSeconds);
  out.json = {{"stages", staged.spec.stages},
              {"microbatches", staged.spec.microbatches},
              {"schedule", tofu::scheduleName(staged.spec.schedule)},
              {"placement", staged.spec.roundRobin},
              {"layers", staged.layers},
              {"per_stage", stages},
              {"bytes", total},
              {"bytes_between_stages", total - within},
              {"gradients_reduced_once", staged.reducedOnce},
              {"gradients_reduced_every_microbatch_for_the_budget", staged.reducedEachForBudget}};
  if (staged.reduceOnceSeconds > 0)
    out.json["estimated_step_seconds_reducing"] = {{"once", staged.reduceOnceSeconds},
                                                   {"every_microbatch", staged.reduceEachSeconds}};
  return out;
}

std::string stagedPlanJson(const std::string &title, const tofu::PipelineResult &r) {
  nlohmann::ordered_json j;
  j["graph"] = title;
  j["workers"] = r.plan.workers;
  j["factors"] = r.exec.parts;
  j["algorithm"] = r.plan.algorithm;
  j["objective"] = r.plan.objective;
  j["communication_bytes"] = r.plan.totalBytes;
  j["memory"] = {{"planned_peak_bytes", r.memory.largestPeak()},
                 {"planned_peak_worker", r.memory.largestPeakWorker()}};
  return j.dump(1) + "\n";
}

/// What the precision policy made (before any recomputation's copies).
static const tofu::Graph &precisionGraph(const tofu::PipelineResult &r) {
  return r.withoutRecomputation ? *r.withoutRecomputation : r.graph;
}

static size_t bf16Tensors(const tofu::Graph &g) {
  return std::count_if(g.tensors().begin(), g.tensors().end(), [](const tofu::TensorInfo &t) {
    return t.dtype == tofu::ElementType::BFloat16;
  });
}

std::string precisionLineOf(const tofu::PipelineResult &result, tofu::Precision precision) {
  if (precision != tofu::Precision::BF16)
    return "";
  const tofu::Graph &precise = precisionGraph(result);
  return precisionLine(result.precision, bf16Tensors(precise), precise.tensors().size());
}

llvm::Expected<std::string> planDocument(const tofu::PipelineResult &result,
                                         const DocumentOptions &o) {
  const tofu::Graph *g = &result.graph;
  const tofu::Problem *problem = &*result.problem;
  const tofu::PartitionPlan *plan = &result.plan;
  const double analysis = result.analysisSeconds;
  const std::optional<int64_t> &budgetBytes = o.budget;
  const std::optional<tofu::Topology> &topology = o.topology;
  tofu::PlanReportOptions report;
  report.title = o.title;
  report.listTensors = report.listOps = !o.summary;
  std::string memoryLine;
  nlohmann::ordered_json fitJson = o.fitJson;
  // With recomputation: the rewritten graph's problem, plan and memory (planner/recompute.h).
  const tofu::BudgetChoice *chosen = result.budget ? &*result.budget : nullptr;
  const tofu::RecomputePlan *recomputed =
      chosen && chosen->recompute ? &*chosen->recompute : nullptr;
  // The report's memory lines: the chosen plan's planned peak and what is live then.
  if (chosen && (recomputed || budgetBytes) && !result.memory.workers.empty())
    reportPeak(report, *problem, result.memory, result.exec, budgetBytes.value_or(0));
  if (chosen)
    memoryLine = budgetLines(*chosen, *plan, o.fit, budgetBytes.has_value(), o.maxWorkers, fitJson);
  if (result.fitByTime && o.fit && budgetBytes)
    memoryLine += fitByTimeLine(*result.fitByTime, *budgetBytes, fitJson);
  report.exact = plan->workers <= 64;
  if (const auto &c = result.objectiveChoice)
    report.objectiveNote =
        c->bytesChosen
            ? fmt::format("; asked for time, but the bytes objective's plan is estimated "
                          "shorter ({:.3f} ms against the time objective's {:.3f} ms) and kept",
                          1e3 * c->bytesSeconds, 1e3 * c->timeSeconds)
            : fmt::format("; the bytes objective's plan is estimated at {:.3f} ms",
                          1e3 * c->bytesSeconds);
  std::string machineText;
  nlohmann::ordered_json machineJson;
  tofu::TopologyPlan machine;
  // The part of the machine the plan runs on: all of it, or the levels a budget's count fills.
  std::optional<tofu::Topology> stepMachine;
  const bool budgeted = budgetBytes.has_value();
  if (result.machine) // the machine's search, beside the plan of least bytes
    machine = *result.machine;
  // The plan chosen as the workers run it: for its traffic per level and its step time (a
  // pipeline's is runPipeline's own, not copied).
  const tofu::ExecPlan built =
      result.staged ? tofu::ExecPlan() : tofu::buildExecPlan(*problem, *plan);
  const tofu::ExecPlan &stepExec = result.staged ? result.exec : built;
  const std::optional<Section> staged = stagesSection(result);
  if (topology) {
    if (budgeted || result.staged) { // (no plan of least bytes searched beside it)
      stepMachine = budgeted ? tofu::topologyForWorkers(*topology, plan->workers) : *topology;
      machine.plan = *plan;
      machine.traffic = tofu::topologyTraffic(*problem, stepExec, *stepMachine);
    } else {
      stepMachine = *topology;
    }
    const Section section = machineSection(*stepMachine, machine, budgeted, plan->totalBytes,
                                           result.staged.has_value());
    machineText = section.text;
    machineJson = section.json;
    report.exact = plan->workers <= 64;
  }
  auto estimated = tofu::estimateStepTime(*problem, stepExec, g->outputs, o.device, stepMachine);
  if (!estimated)
    return estimated.takeError();
  const tofu::StepTimeEstimate &stepTime = *estimated;
  // What was recomputed, what it saved and what it costs.
  std::string recomputeLine;
  nlohmann::ordered_json recomputeJson;
  if (recomputed) {
    double without = 0;
    if (!recomputed->summary.copies.empty() && recomputed->problemWithout) {
      auto w = tofu::estimateStepTime(*recomputed->problemWithout, recomputed->execWithout,
                                      g->outputs, o.device, stepMachine);
      if (!w)
        return w.takeError();
      without = w->seconds;
    }
    const Section section = recomputeSection(*recomputed, chosen->fit, budgetBytes.has_value(),
                                             stepTime, without, o.device.name);
    recomputeLine = section.text;
    recomputeJson = section.json;
  }
  if (o.json) {
    std::string json =
        staged ? stagedPlanJson(report.title, result) : tofu::planJson(*problem, *plan, report);
    auto j = nlohmann::ordered_json::parse(json);
    j["step_time"] = nlohmann::ordered_json::parse(tofu::stepTimeJson(stepTime));
    if (const auto &c = result.objectiveChoice)
      j["objective_choice"] = {{"time_objective_step_seconds", c->timeSeconds},
                               {"bytes_objective_step_seconds", c->bytesSeconds},
                               {"bytes_objective_plan_kept", c->bytesChosen}};
    if (o.fit)
      j["fit"] = fitJson;
    if (recomputed)
      j["recompute"] = recomputeJson;
    if (topology)
      j["topology"] = machineJson;
    if (staged)
      j["pipeline"] = staged->json;
    if (o.precision != tofu::Precision::FP32)
      j["precision"] =
          precisionJson(o.precision, result.precision, bf16Tensors(precisionGraph(result)));
    if (result.stageSearch)
      j["stage_search"] = stageSearchSection(*result.stageSearch).json;
    if (o.explanation)
      j["explain"] = explainSection(*o.explanation, o.device.name).json;
    return j.dump(1) + "\n";
  }
  std::string text;
  if (!recomputed) // (with recomputation, each candidate set's graph was analysed)
    text += fmt::format("analysis of the graph's ops: {:.3f} s\n", analysis);
  text += memoryLine + recomputeLine + precisionLineOf(result, o.precision);
  if (result.stageSearch)
    text += stageSearchSection(*result.stageSearch).text;
  text += staged ? staged->text : tofu::planTable(*problem, *plan, report);
  text += machineText;
  text += tofu::formatStepTime(stepTime, o.summary ? 0 : 10);
  if (o.explanation)
    text += explainSection(*o.explanation, o.device.name).text;
  return text;
}

} // namespace tofuplan
