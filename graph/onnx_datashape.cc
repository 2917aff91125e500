// Operators TDL cannot describe, evaluated at import where their inputs are known: those
// whose output shapes depend on their inputs' values (NonZero, Compress, Unique,
// NonMaxSuppression) and TfIdfVectorizer (n-gram matching).
// TDL cannot describe them (a TDL op's output shape follows its input shapes), but where
// every input's values are known at import (constants, or values given ahead to tofu-run
// --infer and what they determine: Importer::valueOf), the importer evaluates them as it
// folds constants, following ONNX's reference (numpy's nonzero, compress and unique) and
// the operators' definitions (NonMaxSuppression: greedy selection by descending score;
// TfIdfVectorizer: n-grams counted at every skip, unigrams once; as ONNX Runtime computes
// them).
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tofu {
namespace onnximport {

namespace {

/// The row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

/// `x` as [outer, extent of `axis`, inner] slices: slice i along the axis, flattened.
std::vector<std::vector<double>> slicesAlong(const Const &x, int64_t axis) {
  const int64_t extent = x.shape[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  std::vector<std::vector<double>> slices(static_cast<size_t>(extent));
  for (int64_t i = 0; i < extent; ++i)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k)
        slices[size_t(i)].push_back(x.v[size_t((o * extent + i) * inner + k)]);
  return slices;
}

/// The slices put back together along `axis` of a tensor shaped like `like` otherwise.
Const joinAlong(const std::vector<std::vector<double>> &slices, std::vector<int64_t> like,
                int64_t axis, bool isInt) {
  Const out;
  like[size_t(axis)] = int64_t(slices.size());
  out.shape = like;
  out.isInt = isInt;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= like[size_t(d)];
  const int64_t extent = int64_t(slices.size());
  const int64_t inner = extent == 0 ? 0 : int64_t(slices[0].size()) / std::max<int64_t>(outer, 1);
  out.v.assign(size_t(elementCount(like)), 0.0);
  for (int64_t i = 0; i < extent; ++i)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k)
        out.v[size_t((o * extent + i) * inner + k)] = slices[size_t(i)][size_t(o * inner + k)];
  return out;
}

Const integers(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  Const c;
  c.shape = std::move(shape);
  c.isInt = true;
  c.v.assign(values.begin(), values.end());
  return c;
}

} // namespace

llvm::Expected<bool> Importer::evaluateDataShaped(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  if (op != "NonZero" && op != "Compress" && op != "Unique" && op != "NonMaxSuppression" &&
      op != "TfIdfVectorizer")
    return false;
  std::vector<const Const *> in;
  for (const std::string &i : n.input()) {
    const Const *c = i.empty() ? nullptr : valueOf(i);
    if (!i.empty() && !c)
      return false; // an input's values are unknown: TDL's refusal stands
    in.push_back(c);
  }
  if (in.empty() || !in[0])
    return false;
  const Const &x = *in[0];
  const int64_t rank = int64_t(x.shape.size());
  auto normAxis = [&](int64_t a) -> llvm::Expected<int64_t> {
    if (a < -rank || a >= rank)
      return where(n, fmt::format("axis {} is outside the input's rank {}", a, rank));
    return a < 0 ? a + rank : a;
  };
  // The input and the axis an `axis` attribute names; without one, the input flattened and
  // axis 0 (Compress's and Unique's reading).
  auto alongAxis = [&](Const &flat) -> llvm::Expected<int64_t> {
    flat = x;
    if (std::optional<int64_t> axis = intAttr(n, "axis"))
      return normAxis(*axis);
    flat.shape = {x.size()};
    return 0;
  };
  std::vector<Const> outs;
  if (op == "NonZero") {
    if (rank == 0)
      return false;
    const std::vector<int64_t> strides = stridesOf(x.shape);
    std::vector<int64_t> flat;
    for (int64_t i = 0; i < x.size(); ++i)
      if (x.v[size_t(i)] != 0)
        flat.push_back(i);
    std::vector<int64_t> coords;
    for (int64_t d = 0; d < rank; ++d)
      for (int64_t i : flat)
        coords.push_back(i / strides[size_t(d)] % x.shape[size_t(d)]);
    outs.push_back(integers({rank, int64_t(flat.size())}, coords));
  } else if (op == "Compress") {
    if (in.size() < 2 || !in[1])
      return false;
    const std::vector<double> &cond = in[1]->v;
    Const flat;
    int64_t a = 0;
    TOFU_TRY(a, alongAxis(flat));
    if (int64_t(cond.size()) > flat.shape[size_t(a)])
      return where(n, fmt::format("condition has {} entries for an axis of {}", cond.size(),
                                  flat.shape[size_t(a)]));
    std::vector<std::vector<double>> slices = slicesAlong(flat, a), kept;
    for (size_t i = 0; i < cond.size(); ++i)
      if (cond[i] != 0)
        kept.push_back(slices[i]);
    outs.push_back(joinAlong(kept, flat.shape, a, x.isInt));
  } else if (op == "NonMaxSuppression") {
    if (in.size() < 2 || !in[1] || x.shape.size() != 3 || x.shape[2] != 4 ||
        in[1]->shape.size() != 3 || in[1]->shape[0] != x.shape[0] || in[1]->shape[2] != x.shape[1])
      return where(n, "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
    const Const &scores = *in[1];
    auto scalar = [&](size_t k, double dflt) {
      return k < in.size() && in[k] && !in[k]->v.empty() ? in[k]->v[0] : dflt;
    };
    const int64_t most = asInt(scalar(2, 0));
    const double iouThreshold = scalar(3, 0);
    const bool filter = in.size() > 4 && in[4];
    const double scoreThreshold = scalar(4, 0);
    const bool centers = intAttr(n, "center_point_box").value_or(0) != 0;
    const int64_t batches = x.shape[0], count = x.shape[1], classes = scores.shape[1];
    // Box b of batch `batch` as [y1, x1, y2, x2] with y1 <= y2 and x1 <= x2.
    auto corners = [&](int64_t batch, int64_t b) {
      const double *v = &x.v[size_t((batch * count + b) * 4)];
      if (centers) // [x_center, y_center, width, height]
        return std::array<double, 4>{v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2,
                                     v[0] + v[2] / 2};
      return std::array<double, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]),
                                   std::max(v[1], v[3])};
    };
    auto iou = [&](const std::array<double, 4> &a, const std::array<double, 4> &b) {
      const double h = std::max(0.0, std::min(a[2], b[2]) - std::max(a[0], b[0]));
      const double w = std::max(0.0, std::min(a[3], b[3]) - std::max(a[1], b[1]));
      const double inter = h * w, areaA = (a[2] - a[0]) * (a[3] - a[1]),
                   areaB = (b[2] - b[0]) * (b[3] - b[1]);
      return areaA <= 0 || areaB <= 0 ? 0.0 : inter / (areaA + areaB - inter);
    };
    std::vector<int64_t> selected;
    for (int64_t batch = 0; batch < batches; ++batch)
      for (int64_t c = 0; c < classes; ++c) {
        const double *s = &scores.v[size_t((batch * classes + c) * count)];
        std::vector<int64_t> order;
        for (int64_t b = 0; b < count; ++b)
          if (!filter || s[b] > scoreThreshold)
            order.push_back(b);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t p, int64_t q) { return s[p] > s[q]; });
        std::vector<int64_t> kept;
        for (int64_t b : order) {
          if (int64_t(kept.size()) >= most)
            break;
          bool overlaps = false;
          for (int64_t k : kept)
            overlaps = overlaps || iou(corners(batch, k), corners(batch, b)) > iouThreshold;
          if (!overlaps)
            kept.push_back(b);
        }
        for (int64_t b : kept)
          selected.insert(selected.end(), {batch, c, b});
      }
    outs.push_back(integers({int64_t(selected.size() / 3), 3}, selected));
  } else if (op == "TfIdfVectorizer") {
    if (rank != 1 && rank != 2)
      return where(n, fmt::format("the input has rank {}; TfIdfVectorizer takes 1 or 2", rank));
    const int64_t minN = intAttr(n, "min_gram_length").value_or(1),
                  maxN = intAttr(n, "max_gram_length").value_or(1),
                  skips = intAttr(n, "max_skip_count").value_or(0);
    const std::string mode = stringAttr(n, "mode", "TF");
    const std::vector<int64_t> pool = intsAttr(n, "pool_int64s", {}),
                               starts = intsAttr(n, "ngram_counts", {}),
                               columns = intsAttr(n, "ngram_indexes", {});
    std::vector<double> weights;
    for (const onnx::AttributeProto &a : n.attribute())
      if (a.name() == "weights")
        weights.assign(a.floats().begin(), a.floats().end());
    if (pool.empty() || minN < 1 || maxN < minN || skips < 0 ||
        (mode != "TF" && mode != "IDF" && mode != "TFIDF"))
      return where(n, "needs pool_int64s, 1 <= min_gram_length <= max_gram_length, "
                      "max_skip_count >= 0 and mode TF, IDF or TFIDF");
    // The pool's n-grams: those of length k + 1 from starts[k] to the next start.
    std::map<std::vector<int64_t>, int64_t> column; // n-gram -> output column
    std::map<int64_t, double> weightOf;             // output column -> its n-gram's weight
    int64_t entry = 0, width = 0;
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t len = int64_t(k) + 1,
                    end = k + 1 < starts.size() ? starts[k + 1] : int64_t(pool.size());
      if (starts[k] < 0 || end > int64_t(pool.size()) || (end - starts[k]) % len != 0)
        return where(n, "ngram_counts does not split pool_int64s into whole n-grams");
      for (int64_t at = starts[k]; at < end; at += len, ++entry) {
        if (entry >= int64_t(columns.size()))
          return where(n, "ngram_indexes has fewer entries than the pool has n-grams");
        column[std::vector<int64_t>(pool.begin() + at, pool.begin() + at + len)] =
            columns[size_t(entry)];
        if (!weights.empty() && entry >= int64_t(weights.size()))
          return where(n, "weights has fewer entries than the pool has n-grams");
        weightOf[columns[size_t(entry)]] = weights.empty() ? 1.0 : weights[size_t(entry)];
        width = std::max(width, columns[size_t(entry)] + 1);
      }
    }
    const int64_t rows = rank == 2 ? x.shape[0] : 1, length = x.shape[size_t(rank - 1)];
    std::vector<double> counts(size_t(rows * width), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t len = minN; len <= maxN; ++len)
        for (int64_t skip = 0; skip <= (len == 1 ? 0 : skips); ++skip)
          for (int64_t i = 0; i + (len - 1) * (skip + 1) < length; ++i) {
            std::vector<int64_t> gram;
            for (int64_t j = 0; j < len; ++j)
              gram.push_back(asInt(x.v[size_t(r * length + i + j * (skip + 1))]));
            if (auto c = column.find(gram); c != column.end())
              counts[size_t(r * width + c->second)] += 1;
          }
    for (int64_t k = 0; k < int64_t(counts.size()); ++k) {
      const double w = weightOf.count(k % width) ? weightOf[k % width] : 1.0;
      double &v = counts[size_t(k)];
      v = mode == "TF" ? v : mode == "IDF" ? (v > 0 ? w : 0) : v * w;
    }
    Const y;
    y.shape = rank == 2 ? std::vector<int64_t>{rows, width} : std::vector<int64_t>{width};
    y.v = std::move(counts);
    outs.push_back(std::move(y));
  } else { // Unique
    const bool sorted = intAttr(n, "sorted").value_or(1) != 0;
    Const flat;
    int64_t a = 0;
    TOFU_TRY(a, alongAxis(flat));
    const std::vector<std::vector<double>> slices = slicesAlong(flat, a);
    // The distinct slices in order of first appearance, then sorted if asked (numpy's
    // lexicographic order of the flattened slices).
    std::vector<int64_t> first, inverse(slices.size()), counts;
    for (size_t i = 0; i < slices.size(); ++i) {
      size_t u = 0;
      while (u < first.size() && slices[size_t(first[u])] != slices[i])
        ++u;
      if (u == first.size()) {
        first.push_back(int64_t(i));
        counts.push_back(0);
      }
      inverse[i] = int64_t(u);
      ++counts[u];
    }
    std::vector<int64_t> order(first.size());
    std::iota(order.begin(), order.end(), 0);
    if (sorted)
      std::sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        return slices[size_t(first[size_t(p)])] < slices[size_t(first[size_t(q)])];
      });
    std::vector<int64_t> rankOf(order.size());
    for (size_t r = 0; r < order.size(); ++r)
      rankOf[size_t(order[r])] = int64_t(r);
    std::vector<std::vector<double>> ys;
    std::vector<int64_t> indices, counted;
    for (int64_t u : order) {
      ys.push_back(slices[size_t(first[size_t(u)])]);
      indices.push_back(first[size_t(u)]);
      counted.push_back(counts[size_t(u)]);
    }
    for (int64_t &v : inverse)
      v = rankOf[size_t(v)];
    const int64_t distinct = int64_t(order.size());
    outs.push_back(joinAlong(ys, flat.shape, a, x.isInt));
    outs.push_back(integers({distinct}, indices));
    outs.push_back(integers({int64_t(inverse.size())}, inverse));
    outs.push_back(integers({distinct}, counted));
  }
  for (size_t k = 0; k < outs.size() && k < size_t(n.output_size()); ++k) {
    const std::string &o = n.output(int(k));
    if (o.empty())
      continue;
    if (auto known = facts_.shapes.find(o);
        known != facts_.shapes.end() && known->second != outs[k].shape)
      return where(n,
                   fmt::format("its output '{}' is [{}] for the inputs' values, but the model "
                               "declares [{}]",
                               o, fmt::join(outs[k].shape, ", "), fmt::join(known->second, ", ")));
    facts_.shapes[o] = outs[k].shape;
    facts_.consts[o] = std::move(outs[k]);
  }
  return true;
}

} // namespace onnximport
} // namespace tofu
