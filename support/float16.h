// float16 (IEEE binary16) and float32, converted by bit operations rather than _Float16,
// which not every compiler of the project has (clang 14 refuses it on x86-64, and the fuzzers
// build with it). (bfloat16's conversions are bf16.h's.)
#ifndef TOFU_SUPPORT_FLOAT16_H
#define TOFU_SUPPORT_FLOAT16_H

#include <cstdint>

namespace tofu {

/// `x` rounded to the nearest float16, ties to even, as its bits: past the largest float16
/// (65504) by half a quantum or more it is infinite, below the smallest normal (2^-14) it is
/// subnormal or zero, and a NaN stays a NaN (made quiet, the top of its payload kept).
uint16_t floatToHalf(float x);
/// The float32 holding float16 `h` exactly.
float halfToFloat(uint16_t h);

} // namespace tofu

#endif // TOFU_SUPPORT_FLOAT16_H
