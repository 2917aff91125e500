// Checkpoints in safetensors.
#include "runtime/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "runtime/cpu_kernels.h"

namespace tofu {
namespace {

llvm::Error fail(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", msg.c_str());
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

} // namespace

std::string checkpointFile(const std::string &dir) { return dir + "/model.safetensors"; }

llvm::Error saveCheckpoint(const std::string &dir, const Checkpoint &c) {
  if (!makeDirs(dir))
    return fail(fmt::format("{}: cannot create the directory: {}", dir, std::strerror(errno)));
  nlohmann::json header = nlohmann::json::object();
  uint64_t at = 0;
  for (const auto &[name, t] : c.tensors) {
    uint64_t bytes = static_cast<uint64_t>(t.size()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  nlohmann::json meta = nlohmann::json::object();
  for (const auto &[k, v] : c.metadata)
    meta[k] = v;
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  const std::string path = checkpointFile(dir), tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return fail(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char *>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<float> buf;
    for (const auto &[name, t] : c.tensors) {
      buf.assign(t.data.begin(), t.data.end());
      out.write(reinterpret_cast<const char *>(buf.data()),
                static_cast<std::streamsize>(buf.size() * 4));
    }
    out.flush();
    if (!out)
      return fail(fmt::format("{}: write failed (disk full?)", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return fail(fmt::format("{}: cannot rename to {}: {}", tmp, path, std::strerror(errno)));
  return llvm::Error::success();
}

llvm::Expected<Checkpoint> loadCheckpoint(const std::string &dir) {
  const std::string path = checkpointFile(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return fail(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  if (file.size() < 8)
    return fail(fmt::format("{}: not a safetensors file (shorter than its 8-byte header "
                            "length)",
                            path));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  if (n > file.size() - 8)
    return fail(fmt::format("{}: the header length {} runs past the end of the file ({} bytes)",
                            path, n, file.size()));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.substr(8, n));
  } catch (const nlohmann::json::exception &e) {
    return fail(fmt::format("{}: the header is not JSON: {}", path, e.what()));
  }
  if (!header.is_object())
    return fail(fmt::format("{}: the header is not a JSON object", path));
  const uint64_t dataStart = 8 + n, dataBytes = file.size() - dataStart;
  Checkpoint c;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return fail(fmt::format("{}: __metadata__ is not an object", path));
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string())
          c.metadata[m.key()] = m.value().get<std::string>();
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
    const std::string dtype = v["dtype"].get<std::string>();
    size_t width = dtype == "F32" ? 4 : dtype == "F64" ? 8 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
    if (width == 0)
      return where("dtype " + dtype + " is not a floating-point type Tofu loads (F32, F64, F16, BF16)");
    std::vector<int64_t> shape;
    int64_t count = 1;
    for (const nlohmann::json &d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return where("a dimension is not a non-negative integer");
      shape.push_back(d.get<int64_t>());
      count *= shape.back();
    }
    const nlohmann::json &off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return where("data_offsets are not non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > dataBytes)
      return where(fmt::format("bytes [{}, {}) lie outside the {} bytes of data", b, e, dataBytes));
    if (e - b != static_cast<uint64_t>(count) * width)
      return where(fmt::format("shape and dtype make {} bytes, data_offsets {}", count * width,
                               e - b));
    ranges.push_back({b, e});
    Tensor t(shape);
    const char *p = file.data() + dataStart + b;
    for (int64_t i = 0; i < count; ++i) {
      if (dtype == "F32") {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        t.data[i] = f;
      } else if (dtype == "F64") {
        std::memcpy(&t.data[i], p + 8 * i, 8);
      } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        if (dtype == "F16") {
          t.data[i] = halfToFloat(h);
        } else {
          uint32_t bits = static_cast<uint32_t>(h) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          t.data[i] = f;
        }
      }
    }
    c.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second && ranges[i].first != ranges[i].second)
      return fail(fmt::format("{}: the byte ranges of two tensors overlap", path));
  return c;
}

} // namespace tofu
