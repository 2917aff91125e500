// Test scaffolding: a model's training step as a search problem (test_problem.h).
#include "testing/test_problem.h"

#include "graph/test_library.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "search/search.h"
#include "gtest/gtest.h"

namespace tofu {

Problem trainingProblem(llvm::Expected<Graph> g, Optimizer optimizer,
                        std::vector<std::string> *outputs, Precision precision) {
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  PipelineOptions options;
  options.train = optimizer;
  options.precision = precision;
  options.until = Stage::Problem;
  auto r = runPipeline(std::move(*g), "the test graph", testLibrary(), options);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  if (outputs)
    *outputs = r->graph.outputs;
  return std::move(*r->problem);
}

std::vector<StepChoice> randomSteps(const Problem &p, const std::vector<unsigned> &parts,
                                    std::mt19937 &rng, bool fitting) {
  std::vector<StepChoice> steps;
  // How many parts each node's variables and each tensor's dimensions are cut into so far.
  std::vector<std::vector<int64_t>> varCut(p.nodes.size()), dimCut(p.tensors.size());
  for (unsigned n = 0; n < p.nodes.size(); ++n)
    varCut[n].assign(p.nodes[n].shapes.vars.size(), 1);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    dimCut[t].assign(p.tensors[t].shape.size(), 1);
  for (unsigned k : parts) {
    StepChoice s;
    s.parts = k;
    for (unsigned n = 0; n < p.nodes.size(); ++n) {
      int c = int(rng() % (p.nodes[n].table->strategies.size() + 1)) - 1;
      const int v = p.splitVar(n, c);
      if (fitting && v >= 0 && (varCut[n][v] *= k) > p.nodes[n].shapes.vars[v])
        c = -1;
      s.node.push_back(c);
    }
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      int d = int(rng() % (p.tensors[t].shape.size() + 1)) - 1;
      if (fitting && d >= 0 && (dimCut[t][d] *= k) > p.tensors[t].shape[d])
        d = -1;
      s.tensor.push_back(d);
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

std::optional<PartitionPlan> searchedPlan(const Problem &p, unsigned k) {
  PlanOptions o;
  o.workers = k;
  auto plan = searchPlan(p, o);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return std::nullopt;
  return std::move(*plan);
}

int64_t predictedBytes(const Problem &p, const PartitionPlan &plan) {
  return CostModel(p).bruteForceCost(plan.steps);
}

} // namespace tofu
