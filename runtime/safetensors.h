// Reading safetensors files (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the data. Checkpoints (runtime/checkpoint) and data sets (runtime/dataset)
// both read them; the header is checked against the file once, when it is opened, and the
// data is read on demand.
#ifndef TOFU_RUNTIME_SAFETENSORS_H
#define TOFU_RUNTIME_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/element_type.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// The dtypes of safetensors Tofu reads: its element types, and the unsigned ones it
/// widens (U16, U32, U64), which have no ElementType.
enum class SafetensorsDtype : uint8_t {
  Bool,
  U8,
  I8,
  U16,
  I16,
  F16,
  BF16,
  U32,
  I32,
  F32,
  U64,
  I64,
  F64
};

/// The dtype a header names ("F32"), where it is one of these; read once, when a file is
/// opened.
std::optional<SafetensorsDtype> safetensorsDtypeNamed(std::string_view name);
/// Its name in a header: BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64.
const char *safetensorsDtypeName(SafetensorsDtype d);
/// Bytes per element.
size_t safetensorsWidth(SafetensorsDtype d);
/// Whether it is a floating-point one (F16, BF16, F32, F64).
bool safetensorsFloating(SafetensorsDtype d);
/// The element type it is (support/element_type.h's mapping), where Tofu has one: none for
/// U16, U32 and U64.
std::optional<ElementType> elementTypeOf(SafetensorsDtype d);
/// One element of `dtype` at `p` (little-endian), as a double: exact for every dtype but
/// 64-bit integers beyond 2^53.
double safetensorsElement(SafetensorsDtype dtype, const char *p);

/// A tensor of a safetensors file.
struct SafetensorsTensor {
  std::string name; ///< its key in the header
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  size_t width = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; ///< bytes, from the start of the data
};

/// A safetensors file opened for reading: its header parsed, its data read on demand.
struct SafetensorsFile {
  std::string path;
  int fd = -1;
  uint64_t dataStart = 0;
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
  SafetensorsFile() = default;
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;
  ~SafetensorsFile();
  /// Reads `bytes` bytes at `offset` from the start of the data. Errors name the file.
  llvm::Error read(char *buf, uint64_t bytes, uint64_t offset) const;
};

/// Opens `path` and checks its header against the file: every tensor has a known dtype, a
/// shape of non-negative dimensions, a byte range inside the data of exactly the size the
/// shape and dtype make, and no two ranges overlap. Errors name the file and the tensor.
llvm::Expected<std::unique_ptr<SafetensorsFile>> openSafetensors(const std::string &path);

} // namespace tofu

#endif // TOFU_RUNTIME_SAFETENSORS_H
