// Golden schedules of the ops whose statistics were recomputed per output element before
// the scheduler existed, and the scheduler's promise over the whole operator library:
// every reduction computed once per value of the variables it depends on.
#include "codegen/schedule.h"

#include <algorithm>

#include "analysis/verify.h"
#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

InstOp instance(const std::string &opName, std::vector<unsigned> ranks,
                std::map<std::string, int64_t> groups = {}) {
  return testInstance(opName, ranks, std::move(groups));
}

std::string cpp(const InstOp &op) {
  return describeSchedule(op, scheduleKernel(op, ScheduleTarget::Cpp));
}
std::string cuda(const InstOp &op) {
  return describeSchedule(op, scheduleKernel(op, ScheduleTarget::Cuda));
}
std::string cudaPasses(const InstOp &op) {
  return describeSchedule(op, scheduleKernel(op, ScheduleTarget::CudaPasses));
}

/// The lines of `text` that contain `word`, joined.
std::string linesWith(const std::string &text, const std::string &word) {
  std::string out, line;
  for (char c : text) {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.find(word) != std::string::npos)
      out += line + "\n";
    line.clear();
  }
  return out;
}

TEST(Schedule, BatchNormGradXKeepsItsStatisticsPerChannel) {
  InstOp op = instance("batch_norm_grad_x", {4, 4, 1, 0});
  // The variance's squared deviations, Sum dy, Sum x (xhat's mean) and Sum dy * xhat: each a
  // temporary indexed by the channel alone, filled before the main loops (which run the
  // batch outside the channel). The variance reads the mean, so that mean is a loop of its
  // own inside the deviations' pass (inline at the channel), and again inside Sum dy * xhat's;
  // every repeat of the deviations (the inlined xhat writes them again, inside Sum dy * xhat
  // too) reads the first; the counts are extents.
  const std::string s = cpp(op);
  EXPECT_EQ(linesWith(s, "temporary"), "r0 Sum(m, t0, t1) temporary [c]\n"
                                       "r6 Sum(m_7, t0_7, t1_7) temporary [c]\n"
                                       "r8 Sum(m_9, t0_9, t1_9) temporary [c] (loops of r0)\n"
                                       "r12 Sum(m_17, t0_17, t1_17) temporary [c]\n");
  EXPECT_EQ(linesWith(s, "inline"), "r1 Sum(m_2, t0_2, t1_2) inline in r0's pass at c\n"
                                    "r13 Sum(m_18, t0_18, t1_18) inline in r12's pass at c\n");
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 19); // 18 reductions and the main nest
  // Repeats alias the deviations (r0) or the mean (r1), nothing else.
  EXPECT_EQ(linesWith(s, "alias").size(), linesWith(linesWith(s, "alias"), "alias r0").size() +
                                              linesWith(linesWith(s, "alias"), "alias r1").size());
  EXPECT_NE(linesWith(s, "r3 ").find("alias r1"), std::string::npos);
  EXPECT_NE(linesWith(s, "r10 ").find("alias r0"), std::string::npos);
  EXPECT_NE(linesWith(s, "r15 ").find("alias r0"), std::string::npos);
  EXPECT_EQ(linesWith(s, "main:"), "main: parallel n, c, s0; vector s1\n");
  // CUDA in one launch: the same sums inline at the channel (the block variant gives a
  // channel a block); in several launches, the temporaries (each its own pass: no fusion
  // yet), and an element-wise main nest.
  EXPECT_EQ(linesWith(cuda(op), "inline"), "r1 Sum(m_2, t0_2, t1_2) inline at c\n"
                                           "r0 Sum(m, t0, t1) inline at c\n"
                                           "r6 Sum(m_7, t0_7, t1_7) inline at c\n"
                                           "r12 Sum(m_17, t0_17, t1_17) inline at c\n");
  const std::string passes = cudaPasses(op);
  EXPECT_EQ(linesWith(passes, "temporary"), "r1 Sum(m_2, t0_2, t1_2) temporary [c]\n"
                                            "r0 Sum(m, t0, t1) temporary [c]\n"
                                            "r6 Sum(m_7, t0_7, t1_7) temporary [c]\n"
                                            "r12 Sum(m_17, t0_17, t1_17) temporary [c]\n");
  EXPECT_EQ(linesWith(passes, "inline"), "");
}

