// The per-worker programs: every buffer a step touches lies inside its worker's arena, the
// copies between workers move exactly the bytes the plan predicts, all workers agree on
// where they synchronise, element-wise optimiser updates are written in place, and an
// inconsistent memory plan is an error naming the worker.
#include "codegen/program_builder.h"

#include <set>

#include "graph/zoo.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

struct Planned {
  ExecPlan exec;
  MemoryPlan memory;
};

Planned plan(const Problem &p, unsigned k) {
  auto pp = searchedPlan(p, k);
  Planned out;
  out.exec = buildExecPlan(p, *pp);
  out.memory = planMemory(p, out.exec, {});
  return out;
}

/// Bytes of a buffer holding `box` as float32.
int64_t bytesOf(const Box &box) { return boxElements(box) * 4; }

bool inside(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.size(); ++d)
    if (inner[d].size() > 0 && (inner[d].lo < outer[d].lo || inner[d].hi > outer[d].hi))
      return false;
  return true;
}

TEST(Program, BuffersInArenasBytesAsPredictedSyncsAgreed) {
  Problem p = trainingProblem(buildMlp({48, 80, 24}, 6));
  for (unsigned k : {1u, 2u, 3u, 4u}) {
    Planned pl = plan(p, k);
    auto prog = buildProgram(p, pl.exec, pl.memory);
    ASSERT_TRUE(bool(prog)) << llvm::toString(prog.takeError());
    ASSERT_EQ(prog->workers, k);
    ASSERT_EQ(prog->worker.size(), k);
    EXPECT_EQ(prog->predictedBytes, pl.exec.bytesMoved(p));
    int64_t moved = 0;
    unsigned launches = 0;
    auto checkCopy = [&](unsigned w, const RegionCopy &c) {
      EXPECT_LT(c.from, k);
      EXPECT_TRUE(inside(c.srcBox, c.box) && inside(c.dstBox, c.box)) << "k=" << k;
      EXPECT_LE(c.srcOffset + bytesOf(c.srcBox), prog->worker[c.from].arenaBytes);
      EXPECT_LE(c.dstOffset + bytesOf(c.dstBox), prog->worker[w].arenaBytes);
      EXPECT_EQ(c.srcOffset % 4, 0);
      EXPECT_EQ(c.dstOffset % 4, 0);
      if (c.from != w)
        moved += boxElements(c.box) * c.elementBytes;
    };
    for (unsigned w = 0; w < k; ++w) {
      const WorkerProgram &wp = prog->worker[w];
      EXPECT_EQ(wp.arenaBytes, pl.memory.workers[w].peak);
      ASSERT_EQ(wp.steps.size(), prog->nodes.size());
      for (size_t i = 0; i < wp.steps.size(); ++i) {
        const ProgramStep &st = wp.steps[i];
        EXPECT_EQ(st.node, i);
        // Every worker synchronises at the same places, or the barrier would deadlock.
        EXPECT_EQ(st.syncAfterLaunch, prog->worker[0].steps[i].syncAfterLaunch) << "node " << i;
        EXPECT_EQ(st.syncAfterAssembly, prog->worker[0].steps[i].syncAfterAssembly) << "node " << i;
        for (const RegionCopy &c : st.fetch)
          checkCopy(w, c);
        for (const RegionCopy &c : st.assemble)
          checkCopy(w, c);
        if (!st.launches)
          continue;
        ++launches;
        const Launch &l = st.launch;
        const ProgramNode &n = prog->nodes[st.node];
        ASSERT_LT(l.kernel, prog->kernels.size());
        EXPECT_EQ(prog->kernels[l.kernel].op->name, n.op);
        ASSERT_EQ(l.inputOffsets.size(), n.inputs.size());
        for (size_t q = 0; q < l.inputOffsets.size(); ++q)
          EXPECT_LE(l.inputOffsets[q] + bytesOf(l.inputBoxes[q]), wp.arenaBytes)
              << n.name << " input " << q << " on worker " << w;
        EXPECT_LE(l.outputOffset + bytesOf(l.produced), wp.arenaBytes) << n.name;
        EXPECT_FALSE(l.ints.empty()) << n.name;
      }
      for (const RegionCopy &c : wp.carries)
        checkCopy(w, c);
    }
    // Carries are counted apart from the plan's bytes: subtract what they moved.
    int64_t carried = 0;
    for (unsigned w = 0; w < k; ++w)
      for (const RegionCopy &c : prog->worker[w].carries)
        if (c.from != w)
          carried += boxElements(c.box) * c.elementBytes;
    EXPECT_EQ(moved - carried, prog->predictedBytes) << "k=" << k;
    EXPECT_GE(launches, prog->nodes.size()) << "every node runs somewhere";
    EXPECT_EQ(prog->carries.size(), 4u); // two weights and two biases
    for (unsigned upd : prog->inPlace) {
      unsigned tgt = 0;
      for (auto [u, t] : prog->carries)
        if (u == upd)
          tgt = t;
      for (unsigned w = 0; w < k; ++w)
        for (const ProgramStep &st : prog->worker[w].steps)
          if (prog->nodes[st.node].output == upd && st.launches) {
            EXPECT_EQ(st.launch.outputOffset, prog->worker[w].tileOffset[tgt]);
            EXPECT_TRUE(prog->tensors[tgt].tiles[w] == st.launch.produced);
          }
    }
    // SGD's update reads the weight at its own element and the rank-0 learning rate: every
    // update here is written over its weight.
    EXPECT_EQ(prog->inPlace.size(), prog->carries.size()) << "k=" << k;
    // One kernel per instantiation, shared by the nodes of that instantiation.
    std::set<std::string> ops;
    for (const ProgramNode &n : prog->nodes)
      ops.insert(n.op);
    EXPECT_LT(prog->kernels.size(), prog->nodes.size());
    EXPECT_GE(prog->kernels.size(), ops.size());
    EXPECT_NE(programDump(*prog).find("launch kernel"), std::string::npos);
  }
}

TEST(Program, InconsistentMemoryPlanIsAnError) {
  Problem p = trainingProblem(buildMlp({48, 80, 24}, 6));
  Planned pl = plan(p, 2);
  Planned misaligned = pl;
  for (Buffer &b : misaligned.memory.workers[1].buffers)
    if (b.bytes > 0) {
      b.offset += 2;
      break;
    }
  auto prog = buildProgram(p, misaligned.exec, misaligned.memory);
  ASSERT_FALSE(bool(prog));
  std::string msg = llvm::toString(prog.takeError());
  EXPECT_NE(msg.find("worker 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("misaligned"), std::string::npos) << msg;

  Planned fewer = pl;
  fewer.memory.workers.pop_back();
  auto prog2 = buildProgram(p, fewer.exec, fewer.memory);
  ASSERT_FALSE(bool(prog2));
  EXPECT_NE(llvm::toString(prog2.takeError()).find("1 workers, the execution plan 2"),
            std::string::npos);
}

} // namespace
} // namespace tofu
