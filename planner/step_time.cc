// The step-time estimate (step_time.h): device models, each op instance's FLOPs, bytes and
// passes, and the slowest worker's step.
#include "planner/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>

#include "analysis/ir.h"
#include "codegen/fusion.h"
#include "codegen/library_plans.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "planner/topology.h"
#include "support/files.h"
#include "support/json_at.h"
#include "support/units.h"
#include "llvm/Support/Casting.h"

namespace tofu {
namespace {

// Data sheets: NVIDIA H100 Tensor Core GPU (SXM5: FP32 67 TFLOP/s, BF16 989 TFLOP/s dense,
// HBM3 3.35 TB/s, NVLink 900 GB/s both ways together) and A100 (SXM4 80 GB: FP32 19.5,
// BF16 312 dense, HBM2e 2.04 TB/s, NVLink 600 GB/s; host links PCIe 5 x16 and PCIe 4 x16,
// 128 and 64 GB/s both ways together). A launch's 2 us is the kernel report's
// (runtime/cuda/kernel_report.h); the 3 us per message (and per host transfer) is an
// assumption, not a data sheet's.
DeviceModel h100() {
  DeviceModel d;
  d.name = "H100 SXM";
  d.source = "data sheet (peak rates; a launch 2 us and a message 3 us assumed)";
  d.productFlops = 67e12;
  d.productFlopsBf16 = 989e12;
  d.kernelFlops = 67e12;
  d.bandwidth = 3.35e12;
  d.launch = 2e-6;
  d.linkBandwidth = 450e9;
  d.linkLatency = 3e-6;
  d.hostBandwidth = 64e9;
  d.hostLatency = 3e-6;
  return d;
}

DeviceModel a100() {
  DeviceModel d;
  d.name = "A100 SXM 80GB";
  d.source = "data sheet (peak rates; a launch 2 us and a message 3 us assumed)";
  d.productFlops = 19.5e12;
  d.productFlopsBf16 = 312e12;
  d.kernelFlops = 19.5e12;
  d.bandwidth = 2.04e12;
  d.launch = 2e-6;
  d.linkBandwidth = 300e9;
  d.linkLatency = 3e-6;
  d.hostBandwidth = 32e9;
  d.hostLatency = 3e-6;
  return d;
}

std::string envOr(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

} // namespace

const char kDeviceHelp[] =
    "The device the estimated step time is for: h100 (H100 SXM) or a100 (A100 SXM 80GB), "
    "from their data sheets; cpu, this machine as `tofu-run --calibrate` measured it; or a "
    "JSON file of a device model (as --calibrate writes)";

std::string defaultCpuModelPath() {
  const std::string given = envOr("TOFU_CPU_MODEL", "");
  if (!given.empty())
    return given;
  const std::string xdg = envOr("XDG_CACHE_HOME", "");
  if (!xdg.empty())
    return xdg + "/tofu/cpu-model.json";
  return envOr("HOME", ".") + "/.cache/tofu/cpu-model.json";
}

const char *phaseName(StepPhase p) {
  switch (p) {
  case StepPhase::Forward:
    return "forward";
  case StepPhase::Backward:
    return "backward";
  case StepPhase::Update:
    return "update";
  }
  return "?";
}

const char *opKind(const OpTimeEstimate &o) {
  return o.conv ? "convolution" : o.product ? "product" : o.scatter ? "scatter" : "generated";
}

MeasuredOp measuredOpOf(const std::string &op, const OpTimeEstimate &o, unsigned workers,
                        bool shared) {
  MeasuredOp m;
  m.op = op;
  m.kind = opKind(o);
  m.flops = o.flops;
  m.bytes = o.bytes;
  m.passes = o.passes;
  m.bf16 = o.bf16;
  m.workers = shared ? workers : 0;
  return m;
}

std::string measuredKey(const MeasuredOp &m) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}", m.op, m.kind, std::llround(m.flops),
                     std::llround(m.bytes), m.passes, m.bf16, m.workers);
}

