// The loop IR as data: golden outlines of the lowering of the ops the schedule issue named
// (where each loop runs, where each reduction accumulates, what is stored), checked without
// a compiler; the printer's refusals; and the prelude's scalar semantics against the
// interpreter's reducer table.
#include "codegen/loop_ir.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "analysis/reducer.h"
#include "analysis/verify.h"
#include "codegen/kernel_gen.h"
#include "codegen/kernel_prelude.h"
#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

InstOp instance(const std::string &opName, std::vector<unsigned> ranks,
                std::map<std::string, int64_t> groups = {}) {
  return testInstance(opName, ranks, std::move(groups));
}

std::string outlineOf(const InstOp &op, KernelDialect d) {
  auto k = lowerKernel(op, d);
  EXPECT_TRUE(bool(k)) << llvm::toString(k.takeError());
  return k ? loops::outline(*k, kKernelNameToken) : "";
}

/// An outline with each entry point's unchecked variant only (under `if a->fast`, one
/// level less indented; entry points without variants whole).
std::string fastVariants(const std::string &outline) {
  std::string out, line;
  enum { None, Fast, Checked } mode = None;
  for (char c : outline) {
    if (c != '\n') {
      line += c;
      continue;
    }
    const size_t indent = line.find_first_not_of(' ');
    if (line == "  if a->fast") {
      mode = Fast;
    } else if (line == "  else" && mode == Fast) {
      mode = Checked;
    } else {
      if (indent <= 2)
        mode = None;
      if (mode == None)
        out += line + "\n";
      else if (mode == Fast)
        out += line.substr(2) + "\n";
    }
    line.clear();
  }
  return out;
}

/// The named entry points' parts of an outline, in the order named.
std::string entriesOf(const std::string &outline, const std::vector<std::string> &names) {
  std::map<std::string, std::string> parts;
  std::string name, line;
  for (char c : outline) {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.rfind("entry", 0) == 0)
      name = line;
    parts[name] += line + "\n";
    line.clear();
  }
  std::string out;
  for (const std::string &n : names)
    out += parts[n];
  return out;
}

TEST(LoopIr, BatchNormGradXStatisticsArePassesOverTheChannel) {
  // Three parallel passes over the channel fill the per-channel statistics, the variance in
  // two loops of its own (norm.tdl: the mean, then the squared deviations from it): the mean
  // of x, then in one nest the squared deviations and the sum of x that xhat's mean reads;
  // then the sum of dy; then the mean once more and the sum of dy * xhat. Each nest's last two
  // loops are one SIMD loop where the maps' rows are whole; the main nest is element-wise,
  // flat and SIMD.
  const InstOp op = instance("batch_norm_grad_x", {4, 4, 1, 0});
  EXPECT_EQ(
      entriesOf(fastVariants(outlineOf(op, KernelDialect::Cpp)), {"entry"}),
      "entry\n"
      "  parallel f < (hi1 > lo1 ? hi1 - lo1 : 0)\n"
      "    if true && lo9 == o1_3 && hi9 - lo9 == e1_3\n"
      "      serial v7 < hi7\n"
      "        vector fl < (hi8 - lo8) * (hi9 - lo9)\n"
      "          combine r1 Sum\n"
      "    else\n"
      "      serial v7 < hi7\n"
      "        serial v8 < hi8\n"
      "          vector v9 < hi9\n"
      "            combine r1 Sum\n"
      "    if true && lo6 == o1_3 && hi6 - lo6 == e1_3\n"
      "      serial v4 < hi4\n"
      "        vector fl < (hi5 - lo5) * (hi6 - lo6)\n"
      "          combine r0 Sum\n"
      "          combine r8 Sum\n"
      "    else\n"
      "      serial v4 < hi4\n"
      "        serial v5 < hi5\n"
      "          vector v6 < hi6\n"
      "            combine r0 Sum\n"
      "            combine r8 Sum\n"
      "    store t0\n"
      "    store t8\n"
      "  parallel f < (hi1 > lo1 ? hi1 - lo1 : 0)\n"
      "    if true && lo24 == o0_3 && hi24 - lo24 == e0_3\n"
      "      serial v22 < hi22\n"
      "        vector fl < (hi23 - lo23) * (hi24 - lo24)\n"
      "          combine r6 Sum\n"
      "    else\n"
      "      serial v22 < hi22\n"
      "        serial v23 < hi23\n"
      "          vector v24 < hi24\n"
      "            combine r6 Sum\n"
      "    store t6\n"
      "  parallel f < (hi1 > lo1 ? hi1 - lo1 : 0)\n"
      "    if true && lo57 == o1_3 && hi57 - lo57 == e1_3\n"
      "      serial v55 < hi55\n"
      "        vector fl < (hi56 - lo56) * (hi57 - lo57)\n"
      "          combine r13 Sum\n"
      "    else\n"
      "      serial v55 < hi55\n"
      "        serial v56 < hi56\n"
      "          vector v57 < hi57\n"
      "            combine r13 Sum\n"
      "    if true && lo54 == o0_3 && hi54 - lo54 == e0_3 && lo54 == o1_3 && hi54 - lo54 == e1_3\n"
      "      serial v52 < hi52\n"
      "        vector fl < (hi53 - lo53) * (hi54 - lo54)\n"
      "          combine r12 Sum\n"
      "    else\n"
      "      serial v52 < hi52\n"
      "        serial v53 < hi53\n"
      "          vector v54 < hi54\n"
      "            combine r12 Sum\n"
      "    store t12\n"
      "  if true && lo3 == o0_3 && hi3 - lo3 == e0_3 && lo3 == o1_3 && hi3 - lo3 == e1_3\n"
      "    parallel f < n0 * n1\n"
      "      vector fl < n2 * n3\n"
      "        store out\n"
      "  else\n"
      "    parallel f < n0 * n1 * n2\n"
      "      vector v3 < hi3\n"
      "        store out\n");
}

