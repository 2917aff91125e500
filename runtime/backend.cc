// Region copies between row-major buffers, shared by the backends' host-side code.
#include "runtime/backend.h"

#include <cstring>

#include "analysis/reducer.h"

namespace tofu {

void copyBox(float *dst, const Box &dstBox, const float *src, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer) {
  const size_t r = box.size();
  if (boxElements(box) == 0 && r > 0)
    return;
  if (r == 0) {
    dst[0] = reducer ? reducerCombine(*reducer, dst[0], src[0]) : src[0];
    return;
  }
  std::vector<int64_t> ds(r, 1), ss(r, 1);
  for (size_t d = r - 1; d-- > 0;) {
    ds[d] = ds[d + 1] * dstBox[d + 1].size();
    ss[d] = ss[d + 1] * srcBox[d + 1].size();
  }
  const int64_t inner = box[r - 1].size();
  std::vector<int64_t> c(r, 0);
  for (;;) {
    int64_t doff = 0, soff = 0;
    for (size_t d = 0; d < r; ++d) {
      int64_t abs = box[d].lo + c[d];
      doff += (abs - dstBox[d].lo) * ds[d];
      soff += (abs - srcBox[d].lo) * ss[d];
    }
    if (reducer) {
      for (int64_t k = 0; k < inner; ++k)
        dst[doff + k] = reducerCombine(*reducer, dst[doff + k], src[soff + k]);
    } else {
      std::memcpy(dst + doff, src + soff, sizeof(float) * inner);
    }
    size_t d = r - 1;
    while (d-- > 0) {
      if (++c[d] < box[d].size())
        break;
      c[d] = 0;
    }
    if (d == static_cast<size_t>(-1))
      return;
  }
}

} // namespace tofu
