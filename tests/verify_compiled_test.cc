// Every strategy of every op in every .tdl file of the repository, with each worker's share
// computed by the op's generated C++ kernel (float32, compiled as the engine compiles them),
// reproduces the unpartitioned result of the double-precision interpreter; and every op's
// kernel is generated (opaque functions through their native implementations). The same in
// bfloat16 storage: kernels that load bfloat16 and round their outputs to it, on a sample
// of the files (every file with TOFU_FULL=1).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "runtime/kernel_verify.h"
#include "support/bf16.h"
#include "testing/suite.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// What verifying `files` on compiled kernels of `storage` found.
struct Verified {
  unsigned ops = 0, strategies = 0;
  size_t kernels = 0;
  double worst = 0;
};

/// Loads `files`, compiles their verification kernels of `storage` in one batch (as a graph's
/// kernels are built), and verifies every strategy of every op on them within `tolerance`
/// (on values `quantize` gives, where set), each failure a test failure.
Verified verifyOnCompiled(const std::vector<std::string> &files, loops::Element storage,
                          double tolerance, std::function<double(double)> quantize = {}) {
  Verified out;
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::vector<ir::Module> modules;
  std::vector<KernelSource> kernels;
  std::vector<std::string> notCompiled;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    if (!module) {
      ADD_FAILURE() << file << ": " << llvm::toString(module.takeError());
      return out;
    }
    for (KernelSource &k :
         verificationKernels(*module, file, &notCompiled, KernelDialect::Cpp, storage))
      kernels.push_back(std::move(k));
    modules.push_back(std::move(*module));
  }
  if (storage != loops::Element::F32)
    for (const KernelSource &k : kernels)
      if (k.code.find("tofu_bf16") == std::string::npos)
        ADD_FAILURE() << "a bfloat16 variant reads and writes no bfloat16: "
                      << k.code.substr(0, 80);
  out.kernels = kernels.size();
  KernelCompileOptions options;
  options.cacheDir = testKernelCache();
  CpuKernelLibrary lib;
  if (llvm::Error e = lib.add(kernels, options)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return out;
  }
  std::printf("compiled %u kernels in %u units in %.1f s\n", lib.stats().kernels, lib.stats().units,
              lib.stats().seconds);
  for (const std::string &why : notCompiled)
    ADD_FAILURE() << "no generated kernel: " << why;

  VerifyOptions verify;
  verify.evaluate = compiledEvaluator(lib, options, 1, storage);
  verify.quantize = std::move(quantize);
  verify.tolerance = tolerance;
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

TEST(VerifyCompiled, EveryStrategyOfEveryOpOnCompiledKernels) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  const Verified v = verifyOnCompiled(files, loops::Element::F32, kFloat32VerifyTolerance);
  std::printf("verified %u strategies of %u ops on compiled kernels; largest relative "
              "difference %.3g\n",
              v.strategies, v.ops, v.worst);
  EXPECT_GE(v.strategies, 900u);
}

// Every third file (rotating with the commit), each of its ops' strategies on kernels whose
// float inputs and whole outputs are bfloat16 in memory (partial results float32), on inputs
// bfloat16 holds exactly, within the tolerance bfloat16's one rounding of each output gives.
TEST(VerifyCompiled, StrategiesOnBfloat16Kernels) {
  std::vector<std::string> all = findTdlFiles({"tests/tdl/good", "ops"}), files;
  for (size_t i = 0; i < all.size(); ++i)
    if (runsInSampledCheck(i, 3))
      files.push_back(all[i]);
  ASSERT_FALSE(files.empty());
  const Verified v =
      verifyOnCompiled(files, loops::Element::BF16, kBfloat16VerifyTolerance, [](double x) {
        return static_cast<double>(roundToBf16(static_cast<float>(x)));
      });
  std::printf("bfloat16: verified %u strategies of %u ops in %zu of %zu files on compiled "
              "kernels (%zu kernels); largest relative difference %.3g (tolerance %.3g)\n",
              v.strategies, v.ops, files.size(), all.size(), v.kernels, v.worst,
              kBfloat16VerifyTolerance);
  EXPECT_GT(v.strategies, 0u);
  // Rounding is seen: with every output rounded to bfloat16, some difference passes what
  // float32 kernels show.
  EXPECT_GT(v.worst, kFloat32VerifyTolerance);
}

} // namespace
} // namespace tofu
