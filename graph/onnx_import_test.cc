// ONNX import of real exported models (tests/onnx, from tools/fixtures/export_onnx_fixtures.py):
// shapes agree with ONNX's shape inference, structure matches torchvision, bad files fail.
#include "graph/onnx_import.h"

#include <algorithm>
#include <fstream>
#include <functional>

#include "graph/onnx_import_internal.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "onnx/onnx_pb.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

const OpLibrary &library() { return testLibrary(); }

/// The convolutions of a graph and the elements of their weights.
std::pair<unsigned, int64_t> convolutions(const Graph &g) {
  unsigned n = 0;
  int64_t elements = 0;
  for (const Node &node : g.nodes())
    if (node.op == "Conv2d" || node.op == "Conv2dGrouped") {
      ++n;
      elements += g.tensor(node.inputs[1])->elements();
    }
  return {n, elements};
}

TEST(OnnxImport, TorchvisionResNetsImportAndShapeCheck) {
  // torch's eval-mode export folds batch normalisation into the convolutions; the
  // convolution weights are torchvision 0.14's: resnet18 20 convolutions, 11,166,912
  // weights; wide_resnet50_2 53 convolutions, 66,766,016 weights.
  struct Case {
    const char *file;
    unsigned convs;
    int64_t weights;
  };
  for (const Case &c : {Case{"tests/onnx/resnet18.onnx", 20, 11166912},
                        Case{"tests/onnx/wide_resnet50_2.onnx", 53, 66766016}}) {
    auto g = importOnnx(c.file, library());
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    EXPECT_EQ(convolutions(*g), std::make_pair(c.convs, c.weights)) << c.file;
    ASSERT_EQ(g->outputs.size(), 1u);
    EXPECT_EQ(g->tensor(g->outputs[0])->shape, (std::vector<int64_t>{1, 1000})) << c.file;
  }
}

TEST(OnnxImport, TrainingModeBatchNormsCarryTheirRunningStatistics) {
  // torchvision's resnet18 exported in training mode: 20 batch norms, each with a running
  // mean and variance (initializers) that a training step updates with PyTorch's momentum
  // and unbiased variance, and that evaluation normalises with.
  auto g = importOnnx("tests/onnx/resnet18_train.onnx", library());
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto count = [](const Graph &graph, const std::string &op) {
    return std::count_if(graph.nodes().begin(), graph.nodes().end(),
                         [&](const Node &n) { return n.op == op; });
  };
  EXPECT_EQ(count(*g, "batch_norm_train"), 20);
  EXPECT_EQ(count(*g, "bn_running_mean"), 20);
  EXPECT_EQ(count(*g, "bn_running_var_unbiased"), 20); // the producer is PyTorch
  EXPECT_EQ(count(*g, "bn_running_var"), 0);
  for (const Node &n : g->nodes())
    if (isRunningStatistic(n.op)) {
      EXPECT_TRUE(carriesState(*g, n)) << n.name;
      EXPECT_EQ(g->tensor(n.inputs[0])->role, TensorRole::OptimizerState) << n.inputs[0];
      EXPECT_NE(n.inputs[0].find(n.op == "bn_running_mean" ? ".running_mean" : ".running_var"),
                std::string::npos)
          << n.inputs[0];
    }
  // Training carries them: their updates are outputs of the training graph.
  auto withLoss = *g;
  auto loss = addLoss(withLoss, library());
  ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
  auto t = buildTrainingGraph(withLoss, *loss, library(), Optimizer::SGD);
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  for (const Node &n : t->nodes())
    if (isRunningStatistic(n.op))
      EXPECT_NE(std::find(t->outputs.begin(), t->outputs.end(), n.output), t->outputs.end())
          << n.name;
  // Evaluation drops the updates, and normalises with the statistics (running) or the
  // batch's own (batch), under the same node names.
  Graph running = *g, batch = *g;
  auto changed = evaluationGraph(running, library(), EvalNorm::Running);
  ASSERT_TRUE(static_cast<bool>(changed)) << llvm::toString(changed.takeError());
  EXPECT_EQ(*changed, 20u);
  EXPECT_EQ(count(running, "BatchNormalization"), 20);
  EXPECT_EQ(count(running, "batch_norm_train") + count(running, "bn_running_mean") +
                count(running, "bn_running_var_unbiased"),
            0);
  for (const Node &n : g->nodes())
    if (n.op == "batch_norm_train") {
      bool same = false;
      for (const Node &m : running.nodes())
        same |= m.name == n.name && m.op == "BatchNormalization" && m.output == n.output;
      EXPECT_TRUE(same) << n.name;
    }
  changed = evaluationGraph(batch, library(), EvalNorm::Batch);
  ASSERT_TRUE(static_cast<bool>(changed)) << llvm::toString(changed.takeError());
  EXPECT_EQ(*changed, 0u);
  EXPECT_EQ(count(batch, "batch_norm_train"), 20);
  EXPECT_EQ(count(batch, "bn_running_mean") + count(batch, "bn_running_var_unbiased"), 0);
}

