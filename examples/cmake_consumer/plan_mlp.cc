// Plans a three-layer perceptron's training step through Tofu's installed C++ API and
// prints how each weight is cut, each worker's share of fc1.w and the plan's costs.
// Usage: plan_mlp [WORKERS]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tofu/plan.h"

int main(int argc, char **argv) {
  const unsigned workers = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 4;
  std::printf("libtofu_plan %s\n", tofu::api::version().c_str());
  auto planner = tofu::api::Planner::open(); // PREFIX/share/tofu/ops, found by the library
  if (!planner) {
    std::fprintf(stderr, "plan_mlp: %s\n", planner.error().c_str());
    return 1;
  }
  std::printf("operator library: %zu ops\n", planner->ops().size());

  tofu::api::Graph g;
  const tofu::api::Status steps[] = {
      g.addInput("x", {128, 512}),
      g.addWeight("fc1.w", {512, 1024}),
      g.addWeight("fc2.w", {1024, 1024}),
      g.addWeight("fc3.w", {1024, 10}),
      g.addNode({"fc1", "MatMul", {"x", "fc1.w"}, "h1", {}, {{"b", 0}}}),
      g.addNode({"relu1", "Relu", {"h1"}, "a1", {}, {{"i", 2}}}),
      g.addNode({"fc2", "MatMul", {"a1", "fc2.w"}, "h2", {}, {{"b", 0}}}),
      g.addNode({"relu2", "Relu", {"h2"}, "a2", {}, {{"i", 2}}}),
      g.addNode({"fc3", "MatMul", {"a2", "fc3.w"}, "logits", {}, {{"b", 0}}}),
      g.setOutputs({"logits"}), // a prediction: the training step adds the loss
  };
  for (const tofu::api::Status &s : steps)
    if (!s) {
      std::fprintf(stderr, "plan_mlp: %s\n", s.message().c_str());
      return 1;
    }

  tofu::api::PlanOptions options;
  options.workers = workers;
  options.optimizer = tofu::api::Optimizer::SGD;
  auto plan = planner->plan(g, options);
  if (!plan) {
    std::fprintf(stderr, "plan_mlp: %s\n", plan.error().c_str());
    return 1;
  }
  std::printf("%s\n", plan->lossNote.c_str());
  std::printf("%u workers, %zu steps, algorithm %s\n", plan->workers, plan->steps.size(),
              plan->algorithm.c_str());
  for (const char *name : {"fc1.w", "fc2.w", "fc3.w"}) {
    const tofu::api::TensorPlan *t = plan->tensor(name);
    std::printf("%s cut per step:", name);
    for (int d : t->cut)
      std::printf(" %s", d < 0 ? "replicated" : ("dim " + std::to_string(d)).c_str());
    std::printf("\n");
  }
  const tofu::api::TensorPlan *w = plan->tensor("fc1.w");
  for (unsigned k = 0; k < plan->workers; ++k)
    std::printf("worker %u holds fc1.w[%lld:%lld, %lld:%lld]; peak memory %lld bytes\n", k,
                (long long)w->tiles[k].lo[0], (long long)w->tiles[k].hi[0],
                (long long)w->tiles[k].lo[1], (long long)w->tiles[k].hi[1],
                (long long)plan->workerMemory[k].peakBytes);
  std::printf("communication per step: %lld bytes (one worker would hold %lld bytes)\n",
              (long long)plan->communicationBytes, (long long)plan->singleWorkerBytes);

  // An op the library does not have is an error value naming the node.
  tofu::api::Graph bad = g;
  bad.addNode({"oops", "NoSuchOp", {"logits"}, "y", {}, {}});
  bad.setOutputs({"y"});
  auto failed = planner->plan(bad, options);
  std::printf("a graph with an unknown op: %s\n",
              failed ? "planned (wrong)" : failed.error().c_str());
  return failed ? 1 : 0;
}
