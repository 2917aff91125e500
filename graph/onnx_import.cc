// ONNX import through Debian's libonnx: protobuf parsing, shape inference, node translation.
#include "graph/onnx_import.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
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

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "analysis/checked.h"
#include "analysis/interpreter.h"
#include "graph/onnx_rules.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace tofu {
namespace {

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

/// The most entries of a matrix the importer builds to map one axis (Resize, edge and
/// reflect Pad).
constexpr int64_t kMaxAxisMap = int64_t(1) << 24;

/// How ONNX Resize interpolates along an axis.
struct ResizeSpec {
  std::string mode = "nearest";         ///< nearest, linear or cubic
  std::string transform = "half_pixel"; ///< coordinate_transformation_mode
  std::string nearestMode = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
};

/// Resize's interpolation along one axis of extent `in` to `out`, as a matrix [out, in]
/// (row-major), computed as ONNX's reference computes each output (1.12,
/// onnx/backend/test/case/node/resize.py): output coordinate x maps to x_ori by the
/// coordinate transformation; the mode's n neighbours of x_ori are the n integers nearest
/// it (ties to the lower one, among those within ceil(n / 2) of the axis), each clamped onto
/// the axis (edge padding), weighted by the mode's coefficients at ratio = x_ori -
/// floor(x_ori) (1 where x_ori is an integer). `scale` is the axis's scale factor.
std::vector<double> resizeMatrix(int64_t in, int64_t out, double scale, const ResizeSpec &s) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  const double outWidth = scale * double(in);
  for (int64_t x = 0; x < out; ++x) {
    double ori;
    if (s.transform == "align_corners")
      ori = outWidth == 1 ? 0 : double(x) * double(in - 1) / (outWidth - 1);
    else if (s.transform == "asymmetric")
      ori = double(x) / scale;
    else if (s.transform == "pytorch_half_pixel")
      ori = outWidth == 1 ? -0.5 : (double(x) + 0.5) / scale - 0.5;
    else if (s.transform == "tf_half_pixel_for_nn")
      ori = (double(x) + 0.5) / scale;
    else // half_pixel
      ori = (double(x) + 0.5) / scale - 0.5;
    const double ratio = ori == std::floor(ori) ? 1.0 : ori - std::floor(ori);
    std::vector<double> c;
    if (s.mode == "linear") {
      c = {1 - ratio, ratio};
    } else if (s.mode == "cubic") {
      const double a = s.cubicA, r = ratio, q = 1 - ratio;
      c = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
           ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * q - (a + 3)) * q * q + 1,
           ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
    } else if (ratio == 1) {
      c = {0, 1};
    } else if (s.nearestMode == "round_prefer_ceil") {
      c = {double(ratio < 0.5), double(ratio >= 0.5)};
    } else if (s.nearestMode == "floor") {
      c = {1, 0};
    } else if (s.nearestMode == "ceil") {
      c = {0, 1};
    } else { // round_prefer_floor
      c = {double(ratio <= 0.5), double(ratio > 0.5)};
    }
    const int64_t n = int64_t(c.size()), pad = (n + 1) / 2;
    std::vector<int64_t> near;
    for (int64_t i = -pad; i < in + pad; ++i)
      near.push_back(i);
    std::stable_sort(near.begin(), near.end(), [&](int64_t a, int64_t b) {
      return std::abs(ori - double(a)) < std::abs(ori - double(b));
    });
    near.resize(static_cast<size_t>(std::min<int64_t>(n, int64_t(near.size()))));
    std::sort(near.begin(), near.end());
    if (s.excludeOutside) {
      double sum = 0;
      for (size_t k = 0; k < near.size(); ++k) {
        if (near[k] < 0 || near[k] >= in)
          c[k] = 0;
        sum += c[k];
      }
      for (double &v : c)
        v = sum != 0 ? v / sum : 0;
    }
    for (size_t k = 0; k < near.size(); ++k)
      m[static_cast<size_t>(x * in + std::clamp<int64_t>(near[k], 0, in - 1))] += c[k];
  }
  return m;
}

/// Edge or reflect padding along an axis of extent `in` by `b` before and `e` after (either
/// negative crops), as a selection matrix [in + b + e, in].
std::vector<double> padMatrix(int64_t in, int64_t b, int64_t e, const std::string &mode) {
  const int64_t out = in + b + e;
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - b;
    if (mode == "edge" || in == 1) {
      i = std::clamp<int64_t>(i, 0, in - 1);
    } else { // reflect: mirrored about the first and last entries, as often as needed
      const int64_t period = 2 * (in - 1);
      i = ((i % period) + period) % period;
      if (i >= in)
        i = period - i;
    }
    m[static_cast<size_t>(o * in + i)] = 1;
  }
  return m;
}

/// A small constant tensor the importer evaluates itself (shape computations, scalars).
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

struct Const {
  std::vector<int64_t> shape;
  std::vector<double> v; ///< row-major
  bool isInt = false;
  int64_t size() const { return elementCount(shape); }
};

/// Reads a TensorProto's values (float, double, int32, int64, bool; raw or typed fields).
std::optional<Const> constOf(const onnx::TensorProto &t) {
  Const c;
  c.shape.assign(t.dims().begin(), t.dims().end());
  const int64_t n = c.size();
  const std::string &raw = t.raw_data();
  auto fromRaw = [&](auto tag) {
    using T = decltype(tag);
    if (raw.size() != size_t(n) * sizeof(T))
      return false;
    for (int64_t k = 0; k < n; ++k) {
      T x;
      std::memcpy(&x, raw.data() + k * sizeof(T), sizeof(T));
      c.v.push_back(static_cast<double>(x));
    }
    return true;
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (!raw.empty() ? !fromRaw(float()) : (c.v.assign(t.float_data().begin(), t.float_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::DOUBLE:
    if (!raw.empty() ? !fromRaw(double()) : (c.v.assign(t.double_data().begin(), t.double_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::INT64:
    c.isInt = true;
    if (!raw.empty() ? !fromRaw(int64_t()) : (c.v.assign(t.int64_data().begin(), t.int64_data().end()), false))
      return std::nullopt;
    break;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL: {
    c.isInt = true;
    // Narrow types keep their values in int32_data; raw data has their own widths.
    bool okRaw = true;
    if (!raw.empty()) {
      switch (t.data_type()) {
      case onnx::TensorProto::INT32: okRaw = fromRaw(int32_t()); break;
      case onnx::TensorProto::INT16: okRaw = fromRaw(int16_t()); break;
      case onnx::TensorProto::UINT16: okRaw = fromRaw(uint16_t()); break;
      case onnx::TensorProto::INT8: okRaw = fromRaw(int8_t()); break;
      default: okRaw = fromRaw(uint8_t()); break;
      }
    } else {
      c.v.assign(t.int32_data().begin(), t.int32_data().end());
    }
    if (!okRaw)
      return std::nullopt;
    break;
  }
  default:
    return std::nullopt;
  }
  if (int64_t(c.v.size()) != n)
    return std::nullopt;
  return c;
}

/// Numpy-style broadcast of two constants through `f`.
std::optional<Const> broadcast(const Const &a, const Const &b, const std::function<double(double, double)> &f) {
  auto shape = broadcastShape(a.shape, b.shape);
  if (!shape)
    return std::nullopt;
  const size_t rank = shape->size();
  Const out;
  out.isInt = a.isInt && b.isInt;
  out.shape = *shape;
  auto index = [&](const Const &c, const std::vector<int64_t> &at) {
    int64_t k = 0;
    size_t off = rank - c.shape.size();
    for (size_t d = off; d < rank; ++d)
      k = k * c.shape[d - off] + (c.shape[d - off] == 1 ? 0 : at[d]);
    return k;
  };
  std::vector<int64_t> at(rank, 0);
  for (int64_t k = 0; k < out.size(); ++k) {
    int64_t r = k;
    for (size_t d = rank; d-- > 0;) {
      at[d] = r % out.shape[d];
      r /= out.shape[d];
    }
    out.v.push_back(f(a.v[index(a, at)], b.v[index(b, at)]));
  }
  return out;
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
      return fmt::format("shape [{}] has more bytes than a 64-bit count holds", fmt::join(dims, ", "));
    bytes *= std::max<int64_t>(d, 1);
  }
  return "";
}

/// The attributes of window operators (convolutions, pooling) in the ranges they have a
/// meaning in: strides, dilations and kernel extents at least 1, pads at least 0, group at
/// least 1. Named by node and attribute.
llvm::Error checkAttributes(const onnx::GraphProto &graph) {
  static const std::set<std::string> windowed = {
      "Conv",    "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
      "AveragePool", "LpPool",    "MaxUnpool",   "DeformConv"};
  for (const onnx::NodeProto &n : graph.node()) {
    if (!windowed.count(n.op_type()))
      continue;
    const std::string who = fmt::format("node '{}' ({})", n.name().empty() ? n.output(0) : n.name(),
                                        n.op_type());
    for (const onnx::AttributeProto &a : n.attribute()) {
      int64_t least = -1;
      if (a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape")
        least = 1;
      else if (a.name() == "pads" || a.name() == "output_padding")
        least = 0;
      else if (a.name() == "group")
        least = 1;
      if (least < 0)
        continue;
      std::vector<int64_t> values(a.ints().begin(), a.ints().end());
      if (a.type() == onnx::AttributeProto::INT)
        values = {a.i()};
      for (int64_t v : values)
        if (v < least)
          return stringError(fmt::format("{}: attribute {} has {}; each must be at least {}",
                                         who, a.name(), v, least));
    }
  }
  return llvm::Error::success();
}

/// ONNX's shape inference, strict: a node whose inputs do not fit its operator (ranks, an
/// attribute out of range) is an error naming it, not an unknown shape.
llvm::Error inferShapes(onnx::ModelProto &model) {
  try {
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true,
                                                                   /*error_mode=*/1,
                                                                   /*enable_data_propagation=*/true));
  } catch (const std::exception &e) {
    return stringError(std::string("ONNX shape inference failed: ") + e.what());
  }
  return llvm::Error::success();
}

/// inferShapes in a child process. ONNX's inference functions trust their inputs' ranks
/// (ConvTranspose reads dimensions of its weight that a malformed model does not have:
/// a segfault), and those ranks are known only as inference reaches each node, so no check
/// before it can guard them all. The child sends the inferred model back, or the error; a
/// child killed by a signal is an error naming the signal. Where no child can be made, the
/// inference runs here.
llvm::Error inferShapesIsolated(onnx::ModelProto &model) {
  int fds[2];
  if (::pipe(fds) != 0)
    return inferShapes(model);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return inferShapes(model);
  }
  if (pid == 0) { // the child: one status byte ('0' the model follows, '1' an error)
    ::close(fds[0]);
    // A crash ends the child by its signal, which the parent reports; no handler of the
    // parent's (a sanitizer's, a fuzzer's) runs here as if the parent had crashed.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      std::signal(sig, SIG_DFL);
    std::string out;
    if (llvm::Error e = inferShapes(model))
      out = "1" + llvm::toString(std::move(e));
    else
      out = "0" + model.SerializeAsString();
    for (size_t at = 0; at < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        ::_exit(3);
      at += static_cast<size_t>(n);
    }
    ::_exit(0); // no destructors, no buffered output flushed twice, no leak report
  }
  ::close(fds[1]);
  std::string in;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return stringError(fmt::format("ONNX shape inference crashed on this model ({}): a node's "
                                   "inputs do not have the ranks its operator needs",
                                   strsignal(WTERMSIG(status))));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || in.empty())
    return stringError("ONNX shape inference failed in its process (it sent no result)");
  if (in[0] == '1')
    return stringError(in.substr(1));
  onnx::ModelProto inferred;
  if (!inferred.ParseFromArray(in.data() + 1, static_cast<int>(in.size() - 1)))
    return stringError("ONNX shape inference sent back a model that does not parse");
  // The graph's contents, not the model: the importer holds a pointer to its graph.
  model.mutable_graph()->Swap(inferred.mutable_graph());
  return llvm::Error::success();
}

/// Bytes per element of an ONNX element type whose raw data the importer reads, or 0.
int64_t rawElementBytes(int32_t t) {
  switch (t) {
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64: return 8;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32: return 4;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16: return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL: return 1;
  default: return 0;
  }
}

/// Reads every initializer's external data into its raw bytes. A location must be a relative
/// path that stays inside `dir` (no `..`, no link out of it); offset and length must lie
/// inside the file.
llvm::Error loadExternalData(onnx::GraphProto &graph, const std::string &dir) {
  for (onnx::TensorProto &t : *graph.mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    auto fail = [&](const std::string &what) {
      return stringError(fmt::format("initializer '{}': {}", t.name(), what));
    };
    std::string location;
    int64_t offset = 0, length = -1;
    for (const onnx::StringStringEntryProto &kv : t.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset" || kv.key() == "length") {
        auto v = parseInteger(kv.value(), 0, std::numeric_limits<int64_t>::max(),
                              "external data's " + kv.key());
        if (!v)
          return fail(llvm::toString(v.takeError()));
        (kv.key() == "offset" ? offset : length) = *v;
      }
    }
    if (location.empty())
      return fail("its data is external but names no location");
    if (dir.empty())
      return fail(fmt::format("its data is in the external file '{}', and a model read from "
                              "memory has no folder to find it in",
                              location));
    const std::filesystem::path rel(location);
    bool escapes = rel.is_absolute();
    for (const std::filesystem::path &part : rel)
      escapes |= part == "..";
    if (escapes)
      return fail(fmt::format("its external data '{}' is outside the model's folder (a "
                              "location is a relative path without '..')",
                              location));
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::canonical(dir, ec);
    if (ec)
      return fail(fmt::format("the model's folder '{}': {}", dir, ec.message()));
    const std::filesystem::path file = std::filesystem::canonical(base / rel, ec);
    if (ec)
      return fail(fmt::format("cannot read its external data '{}': {}", (base / rel).string(),
                              ec.message()));
    const std::string inside = file.string(), root = base.string() + "/";
    if (inside.compare(0, root.size(), root) != 0)
      return fail(fmt::format("its external data '{}' links outside the model's folder (to '{}')",
                              location, inside));
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!in || !std::filesystem::is_regular_file(file))
      return fail(fmt::format("cannot read its external data '{}'", inside));
    const int64_t size = static_cast<int64_t>(in.tellg());
    if (offset > size || (length >= 0 && length > size - offset))
      return fail(fmt::format("its external data lies at bytes {} to {} of '{}', which has {}",
                              offset, length >= 0 ? fmt::format("{}", offset + length) : "the end",
                              location, size));
    if (length < 0)
      length = size - offset;
    std::string bytes(static_cast<size_t>(length), '\0');
    in.seekg(offset);
    if (!in.read(bytes.data(), length))
      return fail(fmt::format("reading its external data '{}' failed", inside));
    t.set_raw_data(std::move(bytes));
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
  }
  return llvm::Error::success();
}

