// Control flow (If, Loop, Scan) expanded into the nodes it runs, where the import knows how
// it goes. TDL describes computations of static shape, and control flow is not one; but an
// If whose condition is known at import runs one branch, a Loop whose trip count is known
// (and whose condition stays as given) runs its body that many times, and a Scan runs its
// body once per entry of its scan axis, whose extent is a shape. So:
// - the import decides (Importer::controlFlowDecision): the condition and the trip count
//   from valueOf (constants, the inputs given to --infer and what they determine), a Scan's
//   length from its inputs' shapes; where it cannot, the node is refused saying why;
// - the model is rewritten (expandControlFlow): the If becomes its branch's nodes, the Loop
//   and the Scan their body's nodes once per iteration (each iteration's names made unique),
//   scan inputs sliced by Gather and scan outputs stacked by Unsqueeze and Concat;
// - and the rewritten model is imported again from the start (importExpanded), so ONNX's
//   shape inference and the checker see the expanded nodes as any others. Nested control
//   flow comes to the top one level per pass.
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tofu {
namespace onnximport {

namespace {

/// The graph attribute `name` of `n`, or null.
const onnx::GraphProto *graphAttr(const onnx::NodeProto &n, const std::string &name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name && a.has_g())
      return &a.g();
  return nullptr;
}

/// Where a Loop body's condition output comes from, through Identity nodes: "" when it is
/// the body's condition input (passed on unchanged), else the value it ends at: an outer
/// value, or a Constant node of the body (`constant` then holds its value). Nullopt when the
/// body computes it.
std::optional<std::string> conditionSource(const onnx::GraphProto &body,
                                           std::optional<double> *constant) {
  if (body.input_size() < 2 || body.output_size() < 1)
    return std::nullopt;
  std::string c = body.output(0).name();
  for (int hops = 0; hops <= body.node_size(); ++hops) {
    if (c == body.input(1).name())
      return "";
    const onnx::NodeProto *producer = nullptr;
    for (const onnx::NodeProto &n : body.node())
      for (const std::string &o : n.output())
        if (o == c)
          producer = &n;
    if (!producer) {
      for (const onnx::ValueInfoProto &in : body.input())
        if (in.name() == c)
          return std::nullopt; // another body input: a loop-carried value
      return c;
    }
    if (producer->op_type() == "Identity" && producer->input_size() == 1) {
      c = producer->input(0);
      continue;
    }
    if (producer->op_type() == "Constant")
      for (const onnx::AttributeProto &a : producer->attribute())
        if (a.name() == "value" && a.has_t())
          if (auto v = constOf(a.t()); v && v->size() == 1) {
            *constant = v->v[0];
            return c;
          }
    return std::nullopt;
  }
  return std::nullopt;
}

/// Every name a graph and the graphs nested in it use.
void collectNames(const onnx::GraphProto &g, std::set<std::string> &names) {
  for (const auto *values : {&g.input(), &g.output(), &g.value_info()})
    for (const onnx::ValueInfoProto &v : *values)
      names.insert(v.name());
  for (const onnx::TensorProto &t : g.initializer())
    names.insert(t.name());
  for (const onnx::NodeProto &n : g.node()) {
    names.insert(n.input().begin(), n.input().end());
    names.insert(n.output().begin(), n.output().end());
    if (!n.name().empty())
      names.insert(n.name());
    for (const onnx::AttributeProto &a : n.attribute()) {
      if (a.has_g())
        collectNames(a.g(), names);
      for (const onnx::GraphProto &sub : a.graphs())
        collectNames(sub, names);
    }
  }
}

/// References to renamed values inside a graph nested in an inlined one: its nodes' inputs
/// and its outputs (it defines no name of its own that `rename` holds: ONNX names are not
/// shadowed).
void renameReferences(onnx::GraphProto &g, const std::map<std::string, std::string> &rename) {
  auto apply = [&](std::string *s) {
    if (auto it = rename.find(*s); it != rename.end())
      *s = it->second;
  };
  for (onnx::NodeProto &n : *g.mutable_node()) {
    for (std::string &in : *n.mutable_input())
      apply(&in);
    for (onnx::AttributeProto &a : *n.mutable_attribute()) {
      if (a.has_g())
        renameReferences(*a.mutable_g(), rename);
      for (onnx::GraphProto &sub : *a.mutable_graphs())
        renameReferences(sub, rename);
    }
  }
  for (onnx::ValueInfoProto &v : *g.mutable_output())
    apply(v.mutable_name());
}

/// Builds the nodes that replace one control-flow node.
class Expander {
public:
  Expander(std::set<std::string> &names, int opset) : names_(names), opset_(opset) {}

  std::vector<onnx::NodeProto> nodes;
  std::vector<onnx::TensorProto> initializers;

  /// A name no value of the model has, from `base`.
  std::string fresh(const std::string &base) {
    std::string name = base;
    for (unsigned i = 1; names_.count(name); ++i)
      name = fmt::format("{}_{}", base, i);
    names_.insert(name);
    return name;
  }

  onnx::NodeProto &add(const std::string &op, std::vector<std::string> in,
                       std::vector<std::string> out) {
    onnx::NodeProto &n = nodes.emplace_back();
    n.set_op_type(op);
    n.set_name(fresh(prefix_ + op));
    for (const std::string &i : in)
      n.add_input(i);
    for (const std::string &o : out)
      n.add_output(o);
    return n;
  }

  static void intsAttribute(onnx::NodeProto &n, const std::string &name,
                            std::vector<int64_t> values) {
    onnx::AttributeProto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : values)
      a->add_ints(v);
  }
  static void intAttribute(onnx::NodeProto &n, const std::string &name, int64_t value) {
    onnx::AttributeProto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }

  /// An integer (int64 or bool) constant: a scalar, or a vector when `vector`. It is an
  /// initializer (integer initializers are constants to the import), since a Constant node
  /// holds only floats before opset 9.
  std::string constant(const std::vector<int64_t> &values, bool vector,
                       int32_t type = onnx::TensorProto::INT64) {
    onnx::TensorProto &t = initializers.emplace_back();
    t.set_name(fresh(prefix_ + "const"));
    t.set_data_type(type);
    if (vector)
      t.add_dims(int64_t(values.size()));
    for (int64_t v : values) {
      if (type == onnx::TensorProto::INT64)
        t.add_int64_data(v);
      else
        t.add_int32_data(int32_t(v));
    }
    return t.name();
  }

  /// Entry `index` of `x` along `axis`, the axis removed.
  std::string entry(const std::string &x, int64_t index, int64_t axis) {
    onnx::NodeProto &n = add("Gather", {x, constant({index}, false)}, {fresh(prefix_ + "entry")});
    intAttribute(n, "axis", axis);
    return n.output(0);
  }

  /// `x` with a new axis of extent 1 at `axis` (into `out`, or a fresh name).
  std::string unsqueeze(const std::string &x, int64_t axis, std::string out = "") {
    if (out.empty())
      out = fresh(prefix_ + "unsqueezed");
    if (opset_ >= 13) {
      add("Unsqueeze", {x, constant({axis}, true)}, {out});
    } else {
      onnx::NodeProto &n = add("Unsqueeze", {x}, {out});
      intsAttribute(n, "axes", {axis});
    }
    return out;
  }

  /// `parts` stacked along a new axis `axis`, into `out`.
  void stack(const std::vector<std::string> &parts, int64_t axis, const std::string &out) {
    if (parts.size() == 1) {
      unsqueeze(parts[0], axis, out);
      return;
    }
    std::vector<std::string> lifted;
    for (const std::string &p : parts)
      lifted.push_back(unsqueeze(p, axis));
    onnx::NodeProto &n = add("Concat", lifted, {out});
    intAttribute(n, "axis", axis);
  }

  /// `from` under the name `to` (nothing when they are one name, or `to` is not wanted).
  void bindOutput(const std::string &from, const std::string &to) {
    if (!to.empty() && from != to)
      add("Identity", {from}, {to});
  }

  /// The nodes of `body` once, each of its values renamed under `prefix` (unique), its inputs
  /// bound to the values `bind` names and its initializers made constants (integer ones
  /// initializers, the others Constant nodes). Output i
  /// becomes `finals[i]` where that is not empty. Returns the names of its outputs.
  std::vector<std::string> inlineGraph(const onnx::GraphProto &body,
                                       const std::map<std::string, std::string> &bind,
                                       const std::string &prefix,
                                       const std::vector<std::string> &finals) {
    const std::string saved = prefix_;
    prefix_ = prefix;
    std::map<std::string, std::string> rename = bind;
    for (const onnx::TensorProto &t : body.initializer()) {
      if (isIntType(t.data_type())) {
        onnx::TensorProto &i = initializers.emplace_back(t);
        i.set_name(fresh(prefix + t.name()));
        rename[t.name()] = i.name();
        continue;
      }
      onnx::NodeProto &c = add("Constant", {}, {fresh(prefix + t.name())});
      onnx::AttributeProto *a = c.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = t;
      a->mutable_t()->clear_name();
      rename[t.name()] = c.output(0);
    }
    std::set<std::string> produced;
    for (const onnx::NodeProto &n : body.node())
      produced.insert(n.output().begin(), n.output().end());
    std::map<std::string, int> uses;
    for (const onnx::ValueInfoProto &o : body.output())
      ++uses[o.name()];
    // An output a body node produces, once, takes its final name directly.
    for (int i = 0; i < body.output_size(); ++i) {
      const std::string &o = body.output(i).name();
      if (size_t(i) < finals.size() && !finals[size_t(i)].empty() && produced.count(o) &&
          uses[o] == 1 && !rename.count(o))
        rename[o] = finals[size_t(i)];
    }
    for (const onnx::NodeProto &n : body.node())
      for (const std::string &o : n.output())
        if (!o.empty() && !rename.count(o))
          rename[o] = fresh(prefix + o);
    for (const onnx::NodeProto &n : body.node()) {
      onnx::NodeProto &copy = nodes.emplace_back(n);
      copy.set_name(fresh(prefix + (n.name().empty() ? n.op_type() : n.name())));
      for (std::string &in : *copy.mutable_input())
        if (auto it = rename.find(in); it != rename.end())
          in = it->second;
      for (std::string &out : *copy.mutable_output())
        if (!out.empty())
          out = rename.at(out);
      for (onnx::AttributeProto &a : *copy.mutable_attribute()) {
        if (a.has_g())
          renameReferences(*a.mutable_g(), rename);
        for (onnx::GraphProto &sub : *a.mutable_graphs())
          renameReferences(sub, rename);
      }
    }
    std::vector<std::string> outs;
    for (int i = 0; i < body.output_size(); ++i) {
      const std::string &o = body.output(i).name();
      auto it = rename.find(o);
      std::string name = it != rename.end() ? it->second : o;
      if (size_t(i) < finals.size() && !finals[size_t(i)].empty() && name != finals[size_t(i)]) {
        bindOutput(name, finals[size_t(i)]);
        name = finals[size_t(i)];
      }
      outs.push_back(name);
    }
    prefix_ = saved;
    return outs;
  }

  /// A Scan's body run over `length` entries of its scan inputs (`scanIn`, each along its
  /// axis and direction), its state threaded through. Returns the final states and, per scan
  /// output, its entries in output order (the direction applied).
  struct ScanRun {
    std::vector<std::string> states;
    std::vector<std::vector<std::string>> scans;
  };
  ScanRun unrollScan(const onnx::GraphProto &body, std::vector<std::string> states,
                     const std::vector<std::string> &scanIn, const std::vector<int64_t> &axes,
                     const std::vector<int64_t> &dirs, const std::vector<int64_t> &outDirs,
                     int64_t length, const std::string &prefix,
                     const std::vector<std::string> &finalStates) {
    const size_t nState = states.size();
    ScanRun r;
    r.scans.resize(size_t(body.output_size()) - nState);
    for (int64_t t = 0; t < length; ++t) {
      const std::string it = enter(fmt::format("{}{}_", prefix, t));
      std::map<std::string, std::string> bind;
      for (size_t j = 0; j < nState; ++j)
        bind[body.input(int(j)).name()] = states[j];
      for (size_t j = 0; j < scanIn.size(); ++j) {
        const int64_t index = j < dirs.size() && dirs[j] ? length - 1 - t : t;
        bind[body.input(int(nState + j)).name()] =
            entry(scanIn[j], index, j < axes.size() ? axes[j] : 0);
      }
      std::vector<std::string> finals;
      if (t + 1 == length)
        finals = finalStates;
      std::vector<std::string> outs = inlineGraph(body, bind, it, finals);
      states.assign(outs.begin(), outs.begin() + long(nState));
      for (size_t k = 0; k < r.scans.size(); ++k)
        r.scans[k].push_back(outs[nState + k]);
    }
    for (size_t k = 0; k < r.scans.size(); ++k)
      if (k < outDirs.size() && outDirs[k])
        std::reverse(r.scans[k].begin(), r.scans[k].end());
    r.states = states;
    return r;
  }

  void setPrefix(const std::string &p) { prefix_ = p; }
  /// Names what is added next under a fresh prefix from `base` (an iteration's), which it
  /// returns.
  std::string enter(const std::string &base) {
    prefix_ = fresh(base);
    return prefix_;
  }

private:
  std::set<std::string> &names_;
  int opset_;
  std::string prefix_;
};

/// The nodes that replace control-flow node `n` as `e` decided.
void expandNode(const onnx::NodeProto &n, const Expansion &e, Expander &x, int opset) {
  const std::string prefix =
      x.enter((n.name().empty() ? n.op_type() + "_" + n.output(0) : n.name()) + "/");
  std::vector<std::string> outputs(n.output().begin(), n.output().end());
  if (n.op_type() == "SequenceMap") {
    const onnx::GraphProto &body = *graphAttr(n, "body");
    std::vector<std::vector<std::string>> parts(size_t(body.output_size()));
    for (int64_t i = 0; i < e.iterations; ++i) {
      const std::string it = x.enter(fmt::format("{}{}_", prefix, i));
      std::map<std::string, std::string> bind;
      for (int k = 0; k < n.input_size() && k < body.input_size(); ++k) {
        std::string value = n.input(k);
        if (size_t(k) < e.sequenceInputs.size() && e.sequenceInputs[size_t(k)]) {
          value = x.fresh(it + "element");
          x.add("SequenceAt", {n.input(k), x.constant({i}, false)}, {value});
        }
        bind[body.input(k).name()] = value;
      }
      std::vector<std::string> outs = x.inlineGraph(body, bind, it, {});
      for (size_t k = 0; k < parts.size(); ++k)
        parts[k].push_back(outs[k]);
    }
    x.setPrefix(prefix);
    for (size_t k = 0; k < parts.size(); ++k) {
      if (outputs[k].empty())
        continue;
      if (parts[k].empty()) {
        onnx::NodeProto &empty = x.add("SequenceEmpty", {}, {outputs[k]});
        Expander::intAttribute(empty, "dtype",
                               body.output(int(k)).type().tensor_type().elem_type());
      } else {
        x.add("SequenceConstruct", parts[k], {outputs[k]});
      }
    }
    return;
  }
  if (n.op_type() == "If") {
    const onnx::GraphProto *branch = graphAttr(n, e.thenBranch ? "then_branch" : "else_branch");
    x.inlineGraph(*branch, {}, prefix, outputs);
    return;
  }
  const onnx::GraphProto &body = *graphAttr(n, "body");
  if (n.op_type() == "Loop") {
    const size_t nState = size_t(n.input_size()) - 2;
    std::vector<std::string> states(n.input().begin() + 2, n.input().end());
    const std::string cond =
        n.input(1).empty() ? x.constant({1}, false, onnx::TensorProto::BOOL) : n.input(1);
    std::vector<std::vector<std::string>> scans(size_t(body.output_size()) - 1 - nState);
    for (int64_t i = 0; i < e.iterations; ++i) {
      const std::string it = x.enter(fmt::format("{}{}_", prefix, i));
      std::map<std::string, std::string> bind;
      if (!body.input(0).name().empty())
        bind[body.input(0).name()] = x.constant({i}, false);
      if (!body.input(1).name().empty())
        bind[body.input(1).name()] = cond;
      for (size_t j = 0; j < nState; ++j) {
        // A state the body declares optional but produces plain (a sequence it builds) is
        // wrapped again for the next iteration, as the Loop carries it.
        std::string state = states[j];
        if (i > 0 && body.input(int(2 + j)).type().has_optional_type() &&
            !body.output(int(1 + j)).type().has_optional_type()) {
          state = x.fresh(it + "optional");
          x.add("Optional", {states[j]}, {state});
        }
        bind[body.input(int(2 + j)).name()] = state;
      }
      std::vector<std::string> finals;
      if (i + 1 == e.iterations) {
        finals.push_back("");
        finals.insert(finals.end(), outputs.begin(), outputs.begin() + long(nState));
      }
      std::vector<std::string> outs = x.inlineGraph(body, bind, it, finals);
      states.assign(outs.begin() + 1, outs.begin() + 1 + long(nState));
      for (size_t k = 0; k < scans.size(); ++k)
        scans[k].push_back(outs[1 + nState + k]);
    }
    x.setPrefix(prefix);
    if (e.iterations == 0)
      for (size_t j = 0; j < nState; ++j)
        x.bindOutput(states[j], outputs[j]);
    for (size_t k = 0; k < scans.size(); ++k)
      if (!outputs[nState + k].empty())
        x.stack(scans[k], 0, outputs[nState + k]);
    return;
  }
  // Scan.
  const int64_t numScan = intAttr(n, "num_scan_inputs").value_or(0);
  const bool batched = opset < 9;
  const size_t first = batched ? 1 : 0;
  const size_t nState = size_t(n.input_size()) - first - size_t(numScan);
  const size_t nScanOut = size_t(body.output_size()) - nState;
  std::vector<std::string> states(n.input().begin() + long(first),
                                  n.input().begin() + long(first + nState));
  std::vector<std::string> scanIn(n.input().begin() + long(first + nState), n.input().end());
  const std::vector<int64_t> dirs =
      intsAttr(n, batched ? "directions" : "scan_input_directions", {});
  const std::vector<int64_t> outDirs = intsAttr(n, "scan_output_directions", {});
  std::vector<int64_t> outAxes = intsAttr(n, "scan_output_axes", {});
  outAxes.resize(nScanOut, 0);
  if (!batched) {
    std::vector<std::string> finals(outputs.begin(), outputs.begin() + long(nState));
    Expander::ScanRun r = x.unrollScan(body, states, scanIn, e.inputAxes, dirs, outDirs,
                                       e.iterations, prefix, finals);
    x.setPrefix(prefix);
    for (size_t k = 0; k < nScanOut; ++k)
      if (!outputs[nState + k].empty())
        x.stack(r.scans[k], outAxes[k], outputs[nState + k]);
    return;
  }
  // Opset 8: every state and scan input has a batch axis first; each batch entry is
  // scanned on its own (along axis 1, its axis 0 once the batch entry is taken) and the
  // results stacked along the batch axis.
  std::vector<std::vector<std::string>> finalStates(nState), scanOuts(nScanOut);
  for (int64_t b = 0; b < e.batch; ++b) {
    const std::string bp = x.enter(fmt::format("{}b{}_", prefix, b));
    std::vector<std::string> s, in;
    for (const std::string &st : states)
      s.push_back(x.entry(st, b, 0));
    for (const std::string &si : scanIn)
      in.push_back(x.entry(si, b, 0));
    Expander::ScanRun r = x.unrollScan(body, s, in, std::vector<int64_t>(in.size(), 0), dirs, {},
                                       e.iterations, bp, {});
    x.setPrefix(bp);
    for (size_t j = 0; j < nState; ++j)
      finalStates[j].push_back(r.states[j]);
    for (size_t k = 0; k < nScanOut; ++k) {
      const std::string stacked = x.fresh(bp + "scan");
      x.stack(r.scans[k], 0, stacked);
      scanOuts[k].push_back(stacked);
    }
  }
  x.setPrefix(prefix);
  for (size_t j = 0; j < nState; ++j)
    if (!outputs[j].empty())
      x.stack(finalStates[j], 0, outputs[j]);
  for (size_t k = 0; k < nScanOut; ++k)
    if (!outputs[nState + k].empty())
      x.stack(scanOuts[k], 0, outputs[nState + k]);
}

} // namespace

