// tofu-run --calibrate: measures this machine's device model (planner/step_time.h) on the
// CPU engine, and writes it where `tofu-plan --device cpu` and tofu-run's estimate read it.
//
// It trains four small models (a wide MLP, a GPT, a WResNet and an LSTM) a few steps with
// every node timed (EngineOptions::profile), counts each op's FLOPs, bytes and passes as the
// estimate does, and sets the figures from the ops each governs:
//  - the cost of a generated kernel's pass, a library product and a library convolution:
//    the median time of that kind's small ops (under 64 KiB and 100 kFLOP);
//  - each rate (the bandwidth over the element-wise kernels, the generated kernels' FLOP/s
//    over the others, the products' and the convolutions' FLOP/s) so that that kind's
//    estimates add up to its measured time, each model's ops weighted by their share of
//    that model's time, so that the four models count alike;
//  - the link between workers: the wide MLP at two workers, bytes received over the time
//    its workers spend fetching;
//  - a synchronisation: the WResNet at two workers, the time its workers spend waiting at
//    the barriers over their count (the jitter of workers sharing the cores included).
// Each node's time is its time over steps 2 to 6 (a run of 6 steps less a run of 1), so the
// first step's page faults and cold caches are not counted. The models are not those of
// bench/step_time_bench.sh, which checks the estimates against measured steps.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "fmt/format.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/step_time.h"
#include "runtime/library_kernels.h"
#include "runtime/trainer.h"
#include "support/files.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"

namespace tofurun {
namespace {

struct OpSample {
  std::string model, node;
  bool product = false, conv = false, map = false, scatter = false;
  double weight = 0; ///< seconds over its model's total (each model weighs 1 in the fit)
  unsigned passes = 1;
  double flops = 0, bytes = 0, seconds = 0;
};

struct ModelRun {
  std::vector<OpSample> ops; ///< worker 0's
  double copySeconds = 0;    ///< per step, summed over the workers
  double waitSeconds = 0;    ///< per step, summed over the workers: at the barriers
  int64_t bytesReceived = 0; ///< per step, summed over the workers
  int64_t syncs = 0;         ///< barriers per step (each worker holds every one)
};

/// Per worker, per node: the profile of a run of `steps` steps.
llvm::Expected<std::vector<std::vector<tofu::NodeTime>>>
profiled(const tofu::Problem &p, const tofu::Graph &g, const std::string &loss,
         const tofu::EnginePlan &plan, unsigned workers, unsigned steps) {
  tofu::TrainerOptions o;
  o.names = tofu::SettingNames::flags();
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
    for (size_t i = 0; i < (*many)[w].size(); ++i) {
      out.copySeconds +=
          std::max(0.0, ((*many)[w][i].copySeconds - (*one)[w][i].copySeconds) / (kSteps - 1));
      out.waitSeconds +=
          std::max(0.0, ((*many)[w][i].waitSeconds - (*one)[w][i].waitSeconds) / (kSteps - 1));
    }
  out.syncs = e->perWorker.empty() ? 0 : e->perWorker[0].syncs;
  // The estimate's worker is the slowest; at one worker, and for a balanced plan at two,
  // worker 0's ops are the same kinds and sizes.
  for (const tofu::OpTimeEstimate &o : e->ops) {
    const std::string &node = e->nodeNames[o.node];
    auto it = measured.find(node);
    if (it == measured.end())
      continue;
    OpSample s;
    s.model = name;
    s.node = node;
    s.product = o.product;
    s.conv = o.conv;
    s.scatter = o.scatter;
    s.passes = o.passes;
    s.map = o.map;
    s.flops = o.flops;
    s.bytes = o.bytes;
    s.seconds = it->second;
    out.ops.push_back(s);
  }
  for (const tofu::WorkerTime &w : e->perWorker)
    out.bytesReceived += w.bytesReceived;
  return out;
}

tofu::OpTimeEstimate estimateOf(const OpSample &s) {
  tofu::OpTimeEstimate o;
  o.product = s.product;
  o.conv = s.conv;
  o.scatter = s.scatter;
  o.passes = s.passes;
  o.flops = s.flops;
  o.bytes = s.bytes;
  return o;
}

/// Sets `*param` (a rate, where a larger value estimates less time) so that the estimates
/// of the samples `use` selects sum to their measured time, each model's samples weighted by
/// their share of that model's time (so each model counts alike); by bisection on a
/// geometric scale. Returns false, leaving 1e16, where no rate up to it gets the estimates
/// that low.
bool matchTotal(const std::vector<OpSample> &all, const std::function<bool(const OpSample &)> &use,
                double *param, tofu::DeviceModel &d) {
  auto excess = [&](double value) {
    *param = value;
    double f = 0;
    for (const OpSample &s : all)
      if (use(s) && s.seconds > 0)
        f += s.weight * (tofu::opSeconds(d, estimateOf(s)) / s.seconds - 1);
    return f;
  };
  double lo = 1e3, hi = 1e16;
  if (excess(hi) > 0)
    return false;
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    (excess(mid) > 0 ? lo : hi) = mid;
  }
  *param = hi;
  return true;
}

} // namespace

