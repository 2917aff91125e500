// Every strategy of every op whose body has a library form (matrix products, convolutions
// and their gradients, scatter-adds, sums of products with a bias; runtime/library_kernels.h), with
// each worker's share computed by its oneDNN call wherever one expresses the share, reproduces the
// interpreter's unpartitioned result. The library must take most shares of the ops it claims, so a
// matcher that silently declines everything fails here too.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "runtime/kernel_verify.h"
#include "runtime/library_kernels.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(VerifyLibrary, EveryStrategyOfLibraryFormOpsOnOneDnn) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  SourceManager sources;
  DiagnosticEngine diags(sources);
  LibraryUse use;
  VerifyOptions verify;
  verify.evaluate = libraryEvaluator(nullptr, &use);
  verify.tolerance = kFloat32VerifyTolerance;
  verify.trials = 3;
  unsigned strategies = 0;
  double worst = 0;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    for (const OpCheck &c : verifyFile(*module, file, verify)) {
      EXPECT_TRUE(c.problem.empty()) << file << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++strategies;
        worst = std::max(worst, s.maxRelError);
        EXPECT_TRUE(s.ok) << file << ": " << c.op << " split " << s.strategy << ": " << s.problem
                          << " (shapes " << c.shapes << ")";
      }
    }
  }
  unsigned library = 0, declined = 0;
  for (const auto &[op, n] : use) {
    std::printf("%-28s %4u shares on a library kernel, %3u declined\n", op.c_str(), n.first,
                n.second);
    library += n.first;
    declined += n.second;
  }
  std::printf("verified %u strategies; %u shares on library kernels, %u declined; largest relative "
              "difference %.3g\n",
              strategies, library, declined, worst);
  // The ops the library must take, by form.
  for (const char *op : {"MatMul", "MatMulBcastB", "matmul_nt", "matmul_tn", "matmul_bcast_grad_a",
                         "matmul_bcast_grad_w", "gemm_grad_a_nn", "Conv1d", "Conv2d", "Conv3d",
                         "conv2d_grad_data", "conv2d_grad_filter", "conv1d_grad_data",
                         "conv1d_grad_filter", "gather_grad", "lstm_gates"}) {
    ASSERT_TRUE(use.count(op)) << op << " has no library form";
    EXPECT_GT(use[op].first, 3 * use[op].second) << op << ": the library declines too many shares";
  }
}

} // namespace
} // namespace tofu
