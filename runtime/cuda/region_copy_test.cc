// Checks the region-copy kernel against a host reference on a real GPU; without a usable
// device (CI: no driver, cudaErrorInsufficientDriver) it says so and skips.
#include "runtime/cuda/region_copy.h"

#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"

namespace tofu::cuda {
namespace {

/// Skips the calling test, with the runtime's reason, when no CUDA device can be used.
#define TOFU_REQUIRE_GPU()                                                                  \
  do {                                                                                      \
    int count = 0;                                                                          \
    cudaError_t err = cudaGetDeviceCount(&count);                                           \
    if (err != cudaSuccess || count == 0)                                                   \
      GTEST_SKIP() << "SKIPPED: no usable CUDA device ("                                    \
                   << (err != cudaSuccess ? cudaGetErrorName(err) : "0 devices") << ")";    \
  } while (0)

std::vector<float> hostCopy(const std::vector<float> &src, const Region &r) {
  std::vector<float> out(regionElements(r));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    int64_t rest = i, offset = 0;
    for (int d = r.rank - 1; d >= 0; --d) {
      offset += (r.begin[d] + rest % r.extent[d]) * r.srcStride[d];
      rest /= r.extent[d];
    }
    out[i] = src[offset];
  }
  return out;
}

TEST(RegionCopy, RejectsBadRegionsWithoutLaunching) {
  Region r;
  r.rank = kMaxRegionRank + 1;
  EXPECT_EQ(copyRegion(nullptr, nullptr, r, nullptr), cudaErrorInvalidValue);
  r.rank = 1;
  r.extent[0] = -1;
  EXPECT_EQ(copyRegion(nullptr, nullptr, r, nullptr), cudaErrorInvalidValue);
  r.extent[0] = 0; // empty: nothing to do, no device needed
  EXPECT_EQ(copyRegion(nullptr, nullptr, r, nullptr), cudaSuccess);
  EXPECT_EQ(regionElements(r), 0);
}

TEST(RegionCopy, MatchesTheHostReferenceOnA4dHalo) {
  TOFU_REQUIRE_GPU();
  const int64_t shape[4] = {4, 6, 33, 17};
  Region r;
  r.rank = 4;
  const int64_t begin[4] = {1, 0, 15, 3}, extent[4] = {2, 6, 18, 11};
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    r.begin[d] = begin[d];
    r.extent[d] = extent[d];
    r.srcStride[d] = stride;
    stride *= shape[d];
  }
  std::vector<float> src(stride);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float &v : src)
    v = dist(rng);
  float *dSrc = nullptr, *dDst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&dSrc), src.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&dDst), regionElements(r) * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dSrc, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(copyRegion(dSrc, dDst, r, nullptr), cudaSuccess);
  std::vector<float> got(regionElements(r));
  ASSERT_EQ(cudaMemcpy(got.data(), dDst, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(got, hostCopy(src, r));
  cudaFree(dSrc);
  cudaFree(dDst);
}

} // namespace
} // namespace tofu::cuda
