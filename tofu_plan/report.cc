// tofu-plan's reports beyond the plan's own tables (report.h).
#include "tofu_plan/report.h"

#include <algorithm>

#include "codegen/memory_plan.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/precision.h"
#include "support/errors.h"
#include "support/units.h"

namespace tofuplan {
namespace {

std::string human(double bytes) { return tofu::humanBytes(bytes); }

/// A plan judged against the budget, as the progress lines say it.
std::string judged(const tofu::MemoryFit &f) {
  return f.fits ? fmt::format("fits, planned peak {}", human(double(f.peak)))
                : fmt::format("closest plan's peak {}, {} over", human(double(f.peak)),
                              human(double(f.peak - f.limit)));
}

} // namespace

std::string candidateSetLine(size_t dropped, const tofu::MemoryFit &f, bool budgeted) {
  return fmt::format("recomputing {} tensor{}: {} ({} plan{} searched, {:.1f} s)\n", dropped,
                     dropped == 1 ? "" : "s",
                     budgeted ? judged(f) : fmt::format("planned peak {}", human(double(f.peak))),
                     f.searches, f.searches == 1 ? "" : "s", f.seconds);
}

std::string workerCountLine(unsigned k, const tofu::MemoryFit &f, const tofu::RecomputePlan *r) {
  if (!r)
    return fmt::format("{} workers: {} ({} plan{} searched, {:.1f} s)\n", k, judged(f), f.searches,
                       f.searches == 1 ? "" : "s", f.seconds);
  return fmt::format("{} workers: {}{}\n", k, judged(f),
                     f.fits && !r->summary.copies.empty()
                         ? fmt::format(", recomputing {} tensors", r->summary.dropped.size())
                         : "");
}

std::string precisionLine(const tofu::PrecisionSummary &ps, size_t bf16Tensors, size_t tensors) {
  return fmt::format(
      "precision bf16 (as torch.autocast): {} product{} and convolution{} on bfloat16 "
      "operands through {} cast{} ({} rounded once with their bias); {} float32 op{} "
      "reading bfloat16, {} storing for products only in bfloat16;{}{} {} of {} tensors "
      "bfloat16\n",
      ps.lowered, ps.lowered == 1 ? "" : "s", ps.lowered == 1 ? "" : "s", ps.casts,
      ps.casts == 1 ? "" : "s", ps.fusedBias, ps.float32, ps.float32 == 1 ? "" : "s",
      ps.storedNarrow,
      ps.gelus ? fmt::format(" {} GELU{} the export spelled out in five ops joined into one "
                             "(rounding once, as nn.GELU);",
                             ps.gelus, ps.gelus == 1 ? "" : "s")
               : std::string(),
      ps.addmms ? fmt::format(" {} exported baddbmm{} (a product plus an addend) rounded once;",
                              ps.addmms, ps.addmms == 1 ? "" : "s")
                : std::string(),
      bf16Tensors, tensors);
}

nlohmann::ordered_json precisionJson(tofu::Precision precision, const tofu::PrecisionSummary &ps,
                                     size_t bf16Tensors) {
  return {{"name", tofu::precisionName(precision)},
          {"casts", ps.casts},
          {"lowered_ops", ps.lowered},
          {"float32_ops_reading_bf16", ps.float32},
          {"float32_ops_storing_bf16", ps.storedNarrow},
          {"products_rounded_with_bias", ps.fusedBias},
          {"gelus_joined", ps.gelus},
          {"addmms_joined", ps.addmms},
          {"bf16_tensors", bf16Tensors}};
}

void reportPeak(tofu::PlanReportOptions &report, const tofu::Problem &p,
                const tofu::MemoryPlan &memory, const tofu::ExecPlan &exec, int64_t limit) {
  const unsigned peakWorker = memory.largestPeakWorker();
  report.plannedPeak = memory.largestPeak();
  report.plannedPeakWorker = peakWorker;
  if (limit > 0)
    report.memoryLimit = limit;
  const tofu::LiveAtMost live = tofu::liveAtMost(memory.workers[peakWorker]);
  report.liveTiles = live.tiles;
  report.liveFetches = live.fetches;
  report.livePartials = live.partials;
  const tofu::LiveTiles byRole = tofu::liveTilesAt(p, memory.workers[peakWorker], live.time);
  report.liveInputs = byRole.inputs;
  report.liveWeights = byRole.weights;
  report.liveActivations = byRole.activations;
  report.liveGradients = byRole.gradients;
  report.liveOptimizerState = byRole.optimizerState;
  report.liveBfloat16 = byRole.bfloat16;
  report.liveLargest.clear();
  for (const auto &[t, bytes] : byRole.largest)
    report.liveLargest.emplace_back(p.tensors[t].name, bytes);
  // Node i of the plan's order runs at times 3i and 3i + 1 (codegen/memory_plan.h).
  const size_t at = size_t(live.time / 3);
  report.peakNode = at < exec.nodes.size() ? p.nodes[exec.nodes[at].node].name : std::string();
}

std::string budgetLines(const tofu::BudgetChoice &chosen, const tofu::PartitionPlan &plan, bool fit,
                        bool budgeted, unsigned maxWorkers, nlohmann::ordered_json &fitJson) {
  const tofu::RecomputePlan *recomputed = chosen.recompute ? &*chosen.recompute : nullptr;
  std::string memoryLine;
  if (fit && recomputed && chosen.fitStages == 0) {
    fitJson["budget_bytes"] = chosen.limit;
    fitJson["workers"] = plan.workers;
    fitJson["lower_bound"] = 1; // recomputation may fit below the tensors' bound
    fitJson["workers_without_recomputation"] = recomputed->workersWithout;
    memoryLine = fmt::format(
        "fit: {} per worker needs {} workers with recomputation '{}' ({} without; the "
        "counts below by bisection, down to the weights' and optimiser state's bound)\n",
        human(double(chosen.limit)), plan.workers, tofu::recomputeModeName(recomputed->mode),
        recomputed->workersWithout ? std::to_string(recomputed->workersWithout)
                                   : fmt::format("more than {}", maxWorkers));
  } else if (fit) { // over worker counts, or (fitStages) over multiples of the stages
    fitJson["budget_bytes"] = chosen.limit;
    fitJson["workers"] = plan.workers;
    if (chosen.fitStages > 0)
      fitJson["stages"] = chosen.fitStages;
    fitJson["lower_bound"] = chosen.lowerBound;
    fitJson["tried"] = nlohmann::ordered_json::array();
    std::vector<std::string> counts;
    for (const auto &[k, peak] : chosen.tried) {
      fitJson["tried"].push_back({{"workers", k}, {"closest_peak_bytes", peak}});
      counts.push_back(
          fmt::format("{} ({})", k, peak <= chosen.limit ? "fits" : human(double(peak))));
    }
    if (chosen.fitStages > 0)
      memoryLine = fmt::format(
          "fit: {} per worker needs {} workers, {} stages of {} (tried {}: multiples of {} from "
          "the {} the weights and optimiser state need, up by doubling, then bisected)\n",
          human(double(chosen.limit)), plan.workers, chosen.fitStages,
          plan.workers / chosen.fitStages, fmt::join(counts, ", "), chosen.fitStages,
          chosen.lowerBound);
    else
      memoryLine = fmt::format(
          "fit: {} per worker needs {} workers (tried {} to {}; fewer than {} cannot hold the "
          "tensors the one-worker plan has live at once)\n",
          human(double(chosen.limit)), plan.workers, chosen.lowerBound, plan.workers,
          chosen.lowerBound);
  }
  if (budgeted && recomputed)
    memoryLine += fmt::format(
        "memory budget {} per worker: {} candidate set{} of recomputation planned in "
        "{:.3f} s; the plan chosen has memory priced at {:.3g} per byte\n",
        human(double(chosen.limit)), recomputed->tried, recomputed->tried == 1 ? "" : "s",
        recomputed->seconds, chosen.fit.memoryWeight);
  else if (budgeted)
    memoryLine += fmt::format("memory budget {} per worker: {} plan{} searched and memory-planned "
                              "in {:.3f} s; the one chosen has memory priced at {:.3g} per byte\n",
                              human(double(chosen.limit)), chosen.fit.searches,
                              chosen.fit.searches == 1 ? "" : "s", chosen.fit.seconds,
                              chosen.fit.memoryWeight);
  return memoryLine;
}

namespace {

std::string ms(double seconds) { return fmt::format("{:.3f} ms", 1e3 * seconds); }

nlohmann::ordered_json stepCostJson(const tofu::StepCost &c) {
  return {{"seconds", c.seconds},          {"critical_worker", c.worker},
          {"compute_seconds", c.compute},  {"communication_seconds", c.communication},
          {"bubble_seconds", c.bubble},    {"planned_peak_bytes", c.peak},
          {"communication_bytes", c.bytes}};
}

std::string workerRange(unsigned first, unsigned count) {
  return count > 1 ? fmt::format("{}-{}", first, first + count - 1) : std::to_string(first);
}

} // namespace

std::string fitByTimeLine(const tofu::FitByTime &f, int64_t budget,
                          nlohmann::ordered_json &fitJson) {
  nlohmann::ordered_json counts = nlohmann::ordered_json::array();
  std::vector<std::string> each;
  for (const tofu::FitByTime::Count &c : f.counts) {
    counts.push_back({{"workers", c.workers},
                      {"step_seconds", c.seconds},
                      {"worker_seconds", c.workerSeconds()}});
    each.push_back(fmt::format("{} workers {} a step ({:.1f} worker-ms)", c.workers, ms(c.seconds),
                               1e3 * c.workerSeconds()));
  }
  const tofu::FitByTime::Count &fewest = f.counts[0], &least = f.counts[f.least];
  fitJson["by_time"] = {{"counts", counts},
                        {"least_worker_seconds_workers", least.workers},
                        {"kept_workers", fewest.workers},
                        {"stopped", f.stopped}};
  const std::string scan = fmt::format("{} (doubling the workers while a step's worker-seconds "
                                       "fall; stopped: {})",
                                       fmt::join(each, ", "), f.stopped);
  if (f.least == 0)
    return fmt::format("fit by time: {}; the fewest workers are also the least worker-seconds: "
                       "kept\n",
                       scan);
  return fmt::format(
      "fit by time: {}; the least worker-seconds are at {} workers, {:.1f}% fewer than the "
      "fewest's and {:.2f}x faster a step. --fit keeps the fewest, what it asks for; "
      "`--workers {} --memory-per-worker {}` plans the other\n",
      scan, least.workers, 100 * (1 - least.workerSeconds() / fewest.workerSeconds()),
      fewest.seconds / least.seconds, least.workers, budget);
}

std::string stageCandidateText(const tofu::StageCandidate &c) {
  const std::string what =
      c.stages == 1 && c.microbatches == 1
          ? std::string("no stages")
          : fmt::format("{} stages, {} microbatches", c.stages, c.microbatches);
  return c.error.empty() ? fmt::format("{} {}", what, ms(c.seconds))
                         : fmt::format("{} not planned ({})", what, c.error);
}

Section stageSearchSection(const tofu::StageSearch &s) {
  Section out;
  std::vector<std::string> each;
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  for (const tofu::StageCandidate &c : s.candidates) {
    each.push_back(stageCandidateText(c));
    nlohmann::ordered_json j = {{"stages", c.stages}, {"microbatches", c.microbatches}};
    if (c.error.empty())
      j["step_seconds"] = c.seconds;
    else
      j["not_planned"] = c.error;
    candidates.push_back(std::move(j));
  }
  const tofu::StageCandidate &chosen = s.candidates[s.chosen];
  out.text = fmt::format("stages auto: by the estimated step: {}. Chosen: {} ({} candidates "
                         "planned in {:.1f} s)\n",
                         fmt::join(each, "; "), stageCandidateText(chosen), s.candidates.size(),
                         s.seconds);
  out.json = {{"candidates", candidates},
              {"chosen_stages", chosen.stages},
              {"chosen_microbatches", chosen.microbatches},
              {"seconds", s.seconds}};
  return out;
}

Section explainSection(const tofu::Explanation &x, const std::string &device) {
  Section out;
  const tofu::StepCost &c = x.cost;
  const bool staged = x.stages.size() > 1 || (!x.stages.empty() && x.stages[0].layers > 0);
  out.text = fmt::format(
      "\nwhy this plan (--explain): {} on {} worker{}, {} a step on {}: compute {}, "
      "communication {}{} (worker {}, the most compute and communication); planned peak {}\n\n",
      x.plan, x.workers, x.workers == 1 ? "" : "s", ms(c.seconds), device, ms(c.compute),
      ms(c.communication), staged ? ", the schedule's bubble " + ms(c.bubble) : std::string(),
      c.worker, tofu::humanBytes(double(c.peak)));
  out.text += fmt::format(
      "| {}workers | compute | communication | planned peak | heaviest ops "
      "(seconds; how the {} cuts each) |\n| {}--- | ---: | ---: | ---: | --- |\n",
      staged ? "stage | layers | " : "", staged ? "stage's first worker" : "critical worker",
      staged ? "---: | --- | " : "");
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (size_t s = 0; s < x.stages.size(); ++s) {
    const tofu::StageCost &st = x.stages[s];
    std::vector<std::string> heavy;
    nlohmann::ordered_json heavyJson = nlohmann::ordered_json::array();
    for (const tofu::HeavyOp &h : st.heaviest) {
      heavy.push_back(fmt::format("{} ({}) {}: {}", h.node, h.op, ms(h.seconds), h.cut));
      heavyJson.push_back({{"node", h.node}, {"op", h.op}, {"seconds", h.seconds}, {"cut", h.cut}});
    }
    out.text += fmt::format(
        "| {}{} | {} | {} | {} | {} |\n",
        staged ? fmt::format("{} | {} | ", s,
                             st.layers ? workerRange(st.firstLayer, st.layers) : std::string("-"))
               : std::string(),
        workerRange(st.firstWorker, st.workers), ms(st.compute), ms(st.communication),
        tofu::humanBytes(double(st.peak)), fmt::join(heavy, "; "));
    stages.push_back({{"first_worker", st.firstWorker},
                      {"workers", st.workers},
                      {"first_layer", st.firstLayer},
                      {"layers", st.layers},
                      {"compute_seconds", st.compute},
                      {"communication_seconds", st.communication},
                      {"planned_peak_bytes", st.peak},
                      {"heaviest", heavyJson}});
  }
  out.text += "\nthe runner-ups, each planned for the same step on the same workers:\n\n"
              "| plan | flags | estimated step | compute | communication | bubble | planned peak | "
              "against the chosen plan |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  nlohmann::ordered_json runnerUps = nlohmann::ordered_json::array();
  for (const tofu::RunnerUp &r : x.runnerUps) {
    nlohmann::ordered_json j = {{"kind", r.kind}, {"plan", r.plan}, {"flags", r.flags}};
    if (r.cost) {
      const tofu::StepCost &rc = *r.cost;
      out.text += fmt::format("| {} | `{}` | {} | {} | {} | {} | {} | {} |\n", r.plan, r.flags,
                              ms(rc.seconds), ms(rc.compute), ms(rc.communication), ms(rc.bubble),
                              tofu::humanBytes(double(rc.peak)), tofu::costsMore(rc, c));
      j["step"] = stepCostJson(rc);
      j["against_chosen"] = tofu::costsMore(rc, c);
    } else {
      // One line of the error: a table cell holds no line breaks.
      std::string why = r.whyNot;
      std::replace(why.begin(), why.end(), '\n', ' ');
      out.text += fmt::format("| {} | `{}` | - | - | - | - | - | not planned: {} |\n", r.plan,
                              r.flags, why);
      j["not_planned"] = r.whyNot;
    }
    runnerUps.push_back(std::move(j));
  }
  out.json = {{"plan", x.plan},          {"workers", x.workers}, {"device", device},
              {"step", stepCostJson(c)}, {"stages", stages},     {"runner_ups", runnerUps}};
  return out;
}

Section machineSection(const tofu::Topology &part, const tofu::TopologyPlan &machine, bool budgeted,
                       int64_t planBytes, bool staged) {
  Section out;
  const char *searched = staged     ? "; each stage searched over the part its workers fill"
                         : budgeted ? "; every plan under the budget searched over them"
                                    : "";
  budgeted = budgeted || staged; // no plan of least bytes beside it
  const tofu::TopologyTraffic &mine = machine.traffic;
  const tofu::TopologyTraffic &other = machine.leastBytesTraffic;
  out.text = fmt::format("machine: {}; recursion steps {} (each level's factors, "
                         "outermost first){}\n",
                         tofu::describeTopology(part),
                         fmt::join(tofu::topologyFactors(part), " x "), searched);
  if (machine.leastBytesChosen)
    out.text += fmt::format(
        "the search weighted by the machine's levels found no plan estimated faster than "
        "the plan of least bytes ({:.3f} ms against {:.3f} ms): that plan is printed\n",
        1e3 * machine.weightedTraffic.slowestSeconds, 1e3 * other.slowestSeconds);
  out.text += budgeted ? "| level crossed | bytes received | messages |\n| --- | ---: | "
                         "---: |\n"
                       : "| level crossed | bytes received | messages | plan of least "
                         "bytes: bytes | messages |\n| --- | ---: | ---: | ---: | ---: |\n";
  out.json["levels"] = nlohmann::ordered_json::array();
  for (size_t l = 0; l < part.levels.size(); ++l) {
    const tofu::TopologyLevel &level = part.levels[l];
    const std::string crossed =
        fmt::format("| between {}s{} | {} | {} |", level.name,
                    l == 0 ? "" : " of one " + part.levels[l - 1].name,
                    human(double(mine.levels[l].bytes)), mine.levels[l].messages);
    out.text += budgeted
                    ? crossed + "\n"
                    : crossed + fmt::format(" {} | {} |\n", human(double(other.levels[l].bytes)),
                                            other.levels[l].messages);
    nlohmann::ordered_json j = {{"name", level.name},
                                {"count", level.count},
                                {"bandwidth_bytes_per_second", level.bandwidth},
                                {"latency_seconds", level.latency},
                                {"bytes", mine.levels[l].bytes},
                                {"messages", mine.levels[l].messages}};
    if (!budgeted) {
      j["least_bytes_plan_bytes"] = other.levels[l].bytes;
      j["least_bytes_plan_messages"] = other.levels[l].messages;
    }
    out.json["levels"].push_back(std::move(j));
  }
  const std::string estimate =
      "an estimate: the slowest worker's received bytes over each level's bandwidth plus a "
      "latency per message";
  if (budgeted)
    out.text += fmt::format("estimated communication time per step ({}): {:.3f} ms "
                            "(worker {})\n",
                            estimate, 1e3 * mine.slowestSeconds, mine.slowestWorker);
  else
    out.text += fmt::format(
        "estimated communication time per step ({}): {:.3f} ms (worker {}); the plan of "
        "least bytes: {:.3f} ms (worker {}), which moves {} in all against this plan's {}\n",
        estimate, 1e3 * mine.slowestSeconds, mine.slowestWorker, 1e3 * other.slowestSeconds,
        other.slowestWorker, human(double(machine.leastBytes.totalBytes)),
        human(double(planBytes)));
  out.json["estimated_seconds_slowest_worker"] = mine.slowestSeconds;
  out.json["slowest_worker"] = mine.slowestWorker;
  if (!budgeted) {
    out.json["least_bytes_plan_estimated_seconds_slowest_worker"] = other.slowestSeconds;
    out.json["least_bytes_plan_bytes"] = machine.leastBytes.totalBytes;
    out.json["least_bytes_plan_chosen"] = machine.leastBytesChosen;
  }
  out.json["estimate"] = "received bytes over each level's bandwidth plus a latency per "
                         "message, on the slowest worker";
  return out;
}

Section recomputeSection(const tofu::RecomputePlan &r, const tofu::MemoryFit &fit, bool budgeted,
                         const tofu::StepTimeEstimate &stepTime, double without,
                         const std::string &deviceName) {
  Section out;
  out.json["mode"] = tofu::recomputeModeName(r.mode);
  out.json["candidates"] = r.candidates;
  out.json["dropped"] = r.summary.dropped;
  out.json["copies"] = r.summary.copies.size();
  out.json["recomputed_bytes"] = r.summary.bytes;
  out.json["planned_peak_bytes"] = fit.peak;
  out.json["planned_peak_bytes_without"] = r.peakWithout;
  out.json["candidate_sets_planned"] = r.tried;
  if (r.summary.copies.empty()) {
    out.text = fmt::format("recomputation ({}): none{}\n", tofu::recomputeModeName(r.mode),
                           budgeted && r.fitsWithout ? " (the plan fits without)" : "");
  } else {
    if (without > 0)
      out.json["estimated_seconds_without"] = without;
    out.json["estimated_seconds"] = stepTime.seconds;
    // (Pipeline stages' sqrt plans no step without recomputation to compare with.)
    const std::string peakAgainst =
        r.peakWithout > 0
            ? fmt::format(" against {} without ({:+.1f}%)", human(double(r.peakWithout)),
                          100.0 * (double(fit.peak) / double(r.peakWithout) - 1))
            : std::string();
    const std::string stepAgainst =
        without > 0 ? fmt::format(" against {:.3f} ms without ({:+.1f}%, what the recomputation "
                                  "costs)",
                                  1e3 * without, 100.0 * (stepTime.seconds / without - 1))
                    : std::string();
    out.text = fmt::format("recomputation ({}): {} of {} forward tensors dropped after the "
                           "forward pass and recomputed before the backward pass by {} copies of "
                           "their ops ({} of tensors, whole); planned peak {} per worker{}; "
                           "estimated step on {} {:.3f} ms{}\n",
                           tofu::recomputeModeName(r.mode), r.summary.dropped.size(), r.candidates,
                           r.summary.copies.size(), human(double(r.summary.bytes)),
                           human(double(fit.peak)), peakAgainst, deviceName, 1e3 * stepTime.seconds,
                           stepAgainst);
  }
  return out;
}

std::string describeTable(const tofu::Graph &g, const std::string &headline) {
  int64_t bytes[5] = {0, 0, 0, 0, 0};
  unsigned count[5] = {0, 0, 0, 0, 0};
  for (const tofu::TensorInfo &t : g.tensors()) {
    bytes[static_cast<int>(t.role)] += t.bytes();
    ++count[static_cast<int>(t.role)];
  }
  std::string out = headline;
  out += "| | count | bytes (every tensor, no buffer reuse) |\n| --- | ---: | ---: |\n";
  out += fmt::format("| nodes | {} | |\n", g.nodes().size());
  out += fmt::format("| tensors | {} | |\n", g.tensors().size());
  for (auto r : {tofu::TensorRole::Weight, tofu::TensorRole::Input, tofu::TensorRole::Activation,
                 tofu::TensorRole::Gradient, tofu::TensorRole::OptimizerState})
    out += fmt::format("| {} tensors | {} | {} |\n", tofu::roleName(r), count[static_cast<int>(r)],
                       human(bytes[static_cast<int>(r)]));
  const int64_t weights = bytes[static_cast<int>(tofu::TensorRole::Weight)] / 4;
  out += fmt::format("parameters: {} ({:.1f} million)\n", weights, weights / 1e6);
  return out;
}

llvm::Error checkOneWorker(tofu::Algorithm algo, bool train, bool budget, bool fit, bool topology,
                           bool recompute, bool stages) {
  const bool swap = algo == tofu::Algorithm::Swap;
  const char *why = !train ? "trains: give --train"
                    : fit  ? "takes the budget of one worker: give --memory-per-worker, not --fit"
                    : !budget           ? "needs the memory of a worker: give --memory-per-worker"
                    : topology && !swap ? "runs each replica on one worker: give no --topology"
                    : recompute         ? "recomputes nothing (the paper's): give no --recompute"
                    : stages            ? "runs each replica on one worker: give no --stages or "
                                          "--microbatches"
                                        : nullptr;
  return why ? tofu::usageError(fmt::format("--algo {} {}", tofu::algorithmName(algo), why))
             : llvm::Error::success();
}

llvm::Expected<Section> swapReport(const tofu::GraphSource &source, const tofu::OpLibrary &lib,
                                   const tofu::PipelineOptions &options, int64_t budget,
                                   unsigned workers, const tofu::DeviceModel &device,
                                   const std::optional<tofu::Topology> &topology) {
  tofu::SwapOptions o;
  o.budget = budget;
  const bool given = topology && topology->hostBandwidth > 0;
  if (topology && !given)
    return tofu::usageError("--algo swap reads --topology's host link alone, and this one gives "
                            "none (add host=BANDWIDTH@LATENCY, e.g. 1:450GB/s,host=64GB/s@3us)");
  o.hostBandwidth = given ? topology->hostBandwidth : device.hostBandwidth;
  o.hostLatency = given ? topology->hostLatency : device.hostLatency;
  auto r = tofu::swapping(source, lib, options, o, workers, device);
  if (!r)
    return r.takeError();
  const tofu::SwapEstimate &e = r->swap;
  auto human = [](int64_t b) { return tofu::humanBytes(double(b)); };
  Section out;
  out.text = fmt::format(
      "swap: {} training step (batch {}) on one worker in {}, over a host link of {:.4g} GB/s "
      "each way{} ({})\n"
      "unswapped it needs {} (the memory planner's peak; its tensors {} at most at once, the "
      "largest node '{}' {})\n"
      "a step moves {} to the device in {} transfers and {} to the host in {}, and drops {} "
      "(their host copies current); at most {} on the device\n"
      "estimated step on {}: {:.3f} ms (compute {:.3f} ms, waiting for the host link "
      "{:.3f} ms): {:.1f} samples/s on one worker, {:.1f} on {} (each its own replica and "
      "host link, nothing exchanged: the paper's Swapping)\n",
      r->name, r->batch, human(budget), o.hostBandwidth / 1e9,
      o.hostLatency > 0 ? fmt::format(" @ {:.3g} us", 1e6 * o.hostLatency) : std::string(),
      given ? "--topology's" : "the device's", human(r->plannedPeak), human(e.wholeBytes),
      e.largestNode, human(e.largestNodeBytes), human(e.bytesIn), e.transfersIn, human(e.bytesOut),
      e.transfersOut, human(e.droppedBytes), human(e.peakBytes), device.name, 1e3 * e.seconds,
      1e3 * e.computeSeconds, 1e3 * e.stallSeconds, r->samplesPerSecond, r->allWorkers, workers);
  out.json = {{"algorithm", "swap"},
              {"model", r->name},
              {"batch", r->batch},
              {"budget_bytes", budget},
              {"host_bandwidth", o.hostBandwidth},
              {"host_latency_seconds", o.hostLatency},
              {"planned_peak_bytes", r->plannedPeak},
              {"tensor_peak_bytes", e.wholeBytes},
              {"largest_node", e.largestNode},
              {"largest_node_bytes", e.largestNodeBytes},
              {"bytes_to_device", e.bytesIn},
              {"transfers_to_device", e.transfersIn},
              {"bytes_to_host", e.bytesOut},
              {"transfers_to_host", e.transfersOut},
              {"dropped_bytes", e.droppedBytes},
              {"device_peak_bytes", e.peakBytes},
              {"device", device.name},
              {"estimated_step_seconds", e.seconds},
              {"compute_seconds", e.computeSeconds},
              {"stall_seconds", e.stallSeconds},
              {"samples_per_second_one_worker", r->samplesPerSecond},
              {"workers", workers},
              {"samples_per_second", r->allWorkers}};
  return out;
}

Section smallBatchSection(const tofu::SmallBatch &s, int64_t asked, int64_t budget,
                          unsigned workers) {
  Section out;
  const std::string over = s.over == 0 ? fmt::format("the batch asked for fits")
                                       : fmt::format("batch {}: {}, {} over", s.over,
                                                     tofu::humanBytes(double(s.overPeak)),
                                                     tofu::humanBytes(double(s.overPeak - budget)));
  out.text = fmt::format(
      "smallbatch: {} training step on one worker in {}: batch {} of the {} asked fits (planned "
      "peak {}; {}), {} batch{} planned\n"
      "estimated step at batch {} on {}: {:.3f} ms: {:.1f} samples/s on one worker, {:.1f} on {} "
      "(each its own replica, nothing exchanged: the paper's SmallBatch)\n",
      s.name, tofu::humanBytes(double(budget)), s.batch, asked, tofu::humanBytes(double(s.peak)),
      over, s.tried, s.tried == 1 ? "" : "es", s.batch, s.step.device.name, 1e3 * s.step.seconds,
      s.samplesPerSecond, s.allWorkers, workers);
  out.json = {{"algorithm", "smallbatch"},
              {"model", s.name},
              {"asked_batch", asked},
              {"batch", s.batch},
              {"budget_bytes", budget},
              {"peak_bytes", s.peak},
              {"over_batch", s.over},
              {"over_peak_bytes", s.overPeak},
              {"batches_planned", s.tried},
              {"device", s.step.device.name},
              {"estimated_step_seconds", s.step.seconds},
              {"samples_per_second_one_worker", s.samplesPerSecond},
              {"workers", workers},
              {"samples_per_second", s.allWorkers}};
  return out;
}

llvm::Expected<Section> smallBatchReport(const tofu::GraphSource &source,
                                         const tofu::OpLibrary &lib,
                                         const tofu::PipelineOptions &options, int64_t budget,
                                         unsigned workers, const tofu::DeviceModel &device) {
  auto s = tofu::smallBatch(source, lib, options, budget, workers, device);
  if (!s)
    return s.takeError();
  return smallBatchSection(*s, source.batch, budget, workers);
}

const char *sourceConflict(bool input, bool onnx, bool batch, bool graph) {
  if (input && !onnx)
    return "--input gives values of an ONNX model's inputs (--onnx); a zoo model's or graph "
           "JSON's shapes are its own";
  if (batch && graph)
    return "--batch applies to --model and --onnx; a graph JSON's shapes are its own";
  return nullptr;
}

} // namespace tofuplan
