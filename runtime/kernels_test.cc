// The native kernels compute exactly what the interpreter does, for whole ops and for every
// kind of share (output splits, split reductions, halos at the borders).
#include "runtime/kernels.h"

#include <random>

#include "analysis/verify.h"
#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

void compare(const std::string &opName, const Instantiation &inst,
             const std::vector<std::vector<int64_t>> &inputShapes) {
  const ir::OpDef *def = testLibrary().find(opName);
  ASSERT_NE(def, nullptr);
  auto op = instantiate(*def, inst);
  ASSERT_TRUE(bool(op)) << llvm::toString(op.takeError());
  auto shapes = concreteShapes(*op, inputShapes, std::nullopt);
  ASSERT_TRUE(bool(shapes)) << llvm::toString(shapes.takeError());
  std::vector<Tensor> inputs = randomInputs(*op, *shapes, 5, {-1.0, 1.0});
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : inputs)
    ptrs.push_back(&t);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Range> ranges = fullRanges(*shapes);
    if (trial > 0) // a random share: each variable cut into 1..3 parts, one part kept
      for (size_t v = 0; v < ranges.size(); ++v) {
        unsigned parts = 1 + rng() % 3;
        ranges[v] = partOf(ranges[v].size(), parts, rng() % parts);
      }
    auto fast = fastKernel(*op, *shapes, ptrs, ranges);
    ASSERT_TRUE(fast.has_value()) << opName;
    auto slow = evaluate(*op, *shapes, ptrs, ranges);
    ASSERT_TRUE(bool(slow)) << llvm::toString(slow.takeError());
    EXPECT_EQ(fast->shape, slow->shape);
    EXPECT_EQ(fast->data, slow->data) << opName << " trial " << trial;
  }
}

TEST(Kernels, MatMulMatchesTheInterpreter) {
  Instantiation inst;
  inst.groups = {{"b", 0}};
  compare("MatMul", inst, {{7, 5}, {5, 6}});
}

TEST(Kernels, Conv2dMatchesTheInterpreter) {
  Instantiation inst;
  inst.attrs = {{"sh", 2}, {"sw", 1}, {"ph", 1}, {"pw", 2}, {"peh", 1}, {"pew", 0}, {"dh", 1}, {"dw", 2}};
  compare("Conv2d", inst, {{2, 3, 9, 8}, {4, 3, 3, 2}});
  compare("Conv2d", Instantiation(), {{1, 2, 5, 5}, {3, 2, 1, 1}});
}

TEST(Kernels, OtherOpsAreLeftToTheInterpreter) {
  const ir::OpDef *def = testLibrary().find("Relu");
  Instantiation inst;
  inst.groups = {{"i", 2}};
  auto op = instantiate(*def, inst);
  ASSERT_TRUE(bool(op));
  Tensor x({2, 2}, 1.0);
  auto shapes = concreteShapes(*op, {{2, 2}}, std::nullopt);
  ASSERT_TRUE(bool(shapes));
  EXPECT_FALSE(fastKernel(*op, *shapes, {&x}, fullRanges(*shapes)).has_value());
}

} // namespace
} // namespace tofu
