// libFuzzer target over the graph JSON reader: any bytes read as a graph; a graph that reads
// is written back and must read again to the same text, then is checked against the op
// library (shape clauses, sizes). Errors are fine; a crash, a sanitizer report or an
// uncaught exception is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/graph.h"
#include "tests/fuzz/fuzz_library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const tofu::OpLibrary &lib = tofu::fuzzLibrary();
  std::string text(reinterpret_cast<const char *>(data), size);
  auto g = tofu::graphFromJson(text);
  if (!g) {
    llvm::consumeError(g.takeError());
    return 0;
  }
  const std::string written = tofu::graphToJson(*g);
  auto again = tofu::graphFromJson(written);
  if (!again) {
    std::fprintf(stderr, "a graph written as JSON does not read back: %s\n%s\n",
                 llvm::toString(again.takeError()).c_str(), written.c_str());
    std::abort();
  }
  if (tofu::graphToJson(*again) != written) {
    std::fprintf(stderr, "a graph changed in the JSON round trip:\n%s\n", written.c_str());
    std::abort();
  }
  if (llvm::Error e = tofu::checkGraph(*g, lib))
    llvm::consumeError(std::move(e));
  return 0;
}
