// One step of the search: the candidates of every node and tensor, the cached cost terms,
// and the DP (a min-sum problem over coarse variables) whose solution is the step's choice.
#include "search/search_internal.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>

#include "analysis/hash.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"
#include "search/minsum.h"
#include "search/parallel.h"

namespace tofu {
namespace searchimpl {

int nodeLabel(const Problem &p, unsigned n, int s) {
  if (s < 0)
    return -1;
  const Strategy &st = p.nodes[n].table->strategies[s];
  return st.kind == Strategy::Kind::Output ? static_cast<int>(st.outputDim)
                                           : 1000 + static_cast<int>(st.var);
}

std::vector<bool> weightLike(const Problem &p) {
  std::set<std::string> groups;
  for (const ProblemTensor &t : p.tensors)
    if (t.role == TensorRole::Weight)
      groups.insert(t.group);
  std::vector<bool> out;
  for (const ProblemTensor &t : p.tensors)
    out.push_back(t.role == TensorRole::Weight || t.role == TensorRole::OptimizerState ||
                  groups.count(t.group));
  return out;
}

int batchVar(const Problem &p, unsigned n, const std::vector<bool> &weightLike) {
  const ProblemNode &node = p.nodes[n];
  auto outputDim0 = [&]() {
    for (const Strategy &st : node.table->strategies)
      if (st.kind == Strategy::Kind::Output && st.outputDim == 0)
        return static_cast<int>(st.var);
    return -1;
  };
  if (!weightLike[node.output] && !p.tensors[node.output].shape.empty())
    return outputDim0();
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const unsigned t = node.inputs[k];
    if (weightLike[t] || p.tensors[t].shape.empty() || !node.regionVars)
      continue;
    const auto &dim0 = (*node.regionVars)[k][0];
    if (dim0.size() == 1)
      return static_cast<int>(dim0[0]);
  }
  return p.tensors[node.output].shape.empty() ? -1 : outputDim0();
}

llvm::Error batchCutError(const Problem &p, unsigned parts, const char *algorithm) {
  const std::vector<bool> roles = weightLike(p);
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    const ProblemNode &node = p.nodes[n];
    if (roles[node.output] || p.tensors[node.output].shape.size() < 2)
      continue;
    const int v = batchVar(p, n, roles);
    if (v < 0 || node.shapes.vars[static_cast<size_t>(v)] >= int64_t(parts))
      continue;
    return stringError(fmt::format(
        "{} cuts the batch into {} parts, but node '{}' has a batch of {}: it could only be "
        "replicated, every worker computing all of it. Each part needs a sample at least: a "
        "larger --batch, fewer --microbatches or fewer workers",
        algorithm, parts, node.name, node.shapes.vars[static_cast<size_t>(v)]));
  }
  return llvm::Error::success();
}

