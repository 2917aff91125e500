// What every generated kernel shares, written once: the kernel ABI (the argument block of a
// C++ kernel and of a CUDA kernel) and the scalar semantics of the interpreter (NaN-
// propagating comparisons, min, max and reducer combine; floor division of indices; the
// native opaque functions). It is a real header: host code includes it for the ABI, the
// prelude test checks its helpers against analysis/reducer.h, and the kernel generator puts
// its text at the top of every kernel translation unit (kernelPrelude()), C++ or CUDA,
// after defining TOFU_KERNEL_UNIT. Three compilers read it: the host compiler (host code,
// and the C++ kernels, with OpenMP), NVRTC (CUDA kernels) and nvcc (the CUDA backend's own
// kernels, which include it for tofu_combine).
#ifndef TOFU_CODEGEN_KERNEL_PRELUDE_H
#define TOFU_CODEGEN_KERNEL_PRELUDE_H

// --- the target -----------------------------------------------------------------------
#if defined(__CUDACC_RTC__)
typedef long long i64;
typedef int int32_t;
typedef unsigned long long uint64_t;
#define TOFU_DEV static __device__ __forceinline__
#define TOFU_NAN __int_as_float(0x7fffffff)
#define TOFU_INF __int_as_float(0x7f800000)
#define TOFU_I64_MIN (-9223372036854775807LL - 1)
#else
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
typedef int64_t i64;
#if defined(__CUDACC__)
#define TOFU_DEV static __host__ __device__ __forceinline__
#else
#define TOFU_DEV static inline
#endif
#define TOFU_NAN __builtin_nanf("")
#define TOFU_INF __builtin_inff()
#define TOFU_I64_MIN INT64_MIN
#endif

// --- the kernel ABI -------------------------------------------------------------------
extern "C" {
/// What a C++ kernel is called with. `ints` holds, per variable of the op, its range
/// [lo, hi), then per input and dimension the tensor's extent, the region's origin and the
/// region's extent.
struct TofuKernelArgs {
  const i64 *ints;
  const float *const *in; ///< per input, its region, row-major
  float *out;             ///< the share, row-major over the output variables' ranges
  int32_t fast;           ///< every affine read lies inside its region: loads go unchecked
  int32_t threads;        ///< OpenMP threads
  /// kernelScratchBytes() bytes the kernel keeps its temporaries in (may be null when it
  /// needs none); overwritten by the call.
  float *scratch;
};
}

/// What a CUDA kernel's entry points take, by value: the same fields with the integers and
/// input pointers inline (an op with `Ints` integer arguments and `Inputs` inputs, each at
/// least 1), then how many parts a temporary's pass splits each value into.
template <int Ints, int Inputs> struct TofuCudaArgs {
  i64 ints[Ints];
  const float *in[Inputs];
  float *out;
  int fast;
  int threads;
  float *scratch;
  i64 parts;
};

