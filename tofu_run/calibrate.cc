// tofu-run --calibrate: measures this machine's device model (planner/step_time.h) on the
// CPU engine, and writes it where `tofu-plan --device cpu` and tofu-run's estimate read it.
//
// It trains three small models for a few steps with every node timed (EngineOptions::
// profile), and sets each rate from the ops that rate governs, counting each op's FLOPs and
// bytes as the estimate does:
//  - the cost of one op (`launch`): the median time of an op of a tiny MLP, where every op
//    is a few hundred bytes;
//  - products: the FLOPs of a wide MLP's products and those of a small GPT over their time;
//  - bandwidth: the bytes of the element-wise kernels (maps) of at least 1 MB over their time;
//  - generated kernels' FLOP/s: the rate that makes the estimates of the other generated
//    kernels (reductions: softmax, layer norm, bias gradients) sum to their measured time;
//  - the link between workers: the wide MLP at two workers, bytes received over the time
//    its workers spend fetching.
// Each node's time is its time over steps 2 to 6 (a run of 6 steps less a run of 1), so the
// first step's page faults and cold caches are not counted.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <thread>

#include "codegen/fusion.h"
#include "fmt/format.h"
#include "graph/zoo.h"
#include "planner/step_time.h"
#include "runtime/trainer.h"
#include "support/files.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"

