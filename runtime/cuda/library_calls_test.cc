// The cuBLAS and cuDNN parameter mapping, checked without a GPU: every strategy of every op
// with a matrix-product, convolution or scatter-add form, each worker's share computed by
// running its call descriptor (leading dimensions, batch strides, views, paddings of halo
// shares; the scatter-add's parameters through the device's own element function) in a
// host reference with the library's semantics, reproduces the interpreter's result. The
// mapping must take most shares of the ops it claims.
#include "runtime/cuda/launch_params.h"
#include "runtime/cuda/library_calls.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "runtime/kernel_verify.h"
#include "gtest/gtest.h"

namespace tofu::cuda {
namespace {

struct Use {
  unsigned taken = 0, declined = 0;
};

ShareEvaluator referenceEvaluator(std::map<std::string, Use> *use,
                                  std::map<std::string, unsigned> *reasons) {
  return [use, reasons](const InstOp &op, const Shapes &shapes,
                        const std::vector<const Tensor *> &inputs,
                        const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    const std::vector<Box> held = inputRegions(op, shapes, ranges);
    if (hasGemmForm(op)) {
      auto plan = gemmPlan(op, ranges, held);
      ++(plan ? (*use)[op.name].taken : (*use)[op.name].declined);
      if (plan) {
        const CublasGemm g = cublasGemm(*plan);
        return runOnRegions(op, shapes, inputs, ranges,
                            [&](const std::vector<Box> &, const float *const *in, float *out) {
                              referenceGemm(g, in, out);
                            });
      }
    } else if (hasConvForm(op)) {
      std::optional<CudnnConv> c;
      std::string why;
      if (auto plan = convPlan(op, shapes, ranges, held))
        c = cudnnConv(*plan, held, &why);
      else
        why = "no plan";
      ++(c ? (*use)[op.name].taken : (*use)[op.name].declined);
      if (!c)
        ++(*reasons)[why.substr(0, why.find(" ("))];
      if (c)
        return runOnRegions(op, shapes, inputs, ranges,
                            [&](const std::vector<Box> &, const float *const *in, float *out) {
                              referenceConv(*c, in, out);
                            });
    } else if (hasAffineGemmForm(op)) {
      std::optional<CublasAffine> a;
      if (auto plan = affineGemmPlan(op, ranges, held))
        a = cublasAffine(*plan);
      ++(a ? (*use)[op.name].taken : (*use)[op.name].declined);
      if (a)
        return runOnRegions(op, shapes, inputs, ranges,
                            [&](const std::vector<Box> &, const float *const *in, float *out) {
                              referenceAffine(*a, in, out);
                            });
    } else if (hasScatterForm(op)) {
      auto plan = scatterPlan(op, ranges, held);
      ++(plan ? (*use)[op.name].taken : (*use)[op.name].declined);
      if (plan)
        return runOnRegions(op, shapes, inputs, ranges,
                            [&](const std::vector<Box> &, const float *const *in, float *out) {
                              runScatterOnHost(*plan, in, out);
                            });
    }
    return evaluate(op, shapes, inputs, ranges);
  };
}

TEST(LibraryCalls, EveryStrategyOfMatrixAndConvolutionOpsThroughTheCallDescriptors) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::map<std::string, Use> use;
  std::map<std::string, unsigned> reasons;
  VerifyOptions verify;
  verify.evaluate = referenceEvaluator(&use, &reasons);
  verify.tolerance = kFloat32VerifyTolerance;
  verify.trials = 2;
  unsigned strategies = 0;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    for (const OpCheck &c : verifyFile(*module, file, verify)) {
      EXPECT_TRUE(c.problem.empty()) << file << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++strategies;
        EXPECT_TRUE(s.ok) << file << ": " << c.op << " split " << s.strategy << ": " << s.problem
                          << " (shapes " << c.shapes << ")";
      }
    }
  }
  unsigned taken = 0, declined = 0;
  for (const auto &[op, n] : use) {
    std::printf("%-28s %4u shares on cuBLAS/cuDNN, %3u declined\n", op.c_str(), n.taken,
                n.declined);
    taken += n.taken, declined += n.declined;
  }
  for (const auto &[why, n] : reasons)
    std::printf("declined convolution shares: %u for %s\n", n, why.c_str());
  std::printf("verified %u strategies; %u shares through call descriptors, %u declined\n",
              strategies, taken, declined);
  for (const char *op : {"MatMul", "MatMulBcastB", "matmul_nt", "matmul_tn", "matmul_bcast_grad_a",
                         "matmul_bcast_grad_w", "gemm_grad_a_nn", "Conv1d", "Conv2d", "Conv3d",
                         "conv2d_grad_data", "conv2d_grad_filter", "conv1d_grad_data",
                         "conv1d_grad_filter", "gather_grad", "lstm_gates"}) {
    ASSERT_TRUE(use.count(op)) << op << " has no library form";
    EXPECT_GT(use[op].taken, use[op].declined) << op << ": the mapping declines too many shares";
  }
}

