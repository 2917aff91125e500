// A hash for integer vectors (memo keys), FNV-1a over the values.
#ifndef TOFU_ANALYSIS_HASH_H
#define TOFU_ANALYSIS_HASH_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tofu {

struct VectorHash {
  size_t operator()(const std::vector<int64_t> &v) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v)
      h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

} // namespace tofu

#endif // TOFU_ANALYSIS_HASH_H
