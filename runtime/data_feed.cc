// Data sets fed to partitioned models; evaluation on the forward graph.
#include "runtime/data_feed.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "graph/graph.h"
#include "graph/microbatch.h"
#include "graph/training.h"
#include "runtime/backend.h"
#include "llvm/ADT/StringRef.h"

namespace tofu {

int findTensor(const Problem &p, const std::string &name) {
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (p.tensors[t].name == name)
      return static_cast<int>(t);
  return -1;
}

namespace {

/// The feed setting's INPUT=ARRAY pairs, in order; an item that is not one is an error.
llvm::Expected<std::vector<std::pair<std::string, std::string>>>
parseFeeds(const std::string &feeds, const SettingNames &names) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::stringstream ss(feeds);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return stringError(
          fmt::format("{} '{}': '{}' is not INPUT=ARRAY", names("feed"), feeds, item));
    pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return pairs;
}

/// The labels input of the loss: softmax_cross_entropy's (or, a class per position,
/// softmax_cross_entropy_seq's) second input, where it is an input.
/// The cross-entropy node of the loss: its producer, or under microbatches (the mean of the
/// microbatches' losses, graph/microbatch.h) the first reached from it. -1 for another loss.
int crossEntropyOf(const Problem &p, const std::string &loss) {
  const int l = loss.empty() ? -1 : findTensor(p, loss);
  if (l < 0 || p.tensors[l].producer < 0)
    return -1;
  std::vector<int> todo = {p.tensors[l].producer};
  std::set<int> seen;
  while (!todo.empty()) {
    const int n = todo.back();
    todo.pop_back();
    if (n < 0 || !seen.insert(n).second)
      continue;
    const ProblemNode &node = p.nodes[n];
    if (isCrossEntropyLoss(node.table->op.def->name))
      return node.inputs.size() == 2 ? n : -1;
    // Up through the mean's own nodes only (microbatchGraph's `<loss>_microbatches`, its
    // result named after it): a microbatch's tensor is its loss, or no cross-entropy's.
    if (!llvm::StringRef(loss).contains("_microbatches") ||
        splitMicrobatch(p.tensors[node.output].name))
      continue;
    for (unsigned t : node.inputs)
      todo.push_back(p.tensors[t].producer);
  }
  return -1;
}

/// The input the loss's labels come from: the cross-entropy's second input, or the batch
/// input a microbatch's slice of it reads.
int labelsOf(const Problem &p, const std::string &loss) {
  const int n = crossEntropyOf(p, loss);
  if (n < 0)
    return -1;
  const unsigned x = p.nodes[n].inputs[1];
  const int prod = p.tensors[x].producer;
  if (prod < 0)
    return static_cast<int>(x);
  const ProblemNode &slice = p.nodes[prod];
  if (slice.table->op.def->name == "Slice" && !slice.inputs.empty() &&
      p.tensors[slice.inputs[0]].producer < 0 && splitMicrobatch(p.tensors[x].name))
    return static_cast<int>(slice.inputs[0]);
  return -1;
}

} // namespace

int64_t lossClasses(const Problem &p, const std::string &loss) {
  const ProblemNode &n = p.nodes[crossEntropyOf(p, loss)];
  return p.tensors[n.inputs[0]].shape.back();
}

