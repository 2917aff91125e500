// The element types of tensors, from the graph to the program: each type's name (as graph
// JSON and the reports spell it), its width, and its codes in ONNX (TensorProto.DataType) and
// safetensors, in one place. Below graph/ a type is this enum, never its name.
#ifndef TOFU_SUPPORT_ELEMENT_TYPE_H
#define TOFU_SUPPORT_ELEMENT_TYPE_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tofu {

enum class ElementType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int64,
  Int32,
  Int16,
  Int8,
  UInt8,
  Bool,
};

/// Every element type, in the enum's order.
inline constexpr ElementType kElementTypes[] = {
    ElementType::Float32, ElementType::Float64, ElementType::Float16, ElementType::BFloat16,
    ElementType::Int64,   ElementType::Int32,   ElementType::Int16,   ElementType::Int8,
    ElementType::UInt8,   ElementType::Bool};

/// Its name: float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool.
const char *elementTypeName(ElementType t);
/// The type of a name elementTypeName gives, else none.
std::optional<ElementType> elementTypeNamed(std::string_view name);
/// Every name, comma-separated (for messages).
std::string elementTypeNames();
/// Bytes per element.
unsigned elementTypeBytes(ElementType t);
/// Whether it is a floating-point type.
bool isFloatType(ElementType t);

/// Its ONNX TensorProto.DataType code (FLOAT = 1, ..., BFLOAT16 = 16).
int32_t onnxDataType(ElementType t);
/// The type of an ONNX TensorProto.DataType code, where it is one of these.
std::optional<ElementType> elementTypeOfOnnx(int32_t code);

/// Its safetensors dtype (F32, F64, F16, BF16, I64, I32, I16, I8, U8, BOOL).
const char *safetensorsDtype(ElementType t);
/// The type of a safetensors dtype, where it is one of these.
std::optional<ElementType> elementTypeOfSafetensors(std::string_view dtype);

} // namespace tofu

#endif // TOFU_SUPPORT_ELEMENT_TYPE_H
