// float16 and float32 (float16.h).
#include "support/float16.h"

#include <cstring>

namespace tofu {

uint16_t floatToHalf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) // NaN: quiet, the top of its payload kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  if (mag >= 0x477ff000u) // 65520 and up (halfway past 65504, the largest) and infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (mag < 0x38800000u) {  // below 2^-14: a subnormal, in units of 2^-24
    if (mag <= 0x33000000u) // at most 2^-25, half the smallest: zero (a tie goes to even 0)
      return static_cast<uint16_t>(sign);
    const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e; // m * 2^(e - 150) / 2^-24, e in [102, 112]
    uint32_t r = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1u)))
      ++r; // 0x400 is the smallest normal: its encoding
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = (mag - 0x38000000u) >> 13; // the exponent rebiased from 127 to 15
  const uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h; // a carry into the exponent is right, up to 0x7c00 (infinity)
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

} // namespace tofu