TEST(OnnxImport, SymbolicBatchAndGemm) {
  OnnxImportOptions options;
  options.batch = 4;
  auto g = importOnnx("tests/onnx/mlp.onnx", library(), options);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->tensor("input")->role, TensorRole::Input);
  EXPECT_EQ(g->tensor("output")->shape, (std::vector<int64_t>{4, 10}));
  int64_t weights = 0;
  for (const TensorInfo &t : g->tensors())
    if (t.role == TensorRole::Weight)
      weights += t.elements();
  EXPECT_EQ(weights, 64 * 128 + 128 + 128 * 10 + 10);
}

TEST(OnnxImport, TransformerWithShapeSubgraphs) {
  // torch's export of a 2-layer encoder computes its reshapes from Shape/Gather/Concat
  // subgraphs and decomposes LayerNorm (ReduceMean, Sub, Pow, Sqrt, Div): the importer folds
  // the constants and translates the rest.
  auto g = importOnnx("tests/onnx/transformer.onnx", library());
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->tensor(g->outputs[0])->shape, (std::vector<int64_t>{2, 16, 64}));
  unsigned products = 0, softmaxes = 0;
  for (const Node &n : g->nodes()) {
    products += n.op.rfind("MatMul", 0) == 0;
    softmaxes += n.op == "Softmax";
  }
  EXPECT_EQ(softmaxes, 2u); // one attention per layer
  EXPECT_EQ(products, 12u); // 10 MatMul + 2 Gemm (the feed-forward's second linear)
}

TEST(OnnxImport, EveryFixtureTrains) {
  for (const char *file : {"tests/onnx/mlp.onnx", "tests/onnx/resnet18.onnx",
                           "tests/onnx/wide_resnet50_2.onnx", "tests/onnx/transformer.onnx"}) {
    auto g = importOnnx(file, library());
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    auto loss = addLoss(*g, library());
    ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
    auto t = buildTrainingGraph(*g, *loss, library(), Optimizer::SGD);
    ASSERT_TRUE(static_cast<bool>(t)) << file << ": " << llvm::toString(t.takeError());
    llvm::Error e = checkGraph(*t, library());
    EXPECT_FALSE(static_cast<bool>(e)) << file << ": " << llvm::toString(std::move(e));
    for (const TensorInfo &w : g->tensors()) {
      if (w.role == TensorRole::Weight) {
        EXPECT_TRUE(t->tensor(w.name + "_updated")) << file << ": " << w.name;
      }
    }
  }
}

TEST(OnnxImport, UntranslatedNodesAreNamed) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name("nonzero");
  onnx::ValueInfoProto *x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 3})
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  onnx::NodeProto *n = g->add_node();
  n->set_name("nz");
  n->set_op_type("NonZero");
  n->add_input("x");
  n->add_output("y");
  onnx::ValueInfoProto *y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  for (const char *d : {"rank", "count"})
    y->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param(d);
  std::string path = testing::TempDir() + "/nonzero.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  auto r = importOnnx(path, library());
  ASSERT_FALSE(static_cast<bool>(r));
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find("node 'nz' (ONNX NonZero): TDL cannot describe it (the output shape depends "
                     "on the data;"),
            std::string::npos)
      << msg;
}

