// Region copies between row-major buffers, shared by the backends' host-side code.
#include "runtime/backend.h"

#include <cstring>

#include "analysis/reducer.h"
#include "support/bf16.h"

namespace tofu {

size_t crossingPhase(size_t step, Backend::Phase phase, size_t steps) {
  return phase == Backend::Phase::Carry   ? 2 * steps
         : phase == Backend::Phase::Fetch ? 2 * step
                                          : 2 * step + 1;
}

llvm::Error forEachCopyFrom(
    const Program &program, unsigned me,
    llvm::function_ref<llvm::Error(size_t phase, unsigned to, const RegionCopy &copy)> fn) {
  const size_t n = program.worker[me].steps.size();
  for (unsigned v = 0; v < program.workers; ++v) {
    if (v == me)
      continue;
    const WorkerProgram &other = program.worker[v];
    if (other.steps.size() != n)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the workers' programs have different numbers of steps");
    auto each = [&](size_t phase, const std::vector<RegionCopy> &copies) -> llvm::Error {
      for (const RegionCopy &c : copies)
        if (c.from == me)
          if (llvm::Error e = fn(phase, v, c))
            return e;
      return llvm::Error::success();
    };
    for (size_t i = 0; i < n; ++i) {
      if (llvm::Error e = each(2 * i, other.steps[i].fetch))
        return e;
      if (llvm::Error e = each(2 * i + 1, other.steps[i].assemble))
        return e;
    }
    if (llvm::Error e = each(2 * n, other.carries))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error forEachCopyInto(const Program &program, unsigned me,
                            llvm::function_ref<llvm::Error(size_t phase, const RegionCopy &copy,
                                                           const ir::Reducer *reducer)>
                                fn) {
  const WorkerProgram &wp = program.worker[me];
  auto each = [&](size_t phase, const std::vector<RegionCopy> &copies,
                  const ir::Reducer *reducer) -> llvm::Error {
    for (const RegionCopy &c : copies)
      if (c.from != me)
        if (llvm::Error e = fn(phase, c, c.combine ? reducer : nullptr))
          return e;
    return llvm::Error::success();
  };
  const size_t n = wp.steps.size();
  for (size_t i = 0; i < n; ++i) {
    const ProgramStep &st = wp.steps[i];
    if (llvm::Error e = each(2 * i, st.fetch, nullptr))
      return e;
    if (llvm::Error e = each(2 * i + 1, st.assemble, &program.nodes[st.node].reducer))
      return e;
  }
  return each(2 * n, wp.carries, nullptr);
}

namespace {

/// Calls `row(dstOffset, srcOffset, n)` (element offsets) for each innermost row of `box`
/// between buffers holding `dstBox` and `srcBox`; a box of rank 0 is one row of one element.
template <typename Row>
void forEachRow(const Box &dstBox, const Box &srcBox, const Box &box, Row row) {
  const size_t r = box.size();
  if (boxElements(box) == 0 && r > 0)
    return;
  if (r == 0) {
    row(int64_t(0), int64_t(0), int64_t(1));
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
    row(doff, soff, inner);
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

} // namespace

void copyBox(float *dst, const Box &dstBox, const float *src, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer) {
  forEachRow(dstBox, srcBox, box, [&](int64_t doff, int64_t soff, int64_t n) {
    if (reducer) {
      for (int64_t k = 0; k < n; ++k)
        dst[doff + k] = reducerCombine(*reducer, dst[doff + k], src[soff + k]);
    } else {
      std::memcpy(dst + doff, src + soff, sizeof(float) * n);
    }
  });
}

void copyBox(void *dst, loops::Element dstElement, const Box &dstBox, const void *src,
             loops::Element srcElement, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer) {
  using loops::Element;
  if (dstElement == Element::F32 && srcElement == Element::F32)
    return copyBox(static_cast<float *>(dst), dstBox, static_cast<const float *>(src), srcBox, box,
                   reducer);
  auto *d16 = static_cast<uint16_t *>(dst);
  auto *s16 = static_cast<const uint16_t *>(src);
  auto *d32 = static_cast<float *>(dst);
  auto *s32 = static_cast<const float *>(src);
  if (dstElement == srcElement && !reducer) { // bfloat16 to bfloat16: the bits
    forEachRow(dstBox, srcBox, box, [&](int64_t doff, int64_t soff, int64_t n) {
      std::memcpy(d16 + doff, s16 + soff, sizeof(uint16_t) * n);
    });
    return;
  }
  // Through a float32 row: the source widened, combined with the destination's values where
  // a reducer says so, and stored in the destination's type (rounded once).
  std::vector<float> in, acc;
  forEachRow(dstBox, srcBox, box, [&](int64_t doff, int64_t soff, int64_t n) {
    const size_t m = static_cast<size_t>(n);
    const float *from = s32 + soff;
    if (srcElement == Element::BF16) {
      in.resize(m);
      fromBf16(s16 + soff, in.data(), m);
      from = in.data();
    }
    if (reducer) {
      acc.resize(m);
      if (dstElement == Element::BF16)
        fromBf16(d16 + doff, acc.data(), m);
      else
        std::memcpy(acc.data(), d32 + doff, sizeof(float) * m);
      for (size_t k = 0; k < m; ++k)
        acc[k] = reducerCombine(*reducer, acc[k], from[k]);
      from = acc.data();
    }
    if (dstElement == Element::BF16)
      toBf16(from, d16 + doff, m);
    else
      std::memcpy(d32 + doff, from, sizeof(float) * m);
  });
}

} // namespace tofu
