// A trained model back to ONNX: the model file as it was, its initializers' values
// replaced (see onnx_import.h: saveOnnxWithValues).
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_import.h"
#include "graph/onnx_import_internal.h"
#include "onnx/onnx_pb.h"
#include "support/bf16.h"
#include "support/files.h"
#include "support/float16.h"

namespace tofu {
namespace {

/// `values` as the bytes of an initializer of ONNX type `type` (little-endian), or an error
/// naming the type.
llvm::Expected<std::string> bytesOf(const std::vector<double> &values, int32_t type) {
  std::string out;
  auto put = [&](const auto &v) { out.append(reinterpret_cast<const char *>(&v), sizeof v); };
  switch (type) {
  case onnx::TensorProto::FLOAT:
    for (double v : values)
      put(static_cast<float>(v));
    return out;
  case onnx::TensorProto::DOUBLE:
    for (double v : values)
      put(v);
    return out;
  case onnx::TensorProto::FLOAT16:
    for (double v : values) { // rounded as Cast to float16 rounds: nearest, ties to even
      const float f = static_cast<float>(v);
      put(f != f ? uint16_t(floatToHalf(f) & 0xfe00u) : floatToHalf(f)); // a NaN: canonical
    }
    return out;
  case onnx::TensorProto::BFLOAT16:
    for (double v : values) {
      // Rounded as Cast to bfloat16 rounds (nearest, ties to even); a NaN stays one.
      const float f = static_cast<float>(v);
      put(f != f ? uint16_t(0x7fc0) : bf16Bits(f));
    }
    return out;
  default:
    return stringError(fmt::format(
        "its element type ({}) is not a float type",
        onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type))));
  }
}

} // namespace

llvm::Expected<OnnxSaveReport> saveOnnxWithValues(const std::string &in, const std::string &out,
                                                  const std::map<std::string, Tensor> &values,
                                                  bool external) {
  auto bytes = readFile(in, "an ONNX model");
  if (!bytes)
    return bytes.takeError();
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes))
    return stringError(fmt::format("'{}' is not an ONNX model (protobuf parsing failed)", in));
  // Initializers the run does not replace keep their values, read from the input's own
  // external data where it has any.
  std::error_code ec;
  const std::string dir =
      std::filesystem::canonical(std::filesystem::path(in), ec).parent_path().string();
  if (llvm::Error e = onnximport::loadExternalData(*model.mutable_graph(), dir))
    return stringError(fmt::format("{}: {}", in, llvm::toString(std::move(e))));
  OnnxSaveReport report;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    auto v = values.find(t.name());
    if (v == values.end())
      continue;
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (dims != v->second.shape)
      return stringError(fmt::format("initializer '{}' has shape [{}] in '{}', the trained "
                                     "tensor [{}]",
                                     t.name(), fmt::join(dims, ", "), in,
                                     fmt::join(v->second.shape, ", ")));
    auto raw = bytesOf(v->second.data, t.data_type());
    if (!raw)
      return stringError(
          fmt::format("initializer '{}': {}", t.name(), llvm::toString(raw.takeError())));
    const int32_t type = t.data_type();
    const std::string name = t.name();
    t.Clear();
    t.set_name(name);
    t.set_data_type(type);
    for (int64_t d : dims)
      t.add_dims(d);
    t.set_raw_data(std::move(*raw));
    ++report.replaced;
  }
  int64_t total = 0;
  for (const onnx::TensorProto &t : model.graph().initializer())
    total += static_cast<int64_t>(t.raw_data().size());
  // Protobuf cannot hold a message past 2 GiB: larger initializers then go to a file
  // beside the model (ONNX's external data), as they do when asked.
  report.externalData = external || total > (int64_t(1) << 31) - (int64_t(64) << 20);
  const std::filesystem::path target(out);
  const std::string dataName = target.filename().string() + ".data";
  const std::string dataPath = (target.parent_path() / dataName).string();
  // Both files complete before either takes its name: the data first, so that a model
  // never names data that is not there.
  auto modelFile = AtomicFile::create(out, "an ONNX model");
  if (!modelFile)
    return modelFile.takeError();
  std::optional<AtomicFile> data;
  if (report.externalData) {
    auto d = AtomicFile::create(dataPath, "the model's external data");
    if (!d)
      return d.takeError();
    data.emplace(std::move(*d));
    int64_t offset = 0;
    for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
      if (t.raw_data().size() < 1024)
        continue; // small ones stay inside
      const std::string raw = std::move(*t.mutable_raw_data());
      t.clear_raw_data();
      data->write(raw);
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      auto entry = [&](const char *key, const std::string &value) {
        onnx::StringStringEntryProto *e = t.add_external_data();
        e->set_key(key);
        e->set_value(value);
      };
      entry("location", dataName);
      entry("offset", std::to_string(offset));
      entry("length", std::to_string(raw.size()));
      offset += static_cast<int64_t>(raw.size());
      report.externalBytes += static_cast<int64_t>(raw.size());
    }
  }
  std::string serialised;
  if (!model.SerializeToString(&serialised))
    return stringError(fmt::format("cannot write '{}': the model does not serialise (past "
                                   "protobuf's 2 GiB?)",
                                   out));
  modelFile->write(serialised);
  if (data)
    if (llvm::Error e = data->commit())
      return std::move(e);
  if (llvm::Error e = modelFile->commit())
    return std::move(e);
  report.dataFile = report.externalData ? dataPath : "";
  report.bytes = total;
  return report;
}

} // namespace tofu
