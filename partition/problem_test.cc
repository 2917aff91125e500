// The partition layer: a Problem's tensors carry the graph's element types (their widths,
// and what the engines store: bfloat16 only for a bfloat16 tensor of a graph in bf16, so a
// 2-byte float16 is never taken for one), and a partition plan's text form reads back as the
// same plan of its problem, and not as a plan of another.
#include "partition/problem.h"

#include "graph/test_library.h"
#include "graph/zoo.h"
#include "partition/plan.h"
#include "search/search.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

Graph mlp(std::vector<int64_t> layers) {
  auto g = buildMlp(layers, 8);
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  EXPECT_FALSE(bool(checkGraph(*g, testLibrary())));
  return std::move(*g);
}

Problem build(const Graph &g) {
  auto p = Problem::build(g, testLibrary());
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  return std::move(*p);
}

const ProblemTensor &named(const Problem &p, const std::string &name) {
  for (const ProblemTensor &t : p.tensors)
    if (t.name == name)
      return t;
  ADD_FAILURE() << "no tensor " << name;
  return p.tensors.at(0);
}

TEST(Problem, TensorsCarryTheGraphsElementTypes) {
  Graph g = mlp({16, 8, 4});
  ASSERT_NE(g.tensor("x"), nullptr);
  ASSERT_NE(g.tensor("fc1_w"), nullptr);
  g.tensor("x")->dtype = ElementType::Float16;
  g.tensor("fc1_w")->dtype = ElementType::BFloat16;
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    g.precision = precision;
    const Problem p = build(g);
    const ProblemTensor &x = named(p, "x"), &w = named(p, "fc1_w");
    EXPECT_EQ(x.dtype, ElementType::Float16);
    EXPECT_EQ(x.elementBytes, 2u); // moved at its width
    EXPECT_EQ(x.storage, ElementType::Float32) << "a float16 is held as float32, never bf16";
    EXPECT_EQ(x.storageBytes(), 4u);
    EXPECT_EQ(w.dtype, ElementType::BFloat16);
    EXPECT_EQ(w.elementBytes, 2u);
    // A model's own bfloat16 tensor is held as float32 unless the graph is in bf16.
    EXPECT_EQ(w.storage,
              precision == Precision::BF16 ? ElementType::BFloat16 : ElementType::Float32);
    // Partial results of a bfloat16 tensor are float32, rounded once combined.
    EXPECT_EQ(w.resultStorage(true), ElementType::Float32);
    EXPECT_EQ(w.resultBytes(true), precision == Precision::BF16 ? 4u : 2u);
    EXPECT_EQ(w.resultStorage(false), w.storage);
  }
}

TEST(PartitionPlan, TextReadsBackAsThePlanOfItsProblemOnly) {
  const Problem p = build(mlp({16, 8, 4}));
  PlanOptions o;
  o.workers = 4;
  auto plan = searchPlan(p, o);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_FALSE(plan->steps.empty());
  const std::string text = encodePlan(*plan);
  auto back = decodePlan(text, p);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(encodePlan(*back), text);
  EXPECT_EQ(back->workers, 4u);
  EXPECT_EQ(back->totalBytes, plan->totalBytes);
  // Another problem (one more layer) has other nodes and tensors: the text is not its plan.
  const Problem other = build(mlp({16, 8, 8, 4}));
  auto wrong = decodePlan(text, other);
  EXPECT_FALSE(bool(wrong));
  if (!wrong)
    llvm::consumeError(wrong.takeError());
  auto garbage = decodePlan("{\"workers\": ", p);
  EXPECT_FALSE(bool(garbage));
  if (!garbage)
    llvm::consumeError(garbage.takeError());
}

} // namespace
} // namespace tofu
