// Graph IR: shape inference from the library's shape clauses, JSON, and precise errors.
#include "graph/graph.h"

#include "fmt/format.h"

#include "graph/precision.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

const OpLibrary &library() { return testLibrary(); }

TensorInfo tensor(const std::string &name, std::vector<int64_t> shape,
                  TensorRole role = TensorRole::Input) {
  return testTensor(name, std::move(shape), role);
}

Node node(std::string name, std::string op, std::vector<std::string> inputs, std::string output,
          std::map<std::string, int64_t> attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(inputs);
  n.output = std::move(output);
  n.attrs = std::move(attrs);
  return n;
}

/// x[8, 32] -> MatMul W1[32, 64] + b1 -> Relu -> MatMul W2[64, 10] + b2 -> softmax CE.
Graph mlp() {
  Graph g;
  auto ok = [](llvm::Error e) {
    EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  ok(g.addTensor(tensor("x", {8, 32}, TensorRole::Input)));
  ok(g.addTensor(tensor("labels", {8}, TensorRole::Input)));
  ok(g.addTensor(tensor("W1", {32, 64}, TensorRole::Weight)));
  ok(g.addTensor(tensor("b1", {64}, TensorRole::Weight)));
  ok(g.addTensor(tensor("W2", {64, 10}, TensorRole::Weight)));
  ok(g.addTensor(tensor("b2", {10}, TensorRole::Weight)));
  ok(g.addNode(node("fc1", "MatMul", {"x", "W1"}, "h1")));
  ok(g.addNode(node("bias1", "AddBcast", {"h1", "b1"}, "a1")));
  ok(g.addNode(node("relu1", "Relu", {"a1"}, "r1")));
  ok(g.addNode(node("fc2", "MatMul", {"r1", "W2"}, "h2")));
  ok(g.addNode(node("bias2", "AddBcast", {"h2", "b2"}, "logits")));
  ok(g.addNode(node("loss", "softmax_cross_entropy", {"logits", "labels"}, "L")));
  g.outputs = {"L"};
  return g;
}

TEST(Graph, ShapesAreInferredFromTheShapeClauses) {
  Graph g = mlp();
  ASSERT_FALSE(static_cast<bool>(checkGraph(g, library())));
  EXPECT_EQ(g.tensor("h1")->shape, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(g.tensor("r1")->shape, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(g.tensor("logits")->shape, (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(g.tensor("L")->shape, std::vector<int64_t>{});
  EXPECT_EQ(g.tensor("W1")->bytes(), 32 * 64 * 4);
}

TEST(Graph, JsonRoundTrip) {
  Graph g = mlp();
  ASSERT_FALSE(static_cast<bool>(checkGraph(g, library())));
  std::string text = graphToJson(g);
  auto back = graphFromJson(text);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(graphToJson(*back), text);
  EXPECT_EQ(back->nodes().size(), 6u);
  EXPECT_EQ(back->tensor("b2")->role, TensorRole::Weight);
}

std::string errorOf(Graph g) {
  llvm::Error e = checkGraph(g, library());
  return e ? llvm::toString(std::move(e)) : "no error";
}

TEST(Graph, BadGraphsGetErrorsNamingTheNode) {
  {
    Graph g = mlp();
    Graph h;
    for (const TensorInfo &t : g.tensors()) {
      if (!g.producer(t.name)) {
        ASSERT_FALSE(static_cast<bool>(h.addTensor(t)));
      }
    }
    ASSERT_FALSE(static_cast<bool>(h.addNode(node("f", "Frobnicate", {"x"}, "y"))));
    EXPECT_EQ(errorOf(std::move(h)), "node 'f' (op Frobnicate): unknown op 'Frobnicate'");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {8, 32}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("w", {31, 4}, TensorRole::Weight))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("mm", "MatMul", {"x", "w"}, "y"))));
    EXPECT_EQ(errorOf(std::move(g)),
              "node 'mm' (op MatMul): op 'MatMul': reduction variable 'k' indexes dimension 1 "
              "of 'A' (32) and dimension 0 of 'B' (31), which differ");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {8}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("a", "Relu", {"y"}, "z"))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("b", "Relu", {"z"}, "y"))));
    EXPECT_EQ(errorOf(std::move(g)), "node 'a' is on a cycle");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {8}, TensorRole::Activation))));
    EXPECT_EQ(errorOf(std::move(g)), "tensor 'x' (activation) is produced by no node");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {8, 3}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("y", {8, 4}, TensorRole::Activation))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("r", "Relu", {"x"}, "y"))));
    EXPECT_EQ(errorOf(std::move(g)),
              "node 'r' (op Relu): output 'y' is declared [8, 4] but the op's shape clause "
              "gives [8, 3]");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {8, 3}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("r", "Relu", {"x", "x"}, "y"))));
    EXPECT_EQ(errorOf(std::move(g)),
              "node 'r' (op Relu): op Relu takes 1 inputs but the node gives 2");
  }
  {
    Graph g;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("a", {8, 3}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("b", {8, 4}, TensorRole::Input))));
    ASSERT_FALSE(static_cast<bool>(g.addNode(node("add", "Add", {"a", "b"}, "c"))));
    EXPECT_EQ(errorOf(std::move(g)),
              "node 'add' (op Add): op 'Add': output coordinate 'i1' indexes dimension 1 of 'a' "
              "(3) and dimension 1 of 'b' (4), which differ");
  }
}

