// Synthetic training values, drawn element by element from counter-based streams.
#include "runtime/training_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>

#include "analysis/verify.h"
#include "graph/graph.h"
#include "graph/microbatch.h"
#include "graph/training.h"

namespace tofu {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
/// Adam's moment decays: the rank-0 adam_b1 and adam_b2, and the betas of the per-step bias
/// corrections adam_c1 and adam_c2 (one pair, so that the two cannot disagree).
constexpr double kAdamB1 = 0.9, kAdamB2 = 0.999;

/// SplitMix64's output function: a bijection that scrambles every bit into every other.
uint64_t scramble(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Element `i` of the stream `key`, uniform in [0, 1).
double unit(uint64_t key, int64_t i) {
  return static_cast<double>(scramble(key + (static_cast<uint64_t>(i) + 1) * kGolden) >> 11) *
         0x1.0p-53;
}

/// A stream per seed and tensor name (FNV-1a over the name).
uint64_t streamOf(unsigned seed, const std::string &name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001b3ull;
  return scramble(h ^ scramble((uint64_t(seed) + 1) * kGolden));
}

/// Calls fn(i, flat, coords) for every element of `box` of a tensor of `shape`, `i`
/// counting row-major over the box and `flat` over the whole tensor.
template <typename Fn>
void forEachElement(const std::vector<int64_t> &shape, const Box &box, Fn &&fn) {
  const size_t d = shape.size();
  if (boxElements(box) == 0)
    return;
  std::vector<int64_t> at(d), stride(d, 1);
  for (size_t a = d; a-- > 1;)
    stride[a - 1] = stride[a] * shape[a];
  for (size_t a = 0; a < d; ++a)
    at[a] = box[a].lo;
  for (int64_t i = 0;; ++i) {
    int64_t flat = 0;
    for (size_t a = 0; a < d; ++a)
      flat += at[a] * stride[a];
    fn(i, flat, at.data());
    size_t a = d;
    for (;;) {
      if (a == 0)
        return;
      --a;
      if (++at[a] < box[a].hi)
        break;
      at[a] = box[a].lo;
    }
  }
}

} // namespace

TrainingData::TrainingData(const Problem &p, const std::string &loss, unsigned seed, double lr,
                           const std::map<std::string, std::vector<double>> &constants,
                           bool teacher, const std::map<std::string, std::vector<float>> *initial,
                           TrainingHyper hyper, const std::map<std::string, RandomInput> *random)
    : p_(p), constants_(constants) {
  auto fill = [](double x) {
    Rule r;
    r.kind = Kind::Fill;
    r.a = x;
    return r;
  };
  // Integers in [0, integers) where there are any, else uniform in [lo, hi).
  auto drawn = [](int64_t integers, double lo, double hi) {
    Rule r;
    r.kind = integers > 0 ? Kind::Integers : Kind::Uniform;
    r.integers = integers;
    r.a = lo;
    r.b = hi;
    return r;
  };
  // What the op reading a tensor first needs of it.
  // A microbatch's slice of an input (graph/microbatch.h) is read as the input itself is:
  // its rule is that of the slice's first reader.
  auto microbatchSlice = [&](const ProblemNode &n) {
    return n.table->op.def->name == "Slice" && p.tensors[n.inputs[0]].producer < 0 &&
           splitMicrobatch(n.name).has_value();
  };
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    if (microbatchSlice(node))
      continue;
    std::vector<InputValueRule> needs;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      unsigned t = node.inputs[i];
      if (const int prod = p.tensors[t].producer; prod >= 0 && microbatchSlice(p.nodes[prod]))
        t = p.nodes[prod].inputs[0];
      if (p.tensors[t].producer >= 0 || rules_.count(t))
        continue;
      if (needs.empty())
        needs = inputValueRules(node.table->op, node.shapes);
      // Read under a square root or a logarithm: non-negative; a per-channel statistic (a
      // running variance with no value of its own) 1, PyTorch's initial value.
      Rule r = needs[i].positive && p.tensors[t].shape.size() <= 1 && needs[i].integers == 0
                   ? fill(1.0)
                   : drawn(needs[i].integers, needs[i].positive ? 0.0 : -1.0, 1.0);
      r.diagonal = needs[i].diagonal;
      rules_[t] = r;
    }
  }
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    if (pt.producer >= 0)
      continue;
    if (!rules_.count(t))
      rules_[t] = fill(0.5); // nothing reads it
    Rule &r = rules_[t];
    std::string lower = pt.name;
    for (char &c : lower)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (pt.name == "d_" + loss)
      r = fill(1.0);
    else if (pt.name == "lr" || pt.name == "adam_c1" || pt.name == "adam_c2") {
      r = Rule();
      r.kind = Kind::Scheduled;
      if (pt.name == "lr")
        r.schedule = [lr, s = hyper.schedule](unsigned step) { return s.at(lr, step); };
      else
        r.schedule = [beta = pt.name == "adam_c1" ? kAdamB1 : kAdamB2](unsigned step) {
          return adamBiasCorrection(beta, step);
        };
      scheduled_.push_back(t);
    } else if (pt.name == "momentum")
      r = fill(hyper.momentum);
    else if (pt.name == "weight_decay")
      r = fill(hyper.weightDecay);
    else if (pt.name == "adam_b1")
      r = fill(kAdamB1);
    else if (pt.name == "adam_b2")
      r = fill(kAdamB2);
    else if (pt.name == "adam_eps")
      r = fill(1e-8);
    else if (pt.shape.empty() && lower.find("eps") != std::string::npos)
      r = fill(0.1); // a normalisation's epsilon (see the class comment)
    else if (pt.role == TensorRole::OptimizerState)
      r = fill(0.0);
    else if (pt.role == TensorRole::Weight && pt.shape.size() >= 2) {
      int64_t fanIn =
          pt.shape.size() == 2 ? pt.shape[0] : boxElements(wholeBox(pt.shape)) / pt.shape[0];
      double bound = 1.0 / std::sqrt(double(std::max<int64_t>(1, fanIn)));
      r = drawn(0, -bound, bound);
    }
    if (auto c = constants_.find(pt.name);
        c != constants_.end() &&
        static_cast<int64_t>(c->second.size()) == boxElements(wholeBox(pt.shape))) {
      r = Rule();
      r.kind = Kind::Given;
      r.given = &c->second;
    } else if (initial) {
      if (auto v = initial->find(pt.name);
          v != initial->end() &&
          static_cast<int64_t>(v->second.size()) == boxElements(wholeBox(pt.shape))) {
        r = Rule();
        r.kind = Kind::GivenFloat;
        r.givenFloat = &v->second;
        ++initialized_;
      }
    }
    // A random input draws its values unless `constants` gives it some (evaluation's masks).
    if (auto m =
            random ? random->find(pt.name) : std::map<std::string, RandomInput>::const_iterator();
        random && m != random->end() && r.kind != Kind::Given) {
      r = Rule();
      r.kind = Kind::Random;
      r.random = m->second.kind;
      r.a = m->second.a;
      r.b = m->second.b;
      r.batch = true;
      scheduled_.push_back(t);
    }
    r.stream = streamOf(seed, pt.name);
    tensors_.push_back(t);
  }
  if (!teacher)
    return;

  // The teacher, where the loss and its labels allow one.
  int lossNode = -1;
  for (const ProblemTensor &t : p.tensors)
    if (t.name == loss)
      lossNode = t.producer;
  // A weighted sum of losses (several outputs', a step's microbatches': graph/microbatch.h)
  // is taught through its first term's loss.
  while (lossNode >= 0) { // each step goes to an earlier node: it ends
    const ProblemNode &n = p.nodes[lossNode];
    const std::string &op = n.table->op.def->name;
    if ((op != "Add" && op != "Mul") || n.inputs.empty())
      break;
    lossNode = p.tensors[n.inputs[0]].producer;
  }
  if (lossNode < 0)
    return;
  const ProblemNode &ln = p.nodes[lossNode];
  const std::string &kind = ln.table->op.def->name;
  const bool crossEntropy = isCrossEntropyLoss(kind);
  if ((!crossEntropy && kind != "mse") || ln.inputs.size() != 2)
    return;
  unsigned answer = ln.inputs[1];
  // A microbatch's labels are a slice of the batch's: the teacher labels the batch.
  if (const int slice = p.tensors[answer].producer; slice >= 0 && microbatchSlice(p.nodes[slice]))
    answer = p.nodes[slice].inputs[0];
  if (p.tensors[answer].producer >= 0)
    return;
  std::vector<unsigned> data;
  for (unsigned t : tensors_) {
    const ProblemTensor &pt = p.tensors[t];
    const int64_t size = boxElements(wholeBox(pt.shape));
    if (pt.role != TensorRole::Input || pt.shape.empty() || t == answer || size == 0 ||
        constants_.count(pt.name) || rules_.at(t).kind == Kind::GivenFloat ||
        rules_.at(t).kind == Kind::Fill || // a fixed value: a running variance, an unread input
        rules_.at(t).kind == Kind::Random)
      continue;
    data.push_back(t);
    if (input_ < 0 || size > boxElements(wholeBox(p.tensors[input_].shape)))
      input_ = static_cast<int>(t);
  }
  if (input_ < 0)
    return;
  const std::vector<int64_t> &answerShape = p.tensors[answer].shape;
  classify_ = crossEntropy; // a class per label: per row, or per position of a sequence
  classes_ = classify_ ? p.tensors[ln.inputs[0]].shape.back()
                       : (answerShape.empty() ? 1 : answerShape.back());
  rows_ = boxElements(wholeBox(answerShape));
  if (!classify_)
    rows_ /= std::max<int64_t>(1, classes_);
  const int64_t inputSize = boxElements(wholeBox(p.tensors[input_].shape));
  if (rows_ <= 0 || inputSize % rows_ != 0 || classes_ <= 0) {
    input_ = -1;
    return;
  }
  width_ = inputSize / rows_;
  features_ = std::min<int64_t>(64, width_);
  // A classifier teacher picks among the first 16 classes only: a model learns that prior
  // within a few small steps and the map after it, so short runs show the loss falling
  // (over 1000 classes 60 steps of batch 2 show nothing: measured on the MLP).
  picked_ = classify_ ? std::min<int64_t>(classes_, 16) : classes_;
  std::mt19937_64 teacherRng(0x51ed270b5ull * (uint64_t(seed) + 1));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  map_.resize(features_ * classes_);
  for (double &m : map_)
    m = u(teacherRng);
  for (unsigned t : data) { // fresh every step: integers in their range, else uniform
    Rule &r = rules_[t];
    const uint64_t stream = r.stream;
    r = drawn(r.kind == Kind::Integers ? r.integers : 0, -1.0, 1.0);
    r.stream = stream;
    r.batch = true;
    batch_.push_back(t);
  }
  Rule &labels = rules_[answer];
  labels.kind = Kind::Labels;
  labels.batch = true;
  batch_.push_back(answer);
}