bool isControlFlow(const onnx::NodeProto &n) {
  return isDefaultDomain(n.domain()) && (n.op_type() == "If" || n.op_type() == "Loop" ||
                                         n.op_type() == "Scan" || n.op_type() == "SequenceMap");
}

llvm::Expected<Expansion> Importer::controlFlowDecision(const onnx::NodeProto &n, int index) {
  Expansion e;
  e.node = index;
  const std::string given = "a constant, or computed from constants and the inputs given "
                            "ahead (tofu-run --infer --input)";
  if (n.op_type() == "If") {
    const Const *c = valueOf(n.input(0));
    if (!c)
      return where(n, fmt::format("its condition '{}' is not known at import: an If is inlined "
                                  "where its condition is {}",
                                  n.input(0), given));
    if (c->size() != 1)
      return where(n, fmt::format("its condition '{}' has {} elements; it must have one",
                                  n.input(0), c->size()));
    e.thenBranch = c->v[0] != 0;
    return e;
  }
  const onnx::GraphProto *body = graphAttr(n, "body");
  if (!body)
    return where(n, "it has no body");
  if (n.op_type() == "SequenceMap") {
    // Its length is its first input's, a sequence the importer holds; the other inputs are
    // sequences of that length or tensors every iteration reads whole.
    int64_t length = -1;
    for (int k = 0; k < n.input_size(); ++k) {
      auto s = sequences_.find(n.input(k));
      e.sequenceInputs.push_back(s != sequences_.end());
      if (s == sequences_.end()) {
        if (k == 0)
          return where(
              n, fmt::format("its input '{}' is not a sequence the importer holds", n.input(0)));
        continue;
      }
      if (length >= 0 && int64_t(s->second.size()) != length)
        return where(n, fmt::format("its sequences have lengths {} and {}; they must agree", length,
                                    s->second.size()));
      length = int64_t(s->second.size());
    }
    e.iterations = length;
  } else if (n.op_type() == "Loop") {
    if (n.input(0).empty())
      return where(n, "it has no trip count (a while loop); a Loop is unrolled where its trip "
                      "count is known at import and its condition stays as given");
    const Const *m = valueOf(n.input(0));
    if (!m || m->size() != 1)
      return where(n, fmt::format("its trip count '{}' is not known at import: a Loop is "
                                  "unrolled where its trip count is {}",
                                  n.input(0), given));
    bool runs = true;
    if (n.input_size() > 1 && !n.input(1).empty()) {
      const Const *c = valueOf(n.input(1));
      if (!c || c->size() != 1)
        return where(n, fmt::format("its condition '{}' is not known at import: a Loop is "
                                    "unrolled where its condition is {}",
                                    n.input(1), given));
      runs = c->v[0] != 0;
    }
    // The loop runs its trip count where its body passes its condition on unchanged, or
    // sets it to a known true (a constant of the body or a known outer value).
    std::optional<double> bodyConstant;
    std::optional<std::string> source = conditionSource(*body, &bodyConstant);
    bool stays = source.has_value();
    if (stays && !source->empty()) {
      const Const *c = bodyConstant ? nullptr : valueOf(*source);
      stays = bodyConstant ? *bodyConstant != 0 : c && c->size() == 1 && c->v[0] != 0;
    }
    if (!stays)
      return where(n, fmt::format("its body computes the loop's condition ('{}'); a Loop is "
                                  "unrolled where its condition stays as given",
                                  body->output(0).name()));
    e.iterations = runs ? std::max<int64_t>(0, asInt(m->v[0])) : 0;
    const int scanOutputs = body->output_size() - 1 - (n.input_size() - 2);
    if (e.iterations == 0 && scanOutputs > 0)
      return where(n, "it runs no iteration, so its scan outputs are empty; Tofu's tensors are "
                      "not");
  } else {
    // Scan: its length is its scan inputs' extent along their axes.
    const bool batched = opset_ < 9;
    const int64_t numScan = intAttr(n, "num_scan_inputs").value_or(0);
    const int first = batched ? 1 : 0;
    const int nState = n.input_size() - first - int(numScan);
    if (numScan < 1 || nState < 0)
      return where(
          n, fmt::format("num_scan_inputs {} does not fit its {} inputs", numScan, n.input_size()));
    std::vector<int64_t> axes = intsAttr(n, "scan_input_axes", {});
    axes.resize(size_t(numScan), 0);
    int64_t length = -1;
    for (int j = 0; j < numScan; ++j) {
      const std::string &in = n.input(first + nState + j);
      auto s = facts_.shapes.find(in);
      if (s == facts_.shapes.end())
        return where(n, fmt::format("the shape of its scan input '{}' is not known", in));
      const int64_t rank = int64_t(s->second.size());
      int64_t axis = batched ? 1 : axes[size_t(j)];
      if (axis < 0)
        axis += rank;
      if (axis < 0 || axis >= rank)
        return where(n, fmt::format("scan input '{}' of rank {} has no axis {}", in, rank,
                                    batched ? 1 : axes[size_t(j)]));
      const int64_t extent = s->second[size_t(axis)];
      if (length >= 0 && extent != length)
        return where(n, fmt::format("its scan inputs have lengths {} and {}; they must agree",
                                    length, extent));
      length = extent;
      if (batched)
        e.batch = s->second[0];
      e.inputAxes.push_back(axes[size_t(j)]);
    }
    if (batched && !n.input(0).empty()) {
      const Const *lens = valueOf(n.input(0));
      if (!lens)
        return where(n, fmt::format("its sequence_lens '{}' are not known at import", n.input(0)));
      for (double l : lens->v)
        if (asInt(l) != length)
          return where(n, fmt::format("its sequence_lens hold {}, not the sequences' length {}; "
                                      "a Scan is unrolled over whole sequences",
                                      asInt(l), length));
    }
    if (length == 0)
      return where(n, "its scan inputs are empty; Tofu's tensors are not");
    e.iterations = length;
  }
  constexpr int64_t kMaxIterations = 4096, kMaxNodes = int64_t(1) << 18;
  const int64_t copies = e.iterations * std::max<int64_t>(1, e.batch);
  if (e.iterations > kMaxIterations || copies * std::max(1, body->node_size()) > kMaxNodes)
    return where(n, fmt::format("unrolled, its {} iteration{} would be {} copies of a body of {} "
                                "nodes; Tofu unrolls at most {} iterations and {} nodes",
                                e.iterations, e.iterations == 1 ? "" : "s", copies,
                                body->node_size(), kMaxIterations, kMaxNodes));
  return e;
}

