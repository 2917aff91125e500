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
#include "runtime/cpu_kernels.h"
#include "runtime/kernel_verify.h"
#include "runtime/library_kernels.h"
#include "support/bf16.h"
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

// Every strategy of `file`'s ops with each share's bfloat16 operands on oneDNN's native
// bf16 matmul or convolution (bf16LibraryKernel), where this CPU has them: on inputs
// bfloat16 holds exactly, each product of two is exact in float32, so the share matches the
// interpreter within float32's accumulation tolerance. Skipped, saying so, on a CPU without
// bfloat16 products (the CPU backend then widens the operands around the float32 call,
// which the test above covers). Each op of `ops` must run natively somewhere.
void verifyOnNativeBf16(const char *file, const char *what, std::vector<const char *> ops) {
  SourceManager sources;
  DiagnosticEngine diags(sources);
  auto module = loadModule(file, diags);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  LibraryUse use;
  VerifyOptions verify;
  verify.quantize = [](double v) { return double(roundToBf16(static_cast<float>(v))); };
  verify.evaluate = [&use](const InstOp &op, const Shapes &shapes,
                           const std::vector<const Tensor *> &inputs,
                           const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    // Every input of rank above 0 bfloat16 (a scale stays float32).
    std::vector<bool> bf16(shapes.inputs.size());
    for (size_t q = 0; q < bf16.size(); ++q)
      bf16[q] = !shapes.inputs[q].empty();
    auto k = hasLibraryForm(op)
                 ? bf16LibraryKernel(op, shapes, ranges, inputRegions(op, shapes, ranges), bf16)
                 : nullptr;
    ++(k ? use[op.name].first : use[op.name].second);
    if (!k)
      return evaluate(op, shapes, inputs, ranges);
    return runOnRegions(op, shapes, inputs, ranges,
                        [&](const std::vector<Box> &regions, const float *const *in, float *out) {
                          std::vector<std::vector<uint16_t>> narrow(regions.size());
                          std::vector<const float *> given(in, in + regions.size());
                          for (size_t q = 0; q < regions.size(); ++q)
                            if (bf16[q]) {
                              const size_t n = std::max<int64_t>(1, boxElements(regions[q]));
                              narrow[q].resize(n);
                              toBf16(in[q], narrow[q].data(), n);
                              given[q] = reinterpret_cast<const float *>(narrow[q].data());
                            }
                          std::vector<char> scratch(k->scratchBytes() + 64);
                          char *aligned =
                              scratch.data() +
                              (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
                          k->run(given.data(), out, 1, aligned);
                        });
  };
  verify.tolerance = kFloat32VerifyTolerance;
  verify.trials = 2;
  unsigned strategies = 0;
  for (const OpCheck &c : verifyFile(*module, file, verify)) {
    EXPECT_TRUE(c.problem.empty()) << c.op << ": " << c.problem;
    for (const StrategyCheck &s : c.strategies) {
      ++strategies;
      EXPECT_TRUE(s.ok) << c.op << " split " << s.strategy << ": " << s.problem;
    }
  }
  unsigned native = 0;
  for (const auto &[op, n] : use)
    native += n.first;
  if (native == 0)
    GTEST_SKIP() << "this CPU has no native bfloat16 " << what
                 << " in oneDNN (no share ran on one)";
  std::printf("verified %u strategies of %s; %u shares on oneDNN's native bf16 %s\n", strategies,
              file, native, what);
  for (const char *op : ops)
    EXPECT_GT(use[op].first, 0u) << op << " never ran on the native bf16 " << what;
}

TEST(VerifyLibrary, ProductsOfBfloat16OperandsOnNativeMatmul) {
  verifyOnNativeBf16("ops/nn/linear.tdl", "matmul",
                     {"MatMul", "MatMulBcastB", "matmul_nt", "matmul_tn", "matmul_bcast_grad_a",
                      "matmul_bcast_grad_w"});
}

TEST(VerifyLibrary, ConvolutionsOfBfloat16OperandsOnNativeConvolution) {
  verifyOnNativeBf16("ops/nn/conv.tdl", "convolution",
                     {"Conv1d", "Conv2d", "Conv3d", "conv2d_grad_data", "conv2d_grad_filter",
                      "conv1d_grad_data", "conv1d_grad_filter"});
}

// A few rows times a large transposed matrix (a linear layer's input gradient at a small
// batch) runs as its transpose into scratch (GemmKernel's swapped path, which the random
// shapes above, at most 5 wide, never reach): every strategy of matmul_nt, and of the sum of
// products whose terms take that path, matches the interpreter, and the calls say so.
TEST(VerifyLibrary, FewRowsTimesALargeTransposedMatrix) {
  SourceManager sources;
  DiagnosticEngine diags(sources);
  auto module = loadModule("ops/nn/linear.tdl", diags);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  const ir::OpDef *def = module->findOp("matmul_nt");
  ASSERT_NE(def, nullptr);
  Instantiation inst;
  inst.groups = {{"b", 0}};
  auto table = analyzeOp(*def, completeForVerification(*def, inst, nullptr));
  ASSERT_TRUE(static_cast<bool>(table)) << llvm::toString(table.takeError());
  // The whole op is 3 x 96 over 7, and so is the split of k; splits of j leave 3 x 48.
  const std::vector<std::vector<int64_t>> shapes = {{3, 7}, {96, 7}};
  LibraryUse use;
  VerifyOptions verify;
  verify.evaluate = libraryEvaluator(nullptr, &use);
  verify.tolerance = kFloat32VerifyTolerance;
  verify.trials = 1;
  verify.exampleShapes = &shapes;
  OpCheck c = verifyStrategies(*table, verify);
  EXPECT_TRUE(c.problem.empty()) << c.problem;
  ASSERT_FALSE(c.strategies.empty());
  for (const StrategyCheck &s : c.strategies)
    EXPECT_TRUE(s.ok) << "split " << s.strategy << ": " << s.problem;
  ASSERT_TRUE(use.count("matmul_nt"));
  EXPECT_GT(use["matmul_nt"].first, 0u);
  EXPECT_EQ(use["matmul_nt"].second, 0u);
  // The whole op's call is the transposed one.
  Shapes whole;
  whole.inputs = shapes;
  std::vector<Range> ranges;
  for (const InstVar &v : table->op.vars) {
    const int64_t extent = v.name == "i" ? 3 : v.name == "j" ? 96 : 7;
    ranges.push_back({0, extent});
    whole.vars.push_back(extent);
  }
  auto kernel = libraryKernel(table->op, whole, ranges, {{{0, 3}, {0, 7}}, {{0, 96}, {0, 7}}});
  ASSERT_NE(kernel, nullptr);
  EXPECT_NE(kernel->describe().find("(as its transpose)"), std::string::npos) << kernel->describe();
  EXPECT_GE(kernel->scratchBytes(), 3u * 96 * sizeof(float));
}

} // namespace
} // namespace tofu