double TrainingData::element(const Rule &r, unsigned t, unsigned step, int64_t flat,
                             const int64_t *coords) const {
  const uint64_t key =
      r.batch ? scramble(r.stream ^ scramble((uint64_t(step) + 1) * kGolden)) : r.stream;
  switch (r.kind) {
  case Kind::Fill:
    return r.a;
  case Kind::Given:
    return (*r.given)[flat];
  case Kind::GivenFloat:
    return (*r.givenFloat)[flat];
  case Kind::Integers:
    return std::min<double>(std::floor(unit(key, flat) * double(r.integers)),
                            double(r.integers - 1));
  case Kind::Uniform: {
    double v = r.a + (r.b - r.a) * unit(key, flat);
    if (r.diagonal && coords) {
      const auto [a, b] = *r.diagonal;
      const std::vector<int64_t> &shape = p_.tensors[t].shape;
      if (coords[a] == coords[b])
        v += static_cast<double>(shape[a] + shape[b] + 1);
    }
    return v;
  }
  case Kind::Scheduled:
    return r.schedule(step);
  case Kind::Random:
    switch (r.random) {
    case RandomInput::Kind::Mask:
      return unit(key, flat) < r.a ? 1.0 : 0.0;
    case RandomInput::Kind::Uniform:
      return r.a + (r.b - r.a) * unit(key, flat);
    case RandomInput::Kind::Normal: { // Box-Muller over two draws of the element's own
      const double u1 = unit(key, 2 * flat), u2 = unit(key, 2 * flat + 1);
      return r.a + r.b * std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
    }
    }
    return 0;
  case Kind::Labels:
    break; // drawn by rows in fill
  }
  return 0;
}

