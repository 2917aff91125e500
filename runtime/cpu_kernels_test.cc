// Generated C++ kernels compute what the interpreter does: whole ops and every kind of share
// (output splits, split reductions, halos and padding at the borders), nested reductions,
// data-dependent indices; a read outside the region a buffer holds gives NaN; the cache
// serves a second build without compiling, and a kernel shared by two batches is compiled once.
#include "runtime/cpu_kernels.h"

#include <cmath>
#include <filesystem>
#include <random>
#include <tuple>

#include <sys/wait.h>
#include <unistd.h>

#include "analysis/verify.h"
#include "graph/test_library.h"
#include "testing/suite.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

/// A cache of the test's own, not the suite's: the cache tests count what is compiled.
std::string cacheDir() { return testTmpDir("kernels"); }

KernelCompileOptions testOptions() {
  KernelCompileOptions o;
  o.cacheDir = cacheDir();
  o.flags = "-O1 -fopenmp -fPIC -shared -std=c++17 -w";
  return o;
}

InstOp instance(const std::string &opName, const Instantiation &inst) {
  const ir::OpDef *def = testLibrary().find(opName);
  EXPECT_NE(def, nullptr) << opName;
  auto op = instantiate(*def, inst);
  EXPECT_TRUE(bool(op)) << llvm::toString(op.takeError());
  return std::move(*op);
}

/// The kernel of `op`, compiled.
CpuKernelLibrary::Fn compile(CpuKernelLibrary &lib, const InstOp &op) {
  auto k = generateKernel(op, KernelDialect::Cpp);
  EXPECT_TRUE(bool(k)) << llvm::toString(k.takeError());
  llvm::Error e = lib.add({*k}, testOptions());
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  return lib.find(k->name);
}

/// The kernel against the interpreter on the whole op and on random shares.
void compare(const std::string &opName, const Instantiation &inst,
             const std::vector<std::vector<int64_t>> &inputShapes,
             std::pair<double, double> values = {-1.0, 1.0}) {
  InstOp op = instance(opName, inst);
  auto shapes = concreteShapes(op, inputShapes, std::nullopt);
  ASSERT_TRUE(bool(shapes)) << llvm::toString(shapes.takeError());
  CpuKernelLibrary lib;
  CpuKernelLibrary::Fn fn = compile(lib, op);
  ASSERT_NE(fn, nullptr);
  std::vector<Tensor> inputs = randomInputs(op, *shapes, 5, values);
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : inputs)
    ptrs.push_back(&t);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<Range> ranges = fullRanges(*shapes);
    // A random share, as plans cut them: each output and top-level reduction variable cut
    // into 1..3 parts, one part kept.
    std::vector<unsigned> cut = op.outputVars;
    for (unsigned v : op.topReductionVars())
      cut.push_back(v);
    if (trial > 0)
      for (unsigned v : cut) {
        unsigned parts = 1 + rng() % 3;
        ranges[v] = partOf(ranges[v].size(), parts, rng() % parts);
      }
    auto want = evaluate(op, *shapes, ptrs, ranges);
    ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
    auto got = runKernel(fn, op, *shapes, ptrs, ranges, trial % 2 ? 2 : 1);
    ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
    ASSERT_EQ(got->shape, want->shape);
    for (int64_t k = 0; k < want->size(); ++k) {
      if (std::isnan(want->data[k])) {
        ASSERT_TRUE(std::isnan(got->data[k])) << opName << " trial " << trial << " element " << k;
      } else if (got->data[k] != want->data[k]) { // infinities are equal, not near
        ASSERT_NEAR(got->data[k], want->data[k], 1e-4 * std::max(1.0, std::fabs(want->data[k])))
            << opName << " trial " << trial << " element " << k;
      }
    }
  }
}

TEST(CpuKernels, MatMulSharesAndPartialSums) {
  Instantiation inst;
  inst.groups = {{"b", 0}};
  compare("MatMul", inst, {{7, 5}, {5, 6}});
}

TEST(CpuKernels, PaddedStridedConvolutionWithHalos) {
  Instantiation inst;
  inst.attrs = {{"sh", 2},  {"sw", 1},  {"ph", 1}, {"pw", 2},
                {"peh", 1}, {"pew", 0}, {"dh", 1}, {"dw", 2}};
  compare("Conv2d", inst, {{2, 3, 9, 8}, {4, 3, 3, 2}});
}

