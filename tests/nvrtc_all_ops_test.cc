// Every op of the library (and of the TDL test corpus) has a CUDA kernel that NVRTC
// compiles for sm_90 — on machines without a GPU too: NVRTC needs none. Each also in
// bfloat16 storage (its float inputs and its output as bfloat16 in memory). Every op is
// generated; the kernels of half the files are compiled, the half rotating with the commit
// (every file with TOFU_FULL=1: tools/test.sh --full). NVRTC's compile was most of the
// suite's longest test on the slower machines of this kind (714 s of a 28-minute suite).
#include <cstdio>
#include <fstream>
#include <set>

#include "analysis/sema.h"
#include "analysis/verify.h"
#include "runtime/cuda/nvrtc_kernels.h"
#include "runtime/kernel_verify.h"
#include "testing/suite.h"
#include "llvm/Support/Path.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(Nvrtc, EveryOpsCudaKernelCompiles) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  SourceManager sources;
  DiagnosticEngine diags(sources);
  std::vector<KernelSource> kernels;
  unsigned ops = 0, bf16 = 0, compiledOps = 0;
  std::vector<KernelSource> sampled; // the kernels of the files this run compiles
  for (size_t fileIndex = 0; fileIndex < files.size(); ++fileIndex) {
    const std::string &file = files[fileIndex];
    // Under ASan the plain run's half too: its cubins are then in the suite's cache.
    const bool compile = runsInSampledCheck(fileIndex, 2, 1);
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file;
    for (const ir::OpDef *op : module->opsInFile(file)) {
      auto inst = instantiate(*op, completeForVerification(*op, {}, nullptr));
      if (!inst) { // needs an example's attributes; the verifier reports these
        llvm::consumeError(inst.takeError());
        continue;
      }
      ++ops;
      auto k = generateKernel(*inst, KernelDialect::Cuda);
      if (!k) {
        ADD_FAILURE() << file << ": " << llvm::toString(k.takeError());
        continue;
      }
      EXPECT_NE(k->code.find("__global__"), std::string::npos);
      kernels.push_back(std::move(*k));
      const Shapes shapes = randomShapes(*inst, 1, 2, 5);
      std::vector<Range> whole;
      for (int64_t e : shapes.vars)
        whole.push_back({0, e});
      auto b = generateKernel(*inst, KernelDialect::Cuda,
                              verificationTypes(*inst, shapes, whole, loops::Element::BF16));
      if (!b) {
        ADD_FAILURE() << file << " (bfloat16): " << llvm::toString(b.takeError());
        continue;
      }
      EXPECT_NE(b->code.find("tofu_bf16"), std::string::npos) << file << ": " << op->name;
      kernels.push_back(std::move(*b));
      ++bf16;
      if (compile) {
        sampled.insert(sampled.end(), kernels.end() - 2, kernels.end());
        ++compiledOps;
      }
    }
  }
  CubinOptions options;
  options.cacheDir = testKernelCache(); // NVRTC's compile is keyed by its version too
  auto cubins = compileCubins(sampled, options);
  ASSERT_TRUE(bool(cubins)) << llvm::toString(cubins.takeError());
  size_t named = 0;
  for (const Cubin &c : *cubins) {
    std::ifstream f(c.path, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "ELF") << c.path; // a cubin is an ELF image
    named += c.kernels.size();
  }
  std::printf("%u ops: %zu CUDA kernels generated (%u of them bfloat16); %u ops' %zu kernels "
              "(%zu entry points) compiled by NVRTC into %zu cubins\n",
              ops, kernels.size(), bf16, compiledOps, sampled.size(), named, cubins->size());
  EXPECT_EQ(kernels.size(), 2 * ops); // every op has a kernel (opaque functions too), twice
  EXPECT_EQ(bf16, ops);
  EXPECT_GE(compiledOps, ops / 4); // about half the ops: the files differ in size
  // Every compiled kernel is in a cubin under its name (with its block variant, where it has
  // one: 862 entry points for the 500 kernels of one half).
  std::set<std::string> entries;
  for (const Cubin &c : *cubins)
    entries.insert(c.kernels.begin(), c.kernels.end());
  for (const KernelSource &k : sampled)
    EXPECT_TRUE(entries.count(k.name)) << k.name << " is in no cubin";
}

} // namespace
} // namespace tofu
