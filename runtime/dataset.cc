// Data sets: IDX and .npy arrays, MNIST-family directories, epoch orders, batch tiles.
#include "runtime/dataset.h"
#include "support/bf16.h"
#include "support/float16.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "analysis/checked.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "onnx/onnx_pb.h"
#include "runtime/safetensors.h"
#include "support/files.h"
#include "support/tensor_proto.h"

namespace tofu {
namespace {

bool endsWith(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// Inflates a gzip stream (several members, as gzip -c a b makes, are read one after another).
llvm::Expected<std::string> gunzip(const std::string &in, const std::string &name) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    return stringError(name + ": cannot start zlib");
  std::string out;
  z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[1 << 16];
  int status = Z_OK;
  while (true) {
    z.next_out = reinterpret_cast<Bytef *>(buf);
    z.avail_out = sizeof buf;
    status = inflate(&z, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END) {
      const std::string why = z.msg ? z.msg : "corrupt data";
      inflateEnd(&z);
      return stringError(
          fmt::format("{}: not a valid gzip file at byte {} ({})", name, z.total_in, why));
    }
    out.append(buf, sizeof buf - z.avail_out);
    if (static_cast<int64_t>(out.size()) > kMaxGraphBytes) {
      inflateEnd(&z);
      return stringError(fmt::format("{}: inflates to more than {} bytes", name, kMaxGraphBytes));
    }
    if (status == Z_STREAM_END) {
      if (z.avail_in == 0)
        break;
      inflateReset(&z); // another gzip member follows
      continue;
    }
    if (z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return stringError(
          fmt::format("{}: the gzip stream ends early (truncated at byte {})", name, in.size()));
    }
  }
  inflateEnd(&z);
  return out;
}

/// shape's element count times `width` bytes, checked.
llvm::Expected<int64_t> bodyBytes(const std::vector<int64_t> &shape, int width,
                                  const std::string &name) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return stringError(fmt::format("{}: negative dimension {}", name, d));
    auto m = checkedMul(n, d);
    if (!m)
      return stringError(fmt::format("{}: its shape [{}] overflows", name, fmt::join(shape, ", ")));
    n = *m;
  }
  auto bytes = checkedMul(n, width);
  if (!bytes || *bytes > kMaxGraphBytes)
    return stringError(fmt::format("{}: its shape [{}] holds more than {} bytes", name,
                                   fmt::join(shape, ", "), kMaxGraphBytes));
  return *bytes;
}

/// Unsigned elements (or float16 / bfloat16 bits, `bits`) widened into `a`, whose type is
/// already the wider one that holds them exactly: F32 from the 16-bit floats, I32 from
/// uint16, I64 from uint32 and uint64 (values past int64 refused).
enum class Bits { Unsigned, Float16, Bfloat16 };
llvm::Error widenInto(DataArray &a, const std::vector<uint64_t> &raw, Bits bits,
                      const std::string &name) {
  const size_t out = static_cast<size_t>(elementTypeBytes(a.type));
  a.bytes.resize(raw.size() * out);
  for (size_t k = 0; k < raw.size(); ++k) {
    const uint64_t x = raw[k];
    unsigned char *to = a.bytes.data() + k * out;
    if (bits != Bits::Unsigned) {
      const uint16_t h = static_cast<uint16_t>(x);
      const float v = bits == Bits::Float16 ? halfToFloat(h) : floatFromBf16(h);
      std::memcpy(to, &v, 4);
    } else if (out == 4) {
      const int32_t v = static_cast<int32_t>(x);
      std::memcpy(to, &v, 4);
    } else {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return stringError(fmt::format("{}: uint64 value {} is past int64's range", name, x));
      const int64_t v = static_cast<int64_t>(x);
      std::memcpy(to, &v, 8);
    }
  }
  return llvm::Error::success();
}

/// The type an array holds a file's elements of `type` in, as they are: every element type
/// but the 16-bit floats (bool as uint8). None for those and for the unsigned types Tofu has
/// no element type of (uint16 to uint64, `type` empty): they widen (widenedTo).
std::optional<ElementType> heldAs(std::optional<ElementType> type) {
  if (!type || *type == ElementType::Float16 || *type == ElementType::BFloat16)
    return std::nullopt;
  return *type == ElementType::Bool ? ElementType::UInt8 : *type;
}

