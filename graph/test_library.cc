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

TensorInfo testTensor(const std::string &name, std::vector<int64_t> shape, TensorRole role) {
  TensorInfo t;
  t.name = name;
  t.shape = std::move(shape);
  t.shapeKnown = true;
  t.role = role;
  return t;
}

} // namespace tofu
