// What each kernel of a step would cost on a GPU, estimated on the host with no device:
// per launch of one worker's step, how the CUDA backend runs it (the library call, or the
// generated kernel's variant, grid and block, as cuda::planGeneratedLaunch decides), the
// longest serial chain of loop iterations one thread runs, the bytes and FLOPs, and a
// roofline on a given GPU (an H100 by default):
//  - bound: the least time the share can take: the bytes it must move (every input region
//    read once, the output written once, at their element types' sizes) over the memory
//    bandwidth, or its FLOPs (each reduction computed once per value) over the FP32 peak
//    (the BF16 tensor-core peak for a library product on bfloat16 operands), whichever is
//    longer;
//  - estimate: what the schedule the backend runs costs: the bytes its launches move (each
//    temporary's pass reads the inputs again, and so does each reduction of the main
//    launch whose share does not stay in cache), its FLOPs, and its serial chain over the
//    clock (one iteration per cycle: a thread that runs a long sum alone, or a block that
//    computes a scalar's reduction alone, is far from the bound however fast each
//    iteration is).
// Neither is below the time of its launches (GpuModel::launch each).
// Library calls (cuBLAS, cuDNN) are taken to run at their bound, plus the conversions
// around one the library takes in float32 only (LibraryCall). The estimate is a model,
// not a measurement: tools/gpu_check.sh prints it beside the measured times.
#ifndef TOFU_RUNTIME_CUDA_KERNEL_REPORT_H
#define TOFU_RUNTIME_CUDA_KERNEL_REPORT_H

#include <string>
#include <vector>

#include "codegen/program.h"
#include "llvm/Support/Error.h"

namespace tofu::cuda {

/// The GPU the roofline is drawn for.
struct GpuModel {
  std::string name = "H100 SXM";
  double bandwidth = 3.35e12; ///< bytes per second (HBM3)
  double fp32 = 67e12;        ///< FLOPs per second (FP32, no tensor cores)
  double bf16 = 989e12;       ///< FLOPs per second (BF16 on tensor cores, dense)
  double clock = 1.98e9;      ///< cycles per second (boost)
  /// The least time a launch takes (issue and a grid's start and end): no bound is below
  /// one launch's, and a multi-launch variant pays one per launch.
  double launch = 2e-6;
  /// Cache bytes one resident block can count on (50 MB of L2 over some 1000 blocks): a
  /// block whose share of the inputs is larger reads them from memory once per reduction.
  double cachePerBlock = 48e3;
};

struct KernelEstimate {
  std::string node, op;
  std::string how;          ///< the library call, or the generated kernel's variant
  bool library = false;     ///< a cuBLAS / cuDNN / scatter-add call
  bool tensorCores = false; ///< a product or convolution on bfloat16 operands
  unsigned launches = 1;    ///< kernel launches (a multi-launch variant's passes included)
  unsigned blocks = 0;      ///< the main launch's grid (0: a library call)
  unsigned threads = 0;     ///< threads per block
  double chain = 0;         ///< the longest serial chain of loop iterations of one thread
  double bytes = 0, minBytes = 0;
  double flops = 0;
  double boundSeconds = 0, estimateSeconds = 0;

  double ratio() const { return boundSeconds > 0 ? estimateSeconds / boundSeconds : 1; }
};

/// The estimate of every launch of worker `worker`'s step, in program order. Fails for an
/// op with no CUDA kernel.
llvm::Expected<std::vector<KernelEstimate>>
kernelReport(const Program &program, unsigned worker = 0, const GpuModel &gpu = {});

/// The report as a markdown table, with the totals and the largest ratio.
std::string formatKernelReport(const std::vector<KernelEstimate> &report, const GpuModel &gpu);

} // namespace tofu::cuda

#endif // TOFU_RUNTIME_CUDA_KERNEL_REPORT_H
