// Generated C++ kernels, compiled by the host compiler into shared objects and loaded with
// dlopen. Kernels are compiled in batches (units of several kernels, the units in
// parallel) and cached on disk under a hash of each unit's source, the compiler and its
// flags: a second run with the same kernels compiles nothing. A per-kernel index in the cache
// names the unit each kernel was compiled in, so a kernel that a later batch groups with other
// kernels is loaded from that unit rather than compiled again.
#ifndef TOFU_RUNTIME_CPU_KERNELS_H
#define TOFU_RUNTIME_CPU_KERNELS_H

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "codegen/kernel_gen.h"
#include "runtime/kernel_stats.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The default flags of generated C++ kernels: -O3 -march=native, ... . $TOFU_KERNEL_MARCH, when
/// set, replaces `native` (e.g. `x86-64-v3`: AVX2 and FMA without AVX-512, to run as an
/// AVX2-only CPU would on one with AVX-512). An ISA the CPU lacks makes kernels that fault.
std::string defaultKernelFlags();

struct KernelCompileOptions {
  /// Where compiled units are kept. Default: $TOFU_KERNEL_CACHE, else
  /// $XDG_CACHE_HOME/tofu/kernels, else $HOME/.cache/tofu/kernels.
  std::string cacheDir;
  /// The compiler. Default: $CXX, else c++.
  std::string compiler;
  std::string flags = defaultKernelFlags();
  /// Libraries linked after the source: glibc's vector math (libmvec), whose SIMD variants
  /// of expf, logf, tanhf, ... the prelude declares, so that loops calling them vectorise.
#if defined(__x86_64__) && defined(__GLIBC__)
  std::string libs = "-lmvec";
#else
  std::string libs;
#endif
  unsigned jobs = 0; ///< units compiled at once (default: the machine's cores)
  unsigned kernelsPerUnit = 12;
};

/// The loaded kernels of one or more batches, by kernel name.
class CpuKernelLibrary {
public:
  using Fn = void (*)(const TofuKernelArgs *);

  CpuKernelLibrary() = default;
  CpuKernelLibrary(const CpuKernelLibrary &) = delete;
  CpuKernelLibrary &operator=(const CpuKernelLibrary &) = delete;
  ~CpuKernelLibrary();

  /// Compiles (or finds in the cache) and loads every kernel of `kernels` not loaded yet.
  /// A compiler failure names the unit's source file and quotes the compiler.
  llvm::Error add(const std::vector<KernelSource> &kernels,
                  const KernelCompileOptions &options = {});
  /// The kernel named `name`, or null.
  Fn find(const std::string &name) const;
  /// Totals over every add().
  const KernelCompileStats &stats() const { return stats_; }

private:
  std::map<std::string, Fn> fns_;
  std::vector<void *> handles_;
  KernelCompileStats stats_;
};

/// The default cache directory (see KernelCompileOptions::cacheDir).
std::string defaultKernelCacheDir();

/// What the compiler made of a C++ kernel's SIMD loops (the loop IR's vector loops, printed
/// as `omp simd`) in its unchecked nest, the one the engine runs: how many there are, and
/// which it vectorised or replaced by a library call (a row of zeros becomes a memset).
struct VectorizationReport {
  unsigned simdLoops = 0;
  unsigned vectorized = 0;
  std::vector<std::string> missed; ///< per loop not vectorised, its `for` line and why
};

/// Compiles `k` (with the prelude, options' compiler and flags, no output kept) asking for
/// the compiler's vectorisation remarks (GCC's -fopt-info-vec-all) and matches them to the
/// kernel's SIMD loops.
llvm::Expected<VectorizationReport> vectorizationReport(const KernelSource &k,
                                                        const KernelCompileOptions &options = {});

// --- What the C++ and the NVRTC batch compilers share ------------------------------

/// One translation unit of a batch: its kernels and its source (the dialect's prelude, then
/// each kernel).
struct KernelUnit {
  std::vector<const KernelSource *> kernels;
  std::string source;
};

/// The distinct kernels of `kernels` (by name, in name order: the same set always forms the
/// same units) in at least `minUnits` units of about `perUnit` kernels each.
std::vector<KernelUnit> kernelUnits(const std::vector<const KernelSource *> &kernels,
                                    KernelDialect dialect, unsigned perUnit, size_t minUnits);

/// Calls fn(0) ... fn(n - 1) on `jobs` threads (0: the machine's cores).
void forEachInParallel(size_t n, unsigned jobs, const std::function<void(size_t)> &fn);

/// Computes the share of `op` over `ranges` on whole input tensors (doubles) the way a worker
/// would: each input's region (inputRegions) is copied into a float buffer, `call` computes
/// the share from those buffers into a float output of the share's size, and the result is
/// returned as doubles. NaN in a region stays NaN.
Tensor runOnRegions(const InstOp &op, const Shapes &shapes,
                    const std::vector<const Tensor *> &inputs, const std::vector<Range> &ranges,
                    const std::function<void(const std::vector<Box> &regions,
                                             const float *const *in, float *out)> &call);

/// Hands a kernel of `op` generated for buffers of `types` its buffers: `in` (float32
/// regions, as runOnRegions gives them) rounded to bfloat16 bits where an input is bfloat16,
/// and an output buffer of bfloat16 bits where the output is, widened into `out` after
/// `call` (given the inputs and the output the kernel is to read and write) returns.
void withKernelBuffers(const InstOp &op, const std::vector<Range> &ranges,
                       const std::vector<Box> &regions, const float *const *in, float *out,
                       const KernelTypes &types,
                       const std::function<void(const float *const *in, float *out)> &call);

/// runOnRegions with kernel `fn` of `op`, generated for buffers of `types`: an input of
/// bfloat16 is handed over rounded to it (its bits), and a bfloat16 output is widened.
llvm::Expected<Tensor> runKernel(CpuKernelLibrary::Fn fn, const InstOp &op, const Shapes &shapes,
                                 const std::vector<const Tensor *> &inputs,
                                 const std::vector<Range> &ranges, int threads = 1,
                                 const KernelTypes &types = {});

} // namespace tofu

#endif // TOFU_RUNTIME_CPU_KERNELS_H
