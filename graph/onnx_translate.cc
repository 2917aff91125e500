// A node through the translation table (ops/onnx_mapping.json): its rules, their steps
// and the inputs they resolve, or its handler.
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

namespace tofu {
namespace onnximport {

NodeEnv::Value NodeEnv::name(const std::string &id) {
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

NodeEnv::Value NodeEnv::rank(int k) {
  if (!present(k) || !im_.facts_.shapes.count(input(k)))
    return Value();
  return Value::number(double(im_.facts_.shapes[input(k)].size()));
}

NodeEnv::Value NodeEnv::shape(const std::string &t) {
  auto it = im_.facts_.shapes.find(t);
  if (t.empty() || it == im_.facts_.shapes.end())
    return Value();
  return Value::ofList(std::vector<double>(it->second.begin(), it->second.end()));
}

llvm::Expected<NodeEnv::Value> NodeEnv::pad(int d, bool end) {
  Value x = shape(input(0)), y = shape(n_.output(0));
  if (!x.defined() || size_t(d + 2) >= x.list.size())
    return Value();
  double in = x.list[d + 2];
  Value ks = name("kernel_shape");
  double k =
      ks.defined() && size_t(d) < ks.list.size() ? ks.list[d]
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

std::optional<llvm::Expected<NodeEnv::Value>> NodeEnv::call(const std::string &fn,
                                                            const std::vector<Value> &a) {
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
    Value s = fn == "in"
                  ? shape(input(index(0)))
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
  if (fn == "weight") { // input k is an initializer: a weight unless a rule freezes it
    const std::string t = input(index(0));
    const TensorInfo *info = t.empty() ? nullptr : im_.b_->graph().tensor(t);
    return Value::number(
        info && !im_.b_->graph().producer(t) &&
        (info->role == TensorRole::Weight || info->role == TensorRole::OptimizerState));
  }
  if (fn == "pytorch") // the model is PyTorch's export (its producer_name)
    return Value::number(im_.producer_ == "pytorch");
  if (fn == "const") {
    const Const *c = im_.valueOf(input(index(0)));
    if (!c)
      return Value();
    return Value::ofList(c->v);
  }
  if (fn == "isint") { // input k holds integers (ONNX's element type)
    auto it = im_.facts_.types.find(input(index(0)));
    return Value::number(it != im_.facts_.types.end() && isIntType(it->second));
  }
  if (fn == "bits") { // the bits of input k's integer element type (undefined otherwise)
    auto it = im_.facts_.types.find(input(index(0)));
    const int bits = it == im_.facts_.types.end() ? 0 : integerBits(it->second);
    return bits ? Value::number(bits) : Value();
  }
  if (fn == "elemtype") { // ONNX's element type of input k (undefined when unknown)
    auto it = im_.facts_.types.find(input(index(0)));
    return it == im_.facts_.types.end() ? Value() : Value::number(it->second);
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

llvm::Error Importer::translate(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  std::string name = nameOf(n);
  b_->group = name;
  b_->coalesce.clear();
  // The table lists ONNX's own operators, and a few of other domains, named by "domain".
  const onnxrules::Entry *entry = table_.find(op);
  const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
  if (!domain.empty() && !(entry && entry->domain == domain))
    return where(n, fmt::format("operators of domain '{}' are not supported", domain));
  if (entry && entry->domain != domain)
    entry = nullptr;
  auto read = readConstant(n);
  if (!read)
    return read.takeError();
  if (*read)
    return llvm::Error::success();
  if (n.output_size() < 1)
    return where(n, "has no output");
  if (!entry)
    return where(n, fmt::format("not an operator of ONNX opset {} that the translation table "
                                "lists",
                                table_.opset()));
  if (!entry->notDescribable.empty()) {
    auto evaluated = evaluateDataShaped(n);
    if (!evaluated)
      return evaluated.takeError();
    if (*evaluated)
      return llvm::Error::success();
    return where(n, "TDL cannot describe it (" + entry->notDescribable + ")");
  }
  if (!entry->folded.empty())
    return where(n, "its inputs must be static (" + entry->folded + ")");
  if (entry->rules.empty() && entry->handler.empty())
    return where(n, "the importer does not translate it yet" +
                        (entry->missing.empty() ? std::string() : " (" + entry->missing + ")"));
  // Checked before folding too: the interpreter reads zeros outside a tensor, as TDL does.
  if (llvm::Error e = checkConstantIndices(n))
    return e;
  if (foldConstant(n, *entry))
    return llvm::Error::success();
  return translateWith(n, *entry);
}

llvm::Error Importer::checkConstantIndices(const onnx::NodeProto &n) {
  // Gather's constant indices lie on the axis ([-extent, extent)): an index outside would
  // read zeros (TDL's value outside a tensor), not an error.
  if (n.op_type() != "Gather" || n.input_size() < 2)
    return llvm::Error::success();
  auto c = facts_.consts.find(n.input(1));
  auto data = facts_.shapes.find(n.input(0));
  if (c == facts_.consts.end() || data == facts_.shapes.end())
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

const std::map<std::string, Importer::Handler> &Importer::handlers() {
  static const std::map<std::string, Handler> table = {
      {"reshape", &Importer::reshapeOp},    {"slice", &Importer::sliceOp},
      {"concat", &Importer::concatOp},      {"transpose", &Importer::transposeOp},
      {"expand", &Importer::expandOp},      {"pad", &Importer::padOp},
      {"tile", &Importer::tileOp},          {"recurrent", &Importer::recurrentOp},
      {"einsum", &Importer::einsumOp},      {"resize", &Importer::resizeOp},
      {"scatternd", &Importer::scatterOp},  {"gathernd", &Importer::gatherNDOp},
      {"optimizer", &Importer::optimizerOp}};
  return table;
}

llvm::Error Importer::translateWith(const onnx::NodeProto &n, const onnxrules::Entry &entry) {
  NodeEnv env(*this, n);
  if (!entry.handler.empty()) {
    return (this->*handlers().at(entry.handler))(n, env);
  }
  for (const auto &[key, e] : entry.lets) {
    auto v = onnxrules::eval(*e, env);
    if (!v)
      return where(
          n, fmt::format("the translation table's '{}': {}", key, llvm::toString(v.takeError())));
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
    // A frozen initializer is an input that keeps its value; a state one (a batch norm's
    // running statistic) is carried by the node that updates it and saved with the weights,
    // but no gradient trains it.
    if (t && (r.frozen || r.state))
      if (TensorInfo *info = b_->graph().tensor(*t);
          info && !b_->graph().producer(*t) && info->role == TensorRole::Weight)
        info->role = r.state ? TensorRole::OptimizerState : TensorRole::Input;
    if (t && r.asScalar && !shapeOf(*t).empty()) {
      if (elementCount(shapeOf(*t)) != 1)
        return where(n, fmt::format("input {} ('{}') has shape [{}]; one value is expected", k, *t,
                                    fmt::join(shapeOf(*t), ", ")));
      return b_->reshaped(fmt::format("{}_scalar{}", name, k), *t, {});
    }
    return t;
  }
  case Kind::Prev:
    if (prev.empty())
      return where(n, "the translation table's step reads 'prev' before any step ran");
    return prev;
  case Kind::Step:
    if (r.index < 0 || size_t(r.index) >= results.size() || results[r.index].empty())
      return where(
          n, fmt::format("the translation table's step reads step {}, which did not run", r.index));
    return results[r.index];
  case Kind::NewInput: {
    std::string t = fmt::format("{}_{}", name, r.label);
    if (!b_->graph().tensor(t)) {
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
      facts_.shapes[t] = info.shape;
      if (llvm::Error e = b_->addTensor(std::move(info)))
        return std::move(e);
      if (!r.random.empty()) {
        RandomInput random;
        random.kind = r.random == "mask"      ? RandomInput::Kind::Mask
                      : r.random == "uniform" ? RandomInput::Kind::Uniform
                                              : RandomInput::Kind::Normal;
        for (auto [e, out] :
             {std::pair{r.randomA.get(), &random.a}, {r.randomB.get(), &random.b}}) {
          if (!e)
            continue;
          auto v = onnxrules::eval(*e, env);
          if (!v)
            return v.takeError();
          if (v->kind != onnxrules::Value::Kind::Num || !std::isfinite(v->num))
            return where(n, "the translation table's random distribution needs numbers");
          *out = v->num;
        }
        if (random.kind == RandomInput::Kind::Mask && !(random.a >= 0 && random.a <= 1))
          return where(n, "the probability of keeping an element must be a number in [0, 1]");
        if (random.kind == RandomInput::Kind::Uniform && !(random.a <= random.b))
          return where(n, fmt::format("the uniform range [{}, {}) is empty", random.a, random.b));
        if (random.kind == RandomInput::Kind::Normal && !(random.b >= 0))
          return where(n, fmt::format("a normal's deviation {} is negative", random.b));
        b_->graph().randomInputs[t] = random;
      }
    }
    return t;
  }
  case Kind::Scalar:
  case Kind::Fill: {
    auto v = onnxrules::eval(*r.value, env);
    if (!v)
      return where(n, "the translation table's constant: " + llvm::toString(v.takeError()));
    if (v->kind != onnxrules::Value::Kind::Num)
      return where(n,
                   fmt::format("the translation table's constant is {}, not a number", v->text()));
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
    return b_->constant(fmt::format("{}_c{}", name, b_->counter++), shape, std::move(values),
                        r.integer);
  }
  }
  return where(n, "bad input reference");
}

llvm::Error Importer::runSteps(const onnx::NodeProto &n, const std::vector<onnxrules::Step> &steps,
                               NodeEnv &env, int defaultOutput, std::string prev,
                               const std::string &suffix, std::string *result) {
  using onnxrules::Value;
  std::string name = nameOf(n) + suffix;
  auto integer = [&](const onnxrules::ExprPtr &e,
                     const std::string &what) -> llvm::Expected<int64_t> {
    auto v = onnxrules::eval(*e, env);
    if (!v)
      return where(n, fmt::format("{}: {}", what, llvm::toString(v.takeError())));
    if (v->kind != Value::Kind::Num || v->num != std::floor(v->num))
      return where(n, fmt::format("{} is {}, not an integer (an attribute the translation "
                                  "needs is absent or out of range)",
                                  what, v->text()));
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
    std::string stepName =
        first ? name : fmt::format("{}_{}{}", name, s.op.substr(s.op[0] == '@'), k);
    first = false;
    std::string out;
    if (produces[k] >= 0) {
      if (produces[k] >= n.output_size())
        return where(n, fmt::format("the translation table's step produces output {}, which the "
                                    "node does not have",
                                    produces[k]));
      out = n.output(produces[k]);
    }
    if (s.op == "@reshape") {
      auto shape = onnxrules::eval(*s.shape, env);
      if (!shape)
        return where(n, "the translation table's shape: " + llvm::toString(shape.takeError()));
      if (shape->kind != Value::Kind::List || inputs.size() != 1)
        return where(n, fmt::format("the translation table's reshape needs one input and a shape, "
                                    "not {}",
                                    shape->text()));
      std::vector<int64_t> to(shape->list.begin(), shape->list.end());
      const std::vector<int64_t> &from = shapeOf(inputs[0]);
      if (elementCount(to) != elementCount(from))
        return where(n, fmt::format("cannot reshape [{}] to [{}]", fmt::join(from, ", "),
                                    fmt::join(to, ", ")));
      TOFU_TRY(results[k], b_->reshape(stepName, inputs[0], from, to, out));
      prev = results[k];
      continue;
    }
    if (s.op == "@transpose") {
      auto perm = onnxrules::eval(*s.perm, env);
      if (!perm)
        return where(n, "the translation table's perm: " + llvm::toString(perm.takeError()));
      const std::vector<int64_t> p(perm->list.begin(), perm->list.end());
      if (perm->kind != Value::Kind::List || inputs.size() != 1 ||
          !isPermutation(p, shapeOf(inputs[0]).size()))
        return where(n, fmt::format("the translation table's transpose needs one input and a "
                                    "permutation of its axes, not {}",
                                    perm->text()));
      TOFU_TRY(results[k], b_->transpose(stepName, inputs[0], p, out));
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
          return where(n,
                       "the translation table's broadcast shape: " + llvm::toString(t.takeError()));
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
          TOFU_TRY(b, b_->broadcastTo(stepName + "_b", b, suffixShape));
          trailing = true;
          op = s.trailingOp;
          groups = {{"p", int64_t(target.size() - bs.size())}, {"i", int64_t(bs.size())}};
        }
      }
      if (!trailing)
        for (int p : s.broadcast)
          TOFU_TRY(inputs[p],
                   b_->broadcastTo(fmt::format("{}_in{}", stepName, p), inputs[p], target));
    }
    TOFU_TRY(results[k], b_->node(stepName, op, inputs, attrs, groups, out));
    prev = results[k];
  }
  if (result)
    *result = prev;
  return llvm::Error::success();
}

} // namespace onnximport
} // namespace tofu
