// The comparison of a partitioned first step with the unpartitioned one (step_verify.h).
#include "runtime/step_verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

double relativeDifference(float got, float want) {
  if (!std::isfinite(got) || !std::isfinite(want))
    return std::numeric_limits<double>::infinity();
  return double(std::abs(got - want)) / std::max(1.0, double(std::abs(want)));
}

void FirstStepRecord::before(const Engine &e) {
  for (size_t i = 1; i < compared_.size(); ++i) // the carried ones (not the loss)
    for (unsigned w : e.localWorkers())
      if (e.holdsTile(compared_[i], w)) {
        std::vector<float> tile = e.readTile(compared_[i], w);
        if (!std::all_of(tile.begin(), tile.end(), [](float v) { return std::isfinite(v); }))
          nonFiniteBefore_[{i, w}] = std::move(tile);
      }
}

void FirstStepRecord::after(const Engine &e) {
  for (unsigned t : compared_) {
    after_.emplace_back();
    for (unsigned w : e.localWorkers())
      if (e.holdsTile(t, w)) {
        after_.back().emplace_back(w, e.readTile(t, w));
        bytes_ += static_cast<int64_t>(after_.back().back().second.size()) * 4;
      }
  }
}

const std::vector<float> *FirstStepRecord::nonFiniteBefore(size_t i, unsigned w) const {
  auto it = nonFiniteBefore_.find({i, w});
  return it == nonFiniteBefore_.end() ? nullptr : &it->second;
}

void nudgeWeights(Engine &e, const Problem &p) {
  uint64_t state = 0x7f4a7c159e3779b9ull;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    if (p.tensors[t].role != TensorRole::Weight)
      continue;
    for (unsigned w : e.localWorkers()) {
      if (!e.holdsTile(t, w))
        continue;
      std::vector<float> v = e.readTile(t, w);
      for (float &x : v) {
        const uint64_t r = next();
        if (r & 1)
          x = std::nextafter(x, (r & 2) ? std::numeric_limits<float>::infinity()
                                        : -std::numeric_limits<float>::infinity());
      }
      e.writeTile(t, w, v.data());
    }
  }
}

namespace {

/// Runs the first step on `ready` (an engine from VerifyRuns), named `what` in its error.
llvm::Error stepOnce(Engine &ready, const std::string &what) {
  if (auto r = ready.step(); !r)
    return stringError(what + ": " + llvm::toString(r.takeError()));
  return llvm::Error::success();
}

/// The recomputing step against the step without recomputation, both unpartitioned and
/// from the same values: how many compared tensors differ in any bit, and by how much.
llvm::Error comparePlain(const Problem &p, const std::vector<unsigned> &compared,
                         const VerifyRuns &runs, VerifyReport &v) {
  const Problem &plain = *runs.plain;
  auto ref = runs.reference(runs.library, "the unpartitioned recomputing run");
  if (!ref)
    return ref.takeError();
  auto other = runs.plainEngine();
  if (!other)
    return stringError("the unpartitioned run without recomputation: " +
                       llvm::toString(other.takeError()));
  std::map<std::string, unsigned> index; // this problem's tensors by name
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    index[p.tensors[t].name] = t;
  // Every value the step starts from (what no node computes: inputs, weights, state), as
  // the recomputing reference holds it.
  for (unsigned t = 0; t < plain.tensors.size(); ++t) {
    if (plain.tensors[t].producer >= 0)
      continue;
    auto it = index.find(plain.tensors[t].name);
    if (it == index.end())
      return stringError(fmt::format("verify: the plain step's tensor '{}' is not in the "
                                     "recomputing step",
                                     plain.tensors[t].name));
    const Tensor x = (*ref)->get(it->second);
    std::vector<float> values(x.data.begin(), x.data.end());
    const Box all = wholeBox(x.shape);
    (*other)->setTiles(t, [&](const Box &tile, float *out) {
      copyBox(out, tile, values.data(), all, tile, nullptr);
    });
  }
  if (llvm::Error e = stepOnce(**ref, "the unpartitioned recomputing run"))
    return e;
  if (llvm::Error e = stepOnce(**other, "the unpartitioned run without recomputation"))
    return e;
  std::map<std::string, unsigned> plainIndex;
  for (unsigned t = 0; t < plain.tensors.size(); ++t)
    plainIndex[plain.tensors[t].name] = t;
  for (unsigned t : compared) {
    auto it = plainIndex.find(p.tensors[t].name);
    if (it == plainIndex.end())
      continue;
    const Tensor a = (*ref)->get(t), b = (*other)->get(it->second);
    double worst = 0;
    bool same = a.data.size() == b.data.size();
    for (size_t x = 0; same && x < a.data.size(); ++x) {
      const float fa = static_cast<float>(a.data[x]), fb = static_cast<float>(b.data[x]);
      if (std::memcmp(&fa, &fb, sizeof fa) == 0)
        continue;
      same = false;
      worst = std::max(worst, relativeDifference(fa, fb));
    }
    if (!same) {
      ++v.plainDiffering;
      if (worst >= v.plainWorst) {
        v.plainWorst = worst;
        v.plainWorstTensor = p.tensors[t].name;
      }
    }
  }
  v.plainCompared = true;
  return llvm::Error::success();
}

} // namespace