std::string deviceModelJson(const DeviceModel &d, bool withMeasured) {
  nlohmann::ordered_json j;
  j["name"] = d.name;
  j["source"] = d.source;
  j["product_flops"] = d.productFlops;
  j["product_flops_bf16"] = d.productFlopsBf16;
  j["conv_flops"] = d.convFlops;
  j["kernel_flops"] = d.kernelFlops;
  j["bandwidth"] = d.bandwidth;
  j["launch_seconds"] = d.launch;
  j["library_launch_seconds"] = d.libraryLaunch;
  j["conv_launch_seconds"] = d.convLaunch;
  j["link_bandwidth"] = d.linkBandwidth;
  j["link_latency_seconds"] = d.linkLatency;
  j["host_bandwidth"] = d.hostBandwidth;
  j["host_latency_seconds"] = d.hostLatency;
  j["sync_seconds"] = d.syncLatency;
  j["shared"] = d.shared;
  if (withMeasured) { // (without: the estimate's JSON counts them)
    if (!d.measured.empty()) {
      j["measured_ops"] = nlohmann::ordered_json::array();
      for (const MeasuredOp &m : d.measured)
        j["measured_ops"].push_back({{"op", m.op},
                                     {"kind", m.kind},
                                     {"flops", m.flops},
                                     {"bytes", m.bytes},
                                     {"passes", m.passes},
                                     {"bf16", m.bf16},
                                     {"workers", m.workers},
                                     {"seconds", m.seconds},
                                     {"samples", m.samples}});
    }
  }
  return j.dump(1) + "\n";
}

