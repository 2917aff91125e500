// The public APIs (include/tofu/plan.h, include/tofu/tofu.h): graphs built and rejected,
// plans whose per-step cuts, per-worker tiles and memory agree with each other, errors as
// values of the right kind, and the C API over the same plans.
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tofu/plan.h"
#include "tofu/tofu.h"
#include "gtest/gtest.h"

namespace {

using namespace tofu::api;

const Planner &planner() {
  static Planner *p = [] {
    auto r = Planner::open(); // the library among the test's runfiles
    EXPECT_TRUE(r.ok()) << r.error();
    return new Planner(std::move(*r));
  }();
  return *p;
}

Graph mlp(int64_t batch = 32) {
  Graph g;
  EXPECT_TRUE(g.addInput("x", {batch, 64}).ok());
  EXPECT_TRUE(g.addWeight("w1", {64, 128}).ok());
  EXPECT_TRUE(g.addWeight("w2", {128, 8}).ok());
  EXPECT_TRUE(g.addNode({"fc1", "MatMul", {"x", "w1"}, "h", {}, {{"b", 0}}}).ok());
  EXPECT_TRUE(g.addNode({"relu", "Relu", {"h"}, "a", {}, {{"i", 2}}}).ok());
  EXPECT_TRUE(g.addNode({"fc2", "MatMul", {"a", "w2"}, "logits", {}, {{"b", 0}}}).ok());
  EXPECT_TRUE(g.setOutputs({"logits"}).ok());
  return g;
}

int64_t volume(const Box &b) {
  int64_t v = 1;
  for (size_t d = 0; d < b.lo.size(); ++d)
    v *= b.hi[d] - b.lo[d];
  return v;
}

TEST(PublicGraph, RejectsBadDeclarations) {
  Graph g;
  Status s = g.addInput("x", {4, 0});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::Graph);
  EXPECT_NE(s.message().find("non-positive extent in [4, 0]"), std::string::npos) << s.message();
  s = g.addInput("huge", {int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_NE(s.message().find("more bytes than a 64-bit count holds"), std::string::npos)
      << s.message();
  s = g.addWeight("w", {3}, "float33");
  EXPECT_NE(s.message().find("unknown dtype 'float33'"), std::string::npos) << s.message();
  s = g.addConstant("c", {2, 2}, {1, 2, 3});
  EXPECT_NE(s.message().find("needs 4 values; 3 given"), std::string::npos) << s.message();
  EXPECT_TRUE(g.addInput("x", {4, 4}).ok());
  s = g.addWeight("x", {4});
  EXPECT_NE(s.message().find("'x' is declared twice"), std::string::npos) << s.message();
  s = g.setOutputs({"nothing"});
  EXPECT_NE(s.message().find("'nothing' is not a tensor"), std::string::npos) << s.message();
  s = g.addNode({"n", "", {"x"}, "y", {}, {}});
  EXPECT_NE(s.message().find("names no op"), std::string::npos) << s.message();
}

TEST(PublicGraph, CopiesAreIndependentAndJsonRoundTrips) {
  Graph g = mlp();
  Graph copy = g;
  EXPECT_TRUE(copy.addWeight("extra", {2}).ok());
  EXPECT_TRUE(g.addWeight("extra", {2}).ok()); // the original did not get it
  auto back = Graph::fromJson(mlp().toJson());
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->toJson(), mlp().toJson());
  auto bad = Graph::fromJson("{\"tensors\": 3}");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(bad.error().empty());
}

TEST(PublicPlan, CutsTilesAndMemoryAgree) {
  for (unsigned k : {1u, 2u, 4u, 6u}) {
    PlanOptions o;
    o.workers = k;
    o.objective = "bytes"; // every op split: some bytes move at k > 1
    auto plan = planner().plan(mlp(), o);
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->workers, k);
    unsigned product = 1;
    for (const StepPlan &s : plan->steps)
      product *= s.parts;
    EXPECT_EQ(product, k);
    EXPECT_NE(plan->lossNote.find("softmax cross-entropy"), std::string::npos);
    ASSERT_NE(plan->tensor("labels"), nullptr); // the loss's new input
    EXPECT_EQ(plan->tensor("labels")->dtype, "int64");
    ASSERT_EQ(plan->workerMemory.size(), k);
    for (const char *name : {"w1", "w2", "x"}) {
      const TensorPlan *t = plan->tensor(name);
      ASSERT_NE(t, nullptr) << name;
      ASSERT_EQ(t->cut.size(), plan->steps.size());
      ASSERT_EQ(t->tiles.size(), k);
      // Replicated at a step: each of that step's groups holds the whole.
      int64_t replicas = 1, whole = 1;
      for (size_t i = 0; i < t->cut.size(); ++i)
        if (t->cut[i] < 0)
          replicas *= plan->steps[i].parts;
      for (int64_t e : t->shape)
        whole *= e;
      int64_t covered = 0;
      for (const Box &b : t->tiles)
        covered += volume(b);
      EXPECT_EQ(covered, whole * replicas) << name << " at k = " << k;
    }
    // Weights live through the whole step: each worker's arena holds its tiles of them.
    for (unsigned w = 0; w < k; ++w) {
      int64_t weightBytes = 0;
      for (const TensorPlan &t : plan->tensors)
        if (t.role == "weight")
          weightBytes += volume(t.tiles[w]) * 4;
      EXPECT_GT(weightBytes, 0);
      EXPECT_GE(plan->workerMemory[w].peakBytes, weightBytes) << "worker " << w << " at k = " << k;
      EXPECT_GE(plan->workerMemory[w].tileBytes, weightBytes);
    }
    EXPECT_EQ(plan->communicationBytes == 0, k == 1);
    auto j = nlohmann::json::parse(plan->json);
    EXPECT_EQ(j["workers"], k);
    EXPECT_EQ(j["worker_details"].size(), k);
    EXPECT_EQ(j["communication_bytes"], plan->communicationBytes);
    EXPECT_EQ(j["tensors"].size(), plan->tensors.size());
    EXPECT_EQ(j["ops"].size(), plan->nodes.size());
  }
}

