// A partition plan's text form, and a plan restricted to a subgraph.
#include "partition/plan.h"

#include <map>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"

namespace tofu {

std::string encodePlan(const PartitionPlan &plan) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepChoice &s : plan.steps)
    steps.push_back({{"parts", s.parts}, {"node", s.node}, {"tensor", s.tensor}});
  return nlohmann::json{{"algorithm", plan.algorithm},
                        {"workers", plan.workers},
                        {"steps", steps},
                        {"step_bytes", plan.stepBytes},
                        {"total_bytes", plan.totalBytes},
                        {"node_bytes", plan.nodeBytes},
                        {"search_seconds", plan.searchSeconds},
                        {"largest_table", plan.largestTable},
                        {"variables", plan.variables},
                        {"conditioned", plan.conditioned}}
      .dump();
}

llvm::Expected<PartitionPlan> decodePlan(const std::string &text, const Problem &problem) {
  PartitionPlan plan;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    plan.algorithm = j.at("algorithm").get<std::string>();
    plan.workers = j.at("workers").get<unsigned>();
    for (const nlohmann::json &s : j.at("steps"))
      plan.steps.push_back({s.at("parts").get<unsigned>(), s.at("node").get<std::vector<int>>(),
                            s.at("tensor").get<std::vector<int>>()});
    plan.stepBytes = j.at("step_bytes").get<std::vector<int64_t>>();
    plan.totalBytes = j.at("total_bytes").get<int64_t>();
    plan.nodeBytes = j.at("node_bytes").get<std::vector<int64_t>>();
    plan.searchSeconds = j.at("search_seconds").get<double>();
    plan.largestTable = j.at("largest_table").get<uint64_t>();
    plan.variables = j.at("variables").get<size_t>();
    plan.conditioned = j.value("conditioned", 0u);
  } catch (const nlohmann::json::exception &e) {
    return stringError(std::string("a malformed plan: ") + e.what());
  }
  unsigned product = 1;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const StepChoice &s = plan.steps[i];
    if (s.parts < 1 || s.node.size() != problem.nodes.size() ||
        s.tensor.size() != problem.tensors.size())
      return stringError(fmt::format("plan step {}: {} parts, {} node and {} tensor choices for "
                                     "a graph of {} nodes and {} tensors",
                                     i + 1, s.parts, s.node.size(), s.tensor.size(),
                                     problem.nodes.size(), problem.tensors.size()));
    for (size_t n = 0; n < s.node.size(); ++n)
      if (s.node[n] < -1 ||
          s.node[n] >= static_cast<int>(problem.nodes[n].table->strategies.size()))
        return stringError(fmt::format("plan step {}: node '{}' has no strategy {}", i + 1,
                                       problem.nodes[n].name, s.node[n]));
    for (size_t t = 0; t < s.tensor.size(); ++t)
      if (s.tensor[t] < -1 || s.tensor[t] >= static_cast<int>(problem.tensors[t].shape.size()))
        return stringError(fmt::format("plan step {}: tensor '{}' has no dimension {}", i + 1,
                                       problem.tensors[t].name, s.tensor[t]));
    product *= s.parts;
  }
  if (!plan.steps.empty() && product != plan.workers)
    return stringError(
        fmt::format("the plan's steps make {} parts for {} workers", product, plan.workers));
  return plan;
}

llvm::Expected<PartitionPlan> restrictPlan(const PartitionPlan &train, const Problem &full,
                                           const Problem &sub) {
  std::map<std::string, unsigned> nodes, tensors;
  for (unsigned n = 0; n < full.nodes.size(); ++n)
    nodes[full.nodes[n].name] = n;
  for (unsigned t = 0; t < full.tensors.size(); ++t)
    tensors[full.tensors[t].name] = t;
  PartitionPlan r = train;
  r.algorithm = train.algorithm + " (restricted)";
  r.nodeBytes.assign(sub.nodes.size(), 0);
  for (StepChoice &s : r.steps) {
    const StepChoice from = s;
    s.node.assign(sub.nodes.size(), -1);
    s.tensor.assign(sub.tensors.size(), -1);
    for (unsigned n = 0; n < sub.nodes.size(); ++n) {
      auto it = nodes.find(sub.nodes[n].name);
      if (it == nodes.end())
        return stringError(
            fmt::format("node '{}' is not in the training graph", sub.nodes[n].name));
      s.node[n] = from.node[it->second];
      const StrategyTable &was = *full.nodes[it->second].table, &is = *sub.nodes[n].table;
      if (s.node[n] >= 0 && was.op.def->name != is.op.def->name) {
        const std::string want = full.strategyName(it->second, s.node[n]);
        s.node[n] = -1;
        for (int k = 0; k < static_cast<int>(is.strategies.size()); ++k)
          if (sub.strategyName(n, k) == want)
            s.node[n] = k;
      }
    }
    for (unsigned t = 0; t < sub.tensors.size(); ++t) {
      auto it = tensors.find(sub.tensors[t].name);
      if (it == tensors.end())
        return stringError(
            fmt::format("tensor '{}' is not in the training graph", sub.tensors[t].name));
      s.tensor[t] = from.tensor[it->second];
    }
  }
  r.stepBytes.assign(r.steps.size(), 0);
  r.totalBytes = 0;
  return r;
}

} // namespace tofu
