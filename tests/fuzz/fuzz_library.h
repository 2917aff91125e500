// The op library the fuzz targets check graphs against: the `ops` folder of the working
// directory, or the one $TOFU_FUZZ_OPS names (tools/test.sh runs the fuzzers in an empty
// folder). A library that does not load stops the run: a target must not quietly test less.
#ifndef TOFU_TESTS_FUZZ_FUZZ_LIBRARY_H
#define TOFU_TESTS_FUZZ_FUZZ_LIBRARY_H

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "graph/library.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

inline const OpLibrary &fuzzLibrary() {
  static const std::unique_ptr<OpLibrary> lib = [] {
    const char *env = std::getenv("TOFU_FUZZ_OPS");
    const std::string dir = env && *env ? env : "ops";
    static SourceManager sources; // the library's ops point into its buffers
    DiagnosticEngine diags(sources);
    auto loaded = OpLibrary::load(dir, diags);
    if (!loaded) {
      diags.print(llvm::errs());
      std::fprintf(stderr, "fuzz: cannot load the op library from '%s': %s\n", dir.c_str(),
                   llvm::toString(loaded.takeError()).c_str());
      std::abort();
    }
    return std::make_unique<OpLibrary>(std::move(*loaded));
  }();
  return *lib;
}

} // namespace tofu

#endif // TOFU_TESTS_FUZZ_FUZZ_LIBRARY_H
