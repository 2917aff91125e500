// Checked sizes: the one place byte counts, element counts, worker counts and numbers read
// from users are bounded. Every quantity the search, the plans and the engine add up (a
// step's communication, a worker's peak, a checkpoint's offsets) is a sum of tensor sizes
// times at most the worker count; bounding the graph's bytes and the workers keeps every
// such sum inside int64, so an overflow is refused where it enters, with a name, and never
// wraps into a negative byte count downstream.
#ifndef TOFU_ANALYSIS_CHECKED_H
#define TOFU_ANALYSIS_CHECKED_H

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The most bytes a graph's tensors may hold together (1 PiB): far above any model, and
/// times kMaxWorkers still inside int64.
inline constexpr int64_t kMaxGraphBytes = int64_t(1) << 50;
/// The most workers a plan may have (the search, the execution plans and the cost sums are
/// built for at most this many).
inline constexpr unsigned kMaxWorkers = 4096;

inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// The product of `extents` (1 for none), or none when it overflows int64.
inline std::optional<int64_t> checkedProduct(const std::vector<int64_t> &extents) {
  int64_t n = 1;
  for (int64_t e : extents) {
    auto m = checkedMul(n, e);
    if (!m)
      return std::nullopt;
    n = *m;
  }
  return n;
}

/// A decimal integer in [lo, hi], the whole of `text`; else an error naming `what`
/// ("'99999999999999999999' is out of range for the layer count (1 to 1000)").
inline llvm::Expected<int64_t> parseInteger(llvm::StringRef text, int64_t lo, int64_t hi,
                                            const std::string &what) {
  auto range = [&] { return "(" + std::to_string(lo) + " to " + std::to_string(hi) + ")"; };
  const std::string s = text.str();
  if (s.empty() || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "'%s' is not an integer for %s",
                                   s.c_str(), what.c_str());
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "'%s' is not an integer for %s",
                                   s.c_str(), what.c_str());
  if (errno == ERANGE || v < lo || v > hi)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "'%s' is out of range for %s %s",
                                   s.c_str(), what.c_str(), range().c_str());
  return static_cast<int64_t>(v);
}

} // namespace tofu

#endif // TOFU_ANALYSIS_CHECKED_H
