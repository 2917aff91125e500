// One table of what each reducer means: its identity and how two values combine, used by
// the interpreter, the strategy verifier, the executors and the kernel generator alike.
// Combines propagate NaN whatever the reducer: a poisoned (unprovided) input must show in
// the result, so Max and Min do not drop a NaN the way std::max and fmax do.
#ifndef TOFU_ANALYSIS_REDUCER_H
#define TOFU_ANALYSIS_REDUCER_H

#include <cmath>
#include <limits>

#include "analysis/ir.h"

namespace tofu {

/// The value a reduction over nothing has.
template <typename T> T reducerIdentity(ir::Reducer r) {
  switch (r) {
  case ir::Reducer::Sum:
    return T(0);
  case ir::Reducer::Prod:
    return T(1);
  case ir::Reducer::Max:
    return -std::numeric_limits<T>::infinity();
  case ir::Reducer::Min:
    return std::numeric_limits<T>::infinity();
  }
  return T(0);
}

/// `acc` combined with `v`; NaN when either is NaN.
template <typename T> T reducerCombine(ir::Reducer r, T acc, T v) {
  switch (r) {
  case ir::Reducer::Sum:
    return acc + v;
  case ir::Reducer::Prod:
    return acc * v;
  case ir::Reducer::Max:
    return std::isnan(acc) || std::isnan(v) ? std::numeric_limits<T>::quiet_NaN()
                                            : (v > acc ? v : acc);
  case ir::Reducer::Min:
    return std::isnan(acc) || std::isnan(v) ? std::numeric_limits<T>::quiet_NaN()
                                            : (v < acc ? v : acc);
  }
  return acc;
}

} // namespace tofu

#endif // TOFU_ANALYSIS_REDUCER_H
