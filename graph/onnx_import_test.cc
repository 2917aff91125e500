// ONNX import of real exported models (tests/onnx, from tools/export_onnx_fixtures.py):
// shapes agree with ONNX's shape inference, structure matches torchvision, bad files fail.
#include "graph/onnx_import.h"

#include <fstream>

#include "graph/test_library.h"
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

TEST(OnnxImport, UntranslatedNodesAreNamed) {
  auto g = importOnnx("tests/onnx/transformer.onnx", library());
  ASSERT_FALSE(static_cast<bool>(g));
  std::string msg = llvm::toString(g.takeError());
  EXPECT_NE(msg.find("node '/layers.0/self_attn/Constant' (ONNX Constant): the importer does not "
                     "translate it yet"),
            std::string::npos)
      << msg;
}

TEST(OnnxImport, BadFilesAreErrors) {
  auto missing = importOnnx("tests/onnx/no_such_file.onnx", library());
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()), "cannot open 'tests/onnx/no_such_file.onnx'");
  std::string junk = testing::TempDir() + "/junk.onnx";
  std::ofstream(junk) << "this is not a protobuf \xff\xfe";
  auto bad = importOnnx(junk, library());
  ASSERT_FALSE(static_cast<bool>(bad));
  std::string msg = llvm::toString(bad.takeError());
  EXPECT_NE(msg.find("is not an ONNX model"), std::string::npos) << msg;
}

} // namespace
} // namespace tofu
