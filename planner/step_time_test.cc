// The step-time estimate: device models read and written, each op's FLOPs and bytes counted
// as the model says (checked by hand on an MLP), the rates applied by kind and element type,
// shared devices, communication from the plan's traffic, and the phases.
#include "planner/step_time.h"

#include <cstdio>
#include <fstream>

#include "codegen/fusion.h"
#include "codegen/memory_plan.h"
#include "codegen/program_builder.h"
#include "fmt/format.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/pipeline.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// Round figures, so that the expected times are easy to state.
DeviceModel testDevice() {
  DeviceModel d;
  d.name = "test";
  d.source = "made up";
  d.productFlops = 1e9;
  d.productFlopsBf16 = 4e9;
  d.kernelFlops = 1e8;
  d.bandwidth = 1e9;
  d.launch = 1e-6;
  d.linkBandwidth = 1e8;
  d.linkLatency = 1e-5;
  d.hostBandwidth = 2e9;
  d.hostLatency = 4e-6;
  return d;
}

TEST(StepTime, DeviceModelsRoundTripAndBadOnesAreRefused) {
  const DeviceModel d = testDevice();
  auto back = parseDeviceModel(deviceModelJson(d), "here");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->name, "test");
  EXPECT_EQ(back->productFlopsBf16, 4e9);
  EXPECT_EQ(back->linkLatency, 1e-5);
  EXPECT_EQ(back->hostBandwidth, 2e9);
  EXPECT_EQ(back->hostLatency, 4e-6);
  EXPECT_FALSE(back->shared);
  // A model calibrated before the host link parses without it: none.
  std::string old = deviceModelJson(d);
  old.erase(old.find(" \"host_bandwidth\""),
            old.find(" \"sync_seconds\"") - old.find(" \"host_bandwidth\""));
  auto before = parseDeviceModel(old, "old.json");
  ASSERT_TRUE(bool(before)) << llvm::toString(before.takeError()) << old;
  EXPECT_EQ(before->hostBandwidth, 0);
  std::string json = deviceModelJson(d);
  json.replace(json.find("\"bandwidth\": 1000000000.0"), 25, "\"bandwidth\": -3");
  auto bad = parseDeviceModel(json, "m.json");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "m.json: \"bandwidth\" is -3; it must be positive");
  auto notJson = parseDeviceModel("{", "m.json");
  ASSERT_FALSE(bool(notJson));
  EXPECT_EQ(llvm::toString(notJson.takeError())
                .rfind("m.json: not valid JSON: parse error at "
                       "line 1, column 2",
                       0),
            0u);
  // Each cause named as what it is: an array, a number past a double, a misspelled key.
  EXPECT_EQ(llvm::toString(parseDeviceModel("[1]", "m.json").takeError()),
            "m.json: a device model is a JSON object, not array");
  EXPECT_EQ(llvm::toString(parseDeviceModel("{\"name\": 1e999}", "m.json").takeError())
                .rfind("m.json: a number is too large for a double", 0),
            0u);
  std::string misspelt = deviceModelJson(d);
  misspelt.replace(misspelt.find("\"bandwidth\""), 11, "\"bandwith\"");
  EXPECT_EQ(llvm::toString(parseDeviceModel(misspelt, "m.json").takeError())
                .rfind("m.json: the top level: unknown key 'bandwith' (did you mean "
                       "'bandwidth'? one of: name, source, ",
                       0),
            0u);

  auto h = deviceModelNamed("h100");
  ASSERT_TRUE(bool(h));
  EXPECT_EQ(h->productFlopsBf16, 989e12);
  auto missing = deviceModelNamed("/nonexistent/model.json");
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("neither a device"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/model.json";
  {
    std::ofstream f(path);
    f << deviceModelJson(d);
  }
  auto file = deviceModelNamed(path);
  ASSERT_TRUE(bool(file)) << llvm::toString(file.takeError());
  EXPECT_EQ(file->kernelFlops, 1e8);
}

PipelineResult planned(llvm::Expected<Graph> g, unsigned workers, Precision precision) {
  EXPECT_TRUE(bool(g));
  PipelineOptions o;
  o.train = Optimizer::SGD;
  o.precision = precision;
  o.until = Stage::Execution;
  o.search.workers = workers;
  auto r = runPipeline(std::move(*g), "mlp", testLibrary(), o);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return std::move(*r);
}

