// Loads ops/ once for the graph tests.
#include "graph/test_library.h"

#include <cstdlib>

#include "llvm/Support/raw_ostream.h"

namespace tofu {

const OpLibrary &testLibrary() {
  static SourceManager sources;
  static DiagnosticEngine diags(sources);
  static OpLibrary lib = [] {
    auto l = OpLibrary::load("ops", diags);
    if (!l) {
      diags.print(llvm::errs());
      llvm::errs() << "cannot load ops/: " << llvm::toString(l.takeError()) << "\n";
      std::abort();
    }
    return std::move(*l);
  }();
  return lib;
}

InstOp testInstance(const std::string &opName, const std::vector<unsigned> &ranks,
                    std::map<std::string, int64_t> groups) {
  const ir::OpDef *def = testLibrary().find(opName);
  if (!def) {
    llvm::errs() << "testInstance: ops/ has no op '" << opName << "'\n";
    std::abort();
  }
  Instantiation inst;
  for (unsigned r : ranks)
    inst.inputRanks.push_back(r);
  inst.groups = std::move(groups);
  auto op = instantiate(*def, inst);
  if (!op) {
    llvm::errs() << "testInstance: " << opName << ": " << llvm::toString(op.takeError()) << "\n";
    std::abort();
  }
  return std::move(*op);
}

TensorInfo testTensor(const std::string &name, std::vector<int64_t> shape, TensorRole role) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.shapeKnown = true;
  t.role = role;
  return t;
}

} // namespace tofu
