// Machine levels: parsing, the search's weights, and plans that keep traffic inside nodes.
#include "planner/topology.h"

#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

#include "fmt/format.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "search/search.h"
#include "testing/suite.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(Topology, ParsesTheCompactForm) {
  auto t = parseTopology("2x4:12.5GB/s@5us,150GB/s");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  ASSERT_EQ(t->levels.size(), 2u);
  EXPECT_EQ(t->workers(), 8u);
  EXPECT_EQ(t->levels[0].count, 2u);
  EXPECT_DOUBLE_EQ(t->levels[0].bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(t->levels[0].latency, 5e-6);
  EXPECT_DOUBLE_EQ(t->levels[1].bandwidth, 150e9);
  EXPECT_DOUBLE_EQ(t->levels[1].latency, 0);
  EXPECT_EQ(describeTopology(*t), "2 nodes x 4 gpus (node 12.5 GB/s @ 5 us, gpu 150 GB/s)");
  auto bits = parseTopology("4:100Gbit/s");
  ASSERT_TRUE(bool(bits));
  EXPECT_DOUBLE_EQ(bits->levels[0].bandwidth, 12.5e9);
  EXPECT_EQ(bits->hostBandwidth, 0); // none given: the device's
  // The host link, last (what --algo swap moves tensors over).
  auto host = parseTopology("2x4:12.5GB/s,150GB/s,host=64GB/s@3us");
  ASSERT_TRUE(bool(host)) << llvm::toString(host.takeError());
  ASSERT_EQ(host->levels.size(), 2u);
  EXPECT_DOUBLE_EQ(host->hostBandwidth, 64e9);
  EXPECT_DOUBLE_EQ(host->hostLatency, 3e-6);
  EXPECT_EQ(describeTopology(*host),
            "2 nodes x 4 gpus (node 12.5 GB/s, gpu 150 GB/s, host 64 GB/s @ 3 us)");
}

TEST(Topology, ParsesJsonFiles) {
  const std::string path = ::testing::TempDir() + "/topology.json";
  {
    std::ofstream f(path);
    f << R"({"levels": [{"name": "rack", "count": 2, "bandwidth": "25GB/s", "latency": "10us"},
                        {"name": "node", "count": 3, "bandwidth": 5e10},
                        {"name": "gpu", "count": 2, "bandwidth": "300GB/s", "latency": 1e-6}],
          "host": {"bandwidth": "32GB/s", "latency": "2us"}})";
  }
  auto t = parseTopology(path);
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  ASSERT_EQ(t->levels.size(), 3u);
  EXPECT_EQ(t->workers(), 12u);
  EXPECT_EQ(t->levels[0].name, "rack");
  EXPECT_DOUBLE_EQ(t->levels[1].bandwidth, 5e10);
  EXPECT_DOUBLE_EQ(t->levels[2].latency, 1e-6);
  EXPECT_DOUBLE_EQ(t->hostBandwidth, 32e9);
  EXPECT_DOUBLE_EQ(t->hostLatency, 2e-6);
  // Steps: each level's factors, outermost first; weights on each level's last step.
  EXPECT_EQ(topologyFactors(*t), (std::vector<unsigned>{2, 3, 2}));
  const std::vector<double> w = topologyWeights(*t).bytes;
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NEAR(w[0], (1 / 25e9 - 1 / 5e10) * 300e9, 1e-9);
  EXPECT_NEAR(w[1], (1 / 5e10 - 1 / 300e9) * 300e9, 1e-9);
  EXPECT_NEAR(w[2], 1, 1e-12);
  // Worker 7 is rack 1, node 0, gpu 1.
  EXPECT_EQ(levelBetween(*t, 7, 1), 0u);
  EXPECT_EQ(levelBetween(*t, 7, 9), 1u);
  EXPECT_EQ(levelBetween(*t, 7, 6), 2u);
  EXPECT_EQ(levelBetween(*t, 7, 7), 3u);
}