llvm::Expected<DeviceModel> parseDeviceModel(const std::string &json, const std::string &where) {
  auto parsed = parseJson(json, where);
  if (!parsed)
    return parsed.takeError();
  const nlohmann::json &j = *parsed;
  if (!j.is_object())
    return stringError(
        fmt::format("{}: a device model is a JSON object, not {}", where, j.type_name()));
  // A misspelled key is an error, not a rate taken as missing or a default in silence.
  if (llvm::Error e = JsonAt{j, "the top level", where}.object(
          {"name", "source", "product_flops", "product_flops_bf16", "conv_flops", "kernel_flops",
           "bandwidth", "launch_seconds", "library_launch_seconds", "conv_launch_seconds",
           "link_bandwidth", "link_latency_seconds", "host_bandwidth", "host_latency_seconds",
           "sync_seconds", "shared", "measured_ops"},
          {}))
    return std::move(e);
  DeviceModel d;
  auto text = [&](const char *key, std::string &out) -> llvm::Error {
    if (!j.contains(key) || !j[key].is_string())
      return stringError(fmt::format("{}: \"{}\" must be a string", where, key));
    out = j[key].get<std::string>();
    return llvm::Error::success();
  };
  auto number = [&](const char *key, double &out, bool zeroOk) -> llvm::Error {
    if (!j.contains(key) || !j[key].is_number())
      return stringError(fmt::format("{}: \"{}\" must be a number", where, key));
    out = j[key].get<double>();
    if (!(out > 0 || (zeroOk && out == 0)) || out > 1e18)
      return stringError(fmt::format("{}: \"{}\" is {}; it must be {}", where, key, out,
                                     zeroOk ? "0 or positive" : "positive"));
    return llvm::Error::success();
  };
  if (auto e = text("name", d.name))
    return std::move(e);
  if (auto e = text("source", d.source))
    return std::move(e);
  for (auto [key, field, zeroOk] :
       {std::tuple{"product_flops", &d.productFlops, false},
        std::tuple{"product_flops_bf16", &d.productFlopsBf16, true},
        std::tuple{"conv_flops", &d.convFlops, true},
        std::tuple{"kernel_flops", &d.kernelFlops, false},
        std::tuple{"bandwidth", &d.bandwidth, false}, std::tuple{"launch_seconds", &d.launch, true},
        std::tuple{"library_launch_seconds", &d.libraryLaunch, true},
        std::tuple{"conv_launch_seconds", &d.convLaunch, true},
        std::tuple{"link_bandwidth", &d.linkBandwidth, false},
        std::tuple{"link_latency_seconds", &d.linkLatency, true}})
    if (auto e = number(key, *field, zeroOk))
      return std::move(e);
  // Models calibrated before the per-synchronisation cost or the host link lack them: 0,
  // not modelled.
  for (auto [key, field] :
       {std::tuple{"sync_seconds", &d.syncLatency}, std::tuple{"host_bandwidth", &d.hostBandwidth},
        std::tuple{"host_latency_seconds", &d.hostLatency}})
    if (j.contains(key))
      if (auto e = number(key, *field, true))
        return std::move(e);
  if (!j.contains("shared") || !j["shared"].is_boolean())
    return stringError(fmt::format("{}: \"shared\" must be true or false", where));
  d.shared = j["shared"].get<bool>();
  if (j.contains("measured_ops")) {
    const auto &list = j["measured_ops"];
    if (!list.is_array())
      return stringError(fmt::format("{}: \"measured_ops\" must be an array", where));
    for (size_t i = 0; i < list.size(); ++i) {
      const JsonAt e{list[i], fmt::format("measured_ops[{}]", i), where};
      if (llvm::Error err = e.object(
              {"op", "kind", "flops", "bytes", "passes", "bf16", "workers", "seconds", "samples"},
              {"op", "kind", "flops", "bytes", "passes", "bf16", "workers", "seconds"}))
        return std::move(err);
      MeasuredOp m;
      m.samples = 1;
      auto op = e["op"].string();
      if (!op)
        return op.takeError();
      m.op = *op;
      auto kind = e["kind"].string();
      if (!kind)
        return kind.takeError();
      m.kind = *kind;
      if (m.kind != "product" && m.kind != "convolution" && m.kind != "scatter" &&
          m.kind != "generated")
        return e["kind"].fail(fmt::format("'{}' is no kind of op this model times (product, "
                                          "convolution, scatter or generated)",
                                          m.kind));
      constexpr int64_t kCountMax = std::numeric_limits<unsigned>::max();
      for (auto [key, field] : {std::pair{"flops", &m.flops}, std::pair{"bytes", &m.bytes},
                                std::pair{"seconds", &m.seconds}}) {
        auto v = e[key].number(0, 1e18);
        if (!v)
          return v.takeError();
        *field = *v;
      }
      for (auto [key, field, lo] : {std::tuple{"passes", &m.passes, int64_t(0)},
                                    std::tuple{"workers", &m.workers, int64_t(0)},
                                    std::tuple{"samples", &m.samples, int64_t(1)}}) {
        if (!e.v.contains(key))
          continue; // samples: 1 where not given
        auto v = e[key].integer(lo, kCountMax);
        if (!v)
          return v.takeError();
        *field = static_cast<unsigned>(*v);
      }
      auto bf16 = e["bf16"].boolean();
      if (!bf16)
        return bf16.takeError();
      m.bf16 = *bf16;
      d.measured.push_back(std::move(m));
    }
  }
  return d;
}

llvm::Expected<DeviceModel> deviceModelNamed(const std::string &nameOrFile) {
  if (nameOrFile == "h100")
    return h100();
  if (nameOrFile == "a100")
    return a100();
  const bool cpu = nameOrFile == "cpu";
  const std::string path = cpu ? defaultCpuModelPath() : nameOrFile;
  if (isDirectory(path))
    return readFile(path, "a device model").takeError();
  auto text = readFile(path, "a device model");
  if (!text) {
    llvm::consumeError(text.takeError());
    if (cpu)
      return stringError(fmt::format(
          "no model of this machine at {}: `tofu-run --calibrate` measures one and writes it "
          "there",
          path));
    return stringError(fmt::format(
        "'{}' is neither a device (h100, a100, cpu) nor a readable device model file", nameOrFile));
  }
  return parseDeviceModel(*text, path);
}

