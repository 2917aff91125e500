// Every strategy of every op in every .tdl file of the repository, with each worker's share
// computed by the op's generated C++ kernel (float32, compiled as the engine compiles them),
// reproduces the unpartitioned result of the double-precision interpreter; and every op's
// kernel is generated (opaque functions through their native implementations).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "runtime/kernel_verify.h"
#include "testing/suite.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(VerifyCompiled, EveryStrategyOfEveryOpOnCompiledKernels) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::vector<ir::Module> modules;
  std::vector<KernelSource> kernels;
  std::vector<std::string> notCompiled;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    for (KernelSource &k : verificationKernels(*module, file, &notCompiled))
      kernels.push_back(std::move(k));
    modules.push_back(std::move(*module));
  }
  KernelCompileOptions options;
  options.cacheDir = testKernelCache();
  CpuKernelLibrary lib;
  llvm::Error e = lib.add(kernels, options); // one batch, as a graph's kernels are built
  ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  std::printf("compiled %u kernels in %u units in %.1f s\n", lib.stats().kernels, lib.stats().units,
              lib.stats().seconds);
  for (const std::string &why : notCompiled)
    ADD_FAILURE() << "no generated kernel: " << why;

  VerifyOptions verify;
  verify.evaluate = compiledEvaluator(lib, options);
  verify.tolerance = kFloat32VerifyTolerance;
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
  std::printf("verified %u strategies of %u ops on compiled kernels; largest relative "
              "difference %.3g\n",
              strategies, ops, worst);
  EXPECT_GE(strategies, 900u);
}

} // namespace
} // namespace tofu