TEST(Topology, ErrorsSayWhatAndWhere) {
  auto message = [](const std::string &spec) {
    auto t = parseTopology(spec);
    return t ? std::string("(parsed)") : llvm::toString(t.takeError());
  };
  EXPECT_NE(message("2x4").find("neither a file nor COUNTS:BANDWIDTHS"), std::string::npos);
  EXPECT_NE(message("2x4:12.5GB/s").find("2 levels but 1 bandwidth"), std::string::npos);
  EXPECT_NE(message("2xq:1GB/s,2GB/s").find("'q' is not an integer for a level's count"),
            std::string::npos);
  EXPECT_NE(message("2x99999999999999999999:1GB/s,2GB/s").find("out of range"), std::string::npos);
  EXPECT_NE(message("2x4:inf GB/s,2GB/s").find("'inf GB/s' is not a bandwidth"), std::string::npos);
  EXPECT_NE(message("2x4:1e400GB/s,2GB/s").find("bandwidth '1e400GB/s' is out of range"),
            std::string::npos);
  EXPECT_NE(message("{\"levels\": [{\"count\": 4294967296, \"bandwidth\": 1}]}")
                .find("an integer from 1 to 1000000"),
            std::string::npos);
  // A name that is not a string was an uncaught exception.
  EXPECT_NE(message("{\"levels\": [{\"name\": 3, \"count\": 2, \"bandwidth\": 1}]}")
                .find("level 1: \"name\" is not a string"),
            std::string::npos);
  EXPECT_NE(message("2x4:12.5GB,150GB/s").find("level 1: '12.5GB': unknown bandwidth unit"),
            std::string::npos);
  EXPECT_NE(message("2x4:1GB/s@5parsecs,2GB/s").find("unknown latency unit"), std::string::npos);
  EXPECT_NE(message("2x4:150GB/s,12.5GB/s").find("faster than level 2"), std::string::npos);
  EXPECT_NE(message("{\"levels\": [{\"count\": 2}]}").find("level 1: needs \"bandwidth\""),
            std::string::npos);
  EXPECT_NE(message("{\"levels\": []}").find("non-empty array"), std::string::npos);
  EXPECT_NE(message("{\"levels\": [").find("not valid JSON"), std::string::npos);
  // A misspelled key is named, with the key meant (it was taken without it).
  EXPECT_EQ(message("{\"levels\": [{\"count\": 2, \"bandwidth\": 1, \"latncy\": 1e-6}]}"),
            "the topology: levels[0]: unknown key 'latncy' (did you mean 'latency'? one of: "
            "name, count, bandwidth, latency)");
  EXPECT_EQ(message("{\"levels\": [{\"count\": 2, \"bandwidth\": 1}], \"level\": 3}"),
            "the topology: the top level: unknown key 'level' (did you mean 'levels'? one of: "
            "levels, host)");
  EXPECT_EQ(message("{\"levels\": [{\"count\": 2, \"bandwidth\": 1}], \"host\": {\"latency\": 1}}"),
            "the topology: host: the key 'bandwidth' is missing");
  EXPECT_NE(message("2x4:1GB/s,2GB/s,host=0GB/s")
                .find("host link: bandwidth '0GB/s' is not "
                      "positive"),
            std::string::npos);
  EXPECT_NE(message("{\"levels\": [{\"count\": 2, \"bandwidth\": 1e999}]}")
                .find("the topology: a number is too large for a double"),
            std::string::npos);
  // A directory is reported as one.
  EXPECT_NE(message(::testing::TempDir()).find("' is a directory, not a topology file"),
            std::string::npos);
}

struct Outcome {
  PartitionPlan plan;
  TopologyTraffic traffic;
};

Outcome planOn(const Problem &p, const Topology &t, bool aware) {
  PlanOptions o;
  o.workers = t.workers();
  if (aware) {
    o.factors = topologyFactors(t);
    o.prefixWeights = topologyWeights(t);
  }
  auto plan = searchPlan(p, o);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  Outcome out{std::move(*plan), {}};
  out.traffic = topologyTraffic(p, buildExecPlan(p, out.plan), t);
  return out;
}

double sum(const std::vector<double> &xs) {
  double s = 0;
  for (double x : xs)
    s += x;
  return s;
}