std::vector<int> megatronCuts(const Problem &p) {
  const std::vector<bool> weights = weightLike(p);
  std::map<std::string, std::pair<int, std::vector<int64_t>>> byGroup; // the weight's cut
  std::vector<bool> split(p.tensors.size(), false);
  auto assign = [&](unsigned w, int dim) {
    byGroup.try_emplace(p.tensors[w].group, dim, p.tensors[w].shape);
  };
  // What stands for a weight: its transpose (ONNX exports of nn.Linear read W through
  // Transpose), the weight with its two dimensions swapped, and its bfloat16 cast (a bf16
  // step's products read their weights so, graph/precision.h), the weight as it is; and
  // chains of the two.
  struct Alias {
    unsigned weight;
    bool swapped;
  };
  std::map<unsigned, Alias> aliasOf;
  auto standsFor = [&](unsigned t) -> std::optional<Alias> {
    if (p.tensors[t].role == TensorRole::Weight)
      return Alias{t, false};
    if (auto it = aliasOf.find(t); it != aliasOf.end())
      return it->second;
    return std::nullopt;
  };
  for (const ProblemNode &n : p.nodes) {
    if (p.tensors[n.output].role != TensorRole::Activation)
      continue; // the forward ops decide
    const std::string &op = n.table->op.def->name;
    if ((op == "Transpose_10" || op == "CastBfloat16") && n.inputs.size() == 1)
      if (auto a = standsFor(n.inputs[0])) {
        const bool transposes = op == "Transpose_10";
        if (!transposes || p.tensors[n.inputs[0]].shape.size() == 2) {
          aliasOf[n.output] = Alias{a->weight, a->swapped != transposes};
          continue;
        }
      }
    std::vector<unsigned> ws;
    bool anySplit = false;
    for (unsigned t : n.inputs) {
      if (standsFor(t))
        ws.push_back(t);
      else
        anySplit = anySplit || split[t];
    }
    const bool product = op.find("MatMul") != std::string::npos || op.rfind("Gemm", 0) == 0;
    if (product && ws.size() == 1 && p.tensors[ws[0]].shape.size() == 2 && n.regionVars) {
      // Column-parallel cuts the weight's dimension the output keeps (its features), row-
      // parallel the one the product sums over, whichever way the weight is laid out
      // ([in, out], or [out, in] under a transposed Gemm).
      const size_t k = static_cast<size_t>(std::find(n.inputs.begin(), n.inputs.end(), ws[0]) -
                                           n.inputs.begin());
      const auto &outVars = n.table->op.outputVars;
      int dim = -1;
      for (int d = 0; d < 2 && dim < 0; ++d) {
        const auto &vars = (*n.regionVars)[k][static_cast<size_t>(d)];
        const bool kept =
            vars.size() == 1 && std::find(outVars.begin(), outVars.end(), vars[0]) != outVars.end();
        if (vars.size() == 1 && kept != anySplit)
          dim = d;
      }
      if (dim >= 0) {
        const Alias a = *standsFor(ws[0]);
        assign(a.weight, a.swapped ? 1 - dim : dim);
        split[n.output] = !anySplit;
      }
    } else if (op.rfind("Gather", 0) == 0 && !n.inputs.empty() && standsFor(n.inputs[0]) &&
               p.tensors[n.inputs[0]].shape.size() == 2) {
      // Megatron cuts the table by vocabulary and sums the rows each rank holds; TDL's
      // gather has no variable over the vocabulary, so the table is cut by features: each
      // worker looks up its slice of every row, and the result is gathered whole (as many
      // bytes as Megatron's sum).
      const Alias a = *standsFor(n.inputs[0]);
      assign(a.weight, a.swapped ? 0 : 1);
    } else if (op.find("Normalization") == std::string::npos) {
      split[n.output] = anySplit;
      if (anySplit)
        for (unsigned w : ws)
          if (p.tensors[w].shape.size() == 1)
            assign(standsFor(w)->weight, 0); // a bias of the split features
    }
  }
  // The weights no rule cut (a layer norm's, a position table) stay whole where the model
  // has products Megatron cuts; in one that has none, every tensor is the DP's to cut.
  std::vector<int> cut(p.tensors.size(), -2);
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    if (!weights[t])
      continue;
    auto it = byGroup.find(p.tensors[t].group);
    cut[t] = it != byGroup.end() && it->second.second == p.tensors[t].shape ? it->second.first
             : byGroup.empty()                                              ? -2
                                                                            : -1;
  }
  // What stands for a cut weight is cut as it is (swapped back for a transpose).
  for (const auto &[t, a] : aliasOf)
    if (cut[a.weight] >= 0)
      cut[t] = p.tensors[t].shape.size() == 2 && a.swapped ? 1 - cut[a.weight] : cut[a.weight];
  return cut;
}

int megatronVar(const Problem &p, unsigned n, const std::vector<int> &cuts) {
  const ProblemNode &node = p.nodes[n];
  if (cuts[node.output] >= 0) // a weight's gradient or update: split as the weight
    for (const Strategy &st : node.table->strategies)
      if (st.kind == Strategy::Kind::Output && int(st.outputDim) == cuts[node.output])
        return static_cast<int>(st.var);
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int d = cuts[node.inputs[k]];
    if (d < 0 || !node.regionVars)
      continue;
    const auto &vars = (*node.regionVars)[k][static_cast<size_t>(d)];
    if (vars.size() == 1) // the weight stays where it is: the op splits what indexes its cut
      return static_cast<int>(vars[0]);
  }
  return -1;
}