namespace tofurun {
namespace {

struct OpSample {
  std::string model, node;
  bool product = false, map = false, scatter = false;
  double flops = 0, bytes = 0, seconds = 0;
};

struct ModelRun {
  std::vector<OpSample> ops; ///< worker 0's
  double copySeconds = 0;    ///< per step, summed over the workers
  int64_t bytesReceived = 0; ///< per step, summed over the workers
};

/// Per worker, per node: the profile of a run of `steps` steps.
llvm::Expected<std::vector<std::vector<tofu::NodeTime>>>
profiled(const tofu::Problem &p, const tofu::Graph &g, const std::string &loss,
         const tofu::EnginePlan &plan, unsigned workers, unsigned steps) {
  tofu::TrainerOptions o;
  o.name = "calibration";
  o.steps = steps;
  o.data = "fixed";
  o.engine = engineOptions();
  o.engine.profile = true;
  o.workers = static_cast<int>(workers);
  auto trainer = tofu::Trainer::create(
      p, g, loss, plan, o,
      [](const tofu::Problem &pp, const tofu::ExecPlan &e, const tofu::MemoryPlan &m,
         const tofu::EngineOptions &eo, bool local) { return makeEngine(pp, e, m, eo, local); },
      *group);
  if (!trainer)
    return trainer.takeError();
  tofu::TrainerObserver quiet;
  if (llvm::Error e = (*trainer)->train(quiet))
    return std::move(e);
  return (*trainer)->engine().profile();
}

llvm::Expected<ModelRun> runModel(const tofu::OpLibrary &lib, const std::string &name,
                                  llvm::Expected<tofu::Graph> graph, unsigned workers) {
  if (!graph)
    return graph.takeError();
  tofu::PipelineOptions po;
  po.train = tofu::Optimizer::SGD;
  po.until = tofu::Stage::Execution;
  po.search.workers = workers;
  auto r = tofu::runPipeline(std::move(*graph), name, lib, po);
  if (!r)
    return r.takeError();
  auto planned = tofu::planForEngine(*r->problem, r->exec, r->memory, r->graph.outputs, true);
  if (!planned)
    return planned.takeError();
  llvm::outs() << fmt::format("calibration: {} at {} worker{}\n", name, workers,
                              workers == 1 ? "" : "s");
  llvm::outs().flush();
  constexpr unsigned kSteps = 6;
  auto one = profiled(*r->problem, r->graph, r->loss, *planned, workers, 1);
  if (!one)
    return one.takeError();
  auto many = profiled(*r->problem, r->graph, r->loss, *planned, workers, kSteps);
  if (!many)
    return many.takeError();
  // The estimate's count of each op (any rates: only FLOPs, bytes and kinds are read).
  tofu::DeviceModel unit;
  unit.name = "unit";
  unit.productFlops = unit.kernelFlops = unit.bandwidth = unit.linkBandwidth = 1;
  auto e = tofu::estimateStepTime(*r->problem, r->exec, r->graph.outputs, unit);
  if (!e)
    return e.takeError();
  ModelRun out;
  std::map<std::string, double> measured;
  for (size_t i = 0; i < (*many)[0].size(); ++i) {
    const double s = ((*many)[0][i].computeSeconds - (*one)[0][i].computeSeconds) / (kSteps - 1);
    measured[(*many)[0][i].node] += std::max(0.0, s);
  }
  for (unsigned w = 0; w < workers; ++w)
    for (size_t i = 0; i < (*many)[w].size(); ++i)
      out.copySeconds +=
          std::max(0.0, ((*many)[w][i].copySeconds - (*one)[w][i].copySeconds) / (kSteps - 1));
  // The estimate's worker is the slowest; at one worker, and for a balanced plan at two,
  // worker 0's ops are the same kinds and sizes.
  const tofu::FusedPlan fused =
      tofu::fuseElementwise(*r->problem, r->exec, r->graph.outputs); // as the estimate folds
  for (const tofu::OpTimeEstimate &o : e->ops) {
    const std::string &node = e->nodeNames[o.node];
    auto it = measured.find(node);
    if (it == measured.end())
      continue;
    OpSample s;
    s.model = name;
    s.node = node;
    s.product = o.product;
    s.scatter = o.scatter;
    s.map = tofu::isMap(fused.problem.nodes[o.node].table->op);
    s.flops = o.flops;
    s.bytes = o.bytes;
    s.seconds = it->second;
    out.ops.push_back(s);
  }
  for (const tofu::WorkerTime &w : e->perWorker)
    out.bytesReceived += w.bytesReceived;
  return out;
}

} // namespace

int runCalibration(const tofu::OpLibrary &lib, const std::string &path) {
  auto tiny = runModel(lib, "mlp 8-8-8-4, batch 2", tofu::buildMlp({8, 8, 8, 4}, 2), 1);
  if (!tiny)
    return fail(tiny.takeError());
  auto wide = runModel(lib, "mlp 1024-1024-1024-1024-10, batch 2048",
                       tofu::buildMlp({1024, 1024, 1024, 1024, 10}, 2048), 1);
  if (!wide)
    return fail(wide.takeError());
  auto gpt =
      runModel(lib, "gpt-2-256-4-128, batch 8", tofu::buildTransformer(2, 256, 4, 128, 8, 512), 1);
  if (!gpt)
    return fail(gpt.takeError());
  auto pair = runModel(lib, "mlp 1024-1024-1024-1024-10, batch 2048",
                       tofu::buildMlp({1024, 1024, 1024, 1024, 10}, 2048), 2);
  if (!pair)
    return fail(pair.takeError());

  tofu::DeviceModel d;
  d.name = "cpu";
  d.shared = true;
  std::vector<double> tinyTimes;
  for (const OpSample &s : tiny->ops)
    tinyTimes.push_back(s.seconds);
  d.launch = median(tinyTimes);
  std::vector<OpSample> all = wide->ops;
  all.insert(all.end(), gpt->ops.begin(), gpt->ops.end());
  double pf = 0, ps = 0, bb = 0, bs = 0;
  for (const OpSample &s : all) {
    if (s.product) {
      pf += s.flops;
      ps += std::max(0.0, s.seconds - d.launch);
    } else if (s.map && s.bytes >= 1e6) {
      bb += s.bytes;
      bs += std::max(0.0, s.seconds - d.launch);
    }
  }
  if (ps <= 0 || bs <= 0)
    return fail("calibration: the products or the element-wise kernels took no measurable time");
  d.productFlops = pf / ps;
  d.bandwidth = bb / bs;
  // Generated kernels other than maps: the rate at which their estimates sum to their time.
  double measured = 0;
  for (const OpSample &s : all)
    if (!s.product && !s.map && !s.scatter)
      measured += s.seconds;
  auto estimated = [&](double rate) {
    double t = 0;
    for (const OpSample &s : all)
      if (!s.product && !s.map && !s.scatter)
        t += d.launch + std::max(s.flops / rate, s.bytes / d.bandwidth);
    return t;
  };
  double lo = 1e6, hi = 1e15;
  if (estimated(hi) >= measured) {
    d.kernelFlops = hi; // memory and launches explain them whole
  } else {
    for (int i = 0; i < 100; ++i) { // geometric bisection
      const double mid = std::sqrt(lo * hi);
      (estimated(mid) > measured ? lo : hi) = mid;
    }
    d.kernelFlops = hi;
  }
  // The link: at two workers sharing the machine, each fetches at half its bandwidth.
  if (pair->bytesReceived <= 0 || pair->copySeconds <= 0)
    return fail("calibration: the two-worker run moved no bytes");
  d.linkBandwidth = 2 * double(pair->bytesReceived) / pair->copySeconds;
  d.linkLatency = 0;
  d.source = fmt::format("tofu-run --calibrate, {} threads", std::thread::hardware_concurrency());

  llvm::outs() << fmt::format(
      "\n| figure | measured | from |\n| --- | ---: | --- |\n"
      "| one op | {:.1f} us | median op of the tiny MLP ({} ops) |\n"
      "| products | {:.1f} GFLOP/s | {} products of the wide MLP and the GPT |\n"
      "| bandwidth | {:.2f} GB/s | element-wise kernels of at least 1 MB |\n"
      "| generated kernels | {:.2f} GFLOP/s | the other generated kernels |\n"
      "| between two workers | {:.2f} GB/s | the wide MLP at 2 workers: {:.1f} MB a step in "
      "{:.2f} ms |\n",
      1e6 * d.launch, tiny->ops.size(), d.productFlops / 1e9,
      std::count_if(all.begin(), all.end(), [](const OpSample &s) { return s.product; }),
      d.bandwidth / 1e9, d.kernelFlops / 1e9, d.linkBandwidth / 1e9,
      double(pair->bytesReceived) / 1e6, 1e3 * pair->copySeconds);
  const std::string dir = path.substr(0, path.find_last_of('/'));
  if (path.find('/') != std::string::npos && !dir.empty() && !tofu::makeDirs(dir))
    return fail("cannot create " + dir);
  std::ofstream f(path);
  f << tofu::deviceModelJson(d);
  if (!f)
    return fail("cannot write " + path);
  llvm::outs() << fmt::format("\nwrote {}: `tofu-plan --device cpu` and tofu-run's estimates "
                              "use it\n",
                              path);
  return 0;
}

} // namespace tofurun