/// The type an array holds widened elements in, exactly: float32 for the 16-bit floats,
/// int32 for uint16, int64 for uint32 and uint64.
ElementType widenedTo(std::optional<ElementType> type, bool uint16) {
  return type ? ElementType::Float32 : uint16 ? ElementType::Int32 : ElementType::Int64;
}

/// How widenInto reads widened elements of `type` (none: the unsigned types).
Bits bitsOf(std::optional<ElementType> type) {
  return !type ? Bits::Unsigned : *type == ElementType::Float16 ? Bits::Float16 : Bits::Bfloat16;
}

} // namespace

int64_t DataArray::sampleElements() const {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    n *= shape[d];
  return n;
}

double DataArray::at(int64_t flat) const {
  const unsigned char *p = bytes.data() + flat * elementTypeBytes(type);
  switch (type) {
  case ElementType::UInt8:
    return *p;
  case ElementType::Int8:
    return static_cast<int8_t>(*p);
  case ElementType::Int16: {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case ElementType::Int32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case ElementType::Int64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return static_cast<double>(v);
  }
  case ElementType::Float32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case ElementType::Float64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case ElementType::Float16: // an array holds these widened (or bool as uint8)
  case ElementType::BFloat16:
  case ElementType::Bool:
    break;
  }
  return 0;
}

llvm::Expected<DataArray> parseIdx(const std::string &bytes, const std::string &name) {
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0)
    return stringError(fmt::format("{}: not an IDX file (it must start with two zero bytes, a type "
                                   "byte and the rank)",
                                   name));
  DataArray a;
  a.path = name;
  const auto code = static_cast<unsigned char>(bytes[2]);
  switch (code) {
  case 0x08:
    a.type = ElementType::UInt8;
    break;
  case 0x09:
    a.type = ElementType::Int8;
    break;
  case 0x0B:
    a.type = ElementType::Int16;
    break;
  case 0x0C:
    a.type = ElementType::Int32;
    break;
  case 0x0D:
    a.type = ElementType::Float32;
    break;
  case 0x0E:
    a.type = ElementType::Float64;
    break;
  default:
    return stringError(fmt::format("{}: byte 2: IDX type 0x{:02x} is none of 0x08 (u8), 0x09 (i8), "
                                   "0x0B (i16), 0x0C (i32), 0x0D (f32), 0x0E (f64)",
                                   name, code));
  }
  a.onnxType = onnxDataType(a.type);
  const int rank = static_cast<unsigned char>(bytes[3]);
  if (rank == 0)
    return stringError(name + ": byte 3: rank 0 (the first dimension counts samples)");
  const size_t header = 4 + 4 * size_t(rank);
  if (bytes.size() < header)
    return stringError(fmt::format("{}: truncated in its header ({} bytes; {} dimensions need {})",
                                   name, bytes.size(), rank, header));
  for (int d = 0; d < rank; ++d) {
    const auto *p = reinterpret_cast<const unsigned char *>(bytes.data() + 4 + 4 * d);
    a.shape.push_back((int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | p[3]);
  }
  auto body = bodyBytes(a.shape, elementTypeBytes(a.type), name);
  if (!body)
    return body.takeError();
  if (static_cast<int64_t>(bytes.size() - header) != *body)
    return stringError(fmt::format(
        "{}: shape [{}] of {} needs {} bytes after the header; the file has {}", name,
        fmt::join(a.shape, ", "), elementTypeName(a.type), *body, bytes.size() - header));
  a.bytes.assign(bytes.begin() + header, bytes.end());
  const int w = elementTypeBytes(a.type);
  if (w > 1) // big-endian in the file
    for (size_t i = 0; i < a.bytes.size(); i += w)
      std::reverse(a.bytes.begin() + i, a.bytes.begin() + i + w);
  return a;
}

