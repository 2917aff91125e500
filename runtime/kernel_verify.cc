// Verification on compiled kernels.
#include "runtime/kernel_verify.h"

#include <cstdint>

#include "runtime/library_kernels.h"
#include "llvm/Support/Path.h"

namespace tofu {

std::vector<KernelSource> verificationKernels(const ir::Module &module, const std::string &file,
                                              std::vector<std::string> *notCompiled,
                                              KernelDialect dialect, loops::Element storage) {
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
    // The variants the verifier's shares ask for: whole outputs and, splitting a top-level
    // reduction, partial results (which differ in bfloat16 only).
    const Shapes shapes = randomShapes(*inst, 1, 2, 5);
    std::vector<Range> whole;
    for (int64_t e : shapes.vars)
      whole.push_back({0, e});
    std::vector<KernelTypes> variants{verificationTypes(*inst, shapes, whole, storage)};
    // The partial-result variant: the whole one's output in float32. (Made from the types,
    // not from a slice of these shapes: a reduction variable of extent 1 here has no slice,
    // and the verifier's other shapes split it.)
    if (const ir::Reduce *top = inst->topReduce();
        top && !top->vars.empty() && variants[0].output != loops::Element::F32) {
      KernelTypes partial = variants[0];
      partial.output = loops::Element::F32;
      variants.push_back(partial);
    }
    for (const KernelTypes &types : variants) {
      auto k = generateKernel(*inst, dialect, types);
      if (!k) {
        std::string why = llvm::toString(k.takeError());
        if (notCompiled)
          notCompiled->push_back(why);
        break;
      }
      out.push_back(std::move(*k));
    }
  }
  return out;
}

KernelTypes verificationTypes(const InstOp &op, const Shapes &shapes,
                              const std::vector<Range> &ranges, loops::Element storage) {
  KernelTypes types;
  if (storage == loops::Element::F32)
    return types;
  const std::vector<InputValueRule> rules = inputValueRules(op, shapes);
  for (size_t i = 0; i < op.inputs.size(); ++i)
    types.inputs.push_back(rules[i].integers > 0 ? loops::Element::F32 : storage);
  bool partial = false;
  if (const ir::Reduce *top = op.topReduce())
    for (unsigned v : top->vars)
      partial |= ranges[v].size() != shapes.vars[v];
  types.output = partial ? loops::Element::F32 : storage;
  return types;
}

ShareEvaluator compiledEvaluator(CpuKernelLibrary &lib, const KernelCompileOptions &options,
                                 int threads, loops::Element storage) {
  return [&lib, options, threads, storage](
             const InstOp &op, const Shapes &shapes, const std::vector<const Tensor *> &inputs,
             const std::vector<Range> &ranges) -> llvm::Expected<Tensor> {
    const KernelTypes types = verificationTypes(op, shapes, ranges, storage);
    auto k = generateKernel(op, KernelDialect::Cpp, types);
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
    return runKernel(fn, op, shapes, inputs, ranges, threads, types);
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