// One worker: every op's FLOPs and bytes as counted by hand for the MLP's first product,
// times from the model's formula, phases summing to the step.
TEST(StepTime, OneWorkerCountsEachOpAndSumsThePhases) {
  PipelineResult r = planned(buildMlp({64, 32, 10}, 8), 1, Precision::FP32);
  auto e = estimateStepTime(*r.problem, r.exec, r.graph.outputs, testDevice());
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  ASSERT_EQ(e->perWorker.size(), 1u);
  const WorkerTime &w = e->perWorker[0];
  EXPECT_EQ(w.communication, 0);
  EXPECT_EQ(w.bytesReceived, 0);
  EXPECT_GT(w.phase[0], 0);
  EXPECT_GT(w.phase[1], 0);
  EXPECT_GT(w.phase[2], 0);
  EXPECT_DOUBLE_EQ(e->seconds, w.compute());
  bool sawFc1 = false;
  double sum = 0;
  for (const OpTimeEstimate &o : e->ops) {
    sum += o.seconds;
    EXPECT_GE(o.seconds, 1e-6);
    if (e->nodeNames[o.node] != "fc1")
      continue;
    sawFc1 = true;
    // x[8,64] @ w[64,32]: the scheduled loops run the sum's body 8·64·32 times and the
    // output's expression 8·32 times, two FLOPs each; reads 8·64 + 64·32 floats, writes 8·32.
    EXPECT_TRUE(o.product);
    EXPECT_FALSE(o.bf16);
    EXPECT_EQ(o.phase, StepPhase::Forward);
    EXPECT_DOUBLE_EQ(o.flops, 2.0 * (8 * 64 * 32 + 8 * 32));
    EXPECT_DOUBLE_EQ(o.bytes, 4.0 * (8 * 64 + 64 * 32 + 8 * 32));
    EXPECT_DOUBLE_EQ(o.seconds, 1e-6 + std::max(o.flops / 1e9, o.bytes / 1e9));
  }
  EXPECT_TRUE(sawFc1);
  EXPECT_NEAR(sum, e->seconds, 1e-12);
  for (const OpTimeEstimate &o : e->ops) // every op by the one formula
    EXPECT_DOUBLE_EQ(o.seconds, opSeconds(testDevice(), o)) << e->nodeNames[o.node];
  const std::string text = formatStepTime(*e, 100);
  EXPECT_NE(text.find("estimated step time on test"), std::string::npos) << text;
  EXPECT_NE(text.find("| fc1 |"), std::string::npos) << text;
}

// Two workers: communication is the plan's received bytes over the link plus a latency per
// message; the slowest worker sets the step. On a shared device each worker computes at half
// the rates.
TEST(StepTime, TwoWorkersPayTheirTrafficAndShareADevice) {
  PipelineResult r = planned(buildMlp({64, 256, 10}, 32), 2, Precision::FP32);
  DeviceModel d = testDevice();
  auto e = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  ASSERT_EQ(e->perWorker.size(), 2u);
  int64_t bytes = 0;
  for (const WorkerTime &w : e->perWorker) {
    EXPECT_NEAR(w.communication, double(w.bytesReceived) / 1e8 + double(w.messages) * 1e-5, 1e-12);
    EXPECT_LE(w.total(), e->seconds + 1e-15);
    bytes += w.bytesReceived;
  }
  EXPECT_EQ(bytes, r.exec.bytesMoved(*r.problem));
  EXPECT_GT(bytes, 0);
  const WorkerTime &s = e->perWorker[e->slowest];
  EXPECT_DOUBLE_EQ(e->overlappedSeconds, std::max(s.compute(), s.communication));

  d.launch = 0; // so that compute scales exactly
  auto own = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  d.shared = true;
  auto shared = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  ASSERT_TRUE(own && shared);
  for (unsigned w = 0; w < 2; ++w)
    EXPECT_NEAR(shared->perWorker[w].compute(), 2 * own->perWorker[w].compute(), 1e-12);

  // A machine given as levels replaces the device's link.
  auto t = parseTopology("2:1GB/s");
  ASSERT_TRUE(bool(t));
  auto machine = estimateStepTime(*r.problem, r.exec, r.graph.outputs, testDevice(), *t);
  ASSERT_TRUE(bool(machine)) << llvm::toString(machine.takeError());
  for (const WorkerTime &w : machine->perWorker)
    EXPECT_NEAR(w.communication, double(w.bytesReceived) / 1e9, 1e-12);
  auto wrong = parseTopology("4:1GB/s");
  ASSERT_TRUE(bool(wrong));
  auto refused = estimateStepTime(*r.problem, r.exec, r.graph.outputs, testDevice(), *wrong);
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()), "the machine has 4 workers, the plan 2");
}