TEST(LoopIr, BatchNormGradXOnCudaInSeveralLaunches) {
  // A block per channel and part splits each statistic across its threads; a combine launch
  // adds the parts in order; the main launch is a thread per element.
  const InstOp op = instance("batch_norm_grad_x", {4, 4, 1, 0});
  EXPECT_EQ(entriesOf(fastVariants(outlineOf(op, KernelDialect::Cuda)),
                      {"entry _p0", "entry _c0", "entry _mp"}),
            "entry _p0\n"
            "  grid-blocks b < count * parts\n"
            "    block-threads u0 < c0\n"
            "      combine r0 Sum\n"
            "    block-combine r0\n"
            "    if threadIdx.x == 0\n"
            "      if parts == 1\n"
            "        store t0\n"
            "      else\n"
            "        store tpart\n"
            "entry _c0\n"
            "  grid-threads e < count\n"
            "    serial p < parts\n"
            "      combine r0 Sum\n"
            "    store t0\n"
            "entry _mp\n"
            "  grid-threads f < total\n"
            "    store out\n");
}

TEST(LoopIr, LayerNormGradScaleKeepsPerTokenStatistics) {
  // Per-token statistics are two passes (temporaries indexed by the tokens: the mean, then the
  // squared deviations from it); the sum over tokens then accumulates whole rows of features
  // into the output (interchanged, SIMD).
  const InstOp op = instance("layer_norm_grad_scale", {3, 3, 0}, {{"p", 2}, {"f", 1}});
  EXPECT_EQ(entriesOf(fastVariants(outlineOf(op, KernelDialect::Cpp)), {"entry"}),
            "entry\n"
            "  parallel f < (hi1 > lo1 ? hi1 - lo1 : 0) * (hi2 > lo2 ? hi2 - lo2 : 0)\n"
            "    vector v3 < hi3\n"
            "      combine r1 Sum\n"
            "    store t1\n"
            "  parallel f < (hi1 > lo1 ? hi1 - lo1 : 0) * (hi2 > lo2 ? hi2 - lo2 : 0)\n"
            "    vector v5 < hi5\n"
            "      combine r3 Sum\n"
            "    store t3\n"
            "  parallel b < blocks\n"
            "    vector v0 < rhi\n"
            "      store out\n"
            "    serial v1 < hi1\n"
            "      serial v2 < hi2\n"
            "        vector v0 < rhi\n"
            "          combine out[(v0 - lo0)] Sum\n");
}