namespace {

/// What a transcendental function (exp, log, tanh, ...) costs in FLOPs: a vectorised exp or
/// tanh is some ten multiply-adds and table steps (glibc's libmvec, CUDA's fast paths).
constexpr double kTranscendentalFlops = 10;

/// The arithmetic of one evaluation of `op`'s body: each operation 1, a transcendental
/// function kTranscendentalFlops, at least 2 (a multiply-add). A reduction's body counts once,
/// beside the output's expression, so for a reduction it is a little more than one
/// iteration's.
double arithmeticPerIteration(const InstOp &op) {
  double n = 0;
  std::function<void(const ir::Expr &)> walk = [&](const ir::Expr &e) {
    if (const auto *a = llvm::dyn_cast<ir::Apply>(&e)) {
      switch (a->fn) {
      case ir::Builtin::Relu:
      case ir::Builtin::Abs:
      case ir::Builtin::Sign:
      case ir::Builtin::Floor:
      case ir::Builtin::Ceil:
      case ir::Builtin::Min:
      case ir::Builtin::Max:
      case ir::Builtin::Select:
      case ir::Builtin::CastFloat:
      case ir::Builtin::CastInt:
        n += 1;
        break;
      default:
        n += kTranscendentalFlops;
      }
    } else if (llvm::isa<ir::Binary>(&e) || llvm::isa<ir::Neg>(&e)) {
      n += 1;
    }
    ir::forEachChildExpr(e, walk);
  };
  if (op.body)
    walk(*op.body);
  return std::max(2.0, n);
}

} // namespace

double opRate(const DeviceModel &d, const OpTimeEstimate &o) {
  if (!o.product)
    return d.kernelFlops;
  if (o.conv && d.convFlops > 0)
    return d.convFlops;
  return o.bf16 && d.productFlopsBf16 > 0 ? d.productFlopsBf16 : d.productFlops;
}

double opLaunchSeconds(const DeviceModel &d, const OpTimeEstimate &o) {
  const double library = d.libraryLaunch > 0 ? d.libraryLaunch : d.launch;
  return o.conv && d.convLaunch > 0 ? d.convLaunch
         : o.product || o.scatter   ? library
                                    : o.passes * d.launch;
}

double opWorkSeconds(const DeviceModel &d, const OpTimeEstimate &o, double share) {
  return std::max(o.flops / (opRate(d, o) * share), o.bytes / (d.bandwidth * share));
}

double opSeconds(const DeviceModel &d, const OpTimeEstimate &o, double share) {
  return opLaunchSeconds(d, o) + opWorkSeconds(d, o, share);
}

