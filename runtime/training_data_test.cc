// Synthetic training values drawn by box: any tiling of a tensor draws exactly its whole
// value (so workers that draw only their tiles see what an unpartitioned run sees), batches
// change from step to step and nothing else does, and the values follow their rules.
#include "runtime/training_data.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/training.h"
#include "graph/zoo.h"
#include "testing/test_problem.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

struct Fixture {
  std::vector<std::string> outputs;
  Problem p;
  Fixture(Optimizer optimizer = Optimizer::Adam)
      : p(trainingProblem(buildMlp({32, 48, 10}, 6), optimizer, &outputs)) {}
  unsigned tensor(const std::string &name) const {
    for (unsigned t = 0; t < p.tensors.size(); ++t)
      if (p.tensors[t].name == name)
        return t;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
  }
};

/// `box` of `whole`.
std::vector<float> boxOf(const Tensor &whole, const Box &box) {
  std::vector<float> out;
  std::vector<int64_t> at(box.size());
  for (size_t a = 0; a < box.size(); ++a)
    at[a] = box[a].lo;
  if (boxElements(box) == 0)
    return out;
  for (;;) {
    int64_t flat = 0;
    for (size_t a = 0; a < box.size(); ++a)
      flat = flat * whole.shape[a] + at[a];
    out.push_back(static_cast<float>(whole.data[flat]));
    size_t a = box.size();
    for (;;) {
      if (a == 0)
        return out;
      --a;
      if (++at[a] < box[a].hi)
        break;
      at[a] = box[a].lo;
    }
  }
}

TEST(TrainingData, AnyBoxDrawsTheWholeValuesBox) {
  Fixture f;
  TrainingData d(f.p, f.outputs.at(0), 7, 0.01);
  ASSERT_FALSE(d.tensors().empty());
  for (unsigned step : {0u, 3u})
    for (unsigned t : d.tensors()) {
      const Tensor whole = d.value(t, step);
      const std::vector<int64_t> &shape = f.p.tensors[t].shape;
      // Halves, thirds and an off-centre block along every dimension.
      for (size_t dim = 0; dim < shape.size(); ++dim)
        for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, shape[dim] / 2},
                              {shape[dim] / 3, shape[dim]},
                              {1, shape[dim] - 1}}) {
          Box box = wholeBox(shape);
          box[dim] = {lo, std::max(lo, hi)};
          std::vector<float> got(std::max<int64_t>(1, boxElements(box)), -7.0f);
          d.fill(t, step, box, got.data());
          got.resize(boxElements(box));
          EXPECT_EQ(got, boxOf(whole, box)) << f.p.tensors[t].name << " dim " << dim;
        }
    }
}

TEST(TrainingData, BatchesChangeAndNothingElseDoes) {
  Fixture f;
  TrainingData d(f.p, f.outputs.at(0), 7, 0.01);
  std::set<unsigned> batch(d.batchTensors().begin(), d.batchTensors().end());
  ASSERT_EQ(batch.size(), 2u) << "the data and its labels";
  // Adam's bias corrections change with the step too (written before every step).
  const std::set<unsigned> corrections = {f.tensor("adam_c1"), f.tensor("adam_c2")};
  for (unsigned t : d.tensors()) {
    const bool same = d.value(t, 0).data == d.value(t, 1).data;
    EXPECT_EQ(same, !batch.count(t) && !corrections.count(t)) << f.p.tensors[t].name;
  }
  // Without a teacher nothing changes but the bias corrections.
  TrainingData fixed(f.p, f.outputs.at(0), 7, 0.01, {}, false);
  EXPECT_TRUE(fixed.batchTensors().empty());
  for (unsigned t : fixed.tensors())
    EXPECT_EQ(fixed.value(t, 0).data == fixed.value(t, 5).data, !corrections.count(t))
        << f.p.tensors[t].name;
  // Another seed, other values.
  TrainingData other(f.p, f.outputs.at(0), 8, 0.01);
  EXPECT_NE(other.value(f.tensor("fc1_w"), 0).data, d.value(f.tensor("fc1_w"), 0).data);
}