TEST(LoopIr, SoftmaxCrossEntropySplitsTheBatchAcrossThreads) {
  // A loss over the batch: each thread sums its share of rows (the row's max and normaliser
  // computed once per row, the label's class picked, not searched), then the shares combine
  // in order.
  const InstOp op = instance("softmax_cross_entropy", {2, 1});
  EXPECT_EQ(entriesOf(fastVariants(outlineOf(op, KernelDialect::Cpp)), {"entry"}),
            "entry\n"
            "  parallel t < parts\n"
            "    serial v0 < phi\n"
            "      vector v2 < hi2\n"
            "        combine r1 Max\n"
            "      vector v3 < hi3\n"
            "        combine r2 Sum\n"
            "      if e1 != e1\n"
            "      else\n"
            "        if e1 >= (float)lo1 && e1 < (float)hi1 && (float)(i64)e1 == e1\n"
            "      vector v1 < to1\n"
            "        combine r0 Sum\n"
            "    store part\n"
            "  serial t < parts\n"
            "    combine r0 Sum\n"
            "  store out\n");
}

TEST(LoopIr, MaxPoolGradVisitsOnlyTheWindowsThatContainTheElement) {
  // The window loops step by the stride from the congruence's first solution: no modulo test
  // per window position. Inside, the window's first maximum (Min over its positions) decides
  // whether the element takes the window's gradient.
  const InstOp op = instance("maxpool2d_grad", {4, 4, 4});
  EXPECT_EQ(entriesOf(fastVariants(outlineOf(op, KernelDialect::Cpp)), {"entry"}),
            "entry\n"
            "  parallel f < n0 * n1 * n2\n"
            "    serial v3 < hi3\n"
            "      if tofu_imodp(a4, 1) == 0\n"
            "      serial v4 < hi4 step 2\n"
            "        if tofu_imodp(a5, 1) == 0\n"
            "        serial v5 < hi5 step 2\n"
            "          serial v6 < hi6\n"
            "            vector v7 < hi7\n"
            "              combine r1 Min\n"
            "          combine r0 Sum\n"
            "      store out\n");
}

TEST(LoopIr, Bfloat16BuffersAreTypedAndAccumulateInFloat32) {
  // The same op with its buffers in bfloat16: the statistics are float32 temporaries as
  // before, but the sum over tokens is no longer accumulated into the output buffer (that
  // would round every partial sum): it is computed per output value in a float32
  // accumulator, and the output stored once, rounded.
  const InstOp op = instance("layer_norm_grad_scale", {3, 3, 0}, {{"p", 2}, {"f", 1}});
  KernelTypes types;
  types.inputs = {loops::Element::BF16, loops::Element::BF16};
  types.output = loops::Element::BF16;
  auto k = lowerKernel(op, KernelDialect::Cpp, types);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  const std::string outline = fastVariants(loops::outline(*k, kKernelNameToken));
  EXPECT_EQ(outline.find("combine out"), std::string::npos) << outline;
  EXPECT_NE(outline.find("store out bf16"), std::string::npos) << outline;
  EXPECT_NE(outline.find("store t1\n"), std::string::npos) << outline;
  ASSERT_EQ(k->inputs.size(), 3u); // the third (a scalar) not named: float32
  EXPECT_EQ(k->inputs[0], loops::Element::BF16);
  EXPECT_EQ(k->inputs[2], loops::Element::F32);
  EXPECT_EQ(k->output, loops::Element::BF16);
  auto src = generateKernel(op, KernelDialect::Cpp, types);
  ASSERT_TRUE(bool(src)) << llvm::toString(src.takeError());
  EXPECT_NE(src->code.find("const tofu_bf16 *__restrict__ in0"), std::string::npos);
  EXPECT_NE(src->code.find("tofu_from_bf16(in0["), std::string::npos);
  EXPECT_NE(src->code.find("= tofu_to_bf16("), std::string::npos);
  EXPECT_NE(src->code.find("(bf16,bf16,f32->bf16)"), std::string::npos);
  // Another name than the float32 kernel's: both can live in one library.
  auto plain = generateKernel(op, KernelDialect::Cpp);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_NE(plain->name, src->name);
  EXPECT_EQ(plain->code.find("tofu_bf16 *"), std::string::npos);
}