// Each barrier the workers' programs hold costs the device's sync latency: as many as the
// program builder places (codegen/program_builder.cc), none at one worker; barriers do not
// hide behind compute.
TEST(StepTime, SynchronisationsAreTheProgramsBarriers) {
  PipelineResult r = planned(buildMlp({64, 256, 10}, 32), 2, Precision::FP32);
  DeviceModel d = testDevice();
  auto without = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  d.syncLatency = 1e-3;
  auto with = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  ASSERT_TRUE(without && with);
  // The program the engines run: the fused plan's.
  const FusedPlan fused = fuseElementwise(*r.problem, r.exec, r.graph.outputs);
  auto program = buildProgram(fused.problem, fused.plan,
                              planMemory(fused.problem, fused.plan, r.graph.outputs));
  ASSERT_TRUE(bool(program)) << llvm::toString(program.takeError());
  int64_t barriers = 0;
  for (const ProgramStep &st : program->worker[0].steps)
    barriers += st.syncAfterLaunch + st.syncAfterAssembly;
  ASSERT_GT(barriers, 0);
  for (unsigned w = 0; w < 2; ++w) {
    EXPECT_EQ(with->perWorker[w].syncs, barriers);
    EXPECT_NEAR(with->perWorker[w].communication,
                without->perWorker[w].communication + double(barriers) * 1e-3, 1e-12);
  }
  const WorkerTime &s = with->perWorker[with->slowest];
  EXPECT_NEAR(with->overlappedSeconds,
              std::max(s.compute(), s.communication - double(barriers) * 1e-3) +
                  double(barriers) * 1e-3,
              1e-12);
  EXPECT_NE(formatStepTime(*with).find(fmt::format("{} synchronisations at 1000.0 us", barriers)),
            std::string::npos);
  PipelineResult one = planned(buildMlp({64, 256, 10}, 32), 1, Precision::FP32);
  auto alone = estimateStepTime(*one.problem, one.exec, one.graph.outputs, d);
  ASSERT_TRUE(bool(alone));
  EXPECT_EQ(alone->perWorker[0].syncs, 0);
  EXPECT_EQ(alone->perWorker[0].communication, 0);
}

// Measured op times (tofu-run --profile-into) replace the rates for the instances they
// stand for, and only those; they survive the model's JSON, and bad entries are refused by
// index and field.
TEST(StepTime, MeasuredOpsReplaceTheRatesForTheirInstances) {
  PipelineResult r = planned(buildMlp({64, 256, 10}, 32), 2, Precision::FP32);
  DeviceModel d = testDevice();
  d.shared = true;
  auto plain = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  ASSERT_TRUE(bool(plain));
  ASSERT_FALSE(plain->workerOps.empty());
  // fc1's instance on worker 0, measured at 1 s.
  const OpTimeEstimate *fc1 = nullptr;
  for (const OpTimeEstimate &o : plain->workerOps[0])
    if (plain->nodeNames[o.node] == "fc1")
      fc1 = &o;
  ASSERT_NE(fc1, nullptr);
  MeasuredOp m = measuredOpOf(plain->nodeOps[fc1->node], *fc1, 2, true);
  m.seconds = 1;
  m.samples = 3;
  d.measured.push_back(m);
  auto back = parseDeviceModel(deviceModelJson(d), "m.json");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  ASSERT_EQ(back->measured.size(), 1u);
  EXPECT_EQ(measuredKey(back->measured[0]), measuredKey(m));
  EXPECT_EQ(back->measured[0].samples, 3u);
  auto e = estimateStepTime(*r.problem, r.exec, r.graph.outputs, *back);
  ASSERT_TRUE(bool(e));
  unsigned measured = 0;
  for (unsigned w = 0; w < 2; ++w)
    for (size_t i = 0; i < e->workerOps[w].size(); ++i) {
      const OpTimeEstimate &o = e->workerOps[w][i];
      const bool isMeasured =
          measuredKey(measuredOpOf(e->nodeOps[o.node], o, 2, true)) == measuredKey(m);
      EXPECT_EQ(o.measured, isMeasured) << e->nodeNames[o.node];
      EXPECT_DOUBLE_EQ(o.seconds, isMeasured ? 1.0 : plain->workerOps[w][i].seconds);
      measured += isMeasured;
    }
  EXPECT_GE(measured, 1u);
  // At another worker count the same op is another measurement: not used.
  PipelineResult four = planned(buildMlp({64, 256, 10}, 32), 4, Precision::FP32);
  auto other = estimateStepTime(*four.problem, four.exec, four.graph.outputs, *back);
  ASSERT_TRUE(bool(other));
  EXPECT_EQ(other->measuredOps, 0u);
  // The plan's JSON counts them without listing them.
  EXPECT_NE(stepTimeJson(*e).find("\"measured_ops\": 1"), std::string::npos);

  std::string json = deviceModelJson(*back);
  const std::string product = "\"kind\": \"product\"";
  json.replace(json.find(product), product.size(), "\"kind\": \"magic\"");
  auto bad = parseDeviceModel(json, "m.json");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "m.json: measured_ops[0].kind: 'magic' is no kind of op this model times (product, "
            "convolution, scatter or generated)");
  // A wrong type, a negative time and a count past its type are each reported as that
  // (a count was once converted and matched nothing).
  const std::string one = "\"seconds\": 1.0";
  for (const auto &[from, to, why] :
       {std::tuple{one, std::string("\"seconds\": \"1\""),
                   std::string("measured_ops[0].seconds: must be a number, not \"1\"")},
        std::tuple{one, std::string("\"seconds\": -1"),
                   std::string("measured_ops[0].seconds: -1 is out of range")},
        std::tuple{"\"passes\": " + std::to_string(back->measured[0].passes),
                   std::string("\"passes\": 4294967296"),
                   std::string("measured_ops[0].passes: 4294967296 is out of range (0 to "
                               "4294967295)")},
        std::tuple{std::string("\"bf16\": false"), std::string("\"bf61\": false"),
                   std::string("measured_ops[0]: unknown key 'bf61' (did you mean 'bf16'?")}}) {
    json = deviceModelJson(*back);
    ASSERT_NE(json.find(from), std::string::npos) << from;
    json.replace(json.find(from), from.size(), to);
    auto refused = parseDeviceModel(json, "m.json");
    ASSERT_FALSE(bool(refused)) << to;
    EXPECT_EQ(llvm::toString(refused.takeError()).rfind("m.json: " + why, 0), 0u) << to;
  }
}