TEST(CpuKernels, SoftmaxsNestedReductions) {
  Instantiation inst;
  inst.groups = {{"pre", 1}, {"post", 0}};
  compare("Softmax", inst, {{3, 7}});
}

TEST(CpuKernels, MaxPoolAndBatchNorm) {
  Instantiation pool;
  pool.attrs = {{"kh", 3}, {"kw", 3}, {"sh", 2}, {"sw", 2}, {"ph", 1}, {"pw", 1}};
  compare("MaxPool2d", pool, {{2, 3, 7, 7}});
  Instantiation bn;
  bn.inputRanks = {4u, 4u, 1u, 0u};
  compare("batch_norm_grad_x", bn, {{2, 3, 4, 4}, {2, 3, 4, 4}, {3}, {}}, {0.25, 1.0});
}

TEST(CpuKernels, WindowGradientsStepThroughTheirCongruences) {
  // Padded 3x3 stride-2 pooling: the windows holding each element, at the borders too.
  Instantiation pool;
  pool.attrs = {{"kh", 3}, {"kw", 3}, {"sh", 2}, {"sw", 2}, {"ph", 1}, {"pw", 1}};
  compare("maxpool2d_grad", pool, {{2, 3, 4, 4}, {2, 3, 7, 7}, {2, 3, 4, 4}});
  // Padded windows take the unchecked variant, their reads tested against the tensor's
  // extent alone, wherever the part inside the tensor lies in the buffer's region: the
  // whole tensor, or a share of rows with its halo; not when the halo is cut off.
  {
    InstOp fwd = instance("MaxPool2d", pool);
    auto shapes = concreteShapes(fwd, {{2, 3, 7, 7}}, std::nullopt);
    ASSERT_TRUE(bool(shapes));
    std::vector<Range> ranges = fullRanges(*shapes);
    EXPECT_TRUE(readsInsideRegions(fwd, *shapes, ranges, inputRegions(fwd, *shapes, ranges)));
    EXPECT_TRUE(readsInsideRegions(fwd, *shapes, ranges, {wholeBox({2, 3, 7, 7})}));
    ranges[fwd.outputVars[2]] = {1, 3}; // output rows 1 and 2 read input rows 1 to 5
    EXPECT_TRUE(readsInsideRegions(fwd, *shapes, ranges, inputRegions(fwd, *shapes, ranges)));
    std::vector<Box> cut = inputRegions(fwd, *shapes, ranges);
    cut[0][2].hi -= 1;
    EXPECT_FALSE(readsInsideRegions(fwd, *shapes, ranges, cut));
    InstOp grad = instance("maxpool2d_grad", pool);
    auto gs = concreteShapes(grad, {{2, 3, 4, 4}, {2, 3, 7, 7}, {2, 3, 4, 4}}, std::nullopt);
    ASSERT_TRUE(bool(gs));
    std::vector<Range> gr = fullRanges(*gs);
    EXPECT_TRUE(readsInsideRegions(grad, *gs, gr, inputRegions(grad, *gs, gr)));
  }
  Instantiation avg = pool;
  avg.attrs.erase("ph"); // no padding: the last rows belong to no window
  avg.attrs.erase("pw");
  avg.attrs["ih"] = 8;
  avg.attrs["iw"] = 7;
  compare("avgpool2d_grad", avg, {{2, 3, 3, 3}});
  // Dilated transposed convolutions: coefficient and stride share a factor (every tap of
  // an even position, none of an odd one), or are coprime (a modular inverse).
  for (auto [s, d, p] : {std::tuple{2, 2, 1}, {3, 2, 1}, {2, 3, 0}}) {
    Instantiation t;
    t.attrs = {{"o", 11}, {"s", s}, {"d", d}, {"p", p}};
    compare("ConvTranspose1d", t, {{2, 3, 5}, {3, 2, 3}});
  }
}