TEST(LoopIr, LstmGatesBlockVariantSplitsBothProducts) {
  // The block variant splits both contractions across a block's threads.
  const InstOp op = instance("lstm_gates", {2, 2, 2, 2, 1});
  EXPECT_EQ(entriesOf(fastVariants(outlineOf(op, KernelDialect::Cuda)), {"entry _blk"}),
            "entry _blk\n"
            "  grid-blocks f < total\n"
            "    block-threads u0 < c0\n"
            "      combine r0 Sum\n"
            "    block-combine r0\n"
            "    block-threads u1 < c1\n"
            "      combine r1 Sum\n"
            "    block-combine r1\n"
            "    if threadIdx.x == 0\n"
            "      store out\n");
}

// One tree, both targets: the printers differ only in how loops bind and in what only one
// target has.
TEST(LoopIr, TargetsDifferOnlyInLoopBinding) {
  using loops::Node;
  Node inner = loops::loopNode(loops::LoopKind::Vector, "v1", "lo1", "hi1");
  inner.accumulators = {"r0"};
  inner.reducer = ir::Reducer::Max;
  inner.body.push_back(loops::combineNode(ir::Reducer::Max, "r0", "in0[v1]"));
  Node outer = loops::loopNode(loops::LoopKind::Serial, "v0", "lo0", "hi0");
  outer.body = {loops::declNode("float", {{"r0", "(0.0f)"}}), inner,
                loops::storeNode("out", "v0 - lo0", "r0")};
  std::string cpp, cuda, error;
  ASSERT_TRUE(loops::printBlock({outer}, loops::Target::Cpp, 0, cpp, error)) << error;
  ASSERT_TRUE(loops::printBlock({outer}, loops::Target::Cuda, 0, cuda, error)) << error;
  EXPECT_EQ(cpp, "for (i64 v0 = lo0; v0 < hi0; ++v0) {\n"
                 "  float r0 = (0.0f);\n"
                 "  #pragma omp simd reduction(tofu_maxr:r0)\n"
                 "  for (i64 v1 = lo1; v1 < hi1; ++v1) {\n"
                 "    r0 = tofu_max(r0, in0[v1]);\n"
                 "  }\n"
                 "  out[v0 - lo0] = r0;\n"
                 "}\n");
  EXPECT_EQ(cuda, "for (i64 v0 = lo0; v0 < hi0; ++v0) {\n"
                  "  float r0 = (0.0f);\n"
                  "  for (i64 v1 = lo1; v1 < hi1; ++v1) {\n"
                  "    r0 = tofu_max(r0, in0[v1]);\n"
                  "  }\n"
                  "  out[v0 - lo0] = r0;\n"
                  "}\n");
  // The outer loop across threads: a grid-stride loop on CUDA, OpenMP threads in C++.
  outer.loop = loops::LoopKind::GridThreads;
  cuda.clear();
  ASSERT_TRUE(loops::printBlock({outer}, loops::Target::Cuda, 0, cuda, error)) << error;
  EXPECT_EQ(cuda.substr(0, cuda.find('\n')),
            "for (i64 v0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; v0 < hi0; "
            "v0 += (i64)gridDim.x * blockDim.x) {");
  cpp.clear();
  EXPECT_FALSE(loops::printBlock({outer}, loops::Target::Cpp, 0, cpp, error));
  EXPECT_EQ(error, "a GPU loop in a C++ kernel");
  outer.loop = loops::LoopKind::Parallel;
  cpp.clear();
  error.clear();
  ASSERT_TRUE(loops::printBlock({outer}, loops::Target::Cpp, 0, cpp, error)) << error;
  EXPECT_EQ(
      cpp.substr(0, cpp.find('\n')),
      "#pragma omp parallel for num_threads(a->threads) schedule(static) if (a->threads > 1)");
  cuda.clear();
  EXPECT_FALSE(loops::printBlock({outer}, loops::Target::Cuda, 0, cuda, error));
  EXPECT_EQ(error, "a loop across OpenMP threads in a CUDA kernel");
  // A block's combine exists only on CUDA.
  const Node bc = loops::blockCombineNode(ir::Reducer::Sum, "r0");
  cpp.clear();
  error.clear();
  EXPECT_FALSE(loops::printBlock({bc}, loops::Target::Cpp, 0, cpp, error));
  EXPECT_EQ(error, "a block combine outside CUDA");
}

