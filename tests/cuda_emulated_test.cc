// Every strategy of every op, with each worker's share computed by the op's generated CUDA
// kernel compiled for the host — the CUDA source itself, its blockIdx/threadIdx mapped to
// one thread that walks the whole grid-stride loop — called with the argument block the
// CUDA backend builds (runtime/cuda/launch_params.h), reproduces the interpreter's
// unpartitioned result. Without a GPU this checks the CUDA dialect's index arithmetic,
// loads, reductions and opaque-function helpers, and the argument layout. Where a kernel
// has a block-per-output variant (long reductions split across a block's threads), that
// runs too, one thread per block, and must agree bit for bit. The GPU run
// (tools/gpu_check.sh) checks what one thread cannot: many threads at once.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "runtime/cuda/launch_params.h"
#include "runtime/kernel_verify.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// What CUDA C++ the generated kernels use, as host C++: one block of one thread.
const char *kEmulation = R"(
#ifndef TOFU_CUDA_EMULATION
#define TOFU_CUDA_EMULATION
#define __global__
#define __device__
#define __forceinline__ inline
struct TofuDim3 { unsigned x, y, z; };
static const TofuDim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static const TofuDim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define TOFU_OPQ_MAX 256
static inline float tofu_block_reduce(float v, int) { return v; } // one thread per block
#endif
)";

/// The CUDA kernel `k` as a host function `<entry>_emu` taking the argument block, where
/// `entry` is the kernel or its block variant. (Each is its own source, the kernel renamed
/// for the block variant's, so that two sources in one unit define distinct symbols.)
KernelSource emulated(const KernelSource &k, bool block) {
  KernelSource e;
  std::string code = k.code, name = k.name;
  if (block) {
    name = k.name + "_b";
    for (size_t at = code.find(k.name); at != std::string::npos;
         at = code.find(k.name, at + name.size()))
      code.replace(at, k.name.size(), name);
  }
  const std::string entry = block ? blockKernelName(name) : name;
  e.name = (block ? blockKernelName(k.name) : k.name) + "_emu";
  e.code = std::string(kEmulation) + code + "extern \"C\" void " + e.name +
           "(const TofuKernelArgs *block) { " + entry + "(*reinterpret_cast<const " + name +
           "_args *>(static_cast<const void *>(block))); }\n";
  return e;
}

TEST(CudaEmulated, EveryStrategyOfEveryOpOnItsCudaKernel) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::vector<ir::Module> modules;
  std::vector<KernelSource> kernels;
  std::vector<std::string> notGenerated;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    for (KernelSource &k : verificationKernels(*module, file, &notGenerated, KernelDialect::Cuda)) {
      kernels.push_back(emulated(k, false));
      if (!k.blockReductions.empty())
        kernels.push_back(emulated(k, true));
    }
    modules.push_back(std::move(*module));
  }
  for (const std::string &why : notGenerated)
    ADD_FAILURE() << "no CUDA kernel: " << why;
  KernelCompileOptions options;
  options.cacheDir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                     "/emulated";
  options.flags = "-O1 -fno-math-errno -fPIC -shared -std=c++17 -w";
  CpuKernelLibrary lib;
  llvm::Error e = lib.add(kernels, options);
  ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  std::printf("compiled %u emulated CUDA kernels in %u units in %.1f s\n", lib.stats().kernels,
              lib.stats().units, lib.stats().seconds);

  VerifyOptions verify;
  unsigned calls = 0, blockCalls = 0;
  verify.evaluate = [&](const InstOp &op, const Shapes &shapes,
                        const std::vector<const Tensor *> &inputs,
                        const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    auto k = generateKernel(op, KernelDialect::Cuda);
    if (!k)
      return k.takeError();
    CpuKernelLibrary::Fn fn = lib.find(k->name + "_emu");
    if (!fn)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "kernel %s was not compiled", k->name.c_str());
    ++calls;
    auto run = [&](CpuKernelLibrary::Fn kernel) {
      return runOnRegions(
          op, shapes, inputs, ranges,
          [&](const std::vector<Box> &regions, const float *const *in, float *out) {
            std::vector<const float *> ptrs(in, in + op.inputs.size());
            std::vector<unsigned char> block =
                cuda::kernelArgBlock(kernelInts(op, shapes, ranges, regions), ptrs, out,
                                     readsInsideRegions(op, shapes, ranges, regions));
            kernel(reinterpret_cast<const TofuKernelArgs *>(block.data()));
          });
    };
    Tensor perThread = run(fn);
    if (!k->blockReductions.empty()) {
      CpuKernelLibrary::Fn blk = lib.find(blockKernelName(k->name) + "_emu");
      if (!blk)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "block variant of %s was not compiled", k->name.c_str());
      ++blockCalls;
      Tensor perBlock = run(blk);
      for (int64_t e = 0; e < perThread.size(); ++e)
        if (!(perThread.data[e] == perBlock.data[e]) &&
            !(std::isnan(perThread.data[e]) && std::isnan(perBlock.data[e])))
          return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "the block variant differs at element %lld: %g vs %g",
                                         static_cast<long long>(e), perBlock.data[e],
                                         perThread.data[e]);
    }
    return perThread;
  };
  verify.tolerance = kFloat32VerifyTolerance;
  verify.trials = 2;
  unsigned ops = 0, strategies = 0;
  double worst = 0;
  for (size_t f = 0; f < files.size(); ++f)
    for (const OpCheck &c : verifyFile(modules[f], files[f], verify)) {
      ++ops;
      EXPECT_TRUE(c.problem.empty()) << files[f] << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++strategies;
        worst = std::max(worst, s.maxRelError);
        EXPECT_TRUE(s.ok) << files[f] << ": " << c.op << " split " << s.strategy << ": "
                          << s.problem << " (shapes " << c.shapes << ")";
      }
    }
  std::printf("verified %u strategies of %u ops on their CUDA kernels (%u shares computed, %u "
              "also by the block variant); largest relative difference %.3g\n",
              strategies, ops, calls, blockCalls, worst);
  EXPECT_GT(blockCalls, calls / 4); // reductions are common: the variant must be there
  EXPECT_GE(strategies, 900u);
}

} // namespace
} // namespace tofu