void nodeSignature(const std::vector<int64_t> &classes, const std::vector<StepChoice> &steps,
                   unsigned n, size_t skip, std::vector<int64_t> &sig) {
  sig.assign({0, classes[n]});
  for (size_t l = 0; l < steps.size(); ++l)
    sig.push_back(l == skip ? -2 : steps[l].node[n]);
}

void tensorSignature(const Problem &p, const std::vector<StepChoice> &steps, unsigned t,
                     size_t skip, std::vector<int64_t> &sig) {
  const std::vector<int64_t> &shape = p.tensors[t].shape;
  sig.assign({1, int64_t(shape.size())});
  sig.insert(sig.end(), shape.begin(), shape.end());
  for (size_t l = 0; l < steps.size(); ++l)
    sig.push_back(l == skip ? -2 : steps[l].tensor[t]);
}

void candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i, unsigned parts,
                const SearchPolicy &policy, Candidates &c, const std::vector<int64_t> *classes,
                WorkerPool *pool) {
  using Cuts = SearchPolicy::TensorCuts;
  c.node.resize(p.nodes.size());
  c.tensor.resize(p.tensors.size());
  const size_t m = std::max(steps.size(), i + 1);
  auto partsAt = [&](size_t l) { return l == i ? parts : steps[l].parts; };
  // Megatron's cut of each weight-like tensor, which both the nodes' and the tensors'
  // candidates follow (computed once for the two).
  std::vector<int> fixed;
  if (policy.megatron)
    fixed = megatronCuts(p);
  auto nodes = [&]() {
    FirstBySignature firsts;
    std::vector<int64_t> sig;
    // Per strategy, the extents of the variables the sequence cuts (few: one per step).
    std::vector<std::pair<int, int64_t>> cut;
    std::vector<bool> roles;
    if (policy.batchNodes)
      roles = weightLike(p);
    for (unsigned n = 0; n < p.nodes.size(); ++n) {
      // The one variable the node may split, where the policy pins it.
      const int pinnedVar = policy.batchNodes ? batchVar(p, n, roles)
                            : policy.megatron ? megatronVar(p, n, fixed)
                                              : -1;
      const bool pinned = policy.batchNodes || (policy.megatron && pinnedVar >= 0);
      if (classes && !policy.batchNodes && !policy.megatron) { // (else: by tensor roles too)
        nodeSignature(*classes, steps, n, i, sig);
        if (const unsigned first = firsts.of(sig, n); first != n) {
          c.node[n] = c.node[first];
          continue;
        }
      }
      std::vector<int> &list = c.node[n];
      list.clear();
      const auto &strategies = p.nodes[n].table->strategies;
      for (unsigned s = 0; s < strategies.size(); ++s) {
        if (!policy.reductionStrategies && strategies[s].kind == Strategy::Kind::Reduction)
          continue;
        if (pinned && static_cast<int>(strategies[s].var) != pinnedVar)
          continue;
        cut.clear();
        bool ok = true;
        for (size_t l = 0; l < m && ok; ++l) {
          int v = p.splitVar(n, l == i ? int(s) : steps[l].node[n]);
          if (v < 0)
            continue;
          auto at =
              std::find_if(cut.begin(), cut.end(), [&](const auto &c) { return c.first == v; });
          if (at == cut.end())
            at = cut.insert(cut.end(), {v, p.nodes[n].shapes.vars[v]});
          ok = at->second >= int64_t(partsAt(l));
          at->second = partOf(at->second, partsAt(l), 0).size();
        }
        if (ok)
          list.push_back(static_cast<int>(s));
      }
      if (list.empty() || policy.replicas)
        list.push_back(-1);
    }
  };
  auto tensors = [&]() {
    FirstBySignature firsts;
    std::vector<int64_t> sig;
    std::vector<bool> whole;
    if (policy.tensorCuts == Cuts::Batch)
      whole = weightLike(p);
    std::vector<int64_t> ext;
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      const std::vector<int64_t> &shape = p.tensors[t].shape;
      if (classes && policy.tensorCuts != Cuts::Batch && !policy.megatron) { // (by role too)
        tensorSignature(p, steps, t, i, sig);
        if (const unsigned first = firsts.of(sig, t); first != t) {
          c.tensor[t] = c.tensor[first];
          continue;
        }
      }
      std::vector<int> &list = c.tensor[t];
      list.clear();
      for (unsigned d = 0; d < shape.size(); ++d) {
        ext = shape;
        bool ok = true;
        for (size_t l = 0; l < m && ok; ++l) {
          int e = l == i ? int(d) : steps[l].tensor[t];
          if (e < 0)
            continue;
          ok = ext[e] >= int64_t(partsAt(l));
          ext[e] = partOf(ext[e], partsAt(l), 0).size();
        }
        if (ok)
          list.push_back(static_cast<int>(d));
      }
      if (policy.tensorCuts != Cuts::Any) {
        bool first = !list.empty() && list.front() == 0;
        list.clear();
        if (first && !(policy.tensorCuts == Cuts::Batch && whole[t]))
          list.push_back(0);
      }
      if (policy.megatron && fixed[t] != -2) { // a weight's: its cut where it can be made
        const bool can = std::find(list.begin(), list.end(), fixed[t]) != list.end();
        list.clear();
        if (can)
          list.push_back(fixed[t]);
      }
      if (list.empty() || policy.replicas) // replicas: every worker may hold it whole
        list.push_back(-1);
    }
  };
  if (pool && pool->threads() > 1) {
    pool->run([&](unsigned t) {
      if (t == 0)
        nodes();
      else if (t == 1)
        tensors();
    });
  } else {
    nodes();
    tensors();
  }
}