// The importer's graph builder returns the error of each addition (no error kept aside for
// later), and records the shape of each node it adds for the translations after it.
TEST(OnnxImport, GraphBuilderReturnsEachError) {
  onnximport::ImportFacts facts;
  onnximport::GraphBuilder b(library(), facts);
  TensorInfo x;
  x.name = x.group = "x";
  x.shape = {2, 3};
  x.shapeKnown = true;
  x.role = TensorRole::Input;
  ASSERT_FALSE(static_cast<bool>(b.addTensor(x)));
  facts.shapes["x"] = {2, 3};
  auto y = b.node("relu", "Relu", {"x"});
  ASSERT_TRUE(static_cast<bool>(y)) << llvm::toString(y.takeError());
  EXPECT_EQ(facts.shapes[*y], (std::vector<int64_t>{2, 3}));
  auto r = b.reshape("r", *y, {2, 3}, {3, 1, 2}, "");
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(facts.shapes[*r], (std::vector<int64_t>{3, 1, 2}));
  auto t = b.transpose("t", *r, {2, 0, 1}, "out");
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(*t, "out");
  EXPECT_EQ(facts.shapes["out"], (std::vector<int64_t>{2, 3, 1}));

  auto unknownInput = b.node("lost", "Relu", {"nowhere"});
  ASSERT_FALSE(static_cast<bool>(unknownInput));
  EXPECT_NE(llvm::toString(unknownInput.takeError()).find("nowhere"), std::string::npos);
  auto unknownOp = b.node("odd", "NoSuchOp", {"x"});
  ASSERT_FALSE(static_cast<bool>(unknownOp));
  EXPECT_NE(llvm::toString(unknownOp.takeError()).find("NoSuchOp"), std::string::npos);
  auto empty = b.constant("empty", {2, 0}, {}, false);
  ASSERT_FALSE(static_cast<bool>(empty));
  EXPECT_NE(llvm::toString(empty.takeError()).find("empty"), std::string::npos);
  const size_t nodes = b.graph().nodes().size();
  auto slice = b.sliceAxis("s", "x", 1, 1, 2);
  ASSERT_TRUE(static_cast<bool>(slice)) << llvm::toString(slice.takeError());
  EXPECT_EQ(facts.shapes[*slice], (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.graph().nodes().size(), nodes + 1);
}

// A constant written at constant index tuples (Swin's shifted-window mask: slice assignments
// into zeros) is folded, ScatterND's reduction included, whatever the indices' last extent.
TEST(OnnxImport, ConstantScatterNDIsFolded) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto *g = m.mutable_graph();
  g->set_name("scatter");
  auto tensorInfo = [](onnx::ValueInfoProto *v, const char *name) {
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (int d : {3, 4})
      v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  };
  tensorInfo(g->add_input(), "x");
  auto constant = [&](const char *name, onnx::TensorProto::DataType type, std::vector<int64_t> dims,
                      std::vector<double> values) {
    onnx::NodeProto *n = g->add_node();
    n->set_op_type("Constant");
    n->add_output(name);
    onnx::AttributeProto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto *t = a->mutable_t();
    t->set_data_type(type);
    for (int64_t d : dims)
      t->add_dims(d);
    for (double v : values) {
      if (type == onnx::TensorProto::INT64)
        t->add_int64_data(static_cast<int64_t>(v));
      else
        t->add_float_data(static_cast<float>(v));
    }
  };
  constant("shape", onnx::TensorProto::INT64, {2}, {3, 4});
  constant("indices", onnx::TensorProto::INT64, {3, 2}, {0, 1, 0, 1, 2, -1});
  constant("updates", onnx::TensorProto::FLOAT, {3}, {5, 2, 7});
  onnx::NodeProto *ones = g->add_node();
  ones->set_op_type("ConstantOfShape");
  ones->add_input("shape");
  ones->add_output("ones");
  onnx::AttributeProto *value = ones->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_float_data(1);
  onnx::NodeProto *scatter = g->add_node();
  scatter->set_name("mask");
  scatter->set_op_type("ScatterND");
  for (const char *in : {"ones", "indices", "updates"})
    scatter->add_input(in);
  scatter->add_output("mask");
  onnx::AttributeProto *reduction = scatter->add_attribute();
  reduction->set_name("reduction");
  reduction->set_type(onnx::AttributeProto::STRING);
  reduction->set_s("add");
  onnx::NodeProto *add = g->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("mask");
  add->add_output("y");
  tensorInfo(g->add_output(), "y");
  std::string path = testing::TempDir() + "/scatter.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  auto r = importOnnx(path, library());
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  // ones, with 5 + 2 added at [0, 1] (the index given twice) and 7 at [2, -1] = [2, 3].
  std::vector<double> expected(12, 1.0);
  expected[1] += 5 + 2;
  expected[11] += 7;
  bool found = false;
  for (const auto &[name, values] : r->constants)
    found |= values == expected;
  EXPECT_TRUE(found) << "no folded constant holds the scattered values";
}

TEST(OnnxImport, BadFilesAreErrors) {
  auto missing = importOnnx("tests/onnx/no_such_file.onnx", library());
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "cannot open 'tests/onnx/no_such_file.onnx': No such file or directory");
  std::string junk = testing::TempDir() + "/junk.onnx";
  std::ofstream(junk) << "this is not a protobuf \xff\xfe";
  auto bad = importOnnx(junk, library());
  ASSERT_FALSE(static_cast<bool>(bad));
  std::string msg = llvm::toString(bad.takeError());
  EXPECT_NE(msg.find("is not an ONNX model"), std::string::npos) << msg;
}

