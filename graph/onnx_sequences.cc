// Sequence and optional values, held by the importer. Tofu's values are tensors, but a
// sequence whose length and positions are known at import is a list of tensors, and an
// optional whose presence is known is a tensor or nothing: the importer keeps them as lists
// of value names (Importer::sequences_, Importer::optionals_) while it translates, and the
// ops that build and read them become the tensors' own nodes or nothing:
// - SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase and an Identity of a
//   sequence make lists (positions from valueOf: constants, or computed from them and the
//   inputs given);
// - SequenceAt is its element, SequenceLength a constant, ConcatFromSequence a Concat (an
//   Unsqueeze of each element first with new_axis), SplitToSequence slices along the axis;
// - Optional wraps a value or none, OptionalHasElement is a constant and OptionalGetElement
//   the value.
// Sequences that loops build (a list appended at each iteration) come here unrolled
// (onnx_control.cc), and so does SequenceMap. A sequence input is given element by element
// (`--input NAME[0]=FILE,NAME[1]=FILE`): each element a data input of the graph; an optional
// input holding a tensor is given as NAME[0]. A sequence output's elements are the graph's
// outputs NAME.0, NAME.1, ...; an optional output's value is the output NAME (none: no
// output).
#include "graph/onnx_import_internal.h"

#include <algorithm>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tofu {
namespace onnximport {

namespace {

/// A scalar constant of ONNX element type `type` (integer or bool) named `name`.
void scalarFact(ImportFacts &facts, const std::string &name, double value, int32_t type) {
  Const c;
  c.v = {value};
  c.isInt = true;
  facts.consts[name] = std::move(c);
  facts.shapes[name] = {};
  facts.types[name] = type;
}

} // namespace

bool isSequenceOp(const onnx::NodeProto &n) {
  static const std::set<std::string> ops = {
      "SequenceEmpty", "SequenceConstruct",  "SequenceInsert",     "SequenceErase",
      "SequenceAt",    "SequenceLength",     "ConcatFromSequence", "SplitToSequence",
      "Optional",      "OptionalHasElement", "OptionalGetElement"};
  return isDefaultDomain(n.domain()) && ops.count(n.op_type()) > 0;
}

bool sequenceElementName(const std::string &name, std::string *base) {
  const size_t open = name.rfind('[');
  if (open == std::string::npos || open == 0 || name.back() != ']' || open + 1 >= name.size() ||
      name.size() - open > 12)
    return false;
  for (size_t i = open + 1; i + 1 < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9')
      return false;
  *base = name.substr(0, open);
  return true;
}

llvm::Error Importer::outputValue(const std::string &value, const std::string &out) {
  Graph &g = main_.graph();
  if (g.tensor(out) || facts_.consts.count(out))
    return stringError(fmt::format("the output '{}' a sequence or optional output needs is "
                                   "already a value of the model",
                                   out));
  if (const Const *c = known(value)) {
    if (c->size() == 0) {
      g.emptyOutputs[out] = c->shape;
      return llvm::Error::success();
    }
    Const copy = *c;
    facts_.consts[out] = std::move(copy);
    if (auto t = facts_.types.find(value); t != facts_.types.end())
      facts_.types[out] = t->second;
    if (llvm::Error e = main_.materialize(out))
      return e;
  } else {
    if (llvm::Error e = main_.materialize(value))
      return e;
    if (!g.tensor(value))
      return stringError(fmt::format("the value '{}' of output '{}' is not a tensor", value, out));
    TOFU_CHECK(main_.node("output_" + out, "Identity", {value}, {}, {}, out));
  }
  g.outputs.push_back(out);
  return llvm::Error::success();
}

llvm::Error Importer::aliasValue(const onnx::NodeProto &n, const std::string &from,
                                 const std::string &to) {
  if (auto s = facts_.shapes.find(from); s != facts_.shapes.end())
    facts_.shapes[to] = s->second;
  if (auto t = facts_.types.find(from); t != facts_.types.end())
    facts_.types[to] = t->second;
  if (const Const *c = known(from)) {
    Const copy = *c;
    facts_.consts[to] = std::move(copy);
    return llvm::Error::success();
  }
  if (sequences_.count(from)) {
    sequences_[to] = sequences_[from];
    return llvm::Error::success();
  }
  if (optionals_.count(from)) {
    optionals_[to] = optionals_[from];
    return llvm::Error::success();
  }
  if (!b_->graph().tensor(from))
    return where(n, fmt::format("its input '{}' is not produced before it", from));
  TOFU_CHECK(b_->node(nameOf(n), "Identity", {from}, {}, {}, to));
  return llvm::Error::success();
}

llvm::Expected<int64_t> Importer::position(const onnx::NodeProto &n, int k, int64_t length,
                                           int64_t dflt, bool inclusive) {
  int64_t p = dflt;
  if (k < n.input_size() && !n.input(k).empty()) {
    const Const *c = valueOf(n.input(k));
    if (!c || c->size() != 1)
      return where(n, fmt::format("its position '{}' is not known at import: sequences are held "
                                  "by the importer, so positions must be constants, or computed "
                                  "from them and the inputs given",
                                  n.input(k)));
    p = asInt(c->v[0]);
  }
  const int64_t hi = inclusive ? length : length - 1;
  if (p < -length || p > hi)
    return where(n, fmt::format("position {} is outside a sequence of length {}", p, length));
  return p < 0 ? p + length : p;
}

llvm::Error Importer::sequenceOp(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  const std::string &out = n.output(0);
  // The operators that read a sequence read it as their first input.
  static const std::set<std::string> readers = {"SequenceInsert", "SequenceErase", "SequenceAt",
                                                "SequenceLength", "ConcatFromSequence"};
  std::vector<std::string> s;
  if (readers.count(op)) {
    const std::string in = n.input_size() > 0 ? n.input(0) : "";
    auto held = sequences_.find(in);
    if (held == sequences_.end())
      return where(n, fmt::format("its input '{}' is not a sequence the importer holds", in));
    s = held->second;
  }
  if (op == "SequenceEmpty") {
    sequences_[out] = {};
    return llvm::Error::success();
  }
  if (op == "SequenceConstruct") {
    sequences_[out] = std::vector<std::string>(n.input().begin(), n.input().end());
    return llvm::Error::success();
  }
  if (op == "SequenceInsert") {
    int64_t p;
    TOFU_TRY(p, position(n, 2, int64_t(s.size()), int64_t(s.size()), true));
    s.insert(s.begin() + long(p), n.input(1));
    sequences_[out] = std::move(s);
    return llvm::Error::success();
  }
  if (op == "SequenceErase") {
    if (s.empty())
      return where(n, "it erases from an empty sequence");
    int64_t p;
    TOFU_TRY(p, position(n, 1, int64_t(s.size()), -1, false));
    s.erase(s.begin() + long(p));
    sequences_[out] = std::move(s);
    return llvm::Error::success();
  }
  if (op == "SequenceAt") {
    int64_t p;
    TOFU_TRY(p, position(n, 1, int64_t(s.size()), 0, false));
    return aliasValue(n, s[size_t(p)], out);
  }
  if (op == "SequenceLength") {
    scalarFact(facts_, out, double(s.size()), onnx::TensorProto::INT64);
    return llvm::Error::success();
  }
  if (op == "ConcatFromSequence") {
    if (s.empty())
      return where(n, "it concatenates an empty sequence");
    const bool newAxis = intAttr(n, "new_axis").value_or(0) != 0;
    const std::vector<int64_t> &first = shapeOf(s[0]);
    const int64_t rank = int64_t(first.size()) + (newAxis ? 1 : 0);
    int64_t axis = intAttr(n, "axis").value_or(0);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank)
      return where(n, fmt::format("axis {} is out of range for rank {}",
                                  intAttr(n, "axis").value_or(0), rank));
    std::vector<std::string> parts;
    for (const std::string &e : s) {
      if (llvm::Error err = b_->materialize(e))
        return err;
      if (!b_->graph().tensor(e))
        return where(n, fmt::format("element '{}' is not a tensor of the graph", e));
      std::string part = e;
      if (newAxis)
        TOFU_TRY(part, b_->reshaped(fmt::format("{}_{}", nameOf(n), parts.size()), e,
                                    unsqueezed(shapeOf(e), {axis})));
      parts.push_back(part);
    }
    if (auto t = facts_.types.find(s[0]); t != facts_.types.end())
      facts_.types[out] = t->second;
    if (parts.size() == 1) {
      TOFU_CHECK(b_->node(nameOf(n), "Identity", {parts[0]}, {}, {}, out));
      return llvm::Error::success();
    }
    TOFU_CHECK(b_->concatAll(nameOf(n), parts, axis, out));
    return llvm::Error::success();
  }
  if (op == "SplitToSequence") {
    std::string x;
    TOFU_TRY(x, tensorInput(n, 0));
    const std::vector<int64_t> shape = shapeOf(x);
    const int64_t rank = int64_t(shape.size());
    int64_t axis = intAttr(n, "axis").value_or(0);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank)
      return where(n, fmt::format("axis {} is out of range for rank {}",
                                  intAttr(n, "axis").value_or(0), rank));
    const int64_t extent = shape[size_t(axis)];
    std::vector<int64_t> sizes;
    const bool given = n.input_size() > 1 && !n.input(1).empty();
    if (given) {
      const Const *c = valueOf(n.input(1));
      if (!c)
        return where(n, fmt::format("its split '{}' is not known at import", n.input(1)));
      if (c->shape.empty()) {
        const int64_t chunk = asInt(c->v[0]);
        if (chunk <= 0)
          return where(n, fmt::format("split {} must be positive", chunk));
        for (int64_t at = 0; at < extent; at += chunk)
          sizes.push_back(std::min(chunk, extent - at));
      } else {
        int64_t total = 0;
        for (double v : c->v) {
          sizes.push_back(asInt(v));
          total += sizes.back();
          if (sizes.back() <= 0)
            return where(n,
                         fmt::format("split sizes [{}] must be positive", fmt::join(sizes, ", ")));
        }
        if (total != extent)
          return where(
              n, fmt::format("split sizes add up to {}, not the axis's extent {}", total, extent));
      }
    } else {
      sizes.assign(size_t(extent), 1);
    }
    const bool keep = given || intAttr(n, "keepdims").value_or(1) != 0;
    std::vector<std::string> elements;
    int64_t start = 0;
    for (int64_t size : sizes) {
      std::string piece;
      const std::string name = fmt::format("{}_{}", nameOf(n), elements.size());
      TOFU_TRY(piece, b_->sliceAxis(name, x, axis, start, size));
      if (!keep)
        TOFU_TRY(piece, b_->reshaped(name + "_squeezed", piece, squeezed(shapeOf(piece), {axis})));
      if (auto t = facts_.types.find(x); t != facts_.types.end())
        facts_.types[piece] = t->second;
      elements.push_back(piece);
      start += size;
    }
    sequences_[out] = std::move(elements);
    return llvm::Error::success();
  }
  if (op == "Optional") {
    optionals_[out] = n.input_size() > 0 ? n.input(0) : "";
    return llvm::Error::success();
  }
  if (op == "OptionalHasElement" || op == "OptionalGetElement") {
    const std::string &in = n.input_size() > 0 ? n.input(0) : std::string();
    std::optional<std::string> held;
    if (auto o = optionals_.find(in); o != optionals_.end())
      held = o->second;
    else if (!in.empty() && (known(in) || sequences_.count(in) || b_->graph().tensor(in)))
      held = in; // a plain value (opset 18 allows it): present
    if (op == "OptionalHasElement") {
      scalarFact(facts_, out, held && !held->empty() ? 1.0 : 0.0, onnx::TensorProto::BOOL);
      return llvm::Error::success();
    }
    if (!held)
      return where(n, fmt::format("its input '{}' is not an optional the importer holds", in));
    if (held->empty())
      return where(n, "it reads an optional that holds nothing");
    return aliasValue(n, *held, out);
  }
  return where(n, "not a sequence or optional operator");
}

} // namespace onnximport
} // namespace tofu