namespace {

/// Where the engines synchronise the workers around each node of `plan` (the rule of
/// codegen/program_builder.cc's placeSyncs, from the execution plan): after its launches
/// where some worker reads another's data at that node, and after its assembly where the
/// assembly or the next node's fetches do, and after the last node (the carries).
struct SyncPoints {
  std::vector<bool> afterLaunch, afterAssembly;
};
SyncPoints syncPoints(const ExecPlan &plan) {
  const size_t n = plan.nodes.size();
  std::vector<bool> crossFetch(n, false), crossAssemble(n, false);
  for (size_t i = 0; i < n; ++i) {
    const NodeExec &ne = plan.nodes[i];
    for (unsigned w = 0; w < ne.workers.size(); ++w)
      for (const InputFetch &in : ne.workers[w].inputs)
        for (const Fetch &f : in.parts)
          crossFetch[i] = crossFetch[i] || f.from != w;
    for (const OutputAssembly &a : ne.assemble)
      for (const auto &slice : a.slices)
        for (const Fetch &f : slice)
          crossAssemble[i] = crossAssemble[i] || f.from != a.owner;
  }
  SyncPoints s;
  for (size_t i = 0; i < n; ++i) {
    s.afterLaunch.push_back(crossFetch[i] || crossAssemble[i]);
    s.afterAssembly.push_back(crossAssemble[i] || i + 1 == n || crossFetch[i + 1]);
  }
  return s;
}

/// A pipelined plan's step as its program runs: each worker through its nodes in order,
/// its fetches and kernels of each node at their estimated times (a node's share of the
/// worker's communication is its share of the bytes it receives), and every worker waiting
/// for the slowest at each synchronisation (codegen/program_builder.cc: placeSyncs, after a
/// node where some worker reads another's data, and after its assembly where that or the
/// next node's fetches cross). Between synchronisations the stages' workers run on apart.
/// Where the device has no synchronisation cost (the data sheets' GPUs, whose engines order
/// workers by events and messages), a worker waits only for what it receives instead.
double pipelinedSeconds(const Problem &fp, const ExecPlan &plan, const SyncPoints &syncs,
                        const std::vector<std::vector<OpTimeEstimate>> &ops,
                        const TopologyTraffic &traffic, const DeviceModel &device) {
  const unsigned k = plan.workers;
  const size_t n = plan.nodes.size();
  std::vector<size_t> at(fp.nodes.size(), 0);
  for (size_t i = 0; i < n; ++i)
    at[plan.nodes[i].node] = i;
  std::vector<std::vector<double>> compute(k, std::vector<double>(n, 0));
  for (unsigned w = 0; w < k; ++w)
    for (const OpTimeEstimate &o : ops[w])
      compute[w][at[o.node]] += o.seconds;
  // Bytes each worker receives at each node: fetches, and the results it assembles.
  std::vector<std::vector<double>> fetched(k, std::vector<double>(n, 0)),
      assembled(k, std::vector<double>(n, 0));
  std::vector<double> total(k, 0);
  // Engines that order workers pairwise (CUDA's events, NCCL's and MPI's messages; the models
  // without a synchronisation cost) make a worker wait only for the data it receives: per
  // node another worker reads from, each worker's end of it.
  const bool pairwise = device.syncLatency == 0;
  std::map<size_t, std::vector<double>> finished;
  for (size_t i = 0; i < n; ++i) {
    const NodeExec &ne = plan.nodes[i];
    for (unsigned w = 0; w < ne.workers.size(); ++w)
      for (const InputFetch &in : ne.workers[w].inputs)
        for (const Fetch &f : in.parts) {
          if (f.from == w)
            continue;
          if (in.repeats < 0)
            fetched[w][i] += double(boxElements(f.box)) * fp.tensors[in.tensor].elementBytes;
          if (const int prod = fp.tensors[in.tensor].producer; pairwise && prod >= 0)
            finished.emplace(at[prod], std::vector<double>(k, 0));
        }
    const ProblemTensor &out = fp.tensors[fp.nodes[ne.node].output];
    for (const OutputAssembly &a : ne.assemble)
      for (const auto &slice : a.slices)
        for (const Fetch &f : slice)
          if (f.from != a.owner)
            assembled[a.owner][i] +=
                double(boxElements(f.box)) * out.resultBytes(a.slices.size() > 1);
  }
  for (unsigned w = 0; w < k; ++w)
    for (size_t i = 0; i < n; ++i)
      total[w] += fetched[w][i] + assembled[w][i];
  auto seconds = [&](unsigned w, double bytes) {
    return total[w] > 0 ? traffic.workerSeconds[w] * bytes / total[w] : 0.0;
  };
  std::vector<double> clock(k, 0);
  if (pairwise) {
    // A fetch waits for its sender's end of the producing node, an assembly for each slice's
    // worker to compute it.
    std::vector<double> computed(k, 0);
    for (size_t i = 0; i < n; ++i) {
      const NodeExec &ne = plan.nodes[i];
      for (unsigned w = 0; w < k; ++w) {
        double start = clock[w];
        for (const InputFetch &in : ne.workers[w].inputs)
          for (const Fetch &f : in.parts)
            if (const int prod = fp.tensors[in.tensor].producer; f.from != w && prod >= 0)
              start = std::max(start, finished.at(at[prod])[f.from]);
        clock[w] = computed[w] = start + seconds(w, fetched[w][i]) + compute[w][i];
      }
      for (const OutputAssembly &a : ne.assemble) {
        for (const auto &slice : a.slices)
          for (const Fetch &f : slice)
            if (f.from != a.owner)
              clock[a.owner] = std::max(clock[a.owner], computed[f.from]);
      }
      for (unsigned w = 0; w < k; ++w)
        clock[w] += seconds(w, assembled[w][i]);
      if (auto it = finished.find(i); it != finished.end())
        it->second = clock;
    }
    return *std::max_element(clock.begin(), clock.end());
  }
  auto barrier = [&] {
    const double t = *std::max_element(clock.begin(), clock.end()) + device.syncLatency;
    std::fill(clock.begin(), clock.end(), t);
  };
  for (size_t i = 0; i < n; ++i) {
    for (unsigned w = 0; w < k; ++w)
      clock[w] += seconds(w, fetched[w][i]) + compute[w][i];
    if (syncs.afterLaunch[i])
      barrier();
    for (unsigned w = 0; w < k; ++w)
      clock[w] += seconds(w, assembled[w][i]);
    if (syncs.afterAssembly[i])
      barrier();
  }
  return *std::max_element(clock.begin(), clock.end());
}

} // namespace

