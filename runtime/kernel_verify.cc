// Verification on compiled kernels.
#include "runtime/kernel_verify.h"

#include <cstdint>

#include "runtime/library_kernels.h"
#include "llvm/Support/Path.h"

namespace tofu {

std::vector<KernelSource> verificationKernels(const ir::Module &module, const std::string &file,
                                              std::vector<std::string> *notCompiled,
                                              KernelDialect dialect) {
  std::vector<KernelSource> out;
  auto examples = loadExamples(std::string(llvm::sys::path::parent_path(file)));
  if (!examples) {
    llvm::consumeError(examples.takeError()); // verifyFile reports it
    return out;
  }
  for (const ir::OpDef *op : module.opsInFile(file)) {
    Instantiation given;
    if (auto it = examples->find(op->name); it != examples->end())
      given = it->second.inst;
    auto inst = instantiate(*op, completeForVerification(*op, given, nullptr));
    if (!inst) {
      llvm::consumeError(inst.takeError()); // verifyFile reports it
      continue;
    }
    auto k = generateKernel(*inst, dialect);
    if (!k) {
      std::string why = llvm::toString(k.takeError());
      if (notCompiled)
        notCompiled->push_back(why);
      continue;
    }
    out.push_back(std::move(*k));
  }
  return out;
}

ShareEvaluator compiledEvaluator(CpuKernelLibrary &lib, const KernelCompileOptions &options,
                                 int threads) {
  return [&lib, options, threads](const InstOp &op, const Shapes &shapes,
                                  const std::vector<const Tensor *> &inputs,
                                  const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    auto k = generateKernel(op, KernelDialect::Cpp);
    if (!k) {
      llvm::consumeError(k.takeError());
      return evaluate(op, shapes, inputs, ranges);
    }
    CpuKernelLibrary::Fn fn = lib.find(k->name);
    if (!fn) {
      if (llvm::Error e = lib.add({*k}, options))
        return e;
      fn = lib.find(k->name);
    }
    return runKernel(fn, op, shapes, inputs, ranges, threads);
  };
}

ShareEvaluator libraryEvaluator(ShareEvaluator fallback, LibraryUse *use, int threads) {
  return [fallback, use, threads](const InstOp &op, const Shapes &shapes,
                                  const std::vector<const Tensor *> &inputs,
                                  const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    if (hasLibraryForm(op)) {
      auto k = libraryKernel(op, shapes, ranges, inputRegions(op, shapes, ranges));
      if (use)
        ++(k ? (*use)[op.name].first : (*use)[op.name].second);
      if (k)
        return runOnRegions(op, shapes, inputs, ranges,
                            [&](const std::vector<Box> &, const float *const *in, float *out) {
                              std::vector<char> scratch(k->scratchBytes() + 64);
                              char *aligned =
                                  scratch.data() +
                                  (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
                              k->run(in, out, threads, aligned);
                            });
    }
    return fallback ? fallback(op, shapes, inputs, ranges) : evaluate(op, shapes, inputs, ranges);
  };
}

} // namespace tofu
