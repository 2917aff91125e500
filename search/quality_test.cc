// The recursive search against the exact optimum over tilings (dp-flat) on random small
// training graphs and the zoo's small models (issue 17, item 1).
#include <algorithm>
#include <cstdio>
#include <random>

#include "fmt/format.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "search/search.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// A random small forward graph ending in a softmax cross-entropy loss: a chain of 1–4
/// fully connected layers (MatMul, an optional bias, an optional activation) of random
/// widths, on a random batch, with residual additions where an earlier activation has the
/// same shape, and forks (two layers from one input, added).
llvm::Expected<Graph> randomGraph(std::mt19937 &rng) {
  auto pick = [&](std::initializer_list<int64_t> xs) { return *(xs.begin() + rng() % xs.size()); };
  Graph g;
  llvm::Error error = llvm::Error::success();
  auto keep = [&](llvm::Error e) {
    if (e && !error)
      error = std::move(e);
    else
      llvm::consumeError(std::move(e));
  };
  auto addTensor = [&](const std::string &name, std::vector<int64_t> shape, TensorRole role) {
    keep(g.addTensor(testTensor(name, std::move(shape), role)));
  };
  auto addNode = [&](const std::string &name, const std::string &op,
                     std::vector<std::string> inputs, std::map<std::string, int64_t> groups = {}) {
    Node n;
    n.name = name;
    n.group = name;
    n.op = op;
    n.inputs = std::move(inputs);
    n.groups = std::move(groups);
    n.output = name + "_out";
    keep(g.addNode(std::move(n)));
    return name + "_out";
  };
  const int64_t batch = pick({4, 6, 8, 12, 16, 24, 32, 64});
  struct Value {
    std::string name;
    int64_t width;
  };
  std::vector<Value> values{{"x", pick({4, 8, 12, 16, 32, 64})}};
  addTensor("x", {batch, values[0].width}, TensorRole::Input);
  addTensor("labels", {batch}, TensorRole::Input);
  int id = 0;
  auto dense = [&](const Value &in, int64_t width) {
    const std::string name = fmt::format("l{}", id++);
    addTensor(name + "_w", {in.width, width}, TensorRole::Weight);
    std::string out = addNode(name, "MatMul", {in.name, name + "_w"});
    if (rng() % 2) {
      addTensor(name + "_b", {width}, TensorRole::Weight);
      out = addNode(name + "_bias", "AddBcast", {out, name + "_b"}, {{"p", 1}, {"i", 1}});
    }
    const char *act[] = {"Relu", "Tanh", "Sigmoid", nullptr};
    if (const char *a = act[rng() % 4])
      out = addNode(name + "_act", a, {out});
    return Value{out, width};
  };
  const int layers = 1 + int(rng() % 4);
  for (int l = 0; l < layers; ++l) {
    const bool last = l + 1 == layers;
    const int64_t width =
        last ? pick({2, 4, 8, 10, 16}) : pick({4, 8, 12, 16, 24, 32, 48, 64, 128});
    const Value in = values.back();
    Value out = dense(in, width);
    if (!last && rng() % 4 == 0) // a fork: a second layer from the same input, added
      out = Value{addNode(fmt::format("fork{}", id++), "Add", {out.name, dense(in, width).name}),
                  width};
    for (const Value &v : values) // a residual connection from an earlier value of this width
      if (!last && v.width == width && v.name != "x" && rng() % 2) {
        out = Value{addNode(fmt::format("res{}", id++), "Add", {out.name, v.name}), width};
        break;
      }
    values.push_back(out);
  }
  addNode("loss", "softmax_cross_entropy", {values.back().name, "labels"});
  g.outputs = {"loss_out"};
  if (error)
    return llvm::Expected<Graph>(std::move(error));
  return g;
}

PartitionPlan search(const Problem &p, unsigned k, Algorithm a) {
  PlanOptions o;
  o.workers = k;
  o.algorithm = a;
  o.budgetSeconds = 120;
  auto r = searchPlan(p, o);
  EXPECT_TRUE(bool(r)) << algorithmName(a) << " k=" << k << ": " << llvm::toString(r.takeError());
  return r ? std::move(*r) : PartitionPlan();
}

/// tofu's cost over dp-flat's, minus one.
double gap(const PartitionPlan &tofu, const PartitionPlan &flat) {
  return flat.totalBytes > 0 ? double(tofu.totalBytes) / double(flat.totalBytes) - 1 : 0;
}