/// Every initializer holds as many values as its shape says (raw bytes, or typed fields).
llvm::Error checkInitializerSizes(const onnx::GraphProto &graph) {
  for (const onnx::TensorProto &t : graph.initializer()) {
    int64_t n = 1;
    bool overflow = false;
    for (int64_t d : t.dims()) {
      if (d < 0 || __builtin_mul_overflow(n, d, &n))
        overflow = true;
    }
    if (overflow)
      return stringError(fmt::format("initializer '{}': its shape [{}] has no valid element count",
                                     t.name(), fmt::join(t.dims(), ", ")));
    int64_t have = -1, unit = 1;
    const char *field = "";
    if (!t.raw_data().empty()) {
      unit = rawElementBytes(t.data_type());
      if (unit == 0)
        continue;
      have = static_cast<int64_t>(t.raw_data().size());
      field = "raw data";
    } else if (t.float_data_size() > 0) {
      have = t.float_data_size(), field = "float_data";
    } else if (t.int64_data_size() > 0) {
      have = t.int64_data_size(), field = "int64_data";
    } else if (t.int32_data_size() > 0) {
      have = t.int32_data_size(), field = "int32_data";
    } else if (t.double_data_size() > 0) {
      have = t.double_data_size(), field = "double_data";
    } else if (n > 0 && t.data_type() != onnx::TensorProto::STRING) {
      have = 0, field = "data";
      unit = 1;
    }
    if (have >= 0 && have != n * unit)
      return stringError(fmt::format("initializer '{}' of shape [{}] holds {} {} where its "
                                     "shape needs {}",
                                     t.name(), fmt::join(t.dims(), ", "),
                                     unit > 1 ? fmt::format("{} bytes of", have)
                                              : std::to_string(have),
                                     field, unit > 1 ? fmt::format("{} bytes", n * unit)
                                                     : std::to_string(n)));
  }
  return llvm::Error::success();
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

/// The graph's name for an ONNX element type.
/// What an element type Tofu's tensors cannot hold is ("strings"), or null for a number type.
const char *unholdableType(int32_t t) {
  switch (t) {
  case onnx::TensorProto::STRING: return "strings";
  case onnx::TensorProto::COMPLEX64:
  case onnx::TensorProto::COMPLEX128: return "complex numbers";
  default: return nullptr;
  }
}

std::string dtypeName(int32_t t) {
  switch (t) {
  case onnx::TensorProto::DOUBLE: return "float64";
  case onnx::TensorProto::FLOAT16: return "float16";
  case onnx::TensorProto::BFLOAT16: return "bfloat16";
  case onnx::TensorProto::INT64: return "int64";
  case onnx::TensorProto::INT32: return "int32";
  case onnx::TensorProto::INT16: return "int16";
  case onnx::TensorProto::INT8: return "int8";
  case onnx::TensorProto::UINT8: return "uint8";
  case onnx::TensorProto::BOOL: return "bool";
  default: return "float32";
  }
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
  static const std::set<std::string> names = {"const", "has",  "in",   "isint", "norm",
                                              "oshape", "out", "padb", "pade",  "present",
                                              "rank",  "shape", "used"};
  return names;
}

const std::set<std::string> &handlerNames() {
  static const std::set<std::string> names = {"reshape", "slice", "concat", "transpose",
                                              "expand",  "pad",   "tile",   "recurrent",
                                              "einsum",  "resize"};
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

class NodeEnv;

class Importer {
public:
  Importer(const OpLibrary &lib, const onnxrules::Table &table, const OnnxImportOptions &options)
      : lib_(lib), table_(table), options_(options) {}

  llvm::Expected<Graph> run(onnx::ModelProto &model);

private:
  friend class NodeEnv;
  using Handler = llvm::Error (Importer::*)(const onnx::NodeProto &, NodeEnv &);

  llvm::Error translate(const onnx::NodeProto &n);
  /// Constant indices checked against the axis they index (Gather's).
  llvm::Error checkConstantIndices(const onnx::NodeProto &n);
  /// The rules or the handler of `entry`, into the current graph.
  llvm::Error translateWith(const onnx::NodeProto &n, const onnxrules::Entry &entry);
  llvm::Error applyRule(const onnx::NodeProto &n, const onnxrules::Rule &rule, NodeEnv &env);
  llvm::Error runSteps(const onnx::NodeProto &n, const std::vector<onnxrules::Step> &steps,
                       NodeEnv &env, int defaultOutput, std::string prev, const std::string &suffix,
                       std::string *result);
  llvm::Expected<std::string> resolve(const onnx::NodeProto &n, const onnxrules::InputRef &r,
                                      NodeEnv &env, const std::string &prev,
                                      const std::vector<std::string> &results);
  /// Evaluates `n` through the interpreter when all its inputs are constants: its library
  /// ops are built in a scratch graph and run. False when it cannot be (the node is then
  /// translated into the graph).
  bool foldByInterpreter(const onnx::NodeProto &n, const onnxrules::Entry &entry);

  llvm::Error reshapeOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error sliceOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error concatOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error transposeOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error expandOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error padOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error tileOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error resizeOp(const onnx::NodeProto &n, NodeEnv &env);
  /// `x` mapped linearly along `axis` by the constant matrix `m` ([rows, extent of the
  /// axis], row-major): the library's AxisMap op.
  std::string axisMap(const std::string &name, const std::string &x, int64_t axis, int64_t rows,
                      std::vector<double> m, const std::string &out);
  llvm::Error recurrentOp(const onnx::NodeProto &n, NodeEnv &env);
  llvm::Error einsumOp(const onnx::NodeProto &n, NodeEnv &env);
  /// `parts` concatenated along `axis` by a balanced tree of Concat ops.
  std::string concatAll(const std::string &name, std::vector<std::string> parts, int64_t axis,
                        const std::string &out);
  /// `count` entries of `x` from `start` along `axis`.
  std::string sliceAxis(const std::string &name, const std::string &x, int64_t axis,
                        int64_t start, int64_t count);
  /// `x` reshaped to `to` (itself when it has that shape).
  std::string reshaped(const std::string &name, const std::string &x, const std::vector<int64_t> &to);

  std::string node(const std::string &name, const std::string &op, std::vector<std::string> in,
                   std::map<std::string, int64_t> attrs = {},
                   std::map<std::string, int64_t> groups = {}, const std::string &output = "");
  /// A constant tensor of the graph (an input with its values).
  std::string constant(const std::string &name, std::vector<int64_t> shape,
                       std::vector<double> values, bool isInt);
  const std::vector<int64_t> &shapeOf(const std::string &tensor) { return shapes_[tensor]; }
  void keep(llvm::Error e) {
    if (e && !error_)
      error_ = std::move(e);
    else
      llvm::consumeError(std::move(e));
  }
  /// Evaluates `n` when all its inputs are constants (shape arithmetic); false when it
  /// is not foldable.
  bool fold(const onnx::NodeProto &n);
  /// A constant consumed by a translated node becomes a graph input of its shape.
  void materialize(const std::string &name);
  /// Input `k` of `n` as a tensor of the graph, or an error.
  llvm::Expected<std::string> tensorInput(const onnx::NodeProto &n, int k);
  /// The values of a constant input, or an error naming what is needed.
  llvm::Expected<std::vector<int64_t>> ints(const std::string &tensor, const std::string &what);
  /// The axes of Unsqueeze, Squeeze and reductions: the `axes` attribute (opsets before
  /// 13/18) or the constant second input.
  llvm::Expected<std::vector<int64_t>> axesOf(const onnx::NodeProto &n) {
    if (n.input_size() > 1 && !n.input(1).empty())
      return ints(n.input(1), "axes");
    return intsAttr(n, "axes", {});
  }
  /// Reshape `x` (of `from`) to `to` (same element count) with split/merge/squeeze ops.
  std::string reshape(const std::string &name, std::string x, std::vector<int64_t> from,
                      const std::vector<int64_t> &to, const std::string &out);
  /// `in` with its axes permuted (output axis d is input axis perm[d]), by the library's
  /// Transpose_<perm> ops of ranks 2 to 4 on merged axes, or block moves at higher ranks.
  std::string transpose(const std::string &name, const std::string &in,
                        const std::vector<int64_t> &perm, const std::string &out);
  /// `x` broadcast numpy-style to `to` (leading axes added, size-1 axes expanded).
  std::string broadcastTo(const std::string &name, std::string x, const std::vector<int64_t> &to,
                          const std::string &out = "");
  /// The name of `n` in messages and in the graph.
  std::string nameOf(const onnx::NodeProto &n) {
    auto it = names_.find(&n);
    if (it != names_.end())
      return it->second;
    std::string name = n.name().empty() ? fmt::format("{}_{}", n.op_type(), counter_++) : n.name();
    names_[&n] = name;
    return name;
  }
  llvm::Error where(const onnx::NodeProto &n, const std::string &msg) {
    return stringError(fmt::format("node '{}' (ONNX {}): {}", nameOf(n), n.op_type(), msg));
  }

  /// The values of `name`: a constant the importer evaluated, else a graph input given
  /// ahead with its values (never folded into the graph: only ops that need a constant
  /// read it). Null when neither.
  const Const *known(const std::string &name) const {
    if (auto it = consts_.find(name); it != consts_.end())
      return &it->second;
    if (auto it = given_.find(name); it != given_.end())
      return &it->second;
    return nullptr;
  }

  std::map<std::string, Const> consts_;
  std::map<std::string, Const> given_; ///< inputs given ahead with their values
  const OpLibrary &lib_;
  const onnxrules::Table &table_;
  OnnxImportOptions options_;
  Graph g_;
  int opset_ = 17;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, int32_t> types_; ///< ONNX element types, where known
  std::set<std::string> consumed_;       ///< tensors some node or the graph's outputs read
  std::map<const onnx::NodeProto *, std::string> names_;
  std::string group_; // the ONNX node being translated: all its TDL nodes share its group
  std::string coalesce_; // the coalesce key of the nodes being added (unrolled recurrences)
  llvm::Error error_ = llvm::Error::success();
  unsigned counter_ = 0;
};

/// Names and functions of the table's expressions while node `n` is translated.
class NodeEnv : public onnxrules::Env {
public:
  using Value = onnxrules::Value;
  NodeEnv(Importer &im, const onnx::NodeProto &n) : im_(im), n_(n) {
    schema_ = onnx::OpSchemaRegistry::Schema(n.op_type(), im.opset_, "");
  }
  std::map<std::string, Value> vars;

  const std::string &input(int k) const {
    static const std::string none;
    return k >= 0 && k < n_.input_size() ? n_.input(k) : none;
  }
  bool present(int k) const { return !input(k).empty(); }
  int inputs() const {
    int c = n_.input_size();
    while (c > 0 && n_.input(c - 1).empty())
      --c;
    return c;
  }

  Value name(const std::string &id) override {
    if (auto it = vars.find(id); it != vars.end())
      return it->second;
    for (const onnx::AttributeProto &a : n_.attribute())
      if (a.name() == id)
        return attrValue(a);
    if (schema_) {
      const auto &attrs = schema_->attributes();
      if (auto it = attrs.find(id); it != attrs.end())
        return attrValue(it->second.default_value);
    }
    if (id == "rank")
      return rank(0);
    if (id == "inputs")
      return Value::number(inputs());
    if (id == "outputs")
      return Value::number(n_.output_size());
    if (id == "opset")
      return Value::number(im_.opset_);
    return Value();
  }

  Value rank(int k) {
    if (!present(k) || !im_.shapes_.count(input(k)))
      return Value();
    return Value::number(double(im_.shapes_[input(k)].size()));
  }
  Value shape(const std::string &t) {
    auto it = im_.shapes_.find(t);
    if (t.empty() || it == im_.shapes_.end())
      return Value();
    return Value::ofList(std::vector<double>(it->second.begin(), it->second.end()));
  }
  /// Begin (`end` false) or end padding of spatial axis `d` of a convolution or pooling:
  /// auto_pad resolved, and the end padding grown to what the inferred output needs (ceil
  /// mode).
  llvm::Expected<Value> pad(int d, bool end) {
    Value x = shape(input(0)), y = shape(n_.output(0));
    if (!x.defined() || size_t(d + 2) >= x.list.size())
      return Value();
    double in = x.list[d + 2];
    Value ks = name("kernel_shape");
    double k = ks.defined() && size_t(d) < ks.list.size() ? ks.list[d]
               : present(1) && shape(input(1)).defined() && size_t(d + 2) < shape(input(1)).list.size()
                   ? shape(input(1)).list[d + 2]
                   : 1;
    auto at = [&](const std::string &attr, size_t i, double dflt) {
      Value v = name(attr);
      return v.defined() && i < v.list.size() ? v.list[i] : dflt;
    };
    double s = at("strides", d, 1), dil = at("dilations", d, 1);
    size_t spatial = x.list.size() - 2;
    // The output extent: ONNX's inference, else the operator's formula (floor or ceil mode).
    double out;
    if (y.defined() && size_t(d + 2) < y.list.size()) {
      out = y.list[d + 2];
    } else {
      double span = in + at("pads", d, 0) + at("pads", d + spatial, 0) - ((k - 1) * dil + 1);
      Value ceilMode = name("ceil_mode");
      bool up = ceilMode.kind == Value::Kind::Num && ceilMode.num != 0;
      out = (up ? std::ceil(span / s) : std::floor(span / s)) + 1;
    }
    double needed = std::max(0.0, (out - 1) * s + (k - 1) * dil + 1 - in);
    Value autoPad = name("auto_pad");
    std::string mode = autoPad.kind == Value::Kind::Str ? autoPad.str : "NOTSET";
    double b, e;
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      b = mode == "SAME_UPPER" ? std::floor(needed / 2) : std::ceil(needed / 2);
      e = needed - b;
    } else if (mode == "VALID") {
      b = 0;
      e = 0;
    } else {
      b = at("pads", d, 0);
      e = std::max(at("pads", d + spatial, 0), needed - b);
    }
    return Value::number(end ? e : b);
  }

  std::optional<llvm::Expected<Value>> call(const std::string &fn,
                                             const std::vector<Value> &a) override {
    auto index = [&](size_t i) -> int {
      return i < a.size() && a[i].kind == Value::Kind::Num ? int(a[i].num) : -1;
    };
    if (fn == "rank")
      return rank(a.empty() ? 0 : index(0));
    if (fn == "present")
      return Value::number(present(index(0)));
    if (fn == "shape")
      return shape(input(index(0)));
    if (fn == "oshape")
      return shape(index(0) >= 0 && index(0) < n_.output_size() ? n_.output(index(0)) : "");
    if (fn == "in" || fn == "out") {
      Value s = fn == "in" ? shape(input(index(0)))
                           : shape(index(0) >= 0 && index(0) < n_.output_size() ? n_.output(index(0)) : "");
      if (!s.defined() || a.size() < 2 || a[1].kind != Value::Kind::Num)
        return Value();
      int64_t d = int64_t(a[1].num), r = int64_t(s.list.size());
      d = d < 0 ? d + r : d;
      return d >= 0 && d < r ? Value::number(s.list[d]) : Value();
    }
    if (fn == "used") {
      int k = index(0);
      return Value::number(k >= 0 && k < n_.output_size() && !n_.output(k).empty() &&
                           im_.consumed_.count(n_.output(k)));
    }
    if (fn == "const") {
      const Const *c = im_.known(input(index(0)));
      if (!c)
        return Value();
      return Value::ofList(c->v);
    }
    if (fn == "isint") { // input k holds integers (ONNX's element type)
      auto it = im_.types_.find(input(index(0)));
      return Value::number(it != im_.types_.end() && isIntType(it->second));
    }
    if (fn == "has") {
      if (a.size() != 1 || a[0].kind != Value::Kind::Str)
        return llvm::Expected<Value>(stringError("has() takes an attribute name"));
      for (const onnx::AttributeProto &attr : n_.attribute())
        if (attr.name() == a[0].str)
          return Value::number(1);
      return Value::number(0);
    }
    if (fn == "norm") { // an axis (or list of axes) counted from the end when negative
      if (a.empty() || !a[0].defined())
        return Value();
      Value r = a.size() > 1 ? a[1] : rank(0);
      if (!r.defined())
        return Value();
      auto fix = [&](double x) { return x < 0 ? x + r.num : x; };
      if (a[0].kind == Value::Kind::Num)
        return Value::number(fix(a[0].num));
      Value l = a[0];
      for (double &x : l.list)
        x = fix(x);
      return l;
    }
    if (fn == "padb" || fn == "pade") {
      if (index(0) < 0)
        return Value();
      return pad(index(0), fn == "pade");
    }
    return std::nullopt;
  }

private:
  Importer &im_;
  const onnx::NodeProto &n_;
  const onnx::OpSchema *schema_ = nullptr;
};

std::string Importer::node(const std::string &name, const std::string &op,
                           std::vector<std::string> in, std::map<std::string, int64_t> attrs,
                           std::map<std::string, int64_t> groups, const std::string &output) {
  Node n;
  n.name = name;
  n.group = group_;
  n.coalesce = coalesce_;
  n.op = op;
  n.inputs = std::move(in);
  n.attrs = std::move(attrs);
  n.groups = std::move(groups);
  n.output = output.empty() ? fmt::format("{}__{}", name, counter_++) : output;
  std::string out = n.output;
  if (!g_.tensor(out)) {
    TensorInfo t;
    t.name = out;
    t.group = out;
    // Declared with ONNX's inferred shape when it has one: checkGraph compares.
    if (auto it = shapes_.find(out); it != shapes_.end()) {
      t.shape = it->second;
      t.shapeKnown = true;
    }
    if (auto it = types_.find(out); it != types_.end())
      t.dtype = dtypeName(it->second);
    keep(g_.addTensor(std::move(t)));
  }
  keep(g_.addNode(std::move(n)));
  // Infer the output's shape now: later nodes (reshapes, slices) read it.
  if (!error_) {
    keep(inferNode(g_, g_.nodes().back(), lib_));
    if (const TensorInfo *t = g_.tensor(out); t && t->shapeKnown)
      shapes_[out] = t->shape;
  }
  return out;
}

std::string Importer::constant(const std::string &name, std::vector<int64_t> shape,
                               std::vector<double> values, bool isInt) {
  Const c;
  c.shape = std::move(shape);
  c.v = std::move(values);
  c.isInt = isInt;
  shapes_[name] = c.shape;
  consts_[name] = std::move(c);
  materialize(name);
  return name;
}

void Importer::materialize(const std::string &name) {
  auto it = consts_.find(name);
  if (it == consts_.end() || g_.tensor(name))
    return;
  TensorInfo t;
  t.name = name;
  t.group = name;
  t.shape = it->second.shape;
  t.shapeKnown = true;
  t.dtype = it->second.isInt ? "int64" : "float32";
  t.role = TensorRole::Input;
  shapes_[name] = t.shape;
  g_.constants[name] = it->second.v;
  keep(g_.addTensor(std::move(t)));
}

llvm::Expected<std::string> Importer::tensorInput(const onnx::NodeProto &n, int k) {
  if (k < 0 || k >= n.input_size() || n.input(k).empty())
    return where(n, fmt::format("its input {} is needed but absent", k));
  const std::string &t = n.input(k);
  materialize(t);
  if (!g_.tensor(t))
    return where(n, fmt::format("input '{}' is not produced before it", t));
  return t;
}

llvm::Expected<std::vector<int64_t>> Importer::ints(const std::string &tensor,
                                                     const std::string &what) {
  const Const *c = known(tensor);
  if (!c)
    return stringError(fmt::format("its {} ('{}') must be a constant the importer can evaluate "
                                   "(or, for an input, a value given ahead: tofu-run --infer "
                                   "--input)",
                                   what, tensor));
  std::vector<int64_t> v;
  for (double x : c->v)
    v.push_back(asInt(x));
  return v;
}

std::string Importer::broadcastTo(const std::string &name, std::string x,
                                  const std::vector<int64_t> &to, const std::string &out) {
  std::vector<int64_t> from = shapeOf(x);
  if (from.size() < to.size()) {
    std::vector<int64_t> lifted(to.size() - from.size(), 1);
    lifted.insert(lifted.end(), from.begin(), from.end());
    x = reshape(name + "_lift", x, from, lifted, "");
    from = lifted;
  }
  std::vector<size_t> axes;
  for (size_t d = 0; d < to.size(); ++d)
    if (from[d] == 1 && to[d] != 1)
      axes.push_back(d);
  if (axes.empty())
    return out.empty() ? x : node(name, "Identity", {x}, {}, {}, out);
  for (size_t k = 0; k < axes.size(); ++k) {
    size_t d = axes[k];
    x = node(fmt::format("{}_expand{}", name, d), "ExpandAxis", {x}, {{"n", to[d]}},
             {{"pre", int64_t(d)}, {"post", int64_t(to.size() - d - 1)}},
             k + 1 == axes.size() ? out : "");
  }
  return x;
}

bool Importer::fold(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  if (n.output_size() != 1)
    return false;
  const std::string &out = n.output(0);
  std::vector<std::string> in(n.input().begin(), n.input().end());
  while (!in.empty() && in.back().empty())
    in.pop_back();
  if (op == "Constant") {
    for (const onnx::AttributeProto &a : n.attribute()) {
      Const c;
      if (a.name() == "value") {
        auto v = constOf(a.t());
        if (!v)
          return false;
        c = *v;
      } else if (a.name() == "value_int") {
        c.isInt = true;
        c.v = {double(a.i())};
      } else if (a.name() == "value_float") {
        c.v = {double(a.f())};
      } else if (a.name() == "value_ints") {
        c.isInt = true;
        c.shape = {a.ints_size()};
        c.v.assign(a.ints().begin(), a.ints().end());
      } else if (a.name() == "value_floats") {
        c.shape = {a.floats_size()};
        c.v.assign(a.floats().begin(), a.floats().end());
      } else {
        continue;
      }
      shapes_[out] = c.shape;
      consts_[out] = std::move(c);
      return true;
    }
    return false;
  }
  if ((op == "Shape" || op == "Size") && in.size() == 1) {
    auto it = shapes_.find(in[0]);
    if (it == shapes_.end() || (!g_.tensor(in[0]) && !consts_.count(in[0])))
      return false;
    Const c;
    c.isInt = true;
    if (op == "Size") {
      int64_t count = 1;
      for (int64_t d : it->second)
        count *= d;
      c.v = {double(count)};
      shapes_[out] = c.shape;
      consts_[out] = std::move(c);
      return true;
    }
    for (int64_t d : it->second)
      c.v.push_back(double(d));
    int64_t rank = int64_t(it->second.size());
    int64_t start = intAttr(n, "start").value_or(0), end = intAttr(n, "end").value_or(rank);
    start = bound(start, rank);
    end = bound(end, rank);
    c.v = std::vector<double>(c.v.begin() + start, c.v.begin() + std::max(start, end));
    c.shape = {int64_t(c.v.size())};
    shapes_[out] = c.shape;
    consts_[out] = std::move(c);
    return true;
  }
  // ConstantOfShape's shape may also be an input given ahead: its output is then a constant
  // too (other ops fold only what the importer evaluated itself).
  for (const std::string &i : in)
    if (!consts_.count(i) && !(op == "ConstantOfShape" && given_.count(i)))
      return false;
  if (in.empty())
    return false;
  const Const &a = *known(in[0]);
  Const r;
  // Integer shape arithmetic stays here (ONNX's integer semantics: Div truncates); other
  // constant nodes are evaluated through the interpreter (foldByInterpreter).
  static const std::map<std::string, std::function<double(double, double)>> binary = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Equal", [](double x, double y) { return double(x == y); }}};
  if (auto it = binary.find(op); it != binary.end() && in.size() == 2 && a.isInt &&
                                 consts_[in[1]].isInt) {
    auto b = broadcast(a, consts_[in[1]], it->second);
    if (!b)
      return false;
    r = *b;
  } else if (op == "Div" && in.size() == 2 && a.isInt && consts_[in[1]].isInt) {
    auto b = broadcast(a, consts_[in[1]],
                       [](double x, double y) { return y == 0 ? 0.0 : std::trunc(x / y); });
    if (!b)
      return false;
    r = *b;
  } else if ((op == "Identity" || op == "Cast") && in.size() == 1) {
    r = a;
    if (op == "Cast")
      convertTo(r, int32_t(intAttr(n, "to").value_or(onnx::TensorProto::FLOAT)));
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = intsAttr(n, "axes", {});
    if (in.size() > 1)
      for (double x : consts_[in[1]].v)
        axes.push_back(asInt(x));
    r = a;
    r.shape = op == "Unsqueeze" ? unsqueezed(a.shape, axes) : squeezed(a.shape, axes);
  } else if (op == "Concat" && a.shape.size() == 1) {
    r.isInt = a.isInt;
    for (const std::string &i : in) {
      if (consts_[i].shape.size() != 1)
        return false;
      r.v.insert(r.v.end(), consts_[i].v.begin(), consts_[i].v.end());
    }
    r.shape = {int64_t(r.v.size())};
  } else if (op == "Gather" && in.size() == 2 && intAttr(n, "axis").value_or(0) == 0 &&
             a.shape.size() == 1) {
    const Const &idx = consts_[in[1]];
    r.isInt = a.isInt;
    r.shape = idx.shape;
    for (double x : idx.v) {
      int64_t k = asInt(x) < 0 ? asInt(x) + a.shape[0] : asInt(x);
      if (k < 0 || k >= a.shape[0])
        return false;
      r.v.push_back(a.v[k]);
    }
  } else if (op == "Slice" && a.shape.size() == 1 && in.size() >= 3) {
    int64_t m = a.shape[0];
    int64_t start = asInt(consts_[in[1]].v.at(0)), end = asInt(consts_[in[2]].v.at(0));
    int64_t step = in.size() > 4 ? asInt(consts_[in[4]].v.at(0)) : 1;
    if (step <= 0)
      return false;
    start = bound(start, m);
    end = bound(end, m);
    r.isInt = a.isInt;
    for (int64_t k = start; k < end; k += step)
      r.v.push_back(a.v[k]);
    r.shape = {int64_t(r.v.size())};
  } else if (op == "Reshape" && in.size() == 2) {
    r = a;
    std::vector<int64_t> to;
    for (double x : consts_[in[1]].v)
      to.push_back(asInt(x));
    r.shape = reshapeTarget(a.shape, to, false);
    if (r.size() != a.size())
      return false;
  } else if (op == "ScatterND" && in.size() == 3) {
    // A constant tensor written by constant index tuples (Swin's shifted-window mask:
    // slice assignments into zeros); data-dependent scatters are translated instead.
    const Const &idx = consts_[in[1]], &upd = consts_[in[2]];
    const std::string reduction = stringAttr(n, "reduction", "none");
    if (idx.shape.empty() || a.shape.empty())
      return false;
    const size_t q = idx.shape.size();
    const int64_t k = idx.shape.back();
    if (k < 1 || k > int64_t(a.shape.size()))
      return false;
    int64_t tuples = 1, slice = 1;
    for (size_t d = 0; d + 1 < q; ++d)
      tuples *= idx.shape[d];
    for (size_t d = size_t(k); d < a.shape.size(); ++d)
      slice *= a.shape[d];
    if (upd.size() != tuples * slice)
      return false;
    r = a;
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t at = 0;
      for (int64_t d = 0; d < k; ++d) {
        int64_t i = asInt(idx.v[size_t(t * k + d)]);
        if (i < 0)
          i += a.shape[size_t(d)];
        if (i < 0 || i >= a.shape[size_t(d)])
          return false; // out of range: left to the translation, which reports it
        at = at * a.shape[size_t(d)] + i;
      }
      for (int64_t e = 0; e < slice; ++e) {
        double &x = r.v[size_t(at * slice + e)];
        const double u = upd.v[size_t(t * slice + e)];
        if (reduction == "none")
          x = u;
        else if (reduction == "add")
          x += u;
        else if (reduction == "mul")
          x *= u;
        else if (reduction == "max")
          x = std::max(x, u);
        else if (reduction == "min")
          x = std::min(x, u);
        else
          return false;
      }
    }
  } else if (op == "ConstantOfShape" && in.size() == 1) {
    r.isInt = false;
    double value = 0;
    for (const onnx::AttributeProto &attr : n.attribute())
      if (attr.name() == "value")
        if (auto v = constOf(attr.t()); v && !v->v.empty()) {
          value = v->v[0];
          r.isInt = v->isInt;
        }
    for (double x : a.v)
      r.shape.push_back(asInt(x));
    if (r.size() > (1 << 20))
      return false; // a large constant: leave it to the graph
    r.v.assign(size_t(r.size()), value);
  } else {
    return false;
  }
  shapes_[out] = r.shape;
  consts_[out] = std::move(r);
  return true;
}