llvm::Expected<DataArray> parseNpy(const std::string &bytes, const std::string &name) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    return stringError(name + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t start = 0, length = 0;
  if (major == 1) {
    length =
        static_cast<unsigned char>(bytes[8]) | (size_t(static_cast<unsigned char>(bytes[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return stringError(name + ": truncated in its header");
    for (int i = 3; i >= 0; --i)
      length = (length << 8) | static_cast<unsigned char>(bytes[8 + i]);
    start = 12;
  } else {
    return stringError(fmt::format("{}: .npy version {} (1 to 3 are read)", name, major));
  }
  if (bytes.size() < start + length)
    return stringError(fmt::format("{}: truncated in its header ({} bytes of {})", name,
                                   bytes.size() - start, length));
  const std::string header = bytes.substr(start, length);
  // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),
  // }
  auto field = [&](const std::string &key) -> std::string {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos)
      return "";
    size_t colon = header.find(':', k);
    return colon == std::string::npos ? "" : header.substr(colon + 1);
  };
  std::string descr = field("descr");
  {
    size_t q = descr.find('\'');
    size_t e = q == std::string::npos ? q : descr.find('\'', q + 1);
    if (e == std::string::npos)
      return stringError(name + ": its header has no 'descr'");
    descr = descr.substr(q + 1, e - q - 1);
  }
  const std::string order = field("fortran_order");
  if (order.find("True") != std::string::npos && order.find("True") < order.find(','))
    return stringError(name + ": a Fortran-order array (save it in C order: np.ascontiguousarray)");
  DataArray a;
  a.path = name;
  // Types DataArray does not hold are widened to one that holds their values exactly, as
  // the TensorProto reader widens them: float16 to float32, uint16 to int32, uint32 and
  // uint64 to int64 (uint64 values past int64 refused).
  int widen = 0; ///< the stored element's bytes, where it is widened
  bool half = false;
  if (descr == "<f2")
    widen = 2, half = true, a.type = ElementType::Float32;
  else if (descr == "<u2")
    widen = 2, a.type = ElementType::Int32;
  else if (descr == "<u4")
    widen = 4, a.type = ElementType::Int64;
  else if (descr == "<u8")
    widen = 8, a.type = ElementType::Int64;
  else if (descr == "|u1" || descr == "<u1" || descr == "|b1")
    a.type = ElementType::UInt8;
  else if (descr == "|i1" || descr == "<i1")
    a.type = ElementType::Int8;
  else if (descr == "<i2")
    a.type = ElementType::Int16;
  else if (descr == "<i4")
    a.type = ElementType::Int32;
  else if (descr == "<i8")
    a.type = ElementType::Int64;
  else if (descr == "<f4")
    a.type = ElementType::Float32;
  else if (descr == "<f8")
    a.type = ElementType::Float64;
  else if (widen == 0)
    return stringError(fmt::format("{}: dtype '{}' is not read (u1, u2, u4, u8, i1, i2, i4, i8, "
                                   "f2, f4, f8 or b1, little-endian)",
                                   name, descr));
  a.onnxType = descr == "<f2"   ? onnx::TensorProto::FLOAT16
               : descr == "<u2" ? onnx::TensorProto::UINT16
               : descr == "<u4" ? onnx::TensorProto::UINT32
               : descr == "<u8" ? onnx::TensorProto::UINT64
               : descr == "|b1" ? onnx::TensorProto::BOOL
                                : onnxDataType(a.type);
  std::string shape = field("shape");
  size_t open = shape.find('('), close = shape.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return stringError(name + ": its header has no 'shape' tuple");
  std::string dims = shape.substr(open + 1, close - open - 1);
  std::stringstream ss(dims);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t");
    if (b == std::string::npos)
      continue;
    auto v = parseInteger(llvm::StringRef(item).trim(), 0, kMaxGraphBytes, "a dimension");
    if (!v)
      return stringError(
          fmt::format("{}: shape ({}): {}", name, dims, llvm::toString(v.takeError())));
    a.shape.push_back(*v);
  }
  auto body = bodyBytes(a.shape, widen ? widen : elementTypeBytes(a.type), name);
  if (!body)
    return body.takeError();
  const size_t data = start + length;
  if (static_cast<int64_t>(bytes.size() - data) != *body)
    return stringError(
        fmt::format("{}: shape [{}] of {} needs {} bytes after the header; the file has {}", name,
                    fmt::join(a.shape, ", "), descr, *body, bytes.size() - data));
  if (widen == 0) {
    a.bytes.assign(bytes.begin() + data, bytes.end());
    return a;
  }
  std::vector<uint64_t> raw(static_cast<size_t>(*body / widen));
  for (size_t k = 0; k < raw.size(); ++k)
    std::memcpy(&raw[k], bytes.data() + data + k * widen, widen);
  if (llvm::Error e = widenInto(a, raw, half ? Bits::Float16 : Bits::Unsigned, name))
    return std::move(e);
  return a;
}

void bfloat16FromBits(DataArray &a) {
  const int64_t n = static_cast<int64_t>(a.bytes.size()) / elementTypeBytes(a.type);
  std::vector<unsigned char> out(static_cast<size_t>(n) * 4);
  for (int64_t k = 0; k < n; ++k) {
    const float v = floatFromBf16(static_cast<uint16_t>(a.at(k)));
    std::memcpy(out.data() + static_cast<size_t>(k) * 4, &v, 4);
  }
  a.type = ElementType::Float32;
  a.bytes = std::move(out);
}

llvm::Expected<DataArray> parseTensorProto(const std::string &bytes, const std::string &name) {
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return stringError(fmt::format("{}: not an ONNX TensorProto", name));
  DataArray a;
  a.path = name;
  a.onnxType = t.data_type();
  a.shape.assign(t.dims().begin(), t.dims().end());
  // Checked at the widest element an array takes (8 bytes), whatever the type.
  if (auto widest = bodyBytes(a.shape, 8, name); !widest)
    return widest.takeError();
  if (!t.external_data().empty() || t.data_location() == onnx::TensorProto::EXTERNAL)
    return stringError(
        fmt::format("{}: the tensor's data is in an external file; give it inline", name));
  // The types an array holds as they are, and those widened to one that holds their values
  // exactly: uint16 to int32, uint32 and uint64 to int64, float16 and bfloat16 to float32.
  const int32_t code = t.data_type();
  const std::optional<ElementType> type = elementTypeOfOnnx(code);
  const bool wideUnsigned = code == onnx::TensorProto::UINT16 ||
                            code == onnx::TensorProto::UINT32 || code == onnx::TensorProto::UINT64;
  if (!type && !wideUnsigned)
    return stringError(fmt::format(
        "{}: element type {} is not supported (float, double, "
        "float16, bfloat16, int8 to int64, uint8 to uint64, bool)",
        name, onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(code))));
  auto values = decodeTensorProto(t);
  if (!values)
    return stringError(fmt::format("{}: {}", name, llvm::toString(values.takeError())));
  if (const std::optional<ElementType> held = heldAs(type)) {
    a.type = *held;
    a.bytes.assign(values->bytes.begin(), values->bytes.end());
    return a;
  }
  a.type = widenedTo(type, code == onnx::TensorProto::UINT16);
  std::vector<uint64_t> raw(static_cast<size_t>(values->elements()));
  for (size_t k = 0; k < raw.size(); ++k)
    raw[k] = values->bits(static_cast<int64_t>(k));
  if (llvm::Error e = widenInto(a, raw, bitsOf(type), name))
    return std::move(e);
  return a;
}

namespace {

/// Tensor `key` of an opened safetensors file as an array: F16 and BF16 widened to F32,
/// U16 to I32, U32 and U64 to I64 (U64 values past int64 refused), BOOL as U8.
llvm::Expected<DataArray> safetensorsArray(const SafetensorsFile &f, const std::string &key) {
  const SafetensorsTensor &t = f.tensors.at(key);
  const std::string name = f.path + ":" + key;
  if (t.shape.empty())
    return stringError(fmt::format("{}: a scalar, not an array of samples (its first dimension "
                                   "counts them)",
                                   name));
  if (t.end - t.begin > static_cast<uint64_t>(kMaxGraphBytes))
    return stringError(fmt::format("{}: its shape [{}] holds more than {} bytes", name,
                                   fmt::join(t.shape, ", "), kMaxGraphBytes));
  std::string raw(t.end - t.begin, '\0');
  if (llvm::Error e = f.read(raw.data(), raw.size(), t.begin))
    return llvm::Expected<DataArray>(std::move(e));
  DataArray a;
  a.path = name;
  a.shape = t.shape;
  const SafetensorsDtype d = t.dtype;
  const std::optional<ElementType> type = elementTypeOf(d);
  a.onnxType = type                         ? onnxDataType(*type)
               : d == SafetensorsDtype::U16 ? onnx::TensorProto::UINT16
               : d == SafetensorsDtype::U32 ? onnx::TensorProto::UINT32
                                            : onnx::TensorProto::UINT64;
  // The types an array holds as they are (bool as uint8, 0 or 1); the others widen.
  if (const std::optional<ElementType> held = heldAs(type)) {
    a.type = *held;
    a.bytes.assign(raw.begin(), raw.end());
    if (d == SafetensorsDtype::Bool)
      for (unsigned char &b : a.bytes)
        b = b != 0;
    return a;
  }
  a.type = widenedTo(type, d == SafetensorsDtype::U16);
  const size_t n = raw.size() / t.width, out = static_cast<size_t>(elementTypeBytes(a.type));
  a.bytes.resize(n * out);
  for (size_t k = 0; k < n; ++k) {
    const char *p = raw.data() + k * t.width;
    unsigned char *q = a.bytes.data() + k * out;
    if (a.type == ElementType::Float32) {
      const float v = static_cast<float>(safetensorsElement(d, p));
      std::memcpy(q, &v, 4);
    } else if (a.type == ElementType::Int32) {
      const int32_t v = static_cast<int32_t>(safetensorsElement(d, p));
      std::memcpy(q, &v, 4);
    } else {
      uint64_t x = 0;
      std::memcpy(&x, p, t.width);
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return stringError(fmt::format("{}: element {} is {}, past int64's range", name, k, x));
      const int64_t v = static_cast<int64_t>(x);
      std::memcpy(q, &v, 8);
    }
  }
  return a;
}

/// `FILE.safetensors[:KEY]` split into the file and the key (empty when not given).
std::pair<std::string, std::string> safetensorsPath(const std::string &path) {
  const std::string ext = ".safetensors";
  const size_t at = path.rfind(ext + ":");
  if (at != std::string::npos)
    return {path.substr(0, at + ext.size()), path.substr(at + ext.size() + 1)};
  return {path, ""};
}

bool isSafetensors(const std::string &path) {
  return endsWith(safetensorsPath(path).first, ".safetensors");
}

/// Every array of a safetensors file, by its key (sorted).
llvm::Expected<std::vector<std::pair<std::string, DataArray>>>
readSafetensorsArrays(const std::string &path) {
  auto f = openSafetensors(path);
  if (!f)
    return f.takeError();
  if ((*f)->tensors.empty())
    return stringError(fmt::format("{}: holds no tensors", path));
  std::vector<std::pair<std::string, DataArray>> out;
  for (const auto &[key, t] : (*f)->tensors) {
    auto a = safetensorsArray(**f, key);
    if (!a)
      return a.takeError();
    out.emplace_back(key, std::move(*a));
  }
  return out;
}

} // namespace

llvm::Expected<DataArray> readDataArray(const std::string &path) {
  if (isSafetensors(path)) {
    const auto [file, key] = safetensorsPath(path);
    auto f = openSafetensors(file);
    if (!f)
      return f.takeError();
    std::vector<std::string> keys;
    for (const auto &[k, t] : (*f)->tensors)
      keys.push_back(k);
    if (!key.empty() && !(*f)->tensors.count(key))
      return stringError(
          fmt::format("{}: no tensor '{}' (it holds: {})", file, key, fmt::join(keys, ", ")));
    if (key.empty() && keys.size() != 1)
      return stringError(fmt::format("{}: holds {} tensors ({}); name one as {}:KEY", file,
                                     keys.size(), fmt::join(keys, ", "), file));
    return safetensorsArray(**f, key.empty() ? keys[0] : key);
  }
  auto bytes = readFile(path, "a data file");
  if (!bytes)
    return bytes.takeError();
  std::string name = path;
  if (endsWith(path, ".gz")) {
    auto inflated = gunzip(*bytes, path);
    if (!inflated)
      return inflated.takeError();
    *bytes = std::move(*inflated);
    name = path.substr(0, path.size() - 3);
  }
  if (endsWith(name, ".npy"))
    return parseNpy(*bytes, path);
  if (endsWith(name, ".pb"))
    return parseTensorProto(*bytes, path);
  return parseIdx(*bytes, path);
}

namespace {

/// A .npy file (version 1, C order) of numpy type `descr` holding `body`.
llvm::Error writeNpyBytes(const std::string &path, const std::vector<int64_t> &shape,
                          const std::string &descr, const std::string &body) {
  std::string dims;
  for (int64_t d : shape)
    dims += std::to_string(d) + ", ";
  if (shape.size() > 1)
    dims.resize(dims.size() - 1); // (2, 3) but (4,)
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                       (shape.empty() ? std::string() : dims) + "), }";
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out += body;
  return writeFileAtomically(path, out, "an array");
}

/// `values` as little-endian integers of `bytes` bytes in [lo, hi], each rounded.
std::string integerBytes(const std::vector<double> &values, int bytes, double lo, double hi) {
  std::string body;
  body.reserve(values.size() * size_t(bytes));
  for (double v : values) {
    const double r = std::isnan(v) ? 0 : std::min(hi, std::max(lo, std::nearbyint(v)));
    // 2^63 (INT64_MAX as a double) saturates rather than overflows.
    const uint64_t bits = r >= 9223372036854775807.0 ? uint64_t(INT64_MAX)
                          : r < 0                    ? uint64_t(int64_t(r))
                                                     : uint64_t(r);
    for (int b = 0; b < bytes; ++b)
      body += static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  return body;
}

} // namespace

llvm::Error writeNpy(const std::string &path, const std::vector<int64_t> &shape,
                     const std::vector<float> &values) {
  return writeNpyBytes(
      path, shape, "<f4",
      std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(float)));
}

llvm::Error writeNpyAs(const std::string &path, const std::vector<int64_t> &shape,
                       const std::vector<double> &values, ElementType dtype) {
  struct Int {
    ElementType type;
    const char *descr;
    int bytes;
    double lo, hi;
  };
  static const Int ints[] = {
      {ElementType::Int64, "<i8", 8, -9223372036854775808.0, 9223372036854775807.0},
      {ElementType::Int32, "<i4", 4, -2147483648.0, 2147483647.0},
      {ElementType::Int16, "<i2", 2, -32768.0, 32767.0},
      {ElementType::Int8, "|i1", 1, -128.0, 127.0},
      {ElementType::UInt8, "|u1", 1, 0.0, 255.0},
  };
  for (const Int &i : ints)
    if (dtype == i.type)
      return writeNpyBytes(path, shape, i.descr, integerBytes(values, i.bytes, i.lo, i.hi));
  if (dtype == ElementType::Bool) {
    std::string body;
    for (double v : values)
      body += static_cast<char>(v != 0 ? 1 : 0);
    return writeNpyBytes(path, shape, "|b1", body);
  }
  if (dtype == ElementType::Float64)
    return writeNpyBytes(
        path, shape, "<f8",
        std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(double)));
  return writeNpy(path, shape, std::vector<float>(values.begin(), values.end()));
}

