// The host side of the CUDA backend's copies and kernel arguments, without a GPU: merged
// box-copy parameters applied by the device's own element function reproduce the CPU
// backend's copyBox (overwrite and every combine, float32 and bfloat16 buffers, converting
// between them); the argument block matches the layout
// of the struct a generated CUDA kernel declares.
#include "runtime/cuda/launch_params.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>

#include "analysis/reducer.h"
#include "runtime/backend.h"
#include "support/bf16.h"
#include "gtest/gtest.h"

namespace tofu::cuda {
namespace {

Box randomBox(std::mt19937 &rng, const Box &within) {
  Box b;
  for (const Range &r : within) {
    std::uniform_int_distribution<int64_t> lo(r.lo, r.hi - 1);
    int64_t a = lo(rng);
    std::uniform_int_distribution<int64_t> hi(a + 1, r.hi);
    b.push_back({a, hi(rng)});
  }
  return b;
}

TEST(LaunchParams, BoxCopiesMatchTheHostCopyForEveryCombine) {
  std::mt19937 rng(11);
  const ir::Reducer reducers[] = {ir::Reducer::Sum, ir::Reducer::Prod, ir::Reducer::Max,
                                  ir::Reducer::Min};
  for (int trial = 0; trial < 400; ++trial) {
    const size_t rank = 1 + trial % 5;
    Box shape;
    for (size_t d = 0; d < rank; ++d)
      shape.push_back({0, 1 + static_cast<int64_t>(rng() % 6)});
    const Box srcHeld = randomBox(rng, shape), dstHeld = randomBox(rng, shape);
    Box common;
    for (size_t d = 0; d < rank; ++d)
      common.push_back(
          {std::max(srcHeld[d].lo, dstHeld[d].lo), std::min(srcHeld[d].hi, dstHeld[d].hi)});
    bool empty = false;
    for (const Range &r : common)
      empty = empty || r.size() <= 0;
    if (empty)
      continue;
    const Box box = randomBox(rng, common);
    std::vector<float> src(static_cast<size_t>(boxElements(srcHeld)) + 7);
    std::uniform_real_distribution<float> dist(-2, 2);
    for (float &v : src)
      v = dist(rng);
    const ir::Reducer *reducer = trial % 3 == 0 ? nullptr : &reducers[trial % 4];
    std::vector<float> want(static_cast<size_t>(boxElements(dstHeld)) + 5);
    for (float &v : want)
      v = dist(rng);
    std::vector<float> got = want;
    // Buffers start a few elements into their arrays, as in an arena.
    copyBox(want.data() + 5, dstHeld, src.data() + 7, srcHeld, box, reducer);
    const BoxCopyParams p = boxCopyParams(dstHeld, 5, srcHeld, 7, box, copyCombine(reducer));
    runBoxCopyOnHost(p, got.data(), src.data());
    ASSERT_EQ(got, want) << "trial " << trial;
    EXPECT_LE(p.rank, static_cast<int>(rank));
  }
}

/// A buffer of `n` elements of `element` from `values` (bfloat16 ones rounded), as bytes.
std::vector<unsigned char> bufferOf(const std::vector<float> &values, loops::Element element) {
  std::vector<unsigned char> out(values.size() * (element == loops::Element::BF16 ? 2 : 4));
  for (size_t i = 0; i < values.size(); ++i) {
    if (element == loops::Element::BF16) {
      const uint16_t b = bf16Bits(values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    }
  }
  return out;
}

// The GPU's copies between buffers of float32 and bfloat16 (a bf16 plan's partial results
// are float32, combined into bfloat16 tiles; a bfloat16 region lands in float32 staging)
// give the CPU backend's bytes: widened exactly, combined in float32, rounded once to
// nearest even, a bfloat16 overwrite copied bit for bit.
TEST(LaunchParams, BoxCopiesBetweenElementTypesMatchTheHostCopy) {
  using loops::Element;
  std::mt19937 rng(12);
  const ir::Reducer reducers[] = {ir::Reducer::Sum, ir::Reducer::Prod, ir::Reducer::Max,
                                  ir::Reducer::Min};
  const Element types[] = {Element::F32, Element::BF16};
  unsigned converted = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Element srcElement = types[trial % 2], dstElement = types[(trial / 2) % 2];
    const size_t rank = 1 + trial % 4;
    Box shape;
    for (size_t d = 0; d < rank; ++d)
      shape.push_back({0, 1 + static_cast<int64_t>(rng() % 6)});
    const Box held = shape, box = randomBox(rng, shape);
    std::uniform_real_distribution<float> dist(-3, 3);
    std::vector<float> srcValues(static_cast<size_t>(boxElements(held)) + 3),
        dstValues(static_cast<size_t>(boxElements(held)) + 1);
    for (float &v : srcValues)
      v = dist(rng);
    for (float &v : dstValues)
      v = dist(rng);
    srcValues[3] = NAN; // a NaN crosses (and poisons a combine) in both
    const ir::Reducer *reducer = trial % 3 == 0 ? nullptr : &reducers[(trial / 3) % 4];
    const std::vector<unsigned char> src = bufferOf(srcValues, srcElement);
    std::vector<unsigned char> want = bufferOf(dstValues, dstElement), got = want;
    const int64_t srcAt = 3, dstAt = 1; // elements into their buffers, as in an arena
    const int64_t srcBytes = srcElement == Element::BF16 ? 2 : 4,
                  dstBytes = dstElement == Element::BF16 ? 2 : 4;
    copyBox(want.data() + dstAt * dstBytes, dstElement, held, src.data() + srcAt * srcBytes,
            srcElement, held, box, reducer);
    const BoxCopyParams p =
        boxCopyParams(held, dstAt, held, srcAt, box, copyCombine(reducer), dstElement, srcElement);
    EXPECT_EQ(p.srcBf16, srcElement == Element::BF16 ? 1 : 0);
    EXPECT_EQ(p.dstBf16, dstElement == Element::BF16 ? 1 : 0);
    EXPECT_EQ(copyElementBytes(p), srcBytes);
    if (srcElement != dstElement)
      EXPECT_FALSE(isContiguousCopy(p)) << "a conversion is never a memcpy";
    runBoxCopyOnHost(p, got.data(), src.data());
    ASSERT_EQ(got, want) << "trial " << trial << ": " << (srcBytes == 2 ? "bf16" : "f32")
                         << " into " << (dstBytes == 2 ? "bf16" : "f32")
                         << (reducer ? ", combined" : "");
    converted += srcElement != dstElement ? 1 : 0;
  }
  EXPECT_GE(converted, 150u);
  // A float32 value half way between two bfloat16 ones rounds to the even one.
  const float halfway = floatFromBf16(0x3f81) / 2 + floatFromBf16(0x3f82) / 2;
  const std::vector<unsigned char> one = bufferOf({halfway}, Element::F32);
  uint16_t out = 0;
  const Box unit{{0, 1}};
  runBoxCopyOnHost(boxCopyParams(unit, 0, unit, 0, unit, kOverwrite, Element::BF16, Element::F32),
                   &out, one.data());
  EXPECT_EQ(out, 0x3f82);
}

TEST(LaunchParams, ContiguousRegionsMergeIntoOneRun) {
  // Rows 2..4 of a 6 x 8 tile held whole on both sides: one run of 24 floats.
  Box held{{0, 6}, {0, 8}}, rows{{2, 5}, {0, 8}};
  BoxCopyParams p = boxCopyParams(held, 0, held, 100, rows, kOverwrite);
  EXPECT_TRUE(isContiguousCopy(p));
  EXPECT_EQ(p.elements, 24);
  EXPECT_EQ(p.srcOffset, 116);
  EXPECT_EQ(p.dstOffset, 16);
  // Columns 2..4: a strided box of 6 rows, not a memcpy.
  Box cols{{0, 6}, {2, 5}};
  p = boxCopyParams(held, 0, held, 0, cols, kOverwrite);
  EXPECT_FALSE(isContiguousCopy(p));
  EXPECT_EQ(p.rank, 2);
  // A combine is never a memcpy.
  EXPECT_FALSE(isContiguousCopy(boxCopyParams(held, 0, held, 0, rows, kSum)));
  // NaN propagates through Max and Min combines (a poisoned input must show).
  EXPECT_TRUE(std::isnan(combineValues(kMax, NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(combineValues(kMin, 1.0f, NAN)));
  EXPECT_EQ(combineValues(kMax, 1.0f, 3.0f), 3.0f);
}

// The argument block the generated kernels take (codegen/kernel_prelude.h) for an op with 7
// integer arguments and 2 inputs.
using Declared = TofuCudaArgs<7, 2>;

TEST(LaunchParams, ArgumentBlockHasTheGeneratedStructLayout) {
  std::vector<int64_t> ints{1, 2, 3, 4, 5, 6, -7};
  float a = 0, b = 0, c = 0;
  std::vector<const float *> in{&a, &b};
  float scratch = 0;
  std::vector<unsigned char> block = kernelArgBlock(ints, in, &c, true, &scratch, 5);
  ASSERT_EQ(block.size(), sizeof(Declared));
  Declared d;
  std::memcpy(&d, block.data(), sizeof d);
  for (size_t i = 0; i < ints.size(); ++i)
    EXPECT_EQ(d.ints[i], ints[i]);
  EXPECT_EQ(d.in[0], &a);
  EXPECT_EQ(d.in[1], &b);
  EXPECT_EQ(d.out, &c);
  EXPECT_EQ(d.fast, 1);
  EXPECT_EQ(d.threads, 1);
  EXPECT_EQ(d.scratch, &scratch);
  EXPECT_EQ(d.parts, 5);
  // No inputs and no integers: the generated struct still has one slot of each.
  EXPECT_EQ(kernelArgBlock({}, {}, &c, false).size(), 8u + 8u + 8u + 8u + 8u + 8u);
}

TEST(LaunchParams, TemporaryPartsFillTheGpuWithoutTinyParts) {
  // A scalar loss over 8192 x 32000 terms: about 1024 blocks, cut along its first variable.
  EXPECT_EQ(temporaryParts(1, 8192, 8192LL * 32000), 1024);
  // 64 batch-norm channels of 32 x 112 x 112: the batch variable has only 32 values.
  EXPECT_EQ(temporaryParts(64, 32, 32 * 112 * 112), 16);
  EXPECT_EQ(temporaryParts(8, 32, 32 * 112 * 112), 32);
  // Many values fill the GPU alone; short reductions are not split.
  EXPECT_EQ(temporaryParts(8192, 768, 768), 1);
  EXPECT_EQ(temporaryParts(4, 100, 1000), 1);
  // The scratch space: temporaries, then the largest partial results.
  std::vector<CudaTemporaryPass> passes{{0, {0}, {1, 2}, {}}, {1, {}, {1}, {}}};
  std::vector<Range> ranges{{0, 64}, {0, 32}, {0, 12544}};
  const int64_t p0 = temporaryParts(64, 32, 32 * 12544), p1 = temporaryParts(1, 32, 32);
  EXPECT_EQ(p1, 1);
  EXPECT_EQ(cudaPassesScratchBytes(passes, ranges), 4 * (64 + 1 + 64 * p0));
  // A term's nested reductions count: a loss over 8192 rows of 32000 classes, each row's
  // log-sum-exp computed inside, is cut into 1024 parts, not 4.
  CudaTemporaryPass loss{2, {}, {0}, {{1}, {1}}};
  std::vector<Range> rows{{0, 8192}, {0, 32000}};
  EXPECT_EQ(temporaryTerms(loss, rows), 8192LL * 64001);
  EXPECT_EQ(temporaryParts(loss, rows), 1024);
}

} // namespace
} // namespace tofu::cuda