bool Importer::foldByInterpreter(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  if (n.input_size() == 0)
    return false;
  for (const std::string &i : n.input())
    if (!i.empty() && !consts_.count(i))
      return false;
  // Small results only: a large constant stays a computation of the graph. (An output whose
  // shape ONNX did not infer is measured once evaluated.)
  constexpr int64_t kLargest = int64_t(1) << 22;
  int64_t elements = 0;
  for (const std::string &o : n.output())
    if (auto it = shapes_.find(o); !o.empty() && it != shapes_.end())
      elements += elementCount(it->second);
  if (elements > kLargest)
    return false;
  Graph scratch;
  std::swap(g_, scratch);
  llvm::Error saved = std::move(error_);
  error_ = llvm::Error::success();
  llvm::Error e = translateWith(n, entry);
  bool ok = !e && !error_;
  llvm::consumeError(std::move(e));
  llvm::consumeError(std::move(error_));
  std::map<std::string, Tensor> values;
  for (const auto &[name, v] : g_.constants) {
    Tensor t(g_.tensor(name)->shape);
    t.data = v;
    values[name] = std::move(t);
  }
  // The scratch graph's nodes in order (each was checked and shape-inferred as it was added).
  for (size_t k = 0; ok && k < g_.nodes().size(); ++k) {
    const Node &node = g_.nodes()[k];
    std::vector<const Tensor *> ptrs;
    for (const std::string &i : node.inputs) {
      auto it = values.find(i);
      if (it == values.end()) {
        ok = false;
        break;
      }
      ptrs.push_back(&it->second);
    }
    if (!ok)
      break;
    auto inst = instantiateNode(g_, node, lib_);
    if (!inst) {
      llvm::consumeError(inst.takeError());
      ok = false;
      break;
    }
    auto sh = concreteShapes(inst->op, inst->inputShapes, g_.tensor(node.output)->shape);
    if (!sh) {
      llvm::consumeError(sh.takeError());
      ok = false;
      break;
    }
    if (elementCount(g_.tensor(node.output)->shape) > kLargest) {
      ok = false;
      break;
    }
    auto r = evaluate(inst->op, *sh, ptrs, fullRanges(*sh));
    if (!r) {
      llvm::consumeError(r.takeError());
      ok = false;
      break;
    }
    values[node.output] = std::move(*r);
  }
  std::map<std::string, Const> results;
  for (const std::string &o : n.output()) {
    if (o.empty())
      continue;
    auto it = values.find(o);
    if (!ok || it == values.end()) {
      ok = false;
      break;
    }
    Const c;
    c.shape = it->second.shape;
    c.v = it->second.data;
    if (auto type = types_.find(o); type != types_.end())
      convertTo(c, type->second);
    results[o] = std::move(c);
  }
  std::swap(g_, scratch);
  error_ = std::move(saved);
  if (!ok)
    return false;
  for (auto &[name, c] : results) {
    shapes_[name] = c.shape;
    consts_[name] = std::move(c);
  }
  return true;
}