// Under bf16 the products read bfloat16 operands and run at the bfloat16 rate, over half the
// operand bytes.
TEST(StepTime, Bf16ProductsUseTheirRate) {
  PipelineResult r = planned(buildMlp({64, 32, 10}, 8), 1, Precision::BF16);
  auto e = estimateStepTime(*r.problem, r.exec, r.graph.outputs, testDevice());
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  bool sawFc1 = false;
  for (const OpTimeEstimate &o : e->ops) {
    if (e->nodeNames[o.node] != "fc1")
      continue;
    sawFc1 = true;
    EXPECT_TRUE(o.product);
    EXPECT_TRUE(o.bf16);
    EXPECT_DOUBLE_EQ(o.flops, 2.0 * (8 * 64 * 32 + 8 * 32));
    // Two bfloat16 operands; the float32 accumulator's result kept float32 until its bias
    // is added (the add rounds product and bias once, as autocast's linear does).
    EXPECT_DOUBLE_EQ(o.bytes, 2.0 * (8 * 64 + 64 * 32) + 4.0 * (8 * 32));
    EXPECT_DOUBLE_EQ(o.seconds, 1e-6 + std::max(o.flops / 4e9, o.bytes / 1e9));
  }
  EXPECT_TRUE(sawFc1);
}

// Convolutions are library products of their own kind, at the device's convolution rate and
// cost per call; generated kernels count a transcendental function as 10 FLOPs.
TEST(StepTime, ConvolutionsAndGeneratedKernelsHaveTheirRates) {
  PipelineResult r = planned(buildWResNet(50, 1, 2, 32, 4, 10), 1, Precision::FP32);
  DeviceModel d = testDevice();
  d.convFlops = 5e8;
  d.convLaunch = 3e-6;
  auto e = estimateStepTime(*r.problem, r.exec, r.graph.outputs, d);
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  bool sawConv = false;
  for (const OpTimeEstimate &o : e->ops) {
    if (e->nodeOps[o.node] != "Conv2d")
      continue;
    sawConv = true;
    EXPECT_TRUE(o.product && o.conv) << e->nodeNames[o.node];
    EXPECT_DOUBLE_EQ(opRate(d, o), 5e8);
    EXPECT_DOUBLE_EQ(o.seconds, 3e-6 + std::max(o.flops / 5e8, o.bytes / 1e9));
  }
  EXPECT_TRUE(sawConv);

  PipelineResult g = planned(buildTransformer(1, 16, 2, 4, 2, 32), 1, Precision::FP32);
  auto t = estimateStepTime(*g.problem, g.exec, g.graph.outputs, testDevice());
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  // Relu is one operation per element (at least 2, a multiply-add); an exp in the softmax
  // makes it costlier per iteration than a plain map.
  double reluPerElement = 0, softmaxPerIteration = 0;
  unsigned multiPass = 0;
  for (const OpTimeEstimate &o : t->ops) {
    multiPass += o.passes > 1;
    const std::string &op = t->nodeOps[o.node];
    const double elements = o.bytes / 8; // a float read, a float written
    if (op == "Relu")
      reluPerElement = o.flops / elements;
    if (op == "Softmax" || op == "softmax_cross_entropy")
      softmaxPerIteration = std::max(softmaxPerIteration, o.flops);
  }
  EXPECT_DOUBLE_EQ(reluPerElement, 2);
  EXPECT_GT(softmaxPerIteration, 0);
  EXPECT_GT(multiPass, 0u); // a reduction whose schedule fills a temporary first
}

} // namespace
} // namespace tofu