Candidates candidates(const Problem &p, const std::vector<StepChoice> &steps, size_t i,
                      unsigned parts, const SearchPolicy &policy) {
  Candidates c;
  candidates(p, steps, i, parts, policy, c);
  return c;
}

std::vector<int64_t> nodeClasses(const Problem &p) {
  std::unordered_map<std::vector<int64_t>, int64_t, VectorHash> ids;
  std::vector<int64_t> out;
  std::vector<int64_t> key;
  for (const ProblemNode &node : p.nodes) {
    key.clear();
    key.push_back(reinterpret_cast<intptr_t>(node.table.get()));
    for (int64_t v : node.shapes.vars)
      key.push_back(v);
    for (size_t k = 0; k <= node.inputs.size(); ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      key.push_back(-1000 - int64_t(k));
      // Repeated inputs are deduplicated by tensor identity: keep which slot it repeats.
      for (size_t q = 0; q < k && k < node.inputs.size(); ++q)
        if (node.inputs[q] == t)
          key.push_back(-2000 - int64_t(q));
      for (int64_t d : p.tensors[t].shape)
        key.push_back(d);
      key.push_back(p.tensors[t].elementBytes);
      key.push_back(p.tensors[t].storageBytes());
    }
    out.push_back(ids.emplace(key, int64_t(ids.size())).first->second);
  }
  return out;
}

thread_local size_t CostTables::lastSize_ = 0;

