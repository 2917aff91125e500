// ONNX TensorProto decoding, for every reader of one (the ONNX importer's constants and
// initializers, a data set's .pb files): the values of every numeric element type, from
// raw_data or from the typed field ONNX keeps that type in, checked against the shape.
#ifndef TOFU_SUPPORT_TENSOR_PROTO_H
#define TOFU_SUPPORT_TENSOR_PROTO_H

#include <cstdint>
#include <string>
#include <vector>

#include "llvm/Support/Error.h"

namespace onnx {
class TensorProto;
} // namespace onnx

namespace tofu {

/// A tensor's values in its own element type: `width` bytes each, little-endian, row-major.
struct TensorProtoValues {
  int32_t type = 0; ///< the TensorProto.DataType code
  std::vector<int64_t> shape;
  size_t width = 0;
  std::string bytes;

  int64_t elements() const { return width ? static_cast<int64_t>(bytes.size() / width) : 0; }
  /// Element k's bits, zero-extended (a float16's or a bfloat16's 16 bits as they are).
  uint64_t bits(int64_t k) const;
  /// Element k as a double: signed and unsigned integers as such, float16 and bfloat16
  /// widened. A uint64 past 2^53 rounds, as any double does.
  double value(int64_t k) const;
};

/// Bytes per element of an ONNX TensorProto.DataType code; 0 for one without numbers
/// Tofu reads (strings, complex numbers, undefined).
size_t tensorProtoWidth(int32_t type);
/// Whether the code is a floating-point type (float, double, float16, bfloat16).
bool tensorProtoIsFloat(int32_t type);
/// The code's name in lowercase (float, int64, bfloat16, ...), or "code N" for an unknown one.
std::string tensorProtoTypeName(int32_t type);

/// The values of `t`. Errors say what does not fit: a type holding no numbers, a negative
/// or too large shape, data in an external file, raw data or a typed field whose size does
/// not match the shape, a typed value beyond its type's range.
llvm::Expected<TensorProtoValues> decodeTensorProto(const onnx::TensorProto &t);

} // namespace tofu

#endif // TOFU_SUPPORT_TENSOR_PROTO_H