llvm::Error expandControlFlow(onnx::ModelProto &model, const std::vector<Expansion> &expansions) {
  const int opset = defaultOpset(model);
  onnx::GraphProto *graph = model.mutable_graph();
  std::set<std::string> names;
  collectNames(*graph, names);
  std::map<int, const Expansion *> at;
  for (const Expansion &e : expansions) {
    if (e.node < 0 || e.node >= graph->node_size() || !isControlFlow(graph->node(e.node)))
      return stringError(fmt::format("internal: no control-flow node at index {}", e.node));
    at[e.node] = &e;
  }
  Expander x(names, opset);
  for (int i = 0; i < graph->node_size(); ++i) {
    auto it = at.find(i);
    if (it == at.end())
      x.nodes.push_back(graph->node(i));
    else
      expandNode(graph->node(i), *it->second, x, opset);
  }
  graph->clear_node();
  for (onnx::NodeProto &n : x.nodes)
    *graph->add_node() = std::move(n);
  for (onnx::TensorProto &t : x.initializers) {
    // Before IR version 4 every initializer is also a graph input.
    if (model.ir_version() < 4) {
      onnx::ValueInfoProto *v = graph->add_input();
      v->set_name(t.name());
      onnx::TypeProto_Tensor *type = v->mutable_type()->mutable_tensor_type();
      type->set_elem_type(t.data_type());
      onnx::TensorShapeProto *shape = type->mutable_shape();
      for (int64_t d : t.dims())
        shape->add_dim()->set_dim_value(d);
    }
    *graph->add_initializer() = std::move(t);
  }
  return llvm::Error::success();
}

llvm::Expected<Graph> importExpanded(onnx::ModelProto &model, const OpLibrary &lib,
                                     const onnxrules::Table &table,
                                     const OnnxImportOptions &options) {
  constexpr int kMaxPasses = 32;
  for (int pass = 0;; ++pass) {
    bool control = false;
    for (const onnx::NodeProto &n : model.graph().node())
      control |= isControlFlow(n);
    if (!control)
      return Importer(lib, table, options).run(model);
    // The import changes the model it reads (shapes given, inference): it reads a copy, and
    // the expansion rewrites the model as given.
    onnx::ModelProto work = model;
    Importer im(lib, table, options);
    llvm::Expected<Graph> g = im.run(work);
    if (im.expansions().empty())
      return g;
    if (g)
      return stringError("internal: an import with control flow to expand returned a graph");
    llvm::consumeError(g.takeError());
    if (pass + 1 == kMaxPasses)
      return stringError(
          fmt::format("control flow nested more than {} deep is not expanded", kMaxPasses));
    if (llvm::Error e = expandControlFlow(model, im.expansions()))
      return std::move(e);
  }
}

} // namespace onnximport
} // namespace tofu
