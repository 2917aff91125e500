// Benchmark of single generated C++ kernels at the sizes a training step at batch 32 gives
// them: the median time of a whole-op call (every thread of the machine, unchecked loads as
// the engine runs them), the bytes its inputs and output hold, and the rate that makes.
// One row per op; every figure measured here.
//
//   bazel run -c opt //bench:kernel_bench [-- --repeat N] [--op NAME] [--dump DIR]
//
// The SIMD loops column is the compiler's vectorisation report on the unchecked nest
// (vectorizationReport: GCC's -fopt-info-vec-all), loops it could not vectorise named on
// stderr.
// --dump writes each kernel's translation unit (the prelude, then the kernel) to
// DIR/<op>.cc, to read it or compile it by hand (e.g. with -fopt-info-vec-missed).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codegen/kernel_gen.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "graph/library.h"
#include "runtime/cpu_kernels.h"

namespace {

struct Case {
  std::string op;
  std::vector<std::vector<int64_t>> inputs;
  tofu::Instantiation inst;
  std::string note;
};

tofu::Instantiation groups(std::map<std::string, int64_t> g) {
  tofu::Instantiation i;
  i.groups = std::move(g);
  return i;
}

tofu::Instantiation attrs(std::map<std::string, int64_t> a) {
  tofu::Instantiation i;
  i.attrs = std::move(a);
  return i;
}

tofu::Instantiation both(std::map<std::string, int64_t> a, std::map<std::string, int64_t> g) {
  tofu::Instantiation i;
  i.attrs = std::move(a);
  i.groups = std::move(g);
  return i;
}

std::vector<Case> cases() {
  const std::vector<int64_t> act = {32, 32, 16, 16}; // WResNet-50 stage 1 at batch 32
  const std::vector<int64_t> tok = {8, 64, 256};     // GPT-2-256 at batch 8
  return {
      {"batch_norm_train", {act, {32}, {32}, {}}, groups({{"s", 2}}), "N32 C32 16x16"},
      {"batch_norm_grad_x", {act, act, {32}, {}}, groups({{"s", 2}}), "N32 C32 16x16"},
      {"batch_norm_grad_scale", {act, act, {}}, groups({{"s", 2}}), "N32 C32 16x16"},
      {"batch_norm_grad_x",
       {{32, 128, 8, 8}, {32, 128, 8, 8}, {128}, {}},
       groups({{"s", 2}}),
       "N32 C128 8x8"},
      {"batch_norm_grad_x",
       {{2, 32, 64, 64}, {2, 32, 64, 64}, {32}, {}},
       groups({{"s", 2}}),
       "N2 C32 64x64"},
      {"LayerNormalization",
       {tok, {256}, {256}, {}},
       groups({{"p", 2}, {"f", 1}}),
       "8x64 tokens x 256"},
      {"layer_norm_grad_x",
       {tok, tok, {256}, {}},
       groups({{"p", 2}, {"f", 1}}),
       "8x64 tokens x 256"},
      {"layer_norm_grad_scale", {tok, tok, {}}, groups({{"p", 2}, {"f", 1}}), "8x64 tokens x 256"},
      {"maxpool2d_grad",
       {{32, 16, 16, 16}, {32, 16, 32, 32}, {32, 16, 16, 16}},
       attrs({{"kh", 3}, {"kw", 3}, {"ph", 1}, {"pw", 1}}),
       "N32 C16 32x32, 3x3 stride 2"},
      {"avgpool2d_grad",
       {{32, 16, 16, 16}},
       attrs({{"ih", 32}, {"iw", 32}}),
       "N32 C16 32x32, 2x2 stride 2"},
      {"ReshapeMerge",
       {tok},
       both({{"n", 64}, {"m", 512}}, {{"pre", 0}, {"post", 1}}),
       "8x64 tokens x 256"},
      {"softmax_cross_entropy", {{512, 32000}, {512}}, groups({}), "512 rows x 32000 classes"},
      {"softmax_cross_entropy_grad",
       {{}, {512, 32000}, {512}},
       groups({}),
       "512 rows x 32000 classes"},
      {"Relu", {act}, groups({}), "N32 C32 16x16"},
  };
}

} // namespace