TEST(Graph, MalformedJsonIsAnError) {
  for (const char *text : {"{", "[1, 2]", "{\"tensors\": [{\"shape\": [1]}]}",
                           "{\"tensors\": [{\"name\": \"x\", \"role\": \"banana\"}]}",
                           "{\"nodes\": [{\"name\": \"n\", \"op\": \"Relu\"}]}"}) {
    auto g = graphFromJson(text);
    ASSERT_FALSE(static_cast<bool>(g)) << text;
    EXPECT_EQ(llvm::toString(g.takeError()).rfind("graph JSON: ", 0), 0u) << text;
  }
}

} // namespace
} // namespace tofu

namespace tofu {
namespace {

TEST(Training, EveryWeightGetsAGradientAndAnUpdate) {
  for (Optimizer opt : {Optimizer::SGD, Optimizer::Adam}) {
    Graph fwd = mlp();
    ASSERT_FALSE(static_cast<bool>(checkGraph(fwd, library())));
    auto train = buildTrainingGraph(fwd, "L", library(), opt);
    ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
    for (const char *w : {"W1", "b1", "W2", "b2"}) {
      const TensorInfo *updated = train->tensor(std::string(w) + "_updated");
      ASSERT_NE(updated, nullptr) << w;
      EXPECT_EQ(updated->shape, fwd.tensor(w)->shape) << w;
      // Its gradient is a tensor of the weight's group with the weight's shape.
      const Node *update = train->producer(updated->name);
      ASSERT_NE(update, nullptr);
      const TensorInfo *g = train->tensor(update->inputs[1]);
      EXPECT_EQ(g->role, opt == Optimizer::SGD ? TensorRole::Gradient : TensorRole::OptimizerState);
      EXPECT_EQ(updated->group, w);
    }
    // Backward nodes are grouped with their forward node.
    const Node *dW1 = train->producer("d_W1_from_fc1");
    ASSERT_NE(dW1, nullptr);
    EXPECT_EQ(dW1->group, "fc1");
    EXPECT_EQ(dW1->op, "matmul_tn");
    // Data inputs get no gradient.
    EXPECT_EQ(train->tensor("d_x_from_fc1"), nullptr);
    EXPECT_EQ(train->tensor("d_labels_from_loss"), nullptr);
  }
}

TEST(Training, GradientsOfSeveralConsumersAreSummedInTheTensorsGroup) {
  Graph g;
  auto ok = [](llvm::Error e) {
    ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  ok(g.addTensor(tensor("x", {4, 3}, TensorRole::Input)));
  ok(g.addTensor(tensor("w", {4, 3}, TensorRole::Weight)));
  ok(g.addTensor(tensor("t", {4, 3}, TensorRole::Input)));
  ok(g.addNode(node("m", "Mul", {"x", "w"}, "h")));
  ok(g.addNode(node("a", "Relu", {"h"}, "h1")));
  ok(g.addNode(node("b", "Tanh", {"h"}, "h2")));
  ok(g.addNode(node("s", "Add", {"h1", "h2"}, "y")));
  ok(g.addNode(node("loss", "mse", {"y", "t"}, "L")));
  ok(checkGraph(g, library()));
  auto train = buildTrainingGraph(g, "L", library(), Optimizer::SGD);
  ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
  const Node *sum = train->producer("d_h_sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->op, "Add");
  EXPECT_EQ(sum->group, "h");
  EXPECT_EQ(train->producer("d_w_from_m")->inputs[0], "d_h_sum");
}

TEST(Training, AMissingGradClauseIsAnErrorNamingTheNode) {
  Graph g;
  ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("x", {4}, TensorRole::Input))));
  ASSERT_FALSE(static_cast<bool>(g.addTensor(tensor("w", {4}, TensorRole::Weight))));
  ASSERT_FALSE(static_cast<bool>(g.addNode(node("m", "Mul", {"x", "w"}, "h"))));
  ASSERT_FALSE(static_cast<bool>(g.addNode(node("f", "Floor", {"h"}, "r"))));
  Node sum = node("s", "ReduceSum", {"r"}, "L");
  sum.groups = {{"pre", 0}, {"post", 0}};
  ASSERT_FALSE(static_cast<bool>(g.addNode(sum)));
  ASSERT_FALSE(static_cast<bool>(checkGraph(g, library())));
  auto train = buildTrainingGraph(g, "L", library(), Optimizer::SGD);
  ASSERT_FALSE(static_cast<bool>(train));
  EXPECT_EQ(llvm::toString(train.takeError()),
            "weight 'w' gets no gradient: no path from it to the loss 'L' can be differentiated "
            "(node 'f' (op Floor) has no grad clause for its input 'x' ('h'))");
}

// Weights read only through inputs no grad clause covers are buffers (a batch norm's running
// statistics): not trained, no gradient; a mask read through a condition gets none either.
TEST(Training, BuffersAndConditionsGetNoGradient) {
  Graph g;
  auto ok = [](llvm::Error e) {
    ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  ok(g.addTensor(tensor("x", {4, 3}, TensorRole::Input)));
  ok(g.addTensor(tensor("w", {4, 3}, TensorRole::Weight)));
  ok(g.addTensor(tensor("c", {4, 3}, TensorRole::Weight))); // a buffer read as a condition
  ok(g.addTensor(tensor("t", {4, 3}, TensorRole::Input)));
  ok(g.addNode(node("m", "Mul", {"x", "w"}, "h")));
  ok(g.addNode(node("sel", "Where", {"c", "h", "x"}, "y")));
  ok(g.addNode(node("loss", "mse", {"y", "t"}, "L")));
  ok(checkGraph(g, library()));
  auto train = buildTrainingGraph(g, "L", library(), Optimizer::Momentum);
  ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
  EXPECT_EQ(train->tensor("c")->role, TensorRole::Input);
  EXPECT_EQ(train->tensor("w")->role, TensorRole::Weight);
  for (const Node &n : train->nodes()) {
    EXPECT_EQ(n.output.find("d_c"), std::string::npos) << n.name;
    EXPECT_NE(n.output, "c_updated");
  }
  // Momentum: a velocity per weight, updated before the weight.
  ASSERT_NE(train->tensor("momentum_v_w"), nullptr);
  EXPECT_EQ(train->tensor("momentum_v_w")->role, TensorRole::OptimizerState);
  EXPECT_EQ(train->producer("w_updated")->op, "momentum_update");
  EXPECT_EQ(train->producer("w_updated")->inputs,
            (std::vector<std::string>{"w", "momentum_v_w_new", "lr"}));
  EXPECT_EQ(train->producer("momentum_v_w_new")->op, "momentum_velocity");
  EXPECT_EQ(train->tensor("momentum_v_c"), nullptr);
}

// A weight whose every path to the loss stops at a comparison (a causal mask sliced, compared
// with Equal into a boolean, read as Where's condition: nanoGPT's buffer, exported as a
// weight) is a buffer; one stopped by an op without a grad clause for a float result (Floor)
// is an error that names the op.
TEST(Training, WeightsStoppedAtComparisonsAreBuffers) {
  auto ok = [](llvm::Error e) {
    ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  auto build = [&](bool floorInstead) {
    Graph g;
    ok(g.addTensor(tensor("x", {4, 3}, TensorRole::Input)));
    ok(g.addTensor(tensor("w", {4, 3}, TensorRole::Weight)));
    ok(g.addTensor(tensor("mask", {4, 3}, TensorRole::Weight)));
    ok(g.addTensor(tensor("zero", {4, 3}, TensorRole::Input)));
    ok(g.addTensor(tensor("t", {4, 3}, TensorRole::Input)));
    ok(g.addNode(node("m", "Mul", {"x", "w"}, "h")));
    ok(g.addNode(node("scaled", "Mul", {"mask", "x"}, "ms")));
    if (floorInstead) {
      ok(g.addNode(node("fl", "Floor", {"ms"}, "keep")));
      ok(g.addNode(node("use", "Add", {"h", "keep"}, "y")));
    } else {
      TensorInfo keep = tensor("keep", {4, 3}, TensorRole::Activation);
      keep.dtype = ElementType::Bool;
      ok(g.addTensor(keep));
      ok(g.addNode(node("eq", "Equal", {"ms", "zero"}, "keep")));
      ok(g.addNode(node("sel", "Where", {"keep", "h", "x"}, "y")));
    }
    ok(g.addNode(node("loss", "mse", {"y", "t"}, "L")));
    ok(checkGraph(g, library()));
    return buildTrainingGraph(g, "L", library(), Optimizer::SGD);
  };
  auto train = build(false);
  ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
  EXPECT_EQ(train->tensor("mask")->role, TensorRole::Input);
  EXPECT_EQ(train->tensor("w")->role, TensorRole::Weight);
  EXPECT_EQ(train->producer("mask_updated"), nullptr);
  ASSERT_NE(train->producer("w_updated"), nullptr);
  auto floored = build(true);
  ASSERT_FALSE(static_cast<bool>(floored));
  EXPECT_EQ(llvm::toString(floored.takeError()),
            "weight 'mask' gets no gradient: no path from it to the loss 'L' can be "
            "differentiated (node 'fl' (op Floor) has no grad clause for its input 'x' ('ms'))");
}

// Each optimiser's updates, as torch.optim computes them: weight decay an L2 term on the
// gradient (one node both of Nesterov's updates read), AdamW's decoupled in its update.
// Two outputs trained on the weighted sum of their losses: each gets its own loss and
// target, the sum weighs the second, and a weight only a third output reads is held fixed.
TEST(Training, SeveralOutputsTrainOnTheWeightedSumOfTheirLosses) {
  Graph g;
  auto ok = [](llvm::Error e) {
    ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  ok(g.addTensor(tensor("x", {4, 3}, TensorRole::Input)));
  for (const char *w : {"wa", "wb", "wc"})
    ok(g.addTensor(tensor(w, {4, 3}, TensorRole::Weight)));
  ok(g.addNode(node("ma", "Mul", {"x", "wa"}, "a")));
  ok(g.addNode(node("mb", "Mul", {"a", "wb"}, "b")));
  ok(g.addNode(node("mc", "Mul", {"x", "wc"}, "c")));
  g.outputs = {"a", "b", "c"};
  ok(checkGraph(g, library()));
  Graph mse = g;
  auto la = addLossOf(g, library(), "b", LossKind::Mse);
  auto lb = addLossOf(g, library(), "a", LossKind::Mse);
  ASSERT_TRUE(la && lb);
  EXPECT_EQ(*la, "loss_out");
  EXPECT_EQ(*lb, "a_loss_out");
  EXPECT_EQ(g.producer(*lb)->inputs[1], "a_target"); // the second loss's target
  auto sum = addWeightedSum(g, library(), {{*la, 1.0}, {*lb, 0.25}}, "total_loss");
  ASSERT_TRUE(static_cast<bool>(sum)) << llvm::toString(sum.takeError());
  const Node *add = g.producer(*sum);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->op, "Add");
  EXPECT_EQ(add->inputs[0], *la);
  const Node *scaled = g.producer(add->inputs[1]);
  ASSERT_NE(scaled, nullptr);
  EXPECT_EQ(scaled->op, "Mul");
  EXPECT_EQ(g.constants.at(scaled->inputs[1]), std::vector<double>{0.25});
  EXPECT_TRUE(g.tensor(*sum)->shape.empty());
  g.outputs = {*sum};
  EXPECT_EQ(freezeWeightsNotReaching(g, *sum), std::vector<std::string>{"wc"});
  EXPECT_EQ(g.tensor("wc")->role, TensorRole::Input);
  EXPECT_EQ(g.tensor("wa")->role, TensorRole::Weight);
  auto train = buildTrainingGraph(g, *sum, library(), Optimizer::SGD);
  ASSERT_TRUE(static_cast<bool>(train)) << llvm::toString(train.takeError());
  // One term of weight 1 is the loss itself; a sum of none is an error.
  auto one = addWeightedSum(g, library(), {{*la, 1.0}}, "t");
  ASSERT_TRUE(static_cast<bool>(one)) << llvm::toString(one.takeError());
  EXPECT_EQ(*one, *la);
  auto none = addWeightedSum(mse, library(), {}, "t");
  ASSERT_FALSE(static_cast<bool>(none));
  llvm::consumeError(none.takeError());
  auto notScalar = addWeightedSum(mse, library(), {{"a", 2.0}}, "t");
  ASSERT_FALSE(static_cast<bool>(notScalar));
  EXPECT_EQ(llvm::toString(notScalar.takeError()), "'a' is not a scalar of the graph");
}

TEST(Training, OptimiserUpdates) {
  Graph g;
  auto ok = [](llvm::Error e) {
    ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  ok(g.addTensor(tensor("x", {4, 3}, TensorRole::Input)));
  ok(g.addTensor(tensor("w", {4, 3}, TensorRole::Weight)));
  ok(g.addTensor(tensor("t", {4, 3}, TensorRole::Input)));
  ok(g.addNode(node("m", "Mul", {"x", "w"}, "y")));
  ok(g.addNode(node("loss", "mse", {"y", "t"}, "L")));
  ok(checkGraph(g, library()));
  auto build = [&](Optimizer o, bool decay) {
    auto t = buildTrainingGraph(g, "L", library(), o, decay);
    EXPECT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
    return t ? std::move(*t) : Graph();
  };
  auto inputs = [](const Graph &t, const std::string &out) {
    const Node *n = t.producer(out);
    return n ? n->op + "(" + fmt::format("{}", fmt::join(n->inputs, ", ")) + ")" : "none";
  };
  const Graph sgd = build(Optimizer::SGD, true);
  EXPECT_EQ(inputs(sgd, "w_updated"), "sgd_weight_decay_update(w, d_w_from_m, lr, weight_decay)");
  ASSERT_NE(sgd.tensor("weight_decay"), nullptr);
  EXPECT_EQ(build(Optimizer::SGD, false).tensor("weight_decay"), nullptr);

  const Graph nesterov = build(Optimizer::Nesterov, true);
  EXPECT_EQ(inputs(nesterov, "d_w_decayed"), "weight_decay_grad(d_w_from_m, w, weight_decay)");
  EXPECT_EQ(nesterov.tensor("d_w_decayed")->role, TensorRole::Gradient);
  EXPECT_EQ(inputs(nesterov, "momentum_v_w_new"),
            "momentum_velocity(momentum_v_w, d_w_decayed, momentum)");
  EXPECT_EQ(inputs(nesterov, "w_updated"),
            "nesterov_update(w, d_w_decayed, momentum_v_w_new, lr, momentum)");

  const Graph adam = build(Optimizer::Adam, true);
  EXPECT_EQ(inputs(adam, "adam_m_w_new"), "adam_m(adam_m_w, d_w_decayed, adam_b1)");
  EXPECT_EQ(inputs(adam, "w_updated"),
            "adam_update(w, adam_m_w_new, adam_v_w_new, lr, adam_c1, adam_c2, adam_eps)");

  const Graph adamw = build(Optimizer::AdamW, false);
  EXPECT_EQ(inputs(adamw, "adam_v_w_new"), "adam_v(adam_v_w, d_w_from_m, adam_b2)");
  EXPECT_EQ(inputs(adamw, "w_updated"), "adamw_update(w, adam_m_w_new, adam_v_w_new, lr, "
                                        "adam_c1, adam_c2, adam_eps, weight_decay)");
  EXPECT_EQ(adamw.tensor("d_w_decayed"), nullptr);
  for (const Graph *t : {&sgd, &nesterov, &adam, &adamw})
    for (const Node &n : t->nodes())
      if (n.output == "w_updated")
        EXPECT_TRUE(isStateUpdate(n.op)) << n.op;
  // Names and hyper-parameters.
  for (Optimizer o : {Optimizer::SGD, Optimizer::Momentum, Optimizer::Nesterov, Optimizer::Adam,
                      Optimizer::AdamW})
    EXPECT_EQ(optimizerNamed(optimizerName(o)), o);
  EXPECT_EQ(optimizerNamed("rmsprop"), std::nullopt);
  EXPECT_EQ(optimizerHyperParameters(Optimizer::Nesterov, true),
            (std::vector<std::string>{"lr", "momentum", "weight_decay"}));
}

/// The producer's op and inputs of `tensor`, as "op(a, b)".
std::string producedBy(const Graph &g, const std::string &tensor) {
  const Node *n = g.producer(tensor);
  return n ? fmt::format("{}({})", n->op, fmt::join(n->inputs, ", ")) : "(none)";
}

TEST(Precision, Bf16FollowsAutocastOnAnMlp) {
  Graph g = mlp();
  ASSERT_FALSE(static_cast<bool>(checkGraph(g, library())));
  const Graph fp32 = g;
  auto same = applyPrecision(g, library(), Precision::FP32);
  ASSERT_TRUE(static_cast<bool>(same)) << llvm::toString(same.takeError());
  EXPECT_EQ(same->casts, 0u);
  EXPECT_EQ(graphToJson(g), graphToJson(fp32));

  auto s = applyPrecision(g, library(), Precision::BF16);
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(g.precision, Precision::BF16);
  // The products read their operands cast to bfloat16, a weight's cast made once; each bias
  // is cast with its product's result (autocast's linear takes its bias).
  EXPECT_EQ(producedBy(g, "h1"), "MatMul(x_bf16, W1_bf16)");
  EXPECT_EQ(producedBy(g, "W1_bf16"), "CastBfloat16(W1)");
  EXPECT_EQ(producedBy(g, "a1"), "AddBcast(h1, b1_bf16)");
  EXPECT_EQ(producedBy(g, "h2"), "MatMul(r1, W2_bf16)"); // r1 is bfloat16 already
  EXPECT_EQ(s->casts, 5u);
  EXPECT_EQ(s->lowered, 2u);
  EXPECT_EQ(s->float32, 1u); // the loss reads the bfloat16 logits
  // A product that only its bias add reads keeps its result float32, and the add rounds
  // the sum once to bfloat16, as autocast's linear does.
  EXPECT_EQ(s->fusedBias, 2u);
  for (const char *t : {"x_bf16", "W1_bf16", "a1", "r1", "logits"})
    EXPECT_EQ(g.tensor(t)->dtype, ElementType::BFloat16) << t;
  for (const char *t : {"x", "W1", "b1", "W2", "b2", "L", "h1", "h2"})
    EXPECT_EQ(g.tensor(t)->dtype, ElementType::Float32) << t;
  EXPECT_EQ(g.tensor("r1")->bytes(), 8 * 64 * 2);
  // A weight's cast coarsens with the weight.
  EXPECT_EQ(g.producer("W1_bf16")->group, "W1");
  // Applied once only; the JSON form keeps the policy.
  EXPECT_FALSE(static_cast<bool>(applyPrecision(g, library(), Precision::BF16)));
  auto back = graphFromJson(graphToJson(g));
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->precision, Precision::BF16);
  EXPECT_EQ(back->tensor("a1")->dtype, ElementType::BFloat16);

  // Training: a bfloat16 tensor's gradient is bfloat16; weights, their gradients and the
  // optimiser's state stay float32.
  auto t = buildTrainingGraph(g, "L", library(), Optimizer::Adam);
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(t->precision, Precision::BF16);
  unsigned bf16Gradients = 0;
  for (const TensorInfo &x : t->tensors()) {
    if (x.role == TensorRole::Weight || x.role == TensorRole::OptimizerState)
      EXPECT_EQ(x.dtype, ElementType::Float32) << x.name;
    if (x.role == TensorRole::Gradient)
      bf16Gradients += x.dtype == ElementType::BFloat16;
  }
  EXPECT_EQ(t->tensor("d_W1_from_W1_bf16_cast")->dtype, ElementType::Float32);
  EXPECT_EQ(t->tensor("d_r1_from_fc2")->dtype, ElementType::BFloat16);
  EXPECT_EQ(t->tensor("d_logits_from_loss")->dtype, ElementType::BFloat16);
  // The float32 product result's gradient is the bias add's, bfloat16: the backward
  // products keep bfloat16 operands.
  for (const TensorInfo &x : t->tensors())
    if (x.name.rfind("d_h1_from", 0) == 0 || x.name.rfind("d_h2_from", 0) == 0)
      EXPECT_EQ(x.dtype, ElementType::BFloat16) << x.name;
  EXPECT_GT(bf16Gradients, 5u);
  EXPECT_EQ(precisionNamed("bf16"), Precision::BF16);
  EXPECT_EQ(precisionNamed("fp16"), std::nullopt);
}

TEST(Precision, PromotionRules) {
  auto ok = [](llvm::Error e) {
    EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  Graph g;
  ok(g.addTensor(tensor("x", {4, 3, 2, 2})));
  ok(g.addTensor(tensor("w", {3, 3, 1, 1}, TensorRole::Weight)));
  ok(g.addTensor(tensor("scale", {3}, TensorRole::Weight)));
  ok(g.addTensor(tensor("bias", {3}, TensorRole::Weight)));
  ok(g.addTensor(tensor("eps", {})));
  ok(g.addTensor(tensor("half", {})));
  TensorInfo wide = tensor("wide", {4, 3, 2, 2});
  wide.dtype = ElementType::Float64;
  ok(g.addTensor(wide));
  ok(g.addNode(node("conv", "Conv2d", {"x", "w"}, "c")));
  ok(g.addNode(node("bn", "batch_norm_train", {"c", "scale", "bias", "eps"}, "n")));
  ok(g.addNode(node("scaled", "MulBcast", {"n", "half"}, "m"))); // a rank-0 float32: stays
  ok(g.addNode(node("residual", "Add", {"m", "x"}, "r")));       // with a float32 tensor: widens
  ok(g.addNode(node("soft", "Softmax", {"m"}, "p")));            // float32 op on bfloat16
  ok(g.addNode(node("double", "Conv2d", {"wide", "w"}, "d")));   // float64: left alone
  // A float32 op's result that only products read is stored in bfloat16, with no cast.
  ok(g.addNode(node("soft2", "Softmax", {"m"}, "p2")));
  ok(g.addNode(node("conv2", "Conv2d", {"p2", "w"}, "c2")));
  // One that another op reads too stays float32, cast for its product.
  ok(g.addNode(node("soft3", "Softmax", {"m"}, "p3")));
  ok(g.addNode(node("conv3", "Conv2d", {"p3", "w"}, "c3")));
  ok(g.addNode(node("relu3", "Relu", {"p3"}, "q3")));
  g.outputs = {"r", "p", "d", "c2", "c3", "q3"};
  ok(checkGraph(g, library()));
  auto s = applyPrecision(g, library(), Precision::BF16);
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(g.tensor("c")->dtype, ElementType::BFloat16);
  EXPECT_EQ(g.tensor("n")->dtype, ElementType::BFloat16); // a batch norm follows its data
  EXPECT_EQ(producedBy(g, "n"), "batch_norm_train(c, scale, bias, eps)");
  EXPECT_EQ(g.tensor("m")->dtype, ElementType::BFloat16);
  EXPECT_EQ(g.tensor("r")->dtype, ElementType::Float32);
  EXPECT_EQ(g.tensor("p")->dtype, ElementType::Float32);
  EXPECT_EQ(g.tensor("d")->dtype, ElementType::Float32); // the output as it was
  EXPECT_EQ(producedBy(g, "d"), "Conv2d(wide, w)");
  EXPECT_EQ(g.tensor("p2")->dtype, ElementType::BFloat16);
  EXPECT_EQ(producedBy(g, "c2"), "Conv2d(p2, w_bf16)");
  EXPECT_EQ(g.tensor("p3")->dtype, ElementType::Float32);
  EXPECT_EQ(producedBy(g, "c3"), "Conv2d(p3_bf16, w_bf16)");
  EXPECT_EQ(g.tensor("q3")->dtype, ElementType::Float32);
  EXPECT_EQ(s->lowered, 3u);
  EXPECT_EQ(s->casts, 3u); // x, w (once for its three products) and p3
  EXPECT_EQ(s->storedNarrow, 1u);
  EXPECT_EQ(s->float32, 3u); // the three softmaxes read a bfloat16 m
  EXPECT_EQ(castClass("Softmax"), CastClass::Float32);
  EXPECT_EQ(castClass("GemmNT"), CastClass::Lower);
  EXPECT_EQ(castClass("Relu"), CastClass::Promote);
}

/// torch.baddbmm(mask, q, k) as the ONNX export spells it, Add(Mul(MatMul(q, k), 1), mask):
/// one op under autocast, the mask cast to bfloat16 and the sum rounded once; the product
/// stays float32 and the add gives bfloat16. A product scaled by another number is no
/// exported baddbmm: it is rounded, then scaled and added as autocast would run those ops.
TEST(Precision, ExportedBaddbmmRoundsOnce) {
  auto ok = [](llvm::Error e) {
    EXPECT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  };
  Graph g;
  ok(g.addTensor(tensor("q", {2, 6, 8})));
  ok(g.addTensor(tensor("k", {2, 8, 6})));
  ok(g.addTensor(tensor("mask", {2, 6, 6})));
  ok(g.addTensor(tensor("one", {})));
  ok(g.addTensor(tensor("two", {})));
  g.constants["one"] = {1.0};
  g.constants["two"] = {2.0};
  ok(g.addNode(node("qk", "MatMul", {"q", "k"}, "s")));
  ok(g.addNode(node("alpha", "MulBcast", {"s", "one"}, "s1")));
  ok(g.addNode(node("masked", "Add", {"s1", "mask"}, "m")));
  ok(g.addNode(node("soft", "Softmax", {"m"}, "p")));
  ok(g.addNode(node("qk2", "MatMul", {"q", "k"}, "t")));
  ok(g.addNode(node("twice", "MulBcast", {"t", "two"}, "t2")));
  ok(g.addNode(node("masked2", "Add", {"t2", "mask"}, "m2")));
  ok(g.addNode(node("soft2", "Softmax", {"m2"}, "p2")));
  g.outputs = {"p", "p2"};
  ok(checkGraph(g, library()));
  auto s = applyPrecision(g, library(), Precision::BF16);
  ASSERT_TRUE(static_cast<bool>(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->addmms, 1u);
  EXPECT_EQ(g.tensor("s")->dtype, ElementType::Float32);
  EXPECT_EQ(g.tensor("s1")->dtype, ElementType::Float32);
  EXPECT_EQ(g.tensor("m")->dtype, ElementType::BFloat16);
  EXPECT_EQ(producedBy(g, "m"), "Add(s1, mask_bf16)");
  EXPECT_EQ(g.tensor("t")->dtype, ElementType::BFloat16);
  EXPECT_EQ(g.tensor("t2")->dtype, ElementType::BFloat16); // a rank-0 float32 does not widen it
  EXPECT_EQ(g.tensor("m2")->dtype, ElementType::Float32);  // the float32 mask does
  EXPECT_EQ(producedBy(g, "m2"), "Add(t2, mask)");
}

} // namespace
} // namespace tofu