// The issue's test: on 2 nodes × 4 GPUs the plan searched for the machine moves fewer bytes
// between the nodes than the plan of least bytes, and its estimated time (the slowest
// worker's, and every worker's together) is lower. The per-level counts are the execution
// plan's fetches: between and inside the nodes they add up to the plan's bytes.
// The part of a machine k workers fill: the innermost level up to its count, then whole
// units of it, and none where k fills no such part.
TEST(Topology, ThePartOfTheMachineKWorkersFill) {
  auto t = parseTopology("2x2x4:10GB/s,50GB/s,200GB/s");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  auto shape = [&](unsigned k) {
    std::optional<Topology> part = topologyForWorkers(*t, k);
    if (!part)
      return std::string("none");
    std::string out;
    for (const TopologyLevel &l : part->levels)
      out += fmt::format("{}{} {}@{:g}", out.empty() ? "" : ", ", l.count, l.name, l.bandwidth);
    EXPECT_EQ(part->workers(), k);
    return out;
  };
  EXPECT_EQ(shape(0), "none");
  EXPECT_EQ(shape(1), "1 level3@2e+11");
  EXPECT_EQ(shape(3), "3 level3@2e+11");
  EXPECT_EQ(shape(4), "4 level3@2e+11");
  EXPECT_EQ(shape(6), "none"); // more than a unit of 4, not a whole number of them
  EXPECT_EQ(shape(8), "2 level2@5e+10, 4 level3@2e+11");
  EXPECT_EQ(shape(12), "none"); // 3 units of 4: more than the 2 of the middle level
  EXPECT_EQ(shape(16), "2 level1@1e+10, 2 level2@5e+10, 4 level3@2e+11");
  EXPECT_EQ(shape(32), "none"); // more than the machine
  // The options for a part: its workers, its levels' steps and their weights.
  PlanOptions o = machineOptions(PlanOptions{}, *topologyForWorkers(*t, 8));
  EXPECT_EQ(o.workers, 8u);
  EXPECT_EQ(o.factors, (std::vector<unsigned>{2, 2, 2}));
  EXPECT_EQ(o.prefixWeights.bytes.size(), 3u);
}

TEST(Topology, PlansKeepTheHeavyTrafficInsideNodes) {
  auto t = parseTopology("2x4:12.5GB/s@5us,150GB/s@1us");
  ASSERT_TRUE(bool(t));
  for (const char *model : {"gpt-1-64-4-16", "wresnet-50-1-i32-c8-k10", "mlp"}) {
    Problem p = trainingProblem(buildModel(model, 16), Optimizer::Adam);
    PlanOptions o;
    o.workers = 8;
    auto r = searchForTopology(p, o, *t);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    for (const auto &[plan, traffic] : {std::pair(&r->leastBytes, &r->leastBytesTraffic),
                                        std::pair(&r->weighted, &r->weightedTraffic)})
      EXPECT_EQ(traffic->levels[0].bytes + traffic->levels[1].bytes, plan->totalBytes) << model;
    EXPECT_FALSE(r->leastBytesChosen) << model;
    EXPECT_LT(r->traffic.levels[0].bytes, r->leastBytesTraffic.levels[0].bytes) << model;
    EXPECT_LT(r->traffic.slowestSeconds, r->leastBytesTraffic.slowestSeconds) << model;
    EXPECT_LT(sum(r->traffic.workerSeconds), sum(r->leastBytesTraffic.workerSeconds)) << model;
    EXPECT_GT(r->plan.totalBytes, r->leastBytes.totalBytes) << model; // the price of it
    std::printf("%s: between nodes %lld -> %lld bytes, inside %lld -> %lld; slowest worker "
                "%.3f -> %.3f ms\n",
                model, static_cast<long long>(r->leastBytesTraffic.levels[0].bytes),
                static_cast<long long>(r->traffic.levels[0].bytes),
                static_cast<long long>(r->leastBytesTraffic.levels[1].bytes),
                static_cast<long long>(r->traffic.levels[1].bytes),
                1e3 * r->leastBytesTraffic.slowestSeconds, 1e3 * r->traffic.slowestSeconds);
  }
}

