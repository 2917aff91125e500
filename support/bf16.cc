// The array forms of support/bf16.h: AVX2 where the CPU has it (chosen once, at run time),
// else the scalar conversions.
#include "support/bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tofu {

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) void toBf16Avx2(const float *in, uint16_t *out, size_t n) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff),
                magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                quiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(in + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(half, lsb));
    // NaN (a magnitude above infinity's; both are non-negative, so the signed compare holds)
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
    const __m256i bits =
        _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    // Eight 32-bit lanes to eight 16-bit ones: packus works within 128-bit halves.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i)
    out[i] = bf16Bits(in[i]);
}

__attribute__((target("avx2"))) void fromBf16Avx2(const uint16_t *in, float *out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i));
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i), u);
  }
  for (; i < n; ++i)
    out[i] = floatFromBf16(in[i]);
}
#endif

bool hasAvx2() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

} // namespace

bool bf16ArraysVectorised() { return hasAvx2(); }

void toBf16(const float *in, uint16_t *out, size_t n) {
#if defined(__x86_64__)
  if (hasAvx2())
    return toBf16Avx2(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i)
    out[i] = bf16Bits(in[i]);
}

void fromBf16(const uint16_t *in, float *out, size_t n) {
#if defined(__x86_64__)
  if (hasAvx2())
    return fromBf16Avx2(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i)
    out[i] = floatFromBf16(in[i]);
}

} // namespace tofu