llvm::Expected<StepTimeEstimate> estimateStepTime(const Problem &p, const ExecPlan &plan,
                                                  const std::vector<std::string> &outputs,
                                                  const DeviceModel &device,
                                                  const std::optional<Topology> &topology) {
  if (!(device.productFlops > 0 && device.kernelFlops > 0 && device.bandwidth > 0 &&
        device.linkBandwidth > 0))
    return stringError(fmt::format("device model '{}' lacks a rate", device.name));
  StepTimeEstimate out;
  out.device = device;
  out.workers = plan.workers;
  Topology machine;
  if (topology) {
    if (topology->workers() != plan.workers)
      return stringError(fmt::format("the machine has {} workers, the plan {}", topology->workers(),
                                     plan.workers));
    machine = *topology;
  } else { // workers sharing a device share its link too (the machine's memory)
    machine.levels.push_back({"worker", plan.workers,
                              device.linkBandwidth * (device.shared ? 1.0 / plan.workers : 1.0),
                              device.linkLatency});
  }
  const TopologyTraffic traffic = topologyTraffic(p, plan, machine);

  // What the engines run: element-wise chains folded into one kernel.
  const FusedPlan fused = fuseElementwise(p, plan, outputs);
  const Problem &fp = fused.problem;
  const double share = device.shared ? 1.0 / plan.workers : 1.0;
  std::map<std::string, double> measured; // measuredKey -> seconds
  for (const MeasuredOp &m : device.measured)
    measured[measuredKey(m)] = m.seconds;
  std::map<const StrategyTable *, KernelSchedule> schedules;
  std::map<const StrategyTable *, double> arithmetic;
  out.perWorker.assign(plan.workers, {});
  std::vector<std::vector<OpTimeEstimate>> ops(plan.workers);
  for (const NodeExec &ne : fused.plan.nodes) {
    const ProblemNode &node = fp.nodes[ne.node];
    const InstOp &op = node.table->op;
    const ProblemTensor &result = fp.tensors[node.output];
    StepPhase phase = fp.carriesState(node)                 ? StepPhase::Update
                      : result.role == TensorRole::Gradient ? StepPhase::Backward
                                                            : StepPhase::Forward;
    auto it = schedules.find(node.table.get());
    if (it == schedules.end())
      it = schedules.emplace(node.table.get(), scheduleKernel(op, ScheduleTarget::Cpp)).first;
    bool partials = false;
    for (const OutputAssembly &a : ne.assemble)
      partials |= a.slices.size() > 1;
    for (unsigned w = 0; w < plan.workers && w < ne.workers.size(); ++w) {
      const OpInstance &inst = ne.workers[w];
      if (!inst.computes)
        continue;
      OpTimeEstimate e;
      e.node = ne.node;
      e.phase = phase;
      const double iterations = scheduledIterations(op, it->second, inst.ranges);
      e.flops = 2 * iterations;
      std::vector<Box> held;
      double inputBytes = 0;
      for (const InputFetch &in : inst.inputs) {
        held.push_back(in.region);
        if (in.repeats < 0)
          inputBytes += double(boxElements(in.region)) * fp.tensors[in.tensor].storageBytes();
      }
      e.bytes =
          inputBytes + double(boxElements(inst.produced)) * result.resultStorageBytes(partials);
      const bool gemm = gemmPlan(op, inst.ranges, held).has_value();
      e.conv = !gemm && convPlan(op, node.shapes, inst.ranges, held);
      e.product = gemm || e.conv || affineGemmPlan(op, inst.ranges, held);
      e.map = isMap(op);
      // A scatter-add (an embedding's gradient) runs as one add per element it reads, not
      // over its IR's loops (every row of the table for every index).
      if (!e.product && scatterPlan(op, inst.ranges, held)) {
        e.scatter = true;
        e.flops = 0;
        for (const InputFetch &in : inst.inputs)
          e.flops += double(boxElements(in.region));
      }
      e.bf16 = !inst.inputs.empty() &&
               fp.tensors[inst.inputs[0].tensor].storage == ElementType::BFloat16;
      const bool library = e.product || e.scatter;
      if (!library) { // its arithmetic; each temporary's pass reads the inputs again
        auto a = arithmetic.find(node.table.get());
        if (a == arithmetic.end())
          a = arithmetic.emplace(node.table.get(), arithmeticPerIteration(op)).first;
        e.flops = iterations * a->second;
        for (const ScheduledReduction &r : it->second.reductions)
          if (r.placement == ScheduledReduction::Placement::Temporary) {
            ++e.passes;
            e.bytes += inputBytes;
          }
      }
      e.seconds = opSeconds(device, e, share);
      if (!measured.empty()) {
        auto m =
            measured.find(measuredKey(measuredOpOf(op.def->name, e, plan.workers, device.shared)));
        if (m != measured.end()) {
          e.seconds = m->second;
          e.measured = true;
        }
      }
      out.perWorker[w].phase[static_cast<int>(phase)] += e.seconds;
      out.flops += e.flops;
      ops[w].push_back(e);
    }
  }
  // The barriers every worker's program holds (syncPoints).
  const SyncPoints points = syncPoints(fused.plan);
  int64_t syncs = 0;
  if (plan.workers > 1)
    syncs = std::count(points.afterLaunch.begin(), points.afterLaunch.end(), true) +
            std::count(points.afterAssembly.begin(), points.afterAssembly.end(), true);
  for (unsigned w = 0; w < plan.workers; ++w) {
    WorkerTime &t = out.perWorker[w];
    t.syncs = syncs;
    t.communication = traffic.workerSeconds[w] + double(syncs) * device.syncLatency;
    t.bytesReceived = traffic.workerBytes[w];
    t.messages = traffic.workerMessages[w];
    if (t.total() > out.seconds) {
      out.seconds = t.total();
      out.slowest = w;
    }
  }
  const WorkerTime &s = out.perWorker[out.slowest];
  // Transfers may hide behind compute; the barriers cannot.
  const double barriers = double(s.syncs) * device.syncLatency;
  out.overlappedSeconds = std::max(s.compute(), s.communication - barriers) + barriers;
  if (plan.stages > 1) {
    // Stages run different nodes at once: the step is the schedule's length, simulated.
    out.seconds = pipelinedSeconds(fp, fused.plan, points, ops, traffic, device);
    out.overlappedSeconds = std::min(out.overlappedSeconds, out.seconds);
    out.pipelined = true;
  }
  out.ops = ops[out.slowest];
  out.measuredOps = static_cast<unsigned>(
      std::count_if(out.ops.begin(), out.ops.end(), [](const auto &o) { return o.measured; }));
  out.workerOps = std::move(ops);
  for (const ProblemNode &n : fp.nodes) {
    out.nodeNames.push_back(n.name);
    out.nodeOps.push_back(n.table->op.def->name);
  }
  return out;
}

