// libFuzzer target over the checkpoint reader. The first byte chooses what the rest is:
//   even: a whole checkpoint's model.safetensors (header, dtypes, byte ranges, metadata);
//   odd:  a sharded checkpoint's index.json, beside two valid tile files of tensor "w"
//         (4 x 6, rows 0:2 and 2:4) and "s" (a scalar), written once.
// A checkpoint that opens is read whole. Errors are fine; a crash, a sanitizer report or an
// uncaught exception is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "runtime/checkpoint.h"

namespace {

std::string makeDir() {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tofu-fuzz-ckpt.XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    std::perror("fuzz: mkdtemp");
    std::abort();
  }
  return pattern;
}

/// Two folders made once: one for whole checkpoints, one holding the tile files.
const std::string &wholeDir() {
  static const std::string dir = makeDir();
  return dir;
}

const std::string &shardedDir() {
  static const std::string dir = [] {
    std::string d = makeDir();
    auto tile = [](const char *name, tofu::Box box, std::vector<int64_t> shape) {
      tofu::CheckpointTile t{name, std::move(shape), std::move(box), {}};
      t.data.resize(tofu::boxElements(t.box));
      for (size_t i = 0; i < t.data.size(); ++i)
        t.data[i] = static_cast<float>(i);
      return t;
    };
    std::vector<tofu::CheckpointTile> first = {tile("w", {{0, 2}, {0, 6}}, {4, 6}),
                                               tile("s", {}, {})};
    std::vector<tofu::CheckpointTile> second = {tile("w", {{2, 4}, {0, 6}}, {4, 6})};
    for (auto [part, tiles] : {std::pair{0u, &first}, std::pair{1u, &second}}) {
      auto e = tofu::writeTileFile(d, tofu::tileFileName(1, part), *tiles);
      if (!e) {
        std::fprintf(stderr, "fuzz: %s\n", llvm::toString(e.takeError()).c_str());
        std::abort();
      }
    }
    return d;
  }();
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const bool sharded = data[0] & 1;
  const std::string &dir = sharded ? shardedDir() : wholeDir();
  const std::string file = sharded ? tofu::checkpointIndexFile(dir) : tofu::checkpointFile(dir);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  // TOFU_FUZZ_VERBOSE=1 says what became of each input (to check that seeds open).
  static const bool verbose = std::getenv("TOFU_FUZZ_VERBOSE") != nullptr;
  auto reader = tofu::CheckpointReader::open(dir);
  if (!reader) {
    std::string why = llvm::toString(reader.takeError());
    if (verbose)
      std::fprintf(stderr, "refused: %s\n", why.c_str());
    return 0;
  }
  auto all = reader->readAll();
  if (!all) {
    std::string why = llvm::toString(all.takeError());
    if (verbose)
      std::fprintf(stderr, "opened, not read: %s\n", why.c_str());
  } else if (verbose) {
    std::fprintf(stderr, "read %zu tensors\n", all->tensors.size());
  }
  return 0;
}
