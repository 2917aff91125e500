// The host-side estimate of each CUDA kernel of a worker's step (kernel_report.h).
#include "runtime/cuda/kernel_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "codegen/kernel_gen.h"
#include "codegen/library_plans.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "runtime/cuda/launch_params.h"
#include "runtime/cuda/library_calls.h"

namespace tofu::cuda {
namespace {

using Red = ScheduledReduction;
using Placement = ScheduledReduction::Placement;

double extent(const std::vector<Range> &ranges, unsigned v) {
  return static_cast<double>(std::max<int64_t>(0, ranges[v].size()));
}

/// How many times an inline reduction is computed per value of `base` (the loops a launch
/// spreads over threads or blocks): once per value of its other loops.
double perBase(const Red &r, const std::vector<unsigned> &base, const std::vector<Range> &ranges) {
  double n = 1;
  for (unsigned v : r.loops)
    if (std::find(base.begin(), base.end(), v) == base.end())
      n *= extent(ranges, v);
  return n;
}

/// Iterations of the inline reductions of nest `nest`, per value of `base`.
double nestWork(const KernelSchedule &s, int nest, const std::vector<unsigned> &base,
                const std::vector<Range> &ranges) {
  double w = 0;
  for (const Red &r : s.reductions)
    if (r.placement == Placement::Inline && r.nest == nest)
      w += perBase(r, base, ranges) * visitedTerms(r, ranges);
  return w;
}

double ceilDiv(double a, double b) { return b > 0 ? std::ceil(a / b) : a; }

int64_t boxBytes(const Box &b, loops::Element element) {
  return boxElements(b) * elementBytes(element);
}

} // namespace

llvm::Expected<std::vector<KernelEstimate>> kernelReport(const Program &program, unsigned worker,
                                                         const GpuModel &gpu) {
  if (worker >= program.worker.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "worker %u of a program of %u workers", worker,
                                   static_cast<unsigned>(program.worker.size()));
  // Generated kernels by instantiation and element types (codegen/kernel_gen.h).
  std::map<std::pair<unsigned, std::string>, KernelSource> sources;
  std::vector<std::optional<KernelSchedule>> cudaOne(program.kernels.size()),
      cudaMulti(program.kernels.size()), cpp(program.kernels.size());
  std::vector<KernelEstimate> out;
  const double threads = kKernelThreads;
  for (const ProgramStep &st : program.worker[worker].steps) {
    if (!st.launches)
      continue;
    const Launch &l = st.launch;
    const ProgramNode &node = program.nodes[st.node];
    const InstOp &op = *program.kernels[l.kernel].op;
    KernelEstimate e;
    e.node = node.name;
    e.op = node.op;
    const KernelTypes types{l.inputElements, l.outputElement};
    double inputBytes = 0;
    for (size_t q = 0; q < l.inputBoxes.size(); ++q)
      inputBytes += static_cast<double>(boxBytes(l.inputBoxes[q], types.input(q)));
    double outputs = 1;
    for (unsigned v : op.outputVars)
      outputs *= extent(l.ranges, v);
    const double outputBytes = static_cast<double>(elementBytes(l.outputElement));
    e.minBytes = inputBytes + outputBytes * outputs;
    if (!cpp[l.kernel])
      cpp[l.kernel] = scheduleKernel(op, ScheduleTarget::Cpp);
    const double minFlops = 2 * scheduledIterations(op, *cpp[l.kernel], l.ranges);
    // The library call the backend makes, if any (the same decision: libraryCall).
    const LibraryCall call = libraryCall(op, node.shapes, l.ranges, l.inputBoxes, types);
    if (call.kind != LibraryCall::None) {
      e.library = true;
      e.how = call.describe();
      e.tensorCores = call.tensorCores();
      if (call.kind == LibraryCall::Affine)
        e.launches =
            static_cast<unsigned>(call.affine.products.size()) + (call.affine.hasRest ? 1 : 0);
    }
    if (e.library) {
      e.bytes = e.minBytes;
      e.flops = minFlops;
      // Conversions around a call the library takes in float32 only: each widened operand
      // read (2 bytes) and written and read again (4 each); a staged result written and
      // read (4 each) and rounded (2).
      for (size_t q = 0; q < call.widen.size(); ++q)
        if (call.widen[q]) {
          ++e.launches;
          e.bytes += 10.0 * static_cast<double>(boxElements(l.inputBoxes[q]));
        }
      if (call.staged) {
        ++e.launches;
        e.bytes += 8 * outputs;
      }
    } else {
      const std::pair<unsigned, std::string> key{l.kernel, types.describe(l.inputBoxes.size())};
      auto found = sources.find(key);
      if (found == sources.end()) {
        auto k = generateKernel(op, KernelDialect::Cuda, types);
        if (!k)
          return k.takeError();
        k->code.clear();
        found = sources.emplace(key, std::move(*k)).first;
      }
      const KernelSource &k = found->second;
      const GeneratedLaunch g = planGeneratedLaunch(k, op, l.ranges);
      auto &slot = g.multi ? cudaMulti[l.kernel] : cudaOne[l.kernel];
      if (!slot)
        slot = scheduleKernel(op, g.multi ? ScheduleTarget::CudaPasses : ScheduleTarget::Cuda);
      const KernelSchedule &s = *slot;
      e.how = g.describe() + (call.declined.empty() ? "" : " (not " + call.declined + ")");
      e.blocks = g.blocks;
      e.threads = kKernelThreads;
      e.flops = 2 * scheduledIterations(op, s, l.ranges);
      // The main launch: a thread per output (each computing the main nest's reductions),
      // or a block per group (splitting them across its threads).
      const double reductions = nestWork(s, -1, op.outputVars, l.ranges);
      double chain =
          g.perBlock
              ? ceilDiv(static_cast<double>(g.groups), g.blocks) *
                    (std::max(1.0, reductions / threads) +
                     ceilDiv(outputs / std::max<double>(1, static_cast<double>(g.groups)), threads))
              : ceilDiv(outputs, g.blocks * threads) * (1 + reductions);
      double temporaries = 0;
      for (const GeneratedLaunch::Pass &p : g.passes) {
        const Red *t = nullptr;
        for (const Red &r : s.reductions)
          if (r.id == p.temporary->id)
            t = &r;
        if (!t)
          continue;
        const double perValue =
            visitedTerms(*t, l.ranges) + nestWork(s, static_cast<int>(t->id), t->depends, l.ranges);
        const double parts = static_cast<double>(p.parts);
        chain += ceilDiv(static_cast<double>(p.values) * parts, p.blocks) *
                     std::max(1.0, perValue / parts / threads) +
                 (p.parts > 1 ? parts : 0);
        temporaries += static_cast<double>(p.values) * (p.parts > 1 ? 1 + parts : 1);
        e.launches += p.parts > 1 ? 2 : 1;
      }
      e.chain = chain;
      // Each pass reads the inputs again, and so does each reduction the main launch
      // computes where a thread's or block's share of the inputs is too large to stay in
      // its part of the cache (a batch norm's statistics, channel by channel); temporaries
      // are written and read.
      double sweeps = 1;
      unsigned mainReductions = 0;
      for (const Red &r : s.reductions)
        mainReductions += r.placement == Placement::Inline && r.nest == -1;
      const double sharers = g.perBlock ? static_cast<double>(g.groups) : outputs;
      if (mainReductions > 0 && inputBytes / std::max(1.0, sharers) > gpu.cachePerBlock)
        sweeps += mainReductions;
      e.bytes = inputBytes * (static_cast<double>(g.passes.size()) + sweeps) +
                outputBytes * outputs + 8 * temporaries;
    }
    const double peak = e.tensorCores ? gpu.bf16 : gpu.fp32;
    e.boundSeconds =
        std::max({e.minBytes / gpu.bandwidth, std::min(minFlops, e.flops) / peak, gpu.launch});
    e.estimateSeconds =
        e.library ? std::max({e.boundSeconds, e.bytes / gpu.bandwidth, e.launches * gpu.launch})
                  : std::max({e.bytes / gpu.bandwidth, e.flops / gpu.fp32, e.chain / gpu.clock,
                              e.launches * gpu.launch});
    out.push_back(std::move(e));
  }
  return out;
}

std::string formatKernelReport(const std::vector<KernelEstimate> &report, const GpuModel &gpu) {
  std::string out = fmt::format(
      "Kernels of one step on an {} (roofline: {:.2f} TB/s, {:.0f} TFLOP/s FP32, {:.0f} TFLOP/s "
      "BF16 on tensor cores, {:.2f} GHz, {:.0f} us a launch; no device used)\n\n",
      gpu.name, gpu.bandwidth / 1e12, gpu.fp32 / 1e12, gpu.bf16 / 1e12, gpu.clock / 1e9,
      1e6 * gpu.launch);
  out += "| node | op | how | launches | grid x block | serial chain | MB | GFLOP | bound us | "
         "estimate us | estimate / bound |\n";
  out += "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  double bound = 0, estimate = 0, generatedBound = 0, generatedEstimate = 0;
  const KernelEstimate *worst = nullptr;
  for (const KernelEstimate &e : report) {
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {:.0f} | {:.2f} | {:.3f} | {:.1f} | {:.1f} | "
        "{:.2f} |\n",
        e.node, e.op, e.how, e.launches,
        e.library ? std::string("library") : fmt::format("{} x {}", e.blocks, e.threads), e.chain,
        e.bytes / 1e6, e.flops / 1e9, 1e6 * e.boundSeconds, 1e6 * e.estimateSeconds, e.ratio());
    bound += e.boundSeconds;
    estimate += e.estimateSeconds;
    if (!e.library) {
      generatedBound += e.boundSeconds;
      generatedEstimate += e.estimateSeconds;
      if (!worst || e.ratio() > worst->ratio())
        worst = &e;
    }
  }
  out += fmt::format("\n{} launches: bound {:.2f} ms, estimate {:.2f} ms; generated kernels: bound "
                     "{:.2f} ms, estimate {:.2f} ms",
                     report.size(), 1e3 * bound, 1e3 * estimate, 1e3 * generatedBound,
                     1e3 * generatedEstimate);
  if (worst)
    out += fmt::format("; farthest from its bound: {} ({}, {:.2f}x)", worst->node, worst->op,
                       worst->ratio());
  return out + "\n";
}

} // namespace tofu::cuda
