// Checkpoints in the safetensors format (what PyTorch users load with
// `safetensors.torch.load_file`): one file `model.safetensors` in a directory, holding whole
// float32 tensors by their graph names (every weight and optimiser-state tensor), with
// string metadata (the model, the optimiser, the steps trained so far). The layout: an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the data.
#ifndef TOFU_RUNTIME_CHECKPOINT_H
#define TOFU_RUNTIME_CHECKPOINT_H

#include <map>
#include <string>
#include <vector>

#include "analysis/interpreter.h"
#include "llvm/Support/Error.h"

namespace tofu {

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// The file a checkpoint directory holds.
std::string checkpointFile(const std::string &dir);

/// Writes `c` to `dir`/model.safetensors (the directory is created), replacing an earlier
/// checkpoint only once the new one is complete (written beside it, then renamed).
llvm::Error saveCheckpoint(const std::string &dir, const Checkpoint &c);

/// Reads `dir`/model.safetensors. F32, F64, F16 and BF16 tensors load (as values); errors
/// name the file and what is wrong with it (a truncated file, a header that is not
/// safetensors JSON, byte ranges outside the data or overlapping, shapes that do not match
/// the ranges).
llvm::Expected<Checkpoint> loadCheckpoint(const std::string &dir);

} // namespace tofu

#endif // TOFU_RUNTIME_CHECKPOINT_H