/// A model of one opset-17 graph with float inputs of the given shapes.
/// A node of op `op` reading `in` and writing `out`, added to `g`.
onnx::NodeProto *addNode(onnx::GraphProto &g, const std::string &op, std::vector<std::string> in,
                         std::vector<std::string> out) {
  onnx::NodeProto *n = g.add_node();
  n->set_op_type(op);
  for (const std::string &i : in)
    n->add_input(i);
  for (const std::string &o : out)
    n->add_output(o);
  return n;
}

struct Bad {
  onnx::ModelProto m;
  onnx::GraphProto *g;
  Bad(std::vector<std::pair<std::string, std::vector<int64_t>>> inputs, int64_t opset = 17) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(opset);
    g = m.mutable_graph();
    g->set_name("bad");
    for (const auto &[name, dims] : inputs) {
      onnx::ValueInfoProto *x = g->add_input();
      x->set_name(name);
      x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims)
        x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
  onnx::NodeProto *node(const std::string &name, const std::string &op, std::vector<std::string> in,
                        std::vector<std::string> out) {
    onnx::NodeProto *n = addNode(*g, op, std::move(in), std::move(out));
    n->set_name(name);
    return n;
  }
  /// The model imported with `dataInputs` data inputs and the values `given` ahead.
  llvm::Expected<Graph> importGiven(unsigned dataInputs,
                                    std::map<std::string, OnnxGivenInput> given) const {
    OnnxImportOptions options;
    options.dataInputs = dataInputs;
    options.givenInputs = std::move(given);
    return importOnnxBytes(m.SerializeAsString(), "m.onnx", library(), options);
  }
  /// A graph output of element type `type` whose extents (one per name) are unknown.
  void output(const std::string &name, int32_t type, const std::vector<std::string> &dims) {
    onnx::ValueInfoProto *y = g->add_output();
    y->set_name(name);
    y->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    auto *shape = y->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (const std::string &d : dims)
      shape->add_dim()->set_dim_param(d);
  }
  void output(const std::string &name) { // unknown extents: the checker wants a shape
    output(name, onnx::TensorProto::FLOAT, {"d0", "d1"});
  }
  /// The importer's error for the model (empty when it imports).
  std::string error(size_t truncate = 0) const {
    std::string bytes = m.SerializeAsString();
    if (truncate)
      bytes.resize(bytes.size() - truncate);
    auto r = importOnnxBytes(bytes, "bad.onnx", library());
    return r ? std::string() : llvm::toString(r.takeError());
  }
};