TEST(PublicPlan, OptionsChangeThePlan) {
  PlanOptions o;
  o.workers = 4;
  o.train = false;
  o.perWorker = false;
  auto forward = planner().plan(mlp(), o);
  ASSERT_TRUE(forward.ok()) << forward.error();
  for (const TensorPlan &t : forward->tensors)
    EXPECT_NE(t.role, "gradient") << t.name;
  EXPECT_TRUE(forward->workerMemory.empty());
  EXPECT_TRUE(forward->tensor("w1")->tiles.empty());
  EXPECT_EQ(nlohmann::json::parse(forward->json).count("worker_details"), 0u);
  o.train = true;
  o.algorithm = "data-parallel";
  auto dp = planner().plan(mlp(), o);
  ASSERT_TRUE(dp.ok()) << dp.error();
  EXPECT_EQ(dp->algorithm, "data-parallel");
  EXPECT_EQ(dp->objective, "bytes"); // its rules: the time objective is tofu's
  for (int d : dp->tensor("w1")->cut)
    EXPECT_EQ(d, -1); // weights replicated
  o.algorithm = "tofu";
  auto states = [&](Optimizer opt) {
    o.optimizer = opt;
    auto plan = planner().plan(mlp(), o);
    EXPECT_TRUE(plan.ok()) << plan.error();
    unsigned n = 0;
    for (const TensorPlan &t : plan->tensors)
      n += t.role == "optimizer_state";
    return n;
  };
  // The updated weights are step state under both; Adam adds m and v of both weights.
  EXPECT_GE(states(Optimizer::Adam), states(Optimizer::SGD) + 4);
  // The search's threads do not change the plan.
  auto cuts = [&](unsigned threads) {
    o.searchThreads = threads;
    auto plan = planner().plan(mlp(), o);
    EXPECT_TRUE(plan.ok()) << plan.error();
    std::vector<std::vector<int>> out;
    for (const TensorPlan &t : plan->tensors)
      out.push_back(t.cut);
    return std::make_pair(out, plan->communicationBytes);
  };
  EXPECT_EQ(cuts(1), cuts(3));
}