/// A row-major product C[i, j] = sum_k A[i, k] B[k, j] is cuBLAS's column-major
/// C^T = B^T A^T: X is B (m = N), Y is A (n = M), leading dimensions unchanged.
TEST(LibraryCalls, RowMajorProductBecomesTheTransposedColumnMajorCall) {
  GemmPlan p;
  p.M = 3, p.N = 5, p.K = 4, p.lda = 4, p.ldb = 5, p.ldc = 5, p.a = 0, p.b = 1;
  p.outer = {GemmLoop{2, 12, 20, 15}, GemmLoop{7, 0, 0, 100}};
  p.inner = {GemmLoop{3, 1000, 2000, 0}};
  const CublasGemm g = cublasGemm(p);
  EXPECT_EQ(g.m, 5);
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.k, 4);
  EXPECT_EQ(g.x, 1u);
  EXPECT_EQ(g.y, 0u);
  EXPECT_EQ(g.ldx, 5);
  EXPECT_EQ(g.ldy, 4);
  // The longer loop is the batch; its strides swap into X (B's) and Y (A's) order.
  EXPECT_EQ(g.batch, 7);
  EXPECT_EQ(g.strideC, 100);
  ASSERT_EQ(g.loops.size(), 1u);
  EXPECT_EQ(g.loops[0].sa, 20);
  EXPECT_EQ(g.loops[0].sb, 12);
  ASSERT_EQ(g.inner.size(), 1u);
  EXPECT_EQ(g.inner[0].sa, 2000);
  EXPECT_EQ(g.calls(), 6);
  // And it computes the product.
  std::vector<float> A(3 * 4), B(4 * 5), C(15, -1);
  for (size_t i = 0; i < A.size(); ++i)
    A[i] = static_cast<float>(i % 7) - 3;
  for (size_t i = 0; i < B.size(); ++i)
    B[i] = static_cast<float>(i % 5) - 2;
  GemmPlan one = p;
  one.outer.clear(), one.inner.clear();
  const float *in[] = {A.data(), B.data()};
  referenceGemm(cublasGemm(one), in, C.data());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      float s = 0;
      for (int k = 0; k < 4; ++k)
        s += A[i * 4 + k] * B[k * 5 + j];
      EXPECT_EQ(C[i * 5 + j], s) << i << "," << j;
    }
}

/// A stride-2 convolution padded by 1 reads no trailing padding: the plan pads 1 before and
/// 0 after, and cuDNN's symmetric padding of 1 gives the same output size. A share padded
/// more after than before has no symmetric equivalent and is declined with the reason.
TEST(LibraryCalls, PaddingBecomesSymmetricOnlyWhereTheOutputSizeAgrees) {
  ConvPlan p;
  p.kind = ConvKind::Forward;
  p.src = {{0, 2}, {0, 3}, {0, 8}, {0, 8}};
  p.weights = {{0, 4}, {0, 3}, {0, 3}, {0, 3}};
  p.dst = {{0, 2}, {0, 4}, {0, 4}, {0, 4}};
  p.srcIn = 0, p.wIn = 1;
  p.strides = {2, 2}, p.dilations = {1, 1}, p.padBefore = {1, 1}, p.padAfter = {0, 0};
  p.outputElements = 2 * 4 * 4 * 4;
  std::vector<Box> held = {p.src, p.weights};
  auto c = cudnnConv(p, held);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->pad, (std::vector<int>{1, 1}));
  EXPECT_FALSE(c->stageWeights);
  EXPECT_EQ(c->x.strides, (std::vector<int>{192, 64, 8, 1}));
  // The share of output rows 2..3 of a stride-1 3x3 convolution padded 1, over an 4-row
  // input: it reads rows 1..4 of which row 4 is padding (0 before, 1 after).
  ConvPlan q = p;
  q.strides = {1, 1}, q.src = {{0, 2}, {0, 3}, {1, 4}, {0, 4}},
  q.dst = {{0, 2}, {0, 4}, {2, 4}, {0, 4}};
  q.padBefore = {0, 1}, q.padAfter = {1, 1};
  held = {{{0, 2}, {0, 3}, {0, 4}, {0, 4}}, p.weights};
  std::string why;
  EXPECT_FALSE(cudnnConv(q, held, &why).has_value());
  EXPECT_NE(why.find("uneven padding (0 before, 1 after) in spatial dimension 0"),
            std::string::npos)
      << why;
  // A weights view that is a slice of the held filter (a split over input channels held
  // whole) is gathered into dense scratch first.
  ConvPlan r = p;
  r.weights = {{0, 4}, {1, 3}, {0, 3}, {0, 3}};
  r.src = {{0, 2}, {1, 3}, {0, 8}, {0, 8}};
  held = {{{0, 2}, {0, 3}, {0, 8}, {0, 8}}, p.weights};
  auto s = cudnnConv(r, held);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->stageWeights);
  EXPECT_EQ(s->x.offset, 64);
  EXPECT_EQ(s->w.offset, 9);
  // A 1-D convolution is a 2-D one over a unit dimension, whose stride steps over the row.
  ConvPlan u;
  u.kind = ConvKind::Forward;
  u.src = {{0, 2}, {0, 3}, {0, 10}};
  u.weights = {{0, 4}, {0, 3}, {0, 3}};
  u.dst = {{0, 2}, {0, 4}, {0, 8}};
  u.srcIn = 0, u.wIn = 1;
  u.strides = {1}, u.dilations = {1}, u.padBefore = {0}, u.padAfter = {0};
  held = {u.src, u.weights};
  auto one = cudnnConv(u, held);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->x.dims, (std::vector<int>{2, 3, 1, 10}));
  EXPECT_EQ(one->x.strides, (std::vector<int>{30, 10, 10, 1}));
  EXPECT_EQ(one->y.strides, (std::vector<int>{32, 8, 8, 1}));
  EXPECT_EQ(one->pad, (std::vector<int>{0, 0}));
}