TEST(CpuKernels, LossesPickTheirLabelAndSplitAcrossThreads) {
  compare("softmax_cross_entropy", {}, {{5, 7}, {5}});
  compare("softmax_cross_entropy_grad", {}, {{}, {5, 7}, {5}});
  // Labels the pick must treat as the sum over every class would: out of range or not an
  // integer (no class matches: the row adds 0), NaN (the whole loss is NaN).
  InstOp op = instance("softmax_cross_entropy", {});
  auto shapes = concreteShapes(op, {{4, 3}, {4}}, std::nullopt);
  ASSERT_TRUE(bool(shapes));
  CpuKernelLibrary lib;
  CpuKernelLibrary::Fn fn = compile(lib, op);
  ASSERT_NE(fn, nullptr);
  Tensor logits({4, 3}), labels({4});
  for (int64_t k = 0; k < logits.size(); ++k)
    logits.data[k] = 0.1 * static_cast<double>(k % 5) - 0.2;
  for (std::vector<double> ls :
       {std::vector<double>{2, 3, 1.5, -1}, {0, 1, 2, 0}, {1, std::nan(""), 0, 2}}) {
    labels.data = ls;
    auto want = evaluate(op, *shapes, {&logits, &labels}, fullRanges(*shapes));
    ASSERT_TRUE(bool(want));
    for (int threads : {1, 2}) {
      auto got = runKernel(fn, op, *shapes, {&logits, &labels}, fullRanges(*shapes), threads);
      ASSERT_TRUE(bool(got));
      if (std::isnan(want->data[0]))
        EXPECT_TRUE(std::isnan(got->data[0])) << ls[1];
      else
        EXPECT_NEAR(got->data[0], want->data[0], 1e-5) << ls[0] << " " << ls[1] << " " << ls[2];
    }
  }
}

TEST(CpuKernels, FlatRowsOnlyWhereTheRowsAreWhole) {
  // The fast nests run the two innermost loops as one when every row read is whole; a share
  // that takes part of each row of a whole buffer must take the loops as written.
  for (bool partRows : {false, true}) {
    InstOp op = instance("batch_norm_grad_x", [] {
      Instantiation i;
      i.inputRanks = {4u, 4u, 1u, 0u};
      return i;
    }());
    auto shapes = concreteShapes(op, {{2, 3, 4, 5}, {2, 3, 4, 5}, {3}, {}}, std::nullopt);
    ASSERT_TRUE(bool(shapes));
    CpuKernelLibrary lib;
    CpuKernelLibrary::Fn fn = compile(lib, op);
    ASSERT_NE(fn, nullptr);
    std::vector<Tensor> inputs = randomInputs(op, *shapes, 3, {0.25, 1.0});
    std::vector<Range> ranges = fullRanges(*shapes);
    if (partRows)
      ranges[op.outputVars.back()] = {1, 4};
    std::vector<Box> regions;
    std::vector<std::vector<float>> buffers;
    std::vector<const float *> in;
    for (const Tensor &t : inputs) { // whole tensors
      regions.push_back(wholeBox(t.shape));
      buffers.emplace_back(t.data.begin(), t.data.end());
      if (buffers.back().empty())
        buffers.back().push_back(0);
    }
    for (const auto &b : buffers)
      in.push_back(b.data());
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : inputs)
      ptrs.push_back(&t);
    auto want = evaluate(op, *shapes, ptrs, ranges);
    ASSERT_TRUE(bool(want));
    std::vector<float> out(want->size()), scratch(kernelScratchBytes(op, ranges) / 4);
    std::vector<int64_t> ints = kernelInts(op, *shapes, ranges, regions);
    ASSERT_TRUE(readsInsideRegions(op, *shapes, ranges, regions));
    TofuKernelArgs args{ints.data(), in.data(), out.data(), 1, 2, scratch.data()};
    fn(&args);
    for (int64_t k = 0; k < want->size(); ++k)
      ASSERT_NEAR(out[k], want->data[k], 1e-4 * std::max(1.0, std::fabs(want->data[k])))
          << (partRows ? "part rows" : "whole rows") << " element " << k;
  }
}

TEST(CpuKernels, AReshapesReadsAreProvedInsideItsBuffer) {
  // x[k / n, k - n * (k / n), d]: intervals put the second coordinate outside the row;
  // its exact range is the row, so the reshape runs the unchecked nest.
  Instantiation inst;
  inst.attrs = {{"n", 4}, {"m", 12}};
  inst.groups = {{"pre", 0}, {"post", 1}};
  InstOp op = instance("ReshapeMerge", inst);
  auto shapes = concreteShapes(op, {{3, 4, 5}}, std::nullopt);
  ASSERT_TRUE(bool(shapes));
  std::vector<Range> ranges = fullRanges(*shapes);
  EXPECT_TRUE(readsInsideRegions(op, *shapes, ranges, {wholeBox({3, 4, 5})}));
  ranges[op.outputVars[0]] = {5, 9}; // rows 1 and 2 of x, in part
  EXPECT_TRUE(readsInsideRegions(op, *shapes, ranges, inputRegions(op, *shapes, ranges)));
  EXPECT_FALSE(readsInsideRegions(op, *shapes, ranges, {{{1, 2}, {0, 4}, {0, 5}}}));
  compare("ReshapeMerge", inst, {{3, 4, 5}});
}