TEST(Schedule, LayerNormGradScaleKeepsPerTokenStatistics) {
  // Output f; the sum over the tokens p holds xhat, whose statistics depend on p only: two
  // passes fill them per token (the mean, then the squared deviations from it, which read
  // the mean), then blocks of f accumulate token by token (the reads run along f).
  InstOp op = instance("layer_norm_grad_scale", {3, 3, 0}, {{"p", 2}, {"f", 1}});
  EXPECT_EQ(cpp(op), "r1 Sum(g0) temporary [p0, p1]\n"
                     "r2 Sum(g0_2) count\n"
                     "r4 Sum(g0_4) alias r1\n"
                     "r5 Sum(g0_5) count\n"
                     "r6 Sum(g0_6) alias r1\n"
                     "r7 Sum(g0_7) count\n"
                     "r3 Sum(g0_3) temporary [p0, p1]\n"
                     "r8 Sum(g0_8) count\n"
                     "r0 Sum(p0, p1) inline at f0\n"
                     "main: parallel blocks of f0; interchanged\n");
}

TEST(Schedule, BatchNormTrainTakesTheMeanBeforeTheDeviations) {
  // The mean per channel, then the squared deviations from it (which read it, so a pass of
  // their own), every later mean reading the first.
  EXPECT_EQ(cpp(instance("batch_norm_train", {4, 1, 1, 0})),
            "r0 Sum(m, t0, t1) temporary [c]\n"
            "r1 Sum(m_2, t0_2, t1_2) count\n"
            "r3 Sum(m_4, t0_4, t1_4) alias r0\n"
            "r4 Sum(m_5, t0_5, t1_5) count\n"
            "r5 Sum(m_6, t0_6, t1_6) alias r0\n"
            "r6 Sum(m_7, t0_7, t1_7) count\n"
            "r2 Sum(m_3, t0_3, t1_3) temporary [c]\n"
            "r7 Sum(m_8, t0_8, t1_8) count\n"
            "main: parallel n, c, s0; vector s1\n");
  // A bias gradient runs along its contiguous reads (no interchange); a column sum does not.
  EXPECT_EQ(cpp(instance("batch_norm_grad_bias", {4})), "r0 Sum(n, s0, s1) inline at c\n"
                                                        "main: parallel c\n");
  EXPECT_EQ(cpp(instance("lstm_gates_grad_b", {2})), "r0 Sum(n) inline at q\n"
                                                     "main: parallel blocks of q; interchanged\n");
}

TEST(Schedule, SoftmaxCrossEntropyNormalisesOncePerRowAndPicksTheLabel) {
  // The loss reads one logit per row: `select(c == labels[n], ..., 0)` pins c.
  InstOp op = instance("softmax_cross_entropy", {2, 1});
  EXPECT_EQ(cpp(op), "r1 Max(m) inline at n\n"
                     "r3 Max(m_2) alias r1\n"
                     "r2 Sum(k) inline at n\n"
                     "r4 Sum(j) count\n"
                     "r0 Sum(n, c) inline once; c picked\n");
  // On CUDA the loss over the batch depends on no loop: a temporary of its own launches
  // (split across blocks along n), each row's normaliser computed inside it.
  EXPECT_EQ(cudaPasses(op), "r1 Max(m) inline in r0's pass at n\n"
                            "r3 Max(m_2) alias r1\n"
                            "r2 Sum(k) inline in r0's pass at n\n"
                            "r4 Sum(j) count\n"
                            "r0 Sum(n, c) temporary []; c picked\n");
}

TEST(Schedule, CudaPassesKeepPerTokenStatisticsAndLeaveRowsInline) {
  // The layer norm's scale gradient: per-token statistics in temporaries, the sum over
  // tokens per feature in the main nest.
  InstOp ln = instance("layer_norm_grad_scale", {3, 3, 0}, {{"p", 2}, {"f", 1}});
  EXPECT_EQ(linesWith(cudaPasses(ln), "temporary"), "r1 Sum(g0) temporary [p0, p1]\n"
                                                    "r3 Sum(g0_3) temporary [p0, p1]\n");
  EXPECT_EQ(linesWith(cudaPasses(ln), "inline"), "r0 Sum(p0, p1) inline at f0\n");
  // A softmax's row statistics are computed once per row in one launch (a block per row):
  // no temporaries.
  EXPECT_EQ(linesWith(cudaPasses(instance("Softmax", {2})), "temporary"), "");
  // A nested reduction that uses none of its temporary's variables is a temporary too
  // (each block of the pass would compute it again): the variance's mean.
  EXPECT_EQ(linesWith(cudaPasses(instance("batch_norm_grad_scale", {4, 4, 0})), "inline in"), "");
}

