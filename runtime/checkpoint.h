// Checkpoints in the safetensors format (what PyTorch users load with
// `safetensors.torch.load_file`: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the data), in two forms:
//
// - whole: one file `DIR/model.safetensors` holding every weight and optimiser-state tensor
//   whole by its graph name, with string metadata (the model, the optimiser, the steps
//   trained so far). What a process running every worker writes.
// - sharded: what processes that each run one worker write without any of them gathering
//   the weights. Each process writes the tiles its worker holds to
//   `DIR/tiles-G-R.safetensors` (G the checkpoint's generation, R the process), each tile a
//   tensor named `<tensor>@<lo>:<hi>,...` (its box); then one process writes
//   `DIR/index.json`, which names for every tensor its shape and which box of it lies in
//   which file under which key:
//
//     {"format": "tofu sharded checkpoint", "version": 1, "generation": G,
//      "metadata": {"steps": "10", ...},
//      "tensors": {"fc1.weight": {"shape": [1024, 512],
//                                 "tiles": [{"file": "tiles-3-0.safetensors",
//                                            "key": "fc1.weight@0:512,0:512",
//                                            "box": [[0, 512], [0, 512]]}, ...]}}}
//
//   The index is written last and renamed into place: until then the directory's earlier
//   checkpoint stays whole and loadable; once it is, the earlier one's files are removed.
//
// A CheckpointReader opens either form and reads any box of any tensor, touching only the
// bytes of that box, so a process resumes at any worker count holding only its own tiles.
#ifndef TOFU_RUNTIME_CHECKPOINT_H
#define TOFU_RUNTIME_CHECKPOINT_H

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "analysis/strategy.h"
#include "runtime/safetensors.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// The element type a checkpoint's tensors are written in: float32 (the default), or rounded
/// to bfloat16 or float16 (to the nearest, ties to even; float16 past its range is
/// infinite), which take half the bytes. Loading widens any of them to float32.
enum class StoredType { F32, BF16, F16 };
const char *storedTypeName(StoredType t);          ///< "f32", "bf16", "f16"
SafetensorsDtype safetensorsDtypeOf(StoredType t); ///< F32, BF16, F16
inline int storedTypeBytes(StoredType t) { return t == StoredType::F32 ? 4 : 2; }

/// The file of a whole checkpoint in `dir`.
std::string checkpointFile(const std::string &dir);
/// The index of a sharded checkpoint in `dir`.
std::string checkpointIndexFile(const std::string &dir);

/// Writes `c` to `dir`/model.safetensors (the directory is created), replacing an earlier
/// checkpoint only once the new one is complete (written beside it, then renamed; a sharded
/// checkpoint there is removed then).
llvm::Error saveCheckpoint(const std::string &dir, const Checkpoint &c,
                           StoredType type = StoredType::F32);

/// Reads `dir`/model.safetensors. F32, F64, F16 and BF16 tensors load (as values); errors
/// name the file and what is wrong with it (a truncated file, a header that is not
/// safetensors JSON, byte ranges outside the data or overlapping, shapes that do not match
/// the ranges).
llvm::Expected<Checkpoint> loadCheckpoint(const std::string &dir);

/// One tile of a tensor: its box and the box's values, row-major over the box.
struct CheckpointTile {
  std::string tensor;
  std::vector<int64_t> shape; ///< the whole tensor's
  Box box;
  std::vector<float> data;
};

/// Where a tile of a sharded checkpoint lies.
struct TileEntry {
  std::string tensor;
  std::vector<int64_t> shape; ///< the whole tensor's
  Box box;
  std::string file; ///< in the checkpoint's directory
  std::string key;  ///< the tile's name in the file
};

/// The generation a new sharded checkpoint in `dir` takes: one past the largest of the tile
/// files there (1 in a new directory), so it never overwrites a file the current index names.
unsigned nextCheckpointGeneration(const std::string &dir);
/// The tile file of process `part` in generation `generation`.
std::string tileFileName(unsigned generation, unsigned part);
/// Writes `tiles` to `dir`/`file` (the directory is created; the file is written beside and
/// renamed when complete) in `type`, and returns where each lies.
llvm::Expected<std::vector<TileEntry>> writeTileFile(const std::string &dir,
                                                     const std::string &file,
                                                     const std::vector<CheckpointTile> &tiles,
                                                     StoredType type = StoredType::F32);
/// Entries as text (to send between processes) and back.
std::string encodeTileEntries(const std::vector<TileEntry> &entries);
llvm::Expected<std::vector<TileEntry>> decodeTileEntries(const std::string &text);
/// Commits a sharded checkpoint: checks that the entries of each tensor are disjoint and
/// cover it, writes `dir`/index.json beside and renames it into place, then removes the
/// files of earlier checkpoints in `dir` (tile files of other generations, model.safetensors).
llvm::Error writeCheckpointIndex(const std::string &dir, unsigned generation,
                                 const std::vector<TileEntry> &entries,
                                 const std::map<std::string, std::string> &metadata);

/// A checkpoint opened for reading boxes of its tensors: a sharded one (`dir`/index.json) or,
/// without an index, a whole one (`dir`/model.safetensors). Opening reads only the headers
/// and checks them: every file the index names exists and holds its tiles with the right
/// shape and a floating-point dtype, the tiles of each tensor lie in it, are disjoint and
/// cover it. Errors name the file and what is wrong.
class CheckpointReader {
public:
  static llvm::Expected<CheckpointReader> open(const std::string &dir);
  CheckpointReader(CheckpointReader &&) noexcept;
  CheckpointReader &operator=(CheckpointReader &&) noexcept;
  ~CheckpointReader();

  /// The index, or the whole checkpoint's file (for messages).
  const std::string &path() const;
  bool sharded() const;
  const std::map<std::string, std::string> &metadata() const;
  /// Every tensor with its shape.
  const std::map<std::string, std::vector<int64_t>> &shapes() const;
  /// Reads `box` of tensor `name` into `out`, row-major over the box. Errors name the file
  /// (an unknown tensor, a box outside it, a failed read).
  llvm::Error read(const std::string &name, const Box &box, float *out) const;
  /// The whole checkpoint in memory.
  llvm::Expected<Checkpoint> readAll() const;

  struct Impl;

private:
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace tofu

#endif // TOFU_RUNTIME_CHECKPOINT_H
