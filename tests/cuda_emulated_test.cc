// Every strategy of every op, with each worker's share computed by the op's generated CUDA
// kernel compiled for the host — the CUDA source itself, its blockIdx/threadIdx mapped to
// one thread that walks the whole grid-stride loop — called with the argument block the
// CUDA backend builds (runtime/cuda/launch_params.h), reproduces the interpreter's
// unpartitioned result. Without a GPU this checks the CUDA dialect's index arithmetic,
// loads, reductions and opaque-function helpers, and the argument layout. Where a kernel
// has a block-per-output variant (long reductions split across a block's threads), that
// runs too, one thread per block, and must agree bit for bit. The GPU run
// (tools/gpu_check.sh) checks what one thread cannot: many threads at once. The same in
// bfloat16 storage, on a third of the files (rotating with the commit; every file with
// TOFU_FULL=1): the CUDA kernels that load bfloat16 and round their outputs to it, which
// the CUDA engine runs for --precision bf16.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "fmt/format.h"
#include "runtime/cuda/launch_params.h"
#include "runtime/kernel_verify.h"
#include "support/bf16.h"
#include "testing/suite.h"
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

/// How an emulated kernel runs: one launch (a thread per output, or the block variant),
/// or the multi-launch variant (KernelSource::passes: each temporary's pass, its combine,
/// then the main nest, a thread per output or its block variant).
enum class Variant { Thread, Block, Passes, PassesBlock };

/// The CUDA kernel `k` as a host function `<name><suffix>_emu` taking the argument block,
/// running `variant`. Each variant is its own source, the kernel renamed, so that the
/// sources in one unit define distinct symbols.
KernelSource emulated(const KernelSource &k, Variant variant) {
  static const char *suffixes[] = {"", "_blk", "_mp", "_mp_blk"};
  const char *suffix = suffixes[static_cast<int>(variant)];
  std::string code = k.code, name = k.name;
  if (variant != Variant::Thread) {
    name = k.name + "_v" + std::to_string(static_cast<int>(variant));
    for (size_t at = code.find(k.name); at != std::string::npos;
         at = code.find(k.name, at + name.size()))
      code.replace(at, k.name.size(), name);
  }
  std::string body = fmt::format("const {0}_args &a = *reinterpret_cast<const {0}_args *>("
                                 "static_cast<const void *>(block));\n",
                                 name);
  if (variant == Variant::Passes || variant == Variant::PassesBlock)
    for (const CudaTemporaryPass &t : k.passes) {
      body += temporaryPassName(name, t.id) + "(a);\n";
      body += "if (a.parts > 1) " + temporaryCombineName(name, t.id) + "(a);\n";
    }
  const bool block = variant == Variant::Block || variant == Variant::PassesBlock;
  const std::string main =
      variant == Variant::Passes || variant == Variant::PassesBlock ? passesKernelName(name) : name;
  body += (block ? blockKernelName(main) : main) + "(a);\n";
  KernelSource e;
  e.name = k.name + suffix + "_emu";
  e.code = std::string(kEmulation) + code + "extern \"C\" void " + e.name +
           "(const TofuKernelArgs *block) {\n" + body + "}\n";
  return e;
}

/// What verifying files on their emulated CUDA kernels found.
struct Emulated {
  unsigned ops = 0, strategies = 0, calls = 0, blockCalls = 0, passCalls = 0;
  size_t kernels = 0;
  double worst = 0;
};