TEST(PublicPlan, Bf16HalvesActivationsAndTraffic) {
  PlanOptions o;
  o.workers = 2;
  o.objective = "bytes"; // the same plan's traffic in both
  auto plan = [&](Precision p) {
    o.precision = p;
    auto r = planner().plan(mlp(2048), o); // activations outweigh the weights
    EXPECT_TRUE(r.ok()) << r.error();
    return std::move(*r);
  };
  const Plan fp32 = plan(Precision::FP32), bf16 = plan(Precision::BF16);
  EXPECT_EQ(fp32.tensor("h")->dtype, "float32");
  EXPECT_EQ(bf16.tensor("h")->dtype, "bfloat16");
  EXPECT_EQ(bf16.tensor("h")->bytes * 2, fp32.tensor("h")->bytes);
  EXPECT_EQ(bf16.tensor("w1")->dtype, "float32"); // master weights stay float32
  EXPECT_NE(bf16.tensor("w1_bf16"), nullptr);     // cast once per step
  EXPECT_LT(bf16.communicationBytes, fp32.communicationBytes);
  EXPECT_LT(bf16.workerMemory[0].peakBytes, fp32.workerMemory[0].peakBytes);
}

// The estimated step time: on the default H100 it is the JSON's, with and without the
// per-worker plans; an A100 is slower (on the same plan: the bytes objective's); "" asks for
// none; an unknown device is an argument error.
TEST(PublicPlan, EstimatesTheStepTime) {
  PlanOptions o;
  o.workers = 2;
  o.objective = "bytes";
  auto r = planner().plan(mlp(2048), o);
  ASSERT_TRUE(r.ok()) << r.error();
  const StepTime &h = r->stepTime;
  EXPECT_EQ(h.device, "H100 SXM");
  EXPECT_GT(h.forward, 0);
  EXPECT_GT(h.backward, 0);
  EXPECT_GT(h.update, 0);
  EXPECT_GT(h.communication, 0);
  EXPECT_DOUBLE_EQ(h.seconds, h.forward + h.backward + h.update + h.communication);
  EXPECT_LE(h.overlappedSeconds, h.seconds);
  auto j = nlohmann::json::parse(r->json);
  EXPECT_DOUBLE_EQ(j["step_time"]["seconds"].get<double>(), h.seconds);
  o.perWorker = false;
  auto lean = planner().plan(mlp(2048), o);
  ASSERT_TRUE(lean.ok()) << lean.error();
  EXPECT_DOUBLE_EQ(lean->stepTime.seconds, h.seconds);
  o.device = "a100";
  auto a = planner().plan(mlp(2048), o);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_GT(a->stepTime.seconds, h.seconds);
  o.device = "";
  auto none = planner().plan(mlp(2048), o);
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->stepTime.seconds, 0);
  EXPECT_EQ(nlohmann::json::parse(none->json).count("step_time"), 0u);
  o.device = "tpu";
  auto bad = planner().plan(mlp(2048), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::Argument);
  EXPECT_NE(bad.error().find("'tpu' is neither a device"), std::string::npos) << bad.error();
}

// The time objective (the default) searches by the step estimated on the device: no longer
// a step than the bytes objective's plan, and the plan says which objective made it. Without
// a device there is nothing to estimate: bytes.
TEST(PublicPlan, TheTimeObjectiveSearchesByTheEstimatedStep) {
  PlanOptions o;
  o.workers = 4;
  auto timed = planner().plan(mlp(64), o);
  ASSERT_TRUE(timed.ok()) << timed.error();
  EXPECT_EQ(timed->objective, "time");
  EXPECT_EQ(nlohmann::json::parse(timed->json)["objective"], "time");
  o.objective = "bytes";
  auto bytes = planner().plan(mlp(64), o);
  ASSERT_TRUE(bytes.ok()) << bytes.error();
  EXPECT_EQ(bytes->objective, "bytes");
  EXPECT_GT(timed->stepTime.seconds, 0);
  EXPECT_LE(timed->stepTime.seconds, bytes->stepTime.seconds);
  o.objective = "time";
  o.device = "";
  auto blind = planner().plan(mlp(64), o);
  ASSERT_TRUE(blind.ok()) << blind.error();
  EXPECT_EQ(blind->objective, "bytes");
  EXPECT_EQ(blind->communicationBytes, bytes->communicationBytes);
}