StepModel buildStep(const Problem &p, const CoarseSets &co, const std::vector<StepChoice> &steps,
                    size_t i, unsigned parts, const Candidates &cand, TermCaches &caches,
                    WorkerPool *pool, double memoryWeight, const std::vector<bool> &pricedBuffers,
                    const Objective &objective) {
  const PrefixWeights &weights = objective.weights;
  StepModel m;
  const unsigned N = static_cast<unsigned>(p.nodes.size());
  const unsigned T = static_cast<unsigned>(p.tensors.size());
  // Per node, the labels of its candidates (in their order).
  std::vector<std::vector<int>> nodeLabels(N);
  for (unsigned n = 0; n < N; ++n)
    for (int s : cand.node[n])
      nodeLabels[n].push_back(nodeLabel(p, n, s));
  auto labelsOf = [&](unsigned item) -> const std::vector<int> & {
    return item < N ? nodeLabels[item] : cand.tensor[item - N];
  };
  m.nodeVar.assign(N, 0);
  m.tensorVar.assign(T, 0);
  m.nodeChoice.assign(N, {});
  m.tensorChoice.assign(T, {});
  coarseVariables(
      co, labelsOf,
      [&](const std::vector<unsigned> &items, const std::vector<int> &labels, int64_t priority) {
        const unsigned v = m.msp.addVariable(static_cast<unsigned>(labels.size()), priority);
        for (unsigned item : items) {
          if (item >= N) {
            m.tensorVar[item - N] = v;
            m.tensorChoice[item - N] = labels;
            continue;
          }
          m.nodeVar[item] = v;
          // Each label's candidate (the last, should two share one).
          const std::vector<int> &own = nodeLabels[item];
          for (int l : labels) {
            int s = -1;
            for (size_t q = own.size(); q-- > 0;)
              if (own[q] == l) {
                s = cand.node[item][q];
                break;
              }
            m.nodeChoice[item].push_back(s);
          }
        }
      });
  // Per node and value of its variable, its terms (and where the node is priced, its
  // buffers) in the caches: nodeAt[n] is where its pointers start.
  std::vector<size_t> nodeAt(N + 1, 0);
  for (unsigned n = 0; n < N; ++n)
    nodeAt[n + 1] = nodeAt[n] + m.nodeChoice[n].size();
  std::vector<const TermCache::Terms *> terms(nodeAt[N]), buffers;
  auto isPriced = [&](unsigned n) {
    return memoryWeight > 0 && n < pricedBuffers.size() && pricedBuffers[n];
  };
  if (memoryWeight > 0)
    buffers.resize(nodeAt[N]);
  auto slotConfigs = [&](unsigned n, std::vector<const std::vector<int> *> &configs) {
    const ProblemNode &node = p.nodes[n];
    configs.resize(node.inputs.size() + 1);
    for (size_t k = 0; k < configs.size(); ++k)
      configs[k] = &m.tensorChoice[k < node.inputs.size() ? node.inputs[k] : node.output];
  };
  // Thread t looks up the nodes of part t (every part when it runs alone).
  auto lookUp = [&](unsigned t, unsigned threads) {
    std::vector<const std::vector<int> *> configs;
    for (unsigned n = 0; n < N; ++n) {
      const unsigned part = caches.partOf(n);
      if (threads > 1 && part != t)
        continue;
      slotConfigs(n, configs);
      TermCache &cache = caches.at(i, part);
      cache.prepare(p, n, steps, i, parts, configs, weights);
      const bool priced = isPriced(n);
      for (size_t x = 0; x < m.nodeChoice[n].size(); ++x) {
        const int s = m.nodeChoice[n][x];
        terms[nodeAt[n] + x] = &cache.get(s);
        if (priced)
          buffers[nodeAt[n] + x] = &cache.get(s, true);
      }
    }
  };
  if (pool && pool->threads() > 1 && caches.parts() == pool->threads())
    pool->run([&](unsigned t) { lookUp(t, pool->threads()); });
  else
    lookUp(0, 1);
  // Cost tables: per node and slot, strategy x tensor configuration.
  CostTables tables(m.msp);
  for (unsigned n = 0; n < N; ++n) {
    const ProblemNode &node = p.nodes[n];
    const size_t slots = node.inputs.size() + 1;
    // Communication, and where the node is priced, the memory of its buffers.
    const bool priced = isPriced(n);
    const TermCache::Terms *const *own = terms.data() + nodeAt[n];
    const TermCache::Terms *const *ownBuffers = priced ? buffers.data() + nodeAt[n] : nullptr;
    for (size_t k = 0; k < slots; ++k) {
      unsigned t = k < node.inputs.size() ? node.inputs[k] : node.output;
      tables.add(m.nodeVar[n], m.tensorVar[t], [&](unsigned x, unsigned y) {
        return (*own[x])[k][y] + (priced ? memoryCost(memoryWeight, (*ownBuffers[x])[k][y]) : 0);
      });
    }
  }
  if (!objective.work.empty()) // the time objective: each node's compute on its choice
    for (unsigned n = 0; n < N; ++n) {
      std::vector<int64_t> u;
      for (int s : m.nodeChoice[n])
        u.push_back(computeTerm(objective, n, steps, i, parts, s));
      tables.add(m.nodeVar[n], m.nodeVar[n], [&](unsigned x, unsigned) { return u[x]; });
    }
  if (memoryWeight > 0) {
    const size_t depth = std::max(steps.size(), i + 1);
    for (unsigned t = 0; t < T; ++t) {
      std::vector<int64_t> u;
      for (int c : m.tensorChoice[t])
        u.push_back(
            memoryCost(memoryWeight,
                       tileBytes(
                           p, t, depth, [&](size_t l) { return l == i ? c : steps[l].tensor[t]; },
                           [&](size_t l) { return l == i ? parts : steps[l].parts; })));
      tables.add(m.tensorVar[t], m.tensorVar[t], [&](unsigned x, unsigned) { return u[x]; });
    }
  }
  tables.flush();
  return m;
}

