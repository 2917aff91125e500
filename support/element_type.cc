// The element types' names, widths and codes (element_type.h).
#include "support/element_type.h"

namespace tofu {
namespace {

struct TypeRow {
  ElementType type;
  const char *name;
  unsigned bytes;
  bool isFloat;
  int32_t onnx;
  const char *safetensors;
};

// In the enum's order.
constexpr TypeRow kRows[] = {
    {ElementType::Float32, "float32", 4, true, 1, "F32"},
    {ElementType::Float64, "float64", 8, true, 11, "F64"},
    {ElementType::Float16, "float16", 2, true, 10, "F16"},
    {ElementType::BFloat16, "bfloat16", 2, true, 16, "BF16"},
    {ElementType::Int64, "int64", 8, false, 7, "I64"},
    {ElementType::Int32, "int32", 4, false, 6, "I32"},
    {ElementType::Int16, "int16", 2, false, 5, "I16"},
    {ElementType::Int8, "int8", 1, false, 3, "I8"},
    {ElementType::UInt8, "uint8", 1, false, 2, "U8"},
    {ElementType::Bool, "bool", 1, false, 9, "BOOL"},
};

const TypeRow &row(ElementType t) { return kRows[static_cast<unsigned>(t)]; }

/// The type of the first row `matches`, else none.
template <class Match> std::optional<ElementType> typeWhere(Match matches) {
  for (const TypeRow &r : kRows)
    if (matches(r))
      return r.type;
  return std::nullopt;
}

} // namespace

const char *elementTypeName(ElementType t) { return row(t).name; }

std::optional<ElementType> elementTypeNamed(std::string_view name) {
  return typeWhere([&](const TypeRow &r) { return name == r.name; });
}

std::string elementTypeNames() {
  std::string out;
  for (const TypeRow &r : kRows)
    out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

unsigned elementTypeBytes(ElementType t) { return row(t).bytes; }

bool isFloatType(ElementType t) { return row(t).isFloat; }

int32_t onnxDataType(ElementType t) { return row(t).onnx; }

std::optional<ElementType> elementTypeOfOnnx(int32_t code) {
  return typeWhere([&](const TypeRow &r) { return code == r.onnx; });
}

const char *safetensorsDtype(ElementType t) { return row(t).safetensors; }

std::optional<ElementType> elementTypeOfSafetensors(std::string_view dtype) {
  return typeWhere([&](const TypeRow &r) { return dtype == r.safetensors; });
}

} // namespace tofu
