// The backend's own kernels on a real GPU against their host runners (the same element
// functions, device_ops.h); without a usable device (CI: cudaErrorInsufficientDriver) the
// GPU tests say so and skip, and the argument checks run (they launch nothing).
#include "runtime/cuda/device_kernels.h"

#include <random>
#include <vector>

#include "runtime/cuda/launch_params.h"
#include "gtest/gtest.h"

namespace tofu::cuda {
namespace {

#define TOFU_REQUIRE_GPU()                                                                         \
  do {                                                                                             \
    int count = 0;                                                                                 \
    cudaError_t err = cudaGetDeviceCount(&count);                                                  \
    if (err != cudaSuccess || count == 0)                                                          \
      GTEST_SKIP() << "SKIPPED: no usable CUDA device ("                                           \
                   << (err != cudaSuccess ? cudaGetErrorName(err) : "0 devices") << ")";           \
  } while (0)

TEST(DeviceKernels, RejectBadParametersWithoutLaunching) {
  BoxCopyParams p;
  p.rank = kMaxCopyRank + 1;
  EXPECT_EQ(launchBoxCopy(p, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  p.rank = 1;
  p.extent[0] = -1;
  EXPECT_EQ(launchBoxCopy(p, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  p.extent[0] = 0;
  p.elements = 0; // empty: nothing to do, no device needed
  EXPECT_EQ(launchBoxCopy(p, nullptr, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(launchFill(nullptr, 0, 1.0f, nullptr), cudaSuccess);
  ScatterParams s;
  s.qRank = -1;
  EXPECT_EQ(launchScatter(s, nullptr, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
}

/// Device buffers for a test, freed at the end.
struct Buffers {
  std::vector<float *> all;
  float *make(const std::vector<float> &host) {
    float *d = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&d), host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    all.push_back(d);
    return d;
  }
  std::vector<float> get(const float *d, size_t n) {
    std::vector<float> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  ~Buffers() {
    for (float *d : all)
      cudaFree(d);
  }
};

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

TEST(DeviceKernels, BoxCopiesAndCombinesMatchTheHostRunner) {
  TOFU_REQUIRE_GPU();
  // A 4-d halo of a 4 x 6 x 33 x 17 tile into a 3 x 6 x 20 x 12 buffer, overwritten and
  // combined with every reducer.
  const Box srcHeld{{0, 4}, {0, 6}, {0, 33}, {0, 17}}, dstHeld{{1, 4}, {0, 6}, {14, 34}, {2, 14}};
  const Box box{{1, 3}, {0, 6}, {15, 33}, {3, 14}};
  const std::vector<float> src = randomFloats(4 * 6 * 33 * 17, 1),
                           dst0 = randomFloats(3 * 6 * 20 * 12, 2);
  for (int32_t combine : {kOverwrite, kSum, kProd, kMax, kMin}) {
    const BoxCopyParams p = boxCopyParams(dstHeld, 0, srcHeld, 0, box, combine);
    std::vector<float> want = dst0;
    runBoxCopyOnHost(p, want.data(), src.data());
    Buffers b;
    float *dSrc = b.make(src), *dDst = b.make(dst0);
    ASSERT_EQ(launchBoxCopy(p, dDst, dSrc, nullptr), cudaSuccess);
    EXPECT_EQ(b.get(dDst, want.size()), want) << "combine " << combine;
  }
}

TEST(DeviceKernels, FillAndScatterMatchTheHostRunner) {
  TOFU_REQUIRE_GPU();
  Buffers b;
  float *d = b.make(std::vector<float>(1000, 3.0f));
  ASSERT_EQ(launchFill(d, 1000, -2.5f, nullptr), cudaSuccess);
  EXPECT_EQ(b.get(d, 1000), std::vector<float>(1000, -2.5f));
  // An embedding gradient: 64 token ids (some repeated, some outside the share's rows
  // 10..40) scatter rows of 16 into a 30 x 16 share.
  ScatterPlan plan;
  plan.qs = {ScatterLoop{64, 1, 16, 0}};
  plan.rest = {ScatterLoop{16, 0, 1, 1}};
  plan.idxIn = 0, plan.dyIn = 1;
  plan.kLo = 10, plan.kHi = 40, plan.kStride = 16, plan.outElems = 30 * 16;
  std::vector<float> idx(64);
  for (int q = 0; q < 64; ++q)
    idx[q] = static_cast<float>((q * 7) % 50);
  const std::vector<float> dy = randomFloats(64 * 16, 3);
  std::vector<float> want(30 * 16);
  const float *in[] = {idx.data(), dy.data()};
  runScatterOnHost(plan, in, want.data());
  float *dIdx = b.make(idx), *dDy = b.make(dy), *dOut = b.make(std::vector<float>(30 * 16, 0));
  ASSERT_EQ(launchScatter(scatterParams(plan), dOut, dIdx, dDy, nullptr), cudaSuccess);
  const std::vector<float> got = b.get(dOut, want.size());
  for (size_t e = 0; e < want.size(); ++e) // atomic adds land in any order
    EXPECT_NEAR(got[e], want[e], 1e-5) << e;
}

} // namespace
} // namespace tofu::cuda