TEST(TrainingData, ValuesFollowTheirRules) {
  Fixture f;
  TrainingData d(f.p, f.outputs.at(0), 7, 0.01);
  EXPECT_EQ(d.value(f.tensor("lr"), 0).data, std::vector<double>{0.01f});
  EXPECT_EQ(d.value(f.tensor("d_" + f.outputs.at(0)), 0).data, std::vector<double>{1.0});
  int optimizerState = 0;
  for (unsigned t : d.tensors()) {
    const ProblemTensor &pt = f.p.tensors[t];
    const Tensor v = d.value(t, 2);
    if (pt.role == TensorRole::OptimizerState) {
      ++optimizerState;
      for (double x : v.data)
        EXPECT_EQ(x, 0.0) << pt.name;
    } else if (pt.role == TensorRole::Weight && pt.shape.size() == 2) {
      const double bound = 1.0 / std::sqrt(double(pt.shape[0]));
      double lo = 1, hi = -1;
      for (double x : v.data)
        lo = std::min(lo, x), hi = std::max(hi, x);
      EXPECT_GE(lo, -bound) << pt.name;
      EXPECT_LE(hi, bound) << pt.name;
      EXPECT_LT(lo, -0.5 * bound) << pt.name << ": spread over the range";
      EXPECT_GT(hi, 0.5 * bound) << pt.name;
    }
  }
  EXPECT_GT(optimizerState, 0);
  // The teacher's labels: classes among the first 16 (here all 10), varying over the batch.
  unsigned labels = d.batchTensors().back();
  std::set<double> seen;
  for (unsigned step = 0; step < 6; ++step)
    for (double x : d.value(labels, step).data) {
      EXPECT_EQ(x, std::floor(x));
      EXPECT_GE(x, 0.0);
      EXPECT_LT(x, 10.0);
      seen.insert(x);
    }
  EXPECT_GT(seen.size(), 2u) << "labels vary";
}

// The rate follows its schedule and Adam's bias corrections the step (1 - beta^t after t
// updates: the first update divides m = 0.1 g by 0.1); both are scheduled tensors, written
// before every step, and their value at a step does not depend on the steps before.
TEST(TrainingData, ScheduledHyperParameters) {
  Fixture f;
  TrainingHyper hyper;
  hyper.schedule = *parseLrSchedule("step:2:0.5");
  hyper.schedule.warmup = 1;
  TrainingData d(f.p, f.outputs.at(0), 7, 0.4, {}, true, nullptr, hyper);
  const std::set<unsigned> scheduled(d.scheduledTensors().begin(), d.scheduledTensors().end());
  EXPECT_EQ(scheduled,
            (std::set<unsigned>{f.tensor("lr"), f.tensor("adam_c1"), f.tensor("adam_c2")}));
  const unsigned lr = f.tensor("lr"), c1 = f.tensor("adam_c1"), c2 = f.tensor("adam_c2");
  const std::vector<double> rates = {0.2, 0.4, 0.4, 0.2, 0.2, 0.1};
  for (unsigned step = 0; step < rates.size(); ++step)
    EXPECT_FLOAT_EQ(d.value(lr, step).data[0], rates[step]) << step;
  EXPECT_FLOAT_EQ(d.value(c1, 0).data[0], 0.1);
  EXPECT_FLOAT_EQ(d.value(c1, 1).data[0], 0.19);
  EXPECT_FLOAT_EQ(d.value(c2, 0).data[0], 0.001);
  EXPECT_FLOAT_EQ(d.value(c2, 999).data[0], 1 - std::pow(0.999, 1000));
}