TEST(OnnxImport, EveryUntranslatedNodeIsListed) {
  // Two nodes the importer cannot translate, one reading the other's result, and a third
  // on its own branch: both causes are listed, the dependent node counted.
  Bad b({{"x", {2, 3}}});
  b.node("nz", "NonZero", {"x"}, {"idx"});
  b.node("cast", "Cast", {"idx"}, {"f"})->add_attribute()->set_name("to");
  auto *to = b.g->mutable_node(1)->mutable_attribute(0);
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  b.node("u", "Unique", {"x"}, {"vals"});
  b.node("sum", "Relu", {"x"}, {"y"});
  b.output("y");
  std::string e = b.error();
  EXPECT_NE(e.find("2 nodes cannot be translated (1 more read their results)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("node 'nz' (ONNX NonZero)"), std::string::npos) << e;
  EXPECT_NE(e.find("node 'u' (ONNX Unique)"), std::string::npos) << e;
  EXPECT_EQ(e.find("node 'cast'"), std::string::npos) << e;
}

TEST(OnnxImport, MalformedModelsAreRefusedNamingTheNode) {
  struct Case {
    std::string what;
    std::function<void(Bad &)> build;
    std::vector<std::string> expect; // substrings of the error
  };
  const int64_t big = int64_t(1) << 40;
  std::vector<Case> cases = {
      {"Add with one input",
       [](Bad &b) {
         b.node("add1", "Add", {"x"}, {"y"});
         b.output("y");
       },
       {"add1", "input size 1"}},
      {"MatMul with one input",
       [](Bad &b) {
         b.node("mm", "MatMul", {"x"}, {"y"});
         b.output("y");
       },
       {"mm", "input size 1"}},
      {"Concat axis out of range",
       [](Bad &b) {
         auto *n = b.node("cat", "Concat", {"x", "x"}, {"y"});
         auto *a = n->add_attribute();
         a->set_name("axis");
         a->set_type(onnx::AttributeProto::INT);
         a->set_i(7);
         b.output("y");
       },
       {"cat", "axis"}},
      {"an attribute of the wrong type",
       [](Bad &b) {
         auto *n = b.node("cat2", "Concat", {"x", "x"}, {"y"});
         auto *a = n->add_attribute();
         a->set_name("axis");
         a->set_type(onnx::AttributeProto::FLOAT);
         a->set_f(1.5f);
         b.output("y");
       },
       {"cat2", "axis"}},
      {"wrong ranks",
       [](Bad &b) {
         b.node("conv", "Conv", {"x", "x"}, {"y"});
         b.output("y");
       },
       {"conv"}},
      {"a cycle",
       [](Bad &b) {
         b.node("a", "Relu", {"z"}, {"y"});
         b.node("b", "Relu", {"y"}, {"z"});
         b.output("y");
       },
       {"topologically sorted"}},
      {"an unknown domain",
       [](Bad &b) {
         b.node("custom", "Frobnicate", {"x"}, {"y"})->set_domain("com.example");
         b.output("y");
       },
       {"custom", "com.example"}},
      {"no outputs", [](Bad &b) { b.node("r", "Relu", {"x"}, {"y"}); }, {"no outputs"}},
  };
  for (Case &c : cases) {
    Bad b({{"x", {2, 3}}});
    c.build(b);
    std::string e = b.error();
    ASSERT_FALSE(e.empty()) << c.what << " was accepted";
    for (const std::string &x : c.expect)
      EXPECT_NE(e.find(x), std::string::npos) << c.what << ": " << e;
  }
  Bad opset({{"x", {2, 3}}}, 99);
  opset.node("r", "Relu", {"x"}, {"y"});
  opset.output("y");
  std::string e = opset.error();
  EXPECT_NE(e.find("opset 99 of the ONNX domain; this importer knows opsets 1 to"),
            std::string::npos)
      << e;
  Bad huge({{"x", {big, big}}});
  huge.node("r", "Relu", {"x"}, {"y"});
  huge.output("y");
  e = huge.error();
  EXPECT_NE(e.find("more bytes than a 64-bit count holds"), std::string::npos) << e;
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  Bad fine({{"x", {2, 3}}});
  fine.node("r", "Relu", {"x"}, {"y"});
  fine.output("y");
  EXPECT_EQ(fine.error(), "");
  for (size_t cut : {1, 5, 20}) {
    e = fine.error(cut);
    EXPECT_FALSE(e.empty()) << "a model truncated by " << cut << " bytes was accepted";
  }
}

TEST(OnnxImport, InputsGivenAheadFixShapesAndConstants) {
  // y = Reshape(x, shape), where shape is a graph input and x's batch is symbolic: the
  // importer cannot know y's shape until both are given.
  Bad b({{"x", {0, 6}}, {"shape", {2}}});
  b.g->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
  b.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  b.node("r", "Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  auto import = [&](std::map<std::string, OnnxGivenInput> given) {
    return b.importGiven(2, std::move(given));
  };
  // Without values, the shape is not a constant: refused, naming it.
  auto refused = import({});
  ASSERT_FALSE(static_cast<bool>(refused));
  const std::string why = llvm::toString(refused.takeError());
  EXPECT_NE(why.find("its shape ('shape') must be a constant"), std::string::npos) << why;
  // With x of batch 4 and shape = [-1, 3]: y is [8, 3].
  auto g = import({{"x", {{4, 6}, {}, false}}, {"shape", {{2}, {-1, 3}, true}}});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->tensor("x")->shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(g->tensor("y")->shape, (std::vector<int64_t>{8, 3}));
  // The values are read where an op needs a constant, never folded into the graph: no
  // node reads the shape input, and it is not a constant of the graph.
  EXPECT_EQ(g->constants.count("shape"), 0u);
  for (const Node &n : g->nodes())
    EXPECT_EQ(std::count(n.inputs.begin(), n.inputs.end(), "shape"), 0) << n.name;
  // A shape that disagrees with a static dimension, a name that is no data input, and
  // values that do not fill the shape are errors naming the input.
  auto wrongShape = import({{"x", {{4, 5}, {}, false}}});
  ASSERT_FALSE(static_cast<bool>(wrongShape));
  EXPECT_NE(
      llvm::toString(wrongShape.takeError())
          .find("the value given for input 'x' has shape [4, 5]; the model declares [batch, 6]"),
      std::string::npos);
  auto unknown = import({{"z", {{1}, {}, false}}});
  ASSERT_FALSE(static_cast<bool>(unknown));
  EXPECT_NE(
      llvm::toString(unknown.takeError()).find("'z', which is not one of the model's data inputs"),
      std::string::npos);
  auto short_ = import({{"x", {{4, 6}, {}, false}}, {"shape", {{2}, {-1}, true}}});
  ASSERT_FALSE(static_cast<bool>(short_));
  EXPECT_NE(llvm::toString(short_.takeError()).find("has 1 values for shape [2]"),
            std::string::npos);
}

TEST(OnnxImport, DataShapedOpsAreEvaluatedWhereTheirInputsAreKnown) {
  // y = NonZero(x): refused while x's values are unknown; with x given, y is a constant of
  // the graph holding numpy's nonzero of it.
  Bad b({{"x", {2, 3}}});
  b.node("nz", "NonZero", {"x"}, {"y"});
  b.output("y", onnx::TensorProto::INT64, {"r", "count"});
  auto import = [&](std::map<std::string, OnnxGivenInput> given) {
    return b.importGiven(1, std::move(given));
  };
  auto refused = import({});
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("the output shape depends on the data"),
            std::string::npos);
  auto g = import({{"x", {{2, 3}, {0, 5, 0, -1, 0, 2}, true}}});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->tensor("y")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g->constants.at("y"), (std::vector<double>{0, 1, 1, 1, 0, 2}));
}

