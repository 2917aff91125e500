// Partition search: coarsening, per-step DP, recursion, baselines.
#include "search/search.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "analysis/hash.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"
#include "search/minsum.h"
#include "search/parallel.h"
#include "search/search_internal.h"

namespace tofu {

using namespace searchimpl;

const std::vector<AlgorithmInfo> &algorithms() {
  static const std::vector<AlgorithmInfo> all = {
      {Algorithm::Tofu, "tofu",
       "Tofu's recursion: one exact DP per factor of k, largest factor first (default)"},
      {Algorithm::DpFlat, "dp-flat",
       "one DP over every multi-dimensional tiling at once (within a time budget)"},
      {Algorithm::Icml18, "icml18", "Tofu's recursion without output-reduction strategies"},
      {Algorithm::EqualChop, "equalchop",
       "one DP, each tensor and op cut along one dimension into k parts"},
      {Algorithm::Spartan, "spartan", "greedy, largest tensor first, one dimension into k parts"},
      {Algorithm::AllRow, "allrow",
       "every tensor cut along its first dimension; ops choose greedily"},
      {Algorithm::DataParallel, "data-parallel",
       "activations cut by batch, weights and their state replicated"},
      {Algorithm::Zero3, "zero3",
       "FSDP full sharding (ZeRO-3): every op split by batch; weights, their gradients and "
       "optimiser state sharded along their first dimension, gathered for each use"},
      {Algorithm::Megatron, "megatron",
       "Megatron-LM's tensor parallelism over the k workers: each product's weight column- "
       "then row-parallel in turn (attention by heads, the MLP's first layer by its "
       "features), the logits by vocabulary, embedding tables by their features (--megatron "
       "TP,1,DP adds data parallelism); the rest as the DP finds best"},
      {Algorithm::SmallBatch, "smallbatch",
       "the paper's SmallBatch: one worker trains the largest batch that fits "
       "--memory-per-worker, k of them k times its samples a second (tofu-plan --train; an "
       "estimate)"},
      {Algorithm::Placement, "placement",
       "the paper's operator placement: each layer (the ops of one group of weights) on one "
       "worker, round-robin, pipelined over --microbatches (default: the workers) in GPipe's "
       "order; a training step"},
      {Algorithm::Swap, "swap",
       "the paper's Swapping: one worker trains the whole batch within --memory-per-worker, "
       "tensors swapped to host memory and back over its host link (LRU, prefetch), k of them "
       "k times its samples a second (tofu-plan --train; an estimate)"},
      {Algorithm::Exhaustive, "exhaustive",
       "every sequence of basic plans (small graphs: the tests' oracle)"},
  };
  return all;
}

SearchPolicy searchimpl::policyOf(Algorithm a) {
  using D = SearchPolicy::Driver;
  using Cuts = SearchPolicy::TensorCuts;
  SearchPolicy p;
  switch (a) {
  case Algorithm::Tofu:
    p.machineWeights = p.jointMoves = true;
    break;
  case Algorithm::Icml18:
    p.reductionStrategies = false;
    p.machineWeights = true;
    break;
  case Algorithm::EqualChop:
    p.driver = D::OneStep;
    break;
  case Algorithm::AllRow:
    p.driver = D::OneStep;
    p.tensorCuts = Cuts::FirstOnly;
    break;
  case Algorithm::DataParallel:
    p.driver = D::OneStep;
    p.tensorCuts = Cuts::Batch;
    break;
  case Algorithm::SmallBatch: // no partition: searchPlan refuses it
  case Algorithm::Placement:  // no partition: planner/stages.h places it
  case Algorithm::Swap:       // no partition: searchPlan refuses it
    break;
  case Algorithm::Megatron:
    p.driver = D::OneStep;
    p.megatron = true;
    break;
  case Algorithm::Zero3:
    p.driver = D::OneStep;
    p.tensorCuts = Cuts::FirstOnly;
    p.batchNodes = true;
    break;
  case Algorithm::Spartan:
    p.driver = D::Greedy;
    break;
  case Algorithm::DpFlat:
    p.driver = D::Flat;
    p.machineWeights = true;
    break;
  case Algorithm::Exhaustive:
    p.driver = D::Exhaustive;
    break;
  }
  return p;
}

searchimpl::SearchPolicy searchimpl::recursionPolicy(const PlanOptions &o) {
  SearchPolicy p = policyOf(o.algorithm);
  p.replicas = p.machineWeights && o.time && o.time->nodeSeconds;
  return p;
}

const char *algorithmName(Algorithm a) {
  for (const AlgorithmInfo &info : algorithms())
    if (info.algorithm == a)
      return info.name;
  return "?";
}

std::optional<Algorithm> parseAlgorithm(const std::string &name) {
  for (const AlgorithmInfo &info : algorithms())
    if (name == info.name)
      return info.algorithm;
  return std::nullopt;
}

std::string algorithmNames() {
  std::string names;
  for (const AlgorithmInfo &info : algorithms())
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

/// Element-wise for coarsening: one output strategy per output dimension, nothing else,
/// and every input either a scalar or of the output's shape, split exactly along the
/// strategy's dimension (hyper-parameter scalars, as in optimiser updates, are allowed).
bool elementwiseLike(const Problem &p, unsigned n) {
  const ProblemNode &node = p.nodes[n];
  const StrategyTable &t = *node.table;
  const std::vector<int64_t> &out = p.tensors[node.output].shape;
  if (t.strategies.size() != out.size() || out.empty())
    return false;
  for (const Strategy &s : t.strategies) {
    if (s.kind != Strategy::Kind::Output)
      return false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::vector<int64_t> &in = p.tensors[node.inputs[i]].shape;
      if (in.empty())
        continue;
      if (in != out)
        return false;
      for (size_t d = 0; d < in.size(); ++d)
        if (s.inputs[i].access[d] != (d == s.outputDim ? Access::Split : Access::Full))
          return false;
    }
  }
  return true;
}

Coarsening coarsen(const Problem &p, bool mergeElementwise, bool mergeCoalesced) {
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  UnionFind uf(N + p.tensors.size());
  if (mergeCoalesced) {
    std::map<std::string, unsigned> firstNode;
    for (unsigned n = 0; n < N; ++n) {
      const std::string &key = p.nodes[n].coalesce;
      if (key.empty())
        continue;
      auto [it, fresh] = firstNode.emplace(key, n);
      if (!fresh) {
        uf.unite(it->second, n);
        uf.unite(N + p.nodes[it->second].output, N + p.nodes[n].output);
      }
    }
  }
  if (mergeElementwise) {
    for (unsigned n = 0; n < N; ++n) {
      if (!elementwiseLike(p, n))
        continue;
      for (unsigned t : p.nodes[n].inputs) {
        const ProblemTensor &in = p.tensors[t];
        if (in.producer < 0 || in.consumers.size() != 1 ||
            !elementwiseLike(p, static_cast<unsigned>(in.producer)) ||
            in.shape != p.tensors[p.nodes[n].output].shape)
          continue;
        uf.unite(n, static_cast<unsigned>(in.producer));
        uf.unite(n, N + t);
      }
    }
  }
  Coarsening c;
  std::map<unsigned, unsigned> id;
  for (unsigned i = 0; i < uf.parent.size(); ++i) {
    unsigned r = uf.find(i);
    auto [it, fresh] = id.emplace(r, static_cast<unsigned>(id.size()));
    (i < N ? c.nodeSet : c.tensorSet).push_back(it->second);
  }
  c.sets = static_cast<unsigned>(id.size());
  return c;
}

void setMegatronSteps(PlanOptions &o, unsigned tp, unsigned dp) {
  o.algorithm = Algorithm::Megatron;
  o.factors.clear();
  o.stepAlgorithms.clear();
  if (dp > 1) {
    o.factors.push_back(dp);
    o.stepAlgorithms.push_back(Algorithm::DataParallel);
  }
  if (tp > 1) {
    o.factors.push_back(tp);
    o.stepAlgorithms.push_back(Algorithm::Megatron);
  }
}

llvm::Error batchPartsError(const Problem &p, unsigned parts, Algorithm a) {
  const SearchPolicy policy = policyOf(a);
  if (!policy.batchNodes && policy.tensorCuts != SearchPolicy::TensorCuts::Batch)
    return llvm::Error::success();
  return batchCutError(p, parts, algorithmName(a));
}

namespace {

/// Under the time objective without a machine's weights: one link between every pair of
/// workers, every byte at its bandwidth (the unit), every message at its latency.
void addLinkWeights(PlanOptions &o, size_t steps) {
  if (!o.time || !o.prefixWeights.empty() || steps == 0)
    return;
  o.prefixWeights.bytes.assign(steps, 0);
  o.prefixWeights.bytes.back() = 1;
  if (o.time->messageSeconds > 0) {
    o.prefixWeights.messages.assign(steps, 0);
    o.prefixWeights.messages.back() = o.time->messageSeconds * o.time->bytesPerSecond;
  }
}

} // namespace

int64_t planObjective(const Problem &p, const PlanOptions &given, const PartitionPlan &plan) {
  PlanOptions o = given;
  addLinkWeights(o, plan.steps.size());
  if (o.prefixWeights.bytes.size() != plan.steps.size())
    o.prefixWeights = {};
  return objectiveCost(p, objectiveOf(p, o, plan.objective == "time"), plan.steps);
}

llvm::Expected<PartitionPlan> searchPlan(const Problem &p, const PlanOptions &given) {
  PlanOptions o = given;
  if (o.workers == 0)
    return stringError("the number of workers must be at least 1");
  if (o.algorithm == Algorithm::SmallBatch)
    return stringError("smallbatch is no partition of the step: tofu-plan --train estimates it "
                       "(one worker, the largest batch that fits --memory-per-worker)");
  if (o.algorithm == Algorithm::Swap)
    return stringError("swap is no partition of the step: tofu-plan --train estimates it (one "
                       "worker, tensors swapped to host memory within --memory-per-worker)");
  if (o.algorithm == Algorithm::Placement)
    return stringError("placement partitions no op: it places the layers of a training step "
                       "(--train) on the workers in turn, as pipeline stages");
  PartitionPlan plan;
  plan.algorithm = algorithmName(o.algorithm);
  plan.workers = o.workers;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(o.budgetSeconds));
  std::vector<unsigned> factors = o.factors.empty() ? factorWorkers(o.workers) : o.factors;
  unsigned product = 1;
  for (unsigned f : factors) {
    if (f < 2)
      return stringError(
          fmt::format("a recursion step of {} parts (each step needs at least 2)", f));
    product *= f;
  }
  if (o.workers > 1 && product != o.workers)
    return stringError(
        fmt::format("the recursion's steps make {} parts for {} workers", product, o.workers));
  if (o.time && !(o.time->bytesPerSecond > 0))
    return stringError("the time objective needs the link's bandwidth (bytes per second > 0)");
  addLinkWeights(o, factors.size());
  for (const std::vector<double> *ws : {&o.prefixWeights.bytes, &o.prefixWeights.messages})
    if (!ws->empty() && ws->size() != factors.size())
      return stringError(
          fmt::format("{} prefix weights for {} recursion steps", ws->size(), factors.size()));
  if (!o.stepAlgorithms.empty()) {
    if (o.factors.empty() || o.stepAlgorithms.size() != o.factors.size())
      return stringError(fmt::format("{} step algorithms for {} recursion steps",
                                     o.stepAlgorithms.size(), o.factors.size()));
    for (Algorithm a : o.stepAlgorithms)
      if (policyOf(a).driver != SearchPolicy::Driver::OneStep)
        return stringError(fmt::format("a step cannot follow {}'s rules (only equalchop, allrow, "
                                       "data-parallel, zero3 and megatron's combine)",
                                       algorithmName(a)));
  }
  llvm::Error err = llvm::Error::success();
  if (o.workers > 1 && !o.stepAlgorithms.empty()) {
    err = recursiveSearch(p, o, factors, plan); // each step by its own rules
  } else if (o.workers > 1) {
    switch (policyOf(o.algorithm).driver) {
    case SearchPolicy::Driver::Recursion:
      err = recursiveSearch(p, o, factors, plan);
      break;
    case SearchPolicy::Driver::OneStep:
      err = recursiveSearch(p, o, {o.workers}, plan);
      break;
    case SearchPolicy::Driver::Greedy:
      spartanSearch(p, o.workers, plan);
      break;
    case SearchPolicy::Driver::Flat:
      err = flatSearch(p, o, factors, deadline, plan);
      break;
    case SearchPolicy::Driver::Exhaustive:
      err = exhaustiveSearch(p, o, factors, deadline, plan);
      break;
    }
  }
  if (err)
    return llvm::Expected<PartitionPlan>(std::move(err));
  plan.searchSeconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (o.time && o.workers > 1 &&
      (recursionPolicy(o).replicas ||
       policyOf(o.algorithm).driver == SearchPolicy::Driver::Exhaustive))
    plan.objective = "time";
  finishPlan(p, plan);
  return plan;
}

} // namespace tofu