/// Verifies every strategy of every op of `files` on its CUDA kernel for buffers of
/// `storage` (verificationTypes: bfloat16 inputs and whole outputs, float32 partial results)
/// compiled for the host, within `tolerance` (on values `quantize` gives, where set); the
/// block variant must agree bit for bit, the multi-launch variant within the float32
/// tolerance of the share's scale.
Emulated verifyEmulated(const std::vector<std::string> &files, loops::Element storage,
                        double tolerance, std::function<double(double)> quantize = {}) {
  Emulated out;
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::vector<ir::Module> modules;
  std::vector<KernelSource> kernels;
  std::vector<std::string> notGenerated;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    if (!module) {
      ADD_FAILURE() << file << ": " << llvm::toString(module.takeError());
      return out;
    }
    for (KernelSource &k :
         verificationKernels(*module, file, &notGenerated, KernelDialect::Cuda, storage)) {
      kernels.push_back(emulated(k, Variant::Thread));
      if (!k.blockReductions.empty())
        kernels.push_back(emulated(k, Variant::Block));
      if (!k.passes.empty())
        kernels.push_back(emulated(k, Variant::Passes));
      if (!k.passes.empty() && !k.passesBlockReductions.empty())
        kernels.push_back(emulated(k, Variant::PassesBlock));
    }
    modules.push_back(std::move(*module));
  }
  for (const std::string &why : notGenerated)
    ADD_FAILURE() << "no CUDA kernel: " << why;
  KernelCompileOptions options;
  options.cacheDir = testKernelCache();
  options.flags = "-O1 -fno-math-errno -fPIC -shared -std=c++17 -w";
  CpuKernelLibrary lib;
  if (llvm::Error e = lib.add(kernels, options)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return out;
  }
  out.kernels = kernels.size();
  std::printf("compiled %u emulated CUDA kernels in %u units in %.1f s\n", lib.stats().kernels,
              lib.stats().units, lib.stats().seconds);

  VerifyOptions verify;
  unsigned &calls = out.calls, &blockCalls = out.blockCalls, &passCalls = out.passCalls;
  // Each temporary's pass in this many parts (some empty where its first variable's range
  // is shorter), so the partial results and their combine run too.
  constexpr int64_t kParts = 3;
  verify.evaluate = [&](const InstOp &op, const Shapes &shapes,
                        const std::vector<const Tensor *> &inputs,
                        const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    const KernelTypes types = verificationTypes(op, shapes, ranges, storage);
    auto k = generateKernel(op, KernelDialect::Cuda, types);
    if (!k)
      return k.takeError();
    CpuKernelLibrary::Fn fn = lib.find(k->name + "_emu");
    if (!fn)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "kernel %s was not compiled",
                                     k->name.c_str());
    ++calls;
    // The temporaries and, for kParts parts each, their partial results.
    int64_t scratchFloats = 0, partials = 0;
    for (const CudaTemporaryPass &t : k->passes) {
      int64_t values = 1;
      for (unsigned v : t.depends)
        values *= ranges[v].size();
      scratchFloats += values;
      partials = std::max(partials, values * kParts);
    }
    std::vector<float> scratch(static_cast<size_t>(scratchFloats + partials) + 1, NAN);
    auto run = [&](CpuKernelLibrary::Fn kernel) {
      return runOnRegions(
          op, shapes, inputs, ranges,
          [&](const std::vector<Box> &regions, const float *const *in, float *out) {
            withKernelBuffers(
                op, ranges, regions, in, out, types, [&](const float *const *given, float *dst) {
                  std::vector<const float *> ptrs(given, given + op.inputs.size());
                  std::vector<unsigned char> block = cuda::kernelArgBlock(
                      kernelInts(op, shapes, ranges, regions), ptrs, dst,
                      readsInsideRegions(op, shapes, ranges, regions), scratch.data(), kParts);
                  kernel(reinterpret_cast<const TofuKernelArgs *>(block.data()));
                });
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
          return llvm::createStringError(
              llvm::inconvertibleErrorCode(), "the block variant differs at element %lld: %g vs %g",
              static_cast<long long>(e), perBlock.data[e], perThread.data[e]);
    }
    // The multi-launch variant sums in another order (parts): equal within the float32
    // tolerance, relative to the share's largest magnitude.
    for (bool block : {false, true}) {
      if (k->passes.empty() || (block && k->passesBlockReductions.empty()))
        continue;
      const std::string entry = k->name + (block ? "_mp_blk" : "_mp") + "_emu";
      CpuKernelLibrary::Fn mp = lib.find(entry);
      if (!mp)
        return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s was not compiled",
                                       entry.c_str());
      ++passCalls;
      Tensor passes = run(mp);
      double scale = 0;
      for (int64_t e = 0; e < perThread.size(); ++e)
        if (std::isfinite(perThread.data[e]))
          scale = std::max(scale, std::fabs(static_cast<double>(perThread.data[e])));
      for (int64_t e = 0; e < perThread.size(); ++e) {
        const float x = passes.data[e], y = perThread.data[e];
        const bool same = (std::isnan(x) && std::isnan(y)) || x == y ||
                          std::fabs(static_cast<double>(x) - y) <=
                              kFloat32VerifyTolerance * std::max(scale, 1e-30);
        if (!same)
          return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "the multi-launch variant%s differs at element %lld: "
                                         "%g vs %g",
                                         block ? " (block main nest)" : "",
                                         static_cast<long long>(e), x, y);
      }
    }
    return perThread;
  };
  verify.tolerance = tolerance;
  verify.quantize = std::move(quantize);
  verify.trials = 2;
  for (size_t f = 0; f < files.size(); ++f)
    for (const OpCheck &c : verifyFile(modules[f], files[f], verify)) {
      ++out.ops;
      EXPECT_TRUE(c.problem.empty()) << files[f] << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++out.strategies;
        out.worst = std::max(out.worst, s.maxRelError);
        EXPECT_TRUE(s.ok) << files[f] << ": " << c.op << " split " << s.strategy << ": "
                          << s.problem << " (shapes " << c.shapes << ")";
      }
    }
  return out;
}