llvm::Error Importer::translate(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  std::string name = nameOf(n);
  group_ = name;
  coalesce_.clear();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return where(n, fmt::format("operators of domain '{}' are not supported", n.domain()));
  if (fold(n))
    return llvm::Error::success();
  if (n.output_size() < 1)
    return where(n, "has no output");
  const onnxrules::Entry *entry = table_.find(op);
  if (!entry)
    return where(n, fmt::format("not an operator of ONNX opset {} that the translation table "
                                "lists", table_.opset()));
  if (!entry->notDescribable.empty())
    return where(n, "TDL cannot describe it (" + entry->notDescribable + ")");
  if (!entry->folded.empty())
    return where(n, "its inputs must be static (" + entry->folded + ")");
  if (entry->rules.empty() && entry->handler.empty())
    return where(n, "the importer does not translate it yet" +
                        (entry->missing.empty() ? std::string() : " (" + entry->missing + ")"));
  if (foldByInterpreter(n, *entry))
    return llvm::Error::success();
  if (llvm::Error e = checkConstantIndices(n))
    return e;
  return translateWith(n, *entry);
}

llvm::Error Importer::checkConstantIndices(const onnx::NodeProto &n) {
  // Gather's constant indices lie on the axis ([-extent, extent)): an index outside would
  // read zeros (TDL's value outside a tensor), not an error.
  if (n.op_type() != "Gather" || n.input_size() < 2)
    return llvm::Error::success();
  auto c = consts_.find(n.input(1));
  auto data = shapes_.find(n.input(0));
  if (c == consts_.end() || data == shapes_.end())
    return llvm::Error::success();
  const int64_t rank = static_cast<int64_t>(data->second.size());
  int64_t axis = 0;
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == "axis")
      axis = a.i();
  if (axis < -rank || axis >= rank)
    return where(n, fmt::format("axis {} is outside the data's rank {}", axis, rank));
  const int64_t extent = data->second[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
  for (double v : c->second.v)
    if (v < -static_cast<double>(extent) || v >= static_cast<double>(extent))
      return where(n, fmt::format("index {} is outside axis {} of extent {} (indices lie in "
                                  "[-{}, {}))",
                                  static_cast<int64_t>(v), axis, extent, extent, extent));
  return llvm::Error::success();
}

llvm::Error Importer::translateWith(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  NodeEnv env(*this, n);
  if (!entry.handler.empty()) {
    static const std::map<std::string, Handler> handlers = {
        {"reshape", &Importer::reshapeOp}, {"slice", &Importer::sliceOp},
        {"concat", &Importer::concatOp},   {"transpose", &Importer::transposeOp},
        {"expand", &Importer::expandOp},   {"pad", &Importer::padOp},
        {"tile", &Importer::tileOp},       {"recurrent", &Importer::recurrentOp},
        {"einsum", &Importer::einsumOp},   {"resize", &Importer::resizeOp}};
    return (this->*handlers.at(entry.handler))(n, env);
  }
  for (const auto &[key, e] : entry.lets) {
    auto v = onnxrules::eval(*e, env);
    if (!v)
      return where(n, fmt::format("the translation table's '{}': {}", key, llvm::toString(v.takeError())));
    env.vars[key] = std::move(*v);
  }
  for (const onnxrules::Rule &rule : entry.rules) {
    if (rule.when) {
      auto w = onnxrules::eval(*rule.when, env);
      if (!w)
        return where(n, "the translation table's condition: " + llvm::toString(w.takeError()));
      if (!(w->kind == onnxrules::Value::Kind::Num && w->num != 0))
        continue;
    }
    return applyRule(n, rule, env);
  }
  return where(n, "no rule of the translation table applies to this node (its attributes or "
                  "input ranks are not translated)");
}

llvm::Error Importer::applyRule(const onnx::NodeProto &n, const onnxrules::Rule &rule,
                                NodeEnv &env) {
  for (const auto &[cond, why] : rule.refuse) {
    auto v = onnxrules::eval(*cond, env);
    if (!v)
      return where(n, "the translation table's condition: " + llvm::toString(v.takeError()));
    if (v->kind == onnxrules::Value::Kind::Num && v->num != 0)
      return where(n, why);
  }
  if (rule.eachOutput) {
    for (int o = 0; o < n.output_size(); ++o) {
      if (n.output(o).empty())
        continue;
      env.vars["o"] = onnxrules::Value::number(o);
      if (auto e = runSteps(n, rule.steps, env, o, "", fmt::format("_out{}", o), nullptr))
        return e;
    }
    return llvm::Error::success();
  }
  if (rule.chain) {
    int count = env.inputs();
    if (count < 2)
      return where(n, "needs at least two inputs");
    auto first = tensorInput(n, 0);
    if (!first)
      return first.takeError();
    std::string acc = *first;
    for (int k = 1; k < count; ++k) {
      env.vars["k"] = onnxrules::Value::number(k);
      if (auto e = runSteps(n, rule.steps, env, k + 1 == count ? 0 : -1, acc,
                            k == 1 ? "" : fmt::format("_{}", k), &acc))
        return e;
    }
    return llvm::Error::success();
  }
  return runSteps(n, rule.steps, env, 0, "", "", nullptr);
}

llvm::Expected<std::string> Importer::resolve(const onnx::NodeProto &n,
                                              const onnxrules::InputRef &r, NodeEnv &env,
                                              const std::string &prev,
                                              const std::vector<std::string> &results) {
  using Kind = onnxrules::InputRef::Kind;
  std::string name = nameOf(n);
  switch (r.kind) {
  case Kind::Onnx: {
    int k = r.index;
    if (k == -1) // a chain's current input
      k = int(env.vars["k"].num);
    if (!env.present(k) && r.orElse)
      return resolve(n, *r.orElse, env, prev, results);
    auto t = tensorInput(n, k);
    if (t && r.frozen)
      if (TensorInfo *info = g_.tensor(*t); info && !g_.producer(*t) && info->role == TensorRole::Weight)
        info->role = TensorRole::Input;
    return t;
  }
  case Kind::Prev:
    if (prev.empty())
      return where(n, "the translation table's step reads 'prev' before any step ran");
    return prev;
  case Kind::Step:
    if (r.index < 0 || size_t(r.index) >= results.size() || results[r.index].empty())
      return where(n, fmt::format("the translation table's step reads step {}, which did not run",
                                  r.index));
    return results[r.index];
  case Kind::NewInput: {
    std::string t = fmt::format("{}_{}", name, r.label);
    if (!g_.tensor(t)) {
      auto shape = onnxrules::eval(*r.shape, env);
      if (!shape)
        return shape.takeError();
      if (shape->kind != onnxrules::Value::Kind::List)
        return where(n, "the translation table's new input needs a shape");
      TensorInfo info;
      info.name = t;
      info.group = t;
      info.shape.assign(shape->list.begin(), shape->list.end());
      info.shapeKnown = true;
      info.role = TensorRole::Input;
      shapes_[t] = info.shape;
      keep(g_.addTensor(std::move(info)));
    }
    return t;
  }
  case Kind::Scalar:
  case Kind::Fill: {
    auto v = onnxrules::eval(*r.value, env);
    if (!v)
      return where(n, "the translation table's constant: " + llvm::toString(v.takeError()));
    if (v->kind != onnxrules::Value::Kind::Num)
      return where(n, fmt::format("the translation table's constant is {}, not a number", v->text()));
    std::vector<int64_t> shape;
    if (r.kind == Kind::Fill) {
      auto s = onnxrules::eval(*r.shape, env);
      if (!s)
        return s.takeError();
      if (s->kind != onnxrules::Value::Kind::List)
        return where(n, fmt::format("the translation table's constant shape is {}", s->text()));
      shape.assign(s->list.begin(), s->list.end());
    }
    std::vector<double> values(size_t(elementCount(shape)), v->num);
    return constant(fmt::format("{}_c{}", name, counter_++), shape, std::move(values), r.integer);
  }
  }
  return where(n, "bad input reference");
}

llvm::Error Importer::runSteps(const onnx::NodeProto &n, const std::vector<onnxrules::Step> &steps,
                               NodeEnv &env, int defaultOutput, std::string prev,
                               const std::string &suffix, std::string *result) {
  using onnxrules::Value;
  std::string name = nameOf(n) + suffix;
  auto integer = [&](const onnxrules::ExprPtr &e, const std::string &what) -> llvm::Expected<int64_t> {
    auto v = onnxrules::eval(*e, env);
    if (!v)
      return where(n, fmt::format("{}: {}", what, llvm::toString(v.takeError())));
    if (v->kind != Value::Kind::Num || v->num != std::floor(v->num))
      return where(n, fmt::format("{} is {}, not an integer (an attribute the translation "
                                  "needs is absent or out of range)", what, v->text()));
    return int64_t(v->num);
  };
  // Which steps run, and which ONNX output each produces.
  std::vector<bool> active(steps.size(), true);
  std::vector<int> produces(steps.size(), -1);
  int last = -1;
  for (size_t k = 0; k < steps.size(); ++k) {
    if (steps[k].cond) {
      auto c = onnxrules::eval(*steps[k].cond, env);
      if (!c)
        return where(n, "the translation table's condition: " + llvm::toString(c.takeError()));
      active[k] = c->kind == Value::Kind::Num && c->num != 0;
    }
    if (!active[k])
      continue;
    if (steps[k].output) {
      auto o = integer(steps[k].output, "the step's output");
      if (!o)
        return o.takeError();
      produces[k] = int(*o);
    } else {
      last = int(k);
    }
  }
  // The last step without an output of its own produces the default one, unless a step
  // names it.
  if (last >= 0 && defaultOutput >= 0 &&
      std::find(produces.begin(), produces.end(), defaultOutput) == produces.end())
    produces[last] = defaultOutput;
  std::vector<std::string> results(steps.size());
  bool first = true;
  for (size_t k = 0; k < steps.size(); ++k) {
    if (!active[k])
      continue;
    const onnxrules::Step &s = steps[k];
    std::vector<std::string> inputs;
    for (const onnxrules::InputRef &r : s.inputs) {
      auto t = resolve(n, r, env, prev, results);
      if (!t)
        return t.takeError();
      inputs.push_back(*t);
    }
    std::map<std::string, int64_t> attrs, groups;
    for (const auto &[key, e] : s.attrs) {
      auto v = integer(e, fmt::format("attribute {} of {}", key, s.op));
      if (!v)
        return v.takeError();
      attrs[key] = *v;
    }
    for (const auto &[key, e] : s.groups) {
      auto v = integer(e, fmt::format("group {} of {}", key, s.op));
      if (!v)
        return v.takeError();
      if (*v < 0)
        return where(n, fmt::format("group {} of {} would have length {}", key, s.op, *v));
      groups[key] = *v;
    }
    std::string stepName = first ? name : fmt::format("{}_{}{}", name, s.op.substr(s.op[0] == '@'), k);
    first = false;
    std::string out;
    if (produces[k] >= 0) {
      if (produces[k] >= n.output_size())
        return where(n, fmt::format("the translation table's step produces output {}, which the "
                                    "node does not have", produces[k]));
      out = n.output(produces[k]);
    }
    if (s.op == "@reshape") {
      auto shape = onnxrules::eval(*s.shape, env);
      if (!shape)
        return where(n, "the translation table's shape: " + llvm::toString(shape.takeError()));
      if (shape->kind != Value::Kind::List || inputs.size() != 1)
        return where(n, fmt::format("the translation table's reshape needs one input and a shape, "
                                    "not {}", shape->text()));
      std::vector<int64_t> to(shape->list.begin(), shape->list.end());
      const std::vector<int64_t> &from = shapeOf(inputs[0]);
      if (elementCount(to) != elementCount(from))
        return where(n, fmt::format("cannot reshape [{}] to [{}]", fmt::join(from, ", "),
                                    fmt::join(to, ", ")));
      results[k] = reshape(stepName, inputs[0], from, to, out);
      if (error_)
        return std::move(error_);
      prev = results[k];
      continue;
    }
    std::string op = s.op;
    if (!s.broadcast.empty()) {
      std::vector<int64_t> target;
      for (int p : s.broadcast) {
        auto b = broadcastShape(target, shapeOf(inputs[p]));
        if (!b)
          return where(n, "its inputs do not broadcast");
        target = *b;
      }
      if (s.broadcastTo) {
        auto t = onnxrules::eval(*s.broadcastTo, env);
        if (!t)
          return where(n, "the translation table's broadcast shape: " + llvm::toString(t.takeError()));
        if (t->kind != Value::Kind::List)
          return where(n, "the translation table's broadcast shape is " + t->text());
        target.assign(t->list.begin(), t->list.end());
      }
      // A second operand that only lacks leading axes: the trailing-aligned op.
      bool trailing = false;
      if (!s.trailingOp.empty() && s.broadcast.size() == 2) {
        std::string &a = inputs[s.broadcast[0]], &b = inputs[s.broadcast[1]];
        std::vector<int64_t> bs = shapeOf(b);
        if (shapeOf(a) == target && bs.size() < target.size()) {
          std::vector<int64_t> suffixShape(target.end() - bs.size(), target.end());
          b = broadcastTo(stepName + "_b", b, suffixShape);
          trailing = true;
          op = s.trailingOp;
          groups = {{"p", int64_t(target.size() - bs.size())}, {"i", int64_t(bs.size())}};
        }
      }
      if (!trailing)
        for (int p : s.broadcast)
          inputs[p] = broadcastTo(fmt::format("{}_in{}", stepName, p), inputs[p], target);
    }
    results[k] = node(stepName, op, inputs, attrs, groups, out);
    if (error_)
      return std::move(error_);
    prev = results[k];
  }
  if (result)
    *result = prev;
  return llvm::Error::success();
}


