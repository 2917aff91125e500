// Reading safetensors files (see safetensors.h).
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/bf16.h"
#include "support/float16.h"

namespace tofu {
namespace {

llvm::Error fail(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", msg.c_str());
}

bool readAt(int fd, char *buf, uint64_t bytes, uint64_t offset) {
  while (bytes > 0) {
    ssize_t n = ::pread(fd, buf, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    buf += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

template <typename T> T load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

} // namespace

namespace {

struct DtypeRow {
  SafetensorsDtype dtype;
  const char *name;
  size_t width;
  bool floating;
};

const DtypeRow kDtypes[] = {
    {SafetensorsDtype::Bool, "BOOL", 1, false}, {SafetensorsDtype::U8, "U8", 1, false},
    {SafetensorsDtype::I8, "I8", 1, false},     {SafetensorsDtype::U16, "U16", 2, false},
    {SafetensorsDtype::I16, "I16", 2, false},   {SafetensorsDtype::F16, "F16", 2, true},
    {SafetensorsDtype::BF16, "BF16", 2, true},  {SafetensorsDtype::U32, "U32", 4, false},
    {SafetensorsDtype::I32, "I32", 4, false},   {SafetensorsDtype::F32, "F32", 4, true},
    {SafetensorsDtype::U64, "U64", 8, false},   {SafetensorsDtype::I64, "I64", 8, false},
    {SafetensorsDtype::F64, "F64", 8, true},
};

const DtypeRow &row(SafetensorsDtype d) { return kDtypes[static_cast<size_t>(d)]; }

} // namespace

std::optional<SafetensorsDtype> safetensorsDtypeNamed(std::string_view name) {
  for (const DtypeRow &r : kDtypes)
    if (name == r.name)
      return r.dtype;
  return std::nullopt;
}

const char *safetensorsDtypeName(SafetensorsDtype d) { return row(d).name; }

size_t safetensorsWidth(SafetensorsDtype d) { return row(d).width; }

bool safetensorsFloating(SafetensorsDtype d) { return row(d).floating; }

std::optional<ElementType> elementTypeOf(SafetensorsDtype d) {
  return elementTypeOfSafetensors(row(d).name);
}

double safetensorsElement(SafetensorsDtype d, const char *p) {
  switch (d) {
  case SafetensorsDtype::F32:
    return load<float>(p);
  case SafetensorsDtype::F64:
    return load<double>(p);
  case SafetensorsDtype::F16:
    return halfToFloat(load<uint16_t>(p));
  case SafetensorsDtype::BF16:
    return floatFromBf16(load<uint16_t>(p));
  case SafetensorsDtype::Bool:
    return load<uint8_t>(p) != 0;
  case SafetensorsDtype::U8:
    return load<uint8_t>(p);
  case SafetensorsDtype::I8:
    return load<int8_t>(p);
  case SafetensorsDtype::U16:
    return load<uint16_t>(p);
  case SafetensorsDtype::I16:
    return load<int16_t>(p);
  case SafetensorsDtype::U32:
    return load<uint32_t>(p);
  case SafetensorsDtype::I32:
    return load<int32_t>(p);
  case SafetensorsDtype::U64:
    return static_cast<double>(load<uint64_t>(p));
  case SafetensorsDtype::I64:
    return static_cast<double>(load<int64_t>(p));
  }
  return 0;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd >= 0)
    ::close(fd);
}

llvm::Error SafetensorsFile::read(char *buf, uint64_t bytes, uint64_t offset) const {
  errno = 0;
  if (!readAt(fd, buf, bytes, dataStart + offset))
    return fail(
        fmt::format("{}: cannot read: {}", path,
                    errno ? std::strerror(errno) : "the file is shorter than its header says"));
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<SafetensorsFile>> openSafetensors(const std::string &path) {
  auto f = std::make_unique<SafetensorsFile>();
  f->path = path;
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (f->fd < 0 || ::fstat(f->fd, &st) != 0)
    return fail(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char len[8];
  if (size < 8 || !readAt(f->fd, reinterpret_cast<char *>(len), 8, 0))
    return fail(fmt::format("{}: not a safetensors file (shorter than its 8-byte header "
                            "length)",
                            path));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (n > size - 8)
    return fail(fmt::format("{}: the header length {} runs past the end of the file ({} bytes)",
                            path, n, size));
  std::string text(n, '\0');
  if (!readAt(f->fd, text.data(), n, 8))
    return fail(fmt::format("{}: cannot read the header: {}", path, std::strerror(errno)));
  nlohmann::json header;
  // A name given twice would be read as its last copy: the first repeated one is refused.
  std::set<std::string> names;
  std::string repeated;
  auto noteKey = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json &parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(text, noteKey);
  } catch (const nlohmann::json::exception &e) {
    return fail(fmt::format("{}: the header is not JSON: {}", path, e.what()));
  }
  if (!repeated.empty())
    return fail(fmt::format("{}: the header names tensor '{}' twice", path, repeated));
  if (!header.is_object())
    return fail(fmt::format("{}: the header is not a JSON object", path));
  f->dataStart = 8 + n;
  const uint64_t dataBytes = size - f->dataStart;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return fail(fmt::format("{}: __metadata__ is not an object", path));
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string())
          f->metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto where = [&](const std::string &what) {
      return fail(fmt::format("{}: tensor '{}': {}", path, name, what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      return where("needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      return where("dtype must be a string, shape an array, data_offsets [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    const std::string dtype = v["dtype"].get<std::string>();
    const std::optional<SafetensorsDtype> known = safetensorsDtypeNamed(dtype);
    if (!known)
      return where("dtype " + dtype +
                   " is not a safetensors type Tofu reads (F64, F32, F16, "
                   "BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL)");
    t.dtype = *known;
    t.width = safetensorsWidth(t.dtype);
    uint64_t count = 1;
    for (const nlohmann::json &d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return where("a dimension is not a non-negative integer");
      t.shape.push_back(d.get<int64_t>());
      const uint64_t e = static_cast<uint64_t>(t.shape.back());
      if (e != 0 && count > (uint64_t(1) << 62) / e)
        return where("the shape has more elements than any file holds");
      count *= e;
    }
    const nlohmann::json &off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return where("data_offsets are not non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end || t.end > dataBytes)
      return where(fmt::format("bytes [{}, {}) lie outside the {} bytes of data", t.begin, t.end,
                               dataBytes));
    if (t.end - t.begin != count * t.width)
      return where(fmt::format("shape and dtype make {} bytes, data_offsets {}", count * t.width,
                               t.end - t.begin));
    ranges.push_back({t.begin, t.end});
    f->tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second && ranges[i].first != ranges[i].second)
      return fail(fmt::format("{}: the byte ranges of two tensors overlap", path));
  return f;
}

} // namespace tofu