TEST(PublicPlan, ErrorsHaveKinds) {
  PlanOptions o;
  o.workers = 0;
  auto r = planner().plan(mlp(), o);
  EXPECT_EQ(r.status().kind(), ErrorKind::Argument);
  o.workers = 2;
  o.algorithm = "fastest";
  r = planner().plan(mlp(), o);
  EXPECT_EQ(r.status().kind(), ErrorKind::Argument);
  EXPECT_NE(r.error().find("unknown algorithm 'fastest'"), std::string::npos) << r.error();
  o.algorithm = "tofu";
  o.objective = "speed";
  r = planner().plan(mlp(), o);
  EXPECT_EQ(r.status().kind(), ErrorKind::Argument);
  EXPECT_NE(r.error().find("unknown objective 'speed' (time or bytes)"), std::string::npos)
      << r.error();
  o.objective = "time";
  Graph g = mlp();
  EXPECT_TRUE(g.addNode({"oops", "NoSuchOp", {"logits"}, "y", {}, {}}).ok());
  EXPECT_TRUE(g.setOutputs({"y"}).ok());
  r = planner().plan(g, o);
  EXPECT_EQ(r.status().kind(), ErrorKind::Graph);
  EXPECT_NE(r.error().find("oops"), std::string::npos) << r.error();
  Graph two = mlp();
  EXPECT_TRUE(two.setOutputs({"logits", "h"}).ok());
  r = planner().plan(two, o); // trains on the first output, and says so
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_NE(r->lossNote.find("training on the first, 'logits'"), std::string::npos) << r->lossNote;
  auto lib = Planner::open("/no/such/dir");
  EXPECT_EQ(lib.status().kind(), ErrorKind::Library);
  EXPECT_NE(lib.error().find("/no/such/dir"), std::string::npos) << lib.error();
  auto junk = planner().planOnnx("not protobuf", {}, o, "junk.onnx");
  EXPECT_EQ(junk.status().kind(), ErrorKind::Graph);
  EXPECT_NE(junk.error().find("'junk.onnx' is not an ONNX model"), std::string::npos)
      << junk.error();
}

TEST(PublicPlan, PlansOnnxBytes) {
  std::ifstream f("tests/onnx/mlp.onnx", std::ios::binary);
  ASSERT_TRUE(f.good());
  std::stringstream bytes;
  bytes << f.rdbuf();
  PlanOptions o;
  o.workers = 4;
  o.objective = "bytes"; // every op split: some bytes move
  OnnxOptions onnx;
  onnx.batch = 16;
  auto plan = planner().planOnnx(bytes.str(), onnx, o, "mlp.onnx");
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->graph, "mlp.onnx");
  unsigned weights = 0;
  for (const TensorPlan &t : plan->tensors)
    weights += t.role == "weight";
  EXPECT_GT(weights, 0u);
  EXPECT_GT(plan->communicationBytes, 0);
}

