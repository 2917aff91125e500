// The model zoo: graphs check, parameter counts match closed forms, training graphs build.
#include "graph/zoo.h"

#include "graph/test_library.h"
#include "graph/training.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

const OpLibrary &library() { return testLibrary(); }

int64_t weightElements(const Graph &g) {
  int64_t n = 0;
  for (const TensorInfo &t : g.tensors())
    if (t.role == TensorRole::Weight)
      n += t.elements();
  return n;
}

/// The closed form of a WResNet's parameters (see buildWResNet's widening rule).
int64_t wresnetParams(const std::vector<int> &blocks, int64_t W) {
  int64_t c = 64 * W;
  int64_t n = 3 * c * 49 + 2 * c; // stem conv + batch norm
  for (int s = 0; s < 4; ++s) {
    int64_t w = (64 << s) * W, o = 4 * w;
    n += c * w + 9 * w * w + w * o + c * o + 2 * (w + w + o + o); // first block, downsample
    n += (blocks[s] - 1) * (o * w + 9 * w * w + w * o + 2 * (w + w + o));
    c = o;
  }
  return n + c * 1000 + 1000; // classifier
}

TEST(Zoo, WResNetShapesAndParameterCounts) {
  struct Case {
    int depth;
    std::vector<int> blocks;
  };
  for (const Case &k :
       {Case{50, {3, 4, 6, 3}}, Case{101, {3, 4, 23, 3}}, Case{152, {3, 8, 36, 3}}}) {
    for (int64_t W : {1, 2}) {
      auto g = buildWResNet(k.depth, W, 2);
      ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
      ASSERT_FALSE(static_cast<bool>(checkGraph(*g, library())));
      EXPECT_EQ(weightElements(*g), wresnetParams(k.blocks, W)) << k.depth << "-" << W;
      EXPECT_EQ(g->tensor("pool_out")->shape, (std::vector<int64_t>{2, 2048 * W, 1, 1}));
      EXPECT_EQ(g->tensor("stem_pool_out")->shape, (std::vector<int64_t>{2, 64 * W, 56, 56}));
    }
  }
  // ResNet-50 (W = 1) has the well-known 25.56 million parameters.
  EXPECT_EQ(wresnetParams({3, 4, 6, 3}, 1), 25557032);
}

TEST(Zoo, RnnParameterCountsAndCellGroups) {
  auto g = buildRnn(3, 16, 4, 5);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  ASSERT_FALSE(static_cast<bool>(checkGraph(*g, library())));
  EXPECT_EQ(weightElements(*g), 3 * (8 * 16 * 16 + 4 * 16));
  EXPECT_EQ(g->producer("lstm2_t4_c_out")->group, "lstm2_t4");
  EXPECT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->tensor(g->outputs[0])->shape, std::vector<int64_t>{});
}

TEST(Zoo, TrainingGraphsUpdateEveryWeight) {
  for (const char *model : {"mlp", "wresnet-50-1", "rnn-2-32"}) {
    auto fwd = buildModel(model, 2);
    ASSERT_TRUE(static_cast<bool>(fwd)) << llvm::toString(fwd.takeError());
    ASSERT_FALSE(static_cast<bool>(checkGraph(*fwd, library()))) << model;
    auto train = buildTrainingGraph(*fwd, fwd->outputs[0], library(), Optimizer::Adam);
    ASSERT_TRUE(static_cast<bool>(train)) << model << ": " << llvm::toString(train.takeError());
    for (const TensorInfo &w : fwd->tensors())
      if (w.role == TensorRole::Weight) {
        const TensorInfo *updated = train->tensor(w.name + "_updated");
        ASSERT_NE(updated, nullptr) << model << ": " << w.name;
        EXPECT_EQ(updated->shape, w.shape) << model << ": " << w.name;
      }
  }
}

TEST(Zoo, TransformerParameterCountAndTrainingGraph) {
  const int64_t L = 2, D = 64, H = 4, S = 16, V = 1000;
  auto g = buildTransformer(L, D, H, S, 3, V);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  ASSERT_FALSE(static_cast<bool>(checkGraph(*g, library())));
  // Embeddings, per layer 4 D^2 attention + 8 D^2 feed-forward + 4D + D biases + 2 x 2D
  // layer norms, the final layer norm and the vocabulary projection.
  EXPECT_EQ(weightElements(*g), V * D + S * D + L * (12 * D * D + 9 * D) + 2 * D + D * V);
  EXPECT_EQ(g->tensor("l1_scores_out")->shape, (std::vector<int64_t>{3, H, S, S}));
  auto train = buildTrainingGraph(*g, g->outputs[0], library(), Optimizer::SGD);
  ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
  EXPECT_NE(train->tensor("tok_emb_updated"), nullptr);
  auto bad = buildTransformer(2, 65, 4, 16, 1);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "hidden size 65 is not a multiple of the 4 heads");
}

TEST(Zoo, UnknownModelsAreErrors) {
  for (const char *bad : {"resnet-50", "wresnet-34-2", "rnn-0-8K", "mlp2"}) {
    auto g = buildModel(bad, 1);
    EXPECT_FALSE(static_cast<bool>(g)) << bad;
    if (!g)
      llvm::consumeError(g.takeError());
  }
}

std::string nameError(const std::string &name) {
  auto parsed = parseModelName(name);
  if (parsed) {
    ADD_FAILURE() << name << " was read";
    return "";
  }
  return llvm::toString(parsed.takeError());
}

TEST(Zoo, NamesAreReadExactly) {
  auto w = parseModelName("wresnet-50-1-i32-k10");
  ASSERT_TRUE(static_cast<bool>(w)) << llvm::toString(w.takeError());
  EXPECT_EQ(w->family, ModelName::WResNet);
  EXPECT_EQ(w->numbers, (std::vector<int64_t>{50, 1, 32, 64, 10}));
  auto r = parseModelName("rnn-2-8K");
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->numbers, (std::vector<int64_t>{2, 8192}));
  auto t = parseModelName("gpt-2-64-4-16");
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->numbers, (std::vector<int64_t>{2, 64, 4, 16}));
  // Optional parts out of order, empty parts, signs, trailing dashes: not names.
  for (const char *bad : {"wresnet-50-1-k10-i32", "wresnet-50--1", "wresnet-50-1-i", "rnn-2-8KK",
                          "rnn-+2-8", "gpt-1-64-4-16-", "gpt-1-64-4", "-", "", "wresnet-50-1-x3"})
    EXPECT_NE(nameError(bad).find("unknown model"), std::string::npos) << bad;
  EXPECT_NE(nameError("rnn-0-8").find("the layer count"), std::string::npos);
  // A name of 100,000 digits is out of range, not a stack overflow (std::regex recursed per
  // character and crashed on it).
  EXPECT_NE(nameError("wresnet-" + std::string(100000, '1') + "-1").find("out of range"),
            std::string::npos);
}

} // namespace
} // namespace tofu