const DataArray *DataSet::find(const std::string &name) const {
  for (const auto &[n, a] : arrays)
    if (n == name)
      return &a;
  return nullptr;
}

namespace {
/// `dir`/`base` or `dir`/`base`.gz, whichever exists ("" if neither).
std::string existing(const std::string &dir, const std::string &base) {
  for (const char *suffix : {"", ".gz"})
    if (isFile(dir + "/" + base + suffix))
      return dir + "/" + base + suffix;
  return "";
}
} // namespace

bool hasMnistSplit(const std::string &dir, const std::string &split) {
  return isDirectory(dir) && !existing(dir, split + "-images-idx3-ubyte").empty() &&
         !existing(dir, split + "-labels-idx1-ubyte").empty();
}

llvm::Expected<DataSet> openDataSet(const std::string &spec, const std::string &split,
                                    const SettingNames &names) {
  DataSet ds;
  std::vector<std::pair<std::string, std::string>> files;
  if (isDirectory(spec)) {
    for (const char *what : {"images", "labels"}) {
      const std::string base =
          fmt::format("{}-{}-idx{}-ubyte", split, what, std::string(what) == "images" ? 3 : 1);
      std::string f = existing(spec, base);
      if (f.empty())
        return stringError(
            fmt::format("{}: no {} or {}.gz (a data set directory of the MNIST family "
                        "holds <split>-images-idx3-ubyte and <split>-labels-idx1-ubyte, "
                        "split train or t10k)",
                        spec, base, base));
      files.emplace_back(what, f);
    }
    ds.description = fmt::format("{} ({} split)", spec, split);
  } else if (spec.find('=') == std::string::npos && isSafetensors(spec) &&
             safetensorsPath(spec).second.empty()) {
    // A safetensors file: every tensor an array, by its key.
    auto arrays = readSafetensorsArrays(spec);
    if (!arrays)
      return arrays.takeError();
    ds.description = spec;
    for (auto &[name, a] : *arrays) {
      if (!ds.arrays.empty() && a.samples() != ds.samples)
        return stringError(fmt::format("{} has {} samples but {} has {}: the arrays of a data set "
                                       "pair up sample by sample",
                                       a.path, a.samples(), ds.arrays.front().second.path,
                                       ds.samples));
      ds.samples = a.samples();
      ds.arrays.emplace_back(name, std::move(a));
    }
    return ds;
  } else if (spec.find('=') == std::string::npos) {
    return stringError(fmt::format(
        "{}: {} ({} takes a directory of the MNIST family, a "
        ".safetensors file, NAME=FILE,... naming each array, teacher "
        "or fixed)",
        spec, pathExists(spec) ? "a file, not a data set" : "no such directory", names("data")));
  } else {
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        return stringError(fmt::format("{} '{}': '{}' is not NAME=FILE (give a directory of the "
                                       "MNIST family, or NAME=FILE,... naming each array)",
                                       names("data"), spec, item));
      files.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
    if (files.empty())
      return stringError(names("data") + ": no arrays given");
    ds.description = spec;
  }
  for (const auto &[name, file] : files) {
    if (ds.find(name))
      return stringError(
          fmt::format("{} '{}': the array '{}' is given twice", names("data"), spec, name));
    auto a = readDataArray(file);
    if (!a)
      return a.takeError();
    if (a->shape.empty())
      return stringError(file + ": a rank-0 array (the first dimension counts samples)");
    if (!ds.arrays.empty() && a->samples() != ds.samples)
      return stringError(
          fmt::format("{} has {} samples but {} has {}: the arrays of a data set pair up "
                      "sample by sample",
                      file, a->samples(), ds.arrays.front().second.path, ds.samples));
    ds.samples = a->samples();
    ds.arrays.emplace_back(name, std::move(*a));
  }
  return ds;
}