int main(int argc, char **argv) {
  int repeat = 30;
  std::string only, dump;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--op" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--dump" && i + 1 < argc)
      dump = argv[++i];
    else {
      std::fprintf(stderr,
                   "kernel_bench: unknown argument '%s' (--repeat N, --op NAME, --dump DIR)\n",
                   a.c_str());
      return 2;
    }
  }
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load("ops", diags);
  if (!lib) {
    std::fprintf(stderr, "kernel_bench: %s\n", llvm::toString(lib.takeError()).c_str());
    return 1;
  }
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf(
      "| op | shape | temporaries | SIMD loops vectorised | median ms | MB in + out | GB/s |\n");
  std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Case &c : cases()) {
    if (!only.empty() && c.op != only)
      continue;
    const tofu::ir::OpDef *def = lib->find(c.op);
    if (!def) {
      std::fprintf(stderr, "kernel_bench: no op '%s'\n", c.op.c_str());
      return 1;
    }
    tofu::Instantiation inst = c.inst;
    for (const auto &s : c.inputs)
      inst.inputRanks.push_back(static_cast<unsigned>(s.size()));
    auto op = tofu::instantiate(*def, inst);
    if (!op) {
      std::fprintf(stderr, "kernel_bench: %s: %s\n", c.op.c_str(),
                   llvm::toString(op.takeError()).c_str());
      return 1;
    }
    auto shapes = tofu::concreteShapes(*op, c.inputs, std::nullopt);
    auto src = tofu::generateKernel(*op, tofu::KernelDialect::Cpp);
    if (!shapes || !src) {
      std::fprintf(stderr, "kernel_bench: %s: cannot generate\n", c.op.c_str());
      return 1;
    }
    if (!dump.empty()) {
      const std::string path = dump + "/" + c.op + ".cc";
      if (FILE *f = std::fopen(path.c_str(), "w")) {
        std::fputs((tofu::kernelPrelude(tofu::KernelDialect::Cpp) + src->code).c_str(), f);
        std::fclose(f);
      } else {
        std::fprintf(stderr, "kernel_bench: cannot write %s\n", path.c_str());
        return 1;
      }
    }
    tofu::CpuKernelLibrary kernels;
    if (llvm::Error e = kernels.add({*src})) {
      std::fprintf(stderr, "kernel_bench: %s\n", llvm::toString(std::move(e)).c_str());
      return 1;
    }
    std::vector<tofu::Range> ranges = tofu::fullRanges(*shapes);
    std::vector<tofu::Box> regions;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(0.25f, 1.0f);
    std::vector<std::vector<float>> in;
    std::vector<const float *> ptrs;
    int64_t bytes = 0;
    for (const auto &s : c.inputs) {
      tofu::Box box = tofu::wholeBox(s);
      regions.push_back(box);
      in.emplace_back(std::max<int64_t>(1, tofu::boxElements(box)));
      for (float &v : in.back())
        v = dist(rng);
      bytes += tofu::boxElements(box) * 4;
    }
    for (const auto &v : in)
      ptrs.push_back(v.data());
    int64_t outElements = 1;
    for (unsigned v : op->outputVars)
      outElements *= ranges[v].size();
    bytes += outElements * 4;
    std::vector<float> out(std::max<int64_t>(1, outElements));
    std::vector<float> scratch(tofu::kernelScratchBytes(*src, ranges) / 4 + 1);
    std::vector<int64_t> ints = tofu::kernelInts(*op, *shapes, ranges, regions);
    TofuKernelArgs args{
        ints.data(), ptrs.data(),
        out.data(),  tofu::readsInsideRegions(*op, *shapes, ranges, regions) ? 1 : 0,
        threads,     scratch.data()};
    auto fn = kernels.find(src->name);
    std::vector<double> times;
    for (int r = 0; r < repeat + 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      fn(&args);
      auto t1 = std::chrono::steady_clock::now();
      if (r >= 3)
        times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    auto vec = tofu::vectorizationReport(*src);
    if (!vec) {
      std::fprintf(stderr, "kernel_bench: %s\n", llvm::toString(vec.takeError()).c_str());
      return 1;
    }
    for (const std::string &m : vec->missed)
      std::fprintf(stderr, "kernel_bench: %s: not vectorised: %s\n", c.op.c_str(), m.c_str());
    std::printf("| %s | %s | %zu | %u of %u | %.3f | %.2f | %.1f |\n", c.op.c_str(), c.note.c_str(),
                src->temporaries.size(), vec->vectorized, vec->simdLoops, med * 1e3, bytes / 1e6,
                bytes / med / 1e9);
  }
  std::printf("\nmedian of %d calls, %d threads, fast loads\n", repeat, threads);
  return 0;
}