std::string Importer::reshape(const std::string &name, std::string x, std::vector<int64_t> from,
                              const std::vector<int64_t> &to, const std::string &out) {
  // Size-1 axes first leave (Squeeze) and finally come back (Unsqueeze); in between, the
  // axes are grouped where the two shapes' running products meet, and each group of
  // source axes is merged into one and split into the group's target axes.
  struct Step {
    std::string op;
    std::map<std::string, int64_t> attrs, groups;
  };
  std::vector<Step> steps;
  auto add = [&](const std::string &op, std::map<std::string, int64_t> attrs,
                 std::map<std::string, int64_t> groups) {
    steps.push_back({op, std::move(attrs), std::move(groups)});
  };
  std::vector<int64_t> cur = from;
  for (size_t d = cur.size(); d-- > 0;)
    if (cur[d] == 1) {
      add("Squeeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d - 1)}});
      cur.erase(cur.begin() + d);
    }
  std::vector<int64_t> target;
  for (int64_t d : to)
    if (d != 1)
      target.push_back(d);
  size_t i = 0, j = 0;
  while (i < cur.size() && j < target.size()) {
    size_t i2 = i + 1, j2 = j + 1;
    int64_t a = cur[i], b = target[j];
    while (a != b) {
      if (a < b)
        a *= cur[i2++];
      else
        b *= target[j2++];
    }
    // Merge cur[i, i2) into one axis at pos, then split it into target[j, j2).
    size_t rank = cur.size();
    for (size_t k = i + 1; k < i2; ++k) {
      int64_t inner = cur[i + 1];
      int64_t merged = cur[i] * inner;
      add("ReshapeMerge", {{"n", inner}, {"m", merged}},
          {{"pre", int64_t(i)}, {"post", int64_t(rank - i - 2)}});
      cur[i] = merged;
      cur.erase(cur.begin() + i + 1);
      rank = cur.size();
    }
    for (size_t k = j2 - 1; k > j; --k) {
      int64_t inner = target[k];
      int64_t outer = cur[i] / inner;
      add("ReshapeSplit", {{"n", inner}, {"outer", outer}},
          {{"pre", int64_t(i)}, {"post", int64_t(cur.size() - i - 1)}});
      cur[i] = outer;
      cur.insert(cur.begin() + i + 1, inner);
    }
    i += j2 - j;
    j = j2;
  }
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] == 1) {
      add("Unsqueeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d)}});
      cur.insert(cur.begin() + d, 1);
    }
  if (steps.empty())
    return node(name, "Identity", {x}, {}, {}, out);
  for (size_t k = 0; k < steps.size(); ++k)
    x = node(fmt::format("{}_{}{}", name, steps[k].op, k), steps[k].op, {x}, steps[k].attrs,
             steps[k].groups, k + 1 == steps.size() ? out : "");
  return x;
}


llvm::Error Importer::reshapeOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string &op = n.op_type();
  auto x = tensorInput(n, 0);
  if (!x)
    return x.takeError();
  const std::vector<int64_t> from = shapeOf(*x);
  const int64_t rank = int64_t(from.size());
  std::vector<int64_t> to;
  auto str = [](const std::vector<int64_t> &v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
  if (op == "Reshape") {
    auto target = ints(env.input(1), "shape");
    if (!target)
      return where(n, llvm::toString(target.takeError()));
    to = reshapeTarget(from, *target, intAttr(n, "allowzero").value_or(0));
    if (elementCount(to) != elementCount(from))
      return where(n, fmt::format("the target shape {} (from {}) does not keep the element count "
                                  "of {}", str(to), str(*target), str(from)));
  } else if (op == "Flatten") {
    int64_t axis = intAttr(n, "axis").value_or(1);
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis > rank)
      return where(n, fmt::format("axis {} is out of range for rank {}", axis, rank));
    // The common forms keep their own ops (fused kernels, fewer nodes).
    if (axis == 1 && rank == 4) {
      node(nameOf(n), "Flatten4", {*x}, {}, {}, n.output(0));
      return llvm::Error::success();
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? outer : inner) *= from[d];
    to = {outer, inner};
  } else {
    auto axes = axesOf(n);
    if (!axes)
      return where(n, llvm::toString(axes.takeError()));
    to = op == "Unsqueeze" ? unsqueezed(from, *axes) : squeezed(from, *axes);
  }
  reshape(nameOf(n), *x, from, to, n.output(0));
  return llvm::Error::success();
}

llvm::Error Importer::sliceOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto starts = ints(env.input(1), "starts");
  auto ends = env.present(2) ? ints(env.input(2), "ends") : stringError("Slice needs ends");
  if (!starts || !ends)
    return where(n, llvm::toString(starts ? ends.takeError() : starts.takeError()));
  std::vector<int64_t> axes, steps;
  if (env.present(3)) {
    auto a = ints(env.input(3), "axes");
    if (!a)
      return where(n, llvm::toString(a.takeError()));
    axes = *a;
  } else {
    for (size_t k = 0; k < starts->size(); ++k)
      axes.push_back(int64_t(k));
  }
  if (env.present(4)) {
    auto st = ints(env.input(4), "steps");
    if (!st)
      return where(n, llvm::toString(st.takeError()));
    steps = *st;
  }
  if (starts->size() != axes.size() || ends->size() != axes.size())
    return where(n, "starts, ends and axes differ in length");
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::string x = *in, out = n.output(0), name = nameOf(n);
  std::vector<int64_t> shape = shapeOf(x);
  const int64_t r = int64_t(shape.size());
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t axis = axes[k] < 0 ? axes[k] + r : axes[k];
    int64_t step = k < steps.size() ? steps[k] : 1;
    if (axis < 0 || axis >= r)
      return where(n, fmt::format("axis {} is out of range", axes[k]));
    if (step == 0)
      return where(n, "a step of 0");
    int64_t m = shape[axis];
    int64_t b, count;
    if (step > 0) {
      b = bound((*starts)[k], m);
      int64_t e = bound((*ends)[k], m);
      count = e > b ? (e - b + step - 1) / step : 0;
    } else { // backwards: from start down to (not including) end
      int64_t s0 = (*starts)[k] < 0 ? (*starts)[k] + m : (*starts)[k];
      int64_t e0 = (*ends)[k] < 0 ? (*ends)[k] + m : (*ends)[k];
      s0 = std::clamp<int64_t>(s0, -1, m - 1);
      e0 = std::clamp<int64_t>(e0, -1, m - 1);
      count = s0 > e0 ? (s0 - e0 + (-step) - 1) / (-step) : 0;
      b = s0;
    }
    if (count == 0)
      return where(n, "an empty slice is not translated");
    if (b == 0 && count == m && step == 1)
      continue;
    x = node(fmt::format("{}_axis{}", name, axis), "Slice", {x},
             {{"start", b}, {"n", count}, {"step", step}, {"m", m}},
             {{"pre", axis}, {"post", r - axis - 1}}, k + 1 == axes.size() ? out : "");
    shape[axis] = count;
  }
  if (x != out)
    node(name, "Identity", {x}, {}, {}, out);
  return llvm::Error::success();
}

llvm::Error Importer::concatOp(const onnx::NodeProto &n, NodeEnv &env) {
  std::vector<std::string> in;
  for (int k = 0; k < env.inputs(); ++k) {
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    if (!shapeOf(*t).empty() && std::count(shapeOf(*t).begin(), shapeOf(*t).end(), 0) == 0)
      in.push_back(*t); // empty inputs add nothing
  }
  if (in.empty())
    return where(n, "every input is empty");
  std::string name = nameOf(n), out = n.output(0);
  int64_t r = int64_t(shapeOf(in[0]).size());
  int64_t axis = intAttr(n, "axis").value_or(0);
  axis = axis < 0 ? axis + r : axis;
  if (axis < 0 || axis >= r)
    return where(n, fmt::format("axis {} is out of range for rank {}", axis, r));
  if (in.size() == 1) {
    node(name, "Identity", {in[0]}, {}, {}, out);
    return llvm::Error::success();
  }
  std::string x = in[0];
  int64_t have = shapeOf(in[0]).at(axis);
  for (size_t k = 1; k < in.size(); ++k) {
    int64_t more = shapeOf(in[k]).at(axis);
    x = node(fmt::format("{}_{}", name, k), "Concat", {x, in[k]}, {{"n", have}, {"m", have + more}},
             {{"pre", axis}, {"post", r - axis - 1}}, k + 1 == in.size() ? out : "");
    have += more;
  }
  return llvm::Error::success();
}

std::vector<int64_t> permutedOf(const std::vector<int64_t> &shape, const std::vector<int64_t> &perm) {
  std::vector<int64_t> r;
  for (int64_t p : perm)
    r.push_back(shape[p]);
  return r;
}

llvm::Error Importer::transposeOp(const onnx::NodeProto &n, NodeEnv &) {
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  const int64_t rank = int64_t(shapeOf(*in).size());
  auto perm = intsAttr(n, "perm", {});
  if (perm.empty())
    for (int64_t k = rank - 1; k >= 0; --k)
      perm.push_back(k);
  if (int64_t(perm.size()) != rank)
    return where(n, fmt::format("perm has {} entries for an input of rank {}", perm.size(), rank));
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < rank; ++k)
    if (sorted[k] != k)
      return where(n, "perm is not a permutation of the input's axes");
  transpose(nameOf(n), *in, perm, n.output(0));
  return llvm::Error::success();
}

std::string Importer::transpose(const std::string &name, const std::string &in,
                                const std::vector<int64_t> &perm, const std::string &out) {
  std::vector<int64_t> from = shapeOf(in);
  // Size-1 axes and runs of source axes that stay adjacent move together: the permutation
  // of the merged axes is usually of a rank the library has (2 to 4).
  std::vector<std::vector<int64_t>> runs; // source axes of each output run, in output order
  for (int64_t p : perm) {
    if (from[p] == 1)
      continue;
    if (!runs.empty() && runs.back().back() + 1 == p)
      runs.back().push_back(p);
    else
      runs.push_back({p});
  }
  std::vector<size_t> order(runs.size()); // runs sorted by their first source axis
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a][0] < runs[b][0]; });
  std::vector<int64_t> merged, newPerm(runs.size());
  for (size_t s = 0; s < order.size(); ++s) {
    int64_t extent = 1;
    for (int64_t a : runs[order[s]])
      extent *= from[a];
    merged.push_back(extent);
    newPerm[order[s]] = int64_t(s);
  }
  std::vector<int64_t> to;
  for (int64_t p : perm)
    to.push_back(from[p]);
  bool identity = true;
  for (size_t k = 0; k < newPerm.size(); ++k)
    identity &= newPerm[k] == int64_t(k);
  if (identity) {
    return reshape(name, in, from, to, out);
  }
  auto opFor = [](const std::vector<int64_t> &p) {
    std::string s = "Transpose_";
    for (int64_t a : p)
      s += std::to_string(a);
    return s;
  };
  std::string opName = opFor(newPerm);
  std::string x = in;
  if (merged != from)
    x = reshape(name + "_merge", x, from, merged, "");
  if (!lib_.find(opName)) {
    // Higher ranks: one axis at a time moves to its place, each move a block swap
    // [A, B, C, D] -> [A, C, B, D] of merged axes (Transpose_0213 or a smaller one).
    std::vector<int64_t> cur(newPerm.size()); // source axes, in their current order
    std::iota(cur.begin(), cur.end(), 0);
    for (size_t i = 0; i < cur.size(); ++i) {
      size_t j = std::find(cur.begin(), cur.end(), newPerm[i]) - cur.begin();
      if (j == i)
        continue;
      auto extent = [&](size_t b, size_t e) {
        int64_t v = 1;
        for (size_t q = b; q < e; ++q)
          v *= merged[cur[q]];
        return v;
      };
      std::vector<int64_t> curShape, blocks, blockPerm;
      for (int64_t a : cur)
        curShape.push_back(merged[a]);
      bool hasA = i > 0, hasD = j + 1 < cur.size();
      if (hasA)
        blocks.push_back(extent(0, i));
      blocks.push_back(extent(i, j));
      blocks.push_back(extent(j, j + 1));
      if (hasD)
        blocks.push_back(extent(j + 1, cur.size()));
      size_t b = hasA; // the position of block B
      for (size_t q = 0; q < blocks.size(); ++q)
        blockPerm.push_back(q == b ? int64_t(b + 1) : q == b + 1 ? int64_t(b) : int64_t(q));
      std::string tag = fmt::format("{}_move{}", name, i);
      x = reshape(tag + "_in", x, curShape, blocks, "");
      x = node(tag, opFor(blockPerm), {x});
      int64_t moved = cur[j];
      cur.erase(cur.begin() + j);
      cur.insert(cur.begin() + i, moved);
      std::vector<int64_t> nextShape;
      for (int64_t a : cur)
        nextShape.push_back(merged[a]);
      std::vector<int64_t> swapped = blocks;
      std::swap(swapped[b], swapped[b + 1]);
      x = reshape(tag + "_out", x, swapped, nextShape, "");
    }
    return reshape(name, x, permutedOf(merged, newPerm), to, out);
  }
  std::vector<int64_t> permuted;
  for (int64_t p : newPerm)
    permuted.push_back(merged[p]);
  if (permuted == to)
    return node(name, opName, {x}, {}, {}, out);
  x = node(name, opName, {x});
  return reshape(name + "_split", x, permuted, to, out);
}

llvm::Error Importer::expandOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto shape = ints(env.input(1), "shape");
  if (!shape)
    return where(n, llvm::toString(shape.takeError()));
  auto x = tensorInput(n, 0);
  if (!x)
    return x.takeError();
  auto target = broadcastShape(shapeOf(*x), *shape);
  if (!target)
    return where(n, fmt::format("shape [{}] does not broadcast with the input's [{}]",
                                fmt::join(*shape, ", "), fmt::join(shapeOf(*x), ", ")));
  broadcastTo(nameOf(n), *x, *target, n.output(0));
  return llvm::Error::success();
}

llvm::Error Importer::padOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string mode = stringAttr(n, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    return where(n,
                 fmt::format("mode '{}' is not translated (constant, edge and reflect are)", mode));
  std::vector<int64_t> pads;
  if (env.present(1)) {
    auto p = ints(env.input(1), "pads");
    if (!p)
      return where(n, llvm::toString(p.takeError()));
    pads = *p;
  } else {
    pads = intsAttr(n, "pads", {});
  }
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::vector<int64_t> shape = shapeOf(*in);
  const int64_t r = int64_t(shape.size());
  if (int64_t(pads.size()) != 2 * r)
    return where(n, fmt::format("{} pads for an input of rank {}", pads.size(), r));
  std::string name = nameOf(n), out = n.output(0);
  if (mode != "constant") {
    // Edge and reflect padding clamp or mirror the index, which is not affine: each padded
    // axis is a selection by a constant matrix.
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < r; ++d)
      if (pads[d] != 0 || pads[d + r] != 0)
        axes.push_back(d);
    std::string x = *in;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t d = axes[k], rows = shape[d] + pads[d] + pads[d + r];
      if (rows <= 0)
        return where(n, "the padding crops the axis away");
      if (rows > kMaxAxisMap / shape[d])
        return where(n, fmt::format("{} padding of axis {} to {}: its selection matrix would "
                                    "hold more than 2^24 entries",
                                    mode, d, rows));
      if (mode == "reflect" && shape[d] == 1 && (pads[d] > 0 || pads[d + r] > 0))
        return where(n, fmt::format("reflect padding of axis {}, of extent 1", d));
      x = axisMap(fmt::format("{}_axis{}", name, d), x, d, rows,
                  padMatrix(shape[d], pads[d], pads[d + r], mode), k + 1 == axes.size() ? out : "");
    }
    if (axes.empty())
      node(name, "Identity", {x}, {}, {}, out);
    return llvm::Error::success();
  }
  // The padding value: a constant (or the attribute of opsets before 11), or a tensor.
  std::string value;
  if (env.present(2) && !consts_.count(env.input(2))) {
    auto v = tensorInput(n, 2);
    if (!v)
      return v.takeError();
    value = *v;
  } else {
    double v = floatAttr(n, "value").value_or(0);
    if (env.present(2))
      v = consts_[env.input(2)].v.empty() ? 0 : consts_[env.input(2)].v[0];
    value = constant(fmt::format("{}_value", name), {}, {v}, false);
  }
  std::string x = *in;
  std::vector<int> axes;
  for (int64_t d = 0; d < r; ++d)
    if (pads[d] != 0 || pads[d + r] != 0)
      axes.push_back(int(d));
  if (axes.empty()) {
    node(name, "Identity", {x}, {}, {}, out);
    return llvm::Error::success();
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t d = axes[k], b = pads[d], e = pads[d + r], m = shape[d];
    std::string target = k + 1 == axes.size() ? out : "";
    std::map<std::string, int64_t> groups = {{"pre", d}, {"post", r - d - 1}};
    if (b < 0 || e < 0) { // negative pads crop
      int64_t start = std::max<int64_t>(-b, 0), count = m - start - std::max<int64_t>(-e, 0);
      if (count <= 0)
        return where(n, "the padding crops the axis away");
      bool grows = b > 0 || e > 0;
      x = node(fmt::format("{}_crop{}", name, d), "Slice", {x},
               {{"start", start}, {"n", count}, {"step", 1}, {"m", m}}, groups, grows ? "" : target);
      m = count;
      b = std::max<int64_t>(b, 0);
      e = std::max<int64_t>(e, 0);
      if (!grows) {
        shape[d] = m;
        continue;
      }
    }
    x = node(fmt::format("{}_axis{}", name, d), "Pad", {x, value},
             {{"p", b}, {"n", m + b + e}, {"m", m}}, groups, target);
    shape[d] = m + b + e;
  }
  return llvm::Error::success();
}