Objective objectiveOf(const Problem &p, const PlanOptions &o, bool machineWeights) {
  Objective out;
  if (!machineWeights)
    return out;
  out.weights = o.prefixWeights;
  if (o.time && o.time->nodeSeconds) {
    out.work = o.time->nodeSeconds(p);
    out.work.resize(p.nodes.size(), 0);
    for (double &w : out.work)
      w *= o.time->bytesPerSecond;
  }
  return out;
}

int64_t computeTerm(const Objective &obj, unsigned n, const std::vector<StepChoice> &steps,
                    size_t i, unsigned parts, int s) {
  if (obj.work.empty() || obj.work[n] == 0)
    return 0;
  double copies = s < 0 ? parts : 1;
  for (size_t l = 0; l < steps.size(); ++l)
    if (l != i && steps[l].node[n] < 0)
      copies *= steps[l].parts;
  return std::llround(obj.work[n] * copies);
}

int64_t objectiveCost(const Problem &p, const Objective &obj,
                      const std::vector<StepChoice> &steps) {
  int64_t c = CostModel(p).weightedCost(steps, obj.weights);
  if (!obj.work.empty() && !steps.empty())
    for (unsigned n = 0; n < p.nodes.size(); ++n)
      c += computeTerm(obj, n, steps, 0, steps[0].parts, steps[0].node[n]);
  return c;
}

} // namespace searchimpl

TimeObjective withWorkOf(const TimeObjective &t, const Problem &p) {
  TimeObjective out = t;
  if (t.nodeSeconds) {
    auto work = std::make_shared<const std::vector<double>>(t.nodeSeconds(p));
    out.nodeSeconds = [work](const Problem &) { return *work; };
  }
  return out;
}

double planComputeSeconds(const Problem &p, const TimeObjective &t,
                          const std::vector<StepChoice> &steps) {
  if (!t.nodeSeconds)
    return 0;
  searchimpl::Objective obj;
  obj.work = t.nodeSeconds(p);
  obj.work.resize(p.nodes.size(), 0);
  double total = 0, workers = 1;
  for (const StepChoice &c : steps)
    workers *= c.parts;
  for (unsigned n = 0; n < p.nodes.size(); ++n) {
    double copies = 1;
    for (const StepChoice &c : steps)
      if (c.node[n] < 0)
        copies *= c.parts;
    total += obj.work[n] * copies;
  }
  return total / workers;
}

namespace searchimpl {

StepChoice choiceOf(const Problem &p, const StepModel &m, unsigned parts,
                    const std::vector<unsigned> &values) {
  StepChoice c;
  c.parts = parts;
  for (unsigned n = 0; n < p.nodes.size(); ++n)
    c.node.push_back(m.nodeChoice[n][values[m.nodeVar[n]]]);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    c.tensor.push_back(m.tensorChoice[t][values[m.tensorVar[t]]]);
  return c;
}

void finishPlan(const Problem &p, PartitionPlan &plan) {
  plan.stepBytes.clear();
  plan.nodeBytes.assign(p.nodes.size(), 0);
  int64_t before = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    std::vector<StepChoice> prefix(plan.steps.begin(), plan.steps.begin() + i + 1);
    int64_t c =
        CostModel(p).modelCost(prefix, i + 1 == plan.steps.size() ? &plan.nodeBytes : nullptr);
    plan.stepBytes.push_back(c - before);
    before = c;
  }
  plan.totalBytes = before;
}

} // namespace searchimpl
} // namespace tofu
