// libFuzzer target over the ONNX importer: any bytes as a model (protobuf parsing, attribute
// checks, ONNX's shape inference, translation, the graph check). Errors are fine; a crash,
// a sanitizer report or an uncaught exception is a finding. Models read from memory have no
// folder, so external data is refused, never read.
#include <cstdint>
#include <string>

#include "graph/onnx_import.h"
#include "tests/fuzz/fuzz_library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const tofu::OpLibrary &lib = tofu::fuzzLibrary();
  std::string bytes(reinterpret_cast<const char *>(data), size);
  tofu::OnnxImportOptions options;
  options.batch = 2;
  auto g = tofu::importOnnxBytes(bytes, "fuzz.onnx", lib, options);
  if (!g)
    llvm::consumeError(g.takeError());
  return 0;
}
