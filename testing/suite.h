// What the suite (tools/test.sh) gives a test: scratch folders, the kernel cache every test
// shares, and a sample of the cases to run under AddressSanitizer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "support/sanitizer.h"

namespace tofu {

/// True in a build with AddressSanitizer (bazel test --config=asan), where code runs some
/// 3 to 10 times slower.
inline constexpr bool kUnderAsan = TOFU_ASAN;

/// `leaf` under the test's scratch folder ($TEST_TMPDIR, which Bazel empties per test run;
/// /tmp outside Bazel).
inline std::string testTmpDir(const std::string &leaf) {
  const char *t = std::getenv("TEST_TMPDIR");
  return std::string(t && *t ? t : "/tmp") + "/" + leaf;
}

/// The folder a test compiles its kernels (C++ and CUDA) into: the suite's shared cache where
/// tools/test.sh gives one (TOFU_TEST_KERNEL_CACHE), so that the tests, and the plain and
/// ASan runs, compile a kernel once; else a scratch folder of the test's own. Entries are
/// keyed by a hash of source, compiler and flags and written by rename, so sharing is safe.
inline std::string testKernelCache() {
  const char *shared = std::getenv("TOFU_TEST_KERNEL_CACHE");
  return shared && *shared ? std::string(shared) : testTmpDir("kernels");
}

/// Whether case `index` of a test's list runs: every case, except under AddressSanitizer,
/// where one case in `every` does. The sample starts at an offset that tools/test.sh draws
/// from the commit (TOFU_SAMPLE_OFFSET), so that successive commits cover every case; the
/// plain run always runs them all.
inline bool runsInThisSample(size_t index, size_t every) {
  if (!kUnderAsan || every <= 1)
    return true;
  const char *o = std::getenv("TOFU_SAMPLE_OFFSET");
  const size_t offset = o && *o ? static_cast<size_t>(std::strtoull(o, nullptr, 10)) : 0;
  return (index + offset) % every == 0;
}

/// Whether case `index` of a sampled check runs: one case in `every` in the default run, the
/// sample rotating with the commit (TOFU_SAMPLE_OFFSET), and every case with TOFU_FULL=1
/// (tools/test.sh --full); under AddressSanitizer one in `every * asanEvery`.
inline bool runsInSampledCheck(size_t index, size_t every, size_t asanEvery = 3) {
  const char *full = std::getenv("TOFU_FULL");
  if (full && std::string(full) == "1")
    return true;
  const size_t n = std::max<size_t>(1, every * (kUnderAsan ? asanEvery : 1));
  const char *o = std::getenv("TOFU_SAMPLE_OFFSET");
  const size_t offset = o && *o ? static_cast<size_t>(std::strtoull(o, nullptr, 10)) : 0;
  return (index + offset) % n == 0;
}

} // namespace tofu
