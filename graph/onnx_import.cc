// ONNX import through Debian's libonnx: the model read (protobuf, external data, shape
// inference in a child process, initializers) and its nodes run in order through the
// Importer (onnx_import_internal.h), and the public entry points.
#include "graph/onnx_import.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
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
#include "graph/onnx_import_internal.h"
#include "graph/onnx_rules.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "support/files.h"
#include "support/tensor_proto.h"

namespace tofu {
namespace onnximport {

/// The attributes of window operators (convolutions, pooling) in the ranges they have a
/// meaning in: strides, dilations and kernel extents at least 1, pads at least 0, group at
/// least 1. Named by node and attribute.
llvm::Error checkAttributes(const onnx::GraphProto &graph) {
  static const std::set<std::string> windowed = {"Conv",        "ConvTranspose", "ConvInteger",
                                                 "QLinearConv", "MaxPool",       "AveragePool",
                                                 "LpPool",      "MaxUnpool",     "DeformConv"};
  for (const onnx::NodeProto &n : graph.node()) {
    if (!windowed.count(n.op_type()))
      continue;
    const std::string who =
        fmt::format("node '{}' ({})", n.name().empty() ? n.output(0) : n.name(), n.op_type());
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
          return stringError(fmt::format("{}: attribute {} has {}; each must be at least {}", who,
                                         a.name(), v, least));
    }
  }
  return llvm::Error::success();
}

/// ONNX's shape inference, strict: a node whose inputs do not fit its operator (ranks, an
/// attribute out of range) is an error naming it, not an unknown shape.
llvm::Error inferShapes(onnx::ModelProto &model) {
  try {
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(),
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

namespace {

/// The static shapes of the values a model's inference (or its inputs and initializers)
/// gives, by name; an unknown extent is -1.
std::map<std::string, std::vector<int64_t>> knownShapes(const onnx::GraphProto &g) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const onnx::TensorProto &t : g.initializer())
    shapes[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  for (const auto *values : {&g.input(), &g.value_info()})
    for (const onnx::ValueInfoProto &v : *values) {
      if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
        continue;
      std::vector<int64_t> dims;
      for (const auto &d : v.type().tensor_type().shape().dim())
        dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      shapes[v.name()] = std::move(dims);
    }
  return shapes;
}

bool broadcastsMultidirectionally(const std::string &op) {
  static const std::set<std::string> ops = {"Add",
                                            "Sub",
                                            "Mul",
                                            "Div",
                                            "Pow",
                                            "Mod",
                                            "Equal",
                                            "Less",
                                            "LessOrEqual",
                                            "Greater",
                                            "GreaterOrEqual",
                                            "And",
                                            "Or",
                                            "Xor",
                                            "Where",
                                            "Max",
                                            "Min",
                                            "Mean",
                                            "Sum",
                                            "BitShift",
                                            "BitwiseAnd",
                                            "BitwiseOr",
                                            "BitwiseXor"};
  return ops.count(op) > 0;
}

} // namespace

llvm::Error locateInferenceFailure(const onnx::ModelProto &model, llvm::Error failure) {
  const std::string why = llvm::toString(std::move(failure));
  const int count = model.graph().node_size();
  // Inference goes through the nodes in order: the first prefix that fails ends at the node.
  auto prefix = [&](int m) {
    onnx::ModelProto cut = model;
    onnx::GraphProto *g = cut.mutable_graph();
    while (g->node_size() > m)
      g->mutable_node()->RemoveLast();
    g->clear_output();
    return cut;
  };
  auto fails = [&](int m) {
    onnx::ModelProto cut = prefix(m);
    llvm::Error e = inferShapesIsolated(cut);
    const bool failed = static_cast<bool>(e);
    llvm::consumeError(std::move(e));
    return failed;
  };
  if (count == 0 || !fails(count))
    return stringError(why); // not a node's (the graph's outputs), or not reproducible
  int lo = 0, hi = count;    // prefix lo passes (none is empty), prefix hi fails
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fails(mid) ? hi : lo) = mid;
  }
  const onnx::NodeProto &n = model.graph().node(hi - 1);
  onnx::ModelProto before = prefix(hi - 1);
  if (llvm::Error e = inferShapesIsolated(before))
    llvm::consumeError(std::move(e));
  auto shapes = knownShapes(before.graph());
  std::vector<std::string> inputs;
  std::vector<std::vector<int64_t>> known;
  for (const std::string &in : n.input()) {
    if (in.empty())
      continue;
    auto it = shapes.find(in);
    std::string dims = "unknown";
    if (it != shapes.end()) {
      std::vector<std::string> d;
      for (int64_t x : it->second)
        d.push_back(x < 0 ? "?" : std::to_string(x));
      dims = fmt::format("[{}]", fmt::join(d, ", "));
      if (std::none_of(it->second.begin(), it->second.end(), [](int64_t x) { return x < 0; }))
        known.push_back(it->second);
    }
    inputs.push_back(fmt::format("'{}' {}", in, dims));
  }
  const std::string name = n.name().empty() ? fmt::format("#{}", hi - 1) : n.name();
  std::string cause;
  if (broadcastsMultidirectionally(n.op_type()) && known.size() == inputs.size()) {
    std::vector<int64_t> all = known[0];
    for (size_t k = 1; k < known.size(); ++k) {
      auto b = broadcastShape(all, known[k]);
      if (!b) {
        cause = fmt::format("its inputs' shapes do not broadcast (numpy's rule: aligned at the "
                            "last axis, each pair of extents equal or one of them 1): {}",
                            fmt::join(inputs, ", "));
        break;
      }
      all = *b;
    }
  }
  if (cause.empty() && !inputs.empty())
    cause = fmt::format("its inputs: {}", fmt::join(inputs, ", "));
  return stringError(fmt::format("node '{}' (ONNX {}): {}{}", name, n.op_type(), cause,
                                 cause.empty() ? why : "; " + why));
}