/// Breaks of the binding rules in `b`, nested in `outer` (the kinds of the loops around it):
/// at most one loop across threads on any path (OpenMP threads, or a GPU grid), a block's
/// threads only inside a loop over blocks, and none nested in another block-threads loop.
void checkBinding(const loops::Block &b, std::vector<loops::LoopKind> outer,
                  std::vector<std::string> &breaks) {
  using K = loops::LoopKind;
  for (const loops::Node &n : b) {
    if (n.kind == loops::Node::Kind::Loop) {
      const auto has = [&](std::initializer_list<K> ks) {
        for (K o : outer)
          for (K k : ks)
            if (o == k)
              return true;
        return false;
      };
      const bool threads = n.loop == K::Parallel || n.loop == K::ParallelVector ||
                           n.loop == K::Shared || n.loop == K::GridThreads ||
                           n.loop == K::GridBlocks;
      if (threads &&
          has({K::Parallel, K::ParallelVector, K::Shared, K::GridThreads, K::GridBlocks}))
        breaks.push_back(std::string(loops::loopKindName(n.loop)) + " " + n.var +
                         " inside another loop across threads");
      if (n.loop == K::BlockThreads && (!has({K::GridBlocks}) || has({K::BlockThreads})))
        breaks.push_back("block-threads " + n.var + " outside a single loop over blocks");
      outer.push_back(n.loop);
      checkBinding(n.body, outer, breaks);
      outer.pop_back();
      continue;
    }
    checkBinding(n.body, outer, breaks);
    checkBinding(n.orElse, outer, breaks);
  }
}

/// Whether `b` stores to a buffer anywhere.
bool stores(const loops::Block &b) {
  for (const loops::Node &n : b)
    if (n.kind == loops::Node::Kind::Store || stores(n.body) || stores(n.orElse))
      return true;
  return false;
}

// Every C++ and CUDA kernel of the library: at most one level of loops across threads on
// any path, a block's threads inside a loop over blocks, and every entry point stores.
TEST(LoopIr, EveryKernelOfTheLibraryBindsItsLoopsOnce) {
  unsigned kernels = 0;
  for (const auto &[name, def] : testLibrary().ops()) {
    auto op = instantiate(*def, completeForVerification(*def, Instantiation{}, nullptr));
    if (!op) {
      llvm::consumeError(op.takeError());
      continue;
    }
    for (KernelDialect d : {KernelDialect::Cpp, KernelDialect::Cuda}) {
      auto k = lowerKernel(*op, d);
      if (!k) { // opaque calls without a native implementation run on the interpreter
        llvm::consumeError(k.takeError());
        continue;
      }
      ++kernels;
      for (const loops::Function &f : k->functions) {
        if (f.kind != loops::Function::Kind::Entry)
          continue;
        std::vector<std::string> breaks;
        checkBinding(f.body, {}, breaks);
        for (const std::string &why : breaks)
          ADD_FAILURE() << name << " " << f.name << ": " << why;
        EXPECT_TRUE(stores(f.body)) << name << " " << f.name;
      }
    }
  }
  EXPECT_GT(kernels, 600u);
}