TEST(CpuKernels, DataDependentIndices) {
  Instantiation inst;
  inst.groups = {{"pre", 0}, {"q", 1}, {"post", 1}};
  compare("Gather", inst, {{5, 4}, {3}});
}

TEST(CpuKernels, ReadOutsideTheRegionIsNaN) {
  InstOp op = instance("MatMul", [] {
    Instantiation i;
    i.groups = {{"b", 0}};
    return i;
  }());
  auto shapes = concreteShapes(op, {{2, 3}, {3, 2}}, std::nullopt);
  ASSERT_TRUE(bool(shapes));
  CpuKernelLibrary lib;
  CpuKernelLibrary::Fn fn = compile(lib, op);
  ASSERT_NE(fn, nullptr);
  std::vector<float> a(6, 1.0f), b(3, 1.0f); // b holds only column 0 of B
  std::vector<const float *> in = {a.data(), b.data()};
  std::vector<Box> regions = {{{0, 2}, {0, 3}}, {{0, 3}, {0, 1}}};
  std::vector<Range> ranges = fullRanges(*shapes);
  std::vector<int64_t> ints = kernelInts(op, *shapes, ranges, regions);
  EXPECT_FALSE(readsInsideRegions(op, *shapes, ranges, regions));
  std::vector<float> out(4, 0.0f);
  TofuKernelArgs args{ints.data(), in.data(), out.data(), 0, 1, nullptr};
  fn(&args);
  EXPECT_EQ(out[0], 3.0f);         // column 0 is there
  EXPECT_TRUE(std::isnan(out[1])); // column 1 is not
}

// The compiler's vectorisation report on the unchecked nest of the kernels a training step
// spends its generated time in: every SIMD loop vectorises (or becomes a memset).
TEST(CpuKernels, HotSimdLoopsVectorise) {
  struct Hot {
    const char *op;
    std::vector<unsigned> ranks;
    std::map<std::string, int64_t> groups;
  };
  for (const Hot &h : std::vector<Hot>{{"batch_norm_train", {4, 1, 1, 0}, {}},
                                       {"batch_norm_grad_x", {4, 4, 1, 0}, {}},
                                       {"batch_norm_grad_scale", {4, 4, 0}, {}},
                                       {"layer_norm_grad_scale", {3, 3, 0}, {{"p", 2}, {"f", 1}}},
                                       {"softmax_cross_entropy", {2, 1}, {}},
                                       {"softmax_cross_entropy_grad", {0, 2, 1}, {}},
                                       {"Relu", {4}, {}}}) {
    Instantiation inst;
    for (unsigned r : h.ranks)
      inst.inputRanks.push_back(r);
    inst.groups = h.groups;
    auto k = generateKernel(instance(h.op, inst), KernelDialect::Cpp);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    auto report = vectorizationReport(*k);
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_GT(report->simdLoops, 0u) << h.op;
    EXPECT_EQ(report->vectorized, report->simdLoops) << h.op;
    for (const std::string &m : report->missed)
      ADD_FAILURE() << h.op << ": not vectorised: " << m;
  }
  // A SIMD loop the compiler cannot vectorise (a call with no vector variant) is reported.
  KernelSource bad;
  bad.name = "tofu_k_novec";
  bad.code = "extern \"C\" float tofu_test_opaque(float);\n"
             "extern \"C\" void tofu_k_novec(const TofuKernelArgs *a) {\n"
             "  if (a->fast) {\n"
             "    #pragma omp simd\n"
             "    for (i64 v = 0; v < a->ints[0]; ++v) {\n"
             "      a->out[v] = tofu_test_opaque(a->out[v]);\n"
             "    }\n"
             "  } else {\n"
             "  }\n"
             "}\n";
  auto report = vectorizationReport(bad);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->simdLoops, 1u);
  EXPECT_EQ(report->vectorized, 0u);
  ASSERT_EQ(report->missed.size(), 1u);
  EXPECT_NE(report->missed[0].find("for (i64 v = 0; v < a->ints[0]; ++v)"), std::string::npos)
      << report->missed[0];
}