TEST(Schedule, ContractionsInterchangeWindowsStride) {
  // A window gradient visits only the windows that hold the element: each window variable
  // steps by the stride from the solution of its congruence (so the row cannot go inside).
  // (Max pooling's: inside, the first maximum of the window, a Min over its positions.)
  EXPECT_EQ(cpp(instance("maxpool2d_grad", {4, 4, 4})),
            "r1 Min(jy, jx) inline at kx\n"
            "r0 Sum(ky, kx) inline at w; ky by congruence mod 2; kx by congruence mod 2\n"
            "main: parallel n, c, h\n");
  // A stride of 1 is no congruence; a transposed convolution's window strides, its
  // channel sum does not.
  Instantiation unit;
  unit.attrs = {{"sh", 1}, {"sw", 1}};
  EXPECT_EQ(cpp(*instantiate(*testLibrary().find("lppool2d_grad"), unit)),
            "r0 Sum(ky, kx) inline at w\n"
            "main: parallel n, c, h; interchanged\n");
  Instantiation strided;
  strided.attrs = {{"o", 9}, {"s", 2}};
  EXPECT_EQ(cpp(*instantiate(*testLibrary().find("ConvTranspose1d"), strided)),
            "r0 Sum(ci, k) inline at x; k by congruence mod 2\n"
            "main: parallel n, co\n");
  EXPECT_EQ(cpp(instance("lstm_gates", {2, 2, 2, 2, 1})), "r0 Sum(k) inline at q\n"
                                                          "r1 Sum(j) inline at q\n"
                                                          "main: parallel n\n");
}

TEST(Schedule, EveryReductionOfTheLibraryIsComputedOncePerValue) {
  unsigned ops = 0, temporaries = 0, aliases = 0;
  for (const auto &[name, def] : testLibrary().ops()) {
    auto op = instantiate(*def, completeForVerification(*def, Instantiation{}, nullptr));
    if (!op) {
      llvm::consumeError(op.takeError());
      continue;
    }
    bool opaque = false;
    ir::walk(*op->body, [&](const ir::Expr &e) { opaque |= llvm::isa<ir::OpaqueCall>(e); });
    if (opaque)
      continue; // keeps its reductions inline (schedule.cc)
    ++ops;
    for (ScheduleTarget target : {ScheduleTarget::Cpp, ScheduleTarget::CudaPasses}) {
      KernelSchedule s = scheduleKernel(*op, target);
      const bool cpp = target == ScheduleTarget::Cpp;
      for (const ScheduledReduction &r : s.reductions) {
        temporaries += cpp && r.placement == ScheduledReduction::Placement::Temporary;
        aliases += cpp && r.placement == ScheduledReduction::Placement::Alias;
        if (r.placement != ScheduledReduction::Placement::Inline)
          continue;
        for (unsigned v : r.loops)
          EXPECT_NE(std::find(r.depends.begin(), r.depends.end(), v), r.depends.end())
              << name << ": r" << r.id << " is computed inside the loop over " << op->vars[v].name
              << ", which it does not use\n"
              << describeSchedule(*op, s);
        // Several launches: nothing is computed once per call inside one launch (each
        // thread or block would), nor, in a temporary's pass, once per value of its index
        // (each part would).
        if (!cpp) {
          EXPECT_GE(r.slot, 0) << name << ": r" << r.id << " is computed once per call\n"
                               << describeSchedule(*op, s);
          if (r.nest >= 0)
            for (const ScheduledReduction &t : s.reductions)
              if (static_cast<int>(t.id) == r.nest)
                EXPECT_NE(std::find(t.node->vars.begin(), t.node->vars.end(),
                                    static_cast<unsigned>(r.slot)),
                          t.node->vars.end())
                    << name << ": r" << r.id << " is computed in r" << t.id
                    << "'s pass at a variable of its index\n"
                    << describeSchedule(*op, s);
        }
      }
    }
  }
  EXPECT_GT(ops, 300u);
  EXPECT_GT(temporaries, 10u);
  EXPECT_GT(aliases, 10u);
}

} // namespace
} // namespace tofu