// The element types of the library calls in a bf16 plan: bfloat16 operands go to GemmEx
// (tensor cores) writing float32 or bfloat16; what one call cannot round once is staged in
// float32; mixes cuBLAS and cuDNN do not take are declined (the generated kernel runs them).
TEST(LibraryCalls, ElementTypesOfBfloat16Calls) {
  using loops::Element;
  const Element F = Element::F32, B = Element::BF16;
  CublasGemm g;
  g.x = 1, g.y = 0;
  auto types = [&](std::vector<const CublasGemm *> products, std::vector<Element> in, Element out) {
    return gemmElements(products, KernelTypes{in, out});
  };
  // bfloat16 operands into float32 (a weight's gradient) or bfloat16 (a linear's output):
  // one call rounds once.
  auto e = types({&g}, {B, B}, F);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->bf16Operands);
  EXPECT_FALSE(e->bf16Output || e->staged);
  e = types({&g}, {B, B}, B);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->bf16Operands && e->bf16Output);
  EXPECT_FALSE(e->staged);
  EXPECT_EQ(e->describe(), "bf16 x bf16 -> bf16");
  // float32 operands into bfloat16: no such GemmEx; computed in float32, rounded once.
  e = types({&g}, {F, F}, B);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->staged);
  EXPECT_EQ(e->describe(), "f32 x f32 -> bf16 (staged in f32)");
  // Several calls into a bfloat16 output (host loops, accumulating loops, a bias added
  // first) would round after each: staged.
  CublasGemm loops = g;
  loops.inner = {GemmLoop{3, 16, 16, 0}};
  e = types({&loops}, {B, B}, B);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->staged);
  CublasGemm adds = g;
  adds.accumulate = true;
  e = types({&adds}, {B, B}, B);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->staged);
  e = types({&g, &adds}, {B, B}, F);
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->staged); // float32 output: cuBLAS accumulates into it in float32
  // Mixes: declined with the reason.
  std::string why;
  EXPECT_FALSE(gemmElements({&g}, KernelTypes{{F, B}, F}, &why).has_value());
  EXPECT_EQ(why, "a product of bf16 and f32 operands");
  CublasGemm other = g;
  other.x = 2, other.y = 3;
  EXPECT_FALSE(gemmElements({&g, &other}, KernelTypes{{B, B, F, F}, F}, &why).has_value());
  EXPECT_EQ(why, "products of operands of different types");
  CublasGemm scaled = g;
  scaled.alphaInput = 2;
  EXPECT_FALSE(gemmElements({&scaled}, KernelTypes{{B, B, B}, B}, &why).has_value());
  EXPECT_EQ(why, "a bf16 scaling input");
  EXPECT_TRUE(gemmElements({&scaled}, KernelTypes{{B, B, F}, B}).has_value());

  // cuDNN: all three bfloat16, or all float32.
  CudnnConv c;
  c.x.input = 0, c.w.input = 1, c.y.input = -1;
  EXPECT_EQ(cudnnBf16(c, KernelTypes{{B, B}, B}), std::optional<bool>(true));
  EXPECT_EQ(cudnnBf16(c, KernelTypes{{F, F}, F}), std::optional<bool>(false));
  EXPECT_FALSE(cudnnBf16(c, KernelTypes{{B, B}, F}, &why).has_value());
  EXPECT_EQ(why, "x bf16, w bf16, y f32: cuDNN takes one type");
  CudnnConv filter; // a filter gradient: x and y read, w written
  filter.kind = ConvKind::Filter;
  filter.x.input = 0, filter.y.input = 1, filter.w.input = -1;
  EXPECT_EQ(cudnnBf16(filter, KernelTypes{{B, B}, B}), std::optional<bool>(true));
  EXPECT_FALSE(cudnnBf16(filter, KernelTypes{{B, F}, B}).has_value());
}

} // namespace
} // namespace tofu::cuda