std::string Importer::axisMap(const std::string &name, const std::string &x, int64_t axis,
                              int64_t rows, std::vector<double> m, const std::string &out) {
  const int64_t r = int64_t(shapeOf(x).size()), extent = shapeOf(x)[size_t(axis)];
  std::string matrix = constant(name + "_map", {rows, extent}, std::move(m), false);
  return node(name, "AxisMap", {x, matrix}, {}, {{"pre", axis}, {"post", r - axis - 1}}, out);
}

llvm::Error Importer::resizeOp(const onnx::NodeProto &n, NodeEnv &env) {
  ResizeSpec spec;
  spec.mode = stringAttr(n, "mode", "nearest");
  if (opset_ >= 11) {
    spec.transform = stringAttr(n, "coordinate_transformation_mode", "half_pixel");
    spec.nearestMode = stringAttr(n, "nearest_mode", "round_prefer_floor");
    spec.cubicA = floatAttr(n, "cubic_coeff_a").value_or(-0.75f);
    spec.excludeOutside = intAttr(n, "exclude_outside").value_or(0) != 0;
  } else { // Resize-10 is Upsample's interpolation: asymmetric, nearest rounding down
    spec.transform = "asymmetric";
    spec.nearestMode = "floor";
  }
  if (spec.mode != "nearest" && spec.mode != "linear" && spec.mode != "cubic")
    return where(n, fmt::format("mode '{}' is not one of nearest, linear and cubic", spec.mode));
  static const std::set<std::string> transforms = {
      "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"};
  if (!transforms.count(spec.transform))
    return where(
        n, fmt::format("coordinate_transformation_mode '{}' is not translated", spec.transform));
  static const std::set<std::string> roundings = {"round_prefer_floor", "round_prefer_ceil",
                                                  "floor", "ceil"};
  if (spec.mode == "nearest" && !roundings.count(spec.nearestMode))
    return where(n, fmt::format("nearest_mode '{}' is not one of round_prefer_floor, "
                                "round_prefer_ceil, floor and ceil",
                                spec.nearestMode));
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  const std::vector<int64_t> from = shapeOf(*in);
  const int64_t r = int64_t(from.size());
  // The scales (opset 10: input 1; later: input 2, else the sizes of input 3).
  const int scalesAt = opset_ >= 11 ? 2 : 1;
  std::vector<double> scales;
  std::vector<int64_t> to;
  if (env.present(scalesAt)) {
    const Const *c = known(env.input(scalesAt));
    if (!c)
      return where(n, fmt::format("its scales ('{}') must be a constant the importer can "
                                  "evaluate",
                                  env.input(scalesAt)));
    scales = c->v;
  }
  if (scales.empty() && opset_ >= 11 && env.present(3)) {
    auto sizes = ints(env.input(3), "sizes");
    if (!sizes)
      return where(n, llvm::toString(sizes.takeError()));
    to = *sizes;
    if (int64_t(to.size()) != r)
      return where(n, fmt::format("{} sizes for an input of rank {}", to.size(), r));
    for (int64_t d = 0; d < r; ++d)
      scales.push_back(double(to[size_t(d)]) / double(from[size_t(d)]));
  } else {
    if (int64_t(scales.size()) != r)
      return where(n, fmt::format("{} scales for an input of rank {} (or no scales and no "
                                  "sizes)",
                                  scales.size(), r));
    for (int64_t d = 0; d < r; ++d) {
      if (!(scales[size_t(d)] > 0) || !std::isfinite(scales[size_t(d)]))
        return where(
            n, fmt::format("scale {} of axis {} is not a positive number", scales[size_t(d)], d));
      to.push_back(int64_t(std::floor(double(from[size_t(d)]) * float(scales[size_t(d)]))));
    }
  }
  for (int64_t d = 0; d < r; ++d)
    if (to[size_t(d)] <= 0 || to[size_t(d)] > kMaxAxisMap / std::max<int64_t>(from[size_t(d)], 1))
      return where(n, fmt::format("axis {} resized from {} to {}: {}", d, from[size_t(d)],
                                  to[size_t(d)],
                                  to[size_t(d)] <= 0 ? "an empty axis"
                                                     : "its interpolation matrix would hold more "
                                                       "than 2^24 entries"));
  if (auto known = shapes_.find(n.output(0)); known != shapes_.end() && known->second != to)
    return where(n, fmt::format("resizes to [{}] but ONNX infers [{}]", fmt::join(to, ", "),
                                fmt::join(known->second, ", ")));
  // Each axis whose matrix is not the identity is mapped by it.
  std::vector<int64_t> axes;
  std::vector<std::vector<double>> maps;
  for (int64_t d = 0; d < r; ++d) {
    std::vector<double> m =
        resizeMatrix(from[size_t(d)], to[size_t(d)], double(float(scales[size_t(d)])), spec);
    bool identity = to[size_t(d)] == from[size_t(d)];
    for (int64_t i = 0; identity && i < to[size_t(d)]; ++i)
      for (int64_t j = 0; identity && j < from[size_t(d)]; ++j)
        identity = m[size_t(i * from[size_t(d)] + j)] == (i == j ? 1.0 : 0.0);
    if (!identity) {
      axes.push_back(d);
      maps.push_back(std::move(m));
    }
  }
  std::string name = nameOf(n), out = n.output(0), x = *in;
  if (axes.empty()) {
    node(name, "Identity", {x}, {}, {}, out);
    return llvm::Error::success();
  }
  // Integer upscaling of the two spatial axes of a rank-4 input, each output reading entry
  // floor(o / f): the library's ResizeNearest2d (no matrix).
  auto repeats = [&](size_t k, int64_t d) {
    const int64_t f = to[size_t(d)] / from[size_t(d)];
    if (f * from[size_t(d)] != to[size_t(d)])
      return int64_t(0);
    for (int64_t o = 0; o < to[size_t(d)]; ++o)
      if (maps[k][size_t(o * from[size_t(d)] + o / f)] != 1)
        return int64_t(0);
    return f;
  };
  if (r == 4 && axes == std::vector<int64_t>{2, 3} && repeats(0, 2) && repeats(1, 3)) {
    node(name, "ResizeNearest2d", {x}, {{"fh", repeats(0, 2)}, {"fw", repeats(1, 3)}}, {}, out);
    return llvm::Error::success();
  }
  for (size_t k = 0; k < axes.size(); ++k)
    x = axisMap(fmt::format("{}_axis{}", name, axes[k]), x, axes[k], to[size_t(axes[k])],
                std::move(maps[k]), k + 1 == axes.size() ? out : "");
  return llvm::Error::success();
}

llvm::Error Importer::tileOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto reps = ints(env.input(1), "repeats");
  if (!reps)
    return where(n, llvm::toString(reps.takeError()));
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::vector<int64_t> shape = shapeOf(*in);
  const int64_t r = int64_t(shape.size());
  if (int64_t(reps->size()) != r)
    return where(n, fmt::format("{} repeats for an input of rank {}", reps->size(), r));
  std::string x = *in, name = nameOf(n), out = n.output(0);
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < r; ++d) {
    if ((*reps)[d] < 1)
      return where(n, fmt::format("repeat {} of axis {}", (*reps)[d], d));
    if ((*reps)[d] > 1)
      axes.push_back(d);
  }
  if (axes.empty()) {
    node(name, "Identity", {x}, {}, {}, out);
    return llvm::Error::success();
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t d = axes[k];
    x = node(fmt::format("{}_axis{}", name, d), "Tile", {x},
             {{"m", shape[d]}, {"n", shape[d] * (*reps)[d]}}, {{"pre", d}, {"post", r - d - 1}},
             k + 1 == axes.size() ? out : "");
  }
  return llvm::Error::success();
}