TEST(OnnxImport, ConstantsAreDerivedFromInputsGivenAhead) {
  // y = Range(0, n + 2, 1): the limit is computed from the input n (as ONNX's expanded
  // window functions compute theirs), so Range's length is known once n is given.
  Bad b({{"n", std::vector<int64_t>{}}});
  b.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  b.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape(); // rank 0
  auto constant = [&](const std::string &name, int64_t v) {
    onnx::NodeProto *c = b.node("c_" + name, "Constant", {}, {name});
    onnx::AttributeProto *a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_int64_data(v);
  };
  constant("zero", 0);
  constant("two", 2);
  constant("one", 1);
  b.node("add", "Add", {"n", "two"}, {"limit"});
  b.node("range", "Range", {"zero", "limit", "one"}, {"y"});
  b.output("y", onnx::TensorProto::INT64, {"len"});
  auto import = [&](std::map<std::string, OnnxGivenInput> given) {
    return b.importGiven(1, std::move(given));
  };
  auto refused = import({});
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("start, limit and delta must be constants"),
            std::string::npos);
  auto g = import({{"n", {{}, {5}, true}}});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->tensor("y")->shape, (std::vector<int64_t>{7}));
  // The limit's producer stays a computation of the graph; only Range read its value.
  bool added = false;
  for (const Node &n : g->nodes())
    added |= n.output == "limit";
  EXPECT_TRUE(added);
}