TEST(LrSchedule, FollowsItsFormulas) {
  auto sched = [](const std::string &text, unsigned warmup = 0) {
    auto s = parseLrSchedule(text);
    EXPECT_TRUE(static_cast<bool>(s)) << text;
    LrSchedule out = s ? *s : LrSchedule();
    if (!s)
      llvm::consumeError(s.takeError());
    out.warmup = warmup;
    return out;
  };
  EXPECT_EQ(sched("constant").at(0.3, 1000), 0.3);
  const LrSchedule step = sched("step:3");
  EXPECT_DOUBLE_EQ(step.at(1, 2), 1);
  EXPECT_DOUBLE_EQ(step.at(1, 3), 0.1);
  EXPECT_DOUBLE_EQ(step.at(1, 6), 0.01);
  // Warm-up (t + 1) / (N + 1), then the cosine over the remaining 8 of its 10 steps.
  const LrSchedule cosine = sched("cosine:10", 2);
  EXPECT_DOUBLE_EQ(cosine.at(0.9, 0), 0.3);
  EXPECT_DOUBLE_EQ(cosine.at(0.9, 1), 0.6);
  EXPECT_DOUBLE_EQ(cosine.at(0.9, 2), 0.9);
  EXPECT_NEAR(cosine.at(0.9, 6), 0.45, 1e-12);
  EXPECT_NEAR(cosine.at(0.9, 9), 0.9 * (1 + std::cos(M_PI * 7 / 8)) / 2, 1e-12);
  EXPECT_EQ(cosine.at(0.9, 10), 0.0);
  EXPECT_EQ(cosine.at(0.9, 50), 0.0);
  // The text form reads back.
  for (const char *text : {"constant", "step:30:0.5", "cosine:1000"})
    EXPECT_EQ(sched(text).str(), text);
  // Errors say what is wrong.
  for (const auto &[text, why] : std::vector<std::pair<std::string, std::string>>{
           {"step", "step takes EVERY"},
           {"step:0", "EVERY '0' is not a whole number"},
           {"step:-3", "EVERY '-3'"},
           {"step:3:0", "GAMMA '0' is not a number in (0, 1]"},
           {"step:3:1.5", "GAMMA '1.5'"},
           {"step:3:x", "GAMMA 'x'"},
           {"step:3:0.5:1", "step takes EVERY"},
           {"cosine:0", "HORIZON '0'"},
           {"cosine:99999999999", "HORIZON '99999999999'"},
           {"constant:4", "constant takes no parameters"},
           {"", "unknown schedule ''"},
           {"exp", "unknown schedule 'exp'"}}) {
    auto s = parseLrSchedule(text);
    ASSERT_FALSE(static_cast<bool>(s)) << text;
    const std::string message = llvm::toString(s.takeError());
    EXPECT_NE(message.find(why), std::string::npos) << text;
    EXPECT_EQ(message.rfind("lr-schedule '" + text + "': ", 0), 0u) << message;
  }
  // A tool names the setting by its flag.
  EXPECT_EQ(llvm::toString(parseLrSchedule("exp", SettingNames::flags()).takeError()),
            "--lr-schedule 'exp': unknown schedule 'exp' (expected constant, step:EVERY[:GAMMA] "
            "or cosine[:HORIZON])");
}

// An eval-mode batch norm's running statistics, with no values of their own, are buffers:
// the variance (read under rsqrt) is 1, and the teacher does not redraw either of them per
// step as it does the data (a variance drawn in [-1, 1] made densenet121's first loss NaN).
TEST(TrainingData, RunningStatisticsAreNotData) {
  Graph g;
  auto add = [&](const std::string &name, std::vector<int64_t> shape, TensorRole role) {
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.shapeKnown = true;
    t.role = role;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(t)));
  };
  add("x", {4, 3, 2, 2}, TensorRole::Input);
  for (const char *w : {"scale", "bias", "running_mean", "running_var"})
    add(w, {3}, TensorRole::Weight);
  add("bn_eps", {}, TensorRole::Input);
  Node n;
  n.name = "bn";
  n.op = "BatchNormalization";
  n.inputs = {"x", "scale", "bias", "running_mean", "running_var", "bn_eps"};
  n.output = "y";
  ASSERT_FALSE(static_cast<bool>(g.addNode(n)));
  g.outputs = {"y"};
  std::vector<std::string> outputs;
  Problem p = trainingProblem(std::move(g), Optimizer::SGD, &outputs);
  TrainingData d(p, outputs.at(0), 5, 0.1);
  unsigned var = 0, x = 0;
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    if (p.tensors[t].name == "running_var")
      var = t;
    if (p.tensors[t].name == "x")
      x = t;
  }
  EXPECT_EQ(p.tensors[var].role, TensorRole::Input); // a buffer, not trained
  const std::vector<unsigned> &batch = d.batchTensors();
  EXPECT_NE(std::find(batch.begin(), batch.end(), x), batch.end());
  EXPECT_EQ(std::find(batch.begin(), batch.end(), var), batch.end());
  for (unsigned step : {0u, 3u})
    for (double v : d.value(var, step).data)
      EXPECT_EQ(v, 1.0);
}