std::vector<int64_t> epochOrder(int64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(0, n)));
  for (int64_t i = 0; i < n; ++i)
    order[i] = i;
  uint64_t state = (seed << 32) + epoch;
  auto next = [&state] {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t x = state;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  for (int64_t i = n - 1; i >= 1; --i) {
    const int64_t j = static_cast<int64_t>(next() % uint64_t(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

void fillBatch(const DataArray &array, const std::vector<int64_t> &samples,
               const std::vector<int64_t> &shape, const Box &box, bool raw,
               const Normalization &norm, float *out) {
  // Row-major strides of one batch row of the input.
  const size_t rank = shape.size();
  const double scale = !raw && array.type == ElementType::UInt8 ? 1.0 / 255.0 : 1.0;
  if (rank == 0) { // a scalar: the array's one value
    const double v = array.at(0);
    out[0] = static_cast<float>(raw ? v : (v * scale - norm.mean) / norm.std);
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * shape[d];
  const int64_t per = array.sampleElements();
  std::vector<int64_t> at(rank);
  for (size_t d = 0; d < rank; ++d)
    at[d] = box[d].lo;
  const int64_t total = boxElements(box);
  for (int64_t k = 0; k < total; ++k) {
    int64_t inner = 0;
    for (size_t d = 1; d < rank; ++d)
      inner += at[d] * stride[d];
    const double v = array.at(samples[at[0]] * per + inner);
    out[k] = static_cast<float>(raw ? v : (v * scale - norm.mean) / norm.std);
    for (size_t d = rank; d-- > 0;) {
      if (++at[d] < box[d].hi)
        break;
      at[d] = box[d].lo;
    }
  }
}

} // namespace tofu