/// Balanced concatenation of `parts` along `axis` (all of one rank): log-depth, so a
/// long sequence is not copied once per element.
std::string Importer::concatAll(const std::string &name, std::vector<std::string> parts,
                                int64_t axis, const std::string &out) {
  if (parts.size() == 1)
    return out.empty() ? parts[0] : node(name, "Identity", {parts[0]}, {}, {}, out);
  for (unsigned round = 0; parts.size() > 1; ++round) {
    std::vector<std::string> next;
    for (size_t k = 0; k + 1 < parts.size(); k += 2) {
      const std::vector<int64_t> &a = shapeOf(parts[k]), &b = shapeOf(parts[k + 1]);
      int64_t r = int64_t(a.size());
      next.push_back(node(fmt::format("{}_cat{}_{}", name, round, k / 2), "Concat",
                          {parts[k], parts[k + 1]}, {{"n", a[axis]}, {"m", a[axis] + b[axis]}},
                          {{"pre", axis}, {"post", r - axis - 1}},
                          parts.size() == 2 ? out : ""));
    }
    if (parts.size() % 2)
      next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts[0];
}

std::string Importer::sliceAxis(const std::string &name, const std::string &x, int64_t axis,
                                int64_t start, int64_t count) {
  const std::vector<int64_t> &shape = shapeOf(x);
  int64_t r = int64_t(shape.size());
  return node(name, "Slice", {x}, {{"start", start}, {"n", count}, {"step", 1}, {"m", shape[axis]}},
              {{"pre", axis}, {"post", r - axis - 1}});
}

std::string Importer::reshaped(const std::string &name, const std::string &x,
                               const std::vector<int64_t> &to) {
  if (shapeOf(x) == to)
    return x;
  return reshape(name, x, shapeOf(x), to, "");
}

// LSTM, GRU and RNN, unrolled over the static sequence: one cell per timestep and
// direction, built of library ops with grad clauses (lstm_gates is the affine map
// x W^T + h R^T + b of any gate count). The cells of one direction share coalesce keys,
// so the search gives every timestep one strategy, as the paper does for its RNN.
llvm::Error Importer::recurrentOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string &op = n.op_type();
  const int gatesPer = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  auto X = tensorInput(n, 0), W = tensorInput(n, 1), R = tensorInput(n, 2);
  if (!X)
    return X.takeError();
  if (!W)
    return W.takeError();
  if (!R)
    return R.takeError();
  const int64_t layout = intAttr(n, "layout").value_or(0);
  if (layout != 0 && layout != 1)
    return where(n, fmt::format("layout {} is not 0 or 1", layout));
  std::string direction = "forward";
  std::vector<std::string> activations;
  for (const onnx::AttributeProto &a : n.attribute()) {
    if (a.name() == "direction")
      direction = a.s();
    else if (a.name() == "activations")
      activations.assign(a.strings().begin(), a.strings().end());
    else if (a.name() == "clip")
      return where(n, "cell clipping (clip) is not translated");
    else if (a.name() == "activation_alpha" || a.name() == "activation_beta")
      return where(n, "activations with parameters (activation_alpha/beta) are not translated");
  }
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return where(n, fmt::format("direction '{}' is not forward, reverse or bidirectional", direction));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (intAttr(n, "input_forget").value_or(0) != 0)
    return where(n, "coupled input and forget gates (input_forget) are not translated");
  if (op == "LSTM" && env.present(7))
    return where(n, "peephole connections (input P) are not translated");
  // The activations, per direction: the defaults, or RNN's Tanh/Relu/Sigmoid.
  std::vector<std::string> defaults = op == "LSTM"  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                      : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                    : std::vector<std::string>{"Tanh"};
  std::vector<std::string> act(dirs, "Tanh");
  if (!activations.empty()) {
    if (activations.size() != defaults.size() * size_t(dirs))
      return where(n, fmt::format("{} activations for {} direction(s); {} expects {} per direction",
                                  activations.size(), dirs, op, defaults.size()));
    for (int64_t d = 0; d < dirs; ++d)
      for (size_t k = 0; k < defaults.size(); ++k) {
        const std::string &a = activations[d * defaults.size() + k];
        bool ok = op == "RNN" ? (a == "Tanh" || a == "Relu" || a == "Sigmoid") : a == defaults[k];
        if (!ok)
          return where(n, fmt::format("activation '{}' is not translated (the {} cell uses {})", a,
                                      op, op == "RNN" ? "Tanh, Relu or Sigmoid" : defaults[k]));
        if (op == "RNN")
          act[d] = a;
      }
  }
  const std::vector<int64_t> xs = shapeOf(*X), ws = shapeOf(*W), rs = shapeOf(*R);
  if (xs.size() != 3 || ws.size() != 3 || rs.size() != 3)
    return where(n, "X, W and R must be of rank 3");
  const int64_t T = xs[layout == 0 ? 0 : 1], B = xs[layout == 0 ? 1 : 0], I = xs[2];
  const int64_t H = rs[2];
  if (auto h = intAttr(n, "hidden_size"); h && *h != H)
    return where(n, fmt::format("hidden_size is {} but R's last axis is {}", *h, H));
  if (ws != std::vector<int64_t>{dirs, gatesPer * H, I} || rs != std::vector<int64_t>{dirs, gatesPer * H, H})
    return where(n, fmt::format("W and R must be [{}, {}, {}] and [{}, {}, {}]", dirs, gatesPer * H, I,
                                dirs, gatesPer * H, H));
  if (env.present(4)) { // sequence_lens: every sequence of the full length, or refused
    auto lens = ints(env.input(4), "sequence_lens");
    if (!lens)
      return where(n, "variable sequence lengths are not translated: " + llvm::toString(lens.takeError()));
    for (int64_t l : *lens)
      if (l != T)
        return where(n, fmt::format("a sequence of length {} in a batch of length {}: variable "
                                    "sequence lengths are not translated", l, T));
  }
  std::optional<std::string> B8, H0, C0;
  for (auto [k, slot] : {std::pair<int, std::optional<std::string> *>{3, &B8}, {5, &H0}, {6, &C0}}) {
    if (k == 6 && op != "LSTM")
      continue;
    if (!env.present(k))
      continue;
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    *slot = *t;
  }
  const std::vector<int64_t> stateShape = layout == 0 ? std::vector<int64_t>{dirs, B, H}
                                                      : std::vector<int64_t>{B, dirs, H};
  if (B8 && shapeOf(*B8) != std::vector<int64_t>{dirs, 2 * gatesPer * H})
    return where(n, fmt::format("B must be [{}, {}]", dirs, 2 * gatesPer * H));
  for (const auto *s : {&H0, &C0})
    if (*s && shapeOf(**s) != stateShape)
      return where(n, fmt::format("initial states must be [{}, {}, {}]", stateShape[0], stateShape[1],
                                  stateShape[2]));
  const std::string name = nameOf(n);
  const int64_t G = gatesPer * H;
  // The input at every timestep, [B, I]; both directions read them.
  std::vector<std::string> xt(T);
  const int64_t seqAxis = layout == 0 ? 0 : 1;
  for (int64_t t = 0; t < T; ++t) {
    group_ = fmt::format("{}_t{}", name, t + 1);
    coalesce_ = name + "/x";
    xt[t] = sliceAxis(fmt::format("{}_x_t{}", name, t + 1), *X, seqAxis, t, 1);
    coalesce_.clear(); // a reshape may be several ops: not keyed
    xt[t] = reshaped(fmt::format("{}_x_t{}_flat", name, t + 1), xt[t], {B, I});
  }
  coalesce_.clear();
  group_ = name;
  // The state of direction d from an initial state tensor, [B, H].
  auto initial = [&](const std::optional<std::string> &s, int64_t d, const std::string &what) {
    std::string tag = fmt::format("{}_d{}_{}0", name, d, what);
    if (!s)
      return constant(tag, {B, H}, std::vector<double>(size_t(B * H), 0.0), false);
    return reshaped(tag + "_flat", sliceAxis(tag, *s, layout == 0 ? 0 : 1, d, 1), {B, H});
  };
  std::vector<std::vector<std::string>> hs(dirs, std::vector<std::string>(T)); // h per t
  std::vector<std::string> hLast(dirs), cLast(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string dn = fmt::format("{}_d{}", name, d);
    // Direction d's weights: W [G, I], R [G, H], biases Wb, Rb [G] (zeros when B is absent).
    std::string Wd = reshaped(dn + "_W_flat", sliceAxis(dn + "_W", *W, 0, d, 1), {G, I});
    std::string Rd = reshaped(dn + "_R_flat", sliceAxis(dn + "_R", *R, 0, d, 1), {G, H});
    std::string Wb, Rb;
    if (B8) {
      std::string Bd = reshaped(dn + "_B_flat", sliceAxis(dn + "_B", *B8, 0, d, 1), {2 * G});
      Wb = sliceAxis(dn + "_Wb", Bd, 0, 0, G);
      Rb = sliceAxis(dn + "_Rb", Bd, 0, G, G);
    }
    auto zeros = [&](const std::string &tag, int64_t size) {
      return constant(dn + "_" + tag, {size}, std::vector<double>(size_t(size), 0.0), false);
    };
    auto biasSum = [&](const std::string &tag, int64_t start, int64_t count) {
      if (!B8)
        return zeros(tag, count);
      std::string a = count == G ? Wb : sliceAxis(dn + "_Wb_" + tag, Wb, 0, start, count);
      std::string b = count == G ? Rb : sliceAxis(dn + "_Rb_" + tag, Rb, 0, start, count);
      return node(dn + "_" + tag, "Add", {a, b});
    };
    // ONNX orders LSTM gates [i, o, f, c]; lstm_cell_c/h read [i, f, o, g]: the middle
    // two blocks swap (on W, R and the bias, once per direction, not per step).
    auto lstmOrder = [&](const std::string &tag, const std::string &x) {
      std::vector<std::string> blocks;
      for (int64_t q : {0, 2, 1, 3})
        blocks.push_back(sliceAxis(fmt::format("{}_{}_gate{}", dn, tag, q), x, 0, q * H, H));
      return concatAll(dn + "_" + tag + "_ifog", blocks, 0, "");
    };
    std::string h = initial(H0, d, "h"), c;
    std::string Wg, Rg, bg, Wh, Rh, bh, Wbh, Rbh, one;
    const bool lbr = op == "GRU" && intAttr(n, "linear_before_reset").value_or(0) != 0;
    if (op == "LSTM") {
      c = initial(C0, d, "c");
      Wg = lstmOrder("W", Wd);
      Rg = lstmOrder("R", Rd);
      bg = lstmOrder("b", biasSum("b", 0, G));
    } else if (op == "GRU") { // gates [z, r, h]: z and r together, the candidate apart
      Wg = sliceAxis(dn + "_Wzr", Wd, 0, 0, 2 * H);
      Rg = sliceAxis(dn + "_Rzr", Rd, 0, 0, 2 * H);
      bg = biasSum("bzr", 0, 2 * H);
      Wh = sliceAxis(dn + "_Wh", Wd, 0, 2 * H, H);
      Rh = sliceAxis(dn + "_Rh", Rd, 0, 2 * H, H);
      if (lbr) { // h~ = tanh(x Wh^T + Wbh + r * (h Rh^T + Rbh)): two products with biases
        auto bias = [&](const std::string &tag, const std::string &b) {
          std::string v = B8 ? sliceAxis(dn + "_" + tag, b, 0, 2 * H, H) : zeros(tag, H);
          return broadcastTo(dn + "_" + tag + "_rows", v, {B, H});
        };
        Wbh = bias("Wbh", Wb);
        Rbh = bias("Rbh", Rb);
        one = constant(dn + "_one", {}, {1.0}, false);
      } else {
        bh = biasSum("bh", 2 * H, H);
      }
    } else {
      Wg = Wd;
      Rg = Rd;
      bg = biasSum("b", 0, G);
    }
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = d == 0 && direction != "reverse" ? s : T - 1 - s;
      group_ = fmt::format("{}_t{}", dn, t + 1);
      const std::string cell = fmt::format("{}_t{}", dn, t + 1);
      auto keyed = [&](const std::string &role, const std::string &nodeName, const std::string &o,
                       std::vector<std::string> in, std::map<std::string, int64_t> attrs = {},
                       std::map<std::string, int64_t> groups = {}) {
        coalesce_ = dn + "/" + role;
        std::string r = node(nodeName, o, std::move(in), std::move(attrs), std::move(groups));
        coalesce_.clear();
        return r;
      };
      const std::string &x = xt[t];
      if (op == "LSTM") {
        std::string gates = keyed("gates", cell + "_gates", "lstm_gates", {x, h, Wg, Rg, bg});
        c = keyed("c", cell + "_c", "lstm_cell_c", {gates, c});
        h = keyed("h", cell + "_h", "lstm_cell_h", {gates, c});
      } else if (op == "GRU") {
        std::string zr = keyed("zr", cell + "_zr", "Sigmoid",
                               {keyed("zr_pre", cell + "_zr_pre", "lstm_gates", {x, h, Wg, Rg, bg})});
        std::string z = keyed("z", cell + "_z", "Slice", {zr},
                              {{"start", 0}, {"n", H}, {"step", 1}, {"m", 2 * H}}, {{"pre", 1}, {"post", 0}});
        std::string r = keyed("r", cell + "_r", "Slice", {zr},
                              {{"start", H}, {"n", H}, {"step", 1}, {"m", 2 * H}}, {{"pre", 1}, {"post", 0}});
        std::string pre;
        if (lbr) {
          std::string xh = keyed("xh", cell + "_xh", "GemmNT", {x, Wh, Wbh, one, one});
          std::string hh = keyed("hh", cell + "_hh", "GemmNT", {h, Rh, Rbh, one, one});
          pre = keyed("cand_pre", cell + "_cand_pre", "Add",
                      {xh, keyed("rhh", cell + "_rhh", "Mul", {r, hh})});
        } else {
          std::string rh = keyed("rh", cell + "_rh", "Mul", {r, h});
          pre = keyed("cand_pre", cell + "_cand_pre", "lstm_gates", {x, rh, Wh, Rh, bh});
        }
        std::string cand = keyed("cand", cell + "_cand", "Tanh", {pre});
        // h' = (1 - z) h~ + z h = h~ + z (h - h~)
        std::string diff = keyed("diff", cell + "_diff", "Sub", {h, cand});
        h = keyed("h", cell + "_h", "Add", {cand, keyed("zdiff", cell + "_zdiff", "Mul", {z, diff})});
      } else {
        h = keyed("h", cell + "_h", act[d],
                  {keyed("pre", cell + "_pre", "lstm_gates", {x, h, Wg, Rg, bg})});
      }
      hs[d][t] = h;
    }
    group_ = name;
    hLast[d] = h;
    cLast[d] = c;
  }
  // Y: [T, dirs, B, H] (layout 0) or [B, T, dirs, H]; Y_h and Y_c: the state shape.
  auto used = [&](int k) {
    return k < n.output_size() && !n.output(k).empty() && consumed_.count(n.output(k));
  };
  if (used(0)) {
    std::vector<std::string> steps;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::string> perDir;
      for (int64_t d = 0; d < dirs; ++d)
        perDir.push_back(reshaped(fmt::format("{}_y_t{}_d{}", name, t + 1, d), hs[d][t],
                                  layout == 0 ? std::vector<int64_t>{1, 1, B, H}
                                              : std::vector<int64_t>{B, 1, 1, H}));
      steps.push_back(dirs == 1 ? perDir[0]
                                : concatAll(fmt::format("{}_y_t{}", name, t + 1), perDir,
                                            layout == 0 ? 1 : 2, ""));
    }
    concatAll(name + "_y", steps, layout == 0 ? 0 : 1, n.output(0));
  }
  for (int k : {1, 2}) {
    if (!used(k))
      continue;
    if (k == 2 && op != "LSTM")
      return where(n, "has no output 2");
    std::vector<std::string> parts;
    for (int64_t d = 0; d < dirs; ++d)
      parts.push_back(reshaped(fmt::format("{}_last{}_d{}", name, k, d), k == 1 ? hLast[d] : cLast[d],
                               layout == 0 ? std::vector<int64_t>{1, B, H}
                                           : std::vector<int64_t>{B, 1, H}));
    concatAll(fmt::format("{}_last{}", name, k), parts, layout == 0 ? 0 : 1, n.output(k));
  }
  return llvm::Error::success();
}

// Einsum of one or two operands: letters only one operand has and the output lacks are
// summed first; then (two operands) the operands are permuted to [batch, kept, summed]
// and [batch, summed, kept], merged to three axes, multiplied by MatMul, split and
// permuted to the output's order. Repeated letters (diagonals) and three or more
// operands are refused.
llvm::Error Importer::einsumOp(const onnx::NodeProto &n, NodeEnv &env) {
  std::string eq = stringAttr(n, "equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const int count = env.inputs();
  if (count < 1 || count > 2)
    return where(n, fmt::format("{} operands: only einsums of one or two are translated", count));
  std::vector<std::string> in;
  for (int k = 0; k < count; ++k) {
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    in.push_back(*t);
  }
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    size_t e = lhs.find(',', b);
    terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos)
      break;
    b = e + 1;
  }
  if (int(terms.size()) != count)
    return where(n, fmt::format("equation '{}' has {} operand terms for {} inputs", eq, terms.size(), count));
  // '...' becomes one placeholder letter per broadcast axis ('0', '1', ...).
  int ellipsisRank = -1;
  auto placeholders = [&] {
    std::string fill;
    for (int k = 0; k < std::max(ellipsisRank, 0); ++k)
      fill += char('0' + k);
    return fill;
  };
  auto withPlaceholders = [&](const std::string &term) {
    size_t dots = term.find("...");
    return dots == std::string::npos ? term
                                     : term.substr(0, dots) + placeholders() + term.substr(dots + 3);
  };
  auto expand = [&](const std::string &term, int64_t rank, std::string *err) {
    if (term.find("...") == std::string::npos)
      return term;
    int64_t e = rank - (int64_t(term.size()) - 3);
    if (e < 0) {
      *err = "has more letters than its operand has axes";
      return term;
    }
    if (ellipsisRank >= 0 && ellipsisRank != e) {
      *err = "'...' stands for different numbers of axes in the operands (broadcasting is not translated)";
      return term;
    }
    ellipsisRank = int(e);
    return withPlaceholders(term);
  };
  std::map<char, int64_t> extent;
  for (int k = 0; k < count; ++k) {
    std::string err;
    terms[k] = expand(terms[k], int64_t(shapeOf(in[k]).size()), &err);
    if (!err.empty())
      return where(n, fmt::format("equation '{}': operand {} {}", eq, k, err));
    const std::vector<int64_t> &shape = shapeOf(in[k]);
    if (terms[k].size() != shape.size())
      return where(n, fmt::format("equation '{}': operand {} has {} letters for rank {}", eq, k,
                                  terms[k].size(), shape.size()));
    for (size_t d = 0; d < shape.size(); ++d) {
      char c = terms[k][d];
      if (!std::isalpha(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)))
        return where(n, fmt::format("equation '{}': '{}' is not a letter", eq, c));
      if (std::count(terms[k].begin(), terms[k].end(), c) > 1)
        return where(n, fmt::format("equation '{}': letter '{}' repeats in operand {} (diagonals are "
                                    "not translated)", eq, c, k));
      auto [it, fresh] = extent.emplace(c, shape[d]);
      if (!fresh && it->second != shape[d])
        return where(n, fmt::format("equation '{}': letter '{}' is {} in one operand and {} in another "
                                    "(broadcasting is not translated)", eq, c, it->second, shape[d]));
    }
  }
  std::string outTerm;
  if (arrow == std::string::npos) { // implicit: broadcast axes, then letters seen once, sorted
    outTerm = placeholders();
    std::string once;
    for (auto [c, e] : extent) {
      int seen = 0;
      for (const std::string &t : terms)
        seen += int(std::count(t.begin(), t.end(), c));
      if (seen == 1 && std::isalpha(static_cast<unsigned char>(c)))
        once += c;
    }
    outTerm += once;
  } else {
    outTerm = withPlaceholders(eq.substr(arrow + 2));
    for (char c : outTerm) {
      if (!extent.count(c))
        return where(n, fmt::format("equation '{}': output letter '{}' is in no operand", eq, c));
      if (std::count(outTerm.begin(), outTerm.end(), c) > 1)
        return where(n, fmt::format("equation '{}': output letter '{}' repeats", eq, c));
    }
  }
  const std::string name = nameOf(n), out = n.output(0);
  auto has = [](const std::string &s, char c) { return s.find(c) != std::string::npos; };
  // Sum away what only one operand has and the output lacks.
  for (int k = 0; k < count; ++k) {
    for (size_t d = terms[k].size(); d-- > 0;) {
      char c = terms[k][d];
      if (has(outTerm, c) || (count == 2 && has(terms[1 - k], c)))
        continue;
      int64_t r = int64_t(terms[k].size());
      in[k] = node(fmt::format("{}_sum{}_{}", name, k, c), "ReduceSum", {in[k]}, {},
                   {{"pre", int64_t(d)}, {"r", 1}, {"post", r - int64_t(d) - 1}});
      terms[k].erase(d, 1);
    }
  }
  auto permuteTo = [&](const std::string &tag, const std::string &x, const std::string &from,
                       const std::string &to, const std::string &o) {
    std::vector<int64_t> perm;
    for (char c : to)
      perm.push_back(int64_t(from.find(c)));
    bool identity = true;
    for (size_t d = 0; d < perm.size(); ++d)
      identity &= perm[d] == int64_t(d);
    if (identity)
      return o.empty() ? x : node(tag, "Identity", {x}, {}, {}, o);
    return transpose(tag, x, perm, o);
  };
  auto dims = [&](const std::string &letters) {
    std::vector<int64_t> v;
    for (char c : letters)
      v.push_back(extent[c]);
    return v;
  };
  auto product = [&](const std::string &letters) {
    int64_t p = 1;
    for (char c : letters)
      p *= extent[c];
    return p;
  };
  if (count == 1) {
    permuteTo(name, in[0], terms[0], outTerm, out);
    return llvm::Error::success();
  }
  std::string batch, left, right, summed;
  for (char c : terms[0]) {
    if (has(terms[1], c))
      (has(outTerm, c) ? batch : summed) += c;
    else
      left += c;
  }
  for (char c : terms[1])
    if (!has(terms[0], c))
      right += c;
  std::string a = permuteTo(name + "_a", in[0], terms[0], batch + left + summed, "");
  std::string b = permuteTo(name + "_b", in[1], terms[1], batch + summed + right, "");
  std::vector<int64_t> a3 = {product(left), product(summed)}, b3 = {product(summed), product(right)};
  if (!batch.empty()) {
    a3.insert(a3.begin(), product(batch));
    b3.insert(b3.begin(), product(batch));
  }
  a = reshaped(name + "_a3", a, a3);
  b = reshaped(name + "_b3", b, b3);
  std::string y = node(name + "_matmul", "MatMul", {a, b}, {}, {{"b", batch.empty() ? 0 : 1}});
  std::string produced = batch + left + right;
  std::vector<int64_t> full = dims(produced);
  if (produced == outTerm) {
    reshape(name + "_split", y, shapeOf(y), full, out);
    return llvm::Error::success();
  }
  y = reshaped(name + "_split", y, full);
  permuteTo(name, y, produced, outTerm, out);
  return llvm::Error::success();
}

