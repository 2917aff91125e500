// ONNX TensorProto decoding (tensor_proto.h).
#include "support/tensor_proto.h"

#include <cctype>
#include <cstring>
#include <limits>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "onnx/onnx_pb.h"
#include "support/bf16.h"
#include "support/float16.h"

namespace tofu {

namespace {

using P = onnx::TensorProto;

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s", message.c_str());
}

/// The range a value of an integer type kept in int32_data may hold (float16 and bfloat16
/// keep their 16 bits there).
std::pair<int64_t, int64_t> int32FieldRange(int32_t type) {
  switch (type) {
  case P::INT16:
    return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
  case P::INT8:
    return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
  case P::UINT16:
  case P::FLOAT16:
  case P::BFLOAT16:
    return {0, std::numeric_limits<uint16_t>::max()};
  case P::UINT8:
    return {0, std::numeric_limits<uint8_t>::max()};
  case P::BOOL:
    return {0, 1};
  default:
    return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
}

template <class T> void put(std::string &bytes, size_t at, T x) {
  std::memcpy(bytes.data() + at, &x, sizeof x);
}

} // namespace

size_t tensorProtoWidth(int32_t type) {
  switch (type) {
  case P::DOUBLE:
  case P::INT64:
  case P::UINT64:
    return 8;
  case P::FLOAT:
  case P::INT32:
  case P::UINT32:
    return 4;
  case P::FLOAT16:
  case P::BFLOAT16:
  case P::INT16:
  case P::UINT16:
    return 2;
  case P::INT8:
  case P::UINT8:
  case P::BOOL:
    return 1;
  default:
    return 0;
  }
}

bool tensorProtoIsFloat(int32_t type) {
  return type == P::FLOAT || type == P::DOUBLE || type == P::FLOAT16 || type == P::BFLOAT16;
}

std::string tensorProtoTypeName(int32_t type) {
  if (!P::DataType_IsValid(type))
    return fmt::format("code {}", type);
  std::string name = P::DataType_Name(static_cast<P::DataType>(type));
  for (char &c : name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

uint64_t TensorProtoValues::bits(int64_t k) const {
  uint64_t x = 0;
  std::memcpy(&x, bytes.data() + static_cast<size_t>(k) * width, width);
  return x;
}

double TensorProtoValues::value(int64_t k) const {
  const char *at = bytes.data() + static_cast<size_t>(k) * width;
  auto as = [&](auto tag) {
    decltype(tag) x;
    std::memcpy(&x, at, sizeof x);
    return static_cast<double>(x);
  };
  switch (type) {
  case P::FLOAT:
    return as(float());
  case P::DOUBLE:
    return as(double());
  case P::FLOAT16:
    return halfToFloat(static_cast<uint16_t>(bits(k)));
  case P::BFLOAT16:
    return floatFromBf16(static_cast<uint16_t>(bits(k)));
  case P::INT64:
    return as(int64_t());
  case P::INT32:
    return as(int32_t());
  case P::INT16:
    return as(int16_t());
  case P::INT8:
    return as(int8_t());
  default: // the unsigned types and bool
    return static_cast<double>(bits(k));
  }
}

llvm::Expected<TensorProtoValues> decodeTensorProto(const onnx::TensorProto &t) {
  TensorProtoValues v;
  v.type = t.data_type();
  v.shape.assign(t.dims().begin(), t.dims().end());
  v.width = tensorProtoWidth(v.type);
  const std::string type = tensorProtoTypeName(v.type);
  if (v.width == 0)
    return failure(fmt::format("element type {} holds no numbers Tofu reads (float, double, "
                               "float16, bfloat16, int8 to int64, uint8 to uint64, bool)",
                               type));
  // At most 2^50 bytes: far past any memory, and no product below overflows.
  constexpr uint64_t kMaxBytes = uint64_t(1) << 50;
  uint64_t n = 1;
  for (int64_t d : v.shape) {
    if (d < 0)
      return failure(fmt::format("shape [{}] has a negative dimension", fmt::join(v.shape, ", ")));
    if (d != 0 && n > kMaxBytes / v.width / static_cast<uint64_t>(d))
      return failure(fmt::format("shape [{}] is too large", fmt::join(v.shape, ", ")));
    n *= static_cast<uint64_t>(d);
  }
  if (!t.external_data().empty() || t.data_location() == P::EXTERNAL)
    return failure("its data is in an external file");
  const size_t count = static_cast<size_t>(n), size = count * v.width;
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != size)
      return failure(fmt::format("shape [{}] of {} needs {} bytes of raw data; it has {}",
                                 fmt::join(v.shape, ", "), type, size, t.raw_data().size()));
    v.bytes = t.raw_data();
    return v;
  }
  // The typed field ONNX keeps the type in.
  int64_t have = 0;
  switch (v.type) {
  case P::FLOAT:
    have = t.float_data_size();
    break;
  case P::DOUBLE:
    have = t.double_data_size();
    break;
  case P::INT64:
    have = t.int64_data_size();
    break;
  case P::UINT32:
  case P::UINT64:
    have = t.uint64_data_size();
    break;
  default:
    have = t.int32_data_size();
    break;
  }
  if (static_cast<uint64_t>(have) != n)
    return failure(fmt::format("shape [{}] needs {} values; the tensor has {}",
                               fmt::join(v.shape, ", "), n, have));
  v.bytes.assign(size, '\0');
  for (size_t k = 0; k < count; ++k) {
    const int i = static_cast<int>(k);
    const size_t at = k * v.width;
    switch (v.type) {
    case P::FLOAT:
      put(v.bytes, at, t.float_data(i));
      break;
    case P::DOUBLE:
      put(v.bytes, at, t.double_data(i));
      break;
    case P::INT64:
      put(v.bytes, at, t.int64_data(i));
      break;
    case P::UINT64:
      put(v.bytes, at, t.uint64_data(i));
      break;
    case P::UINT32: {
      const uint64_t x = t.uint64_data(i);
      if (x > std::numeric_limits<uint32_t>::max())
        return failure(fmt::format("value {} holds {}, beyond the range of {}", k, x, type));
      put(v.bytes, at, static_cast<uint32_t>(x));
      break;
    }
    default: {
      const int64_t x = t.int32_data(i);
      const auto [lo, hi] = int32FieldRange(v.type);
      if (x < lo || x > hi)
        return failure(fmt::format("value {} holds {}, beyond the range of {}", k, x, type));
      // Little-endian: the low `width` bytes of the value are the element's.
      const uint64_t bits = static_cast<uint64_t>(x);
      std::memcpy(v.bytes.data() + at, &bits, v.width);
      break;
    }
    }
  }
  return v;
}

} // namespace tofu
