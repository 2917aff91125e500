// The ONNX translation table (ops/onnx_mapping.json): every operator it says the library
// describes imports, in every example node its "tests" give (one-node models built here,
// shapes checked against ONNX's inference); the examples also train (a training graph
// builds); the table's expression language evaluates as documented.
#include <fstream>
#include <set>

#include "graph/onnx_import.h"
#include "graph/onnx_rules.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

using nlohmann::json;

/// An attribute from its JSON example: integers, floats, strings and lists of them.
void setAttr(onnx::AttributeProto *a, const std::string &name, const json &v) {
  a->set_name(name);
  if (v.is_number_integer()) {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v.get<int64_t>());
  } else if (v.is_number_float()) {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v.get<float>());
  } else if (v.is_string()) {
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v.get<std::string>());
  } else if (v.is_array() && !v.empty() && v[0].is_string()) {
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const json &x : v)
      a->add_strings(x.get<std::string>());
  } else if (v.is_array()) {
    bool floats = false;
    for (const json &x : v)
      floats |= x.is_number_float();
    a->set_type(floats ? onnx::AttributeProto::FLOATS : onnx::AttributeProto::INTS);
    for (const json &x : v) {
      if (floats)
        a->add_floats(x.get<float>());
      else
        a->add_ints(x.get<int64_t>());
    }
  }
}

int32_t elemType(const json &spec) {
  if (spec.is_object()) {
    if (spec.value("int", false))
      return onnx::TensorProto::INT64;
    if (spec.value("bool", false))
      return onnx::TensorProto::BOOL;
    if (spec.value("uint8", false))
      return onnx::TensorProto::UINT8;
  }
  return onnx::TensorProto::FLOAT;
}

/// A model of one `op` node from a table example: {"inputs": [shape | {"shape", type} |
/// {"value", "shape"?, type} | "" (absent)], "attrs": {...}, "outputs": n,
/// "graph_outputs": [indices]}. Values become Constant nodes; shapes become graph inputs.
/// `domain` is the operator's (empty: ONNX's own), `opset` the model's.
onnx::ModelProto oneNode(const std::string &op, const json &test, const std::string &domain = "",
                         int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  if (!domain.empty()) {
    onnx::OperatorSetIdProto *o = m.add_opset_import();
    o->set_domain(domain);
    o->set_version(1);
  }
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name(op);
  onnx::NodeProto *n = nullptr;
  std::vector<std::string> inputs;
  unsigned k = 0;
  const json specs = test.value("inputs", json::array());
  for (const json &spec : specs) {
    std::string name = "x" + std::to_string(k++);
    if (spec.is_string()) {
      inputs.push_back("");
      continue;
    }
    inputs.push_back(name);
    int32_t type = elemType(spec);
    if (spec.is_object() && spec.contains("value")) {
      onnx::NodeProto *c = g->add_node();
      c->set_op_type("Constant");
      c->set_name("const_" + name);
      c->add_output(name);
      onnx::AttributeProto *a = c->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto *t = a->mutable_t();
      t->set_data_type(type);
      std::vector<int64_t> shape = spec.contains("shape")
                                       ? spec["shape"].get<std::vector<int64_t>>()
                                       : std::vector<int64_t>{int64_t(spec["value"].size())};
      for (int64_t d : shape)
        t->add_dims(d);
      for (const json &v : spec["value"]) {
        if (type == onnx::TensorProto::FLOAT)
          t->add_float_data(v.get<float>());
        else if (type == onnx::TensorProto::INT64)
          t->add_int64_data(v.get<int64_t>());
        else
          t->add_int32_data(v.get<int32_t>());
      }
      continue;
    }
    std::vector<int64_t> shape = spec.is_array() ? spec.get<std::vector<int64_t>>()
                                                 : spec["shape"].get<std::vector<int64_t>>();
    onnx::ValueInfoProto *v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    auto *s = v->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int64_t d : shape)
      s->add_dim()->set_dim_value(d);
  }
  n = g->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name("n");
  for (const std::string &i : inputs)
    n->add_input(i);
  int outputs = test.value("outputs", 1);
  for (int o = 0; o < outputs; ++o)
    n->add_output("y" + std::to_string(o));
  const json attrs = test.value("attrs", json::object());
  for (const auto &[name, value] : attrs.items())
    setAttr(n->add_attribute(), name, value);
  // The outputs' types and shapes from ONNX's own inference.
  onnx::shape_inference::InferShapes(m);
  std::vector<int> declared;
  if (test.contains("graph_outputs"))
    declared = test["graph_outputs"].get<std::vector<int>>();
  else
    for (int o = 0; o < outputs; ++o)
      declared.push_back(o);
  for (int o : declared) {
    std::string name = "y" + std::to_string(o);
    bool found = false;
    for (const onnx::ValueInfoProto &v : g->value_info())
      if (v.name() == name) {
        *g->add_output() = v;
        found = true;
      }
    if (!found) { // ONNX's inference left it out: a float of unknown shape
      onnx::ValueInfoProto *v = g->add_output();
      v->set_name(name);
      v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    }
  }
  return m;
}