/// Bytes per element of an ONNX element type whose raw data the importer reads, or 0.
int64_t rawElementBytes(int32_t t) {
  switch (t) {
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
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
      return stringError(
          fmt::format("initializer '{}' of shape [{}] holds {} {} where its "
                      "shape needs {}",
                      t.name(), fmt::join(t.dims(), ", "),
                      unit > 1 ? fmt::format("{} bytes of", have) : std::to_string(have), field,
                      unit > 1 ? fmt::format("{} bytes", n * unit) : std::to_string(n)));
  }
  return llvm::Error::success();
}

llvm::Error Importer::checkModel(onnx::ModelProto &model) {
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
      return stringError(
          fmt::format("the model imports the unknown operator domain '{}'", o.domain()));
    if (o.version() < it->second.first || o.version() > it->second.second)
      return stringError(fmt::format(
          "the model imports opset {} of the {} domain; this importer knows opsets {} to {}",
          o.version(), domain.empty() ? "ONNX" : "'" + domain + "'", it->second.first,
          it->second.second));
  }
  return llvm::Error::success();
}

llvm::Expected<Importer::GivenElements>
Importer::takeGivenInputs(onnx::GraphProto *graph, const std::set<std::string> &initialized) {
  GivenElements givenElements;
  for (const auto &[name, given] : options_.givenInputs) {
    if (std::string base; sequenceElementName(name, &base)) {
      const bool none = name.size() == base.size() + 2; // NAME[]: no element
      for (const onnx::ValueInfoProto &in : graph->input())
        if (in.name() == base && (in.type().has_sequence_type() || in.type().has_optional_type()) &&
            !initialized.count(base)) {
          auto &elements = givenElements[base];
          if (!none)
            elements[asInt(std::stod(name.substr(base.size() + 1)))] = &given;
        }
      if (givenElements.count(base))
        continue;
    }
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
    if (given.elementType != 0 && type->has_elem_type() && given.elementType != type->elem_type() &&
        !(given.elementType == onnx::TensorProto::UINT16 &&
          type->elem_type() == onnx::TensorProto::BFLOAT16))
      return stringError(fmt::format("the value given for input '{}' holds {}; the model declares "
                                     "{} (as ONNX Runtime, Tofu converts no input's element "
                                     "type: give an array of {})",
                                     name, tensorProtoTypeName(given.elementType),
                                     tensorProtoTypeName(type->elem_type()),
                                     tensorProtoTypeName(type->elem_type())));
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
  return givenElements;
}

llvm::Expected<Importer::ElementNames>
Importer::nameGivenElements(const onnx::GraphProto *graph, const GivenElements &givenElements) {
  ElementNames elementNames;
  for (const auto &[base, elements] : givenElements) {
    std::vector<std::string> names;
    for (const auto &[i, given] : elements) {
      if (i != int64_t(names.size()))
        return stringError(fmt::format("the elements given for sequence input '{}' are not "
                                       "{}[0] to {}[{}]",
                                       base, base, base, elements.size() - 1));
      names.push_back(fmt::format("{}[{}]", base, i));
      if (given->hasValues) {
        Const c;
        c.shape = given->shape;
        c.v = given->values;
        if (int64_t(c.v.size()) != c.size())
          return stringError(fmt::format("the value given for '{}' has {} values for shape [{}]",
                                         names.back(), c.v.size(), fmt::join(given->shape, ", ")));
        elementValues_[names.back()] = std::move(c);
      }
    }
    elementNames[base] = names;
    const onnx::TypeProto *type = nullptr;
    for (const onnx::ValueInfoProto &in : graph->input())
      if (in.name() == base)
        type = &in.type();
    if (type->has_sequence_type()) {
      sequences_[base] = names;
    } else if (type->optional_type().elem_type().has_sequence_type()) {
      sequences_[base + "[]"] = names;
      optionals_[base] = base + "[]";
    } else if (names.size() <= 1) {
      optionals_[base] = names.empty() ? "" : names[0];
    } else {
      return stringError(
          fmt::format("optional input '{}' holds one tensor; {} are given", base, names.size()));
    }
  }
  return elementNames;
}

llvm::Error Importer::fixSymbolicDimensions(onnx::GraphProto *graph,
                                            const std::set<std::string> &initialized) {
  unsigned symbolic = 0;
  const onnx::ValueInfoProto *firstData = nullptr;
  for (onnx::ValueInfoProto &v : *graph->mutable_input()) {
    if (!v.type().has_tensor_type())
      continue;
    const bool first = !firstData && !initialized.count(v.name());
    if (first)
      firstData = &v;
    // The data that will feed the input fixes its dynamic axes after the batch axis.
    const std::vector<int64_t> *sample = nullptr;
    if (auto it = options_.sampleShapes.find(v.name()); it != options_.sampleShapes.end())
      sample = &it->second;
    else if (auto it = options_.sampleShapes.find(""); first && it != options_.sampleShapes.end())
      sample = &it->second;
    auto *dims = v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim();
    if (sample && size_t(dims->size()) != sample->size() + 1)
      sample = nullptr;
    for (int d = 0; d < dims->size(); ++d) {
      auto &dim = (*dims)[d];
      if (!dim.has_dim_value()) {
        dim.set_dim_value(d > 0 && sample ? (*sample)[size_t(d - 1)] : options_.batch);
        ++symbolic;
      }
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
  return llvm::Error::success();
}

llvm::Error Importer::runShapeInference(onnx::ModelProto &model) {
  onnx::GraphProto *graph = model.mutable_graph();
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
  // ONNX 1.12's STFT inference ignores onesided (it infers the whole spectrum): the declared
  // extents of STFT outputs are set aside for it, and the library's STFT op infers them.
  std::set<std::string> ownInference;
  for (const onnx::NodeProto &n : graph->node())
    if (n.op_type() == "STFT" && isDefaultDomain(n.domain()))
      ownInference.insert(n.output().begin(), n.output().end());
  for (auto *values : {graph->mutable_value_info(), graph->mutable_output()})
    for (onnx::ValueInfoProto &v : *values)
      if (ownInference.count(v.name()) && v.type().tensor_type().has_shape())
        for (auto &d : *v.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
          d.set_dim_param(v.name() + "_extent");
  if (llvm::Error e = inferShapesIsolated(model))
    return locateInferenceFailure(model, std::move(e));
  while (graph->initializer_size() > initializersBefore)
    graph->mutable_initializer()->RemoveLast();
  auto record = [&](const onnx::ValueInfoProto &v) -> llvm::Error {
    if (v.type().has_tensor_type() && v.type().tensor_type().has_elem_type()) {
      facts_.types[v.name()] = v.type().tensor_type().elem_type();
      if (const char *what = unholdableType(v.type().tensor_type().elem_type()))
        return stringError(
            fmt::format("tensor '{}' holds {}; Tofu's tensors hold numbers", v.name(), what));
    }
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return llvm::Error::success();
    std::vector<int64_t> dims;
    for (const auto &d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return llvm::Error::success();
      dims.push_back(d.dim_value());
    }
    if (std::string bad = badShape(dims); !bad.empty())
      return stringError(fmt::format("tensor '{}': {}", v.name(), bad));
    facts_.shapes[v.name()] = dims;
    return llvm::Error::success();
  };
  for (const auto *values : {&graph->input(), &graph->value_info(), &graph->output()})
    for (const onnx::ValueInfoProto &v : *values)
      if (llvm::Error e = record(v))
        return std::move(e);
  for (const std::string &o : ownInference)
    facts_.shapes.erase(o);
  for (const onnx::NodeProto &n : graph->node())
    consumed_.insert(n.input().begin(), n.input().end());
  for (const auto &v : graph->output())
    consumed_.insert(v.name());
  return llvm::Error::success();
}

llvm::Expected<std::set<std::string>> Importer::addInitializers(const onnx::GraphProto *graph) {
  std::set<std::string> initializers;
  for (const onnx::TensorProto &t : graph->initializer()) {
    initializers.insert(t.name());
    facts_.types[t.name()] = t.data_type();
    if (const char *what = unholdableType(t.data_type()))
      return stringError(
          fmt::format("initializer '{}' holds {}; Tofu's tensors hold numbers", t.name(), what));
    if (std::string bad = badShape({t.dims().begin(), t.dims().end()}); !bad.empty())
      return stringError(fmt::format("initializer '{}': {}", t.name(), bad));
    facts_.shapes[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    // Integer initializers are constants (shapes, axes, indices); float ones are weights.
    if (isIntType(t.data_type())) {
      if (auto c = constOf(t)) {
        facts_.consts[t.name()] = std::move(*c);
        continue;
      }
    }
    // A float initializer's values are the weight's initial values, in float32: a double
    // beyond its range is refused rather than made infinite.
    if (auto c = constOf(t); c && !c->isInt && int64_t(c->v.size()) == c->size()) {
      for (double v : c->v)
        if (std::isfinite(v) && std::fabs(v) > double(std::numeric_limits<float>::max()))
          return stringError(fmt::format("initializer '{}' ({}) holds {:g}, beyond the range of "
                                         "float32, in which Tofu's engines hold weights",
                                         t.name(), elementTypeName(graphElementType(t.data_type())),
                                         v));
      b_->graph().initialValues[t.name()] = std::vector<float>(c->v.begin(), c->v.end());
    }
    TensorInfo info;
    info.name = t.name();
    info.group = t.name();
    info.shape = facts_.shapes[t.name()];
    info.shapeKnown = true;
    info.role = TensorRole::Weight;
    info.dtype = graphElementType(t.data_type());
    if (llvm::Error e = b_->addTensor(std::move(info)))
      return std::move(e);
  }
  return initializers;
}

llvm::Error Importer::addGraphInputs(const onnx::GraphProto *graph,
                                     const std::set<std::string> &initializers,
                                     const GivenElements &givenElements,
                                     const ElementNames &elementNames) {
  unsigned dataSeen = 0;
  for (const onnx::ValueInfoProto &v : graph->input()) {
    if (initializers.count(v.name()))
      continue;
    // A sequence given element by element: each element a data input of the graph.
    if (auto s = givenElements.find(v.name()); s != givenElements.end()) {
      const onnx::TypeProto &held =
          v.type().has_sequence_type() ? v.type().sequence_type().elem_type()
          : v.type().optional_type().elem_type().has_sequence_type()
              ? v.type().optional_type().elem_type().sequence_type().elem_type()
              : v.type().optional_type().elem_type();
      const int32_t elem = held.tensor_type().elem_type();
      for (const auto &[i, given] : s->second) {
        const std::string name = elementNames.at(v.name())[size_t(i)];
        facts_.shapes[name] = given->shape;
        facts_.types[name] = elem;
        if (elementCount(given->shape) == 0) {
          Const empty;
          empty.shape = given->shape;
          empty.isInt = isIntType(elem);
          facts_.consts[name] = std::move(empty);
          continue;
        }
        if (auto c = elementValues_.find(name); c != elementValues_.end())
          given_[name] = c->second;
        TensorInfo info;
        info.name = name;
        info.group = name;
        info.shape = given->shape;
        info.shapeKnown = true;
        info.role = TensorRole::Input;
        info.dtype = graphElementType(elem);
        if (llvm::Error e = b_->addTensor(std::move(info)))
          return std::move(e);
      }
      ++dataSeen;
      continue;
    }
    if (!v.type().has_tensor_type())
      return stringError(
          fmt::format("graph input '{}' is {}, not a tensor; Tofu's values are tensors", v.name(),
                      v.type().has_sequence_type()   ? "a sequence"
                      : v.type().has_map_type()      ? "a map"
                      : v.type().has_optional_type() ? "an optional"
                                                     : "of no tensor type"));
    auto it = facts_.shapes.find(v.name());
    if (it == facts_.shapes.end())
      return stringError(fmt::format("graph input '{}' has no static shape (give its value "
                                     "ahead: tofu-run --infer --input)",
                                     v.name()));
    // The first dataInputs graph inputs are data, and so is every input given ahead by name
    // (tofu-run --infer --input NAME=FILE), wherever it stands.
    const bool named = options_.givenInputs.count(v.name()) > 0;
    const TensorRole role =
        dataSeen++ < options_.dataInputs || named ? TensorRole::Input : TensorRole::Weight;
    // An empty input given ahead (a reduction's empty axes) is known whole: the ops that
    // read it take it as a constant, and the graph holds no empty tensor.
    if (given_.count(v.name()) && elementCount(it->second) == 0) {
      b_->graph().inputsTakenWhole.insert(v.name());
      continue;
    }
    TensorInfo info;
    info.name = v.name();
    info.group = v.name();
    info.shape = it->second;
    info.shapeKnown = true;
    info.role = role;
    if (auto type = facts_.types.find(v.name()); type != facts_.types.end()) {
      info.dtype = graphElementType(type->second);
      // An integer buffer exported as an input (an index table) is read, never trained.
      if (isIntType(type->second))
        info.role = TensorRole::Input;
    }
    if (llvm::Error e = b_->addTensor(std::move(info)))
      return std::move(e);
  }
  if (options_.dataInputsExact && options_.dataInputs > dataSeen)
    return stringError(fmt::format("--data-inputs {}: the model has {} graph input{} that {} not "
                                   "initializers",
                                   options_.dataInputs, dataSeen, dataSeen == 1 ? "" : "s",
                                   dataSeen == 1 ? "is" : "are"));
  return llvm::Error::success();
}

llvm::Error Importer::translateNodes(const onnx::GraphProto *graph) {
  // Every node is tried, so that one import lists every node it cannot translate; nodes
  // that read what an untranslated node would have produced are skipped (and counted).
  std::vector<std::string> untranslated;
  std::set<std::string> lost;
  unsigned skipped = 0;
  for (const onnx::NodeProto &n : graph->node())
    for (const std::string &o : n.output())
      producers_[o] = &n;
  // Values of control-flow nodes expanded after this pass, and what reads them.
  std::set<std::string> deferred;
  int index = -1;
  for (const onnx::NodeProto &n : graph->node()) {
    ++index;
    bool reachesLost = false, reachesDeferred = false;
    for (const std::string &in : n.input()) {
      reachesLost |= lost.count(in) > 0;
      reachesDeferred |= deferred.count(in) > 0;
    }
    if (reachesDeferred) {
      deferred.insert(n.output().begin(), n.output().end());
      continue;
    }
    if (reachesLost) {
      ++skipped;
      lost.insert(n.output().begin(), n.output().end());
      continue;
    }
    // A node whose every output holds no element computes nothing: its outputs are known
    // whole, as empty constants.
    if (producesOnlyEmpty(n)) {
      for (const std::string &o : n.output())
        if (!o.empty()) {
          Const empty;
          empty.shape = facts_.shapes[o];
          auto type = facts_.types.find(o);
          empty.isInt = type != facts_.types.end() && isIntType(type->second);
          facts_.consts[o] = std::move(empty);
        }
      continue;
    }
    if (isSequenceOp(n) || (n.op_type() == "Identity" && n.input_size() == 1 &&
                            (sequences_.count(n.input(0)) || optionals_.count(n.input(0))))) {
      llvm::Error e = isSequenceOp(n) ? sequenceOp(n) : aliasValue(n, n.input(0), n.output(0));
      if (e) {
        untranslated.push_back(llvm::toString(std::move(e)));
        lost.insert(n.output().begin(), n.output().end());
      }
      continue;
    }
    if (isControlFlow(n)) {
      llvm::Expected<Expansion> e = controlFlowDecision(n, index);
      if (!e) {
        untranslated.push_back(llvm::toString(e.takeError()));
        lost.insert(n.output().begin(), n.output().end());
      } else {
        expansions_.push_back(std::move(*e));
        deferred.insert(n.output().begin(), n.output().end());
      }
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
    if (e) {
      untranslated.push_back(llvm::toString(std::move(e)));
      lost.insert(n.output().begin(), n.output().end());
    }
  }
  if (!untranslated.empty())
    expansions_.clear();
  if (!expansions_.empty())
    return stringError("control flow to expand before the import goes on");
  if (untranslated.size() == 1 && skipped == 0)
    return stringError(untranslated[0]);
  if (!untranslated.empty()) {
    std::string list;
    for (const std::string &u : untranslated)
      list += "\n  " + u;
    return stringError(fmt::format("{} nodes cannot be translated ({} more read their results):{}",
                                   untranslated.size(), skipped, list));
  }
  return llvm::Error::success();
}

llvm::Expected<Graph> Importer::finishGraph(const onnx::GraphProto *graph,
                                            const std::set<std::string> &initializers) {
  Graph &g = main_.graph();
  for (const onnx::ValueInfoProto &v : graph->output()) {
    // A sequence output: its elements are the outputs NAME.0, NAME.1, ...; an optional
    // output, its value under the optional's name, or nothing.
    if (sequences_.count(v.name()) || optionals_.count(v.name())) {
      std::vector<std::pair<std::string, std::string>> parts; // (value, output name)
      std::string held = v.name();
      if (auto o = optionals_.find(held); o != optionals_.end()) {
        held = o->second;
        if (!held.empty() && !sequences_.count(held))
          parts.push_back({held, v.name()});
      }
      if (auto s = sequences_.find(held); s != sequences_.end())
        for (size_t i = 0; i < s->second.size(); ++i)
          parts.push_back({s->second[i], fmt::format("{}.{}", v.name(), i)});
      for (const auto &[value, out] : parts)
        if (llvm::Error e = outputValue(value, out))
          return std::move(e);
      continue;
    }
    // An output that holds no element is known whole; the graph cannot hold it.
    if (const Const *c = this->known(v.name()); c && c->size() == 0) {
      g.emptyOutputs[v.name()] = c->shape;
      continue;
    }
    // An output the importer evaluated is a constant of the graph.
    if (llvm::Error e = main_.materialize(v.name()))
      return std::move(e);
    g.outputs.push_back(v.name());
  }
  // Constants: a value a parameter never holds (not finite: a causal mask's -inf), or an
  // anonymous scalar (PyTorch names a value it computed at export `onnx::<op>_<n>`); the
  // user's --trainable and --frozen decide over the rule.
  for (const auto &[names, what] :
       {std::pair{&options_.trainable, "--trainable"}, std::pair{&options_.frozen, "--frozen"}})
    for (const std::string &name : *names) {
      const TensorInfo *t = g.tensor(name);
      if (!initializers.count(name) || !t || g.producer(name) || !g.initialValues.count(name))
        return stringError(
            fmt::format("{} {}: the model has no float initializer '{}'", what, name, name));
      if (options_.trainable.count(name) && options_.frozen.count(name))
        return stringError(fmt::format("'{}' is given both to --trainable and to --frozen", name));
    }
  for (const TensorInfo &t : g.tensors()) {
    auto v = g.initialValues.find(t.name);
    if (t.role != TensorRole::Weight || v == g.initialValues.end() || g.producer(t.name))
      continue;
    const bool constant = std::any_of(v->second.begin(), v->second.end(),
                                      [](float x) { return !std::isfinite(x); }) ||
                          (t.name.rfind("onnx::", 0) == 0 && v->second.size() == 1);
    if (options_.frozen.count(t.name) || (constant && !options_.trainable.count(t.name)))
      g.tensor(t.name)->role = TensorRole::Input;
  }
  // Weights no translated node reads (a training-mode batch norm's running statistics)
  // are not trained.
  std::set<std::string> read;
  for (const Node &node : g.nodes())
    read.insert(node.inputs.begin(), node.inputs.end());
  for (const TensorInfo &t : g.tensors())
    if (t.role == TensorRole::Weight && !read.count(t.name))
      g.tensor(t.name)->role = TensorRole::Input;
  if (llvm::Error e = checkGraph(g, lib_))
    return stringError("the imported graph does not check: " + llvm::toString(std::move(e)));
  return llvm::Expected<Graph>(std::move(g));
}

llvm::Expected<Graph> Importer::run(onnx::ModelProto &model) {
  onnx::GraphProto *graph = model.mutable_graph();
  producer_ = model.producer_name();
  if (llvm::Error e = checkModel(model))
    return std::move(e);
  opset_ = defaultOpset(model);
  std::set<std::string> initialized;
  for (const onnx::TensorProto &t : graph->initializer())
    initialized.insert(t.name());
  auto givenElements = takeGivenInputs(graph, initialized);
  if (!givenElements)
    return givenElements.takeError();
  auto elementNames = nameGivenElements(graph, *givenElements);
  if (!elementNames)
    return elementNames.takeError();
  if (llvm::Error e = fixSymbolicDimensions(graph, initialized))
    return std::move(e);
  if (llvm::Error e = runShapeInference(model))
    return std::move(e);
  auto initializers = addInitializers(graph);
  if (!initializers)
    return initializers.takeError();
  if (llvm::Error e = addGraphInputs(graph, *initializers, *givenElements, *elementNames))
    return std::move(e);
  if (llvm::Error e = translateNodes(graph))
    return std::move(e);
  return finishGraph(graph, *initializers);
}

} // namespace onnximport

using onnximport::Importer;
using onnximport::importExpanded;
using onnximport::loadExternalData;
using onnximport::tableFor;

llvm::Error prepareOnnxImport(const OpLibrary &lib) {
  auto table = tableFor(lib);
  if (!table)
    return table.takeError();
  (void)onnx::OpSchemaRegistry::Schema("Add", 17, ""); // builds the registry
  return llvm::Error::success();
}

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
  auto g = importExpanded(model, lib, **table, options);
  if (!g)
    return stringError(fmt::format("{}: {}", name, llvm::toString(g.takeError())));
  return g;
}

llvm::Expected<Graph> importOnnx(const std::string &path, const OpLibrary &lib,
                                 const OnnxImportOptions &options) {
  auto bytes = readFile(path, "an ONNX model");
  if (!bytes)
    return bytes.takeError();
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
  return importOnnxBytes(*bytes, path, lib, withDir);
}

} // namespace tofu