llvm::Error checkLabels(const DataArray &a, const std::string &array, const std::string &loss,
                        int64_t classes) {
  if (!a.integral())
    return stringError(fmt::format("array '{}' ({}) feeds the labels of '{}' but holds {} values, "
                                   "not class numbers",
                                   array, a.path, loss, elementTypeName(a.type)));
  for (int64_t i = 0; i < a.samples() * a.sampleElements(); ++i) {
    const double v = a.at(i);
    if (v < 0 || v >= double(classes))
      return stringError(fmt::format("array '{}' ({}): element {} is class {}, outside the "
                                     "model's {} classes [0, {})",
                                     array, a.path, i, v, classes, classes));
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<DataBinding>>
bindDataSet(const Problem &p, const std::string &loss, const DataSet &ds, const std::string &feeds,
            const std::map<std::string, std::vector<double>> &constants,
            const std::map<std::string, std::vector<float>> &initial,
            const std::map<std::string, RandomInput> &random, const SettingNames &names) {
  std::vector<DataBinding> out;
  const int labels = labelsOf(p, loss);
  auto bind = [&](int t, const std::string &array) -> llvm::Error {
    const ProblemTensor &pt = p.tensors[t];
    const DataArray *a = ds.find(array);
    if (!a)
      return stringError(fmt::format("the data set has no array '{}'", array));
    if (pt.producer >= 0 || pt.role == TensorRole::Weight || pt.role == TensorRole::OptimizerState)
      return stringError(
          fmt::format("'{}' is not an input of the model (it is {}); only inputs are "
                      "fed from data",
                      pt.name, pt.producer >= 0 ? "computed by a node" : roleName(pt.role)));
    if (pt.shape.empty())
      return stringError(
          fmt::format("input '{}' is a scalar: a batch input's first dimension is the "
                      "batch",
                      pt.name));
    int64_t row = 1;
    for (size_t d = 1; d < pt.shape.size(); ++d)
      row *= pt.shape[d];
    if (row != a->sampleElements())
      return stringError(
          fmt::format("array '{}' ({}: samples of shape [{}], {} elements) cannot feed "
                      "input '{}' of shape [{}], whose batch rows have {} elements",
                      array, a->path,
                      fmt::join(std::vector<int64_t>(a->shape.begin() + 1, a->shape.end()), ", "),
                      a->sampleElements(), pt.name, fmt::join(pt.shape, ", "), row));
    if (pt.shape[0] > ds.samples)
      return stringError(fmt::format("input '{}' takes batches of {} samples; the data set has {}",
                                     pt.name, pt.shape[0], ds.samples));
    DataBinding b;
    b.tensor = static_cast<unsigned>(t);
    b.input = pt.name;
    b.array = array;
    b.labels = t == labels;
    if (b.labels)
      if (llvm::Error e = checkLabels(*a, array, loss, lossClasses(p, loss)))
        return e;
    out.push_back(b);
    return llvm::Error::success();
  };
  if (!feeds.empty()) {
    auto pairs = parseFeeds(feeds, names);
    if (!pairs)
      return pairs.takeError();
    for (const auto &[input, array] : *pairs) {
      const int t = findTensor(p, input);
      if (t < 0)
        return stringError(
            fmt::format("{} '{}': the model has no input '{}'", names("feed"), feeds, input));
      for (const DataBinding &b : out)
        if (b.tensor == unsigned(t))
          return stringError(
              fmt::format("{} '{}': input '{}' is fed twice", names("feed"), feeds, input));
      if (llvm::Error e = bind(t, array))
        return e;
    }
    return out;
  }
  // The default pairing: labels to the loss's labels, the other array to the data input.
  std::vector<std::string> rest;
  for (const auto &[name, a] : ds.arrays)
    if (!(name == "labels" && labels >= 0))
      rest.push_back(name);
  if (labels >= 0) {
    if (!ds.find("labels"))
      return stringError(fmt::format("the data set has no array 'labels' for the labels of '{}' "
                                     "(name the arrays with {} INPUT=ARRAY)",
                                     loss, names("feed")));
    if (llvm::Error e = bind(labels, "labels"))
      return e;
  }
  std::vector<unsigned> inputs;
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    if (pt.producer < 0 && pt.role == TensorRole::Input && !pt.shape.empty() && int(t) != labels &&
        !constants.count(pt.name) && !initial.count(pt.name) && !random.count(pt.name))
      inputs.push_back(t);
  }
  // Class labels beside a mean squared error: the loss chosen for the output is the cause,
  // not the pairing (--loss auto takes cross-entropy only for [batch, classes] logits).
  if (const int l = loss.empty() ? -1 : findTensor(p, loss);
      labels < 0 && l >= 0 && p.tensors[l].producer >= 0 && ds.find("labels") &&
      ds.find("labels")->integral()) {
    const ProblemNode &n = p.nodes[p.tensors[l].producer];
    if (n.table->op.def->name == "mse" && n.inputs.size() == 2) {
      const ProblemTensor &y = p.tensors[n.inputs[0]];
      const bool perPosition =
          y.shape.size() == 3 && ds.find("labels")->sampleElements() == y.shape[1];
      return stringError(fmt::format(
          "the loss of the output '{}' [{}] is the mean squared error against a new input "
          "'{}' (cross-entropy is chosen for [batch, classes] logits), but the data set's "
          "'labels' hold class numbers{}: give {} cross-entropy{}",
          y.name, fmt::join(y.shape, ", "), p.tensors[n.inputs[1]].name,
          perPosition ? ", one per position" : "", names("loss"),
          perPosition ? " (a class per position of [batch, positions, classes] logits)"
                      : fmt::format(", or feed a target of the output's shape ({} {}=ARRAY)",
                                    names("feed"), p.tensors[n.inputs[1]].name)));
    }
  }
  if (rest.size() != 1 || inputs.size() != 1) {
    std::string inputNames;
    for (unsigned t : inputs)
      inputNames += (inputNames.empty() ? "" : ", ") + p.tensors[t].name;
    return stringError(fmt::format("the model has {} data input{} ({}) and the data set {} array{} "
                                   "besides the labels: say which feeds which with {} "
                                   "INPUT=ARRAY,...",
                                   inputs.size(), inputs.size() == 1 ? "" : "s", inputNames,
                                   rest.size(), rest.size() == 1 ? "" : "s", names("feed")));
  }
  if (llvm::Error e = bind(static_cast<int>(inputs[0]), rest[0]))
    return e;
  return out;
}

std::map<std::string, std::vector<int64_t>> sampleShapesFed(const DataSet &ds,
                                                            const std::string &feeds) {
  std::map<std::string, std::vector<int64_t>> shapes;
  auto sampleOf = [](const DataArray &a) {
    return std::vector<int64_t>(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end());
  };
  if (!feeds.empty()) {
    auto pairs = parseFeeds(feeds, SettingNames());
    if (!pairs) {
      llvm::consumeError(pairs.takeError()); // bindDataSet reports it
      return shapes;
    }
    for (const auto &[input, array] : *pairs)
      if (const DataArray *a = ds.find(array))
        shapes[input] = sampleOf(*a);
    return shapes;
  }
  const DataArray *only = nullptr;
  unsigned others = 0;
  for (const auto &[name, a] : ds.arrays)
    if (name != "labels") {
      only = &a;
      ++others;
    }
  if (others == 1)
    shapes[""] = sampleOf(*only);
  return shapes;
}

void feedBatch(Engine &engine, const DataSet &ds, const std::vector<DataBinding> &bindings,
               const std::vector<int64_t> &samples, const Normalization &norm) {
  for (const DataBinding &b : bindings) {
    const DataArray &a = *ds.find(b.array);
    const std::vector<int64_t> &shape = engine.program().tensors[b.tensor].shape;
    engine.setTiles(b.tensor, [&](const Box &tile, float *out) {
      fillBatch(a, samples, shape, tile, b.labels, norm, out);
    });
  }
}

std::vector<int64_t> BatchOrder::samplesOf(unsigned step) {
  const int64_t per = std::max<int64_t>(1, stepsPerEpoch());
  const int64_t epoch = step / per, within = step % per;
  if (epoch != epoch_) {
    if (shuffle_) {
      order_ = epochOrder(samples_, seed_, static_cast<uint64_t>(epoch));
    } else {
      order_.resize(static_cast<size_t>(samples_));
      for (int64_t i = 0; i < samples_; ++i)
        order_[static_cast<size_t>(i)] = i;
    }
    epoch_ = epoch;
  }
  return std::vector<int64_t>(order_.begin() + within * batch_,
                              order_.begin() + (within + 1) * batch_);
}

struct BatchPrefetcher::Impl {
  const Engine &engine;
  const DataSet &ds;
  std::vector<DataBinding> bindings;
  Normalization norm;
  BatchOrder order; ///< used by one thread at a time (feed waits before it starts another)
  std::future<Staged> ahead;
};

BatchPrefetcher::BatchPrefetcher(const Engine &engine, const DataSet &ds,
                                 std::vector<DataBinding> bindings, Normalization norm,
                                 int64_t batch, uint64_t seed, bool shuffle)
    : impl_(new Impl{engine,
                     ds,
                     std::move(bindings),
                     norm,
                     BatchOrder(ds.samples, batch, seed, shuffle),
                     {}}) {}

BatchPrefetcher::~BatchPrefetcher() {
  if (impl_->ahead.valid())
    impl_->ahead.wait();
}

BatchPrefetcher::Staged BatchPrefetcher::assemble(unsigned step) {
  Impl &m = *impl_;
  Staged s;
  s.step = step;
  const std::vector<int64_t> samples = m.order.samplesOf(step);
  const Program &prog = m.engine.program();
  for (const DataBinding &b : m.bindings) {
    const DataArray &a = *m.ds.find(b.array);
    const ProgramTensor &pt = prog.tensors[b.tensor];
    for (unsigned w : m.engine.localWorkers()) {
      if (!m.engine.holdsTile(b.tensor, w))
        continue;
      std::vector<float> tile(static_cast<size_t>(boxElements(pt.tiles[w])));
      fillBatch(a, samples, pt.shape, pt.tiles[w], b.labels, m.norm, tile.data());
      s.tiles.push_back(std::move(tile));
    }
  }
  return s;
}

void BatchPrefetcher::feed(Engine &engine, unsigned step, bool more) {
  Impl &m = *impl_;
  Staged s;
  const auto t0 = std::chrono::steady_clock::now();
  bool ready = false;
  if (m.ahead.valid()) {
    s = m.ahead.get();
    ready = s.step == step;
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (!ready)
    s = assemble(step);
  const auto t2 = std::chrono::steady_clock::now();
  wait_ += std::chrono::duration<double>(t1 - t0).count();
  assemble_ += std::chrono::duration<double>(t2 - t1).count();
  size_t next = 0;
  for (const DataBinding &b : m.bindings) {
    engine.setTiles(b.tensor, [&](const Box &tile, float *out) {
      const std::vector<float> &v = s.tiles.at(next++);
      std::copy(v.begin(), v.begin() + boxElements(tile), out);
    });
  }
  if (more)
    m.ahead = std::async(std::launch::async, [this, step] { return assemble(step + 1); });
}

llvm::Error copyState(const Engine &from, Engine &to,
                      const std::function<Tensor(unsigned)> &whole) {
  std::map<std::string, unsigned> source;
  for (unsigned t = 0; t < from.program().tensors.size(); ++t)
    source[from.program().tensors[t].name] = t;
  const Program &prog = to.program();
  for (unsigned t = 0; t < prog.tensors.size(); ++t) {
    const ProgramTensor &pt = prog.tensors[t];
    auto it = source.find(pt.name);
    if (pt.hasProducer || it == source.end())
      continue;
    const ProgramTensor &ft = from.program().tensors[it->second];
    const auto carried = [](TensorRole r) {
      return r == TensorRole::Weight || r == TensorRole::OptimizerState;
    };
    if (ft.hasProducer || (!carried(ft.role) && !carried(pt.role)))
      continue;                          // data, hyper-parameters: set by the caller
    if (whole && ft.tiles != pt.tiles) { // (the same answer on every process)
      const Tensor x = whole(it->second);
      const std::vector<float> values(x.data.begin(), x.data.end());
      Box all;
      for (int64_t d : x.shape)
        all.push_back(Range{0, d});
      for (unsigned w : to.localWorkers()) {
        if (!to.holdsTile(t, w))
          continue;
        const Box &tile = pt.tiles[w];
        std::vector<float> part(size_t(boxElements(tile)));
        copyBox(part.data(), tile, values.data(), all, tile, nullptr);
        to.writeTile(t, w, part.data());
      }
      continue;
    }
    for (unsigned w : to.localWorkers()) {
      if (!to.holdsTile(t, w))
        continue;
      if (!from.holdsTile(it->second, w) || !(ft.tiles[w] == pt.tiles[w]))
        return stringError(fmt::format("'{}': worker {} holds another tile of it in the "
                                       "evaluation plan than in the training plan",
                                       pt.name, w));
      const std::vector<float> tile = from.readTile(it->second, w);
      to.writeTile(t, w, tile.data());
    }
  }
  return llvm::Error::success();
}

void scoreRows(const Tensor &logits, const std::vector<double> &labels, int64_t rows,
               ClassifierScore &score) {
  const int64_t classes = logits.shape.size() >= 2 ? logits.shape.back() : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const double *x = logits.data.data() + r * classes;
    double top = -std::numeric_limits<double>::infinity();
    int64_t arg = -1;
    bool nan = false;
    for (int64_t c = 0; c < classes; ++c) {
      nan |= std::isnan(x[c]);
      if (x[c] > top) {
        top = x[c];
        arg = c;
      }
    }
    const int64_t label = static_cast<int64_t>(labels[r]);
    // Labels are checked against the classes before a run (checkLabels); one outside would
    // read past its row.
    assert(label >= 0 && label < classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(x[c] - top);
    score.lossSum +=
        nan ? std::numeric_limits<double>::quiet_NaN() : std::log(sum) + top - x[label];
    score.correct += !nan && arg == label;
    ++score.rows;
  }
}

} // namespace tofu