int runCalibration(const tofu::OpLibrary &lib, const std::string &path) {
  // Where the model goes, checked before the minutes of measuring (its folder made first:
  // the default is under ~/.cache).
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !tofu::makeDirs(path.substr(0, slash)))
    return fail(fmt::format("--calibrate: cannot create {}: {}", path.substr(0, slash),
                            std::strerror(errno)),
                2);
  if (llvm::Error e = tofu::checkWritable(path, "a device model"))
    return fail("--calibrate: " + llvm::toString(std::move(e)), 2);
  std::vector<OpSample> all;
  std::vector<std::string> names;
  auto measure = [&](const std::string &name, llvm::Expected<tofu::Graph> g) -> llvm::Error {
    auto run = runModel(lib, name, std::move(g), 1);
    if (!run)
      return run.takeError();
    double total = 0;
    for (const OpSample &o : run->ops)
      total += o.seconds;
    for (OpSample &o : run->ops)
      o.weight = total > 0 ? o.seconds / total : 0;
    all.insert(all.end(), run->ops.begin(), run->ops.end());
    names.push_back(name);
    return llvm::Error::success();
  };
  if (llvm::Error e = measure("mlp 1024-1024-1024-1024-10, batch 2048",
                              tofu::buildMlp({1024, 1024, 1024, 1024, 10}, 2048)))
    return fail(std::move(e));
  if (llvm::Error e =
          measure("gpt-2-256-4-128, batch 8", tofu::buildTransformer(2, 256, 4, 128, 8, 512)))
    return fail(std::move(e));
  if (llvm::Error e =
          measure("wresnet-50-1-i32-c16-k10, batch 8", tofu::buildWResNet(50, 1, 8, 32, 16, 10)))
    return fail(std::move(e));
  if (llvm::Error e = measure("rnn-1-128, batch 8", tofu::buildRnn(1, 128, 8)))
    return fail(std::move(e));
  auto pair = runModel(lib, "mlp 1024-1024-1024-1024-10, batch 2048",
                       tofu::buildMlp({1024, 1024, 1024, 1024, 10}, 2048), 2);
  if (!pair)
    return fail(pair.takeError());
  // The barriers: the WResNet's many small ops at two workers, where the waiting at them,
  // not the bytes, is what the workers' exchanges cost.
  auto many = runModel(lib, "wresnet-50-1-i32-c16-k10, batch 8",
                       tofu::buildWResNet(50, 1, 8, 32, 16, 10), 2);
  if (!many)
    return fail(many.takeError());

  tofu::DeviceModel d;
  d.name = "cpu";
  d.shared = true;
  d.productFlops = 1e11; // starting points of the solves below
  d.kernelFlops = 1e10;
  d.bandwidth = 2e10;
  d.linkBandwidth = 1e10;
  auto library = [](const OpSample &s) { return s.product && !s.conv; };
  auto conv = [](const OpSample &s) { return s.conv; };
  auto map = [](const OpSample &s) { return !s.product && !s.scatter && s.map; };
  auto generated = [](const OpSample &s) { return !s.product && !s.scatter && !s.map; };
  // The cost of a pass or a call: per kind, the median time of its small ops (under
  // 64 KiB and 100 kFLOP), which do almost nothing else; the generated kernels' where a kind
  // has fewer than 5.
  auto smallMedian = [&](const std::function<bool(const OpSample &)> &use) {
    std::vector<double> v;
    for (const OpSample &s : all)
      if (use(s) && s.bytes < 65536 && s.flops < 1e5)
        v.push_back(s.seconds / (s.product || s.scatter ? 1 : s.passes));
    return std::pair<double, size_t>(v.size() >= 5 ? median(v) : 0, v.size());
  };
  const auto [generatedLaunch, smallGenerated] =
      smallMedian([](const OpSample &s) { return !s.product && !s.scatter; });
  if (smallGenerated < 5)
    return fail("calibration: too few small ops to measure an op's cost");
  d.launch = generatedLaunch;
  d.libraryLaunch = smallMedian(library).first;
  d.convLaunch = smallMedian(conv).first;
  if (d.libraryLaunch == 0)
    d.libraryLaunch = d.launch;
  if (d.convLaunch == 0)
    d.convLaunch = d.libraryLaunch;
  // Then each rate, so that each kind's estimates add up to its measured time: the
  // bandwidth over the maps, the generated kernels' FLOP/s over the others (the two share
  // both figures: twice round), the products' and the convolutions' FLOP/s over theirs.
  // Where a kind's launches alone exceed its time (a noisy machine), its launch is halved
  // until they do not; where its bytes alone do (reductions that read faster than the maps),
  // its rate is left at the largest tried, and the table below shows how far off it is.
  auto solve = [&](const std::function<bool(const OpSample &)> &use, double *rate, double *launch) {
    const double keep = *launch;
    for (int i = 0; i < 20; ++i, *launch /= 2)
      if (matchTotal(all, use, rate, d))
        return;
    *launch = keep;
    matchTotal(all, use, rate, d); // leaves the largest rate
  };
  solve(map, &d.bandwidth, &d.launch);
  solve(generated, &d.kernelFlops, &d.launch);
  solve(map, &d.bandwidth, &d.launch);
  solve(generated, &d.kernelFlops, &d.launch);
  solve(library, &d.productFlops, &d.libraryLaunch);
  solve(conv, &d.convFlops, &d.convLaunch);
  // The library's peak, measured: the best of square products of 1024, 2048 and 3072 (as
  // large as any the models call, and larger) on every core the one worker had. A rate fitted past
  // it is not the machine's (the fit weighs each op's estimate over its time, and the launches it
  // adds can over-explain the small ones): the products, the convolutions and the generated kernels
  // are held to it. bfloat16 products, which the models do not run, take the fitted rate times the
  // library's bf16-to-fp32 ratio (none where this CPU has no native bf16 products).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto peakOf = [&](bool bf16) {
    double best = 0;
    for (int64_t n : {1024, 2048, 3072})
      best = std::max(best, tofu::libraryProductFlops(n, bf16, cores));
    return best;
  };
  const double peak = peakOf(false), peakBf16 = peakOf(true);
  double fastest = 0; // the fastest large product the models ran, FLOPs as the estimate counts
  for (const OpSample &s : all)
    if (library(s) && s.flops >= 1e8 && s.seconds > 0)
      fastest = std::max(fastest, s.flops / s.seconds);
  const double fittedProducts = d.productFlops, fittedConvs = d.convFlops,
               fittedKernels = d.kernelFlops;
  if (peak > 0) {
    d.productFlops = std::min(d.productFlops, peak);
    d.convFlops = std::min(d.convFlops, peak);
    d.kernelFlops = std::min(d.kernelFlops, peak);
  }
  d.productFlopsBf16 = peak > 0 && peakBf16 > 0 ? d.productFlops * peakBf16 / peak : 0;
  auto held = [&](double fitted, double now) {
    return fitted > now ? fmt::format(" (fitted {:.1f}, held to the peak)", fitted / 1e9)
                        : std::string();
  };
  // The link: at two workers sharing the machine, each fetches at half its bandwidth.
  if (pair->bytesReceived <= 0 || pair->copySeconds <= 0)
    return fail("calibration: the two-worker run moved no bytes");
  d.linkBandwidth = 2 * double(pair->bytesReceived) / pair->copySeconds;
  d.linkLatency = 0;
  // A barrier: each worker's waiting at them, over their count.
  if (many->syncs <= 0)
    return fail("calibration: the two-worker WResNet holds no barrier");
  d.syncLatency = many->waitSeconds / 2 / double(many->syncs);
  d.source = fmt::format("tofu-run --calibrate, {} threads", std::thread::hardware_concurrency());

  // How well the model explains the calibration's own ops, per model: estimated over
  // measured, the ops' times summed.
  std::map<std::string, std::pair<double, double>> fit; // model -> measured, estimated
  for (const OpSample &s : all) {
    fit[s.model].first += s.seconds;
    fit[s.model].second += tofu::opSeconds(d, estimateOf(s));
  }
  const auto count = [&](const std::function<bool(const OpSample &)> &f) {
    return std::count_if(all.begin(), all.end(), f);
  };
  llvm::outs() << fmt::format(
      "\n| figure | fitted | from |\n| --- | ---: | --- |\n"
      "| a generated kernel's pass | {:.1f} us | the median of {} small generated kernels |\n"
      "| a library product | {:.1f} us | its small ones |\n"
      "| a library convolution | {:.1f} us | its small ones |\n"
      "| the library's peak | {:.1f} GFLOP/s | sgemm of 1024, 2048 and 3072 cubed, on {} threads "
      "|\n"
      "| its peak in bfloat16 | {} | oneDNN's matmul of bfloat16 operands |\n"
      "| the fastest large product | {:.1f} GFLOP/s | the models' products of at least 0.1 "
      "GFLOP, measured |\n"
      "| products | {:.1f} GFLOP/s{} | {} library products |\n"
      "| products of bfloat16 | {} | the products' rate times the peaks' ratio |\n"
      "| convolutions | {:.1f} GFLOP/s{} | {} library convolutions |\n"
      "| bandwidth | {:.2f} GB/s | {} element-wise kernels |\n"
      "| generated kernels | {:.2f} GFLOP/s{} | {} other generated kernels |\n"
      "| between two workers | {:.2f} GB/s | the wide MLP at 2 workers: {:.1f} MB a step in "
      "{:.2f} ms |\n"
      "| a synchronisation | {:.1f} us | the WResNet at 2 workers: {} barriers a step, "
      "{:.2f} ms waiting at them a worker |\n",
      1e6 * d.launch, smallGenerated, 1e6 * d.libraryLaunch, 1e6 * d.convLaunch, peak / 1e9, cores,
      peakBf16 > 0 ? fmt::format("{:.1f} GFLOP/s", peakBf16 / 1e9)
                   : std::string("none native (widened around sgemm)"),
      fastest / 1e9, d.productFlops / 1e9, held(fittedProducts, d.productFlops), count(library),
      d.productFlopsBf16 > 0 ? fmt::format("{:.1f} GFLOP/s", d.productFlopsBf16 / 1e9)
                             : std::string("as float32"),
      d.convFlops / 1e9, held(fittedConvs, d.convFlops), count(conv), d.bandwidth / 1e9, count(map),
      d.kernelFlops / 1e9, held(fittedKernels, d.kernelFlops), count(generated),
      d.linkBandwidth / 1e9, double(pair->bytesReceived) / 1e6, 1e3 * pair->copySeconds,
      1e6 * d.syncLatency, many->syncs, 1e3 * many->waitSeconds / 2);
  llvm::outs() << "\n| calibration model | its ops measured | estimated | estimated / measured |\n"
                  "| --- | ---: | ---: | ---: |\n";
  for (const std::string &n : names)
    llvm::outs() << fmt::format("| {} | {:.2f} ms | {:.2f} ms | {:.2f} |\n", n, 1e3 * fit[n].first,
                                1e3 * fit[n].second, fit[n].second / fit[n].first);
  if (llvm::Error e = tofu::writeFileAtomically(path, tofu::deviceModelJson(d), "a device model"))
    return fail(std::move(e));
  llvm::outs() << fmt::format("\nwrote {}: `tofu-plan --device cpu` and tofu-run's estimates "
                              "use it\n",
                              path);
  return 0;
}

} // namespace tofurun
