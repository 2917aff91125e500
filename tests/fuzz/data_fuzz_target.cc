// libFuzzer target over the data-set readers. The first byte chooses what the rest is:
//   0: an IDX file (the MNIST family)     1: a .npy array
//   2: an ONNX TensorProto (.pb)          3: a gzipped IDX file (through a temporary file)
//   4: a safetensors data file (through a temporary file; every tensor read as an array)
// An array that reads has every element read back. Errors are fine; a crash, a sanitizer
// report or an uncaught exception is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "runtime/dataset.h"
#include "runtime/safetensors.h"

namespace {

/// A temporary file name with `suffix`, made once per process.
std::string scratch(const char *suffix) {
  const char *tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/tofu-fuzz-data-" + std::to_string(::getpid()) +
         suffix;
}

void touch(llvm::Expected<tofu::DataArray> a) {
  // TOFU_FUZZ_VERBOSE=1 says what became of each input (to check that seeds read).
  static const bool verbose = std::getenv("TOFU_FUZZ_VERBOSE") != nullptr;
  if (!a) {
    std::string why = llvm::toString(a.takeError());
    if (verbose)
      std::fprintf(stderr, "refused: %s\n", why.c_str());
    return;
  }
  if (verbose)
    std::fprintf(stderr, "read an array of %zu dimensions\n", a->shape.size());
  int64_t n = 1;
  for (int64_t d : a->shape)
    n *= d;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += a->at(i);
  if (sum == 0.123456789) // keeps the reads
    std::fprintf(stderr, "\n");
}

void writeFile(const std::string &path, const uint8_t *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string bytes(reinterpret_cast<const char *>(data + 1), size - 1);
  switch (data[0] % 5) {
  case 0:
    touch(tofu::parseIdx(bytes, "fuzz.idx"));
    break;
  case 1:
    touch(tofu::parseNpy(bytes, "fuzz.npy"));
    break;
  case 2:
    touch(tofu::parseTensorProto(bytes, "fuzz.pb"));
    break;
  case 3: {
    static const std::string path = scratch("-idx.gz");
    writeFile(path, data + 1, size - 1);
    touch(tofu::readDataArray(path));
    break;
  }
  case 4: {
    static const std::string path = scratch(".safetensors");
    writeFile(path, data + 1, size - 1);
    auto f = tofu::openSafetensors(path);
    if (!f) {
      llvm::consumeError(f.takeError());
      break;
    }
    for (const auto &[key, t] : (*f)->tensors)
      touch(tofu::readDataArray(path + ":" + key));
    break;
  }
  }
  return 0;
}