// The prelude's scalar semantics are the interpreter's: the reducers' combine (NaN through
// Max and Min), the floor division and modulo of indices, and the NaN-propagating
// comparisons and choice.
TEST(KernelPrelude, CombineIsTheReducerTable) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float values[] = {0.0f, -0.0f, 1.5f, -2.0f, inf, -inf, nan};
  const ir::Reducer reducers[] = {ir::Reducer::Sum, ir::Reducer::Prod, ir::Reducer::Max,
                                  ir::Reducer::Min};
  for (int op = 0; op < 4; ++op)
    for (float a : values)
      for (float b : values) {
        const float want = reducerCombine<float>(reducers[op], a, b);
        const float got = tofu_combine(op, a, b);
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got)) << op << " " << a << " " << b;
        else
          EXPECT_EQ(got, want) << op << " " << a << " " << b;
      }
  EXPECT_EQ(tofu_combine(2, -inf, 3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(tofu_max(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(tofu_min(1.0f, nan)));
}

TEST(KernelPrelude, IndexArithmeticFloors) {
  for (i64 a = -9; a <= 9; ++a)
    for (i64 b : {-4, -3, -1, 1, 2, 3, 5}) {
      const i64 q = static_cast<i64>(std::floor(static_cast<double>(a) / static_cast<double>(b)));
      EXPECT_EQ(tofu_fdiv(a, b), q) << a << " / " << b;
      EXPECT_EQ(tofu_imod(a, b), a - q * b) << a << " % " << b;
      if (b > 0) {
        EXPECT_EQ(tofu_fdivp(a, b), q);
        EXPECT_EQ(tofu_imodp(a, b), a - q * b);
      }
    }
  EXPECT_EQ(tofu_didx(2.7f), 2);
  EXPECT_EQ(tofu_didx(-0.5f), -1);
  EXPECT_EQ(tofu_didx(std::numeric_limits<float>::quiet_NaN()), TOFU_I64_MIN);
  EXPECT_EQ(tofu_didx(std::numeric_limits<float>::infinity()), TOFU_I64_MIN);
}

TEST(KernelPrelude, ComparisonsAndSelectPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float (*cmp)(float, float) : {tofu_eq, tofu_ne, tofu_lt, tofu_le, tofu_gt, tofu_ge}) {
    EXPECT_TRUE(std::isnan(cmp(nan, 1.0f)));
    EXPECT_TRUE(std::isnan(cmp(1.0f, nan)));
  }
  EXPECT_EQ(tofu_lt(1.0f, 2.0f), 1.0f);
  EXPECT_EQ(tofu_ge(1.0f, 2.0f), 0.0f);
  EXPECT_TRUE(std::isnan(tofu_select(nan, 1.0f, 2.0f)));
  EXPECT_EQ(tofu_select(0.0f, 1.0f, 2.0f), 2.0f);
  EXPECT_EQ(tofu_relu(-3.0f), 0.0f);
  EXPECT_TRUE(std::isnan(tofu_relu(nan)));
}

// Rounding to bfloat16 and float16 against the formats' own conversions: bfloat16 by its
// bits (the upper half of float32's, rounded to nearest even), float16 by the compiler's
// _Float16 (IEEE binary16), over values of every magnitude, halfway cases, overflow and
// subnormals.
TEST(KernelPrelude, NarrowFloatsRoundToNearestEven) {
  auto bf16 = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (x != x)
      return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  };
  std::vector<float> xs = {0.0f,     -0.0f,     1.0f,       1.00390625f, 1.01171875f,
                           65504.0f, 65519.0f,  65520.0f,   -65520.0f,   6.0e-8f,
                           3.0e-8f,  1.0e-9f,   3.3895e38f, 3.4e38f,     -3.4e38f,
                           1.0e-40f, -2.5e-39f, TOFU_INF,   -TOFU_INF,   0.478925466f};
  uint64_t z = 12345;
  for (int i = 0; i < 20000; ++i) { // random bit patterns: every exponent
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t u = static_cast<uint32_t>(z >> 32);
    float x;
    std::memcpy(&x, &u, 4);
    if (x == x)
      xs.push_back(x);
  }
  for (float x : xs) {
    EXPECT_EQ(tofu_round_bf16(x), bf16(x)) << x;
    // The prelude rounds to bfloat16 by bits; the arithmetic rounding it replaced (quantum
    // by exponent, nearbyintf) is an independent derivation of the same values.
    EXPECT_EQ(tofu_round_bf16(x), tofu_round_narrow(x, 8, -126, 3.3895313892515355e38f)) << x;
#ifdef __FLT16_MAX__
    EXPECT_EQ(tofu_round_f16(x), static_cast<float>(static_cast<_Float16>(x))) << x;
#endif
  }
  EXPECT_TRUE(std::isnan(tofu_round_bf16(TOFU_NAN)));
  EXPECT_TRUE(std::isnan(tofu_round_f16(TOFU_NAN)));
  EXPECT_EQ(tofu_round_f16(65520.0f), TOFU_INF);
  EXPECT_EQ(tofu_round_f16(65519.0f), 65504.0f);
  // Storage in bfloat16: the bits stored round as tofu_round_bf16's arithmetic does, and
  // load back exactly.
  for (float x : xs) {
    const tofu_bf16 b = tofu_to_bf16(x);
    EXPECT_EQ(tofu_from_bf16(b), tofu_round_bf16(x)) << x;
    EXPECT_EQ(tofu_to_bf16(tofu_from_bf16(b)), b) << x;
  }
  EXPECT_TRUE(std::isnan(tofu_from_bf16(tofu_to_bf16(TOFU_NAN))));
  EXPECT_TRUE(std::isnan(tofu_from_bf16(tofu_to_bf16(-TOFU_NAN))));
}

} // namespace
} // namespace tofu