/// A body graph for If branches and Loop bodies: `nodes` built by `build`, the given
/// inputs and outputs (float, or as typed).
onnx::GraphProto subgraph(const std::string &name,
                          std::vector<std::pair<std::string, int32_t>> inputs,
                          std::vector<std::pair<std::string, int32_t>> outputs,
                          const std::function<void(onnx::GraphProto &)> &build) {
  onnx::GraphProto g;
  g.set_name(name);
  for (const auto &[n, type] : inputs) {
    onnx::ValueInfoProto *v = g.add_input();
    v->set_name(n);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
  build(g);
  for (const auto &[n, type] : outputs) {
    onnx::ValueInfoProto *v = g.add_output();
    v->set_name(n);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
  return g;
}

void graphAttribute(onnx::NodeProto *n, const std::string &name, onnx::GraphProto g) {
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = std::move(g);
}

TEST(OnnxImport, ControlFlowIsRefusedWhereItsCourseIsNotKnown) {
  const int32_t kFloat = onnx::TensorProto::FLOAT, kBool = onnx::TensorProto::BOOL,
                kInt = onnx::TensorProto::INT64;
  auto branch = [&](const std::string &name, const std::string &op) {
    return subgraph(name, {}, {{name + "_y", kFloat}},
                    [&](onnx::GraphProto &g) { addNode(g, op, {"x"}, {name + "_y"}); });
  };
  {
    // If on a condition computed from x's values: not known at import.
    Bad b({{"x", {2, 3}}});
    b.node("sum", "ReduceSum", {"x"}, {"s"});
    b.node("zero", "Constant", {}, {"z"});
    auto *a = b.g->mutable_node(1)->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(kFloat);
    a->mutable_t()->add_float_data(0);
    b.node("positive", "Greater", {"s", "z"}, {"c"});
    onnx::NodeProto *n = b.node("branch", "If", {"c"}, {"y"});
    graphAttribute(n, "then_branch", branch("then", "Relu"));
    graphAttribute(n, "else_branch", branch("else", "Neg"));
    b.output("y");
    std::string e = b.error();
    EXPECT_NE(e.find("node 'branch' (ONNX If): its condition 'c' is not known at import"),
              std::string::npos)
        << e;
  }
  auto loop = [&](Bad &b, std::vector<std::string> in, bool computedCondition) {
    onnx::NodeProto *n = b.node("loop", "Loop", std::move(in), {"y"});
    graphAttribute(n, "body",
                   subgraph("body", {{"i", kInt}, {"cond_in", kBool}, {"s_in", kFloat}},
                            {{"cond_out", kBool}, {"s_out", kFloat}}, [&](onnx::GraphProto &g) {
                              addNode(g, "Relu", {"s_in"}, {"s_out"});
                              if (computedCondition) {
                                addNode(g, "ReduceMax", {"s_out"}, {"m"});
                                addNode(g, "Less", {"m", "x"}, {"cond_out"});
                              } else {
                                addNode(g, "Identity", {"cond_in"}, {"cond_out"});
                              }
                            }));
    b.output("y");
  };
  auto intConstant = [](Bad &b, const std::string &name, int32_t type, int64_t v) {
    onnx::NodeProto *c = b.node("c_" + name, "Constant", {}, {name});
    onnx::AttributeProto *a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(type);
    if (type == onnx::TensorProto::INT64)
      a->mutable_t()->add_int64_data(v);
    else
      a->mutable_t()->add_int32_data(int32_t(v));
  };
  {
    // A while loop: no trip count.
    Bad b({{"x", {2, 3}}});
    intConstant(b, "go", kBool, 1);
    loop(b, {"", "go", "x"}, false);
    std::string e = b.error();
    EXPECT_NE(e.find("node 'loop' (ONNX Loop): it has no trip count (a while loop)"),
              std::string::npos)
        << e;
  }
  {
    // A body that computes the condition from the data.
    Bad b({{"x", {2, 3}}});
    intConstant(b, "n", kInt, 3);
    loop(b, {"n", "", "x"}, true);
    std::string e = b.error();
    EXPECT_NE(e.find("its body computes the loop's condition ('cond_out')"), std::string::npos)
        << e;
  }
  {
    // Too many iterations to unroll.
    Bad b({{"x", {2, 3}}});
    intConstant(b, "n", kInt, 1000000);
    loop(b, {"n", "", "x"}, false);
    std::string e = b.error();
    EXPECT_NE(e.find("Tofu unrolls at most 4096 iterations"), std::string::npos) << e;
  }
  {
    // The trip count as a data input: refused without its value, unrolled with it (3
    // Relu copies, the last one writing y).
    Bad b({{"x", {2, 3}}, {"n", {}}});
    b.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(kInt);
    b.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape(); // rank 0
    loop(b, {"n", "", "x"}, false);
    auto refused = b.importGiven(2, {});
    ASSERT_FALSE(static_cast<bool>(refused));
    std::string e = llvm::toString(refused.takeError());
    EXPECT_NE(e.find("its trip count 'n' is not known at import"), std::string::npos) << e;
    auto g = b.importGiven(2, {{"n", {{}, {3}, true}}});
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    unsigned relus = 0;
    for (const Node &node : g->nodes())
      relus += node.op == "Relu";
    EXPECT_EQ(relus, 3u);
    EXPECT_EQ(g->tensor("y")->shape, (std::vector<int64_t>{2, 3}));
  }
}

TEST(OnnxImport, DataSamplesFixDynamicAxesAfterTheBatch) {
  // scripted_control's input is [batch, time, 8], both dynamic; its Loop runs `time` times.
  // Without a sample shape every dynamic axis is the batch; with one, the time axis is the
  // sample's (and the loop unrolls that many times). A sample of another rank is ignored.
  auto tanhs = [](const Graph &g) {
    unsigned n = 0;
    for (const Node &node : g.nodes())
      n += node.op == "Tanh";
    return n;
  };
  OnnxImportOptions options;
  options.batch = 3;
  auto plain = importOnnx("tests/onnx/scripted_control.onnx", library(), options);
  ASSERT_TRUE(static_cast<bool>(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->tensor("input")->shape, (std::vector<int64_t>{3, 3, 8}));
  EXPECT_EQ(tanhs(*plain), 3u);
  options.sampleShapes[""] = {7, 8};
  auto fed = importOnnx("tests/onnx/scripted_control.onnx", library(), options);
  ASSERT_TRUE(static_cast<bool>(fed)) << llvm::toString(fed.takeError());
  EXPECT_EQ(fed->tensor("input")->shape, (std::vector<int64_t>{3, 7, 8}));
  EXPECT_EQ(tanhs(*fed), 7u);
  options.sampleShapes = {{"input", {56}}};
  auto other = importOnnx("tests/onnx/scripted_control.onnx", library(), options);
  ASSERT_TRUE(static_cast<bool>(other)) << llvm::toString(other.takeError());
  EXPECT_EQ(other->tensor("input")->shape, (std::vector<int64_t>{3, 3, 8}));
}

TEST(OnnxImport, EmptyValuesAreKnownWhole) {
  // e = x[:, 5:] is empty ([2, 0]); z = Concat(x, e) drops it; e is an empty output of the
  // graph, known whole (Graph::emptyOutputs), and z an ordinary one.
  Bad b({{"x", {2, 3}}});
  auto ints = [&](const std::string &name, std::vector<int64_t> v) {
    onnx::NodeProto *c = b.node("c_" + name, "Constant", {}, {name});
    onnx::AttributeProto *a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_dims(int64_t(v.size()));
    for (int64_t x : v)
      a->mutable_t()->add_int64_data(x);
  };
  ints("starts", {5});
  ints("ends", {9});
  ints("axes", {1});
  b.node("slice", "Slice", {"x", "starts", "ends", "axes"}, {"e"});
  onnx::NodeProto *concat = b.node("concat", "Concat", {"x", "e"}, {"z"});
  onnx::AttributeProto *axis = concat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  b.output("e");
  b.output("z");
  auto g = b.importGiven(1, {});
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->outputs, (std::vector<std::string>{"z"}));
  EXPECT_EQ(g->tensor("z")->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(g->emptyOutputs.size(), 1u);
  EXPECT_EQ(g->emptyOutputs.at("e"), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(g->tensor("e"), nullptr);
}

TEST(OnnxImport, SequencesAreHeldWhereTheirPositionsAreKnown) {
  {
    // A sequence as a graph output: its elements are the outputs s.0 and s.1.
    Bad b({{"x", {2, 3}}});
    b.node("pack", "SequenceConstruct", {"x", "x"}, {"s"});
    onnx::ValueInfoProto *y = b.g->add_output();
    y->set_name("s");
    y->mutable_type()
        ->mutable_sequence_type()
        ->mutable_elem_type()
        ->mutable_tensor_type()
        ->set_elem_type(onnx::TensorProto::FLOAT);
    auto g = b.importGiven(1, {});
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    EXPECT_EQ(g->outputs, (std::vector<std::string>{"s.0", "s.1"}));
    EXPECT_EQ(g->producer("s.1")->inputs, (std::vector<std::string>{"x"}));
  }
  {
    // A position computed from data: not known at import.
    Bad b({{"x", {2, 3}}, {"p", {}}});
    b.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::INT64);
    b.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape(); // rank 0
    b.node("pack", "SequenceConstruct", {"x", "x"}, {"s"});
    b.node("at", "SequenceAt", {"s", "p"}, {"y"});
    b.output("y");
    auto refused = b.importGiven(2, {});
    ASSERT_FALSE(static_cast<bool>(refused));
    std::string e = llvm::toString(refused.takeError());
    EXPECT_NE(e.find("node 'at' (ONNX SequenceAt): its position 'p' is not known at import"),
              std::string::npos)
        << e;
    // Given, it is: y is x through an Identity. Out of range, it is refused.
    auto g = b.importGiven(2, {{"p", {{}, {-1}, true}}});
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    EXPECT_EQ(g->producer("y")->op, "Identity");
    EXPECT_EQ(g->producer("y")->inputs, (std::vector<std::string>{"x"}));
    auto outside = b.importGiven(2, {{"p", {{}, {2}, true}}});
    ASSERT_FALSE(static_cast<bool>(outside));
    e = llvm::toString(outside.takeError());
    EXPECT_NE(e.find("position 2 is outside a sequence of length 2"), std::string::npos) << e;
  }
}

} // namespace
} // namespace tofu