std::string formatStepTime(const StepTimeEstimate &e, unsigned top) {
  const WorkerTime &s = e.perWorker[e.slowest];
  std::string out = fmt::format(
      "estimated step time on {} ({}): {:.3f} ms, worker {} the slowest: forward {:.3f} ms, "
      "backward {:.3f} ms, update {:.3f} ms, communication {:.3f} ms ({} received in {} "
      "message{}{}); no overlap assumed (with transfers hidden behind compute: {:.3f} ms)\n",
      e.device.name, e.device.source, 1e3 * e.seconds, e.slowest, 1e3 * s.phase[0],
      1e3 * s.phase[1], 1e3 * s.phase[2], 1e3 * s.communication,
      humanBytes(double(s.bytesReceived)), s.messages, s.messages == 1 ? "" : "s",
      e.device.syncLatency > 0 && s.syncs > 0
          ? fmt::format(", {} synchronisations at {:.1f} us", s.syncs, 1e6 * e.device.syncLatency)
          : std::string(),
      1e3 * e.overlappedSeconds);
  if (e.pipelined)
    out += fmt::format("  pipeline stages: the step is the schedule simulated (every worker's "
                       "nodes in order, the bubbles and {} included)\n",
                       e.device.syncLatency > 0 ? "each synchronisation's wait"
                                                : "each wait for data received");
  if (!e.device.measured.empty())
    out += fmt::format("  {} of worker {}'s {} ops at their measured times (the model's "
                       "{} measured ops), the rest by the rates\n",
                       e.measuredOps, e.slowest, e.ops.size(), e.device.measured.size());
  if (top == 0 || e.ops.empty())
    return out;
  std::vector<const OpTimeEstimate *> sorted;
  for (const OpTimeEstimate &o : e.ops)
    sorted.push_back(&o);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto *a, auto *b) { return a->seconds > b->seconds; });
  out += fmt::format("\nworker {}'s {} costliest ops (estimated):\n\n| node | op | phase | kind | "
                     "GFLOP | MB | ms | bound by |\n| --- | --- | --- | --- | ---: | ---: | ---: "
                     "| --- |\n",
                     e.slowest, std::min<size_t>(top, sorted.size()));
  const double share = e.device.shared ? 1.0 / e.workers : 1.0;
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    const OpTimeEstimate &o = *sorted[i];
    const double rate = opRate(e.device, o);
    const double compute = o.flops / (rate * share),
                 memory = o.bytes / (e.device.bandwidth * share);
    const char *bound = std::max(compute, memory) < o.seconds / 2 ? "launches"
                        : compute >= memory                       ? "compute"
                                                                  : "memory";
    out +=
        fmt::format("| {} | {} | {} | {}{} | {:.3f} | {:.2f} | {:.3f} | {} |\n",
                    e.nodeNames[o.node], e.nodeOps[o.node], phaseName(o.phase),
                    o.conv      ? "library convolution"
                    : o.product ? "library product"
                    : o.scatter ? "library scatter-add"
                                : "generated",
                    o.bf16 ? " (bf16)" : "", o.flops / 1e9, o.bytes / 1e6, 1e3 * o.seconds, bound);
  }
  return out;
}