// The search's weighted objective is the report's estimate summed over every worker (each
// level's bytes over its bandwidth plus its latency per message), in units of the innermost
// level's bytes, for the machine's plan and the plan of least bytes, with latencies and
// without, on two and three levels; the plan chosen is never estimated slower than either.
TEST(Topology, TheObjectiveIsEveryWorkersEstimatedTime) {
  Problem p = trainingProblem(buildModel("mlp", 16), Optimizer::Adam);
  for (const char *spec : {"2x4:12.5GB/s@5us,150GB/s@1us", "2x4:12.5GB/s,150GB/s",
                           "2x2x2:10GB/s@8us,50GB/s@2us,200GB/s@0.5us", "3x2:10GB/s@8us,50GB/s"}) {
    auto t = parseTopology(spec);
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    PlanOptions o;
    o.workers = t->workers();
    auto r = searchForTopology(p, o, *t);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    const PrefixWeights w = topologyWeights(*t);
    EXPECT_EQ(w.messages.empty(), std::string(spec).find('@') == std::string::npos) << spec;
    for (const auto &[plan, traffic] : {std::pair(&r->leastBytes, &r->leastBytesTraffic),
                                        std::pair(&r->weighted, &r->weightedTraffic)}) {
      const double estimate = sum(traffic->workerSeconds) * t->levels.back().bandwidth;
      EXPECT_NEAR(double(CostModel(p).weightedCost(plan->steps, w)), estimate, 1 + 1e-9 * estimate)
          << spec;
    }
    EXPECT_LE(r->traffic.slowestSeconds, r->weightedTraffic.slowestSeconds) << spec;
    EXPECT_LE(r->traffic.slowestSeconds, r->leastBytesTraffic.slowestSeconds) << spec;
    EXPECT_LT(sum(r->weightedTraffic.workerSeconds), sum(r->leastBytesTraffic.workerSeconds))
        << spec;
  }
  auto t = parseTopology("2x4:12.5GB/s@5us,150GB/s@1us");
  PlanOptions o;
  o.workers = 4;
  auto wrong = searchForTopology(p, o, *t);
  ASSERT_FALSE(bool(wrong));
  EXPECT_NE(llvm::toString(wrong.takeError()).find("4 workers but the topology has 8"),
            std::string::npos);
}

// One level is the topology-blind search: the same plan as without weights.
TEST(Topology, OneLevelIsTheBlindSearch) {
  auto t = parseTopology("8:150GB/s");
  ASSERT_TRUE(bool(t));
  const std::vector<double> w = topologyWeights(*t).bytes;
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0], 0);
  EXPECT_EQ(w[1], 0);
  EXPECT_NEAR(w[2], 1, 1e-12);
  Problem p = trainingProblem(buildModel("gpt-1-64-4-16", 8), Optimizer::Adam);
  const Outcome blind = planOn(p, *t, false), aware = planOn(p, *t, true);
  EXPECT_EQ(blind.plan.totalBytes, aware.plan.totalBytes);
}