llvm::Expected<Graph> Importer::run(onnx::ModelProto &model) {
  onnx::GraphProto *graph = model.mutable_graph();
  // The model against ONNX's schemas first: opsets and domains known, every node's input
  // and output counts and attribute types its operator's, names defined before use (no
  // cycles). The checker's messages name the node.
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    std::string what = e.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' '))
      what.pop_back();
    return stringError("not a valid ONNX model: " + what);
  }
  if (graph->output_size() == 0)
    return stringError("not a valid ONNX model: its graph has no outputs");
  // What ONNX's shape inference divides by, and what the translation needs, checked before
  // it runs (a zero stride is a division by zero there).
  if (llvm::Error e = checkAttributes(*graph))
    return std::move(e);
  if (llvm::Error e = checkInitializerSizes(*graph))
    return std::move(e);
  // Opsets newer than this ONNX release knows would be read with older operators' meanings.
  const auto &known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const onnx::OperatorSetIdProto &o : model.opset_import()) {
    const std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
    auto it = known.find(domain);
    if (it == known.end())
      return stringError(fmt::format("the model imports the unknown operator domain '{}'", o.domain()));
    if (o.version() < it->second.first || o.version() > it->second.second)
      return stringError(fmt::format(
          "the model imports opset {} of the {} domain; this importer knows opsets {} to {}",
          o.version(), domain.empty() ? "ONNX" : "'" + domain + "'", it->second.first,
          it->second.second));
  }
  for (const onnx::OperatorSetIdProto &o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset_ = int(o.version());
  // Symbolic dimensions (a dynamic batch) become the batch size.
  std::set<std::string> initialized;
  for (const onnx::TensorProto &t : graph->initializer())
    initialized.insert(t.name());
  // Inputs given ahead: the shape given replaces the declared one, whose static
  // dimensions must agree.
  for (const auto &[name, given] : options_.givenInputs) {
    onnx::ValueInfoProto *v = nullptr;
    for (onnx::ValueInfoProto &in : *graph->mutable_input())
      if (in.name() == name)
        v = &in;
    if (!v || initialized.count(name) || !v->type().has_tensor_type())
      return stringError(fmt::format("a value is given for '{}', which is not one of the model's "
                                     "data inputs (graph inputs without an initializer)",
                                     name));
    onnx::TypeProto_Tensor *type = v->mutable_type()->mutable_tensor_type();
    if (type->has_shape()) {
      std::vector<std::string> declared;
      bool agrees = type->shape().dim_size() == int(given.shape.size());
      for (int d = 0; d < type->shape().dim_size(); ++d) {
        const auto &dim = type->shape().dim(d);
        declared.push_back(dim.has_dim_value()       ? std::to_string(dim.dim_value())
                           : dim.dim_param().empty() ? "?"
                                                     : dim.dim_param());
        if (agrees && dim.has_dim_value() && dim.dim_value() != given.shape[size_t(d)])
          agrees = false;
      }
      if (!agrees)
        return stringError(fmt::format("the value given for input '{}' has shape [{}]; the model "
                                       "declares [{}]",
                                       name, fmt::join(given.shape, ", "),
                                       fmt::join(declared, ", ")));
    }
    type->mutable_shape()->clear_dim();
    for (int64_t d : given.shape)
      type->mutable_shape()->add_dim()->set_dim_value(d);
    if (given.hasValues) {
      Const c;
      c.shape = given.shape;
      c.v = given.values;
      c.isInt = type->has_elem_type() && isIntType(type->elem_type());
      if (int64_t(c.v.size()) != c.size())
        return stringError(
            fmt::format("the value given for input '{}' has {} values for shape [{}]", name,
                        c.v.size(), fmt::join(given.shape, ", ")));
      given_[name] = std::move(c);
    }
  }
  unsigned symbolic = 0;
  const onnx::ValueInfoProto *firstData = nullptr;
  for (onnx::ValueInfoProto &v : *graph->mutable_input()) {
    if (!v.type().has_tensor_type())
      continue;
    if (!firstData && !initialized.count(v.name()))
      firstData = &v;
    for (auto &dim : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
      if (!dim.has_dim_value()) {
        dim.set_dim_value(options_.batch);
        ++symbolic;
      }
  }
  // A batch the user chose must mean something: with no symbolic dimension, it must be the
  // one the file fixes.
  if (options_.batchExact && symbolic == 0 && firstData) {
    const auto &dims = firstData->type().tensor_type().shape().dim();
    if (dims.empty() || dims[0].dim_value() != options_.batch) {
      std::vector<int64_t> shape;
      for (const auto &d : dims)
        shape.push_back(d.dim_value());
      return stringError(fmt::format(
          "--batch {}: the model's inputs have no symbolic dimension to set, and its first "
          "input '{}' is [{}] (export it with a dynamic batch axis to choose the batch)",
          options_.batch, firstData->name(), fmt::join(shape, ", ")));
    }
  }
  // ONNX's shape inference sees the integer values given (a Reshape's shape, a Slice's
  // starts) as initializers, so that it infers what they determine; they are taken out
  // again after it. (Float values are not shapes.)
  const int initializersBefore = graph->initializer_size();
  for (const auto &[name, c] : given_) {
    const onnx::ValueInfoProto *v = nullptr;
    for (const onnx::ValueInfoProto &in : graph->input())
      if (in.name() == name)
        v = &in;
    const int32_t elem = v->type().tensor_type().elem_type();
    if (elem != onnx::TensorProto::INT64 && elem != onnx::TensorProto::INT32)
      continue;
    onnx::TensorProto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : c.shape)
      t->add_dims(d);
    for (double x : c.v) {
      if (elem == onnx::TensorProto::INT64)
        t->add_int64_data(asInt(x));
      else
        t->add_int32_data(int32_t(asInt(x)));
    }
  }
  if (llvm::Error e = inferShapesIsolated(model))
    return std::move(e);
  while (graph->initializer_size() > initializersBefore)
    graph->mutable_initializer()->RemoveLast();
  auto record = [&](const onnx::ValueInfoProto &v) {
    if (v.type().has_tensor_type() && v.type().tensor_type().has_elem_type()) {
      types_[v.name()] = v.type().tensor_type().elem_type();
      if (const char *what = unholdableType(v.type().tensor_type().elem_type()))
        keep(stringError(fmt::format("tensor '{}' holds {}; Tofu's tensors hold numbers",
                                     v.name(), what)));
    }
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return;
    std::vector<int64_t> dims;
    for (const auto &d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return;
      dims.push_back(d.dim_value());
    }
    if (std::string bad = badShape(dims); !bad.empty())
      keep(stringError(fmt::format("tensor '{}': {}", v.name(), bad)));
    shapes_[v.name()] = dims;
  };
  for (const auto &v : graph->input())
    record(v);
  for (const auto &v : graph->value_info())
    record(v);
  for (const auto &v : graph->output())
    record(v);
  for (const onnx::NodeProto &n : graph->node())
    consumed_.insert(n.input().begin(), n.input().end());
  for (const auto &v : graph->output())
    consumed_.insert(v.name());
  std::set<std::string> initializers;
  for (const onnx::TensorProto &t : graph->initializer()) {
    initializers.insert(t.name());
    types_[t.name()] = t.data_type();
    if (const char *what = unholdableType(t.data_type()))
      return stringError(fmt::format("initializer '{}' holds {}; Tofu's tensors hold numbers",
                                     t.name(), what));
    if (std::string bad = badShape({t.dims().begin(), t.dims().end()}); !bad.empty())
      return stringError(fmt::format("initializer '{}': {}", t.name(), bad));
    shapes_[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    // Integer initializers are constants (shapes, axes, indices); float ones are weights.
    if (isIntType(t.data_type())) {
      if (auto c = constOf(t)) {
        consts_[t.name()] = std::move(*c);
        continue;
      }
    }
    // A float initializer's values are the weight's initial values.
    if (auto c = constOf(t); c && !c->isInt && int64_t(c->v.size()) == c->size())
      g_.initialValues[t.name()] = std::vector<float>(c->v.begin(), c->v.end());
    TensorInfo info;
    info.name = t.name();
    info.group = t.name();
    info.shape = shapes_[t.name()];
    info.shapeKnown = true;
    info.role = TensorRole::Weight;
    info.dtype = dtypeName(t.data_type());
    keep(g_.addTensor(std::move(info)));
  }
  unsigned dataSeen = 0;
  for (const onnx::ValueInfoProto &v : graph->input()) {
    if (initializers.count(v.name()))
      continue;
    if (!v.type().has_tensor_type())
      return stringError(
          fmt::format("graph input '{}' is {}, not a tensor; Tofu's values are tensors", v.name(),
                      v.type().has_sequence_type()   ? "a sequence"
                      : v.type().has_map_type()      ? "a map"
                      : v.type().has_optional_type() ? "an optional"
                                                     : "of no tensor type"));
    auto it = shapes_.find(v.name());
    if (it == shapes_.end())
      return stringError(fmt::format("graph input '{}' has no static shape (give its value "
                                     "ahead: tofu-run --infer --input)",
                                     v.name()));
    TensorInfo info;
    info.name = v.name();
    info.group = v.name();
    info.shape = it->second;
    info.shapeKnown = true;
    info.role = dataSeen++ < options_.dataInputs ? TensorRole::Input : TensorRole::Weight;
    if (auto type = types_.find(v.name()); type != types_.end()) {
      info.dtype = dtypeName(type->second);
      // An integer buffer exported as an input (an index table) is read, never trained.
      if (isIntType(type->second))
        info.role = TensorRole::Input;
    }
    keep(g_.addTensor(std::move(info)));
  }
  if (options_.dataInputsExact && options_.dataInputs > dataSeen)
    return stringError(fmt::format("--data-inputs {}: the model has {} graph input{} that {} not "
                                   "initializers",
                                   options_.dataInputs, dataSeen, dataSeen == 1 ? "" : "s",
                                   dataSeen == 1 ? "is" : "are"));
  if (error_)
    return std::move(error_);
  // Every node is tried, so that one import lists every node it cannot translate; nodes
  // that read what an untranslated node would have produced are skipped (and counted).
  std::vector<std::string> untranslated;
  std::set<std::string> lost;
  unsigned skipped = 0;
  for (const onnx::NodeProto &n : graph->node()) {
    bool reachesLost = false;
    for (const std::string &in : n.input())
      reachesLost |= lost.count(in) > 0;
    if (reachesLost) {
      ++skipped;
      lost.insert(n.output().begin(), n.output().end());
      continue;
    }
    // The checks above should leave nothing that throws; should a translation still meet
    // what it did not expect, the model is refused naming the node, never a crash.
    llvm::Error e = [&]() -> llvm::Error {
      try {
        return translate(n);
      } catch (const std::exception &x) {
        return where(n, fmt::format("cannot translate it: {}", x.what()));
      }
    }();
    if (error_) { // a tensor or node the translation added was refused
      if (e)
        llvm::consumeError(std::move(error_));
      else
        e = std::move(error_);
    }
    if (e) {
      untranslated.push_back(llvm::toString(std::move(e)));
      lost.insert(n.output().begin(), n.output().end());
    }
  }
  if (untranslated.size() == 1 && skipped == 0)
    return stringError(untranslated[0]);
  if (!untranslated.empty()) {
    std::string list;
    for (const std::string &u : untranslated)
      list += "\n  " + u;
    return stringError(fmt::format("{} nodes cannot be translated ({} more read their results):{}",
                                   untranslated.size(), skipped, list));
  }
  for (const onnx::ValueInfoProto &v : graph->output()) {
    materialize(v.name()); // an output the importer evaluated is a constant of the graph
    g_.outputs.push_back(v.name());
  }
  if (error_) // a constant output the graph cannot hold (an empty one)
    return std::move(error_);
  // Weights no translated node reads (a training-mode batch norm's running statistics)
  // are not trained.
  std::set<std::string> read;
  for (const Node &node : g_.nodes())
    read.insert(node.inputs.begin(), node.inputs.end());
  for (const TensorInfo &t : g_.tensors())
    if (t.role == TensorRole::Weight && !read.count(t.name))
      g_.tensor(t.name)->role = TensorRole::Input;
  if (llvm::Error e = checkGraph(g_, lib_))
    return stringError("the imported graph does not check: " + llvm::toString(std::move(e)));
  return llvm::Expected<Graph>(std::move(g_));
}

} // namespace

llvm::Expected<Graph> importOnnxBytes(const std::string &bytes, const std::string &name,
                                      const OpLibrary &lib, const OnnxImportOptions &options) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    return stringError(fmt::format("'{}' is not an ONNX model (protobuf parsing failed)", name));
  if (!model.has_graph())
    return stringError(fmt::format("'{}' has no graph", name));
  if (llvm::Error e = loadExternalData(*model.mutable_graph(), options.modelDir))
    return stringError(fmt::format("{}: {}", name, llvm::toString(std::move(e))));
  auto table = tableFor(lib);
  if (!table)
    return table.takeError();
  auto g = Importer(lib, **table, options).run(model);
  if (!g)
    return stringError(fmt::format("{}: {}", name, llvm::toString(g.takeError())));
  return g;
}

llvm::Expected<Graph> importOnnx(const std::string &path, const OpLibrary &lib,
                                 const OnnxImportOptions &options) {
  std::error_code dirError;
  if (std::filesystem::is_directory(path, dirError))
    return stringError(fmt::format("'{}' is a directory, not an ONNX model", path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return stringError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::stringstream bytes;
  bytes << in.rdbuf();
  OnnxImportOptions withDir = options;
  if (withDir.modelDir.empty()) {
    // The folder the model file really is in (a link to a model reads its data beside the
    // file linked to).
    std::error_code ec;
    std::filesystem::path real = std::filesystem::canonical(path, ec);
    withDir.modelDir = (ec ? std::filesystem::path(path) : real).parent_path().string();
    if (withDir.modelDir.empty())
      withDir.modelDir = ".";
  }
  return importOnnxBytes(bytes.str(), path, lib, withDir);
}

} // namespace tofu
