// Boxes: the half-open index ranges of a tensor's region, and what every layer asks of them
// (their size, their common part, containment, a balanced share). The analysis, the search's
// cost model and codegen's plans all use these; the search evaluates them millions of times,
// so they are inline.
#ifndef TOFU_ANALYSIS_BOX_H
#define TOFU_ANALYSIS_BOX_H

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace tofu {

/// A half-open range of indices.
struct Range {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool operator==(const Range &o) const { return lo == o.lo && hi == o.hi; }
};
using Box = std::vector<Range>;

/// The elements of `b` (0 where a range is empty).
inline int64_t boxElements(const Box &b) {
  int64_t n = 1;
  for (const Range &r : b)
    n *= r.size();
  return n;
}

/// The box of a whole tensor of `shape`.
inline Box wholeBox(const std::vector<int64_t> &shape) {
  Box all;
  for (int64_t e : shape)
    all.push_back({0, e});
  return all;
}

/// The common part of two boxes of one tensor (empty ranges where they do not meet).
inline Box intersectBoxes(const Box &a, const Box &b) {
  Box out(a.size());
  for (size_t d = 0; d < a.size(); ++d)
    out[d] = {std::max(a[d].lo, b[d].lo), std::min(a[d].hi, b[d].hi)};
  return out;
}

/// The common part of two boxes, where it holds an element.
inline std::optional<Box> overlap(const Box &a, const Box &b) {
  Box r;
  r.reserve(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    const int64_t lo = std::max(a[d].lo, b[d].lo), hi = std::min(a[d].hi, b[d].hi);
    if (hi <= lo)
      return std::nullopt;
    r.push_back({lo, hi});
  }
  return r;
}

/// The elements `a` and `b` share, with `b`'s dimension `d` (where d >= 0) taken as `r`
/// instead: what the search asks of a tile against a region without building either box.
inline int64_t intersectionElements(const Box &a, const Box &b, int d = -1, Range r = {}) {
  int64_t n = 1;
  for (size_t k = 0; k < a.size(); ++k) {
    const Range &bk = int(k) == d ? r : b[k];
    const int64_t lo = std::max(a[k].lo, bk.lo), hi = std::min(a[k].hi, bk.hi);
    if (hi <= lo)
      return 0;
    n *= hi - lo;
  }
  return n;
}

/// Whether `inner` lies in `outer` (dimensions `inner` is empty in do not count).
inline bool boxContains(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.size(); ++d)
    if (inner[d].size() > 0 && (inner[d].lo < outer[d].lo || inner[d].hi > outer[d].hi))
      return false;
  return true;
}

/// Worker `w`'s share when `extent` is split into `parts` (balanced; when `parts` does not
/// divide `extent`, shares differ by at most one).
inline Range partOf(int64_t extent, unsigned parts, unsigned w) {
  return {extent * w / parts, extent * (w + 1) / parts};
}

} // namespace tofu

#endif // TOFU_ANALYSIS_BOX_H