json table() {
  std::ifstream in("ops/onnx_mapping.json");
  json j;
  in >> j;
  return j;
}

TEST(OnnxTable, EveryDescribedOperatorImportsItsExamples) {
  json t = table();
  unsigned described = 0, examples = 0;
  for (const auto &[op, entry] : t["ops"].items()) {
    if (!entry.contains("tdl"))
      continue;
    ++described;
    ASSERT_TRUE(entry.contains("tests") && !entry["tests"].empty())
        << op << ": a described operator needs an example under \"tests\"";
    for (const json &test : entry["tests"]) {
      ++examples;
      onnx::ModelProto m = oneNode(op, test, entry.value("domain", ""), entry.value("opset", 17));
      std::string bytes;
      ASSERT_TRUE(m.SerializeToString(&bytes));
      OnnxImportOptions options;
      options.dataInputs = 99; // every graph input is data: nothing here is a weight
      auto g = importOnnxBytes(bytes, op, testLibrary(), options);
      if (!g) {
        ADD_FAILURE() << op << " " << test.dump() << ": " << llvm::toString(g.takeError());
        continue;
      }
      // Every graph output is produced, with ONNX's inferred shape (checkGraph compared).
      for (const std::string &o : g->outputs) {
        const TensorInfo *info = g->tensor(o);
        ASSERT_TRUE(info && info->shapeKnown) << op << ": " << o;
      }
    }
  }
  EXPECT_GT(described, 130u);
  EXPECT_GE(examples, described);
}

TEST(OnnxTable, ExamplesTrainWhereTheyAreDifferentiable) {
  // The float examples whose inputs become weights build a training graph: the grad
  // clauses of the ops the rules pick exist (e.g. LayerNormalization, Conv2dGrouped).
  json t = table();
  for (const std::string op : {"Conv",        "ConvTranspose", "LayerNormalization",
                               "Gemm",        "MatMul",        "BatchNormalization",
                               "PRelu",       "Softmax",       "MaxPool",
                               "AveragePool", "Pad",           "Transpose",
                               "Expand",      "Where",         "Split",
                               "Clip",        "HardSwish",     "HardSigmoid",
                               "ReduceMean",  "Concat",        "Tile",
                               "LSTM",        "GRU",           "RNN",
                               "Einsum"}) {
    const json &test = t["ops"][op]["tests"][0];
    onnx::ModelProto m = oneNode(op, test);
    std::string bytes;
    ASSERT_TRUE(m.SerializeToString(&bytes));
    auto g = importOnnxBytes(bytes, op, testLibrary());
    if (!g) {
      ADD_FAILURE() << op << ": " << llvm::toString(g.takeError());
      continue;
    }
    if (g->outputs.size() > 1)
      g->outputs.resize(1);
    auto loss = addLoss(*g, testLibrary());
    if (!loss) {
      ADD_FAILURE() << op << ": " << llvm::toString(loss.takeError());
      continue;
    }
    auto tg = buildTrainingGraph(*g, *loss, testLibrary(), Optimizer::SGD);
    EXPECT_TRUE(static_cast<bool>(tg)) << op << ": " << (tg ? "" : llvm::toString(tg.takeError()));
  }
}

TEST(OnnxTable, RefusalsNameTheReason) {
  struct Case {
    std::string op;
    json test;
    std::string reason;
  };
  std::vector<Case> cases = {
      {"MaxPool",
       {{"inputs", {{1, 3, 8}}}, {"attrs", {{"kernel_shape", {2}}}}, {"outputs", 2}},
       "its Indices output is not translated"},
      {"Pad",
       {{"inputs", {{1, 2, 4, 4}, {{"value", {0, 0, 1, 1, 0, 0, 1, 1}}, {"int", true}}}},
        {"attrs", {{"mode", "wrap"}}}},
       "mode 'wrap' is not translated"},
      {"TopK",
       {{"inputs", {{3, 6}, {{"value", {2}}, {"int", true}}}},
        {"attrs", {{"sorted", 0}}},
        {"outputs", 2}},
       "only sorted = 1 is translated"},
      {"Resize",
       {{"inputs", {{1, 2, 3, 4}, "", {{"value", {1.0, 1.0, 2.0, 2.0}}}}},
        {"attrs", {{"mode", "linear"}, {"coordinate_transformation_mode", "tf_crop_and_resize"}}}},
       "tf_crop_and_resize needs a constant roi of 8 values"},
      {"Trilu", json::parse(R"({"inputs": [[4, 5], {"shape": [], "int": true}]})"),
       "its offset k must be a constant"},
  };
  for (const Case &c : cases) {
    std::string bytes;
    ASSERT_TRUE(oneNode(c.op, c.test).SerializeToString(&bytes));
    auto g = importOnnxBytes(bytes, c.op, testLibrary());
    ASSERT_FALSE(static_cast<bool>(g)) << c.op;
    std::string msg = llvm::toString(g.takeError());
    EXPECT_NE(msg.find("node 'n' (ONNX " + c.op + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.reason), std::string::npos) << msg;
  }
}