TEST(CudaEmulated, EveryStrategyOfEveryOpOnItsCudaKernel) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  const Emulated v = verifyEmulated(files, loops::Element::F32, kFloat32VerifyTolerance);
  std::printf("verified %u strategies of %u ops on their CUDA kernels (%u shares computed, %u "
              "also by the block variant, %u by the multi-launch variants); largest relative "
              "difference %.3g\n",
              v.strategies, v.ops, v.calls, v.blockCalls, v.passCalls, v.worst);
  EXPECT_GT(v.blockCalls, v.calls / 4); // reductions are common: the variant must be there
  EXPECT_GT(v.passCalls, v.calls / 20); // normalisations and losses have temporaries
  EXPECT_GE(v.strategies, 900u);
}

// Every third file's ops on their bfloat16 CUDA kernels, on inputs bfloat16 holds exactly,
// within the tolerance one rounding of each output gives (as verify_compiled_test checks the
// C++ ones).
TEST(CudaEmulated, StrategiesOnBfloat16CudaKernels) {
  std::vector<std::string> all = findTdlFiles({"tests/tdl/good", "ops"}), files;
  for (size_t i = 0; i < all.size(); ++i)
    if (runsInSampledCheck(i, 3))
      files.push_back(all[i]);
  ASSERT_FALSE(files.empty());
  const Emulated v =
      verifyEmulated(files, loops::Element::BF16, kBfloat16VerifyTolerance, [](double x) {
        return static_cast<double>(roundToBf16(static_cast<float>(x)));
      });
  std::printf("bfloat16: verified %u strategies of %u ops in %zu of %zu files on their CUDA "
              "kernels (%zu emulated kernels; %u shares, %u also by the block variant, %u by the "
              "multi-launch variants); largest relative difference %.3g (tolerance %.3g)\n",
              v.strategies, v.ops, files.size(), all.size(), v.kernels, v.calls, v.blockCalls,
              v.passCalls, v.worst, kBfloat16VerifyTolerance);
  EXPECT_GT(v.strategies, 0u);
  EXPECT_GT(v.worst, kFloat32VerifyTolerance); // the outputs' rounding is seen
}

} // namespace
} // namespace tofu
