// Element-wise fusion on a training graph: nodes fold only into a sole reader, the fused
// plan moves exactly the bytes of the plan it came from, folded intermediates get no
// buffer (no worker's peak grows), graph outputs and optimiser updates stay. (That fused
// kernels compute what the nodes did is checked by running them: //runtime:engine_test
// runs every model fused against the interpreter on the unfused graph.)
#include "codegen/fusion.h"

#include <set>

#include "codegen/memory_plan.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(Fusion, FoldsSoleReadersOnlyMovesNoBytesAndSavesMemory) {
  std::vector<std::string> outputs;
  Problem p = trainingProblem(buildModel("wresnet-50-1-i32-c4-k10", 2), Optimizer::Adam, &outputs);
  for (unsigned k : {1u, 2u, 4u}) {
    auto plan = searchedPlan(p, k);
    ASSERT_TRUE(plan.has_value());
    ExecPlan exec = buildExecPlan(p, *plan);
    FusedPlan f = fuseElementwise(p, exec, outputs);
    EXPECT_GT(f.folded, 10u) << "k=" << k; // batch-norm and ReLU chains, their gradients
    EXPECT_EQ(f.plan.nodes.size() + f.folded, exec.nodes.size());
    EXPECT_EQ(f.plan.bytesMoved(f.problem), exec.bytesMoved(p)) << "k=" << k;
    // Which tensors disappeared: produced before, read by no node of the fused plan.
    std::set<unsigned> read, produced;
    for (const NodeExec &ne : f.plan.nodes) {
      produced.insert(f.problem.nodes[ne.node].output);
      for (unsigned t : f.problem.nodes[ne.node].inputs)
        read.insert(t);
    }
    unsigned gone = 0;
    for (const NodeExec &ne : exec.nodes) {
      const unsigned t = p.nodes[ne.node].output;
      if (produced.count(t))
        continue;
      ++gone;
      EXPECT_EQ(read.count(t), 0u) << p.tensors[t].name << " folded but still read";
      EXPECT_EQ(p.tensors[t].consumers.size(), 1u) << p.tensors[t].name << " had other readers";
      EXPECT_NE(p.tensors[t].role, TensorRole::Weight);
      for (const std::string &out : outputs)
        EXPECT_NE(p.tensors[t].name, out);
      for (unsigned w = 0; w < k; ++w)
        EXPECT_EQ(boxElements(f.plan.tiles[w][t]), 0) << p.tensors[t].name;
    }
    EXPECT_EQ(gone, f.folded);
    // Optimiser updates are never folded away (their results are carried).
    for (const ProblemNode &n : p.nodes) {
      if (n.table->op.def->name == "adam_update") {
        EXPECT_TRUE(produced.count(n.output)) << n.name;
      }
    }
    MemoryPlan before = planMemory(p, exec, outputs),
               after = planMemory(f.problem, f.plan, outputs);
    EXPECT_EQ(checkMemoryPlan(after), "");
    for (unsigned w = 0; w < k; ++w)
      EXPECT_LE(after.workers[w].peak, before.workers[w].peak) << "k=" << k << " worker " << w;
    std::printf("k=%u: %u nodes folded into %zu fused kernels (e.g. %s); peak %lld -> %lld bytes\n",
                k, f.folded, f.chains.size(), f.chains.empty() ? "-" : f.chains[0].c_str(),
                (long long)before.largestPeak(), (long long)after.largestPeak());
  }
}

TEST(Fusion, FoldedOpReadsTheProducersInputsAfterTheConsumers) {
  std::vector<std::string> outputs;
  Problem p = trainingProblem(buildModel("wresnet-50-1-i32-c4-k10", 2), Optimizer::Adam, &outputs);
  auto plan = searchedPlan(p, 2);
  ASSERT_TRUE(plan.has_value());
  FusedPlan f = fuseElementwise(p, buildExecPlan(p, *plan), outputs);
  unsigned checked = 0;
  for (const NodeExec &ne : f.plan.nodes) {
    const ProblemNode &n = f.problem.nodes[ne.node];
    if (n.name.find('+') == std::string::npos)
      continue;
    ++checked;
    const InstOp &op = n.table->op;
    ASSERT_EQ(op.inputs.size(), n.inputs.size()) << n.name;
    ASSERT_EQ(n.shapes.inputs.size(), n.inputs.size()) << n.name;
    for (size_t q = 0; q < n.inputs.size(); ++q) {
      EXPECT_EQ(op.inputs[q].rank, n.shapes.inputs[q].size()) << n.name << " input " << q;
      EXPECT_EQ(f.problem.tensors[n.inputs[q]].shape, n.shapes.inputs[q]) << n.name;
      for (unsigned w = 0; w < 2; ++w)
        EXPECT_EQ(ne.workers[w].inputs[q].tensor, n.inputs[q]) << n.name;
    }
    EXPECT_NE(op.name.find('+'), std::string::npos);
  }
  EXPECT_EQ(checked, f.chains.size());
}

} // namespace
} // namespace tofu
