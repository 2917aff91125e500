// bfloat16 and float32, converted by bit operations: a bfloat16 is the upper half of a
// float32, so widening shifts 16 bits in, and narrowing rounds the lower 16 bits away to the
// nearest (ties to even), as PyTorch and the kernels' prelude (tofu_round_bf16) round. Array
// forms run 8 elements at a time on AVX2 where the CPU has it.
#ifndef TOFU_SUPPORT_BF16_H
#define TOFU_SUPPORT_BF16_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tofu {

/// `x` rounded to the nearest bfloat16, ties to even, as its bits. Values past the largest
/// bfloat16 by half a quantum or more become infinite; a NaN stays a NaN (made quiet).
inline uint16_t bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep its sign and top payload, set it quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The float32 holding bfloat16 `bits` exactly.
inline float floatFromBf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// `x` rounded to bfloat16, as a float32.
inline float roundToBf16(float x) { return floatFromBf16(bf16Bits(x)); }

/// n elements of `in` narrowed into `out` (bf16Bits each).
void toBf16(const float *in, uint16_t *out, size_t n);
/// n elements of `in` widened into `out` (exact).
void fromBf16(const uint16_t *in, float *out, size_t n);
/// Whether the array forms run on AVX2 on this CPU (else one element at a time).
bool bf16ArraysVectorised();

} // namespace tofu

#endif // TOFU_SUPPORT_BF16_H