llvm::Expected<VerifyReport> verifyFirstStep(const Problem &p, const Engine &partitioned,
                                             const FirstStepRecord &kept, double tolerance,
                                             ProcessGroup &group, const VerifyRuns &runs) {
  const std::vector<unsigned> &compared = kept.compared();
  VerifyReport v;
  v.tolerance = tolerance >= 0                        ? tolerance
                : partitioned.program().hasBfloat16() ? kBfloat16StepTolerance
                                                      : kFloat32StepTolerance;
  v.compared = compared.size();
  if (!kept.kept())
    return stringError("verify: the first step's results were not kept");
  const std::string what = "the unpartitioned run";
  auto ref = runs.reference(runs.library, what);
  if (!ref)
    return ref.takeError();
  if (llvm::Error e = stepOnce(**ref, what))
    return e;
  // Per compared tensor: the largest relative difference of the partitioned step's tiles
  // (this process's) from the reference, and the reference's values.
  std::vector<double> differs(compared.size(), 0.0);
  std::vector<std::vector<float>> wanted(compared.size());
  for (size_t i = 0; i < compared.size(); ++i) {
    const unsigned t = compared[i];
    const Tensor expected = (*ref)->get(t);
    wanted[i].assign(expected.data.begin(), expected.data.end());
    const std::vector<float> &whole = wanted[i];
    const Box all = wholeBox(expected.shape);
    double &e = differs[i];
    for (const auto &[w, got] : kept.after(i)) { // each tile this process holds
      const Box &tile = partitioned.program().tensors[t].tiles[w];
      std::vector<float> want(got.size());
      copyBox(want.data(), tile, whole.data(), all, tile, nullptr);
      const std::vector<float> *before = kept.nonFiniteBefore(i, w);
      for (size_t x = 0; x < got.size(); ++x) {
        // Equal infinities are equal where the value was that infinity before the step (a
        // mask's -inf, left as it was); a step that makes one fails.
        if (got[x] == want[x] && (std::isfinite(got[x]) || (before && (*before)[x] == got[x])))
          continue;
        // A step that makes NaN or infinity fails, whatever the reference made.
        if (!std::isfinite(got[x]) && v.nonFiniteTensor.empty())
          v.nonFiniteTensor = p.tensors[t].name;
        e = std::max(e, relativeDifference(got[x], want[x]));
      }
    }
  }
  ref->reset();
  if (group.distributed()) { // the worst over the processes, and any non-finite tensor
    group.maxInPlace(differs);
    for (const std::string &name : group.allGatherText(v.nonFiniteTensor))
      if (v.nonFiniteTensor.empty())
        v.nonFiniteTensor = name;
  }
  for (size_t i = 0; i < compared.size(); ++i)
    if (differs[i] > v.worst || v.worstTensor.empty()) {
      v.worst = std::max(v.worst, differs[i]);
      v.worstTensor = p.tensors[compared[i]].name;
    }
  // Beyond the tolerance: is it the partition, or a step so ill-conditioned that float32
  // rounding alone moves it that far? The same unpartitioned step in another summation
  // order (library calls for generated kernels, or the reverse), from weights moved by at
  // most one float32 step (nudgeWeights), measures that noise per compared tensor. The
  // order alone is not enough: it leaves the generated kernels' own sums (a normalisation's
  // statistics) as they were, and a chaotic step (training-mode mobilenet_v2 at 64x64,
  // batch 2: a ReLU6 whose input lies within rounding of 0 or 6 passes or stops a
  // gradient that the batch norms behind it amplify) then looked exact to it while any
  // other rounding moved it by 0.7. When rounding alone moves some tensor beyond the
  // tolerance the step is ill-conditioned: float32 cannot tell a partition's error from its
  // own noise (every tensor downstream of the ill-conditioned ops scatters), and the verdict
  // is undecided (the double-precision interpreter decides). Otherwise the partition, not
  // rounding, makes the difference.
  std::vector<double> noise(compared.size(), 0.0);
  if (v.worst > v.tolerance && v.nonFiniteTensor.empty()) {
    const std::string other = "the unpartitioned run in another summation order";
    auto again = runs.reference(!runs.library, other);
    if (!again)
      return again.takeError();
    nudgeWeights(**again, p);
    if (llvm::Error e = stepOnce(**again, other))
      return e;
    for (size_t i = 0; i < compared.size(); ++i) {
      const Tensor alt = (*again)->get(compared[i]);
      for (size_t x = 0; x < wanted[i].size(); ++x) {
        const float a = wanted[i][x], b = static_cast<float>(alt.data[x]);
        if (a != b)
          noise[i] = std::max(noise[i], relativeDifference(b, a));
      }
    }
    v.noiseMeasured = true;
  }
  v.passed = v.nonFiniteTensor.empty();
  for (double d : differs)
    v.passed &= d <= v.tolerance;
  v.noise = *std::max_element(noise.begin(), noise.end());
  for (double n : noise)
    v.noisy += n > v.tolerance;
  const bool undecided = v.noiseMeasured && !v.passed && v.noise > v.tolerance;
  v.verdict = v.passed ? "passed" : undecided ? "ill-conditioned" : "failed";
  if (runs.plain && runs.plainEngine)
    if (llvm::Error e = comparePlain(p, compared, runs, v))
      return e;
  return v;
}

} // namespace tofu
