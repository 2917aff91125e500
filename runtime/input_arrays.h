// The arrays a tool is given for a model's inputs (`--input NAME=FILE,...`), and what the
// ONNX importer is told of them ahead of the import.
#ifndef TOFU_TDLC_INPUT_ARRAYS_H
#define TOFU_TDLC_INPUT_ARRAYS_H

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/onnx_import.h"
#include "runtime/dataset.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// Arrays of at most this many elements are passed to the importer with their values (a
/// shape, axes, starts, an offset, a Range's bounds); larger ones with their shape only.
constexpr int64_t kMaxKnownInputValues = 4096;

struct InputArrays {
  /// By name, in the order given.
  std::vector<std::pair<std::string, DataArray>> arrays;
  /// Inputs given as NAME[]: empty sequences, or optionals holding nothing.
  std::vector<std::string> empty;

  /// What the ONNX importer is told of them: every array's shape, and the values of arrays
  /// of at most kMaxKnownInputValues elements; each empty one as NAME[] (no element).
  std::map<std::string, OnnxGivenInput> forImport() const;
};

/// Reads `list` (`NAME=FILE[,NAME=FILE...]`, each file as readDataArray reads it; an item
/// NAME[] gives an empty sequence or an optional holding nothing). Errors name the setting
/// as `names` spells "input": an item that is not NAME=FILE, a name given twice, a file
/// that cannot be read.
llvm::Expected<InputArrays> readInputArrays(const std::string &list,
                                            const SettingNames &names = {});

} // namespace tofu

#endif // TOFU_TDLC_INPUT_ARRAYS_H
