// Example: a framework hands its graph to libtofu_plan and reads back how to partition it.
//
//   bazel run //examples:plan_example -- ops 4
//
// Builds a two-layer perceptron with the graph API, asks for its training step (Adam) on
// K workers, and prints how each weight is cut and what the plan communicates.
#include <cstdio>
#include <cstdlib>

#include "include/tofu/plan.h"

int main(int argc, char **argv) {
  const char *ops = argc > 1 ? argv[1] : "ops";
  unsigned workers = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 4;
  auto planner = tofu::Planner::open(ops);
  if (!planner) {
    std::fprintf(stderr, "plan_example: %s\n", llvm::toString(planner.takeError()).c_str());
    return 1;
  }
  // The framework's graph: x[64, 256] -> MatMul(w1[256, 512]) -> Relu -> MatMul(w2[512, 10])
  // -> softmax cross-entropy against integer labels.
  tofu::Graph g;
  auto tensor = [&](const char *name, std::vector<int64_t> shape, tofu::TensorRole role) {
    tofu::TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.shapeKnown = true;
    t.role = role;
    return g.addTensor(std::move(t));
  };
  auto node = [&](const char *name, const char *op, std::vector<std::string> inputs,
                  std::map<std::string, int64_t> groups) {
    tofu::Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    n.groups = std::move(groups);
    n.output = std::string(name) + "_out";
    return g.addNode(std::move(n));
  };
  llvm::Error errors[] = {
      tensor("x", {64, 256}, tofu::TensorRole::Input),
      tensor("labels", {64}, tofu::TensorRole::Input),
      tensor("w1", {256, 512}, tofu::TensorRole::Weight),
      tensor("w2", {512, 10}, tofu::TensorRole::Weight),
      node("fc1", "MatMul", {"x", "w1"}, {{"b", 0}}),
      node("relu", "Relu", {"fc1_out"}, {{"i", 2}}),
      node("fc2", "MatMul", {"relu_out", "w2"}, {{"b", 0}}),
      node("loss", "softmax_cross_entropy", {"fc2_out", "labels"}, {}),
  };
  for (llvm::Error &e : errors)
    if (e) {
      std::fprintf(stderr, "plan_example: %s\n", llvm::toString(std::move(e)).c_str());
      return 1;
    }
  g.outputs = {"loss_out"};

  tofu::PlanOptions options;
  options.workers = workers;
  auto result = planner->plan(std::move(g), options, tofu::Optimizer::Adam);
  if (!result) {
    std::fprintf(stderr, "plan_example: %s\n", llvm::toString(result.takeError()).c_str());
    return 1;
  }
  const tofu::PartitionPlan &plan = result->plan;
  std::printf("%u workers in %zu steps; %zu nodes in the training graph\n", plan.workers,
              plan.steps.size(), result->problem.nodes.size());
  for (const char *w : {"w1", "w2"}) {
    int t = result->tensorIndex(w);
    std::printf("weight %s %s: cut per step:", w,
                t >= 0 ? "found" : "missing");
    for (const tofu::StepChoice &s : plan.steps)
      std::printf(" %s", s.tensor[t] < 0 ? "whole" : ("dim " + std::to_string(s.tensor[t])).c_str());
    std::printf("\n");
  }
  int fc1 = result->nodeIndex("fc1");
  std::printf("fc1's strategy per step:");
  for (const tofu::StepChoice &s : plan.steps)
    std::printf(" %s", result->problem.strategyName(fc1, s.node[fc1]).c_str());
  std::printf("\ncommunication per training step: %lld bytes\n",
              static_cast<long long>(plan.totalBytes));
  return 0;
}
