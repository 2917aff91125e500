// bfloat16 matrix products on the CPU: which way Tofu should compute them (issue 53's
// "oneDNN's bf16 path, or converting around an fp32 call"). Per shape, the best of several
// runs of:
//   fp32      oneDNN's matmul on float32 operands, float32 result (today's path);
//   bf16      oneDNN's matmul on bfloat16 operands, bfloat16 result (float32 accumulation),
//             where oneDNN has one for this CPU (its implementation is named);
//   convert   the same bfloat16 operands widened to float32 (support/bf16.h), oneDNN's
//             float32 matmul, its result narrowed to bfloat16.
// oneDNN picks its code by the CPU's instructions; DNNL_MAX_CPU_ISA=AVX2 (or AVX512_CORE)
// caps it, so one machine measures what a lesser CPU would get.
//
//   bazel run -c opt //bench:bf16_matmul_bench [-- --reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "support/bf16.h"

namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t m, k, n;
  const char *what;
};

struct Product {
  dnnl::matmul prim;
  dnnl::matmul::primitive_desc pd;
};

/// oneDNN's matmul of an m x k by a k x n matrix in `in` with a result in `out`, or nothing
/// where oneDNN has no implementation for them on this CPU.
bool makeProduct(dnnl::engine &eng, const Shape &s, memory::data_type in, memory::data_type out,
                 Product &p) {
  try {
    const memory::desc a({s.m, s.k}, in, memory::format_tag::ab),
        b({s.k, s.n}, in, memory::format_tag::ab), c({s.m, s.n}, out, memory::format_tag::ab);
    p.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng);
    p.prim = dnnl::matmul(p.pd);
    return true;
  } catch (const dnnl::error &) {
    return false;
  }
}

/// The fastest of `reps` runs of `fn`, in seconds.
template <typename Fn> double best(int reps, Fn fn) {
  fn(); // warm: first-touch pages, JIT code
  double t = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    t = std::min(t, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return t;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bf16_matmul_bench [--reps N]\n");
      return 2;
    }
  }
  const char *isa = std::getenv("DNNL_MAX_CPU_ISA");
  std::printf("bfloat16 products on this CPU (DNNL_MAX_CPU_ISA=%s; bf16 arrays %s)\n\n",
              isa ? isa : "unset", tofu::bf16ArraysVectorised() ? "on AVX2" : "scalar");
  std::printf("| m x k x n | what | fp32 ms | bf16 ms | bf16 speed-up | convert ms | "
              "convert speed-up | oneDNN's bf16 implementation |\n"
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const Shape shapes[] = {{256, 256, 256, "small square"},
                          {64, 4096, 4096, "batch 64 through a 4096 layer"},
                          {1024, 1024, 1024, "square"},
                          {4096, 1024, 1024, "4096 tokens, hidden 1024"},
                          {2048, 2048, 2048, "large square"}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (const Shape &s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float &x : a)
      x = uni(rng);
    for (float &x : b)
      x = uni(rng);
    std::vector<uint16_t> a16(a.size()), b16(b.size()), c16(c.size());
    tofu::toBf16(a.data(), a16.data(), a.size());
    tofu::toBf16(b.data(), b16.data(), b.size());
    std::vector<float> aw(a.size()), bw(b.size()); // the convert path's widened operands

    Product f32, bf16;
    if (!makeProduct(eng, s, memory::data_type::f32, memory::data_type::f32, f32)) {
      std::fprintf(stderr, "bf16_matmul_bench: oneDNN has no float32 matmul here\n");
      return 1;
    }
    auto run = [&](Product &p, void *pa, void *pb, void *pc) {
      memory ma(p.pd.src_desc(), eng, pa), mb(p.pd.weights_desc(), eng, pb),
          mc(p.pd.dst_desc(), eng, pc);
      p.prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
      stream.wait();
    };
    const double tf = best(reps, [&] { run(f32, a.data(), b.data(), c.data()); });
    const double tc = best(reps, [&] {
      tofu::fromBf16(a16.data(), aw.data(), a16.size());
      tofu::fromBf16(b16.data(), bw.data(), b16.size());
      run(f32, aw.data(), bw.data(), c.data());
      tofu::toBf16(c.data(), c16.data(), c.size());
    });
    std::string tb = "none", speedup = "", impl = "none (no primitive)";
    if (makeProduct(eng, s, memory::data_type::bf16, memory::data_type::bf16, bf16)) {
      const double t = best(reps, [&] { run(bf16, a16.data(), b16.data(), c16.data()); });
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f", t * 1e3);
      tb = buf;
      std::snprintf(buf, sizeof buf, "%.2fx", tf / t);
      speedup = buf;
      impl = bf16.pd.impl_info_str();
    }
    std::printf("| %lld x %lld x %lld | %s | %.3f | %s | %s | %.3f | %.2fx | %s |\n",
                static_cast<long long>(s.m), static_cast<long long>(s.k),
                static_cast<long long>(s.n), s.what, tf * 1e3, tb.c_str(), speedup.c_str(),
                tc * 1e3, tf / tc, impl.c_str());
  }
  return 0;
}
