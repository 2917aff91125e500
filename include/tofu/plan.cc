// libtofu_plan.
#include "include/tofu/plan.h"

#include "grammar/diagnostics.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

namespace {

/// What tofu-plan reports too: the exact count over every worker up to 64 of them.
PlanReportOptions reportOptions(const PartitionPlan &plan) {
  PlanReportOptions o;
  o.title = "graph";
  o.exact = plan.workers <= 64;
  return o;
}

} // namespace

std::string PlanResult::json() const { return planJson(problem, plan, reportOptions(plan)); }

std::string PlanResult::table() const { return planTable(problem, plan, reportOptions(plan)); }

int PlanResult::tensorIndex(const std::string &name) const {
  for (unsigned t = 0; t < problem.tensors.size(); ++t)
    if (problem.tensors[t].name == name)
      return static_cast<int>(t);
  return -1;
}

int PlanResult::nodeIndex(const std::string &name) const {
  for (unsigned n = 0; n < problem.nodes.size(); ++n)
    if (problem.nodes[n].name == name)
      return static_cast<int>(n);
  return -1;
}

llvm::Expected<Planner> Planner::open(const std::string &opsDir) {
  SourceManager sources;
  DiagnosticEngine diags(sources);
  auto lib = OpLibrary::load(opsDir, diags);
  if (!lib) {
    std::string text;
    llvm::raw_string_ostream os(text);
    diags.print(os);
    os.flush();
    return stringError("cannot load the operator library '" + opsDir + "': " +
                       llvm::toString(lib.takeError()) + (text.empty() ? "" : "\n" + text));
  }
  Planner p;
  p.library_ = std::make_shared<OpLibrary>(std::move(*lib));
  return p;
}

llvm::Expected<PlanResult> Planner::plan(Graph g, const PlanOptions &options,
                                         std::optional<Optimizer> train) const {
  if (llvm::Error e = checkGraph(g, *library_))
    return llvm::Expected<PlanResult>(std::move(e));
  if (train) {
    if (g.outputs.size() != 1)
      return stringError("a training step needs a graph with one output, the scalar loss");
    auto t = buildTrainingGraph(g, g.outputs[0], *library_, *train);
    if (!t)
      return t.takeError();
    g = std::move(*t);
  }
  auto problem = Problem::build(g, *library_);
  if (!problem)
    return problem.takeError();
  auto plan = searchPlan(*problem, options);
  if (!plan)
    return plan.takeError();
  return PlanResult{std::move(g), std::move(*problem), std::move(*plan)};
}

} // namespace tofu
