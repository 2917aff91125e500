// Runs the fuzz target over files and directories given on the command line, without
// libFuzzer: the seed corpus (and any crash reproducer) as an ordinary test.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int runFile(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>((*buf)->getBufferStart()),
                         (*buf)->getBufferSize());
  return 0;
}

int main(int argc, char **argv) {
  unsigned count = 0;
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    if (!llvm::sys::fs::is_directory(argv[i])) {
      status |= runFile(argv[i]);
      ++count;
      continue;
    }
    std::error_code ec;
    for (llvm::sys::fs::recursive_directory_iterator it(argv[i], ec), end; it != end && !ec;
         it.increment(ec)) {
      if (llvm::sys::fs::is_regular_file(it->path())) {
        status |= runFile(it->path());
        ++count;
      }
    }
  }
  std::printf("replayed %u inputs\n", count);
  return count == 0 ? 1 : status;
}