TEST(CpuKernels, ASecondBuildComesFromTheCache) {
  InstOp op = instance("Relu", [] {
    Instantiation i;
    i.groups = {{"i", 3}};
    return i;
  }());
  auto k = generateKernel(op, KernelDialect::Cpp);
  ASSERT_TRUE(bool(k));
  KernelCompileOptions o = testOptions();
  o.cacheDir += "/second";
  CpuKernelLibrary first, second;
  ASSERT_FALSE(bool(first.add({*k}, o)));
  ASSERT_FALSE(bool(second.add({*k}, o)));
  EXPECT_EQ(first.stats().unitsCompiled, 1u);
  EXPECT_EQ(second.stats().unitsCompiled, 0u);
  EXPECT_NE(second.find(k->name), nullptr);
}

// A kernel compiled once is found through the per-kernel index when a later batch puts it
// beside other kernels (a different unit), and is not compiled again; the kernels run.
TEST(CpuKernels, AKernelSharedByTwoBatchesIsCompiledOnce) {
  auto relu = [](int64_t n) {
    Instantiation i;
    i.groups = {{"i", n}};
    return instance("Relu", i);
  };
  auto a = generateKernel(relu(3), KernelDialect::Cpp);
  auto b = generateKernel(relu(5), KernelDialect::Cpp);
  auto c = generateKernel(relu(7), KernelDialect::Cpp);
  ASSERT_TRUE(a && b && c);
  KernelCompileOptions o = testOptions();
  o.cacheDir += "/shared-kernel";
  o.jobs = 1;
  CpuKernelLibrary first, second;
  ASSERT_FALSE(bool(first.add({*a, *b}, o)));
  EXPECT_EQ(first.stats().unitsCompiled, 1u);
  ASSERT_FALSE(bool(second.add({*c, *a}, o)));
  // c compiles alone; a comes from the first batch's unit.
  EXPECT_EQ(second.stats().kernels, 2u);
  EXPECT_EQ(second.stats().units, 2u);
  EXPECT_EQ(second.stats().unitsCompiled, 1u);
  for (const KernelSource *k : {&*a, &*c}) {
    EXPECT_NE(second.find(k->name), nullptr) << k->name;
  }
  // A stale index entry (the shared objects removed) falls back to compiling.
  for (const auto &e : std::filesystem::directory_iterator(o.cacheDir))
    if (e.path().extension() == ".so")
      std::filesystem::remove(e.path());
  CpuKernelLibrary third;
  ASSERT_FALSE(bool(third.add({*a}, o)));
  EXPECT_EQ(third.stats().unitsCompiled, 1u);
  EXPECT_NE(third.find(a->name), nullptr);
}

// Two processes that need the same unit at once (the workers under mpirun) compile it once
// between them: the unit's lock makes the later one wait and find it in the cache.
TEST(CpuKernels, ConcurrentProcessesCompileAUnitOnce) {
  Instantiation i;
  i.groups = {{"i", 11}};
  auto k = generateKernel(instance("Relu", i), KernelDialect::Cpp);
  ASSERT_TRUE(bool(k));
  KernelCompileOptions o = testOptions();
  o.cacheDir += "/concurrent";
  o.jobs = 1;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  CpuKernelLibrary lib;
  llvm::Error e = lib.add({*k}, o);
  const bool ok = !e && lib.find(k->name);
  llvm::consumeError(std::move(e));
  if (child == 0)
    ::_exit(ok ? 10 + static_cast<int>(lib.stats().unitsCompiled) : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_GE(WEXITSTATUS(status), 10) << "the child could not load the kernel";
  EXPECT_TRUE(ok);
  EXPECT_EQ(lib.stats().unitsCompiled + (WEXITSTATUS(status) - 10), 1u);
}

TEST(CpuKernels, CompilerErrorsAreReported) {
  KernelSource bad;
  bad.name = "tofu_k_bad";
  bad.code = "extern \"C\" void tofu_k_bad(const TofuKernelArgs *a) { syntax error }";
  CpuKernelLibrary lib;
  KernelCompileOptions o = testOptions();
  llvm::Error e = lib.add({bad}, o);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("compiling generated kernels failed"),
            std::string::npos);
}

} // namespace
} // namespace tofu