// --- scalar semantics -----------------------------------------------------------------
TOFU_DEV i64 tofu_fdiv(i64 a, i64 b) {
  i64 q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
TOFU_DEV i64 tofu_imod(i64 a, i64 b) { return a - tofu_fdiv(a, b) * b; }
// The same for a positive divisor (a literal: the compiler divides by multiplying).
TOFU_DEV i64 tofu_fdivp(i64 a, i64 b) {
  i64 q = a / b;
  return q - (a - q * b < 0);
}
TOFU_DEV i64 tofu_imodp(i64 a, i64 b) {
  i64 r = a % b;
  return r + (r < 0 ? b : 0);
}
TOFU_DEV i64 tofu_didx(float v) {
  return (v == v && v - v == 0.0f) ? (i64)floorf(v) : TOFU_I64_MIN;
}
TOFU_DEV float tofu_rsqrt(float x) { return 1.0f / sqrtf(x); }
TOFU_DEV float tofu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
TOFU_DEV float tofu_relu(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
TOFU_DEV float tofu_sign(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }
// Written without short-circuits (`|`, not `||`; the choice before the NaN test) so that a
// SIMD loop over them needs no control flow and vectorises.
TOFU_DEV float tofu_min(float x, float y) {
  const float r = y < x ? y : x;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_max(float x, float y) {
  const float r = y > x ? y : x;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_select(float c, float x, float y) {
  const float r = c != 0.0f ? x : y;
  return c != c ? TOFU_NAN : r;
}
TOFU_DEV float tofu_isnan(float x) { return x != x ? 1.0f : 0.0f; }
TOFU_DEV float tofu_isinf(float x) { return ((x == TOFU_INF) | (x == -TOFU_INF)) ? 1.0f : 0.0f; }
// x rounded to the nearest value of a narrower floating-point format (halves to even, as
// IEEE 754 and PyTorch round), `bits` significant bits, normal exponents from `emin`,
// largest finite value `max`: the quantum at x's exponent is a power of two, so the
// division and the product are exact and nearbyintf does the rounding. Past `max` (by half
// a quantum or more, which the rounding shows) it is infinite; NaN and infinities stay.
TOFU_DEV float tofu_round_narrow(float x, int bits, int emin, float max) {
  if (x != x || x == 0.0f || x == TOFU_INF || x == -TOFU_INF)
    return x;
  int e = ilogbf(x);
  e = e < emin ? emin : e;
  const float q = ldexpf(1.0f, e - (bits - 1));
  const float r = nearbyintf(x / q) * q;
  return r > max ? TOFU_INF : r < -max ? -TOFU_INF : r;
}
/// float16 (IEEE binary16): 11 significant bits, normal from 2^-14, at most 65504.
TOFU_DEV float tofu_round_f16(float x) { return tofu_round_narrow(x, 11, -14, 65504.0f); }

// --- storage in bfloat16 ----------------------------------------------------------------
// A buffer of bfloat16 elements holds each as its 16 bits (the upper half of a float32);
// kernels load it widened to float32 and round what they store to the nearest, ties to
// even, as support/bf16.h and PyTorch do. Arithmetic stays float32.
typedef unsigned short tofu_bf16;
#if defined(__CUDACC_RTC__)
#define TOFU_BITS_OF(x) ((unsigned)__float_as_uint(x))
#define TOFU_FLOAT_OF(u) __uint_as_float(u)
#else
TOFU_DEV unsigned tofu_bits_of(float x) {
  unsigned u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u;
}
TOFU_DEV float tofu_float_of(unsigned u) {
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
}
#define TOFU_BITS_OF(x) tofu_bits_of(x)
#define TOFU_FLOAT_OF(u) tofu_float_of(u)
#endif
/// The float32 a bfloat16 holds (exact).
TOFU_DEV float tofu_from_bf16(tofu_bf16 b) { return TOFU_FLOAT_OF((unsigned)b << 16); }
/// `x` rounded to the nearest bfloat16, ties to even; a NaN stays a (quiet) NaN.
TOFU_DEV tofu_bf16 tofu_to_bf16(float x) {
  const unsigned u = TOFU_BITS_OF(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (tofu_bf16)((u >> 16) | 0x40u);
  return (tofu_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/// bfloat16: float32's exponents, 8 significant bits. Rounding the lower 16 bits away
/// (tofu_to_bf16) gives what tofu_round_narrow(x, 8, -126, 3.3895313892515355e38f) gives, a
/// float32 subnormal and a carry past the largest bfloat16 into infinity included, in a few
/// integer operations that vectorise (the other's ilogbf, ldexpf and nearbyintf do not).
TOFU_DEV float tofu_round_bf16(float x) { return tofu_from_bf16(tofu_to_bf16(x)); }
TOFU_DEV float tofu_eq(float x, float y) {
  const float r = x == y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_ne(float x, float y) {
  const float r = x != y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_lt(float x, float y) {
  const float r = x < y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_le(float x, float y) {
  const float r = x <= y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_gt(float x, float y) {
  const float r = x > y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}
TOFU_DEV float tofu_ge(float x, float y) {
  const float r = x >= y ? 1.0f : 0.0f;
  return ((x != x) | (y != y)) ? TOFU_NAN : r;
}

/// The reducers' combine, NaN-propagating (ir::Reducer's order: 0 sum, 1 product, 2 max,
/// 3 min). Generated loops combine through tofu_max and tofu_min directly; a block's
/// partial values (tofu_block_reduce), OpenMP's SIMD reductions and the CUDA backend's
/// combining copies go through this.
TOFU_DEV float tofu_combine(int op, float a, float b) {
  return op == 0 ? a + b : op == 1 ? a * b : op == 2 ? tofu_max(a, b) : tofu_min(a, b);
}

// --- native opaque functions: one n x n matrix `a` (scratch), the result in `out` -----
TOFU_DEV void tofu_opq_Cholesky(float *a, i64 n, float *out) {
  for (i64 j = 0; j < n; ++j)
    for (i64 i = 0; i < n; ++i)
      out[i * n + j] = 0.0f;
  for (i64 j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (i64 k = 0; k < j; ++k)
      d -= (double)out[j * n + k] * out[j * n + k];
    out[j * n + j] = (float)sqrt(d); // NaN when the matrix is not positive definite
    for (i64 i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (i64 k = 0; k < j; ++k)
        s -= (double)out[i * n + k] * out[j * n + k];
      out[i * n + j] = (float)(s / out[j * n + j]);
    }
  }
}
TOFU_DEV void tofu_opq_MatrixInverse(float *a, i64 n, float *inv) {
  for (i64 i = 0; i < n * n; ++i)
    inv[i] = 0.0f;
  for (i64 i = 0; i < n; ++i)
    inv[i * n + i] = 1.0f;
  for (i64 c = 0; c < n; ++c) {
    i64 p = c;
    for (i64 r = c + 1; r < n; ++r)
      if (fabsf(a[r * n + c]) > fabsf(a[p * n + c]))
        p = r;
    if (a[p * n + c] == 0.0f || a[p * n + c] != a[p * n + c]) { // singular
      for (i64 i = 0; i < n * n; ++i)
        inv[i] = TOFU_NAN;
      return;
    }
    for (i64 k = 0; k < n; ++k) {
      float t = a[c * n + k];
      a[c * n + k] = a[p * n + k];
      a[p * n + k] = t;
      t = inv[c * n + k];
      inv[c * n + k] = inv[p * n + k];
      inv[p * n + k] = t;
    }
    const float d = a[c * n + c];
    for (i64 k = 0; k < n; ++k) {
      a[c * n + k] /= d;
      inv[c * n + k] /= d;
    }
    for (i64 r = 0; r < n; ++r) {
      if (r == c)
        continue;
      const float f = a[r * n + c];
      for (i64 k = 0; k < n; ++k) {
        a[r * n + k] -= f * a[c * n + k];
        inv[r * n + k] -= f * inv[c * n + k];
      }
    }
  }
}
TOFU_DEV void tofu_opq_Determinant(float *a, i64 n, float *out) {
  double det = 1.0;
  for (i64 c = 0; c < n; ++c) { // LU with partial pivoting
    i64 p = c;
    for (i64 r = c + 1; r < n; ++r)
      if (fabsf(a[r * n + c]) > fabsf(a[p * n + c]))
        p = r;
    if (a[p * n + c] == 0.0f) {
      det = 0.0;
      break;
    }
    if (p != c) {
      for (i64 k = 0; k < n; ++k) {
        float t = a[c * n + k];
        a[c * n + k] = a[p * n + k];
        a[p * n + k] = t;
      }
      det = -det;
    }
    det *= a[c * n + c];
    for (i64 r = c + 1; r < n; ++r) {
      const float f = a[r * n + c] / a[c * n + c];
      for (i64 k = c; k < n; ++k)
        a[r * n + k] -= f * a[c * n + k];
    }
  }
  out[0] = (float)det;
}

// --- what only kernel translation units need ------------------------------------------
#if defined(TOFU_KERNEL_UNIT) && !defined(__CUDACC_RTC__)
// An opaque call site's memo in one thread of one kernel call: the last argument slice's
// fixed coordinates and the function's result for it.
struct TofuOpqMemo {
  bool have = false;
  i64 key[10];
  std::vector<float> arg, res;
};
// glibc's vector math (libmvec, linked with the kernels): the SIMD variants of the float
// functions the kernels call, so that loops over them vectorise (<cmath> declares them only
// under -ffast-math, which would also drop the NaN tests the semantics need).
#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP)
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float sinf(float) noexcept;
#pragma omp declare simd notinbranch
float cosf(float) noexcept;
#pragma omp declare simd notinbranch
float tanf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float powf(float, float) noexcept;
}
#endif
// Max and Min as OpenMP reductions (SIMD loops), NaN-propagating like the combine.
#pragma omp declare reduction(tofu_maxr:float                                                      \
                              : omp_out = tofu_combine(2, omp_out, omp_in))                        \
    initializer(omp_priv = -TOFU_INF)
#pragma omp declare reduction(tofu_minr:float                                                      \
                              : omp_out = tofu_combine(3, omp_out, omp_in))                        \
    initializer(omp_priv = TOFU_INF)
#endif

#if defined(TOFU_KERNEL_UNIT) && defined(__CUDACC_RTC__)
#define TOFU_OPQ_MAX 256 // elements of an opaque function's matrix in a thread's local memory
// A reduction's partial values of every thread of a block combined by tofu_combine's `op`
// and given to every thread. blockDim.x is a multiple of 32.
static __device__ float tofu_block_reduce(float v, int op) {
  __shared__ float part[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = tofu_combine(op, v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads(); // the previous call's result has been read
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = part[0];
    for (unsigned w = 1; w < (blockDim.x + 31u) / 32u; ++w)
      r = tofu_combine(op, r, part[w]);
    part[0] = r;
  }
  __syncthreads();
  return part[0];
}
#endif

#endif // TOFU_CODEGEN_KERNEL_PRELUDE_H