std::string stepTimeJson(const StepTimeEstimate &e) {
  nlohmann::ordered_json j;
  j["device"] = nlohmann::ordered_json::parse(deviceModelJson(e.device, false));
  j["measured_ops"] = e.measuredOps;
  j["device_measured_ops"] = e.device.measured.size();
  j["seconds"] = e.seconds;
  j["overlapped_seconds"] = e.overlappedSeconds;
  j["slowest_worker"] = e.slowest;
  j["flops"] = e.flops;
  j["overlap"] = "none: a worker's step is its compute plus its communication";
  j["workers"] = nlohmann::ordered_json::array();
  for (const WorkerTime &w : e.perWorker)
    j["workers"].push_back({{"forward_seconds", w.phase[0]},
                            {"backward_seconds", w.phase[1]},
                            {"update_seconds", w.phase[2]},
                            {"communication_seconds", w.communication},
                            {"bytes_received", w.bytesReceived},
                            {"messages", w.messages},
                            {"synchronisations", w.syncs}});
  j["ops"] = nlohmann::ordered_json::array(); // the slowest worker's, in plan order
  for (const OpTimeEstimate &o : e.ops)
    j["ops"].push_back({{"node", e.nodeNames[o.node]},
                        {"op", e.nodeOps[o.node]},
                        {"phase", phaseName(o.phase)},
                        {"kind", opKind(o)},
                        {"bf16", o.bf16},
                        {"passes", o.passes},
                        {"flops", o.flops},
                        {"bytes", o.bytes},
                        {"seconds", o.seconds},
                        {"measured", o.measured}});
  return j.dump(1);
}

} // namespace tofu
