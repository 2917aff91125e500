// Attributes, small constants, shapes and element types (onnx_import_internal.h).
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>

#include "analysis/checked.h"
#include "analysis/interpreter.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_rules.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "support/tensor_proto.h"

namespace tofu {
namespace onnximport {

std::vector<int64_t> intsAttr(const onnx::NodeProto &n, const std::string &name,
                              std::vector<int64_t> dflt) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
  return dflt;
}

std::optional<int64_t> intAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.i();
  return std::nullopt;
}

std::optional<float> floatAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.f();
  return std::nullopt;
}

std::string stringAttr(const onnx::NodeProto &n, const std::string &name, std::string dflt) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.s();
  return dflt;
}

/// The number of elements of a shape.
int64_t elementCount(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>());
}

/// The numpy broadcast of two shapes, or nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcastShape(const std::vector<int64_t> &a,
                                                   const std::vector<int64_t> &b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> r(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t x = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    int64_t y = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    r[d] = x == 1 ? y : x;
  }
  return r;
}

/// Reads a TensorProto's values (float, double, int64, int32, int16, uint16, int8, uint8,
/// bool; raw or typed fields).
std::optional<Const> constOf(const onnx::TensorProto &t) {
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    break;
  default:
    return std::nullopt;
  }
  auto values = decodeTensorProto(t);
  if (!values) {
    llvm::consumeError(values.takeError());
    return std::nullopt;
  }
  Const c;
  c.shape = values->shape;
  c.isInt = !tensorProtoIsFloat(values->type);
  c.v.resize(static_cast<size_t>(values->elements()));
  for (int64_t k = 0; k < values->elements(); ++k)
    c.v[static_cast<size_t>(k)] = values->value(k);
  return c;
}

/// An ONNX index bound: negative counts from the end; clamped to [0, m].
int64_t bound(int64_t x, int64_t m) { return std::clamp(x < 0 ? x + m : x, int64_t(0), m); }

/// An integer constant held as a double, saturated to int64: INT64_MAX (an open-ended
/// slice, `x[3:]`) is 2^63 as a double, which a plain conversion overflows.
int64_t asInt(double x) {
  if (std::isnan(x))
    return 0;
  if (x >= 9.2233720368547758e18)
    return std::numeric_limits<int64_t>::max();
  if (x <= -9.2233720368547758e18)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(x);
}

/// The shape after ONNX Unsqueeze: `axes` index the output (negative from its end).
std::vector<int64_t> unsqueezed(std::vector<int64_t> shape, std::vector<int64_t> axes) {
  int64_t rank = int64_t(shape.size() + axes.size());
  for (int64_t &x : axes)
    x = x < 0 ? x + rank : x;
  std::sort(axes.begin(), axes.end());
  for (int64_t x : axes)
    shape.insert(shape.begin() + std::clamp<int64_t>(x, 0, int64_t(shape.size())), 1);
  return shape;
}

/// The shape after ONNX Squeeze: the listed axes go, or every size-1 axis when none is.
std::vector<int64_t> squeezed(const std::vector<int64_t> &shape, std::vector<int64_t> axes) {
  int64_t rank = int64_t(shape.size());
  for (int64_t &x : axes)
    x = x < 0 ? x + rank : x;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d)
    if (!(axes.empty() ? shape[d] == 1 : std::count(axes.begin(), axes.end(), d) > 0))
      kept.push_back(shape[d]);
  return kept;
}

/// ONNX Reshape's target for an input of shape `from`: 0 copies the input's dimension
/// (unless `allowZero`), -1 takes the elements left (0 when the rest is empty).
std::vector<int64_t> reshapeTarget(const std::vector<int64_t> &from, std::vector<int64_t> to,
                                   bool allowZero) {
  int64_t known = 1, infer = -1, total = elementCount(from);
  for (size_t d = 0; d < to.size(); ++d) {
    if (to[d] == 0 && !allowZero)
      to[d] = d < from.size() ? from[d] : 0;
    if (to[d] == -1)
      infer = int64_t(d);
    else
      known *= to[d];
  }
  if (infer >= 0)
    to[infer] = known ? total / known : 0;
  return to;
}

/// Why a shape cannot be a tensor's (a negative extent, more elements than 64-bit byte
/// counts hold), or empty.
std::string badShape(const std::vector<int64_t> &dims) {
  int64_t bytes = 8; // the widest element
  for (int64_t d : dims) {
    if (d < 0)
      return fmt::format("negative extent {}", d);
    if (d > 0 && bytes > std::numeric_limits<int64_t>::max() / d)
      return fmt::format("shape [{}] has more bytes than a 64-bit count holds",
                         fmt::join(dims, ", "));
    bytes *= std::max<int64_t>(d, 1);
  }
  return "";
}