// 100 random graphs (a third with Adam) at k = 4, 6 and 8: dp-flat finishes on all of them.
// Before the joint re-solves of pairs of steps and the merged-factor starts, 110 of these
// 300 cases were more than 1% over dp-flat (the worst by 20.9%). tofu may also be cheaper:
// dp-flat keeps an item whole at a step only where no cut fits given the steps before it,
// tofu where none fits given all the others, so some of tofu's tilings are not dp-flat's.
TEST(Quality, TofuWithinOnePercentOfDpFlatOnRandomTrainingGraphs) {
  std::mt19937 rng(2026);
  int over = 0, better = 0, cases = 0;
  double worst = 0;
  for (int graph = 0; graph < 100; ++graph) {
    llvm::Expected<Graph> g = randomGraph(rng); // drawn in every run: the same graphs in all
    if (!runsInThisSample(graph, 3)) {          // under ASan a third of the graphs, in turn
      llvm::consumeError(g.takeError());
      continue;
    }
    Problem p = trainingProblem(std::move(g), graph % 3 == 2 ? Optimizer::Adam : Optimizer::SGD);
    for (unsigned k : {4u, 6u, 8u}) {
      const PartitionPlan t = search(p, k, Algorithm::Tofu);
      const PartitionPlan f = search(p, k, Algorithm::DpFlat);
      ++cases;
      better += t.totalBytes < f.totalBytes;
      worst = std::max(worst, gap(t, f));
      if (gap(t, f) > 0.01) {
        ++over;
        ADD_FAILURE() << fmt::format(
            "graph {} ({} nodes) k={}: tofu {} bytes, dp-flat {} ({:+.2f}%)", graph, p.nodes.size(),
            k, t.totalBytes, f.totalBytes, 100 * gap(t, f));
      }
    }
  }
  std::printf("%d of %d cases more than 1%% over dp-flat, the worst %+.2f%%; %d cheaper than "
              "dp-flat\n",
              over, cases, 100 * worst, better);
}

// The zoo's small models with Adam: where dp-flat finishes (its DP fits in its table limit),
// tofu is within 1% of it. Which ones dp-flat finishes is part of the expectation: at k = 8
// three of them are too wide for it.
TEST(Quality, TofuWithinOnePercentOfDpFlatOnSmallZooModels) {
  struct Case {
    const char *model;
    int64_t batch;
    std::vector<unsigned> flatFinishes; ///< the worker counts where dp-flat finishes
  };
  const Case cases[] = {{"mlp", 16, {4, 6, 8}},
                        {"rnn-2-64", 8, {4, 6}},
                        {"gpt-1-64-4-16", 8, {4, 6}},
                        {"wresnet-50-1-i32-c8-k10", 8, {4, 6}}};
  size_t index = 0;
  for (const Case &c : cases) {
    Problem p = trainingProblem(buildModel(c.model, c.batch), Optimizer::Adam);
    for (unsigned k : {4u, 6u, 8u}) {
      if (!runsInThisSample(index++, 2)) // under ASan half the cases, in turn
        continue;
      const PartitionPlan t = search(p, k, Algorithm::Tofu);
      PlanOptions o;
      o.workers = k;
      o.algorithm = Algorithm::DpFlat;
      auto f = searchPlan(p, o);
      const bool expected =
          std::find(c.flatFinishes.begin(), c.flatFinishes.end(), k) != c.flatFinishes.end();
      if (!f) {
        const std::string why = llvm::toString(f.takeError());
        EXPECT_FALSE(expected) << c.model << " k=" << k << ": " << why;
        EXPECT_NE(why.find("too wide"), std::string::npos) << why;
        continue;
      }
      EXPECT_TRUE(expected) << c.model << " k=" << k << ": dp-flat finished";
      EXPECT_LE(gap(t, *f), 0.01) << fmt::format("{} k={}: tofu {} bytes, dp-flat {}", c.model, k,
                                                 t.totalBytes, f->totalBytes);
      std::printf("%s k=%u: tofu %lld bytes, dp-flat %lld (%+.2f%%)\n", c.model, k,
                  static_cast<long long>(t.totalBytes), static_cast<long long>(f->totalBytes),
                  100 * gap(t, *f));
    }
  }
}

} // namespace
} // namespace tofu
