// Example: a framework hands its graph to libtofu_plan and reads back how to partition it.
//
//   bazel run //examples:plan_example -- 4          (the library found beside the binary)
//   bazel run //examples:plan_example -- 4 OPS_DIR
//
// Builds a two-layer perceptron with the public C++ API (tofu/plan.h), asks for its
// training step (Adam) on K workers, and prints how each weight is cut and what the plan
// communicates.
#include <cstdio>
#include <cstdlib>

#include "tofu/plan.h"

int main(int argc, char **argv) {
  unsigned workers = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 4;
  auto planner = tofu::api::Planner::open(argc > 2 ? argv[2] : "");
  if (!planner) {
    std::fprintf(stderr, "plan_example: %s\n", planner.error().c_str());
    return 1;
  }
  // The framework's graph: x[4096, 1024] -> MatMul(w1[1024, 4096]) -> Relu ->
  // MatMul(w2[4096, 10]) -> softmax cross-entropy against integer labels. (A step much
  // smaller than this runs fastest whole on every worker of an H100: the time objective,
  // the default, then splits nothing.)
  tofu::api::Graph g;
  tofu::api::Status steps[] = {
      g.addInput("x", {4096, 1024}),
      g.addInput("labels", {4096}, "int64"),
      g.addWeight("w1", {1024, 4096}),
      g.addWeight("w2", {4096, 10}),
      g.addNode({"fc1", "MatMul", {"x", "w1"}, "h", {}, {{"b", 0}}}),
      g.addNode({"relu", "Relu", {"h"}, "a", {}, {{"i", 2}}}),
      g.addNode({"fc2", "MatMul", {"a", "w2"}, "logits", {}, {{"b", 0}}}),
      g.addNode({"loss", "softmax_cross_entropy", {"logits", "labels"}, "loss_out", {}, {}}),
      g.setOutputs({"loss_out"}),
  };
  for (const tofu::api::Status &s : steps)
    if (!s) {
      std::fprintf(stderr, "plan_example: %s\n", s.message().c_str());
      return 1;
    }

  tofu::api::PlanOptions options;
  options.workers = workers;
  auto plan = planner->plan(g, options);
  if (!plan) {
    std::fprintf(stderr, "plan_example: %s\n", plan.error().c_str());
    return 1;
  }
  std::printf("%u workers in %zu steps; %zu nodes in the training graph\n", plan->workers,
              plan->steps.size(), plan->nodes.size());
  for (const char *w : {"w1", "w2"}) {
    const tofu::api::TensorPlan *t = plan->tensor(w);
    if (!t) {
      std::printf("weight %s missing\n", w);
      return 1;
    }
    std::printf("weight %s: cut per step:", w);
    for (int d : t->cut)
      std::printf(" %s", d < 0 ? "whole" : ("dim " + std::to_string(d)).c_str());
    std::printf("; worker 0 holds rows [%lld, %lld)\n", static_cast<long long>(t->tiles[0].lo[0]),
                static_cast<long long>(t->tiles[0].hi[0]));
  }
  std::printf("fc1's strategy per step:");
  for (const std::string &s : plan->node("fc1")->strategy)
    std::printf(" %s", s.c_str());
  std::printf("\npeak memory of worker 0: %lld bytes\n",
              static_cast<long long>(plan->workerMemory[0].peakBytes));
  std::printf("communication per training step: %lld bytes\n",
              static_cast<long long>(plan->communicationBytes));
  return 0;
}