// A memory budget (PlanOptions::memoryPerWorker) with recomputation, as tofu-plan
// --memory-per-worker: a budget below the plain plan's peak fits by recomputing, every
// worker's planned peak within it; one far below fails as a Plan error saying how close the
// closest plan came; recompute "none" only searches; an unknown mode is an argument error.
TEST(PublicPlan, AMemoryBudgetRecomputesToFit) {
  // Three products with element-wise chains between them (cheap to recompute), 2048 rows:
  // the activations the backward pass reads dominate the peak.
  Graph g;
  EXPECT_TRUE(g.addInput("x", {2048, 64}).ok());
  EXPECT_TRUE(g.addWeight("w1", {64, 256}).ok());
  EXPECT_TRUE(g.addWeight("w2", {256, 256}).ok());
  EXPECT_TRUE(g.addWeight("w3", {256, 8}).ok());
  EXPECT_TRUE(g.addNode({"fc1", "MatMul", {"x", "w1"}, "h1", {}, {{"b", 0}}}).ok());
  EXPECT_TRUE(g.addNode({"relu1", "Relu", {"h1"}, "a1", {}, {{"i", 2}}}).ok());
  EXPECT_TRUE(g.addNode({"tanh1", "Tanh", {"a1"}, "t1", {}, {{"i", 2}}}).ok());
  EXPECT_TRUE(g.addNode({"fc2", "MatMul", {"t1", "w2"}, "h2", {}, {{"b", 0}}}).ok());
  EXPECT_TRUE(g.addNode({"relu2", "Relu", {"h2"}, "a2", {}, {{"i", 2}}}).ok());
  EXPECT_TRUE(g.addNode({"tanh2", "Tanh", {"a2"}, "t2", {}, {{"i", 2}}}).ok());
  EXPECT_TRUE(g.addNode({"fc3", "MatMul", {"t2", "w3"}, "logits", {}, {{"b", 0}}}).ok());
  EXPECT_TRUE(g.setOutputs({"logits"}).ok());
  PlanOptions o;
  o.workers = 2;
  o.optimizer = Optimizer::SGD;
  o.objective = "bytes"; // (by time, the budget first gives up the plain plan's replicas)
  auto plain = planner().plan(g, o);
  ASSERT_TRUE(plain.ok()) << plain.error();
  ASSERT_GT(plain->plannedPeakBytes, 0);
  EXPECT_TRUE(plain->recomputed.empty());
  o.memoryPerWorker = plain->plannedPeakBytes * 9 / 10;
  auto fit = planner().plan(g, o);
  ASSERT_TRUE(fit.ok()) << fit.error();
  EXPECT_FALSE(fit->recomputed.empty());
  EXPECT_LE(fit->plannedPeakBytes, o.memoryPerWorker);
  for (const WorkerMemory &w : fit->workerMemory)
    EXPECT_LE(w.peakBytes, o.memoryPerWorker);
  auto j = nlohmann::json::parse(fit->json);
  EXPECT_EQ(j["recomputed"].size(), fit->recomputed.size());
  EXPECT_EQ(j["memory"]["budget_bytes"], o.memoryPerWorker);
  EXPECT_EQ(j["memory"]["planned_peak_bytes"], fit->plannedPeakBytes);
  // Without recomputation the same budget is searched for, and found or refused.
  o.recompute = "none";
  auto none = planner().plan(g, o);
  if (none.ok()) {
    EXPECT_TRUE(none->recomputed.empty());
    EXPECT_LE(none->plannedPeakBytes, o.memoryPerWorker);
  } else {
    EXPECT_EQ(none.status().kind(), ErrorKind::Plan);
  }
  o.recompute = "auto";
  o.memoryPerWorker = 1000;
  auto tiny = planner().plan(g, o);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().kind(), ErrorKind::Plan);
  EXPECT_NE(tiny.error().find("no plan found for 2 workers fits in 1000.00 B per worker, even "
                              "recomputing every forward tensor the backward pass reads"),
            std::string::npos)
      << tiny.error();
  o.recompute = "sometimes";
  auto bad = planner().plan(g, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::Argument);
  // Segment checkpointing needs no budget.
  o.memoryPerWorker = 0;
  o.recompute = "sqrt";
  auto sqrt = planner().plan(g, o);
  ASSERT_TRUE(sqrt.ok()) << sqrt.error();
  EXPECT_FALSE(sqrt->recomputed.empty());
}