// The search's per-level figures are the execution plan's: with one machine level per
// recursion step, what every worker receives from outside its unit of the first L steps
// (CostModel::levelCost: bytes and messages) is what the execution plan fetches across levels
// 1..L, for searched and random plans, even and uneven splits; worker by worker gives the
// same; and the search's step terms with prefix weights add up to weightedCost.
TEST(Topology, LevelCostCountsTheExecutionPlansFetches) {
  std::mt19937 rng(11);
  struct Case {
    const char *what;
    Problem p;
  };
  std::vector<Case> cases;
  cases.push_back({"mlp", trainingProblem(buildModel("mlp", 12), Optimizer::Adam)});
  cases.push_back({"gpt", trainingProblem(buildModel("gpt-1-64-4-16", 6), Optimizer::Adam)});
  cases.push_back({"wresnet", trainingProblem(buildModel("wresnet-50-1-i32-c8-k10", 6))});
  cases.push_back({"rnn", trainingProblem(buildModel("rnn-2-64", 10))});
  size_t index = 0;
  for (const Case &c : cases) {
    const Problem &p = c.p;
    for (const std::vector<unsigned> &parts :
         {std::vector<unsigned>{2, 2, 2}, std::vector<unsigned>{3, 2},
          std::vector<unsigned>{2, 3, 2}}) {
      if (!runsInThisSample(index++, 3)) // every model at each topology under ASan, in turn
        continue;
      Topology t;
      unsigned k = 1;
      for (size_t l = 0; l < parts.size(); ++l) {
        t.levels.push_back({fmt::format("l{}", l), parts[l], 1e9 * double(l + 1), 1e-6});
        k *= parts[l];
      }
      PlanOptions o;
      o.workers = k;
      o.factors = parts;
      std::vector<std::vector<StepChoice>> plans;
      auto blind = searchPlan(p, o);
      ASSERT_TRUE(bool(blind)) << llvm::toString(blind.takeError());
      plans.push_back(blind->steps);
      o.prefixWeights = topologyWeights(t);
      auto aware = searchPlan(p, o);
      ASSERT_TRUE(bool(aware)) << llvm::toString(aware.takeError());
      plans.push_back(aware->steps);
      // Random plans with no variable or dimension cut into more parts than it has
      // elements: where one is, some workers compute nothing, and the cost model's count
      // and the execution plan's fetches can differ slightly (not investigated).
      plans.push_back(randomSteps(p, parts, rng, true));
      plans.push_back(randomSteps(p, parts, rng, true));
      for (size_t q = 0; q < plans.size(); ++q) {
        const std::vector<StepChoice> &steps = plans[q];
        const std::string what = fmt::format("{} k={} plan {}", c.what, k, q);
        PartitionPlan plan;
        plan.workers = k;
        plan.steps = steps;
        const TopologyTraffic traffic = topologyTraffic(p, buildExecPlan(p, plan), t);
        int64_t bytes = 0, messages = 0;
        for (size_t L = 0; L < parts.size(); ++L) {
          bytes += traffic.levels[L].bytes;
          messages += traffic.levels[L].messages;
          int64_t modelMessages = -1, oracleMessages = 0, oracleBytes = 0;
          EXPECT_EQ(CostModel(p).levelCost(steps, L + 1, &modelMessages), bytes)
              << what << " level " << L;
          EXPECT_EQ(modelMessages, messages) << what << " level " << L;
          for (unsigned n = 0; n < p.nodes.size(); ++n)
            oracleBytes += CostModel(p).nodeBruteForceCost(n, steps, L + 1, &oracleMessages);
          EXPECT_EQ(oracleBytes, bytes) << what << " level " << L;
          EXPECT_EQ(oracleMessages, messages) << what << " level " << L;
        }
        EXPECT_EQ(bytes, CostModel(p).modelCost(steps)) << what;
        // Integer weights: the step terms' shares add up to the weighted cost exactly.
        PrefixWeights w;
        for (size_t l = 0; l < parts.size(); ++l) {
          w.bytes.push_back(double(l + 2));
          w.messages.push_back(double(3 * l + 5));
        }
        for (size_t i = 0; i < steps.size(); ++i) {
          int64_t sum = 0;
          for (unsigned n = 0; n < p.nodes.size(); ++n) {
            const ProblemNode &node = p.nodes[n];
            std::vector<std::vector<int>> configs;
            for (unsigned in : node.inputs)
              configs.push_back({steps[i].tensor[in]});
            configs.push_back({steps[i].tensor[node.output]});
            for (const auto &slot :
                 CostModel(p).stepTerms(n, steps, i, steps[i].parts, steps[i].node[n], configs, w))
              sum += slot[0];
          }
          EXPECT_EQ(sum, CostModel(p).weightedCost(steps, w)) << what << " step " << i;
        }
      }
    }
  }
}

TEST(Topology, OptionsAreChecked) {
  Problem p = trainingProblem(buildModel("mlp", 8));
  PlanOptions o;
  o.workers = 8;
  o.factors = {2, 2};
  auto r = searchPlan(p, o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("4 parts for 8 workers"), std::string::npos);
  o.factors = {2, 4};
  o.prefixWeights.bytes = {1};
  r = searchPlan(p, o);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("1 prefix weights for 2 recursion steps"),
            std::string::npos);
}

} // namespace
} // namespace tofu
