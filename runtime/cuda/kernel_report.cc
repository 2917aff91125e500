#include "runtime/cuda/kernel_report.h"

#include <algorithm>
#include <cmath>
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

int64_t boxBytes(const Box &b) { return boxElements(b) * static_cast<int64_t>(sizeof(float)); }

} // namespace

llvm::Expected<std::vector<KernelEstimate>> kernelReport(const Program &program, unsigned worker,
                                                         const GpuModel &gpu) {
  if (worker >= program.worker.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "worker %u of a program of %u workers", worker,
                                   static_cast<unsigned>(program.worker.size()));
  std::vector<std::optional<KernelSource>> sources(program.kernels.size());
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
    double inputBytes = 0;
    for (const Box &b : l.inputBoxes)
      inputBytes += static_cast<double>(boxBytes(b));
    double outputs = 1;
    for (unsigned v : op.outputVars)
      outputs *= extent(l.ranges, v);
    e.minBytes = inputBytes + 4 * outputs;
    if (!cpp[l.kernel])
      cpp[l.kernel] = scheduleKernel(op, ScheduleTarget::Cpp);
    const double minFlops = 2 * scheduledIterations(op, *cpp[l.kernel], l.ranges);
    // The library call the backend makes, if any.
    if (auto g = gemmPlan(op, l.ranges, l.inputBoxes)) {
      e.library = true;
      e.how = cublasGemm(*g).describe();
    } else if (auto c = convPlan(op, node.shapes, l.ranges, l.inputBoxes)) {
      if (auto call = cudnnConv(*c, l.inputBoxes)) {
        e.library = true;
        e.how = call->describe();
      }
    } else if (auto a = affineGemmPlan(op, l.ranges, l.inputBoxes)) {
      if (auto calls = cublasAffine(*a)) {
        e.library = true;
        e.how = calls->describe();
        e.launches = static_cast<unsigned>(calls->products.size()) + (calls->hasRest ? 1 : 0);
      }
    } else if (scatterPlan(op, l.ranges, l.inputBoxes)) {
      e.library = true;
      e.how = "scatter-add (atomic adds, one k per q)";
    }
    if (e.library) {
      e.bytes = e.minBytes;
      e.flops = minFlops;
    } else {
      if (!sources[l.kernel]) {
        auto k = generateKernel(op, KernelDialect::Cuda);
        if (!k)
          return k.takeError();
        k->code.clear();
        sources[l.kernel] = std::move(*k);
      }
      const KernelSource &k = *sources[l.kernel];
      const GeneratedLaunch g = planGeneratedLaunch(k, op, l.ranges);
      auto &slot = g.multi ? cudaMulti[l.kernel] : cudaOne[l.kernel];
      if (!slot)
        slot = scheduleKernel(op, g.multi ? ScheduleTarget::CudaPasses : ScheduleTarget::Cuda);
      const KernelSchedule &s = *slot;
      e.how = g.describe();
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
      e.bytes = inputBytes * (static_cast<double>(g.passes.size()) + sweeps) + 4 * outputs +
                8 * temporaries;
    }
    e.boundSeconds =
        std::max({e.minBytes / gpu.bandwidth, std::min(minFlops, e.flops) / gpu.fp32, gpu.launch});
    e.estimateSeconds = e.library ? std::max(e.boundSeconds, e.launches * gpu.launch)
                                  : std::max({e.bytes / gpu.bandwidth, e.flops / gpu.fp32,
                                              e.chain / gpu.clock, e.launches * gpu.launch});
    out.push_back(std::move(e));
  }
  return out;
}

std::string formatKernelReport(const std::vector<KernelEstimate> &report, const GpuModel &gpu) {
  std::string out = fmt::format(
      "Kernels of one step on an {} (roofline: {:.2f} TB/s, {:.0f} TFLOP/s FP32, {:.2f} GHz, "
      "{:.0f} us a launch; no device used)\n\n",
      gpu.name, gpu.bandwidth / 1e12, gpu.fp32 / 1e12, gpu.clock / 1e9, 1e6 * gpu.launch);
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