void TrainingData::teacherScores(unsigned step, int64_t row, std::vector<double> &scores) const {
  const Rule &x = rules_.at(static_cast<unsigned>(input_));
  std::vector<double> folded(features_, 0.0);
  for (int64_t f = 0; f < width_; ++f)
    folded[f % features_] += static_cast<float>(
        element(x, static_cast<unsigned>(input_), step, row * width_ + f, nullptr));
  scores.assign(classes_, 0.0);
  for (int64_t c = 0; c < classes_; ++c) {
    double s = 0;
    for (int64_t f = 0; f < features_; ++f)
      s += folded[f] * map_[f * classes_ + c];
    scores[c] = s / std::sqrt(double(width_));
  }
}

void TrainingData::fill(unsigned t, unsigned step, const Box &box, float *out) const {
  const Rule &r = rules_.at(t);
  const std::vector<int64_t> &shape = p_.tensors[t].shape;
  if (r.kind != Kind::Labels) {
    forEachElement(shape, box, [&](int64_t i, int64_t flat, const int64_t *coords) {
      out[i] = static_cast<float>(element(r, t, step, flat, coords));
    });
    return;
  }
  std::vector<double> scores;
  int64_t last = -1;
  forEachElement(shape, box, [&](int64_t i, int64_t flat, const int64_t *) {
    const int64_t row = classify_ ? flat : flat / classes_;
    if (row != last)
      teacherScores(step, row, scores), last = row;
    out[i] = classify_
                 ? static_cast<float>(std::max_element(scores.begin(), scores.begin() + picked_) -
                                      scores.begin())
                 : static_cast<float>(std::tanh(scores[flat % classes_]));
  });
}

Tensor TrainingData::value(unsigned t, unsigned step) const {
  const std::vector<int64_t> &shape = p_.tensors[t].shape;
  Tensor out(shape);
  std::vector<float> f(std::max<int64_t>(1, out.size()));
  fill(t, step, wholeBox(shape), f.data());
  for (int64_t i = 0; i < out.size(); ++i)
    out.data[i] = f[i];
  return out;
}

void applyConstants(const Problem &p, const std::map<std::string, std::vector<double>> &constants,
                    std::map<unsigned, Tensor> &values) {
  for (auto &[t, value] : values) {
    auto it = constants.find(p.tensors[t].name);
    if (it != constants.end() && static_cast<int64_t>(it->second.size()) == value.size())
      value.data = it->second;
  }
}

std::map<unsigned, Tensor>
trainingValues(const Problem &p, const std::string &loss, unsigned seed, double lr,
               const std::map<std::string, std::vector<double>> &constants) {
  TrainingData d(p, loss, seed, lr, constants, false);
  std::map<unsigned, Tensor> out;
  for (unsigned t : d.tensors())
    out.emplace(t, d.value(t, 0));
  return out;
}

} // namespace tofu