bool isDefaultDomain(const std::string &domain) { return domain.empty() || domain == "ai.onnx"; }

int defaultOpset(const onnx::ModelProto &model) {
  int opset = 17;
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    if (isDefaultDomain(o.domain()))
      opset = int(o.version());
  return opset;
}

bool isIntType(int32_t t) {
  return t == onnx::TensorProto::INT64 || t == onnx::TensorProto::INT32 ||
         t == onnx::TensorProto::INT16 || t == onnx::TensorProto::INT8 ||
         t == onnx::TensorProto::UINT8 || t == onnx::TensorProto::UINT16 ||
         t == onnx::TensorProto::UINT32 || t == onnx::TensorProto::UINT64 ||
         t == onnx::TensorProto::BOOL;
}

/// `c` as a constant of ONNX element type `type`: integer types truncate, bool is x != 0.
void convertTo(Const &c, int32_t type) {
  c.isInt = isIntType(type);
  if (c.isInt)
    for (double &x : c.v)
      x = type == onnx::TensorProto::BOOL ? double(x != 0) : std::trunc(x);
}

int integerBits(int32_t t) {
  return isIntType(t) && t != onnx::TensorProto::BOOL ? 8 * int(rawElementBytes(t)) : 0;
}

bool isPermutation(std::vector<int64_t> perm, size_t rank) {
  if (perm.size() != rank)
    return false;
  std::sort(perm.begin(), perm.end());
  for (size_t d = 0; d < rank; ++d)
    if (perm[d] != int64_t(d))
      return false;
  return true;
}

/// The graph's name for an ONNX element type.
/// What an element type Tofu's tensors cannot hold is ("strings"), or null for a number type.
const char *unholdableType(int32_t t) {
  switch (t) {
  case onnx::TensorProto::STRING:
    return "strings";
  case onnx::TensorProto::COMPLEX64:
  case onnx::TensorProto::COMPLEX128:
    return "complex numbers";
  default:
    return nullptr;
  }
}

ElementType graphElementType(int32_t t) {
  return elementTypeOfOnnx(t).value_or(ElementType::Float32);
}

onnxrules::Value attrValue(const onnx::AttributeProto &a) {
  using onnxrules::Value;
  switch (a.type()) {
  case onnx::AttributeProto::INT:
    return Value::number(double(a.i()));
  case onnx::AttributeProto::FLOAT:
    return Value::number(double(a.f()));
  case onnx::AttributeProto::STRING:
    return Value::string(a.s());
  case onnx::AttributeProto::INTS:
    return Value::ofList(std::vector<double>(a.ints().begin(), a.ints().end()));
  case onnx::AttributeProto::FLOATS:
    return Value::ofList(std::vector<double>(a.floats().begin(), a.floats().end()));
  default:
    return Value();
  }
}

/// The structural operators the importer translates in C++ (the table names them).
/// The functions the table's expressions may call beside the built-in ones: what
/// NodeEnv::call answers.
const std::set<std::string> &importerFunctions() {
  static const std::set<std::string> names = {
      "bits", "const", "elemtype", "has",     "in",   "isint", "norm", "oshape", "out",
      "padb", "pade",  "present",  "pytorch", "rank", "shape", "used", "weight"};
  return names;
}

std::set<std::string> handlerNames() {
  std::set<std::string> names;
  for (const auto &entry : Importer::handlers())
    names.insert(entry.first);
  return names;
}

/// The table of `lib`'s directory, loaded once per directory (libraries are keyed by where
/// they were loaded from, never by address: a library freed and another loaded at its
/// address must not find the first one's table).
llvm::Expected<const onnxrules::Table *> tableFor(const OpLibrary &lib) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<onnxrules::Table>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = tables.find(lib.dir());
  if (it != tables.end())
    return it->second.get();
  auto t = onnxrules::Table::load(lib.dir() + "/onnx_mapping.json", lib, handlerNames(),
                                  importerFunctions());
  if (!t)
    return t.takeError();
  auto owned = std::make_unique<onnxrules::Table>(std::move(*t));
  const onnxrules::Table *p = owned.get();
  tables[lib.dir()] = std::move(owned);
  return p;
}

} // namespace onnximport
} // namespace tofu