// Random inputs (Graph::randomInputs) are drawn afresh at every step, with a teacher or
// without, and are not data the teacher redraws: a mask is 0 or 1, 1 with the probability
// given; a uniform one lies in its range; a normal one has its mean and deviation.
TEST(TrainingData, RandomMasksAreDrawnEveryStep) {
  Graph g;
  auto add = [&](const std::string &name, std::vector<int64_t> shape) {
    TensorInfo t;
    t.name = name;
    t.shape = std::move(shape);
    t.shapeKnown = true;
    t.role = TensorRole::Input;
    ASSERT_FALSE(static_cast<bool>(g.addTensor(t)));
  };
  add("x", {40, 50});
  add("mask", {40, 50});
  add("scale", {});
  Node n;
  n.name = "drop";
  n.op = "Dropout";
  n.inputs = {"x", "mask", "scale"};
  n.output = "y";
  ASSERT_FALSE(static_cast<bool>(g.addNode(n)));
  g.outputs = {"y"};
  std::map<std::string, RandomInput> random;
  random["mask"] = {RandomInput::Kind::Mask, 0.7, 0};
  random["x"] = {RandomInput::Kind::Normal, 2.0, 0.5};
  random["scale"] = {RandomInput::Kind::Uniform, -3.0, -1.0};
  std::vector<std::string> outputs;
  Problem p = trainingProblem(std::move(g), Optimizer::SGD, &outputs);
  std::map<std::string, unsigned> index;
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    index[p.tensors[t].name] = t;
  const unsigned mask = index.at("mask"), x = index.at("x"), scale = index.at("scale");
  for (bool teacher : {true, false}) {
    TrainingData d(p, outputs.at(0), 5, 0.1, {}, teacher, nullptr, TrainingHyper(), &random);
    const std::vector<unsigned> &each = d.scheduledTensors(), &batch = d.batchTensors();
    EXPECT_NE(std::find(each.begin(), each.end(), mask), each.end());
    EXPECT_EQ(std::find(batch.begin(), batch.end(), mask), batch.end());
    const Tensor m0 = d.value(mask, 0), m1 = d.value(mask, 1);
    EXPECT_NE(m0.data, m1.data);
    for (const Tensor *m : {&m0, &m1}) {
      double ones = 0;
      for (double v : m->data) {
        EXPECT_TRUE(v == 0.0 || v == 1.0) << v;
        ones += v;
      }
      // 2000 draws: the standard deviation of the fraction is 0.01.
      EXPECT_NEAR(ones / double(m->size()), 0.7, 0.05);
    }
    const Tensor n0 = d.value(x, 0), n1 = d.value(x, 1);
    EXPECT_NE(n0.data, n1.data);
    double sum = 0, squares = 0;
    for (double v : n0.data) {
      sum += v;
      squares += v * v;
    }
    const double mean = sum / double(n0.size());
    EXPECT_NEAR(mean, 2.0, 0.05);
    EXPECT_NEAR(std::sqrt(squares / double(n0.size()) - mean * mean), 0.5, 0.05);
    const double u = d.value(scale, 3).data.at(0);
    EXPECT_TRUE(u >= -3.0 && u < -1.0) << u;
    EXPECT_NE(u, d.value(scale, 4).data.at(0));
  }
  // A value given for a random input wins (evaluation fills a mask with its expectation).
  const std::map<std::string, std::vector<double>> given = {
      {"mask", std::vector<double>(2000, 0.7)}};
  TrainingData evaluation(p, outputs.at(0), 5, 0.1, given, false, nullptr, TrainingHyper(),
                          &random);
  for (unsigned step : {0u, 1u}) // values pass through float32
    EXPECT_EQ(evaluation.value(mask, step).data, std::vector<double>(2000, double(0.7f)));
  const std::vector<unsigned> &each = evaluation.scheduledTensors();
  EXPECT_EQ(std::find(each.begin(), each.end(), mask), each.end());
}

} // namespace
} // namespace tofu