TEST(CApi, PlansAndReportsErrors) {
  EXPECT_EQ(std::string(tofu_version()), version());
  tofu_planner *planner = nullptr;
  EXPECT_EQ(tofu_planner_open("/no/such/dir", &planner), TOFU_ERROR_LIBRARY);
  EXPECT_EQ(planner, nullptr);
  EXPECT_NE(std::string(tofu_last_error()).find("/no/such/dir"), std::string::npos);
  ASSERT_EQ(tofu_planner_open(nullptr, &planner), TOFU_OK) << tofu_last_error();
  tofu_graph *g = tofu_graph_new();
  const int64_t xs[] = {32, 64}, ws[] = {64, 8};
  ASSERT_EQ(tofu_graph_add_input(g, "x", xs, 2, nullptr), TOFU_OK);
  ASSERT_EQ(tofu_graph_add_weight(g, "w", ws, 2, "float32"), TOFU_OK);
  EXPECT_EQ(tofu_graph_add_weight(g, "v", nullptr, 2, "float32"), TOFU_ERROR_ARGUMENT);
  EXPECT_EQ(tofu_graph_add_weight(g, "v", ws, 2, "complex"), TOFU_ERROR_GRAPH);
  const char *in[] = {"x", "w"}, *groupNames[] = {"b"}, *out[] = {"y"};
  const int64_t groupValues[] = {0};
  EXPECT_EQ(tofu_graph_add_node(g, "fc", "MatMul", in, 2, "y", nullptr, nullptr, 1, groupNames,
                                groupValues, 1),
            TOFU_ERROR_ARGUMENT); // attribute count without arrays
  ASSERT_EQ(tofu_graph_add_node(g, "fc", "MatMul", in, 2, "y", nullptr, nullptr, 0, groupNames,
                                groupValues, 1),
            TOFU_OK)
      << tofu_last_error();
  ASSERT_EQ(tofu_graph_set_outputs(g, out, 1), TOFU_OK);
  tofu_plan_options o;
  tofu_plan_options_init(&o);
  EXPECT_EQ(tofu_plan_options_size(), sizeof(tofu_plan_options));
  EXPECT_EQ(o.workers, 8u);
  o.workers = 4;
  tofu_plan *plan = nullptr;
  ASSERT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_OK) << tofu_last_error();
  EXPECT_EQ(tofu_plan_workers(plan), 4u);
  auto j = nlohmann::json::parse(tofu_plan_json(plan));
  EXPECT_EQ(j["communication_bytes"], tofu_plan_communication_bytes(plan));
  EXPECT_EQ(j["worker_details"].size(), 4u);
  EXPECT_EQ(j["objective"], "time"); // the default (NULL)
  EXPECT_NE(std::string(j["loss_note"]).find("softmax cross-entropy"), std::string::npos);
  EXPECT_GT(tofu_plan_step_seconds(plan), 0);
  EXPECT_DOUBLE_EQ(j["step_time"]["seconds"].get<double>(), tofu_plan_step_seconds(plan));
  tofu_plan_free(plan);
  o.device = "";
  ASSERT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_OK) << tofu_last_error();
  EXPECT_EQ(tofu_plan_step_seconds(plan), 0);
  tofu_plan_free(plan);
  o.device = "no-such-device";
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_ARGUMENT);
  o.device = nullptr; // the default, h100
  // Precision: the default is float32; bf16 moves fewer bytes (the same plan: the bytes
  // objective's); an unknown one is refused.
  EXPECT_EQ(o.precision, TOFU_FP32);
  o.objective = "bytes";
  ASSERT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_OK) << tofu_last_error();
  const int64_t fp32Bytes = tofu_plan_communication_bytes(plan);
  EXPECT_EQ(nlohmann::json::parse(tofu_plan_json(plan))["objective"], "bytes");
  tofu_plan_free(plan);
  o.precision = TOFU_BF16;
  ASSERT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_OK) << tofu_last_error();
  EXPECT_LT(tofu_plan_communication_bytes(plan), fp32Bytes);
  EXPECT_NE(std::string(tofu_plan_json(plan)).find("bfloat16"), std::string::npos);
  tofu_plan_free(plan);
  o.precision = 7;
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_ARGUMENT);
  o.precision = TOFU_FP32;
  // A memory budget: none by default; one no plan fits is a plan error; a negative one an
  // argument error.
  EXPECT_EQ(o.memory_per_worker, 0);
  o.memory_per_worker = 100;
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_PLAN);
  EXPECT_NE(std::string(tofu_last_error()).find("fits in 100.00 B per worker"), std::string::npos)
      << tofu_last_error();
  o.memory_per_worker = -1;
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_ARGUMENT);
  o.memory_per_worker = 0;
  o.recompute = "never";
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_ARGUMENT);
  o.recompute = nullptr;
  o.algorithm = "nope";
  EXPECT_EQ(tofu_plan_graph(planner, g, &o, &plan), TOFU_ERROR_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(tofu_plan_graph(planner, nullptr, &o, &plan), TOFU_ERROR_ARGUMENT);
  EXPECT_EQ(tofu_plan_onnx(planner, "xx", 2, "x.onnx", nullptr, &plan), TOFU_ERROR_GRAPH);
  EXPECT_STREQ(tofu_status_name(TOFU_ERROR_PLAN), "plan");
  tofu_graph *parsed = nullptr;
  EXPECT_EQ(tofu_graph_from_json("[", &parsed), TOFU_ERROR_GRAPH);
  tofu_graph_free(g);
  tofu_planner_free(planner);
  tofu_plan_free(nullptr); // freeing nothing is harmless
}

} // namespace