/// An environment with a few names, for the expression language alone.
class TestEnv : public onnxrules::Env {
public:
  onnxrules::Value name(const std::string &id) override {
    if (id == "pads")
      return onnxrules::Value::ofList({1, 2, 3, 4});
    if (id == "rank")
      return onnxrules::Value::number(4);
    if (id == "mode")
      return onnxrules::Value::string("CRD");
    return {};
  }
  std::optional<llvm::Expected<onnxrules::Value>>
  call(const std::string &, const std::vector<onnxrules::Value> &) override {
    return std::nullopt;
  }
};

std::string evalText(const std::string &text) {
  auto e = onnxrules::parse(text);
  if (!e)
    return "parse error: " + llvm::toString(e.takeError());
  TestEnv env;
  auto v = onnxrules::eval(**e, env);
  if (!v)
    return "error: " + llvm::toString(v.takeError());
  return v->text();
}

TEST(OnnxTable, ExpressionLanguage) {
  EXPECT_EQ(evalText("1 + 2 * 3"), "7");
  EXPECT_EQ(evalText("(1 + 2) * 3 - -1"), "10");
  EXPECT_EQ(evalText("pads[1] + pads[-1]"), "6");
  EXPECT_EQ(evalText("pads[7]"), "undefined");
  EXPECT_EQ(evalText("pads[7] ?? 9"), "9");
  EXPECT_EQ(evalText("strides[0] ?? 1"), "1");
  EXPECT_EQ(evalText("mode == 'CRD' ? 1 : 2"), "1");
  EXPECT_EQ(evalText("rank >= 4 && !(rank < 2)"), "1");
  EXPECT_EQ(evalText("len(pads) == 4 || missing"), "1");
  EXPECT_EQ(evalText("sum(take(pads, 2))"), "3");
  EXPECT_EQ(evalText("drop(pads, 3)"), "[4]");
  EXPECT_EQ(evalText("range(3) * 2 + 1"), "[1, 3, 5]");
  EXPECT_EQ(evalText("[0] + range(2)"), "[0, 0, 1]");
  EXPECT_EQ(evalText("max(pads) - min(pads)"), "3");
  EXPECT_EQ(evalText("-7 % 3"), "2");
  EXPECT_EQ(evalText("floor(7 / 2)"), "3");
  EXPECT_EQ(evalText("contains(pads, 3)"), "1");
  EXPECT_EQ(evalText("sorted([3, 1, 2])"), "[1, 2, 3]");
  EXPECT_EQ(evalText("defined(nothing)"), "0");
  EXPECT_NE(evalText("1 +").find("column 4"), std::string::npos);
  EXPECT_NE(evalText("'abc").find("unterminated"), std::string::npos);
  EXPECT_NE(evalText("mode + 1").find("error"), std::string::npos);
  EXPECT_NE(evalText("nosuch(1)").find("unknown function"), std::string::npos);
}

TEST(OnnxTable, TableErrorsNameTheOperator) {
  const OpLibrary &lib = testLibrary();
  auto load = [&](const std::string &text) {
    std::string path = ::testing::TempDir() + "/table.json";
    std::ofstream(path) << text;
    auto t = onnxrules::Table::load(path, lib, {"reshape"}, {"rank", "padb"});
    return t ? std::string("ok") : llvm::toString(t.takeError());
  };
  EXPECT_EQ(
      load(R"({"opset": 17, "ops": {"Relu": {"tdl": ["Relu"], "translate": {"op": "Relu"}}}})"),
      "ok");
  EXPECT_NE(load(R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"op": "Nope"}}}})")
                .find("Relu: the rule uses op 'Nope'"),
            std::string::npos);
  EXPECT_NE(load(R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"op": "Tanh"}}}})")
                .find("which 'tdl' does not list"),
            std::string::npos);
  EXPECT_NE(
      load(
          R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"op": "Relu", "attrs": {"a": "1 +"}}}}})")
          .find("column"),
      std::string::npos);
  EXPECT_NE(load(R"({"ops": {"Relu": {"tdl": ["Relu"]}}})").find("neither"), std::string::npos);
  // A misspelled function fails when the table loads, not when a model first reaches it.
  EXPECT_EQ(
      load(
          R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"when": "rank(0) == 2 && max(padb(0), 1) > 0", "op": "Relu"}}}})"),
      "ok");
  EXPECT_NE(
      load(
          R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"when": "1 + rnak(0) == 2", "op": "Relu"}}}})")
          .find("unknown function rnak()"),
      std::string::npos);
  EXPECT_NE(load(R"({"ops": {"Relu": {"handler": "nope"}}})").find("no importer handler 'nope'"),
            std::string::npos);
  EXPECT_NE(
      load(R"({"ops": {"Relu": {"tdl": ["Relu"], "translate": {"op": "Relu", "colour": 1}}}})")
          .find("unknown"),
      std::string::npos);
}

} // namespace
} // namespace tofu
