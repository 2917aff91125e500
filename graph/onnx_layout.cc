// The layout handlers: Reshape, Slice, Concat, Transpose, Expand, Pad, Tile and Resize
// (its interpolation matrices computed as ONNX's reference computes each output).
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>

#include "analysis/checked.h"
#include "analysis/interpreter.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_rules.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

namespace tofu {
namespace onnximport {

/// Resize's interpolation along one axis of extent `in` to `out`, as a matrix [out, in]
/// (row-major), computed as ONNX's reference computes each output (1.12,
/// onnx/backend/test/case/node/resize.py): output coordinate x maps to x_ori by the
/// coordinate transformation; the mode's n neighbours of x_ori are the n integers nearest
/// it (ties to the lower one, among those within ceil(n / 2) of the axis), each clamped onto
/// the axis (edge padding), weighted by the mode's coefficients at ratio = x_ori -
/// floor(x_ori) (1 where x_ori is an integer). `scale` is the axis's scale factor.
std::vector<double> resizeMatrix(int64_t in, int64_t out, double scale, const ResizeSpec &s) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  const double outWidth = scale * double(in);
  for (int64_t x = 0; x < out; ++x) {
    double ori;
    if (s.transform == "tf_crop_and_resize") {
      ori = out > 1 ? s.roiStart * double(in - 1) +
                          double(x) * (s.roiEnd - s.roiStart) * double(in - 1) / double(out - 1)
                    : 0.5 * (s.roiStart + s.roiEnd) * double(in - 1);
      if (ori < 0 || ori > double(in - 1))
        continue;
    } else if (s.transform == "align_corners")
      ori = outWidth == 1 ? 0 : double(x) * double(in - 1) / (outWidth - 1);
    else if (s.transform == "asymmetric")
      ori = double(x) / scale;
    else if (s.transform == "pytorch_half_pixel")
      ori = outWidth == 1 ? -0.5 : (double(x) + 0.5) / scale - 0.5;
    else if (s.transform == "tf_half_pixel_for_nn")
      ori = (double(x) + 0.5) / scale;
    else // half_pixel
      ori = (double(x) + 0.5) / scale - 0.5;
    const double ratio = ori == std::floor(ori) ? 1.0 : ori - std::floor(ori);
    std::vector<double> c;
    if (s.mode == "linear") {
      c = {1 - ratio, ratio};
    } else if (s.mode == "cubic") {
      const double a = s.cubicA, r = ratio, q = 1 - ratio;
      c = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
           ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * q - (a + 3)) * q * q + 1,
           ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
    } else if (ratio == 1) {
      c = {0, 1};
    } else if (s.nearestMode == "round_prefer_ceil") {
      c = {double(ratio < 0.5), double(ratio >= 0.5)};
    } else if (s.nearestMode == "floor") {
      c = {1, 0};
    } else if (s.nearestMode == "ceil") {
      c = {0, 1};
    } else { // round_prefer_floor
      c = {double(ratio <= 0.5), double(ratio > 0.5)};
    }
    const int64_t n = int64_t(c.size()), pad = (n + 1) / 2;
    std::vector<int64_t> near;
    for (int64_t i = -pad; i < in + pad; ++i)
      near.push_back(i);
    std::stable_sort(near.begin(), near.end(), [&](int64_t a, int64_t b) {
      return std::abs(ori - double(a)) < std::abs(ori - double(b));
    });
    near.resize(static_cast<size_t>(std::min<int64_t>(n, int64_t(near.size()))));
    std::sort(near.begin(), near.end());
    if (s.excludeOutside) {
      double sum = 0;
      for (size_t k = 0; k < near.size(); ++k) {
        if (near[k] < 0 || near[k] >= in)
          c[k] = 0;
        sum += c[k];
      }
      for (double &v : c)
        v = sum != 0 ? v / sum : 0;
    }
    for (size_t k = 0; k < near.size(); ++k)
      m[static_cast<size_t>(x * in + std::clamp<int64_t>(near[k], 0, in - 1))] += c[k];
  }
  return m;
}

/// Edge or reflect padding along an axis of extent `in` by `b` before and `e` after (either
/// negative crops), as a selection matrix [in + b + e, in].
std::vector<double> padMatrix(int64_t in, int64_t b, int64_t e, const std::string &mode) {
  const int64_t out = in + b + e;
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - b;
    if (mode == "edge" || in == 1) {
      i = std::clamp<int64_t>(i, 0, in - 1);
    } else { // reflect: mirrored about the first and last entries, as often as needed
      const int64_t period = 2 * (in - 1);
      i = ((i % period) + period) % period;
      if (i >= in)
        i = period - i;
    }
    m[static_cast<size_t>(o * in + i)] = 1;
  }
  return m;
}

llvm::Error Importer::reshapeOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string &op = n.op_type();
  auto x = tensorInput(n, 0);
  if (!x)
    return x.takeError();
  const std::vector<int64_t> from = shapeOf(*x);
  const int64_t rank = int64_t(from.size());
  std::vector<int64_t> to;
  auto str = [](const std::vector<int64_t> &v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
  if (op == "Reshape") {
    auto target = ints(env.input(1), "shape");
    if (!target)
      return where(n, llvm::toString(target.takeError()));
    to = reshapeTarget(from, *target, intAttr(n, "allowzero").value_or(0));
    if (elementCount(to) != elementCount(from))
      return where(n, fmt::format("the target shape {} (from {}) does not keep the element count "
                                  "of {}",
                                  str(to), str(*target), str(from)));
  } else if (op == "Flatten") {
    int64_t axis = intAttr(n, "axis").value_or(1);
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis > rank)
      return where(n, fmt::format("axis {} is out of range for rank {}", axis, rank));
    // The common forms keep their own ops (fused kernels, fewer nodes).
    if (axis == 1 && rank == 4) {
      TOFU_CHECK(b_->node(nameOf(n), "Flatten4", {*x}, {}, {}, n.output(0)));
      return llvm::Error::success();
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? outer : inner) *= from[d];
    to = {outer, inner};
  } else {
    auto axes = axesOf(n);
    if (!axes)
      return where(n, llvm::toString(axes.takeError()));
    to = op == "Unsqueeze" ? unsqueezed(from, *axes) : squeezed(from, *axes);
  }
  TOFU_CHECK(b_->reshape(nameOf(n), *x, from, to, n.output(0)));
  return llvm::Error::success();
}

llvm::Error Importer::sliceOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto starts = ints(env.input(1), "starts");
  auto ends = env.present(2) ? ints(env.input(2), "ends") : stringError("Slice needs ends");
  if (!starts || !ends)
    return where(n, llvm::toString(starts ? ends.takeError() : starts.takeError()));
  std::vector<int64_t> axes, steps;
  if (env.present(3)) {
    auto a = ints(env.input(3), "axes");
    if (!a)
      return where(n, llvm::toString(a.takeError()));
    axes = *a;
  } else {
    for (size_t k = 0; k < starts->size(); ++k)
      axes.push_back(int64_t(k));
  }
  if (env.present(4)) {
    auto st = ints(env.input(4), "steps");
    if (!st)
      return where(n, llvm::toString(st.takeError()));
    steps = *st;
  }
  if (starts->size() != axes.size() || ends->size() != axes.size())
    return where(n, "starts, ends and axes differ in length");
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::string x = *in, out = n.output(0), name = nameOf(n);
  std::vector<int64_t> shape = shapeOf(x);
  const int64_t r = int64_t(shape.size());
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t axis = axes[k] < 0 ? axes[k] + r : axes[k];
    int64_t step = k < steps.size() ? steps[k] : 1;
    if (axis < 0 || axis >= r)
      return where(n, fmt::format("axis {} is out of range", axes[k]));
    if (step == 0)
      return where(n, "a step of 0");
    int64_t m = shape[axis];
    int64_t b, count;
    if (step > 0) {
      b = bound((*starts)[k], m);
      int64_t e = bound((*ends)[k], m);
      count = e > b ? (e - b + step - 1) / step : 0;
    } else { // backwards: from start down to (not including) end
      int64_t s0 = (*starts)[k] < 0 ? (*starts)[k] + m : (*starts)[k];
      int64_t e0 = (*ends)[k] < 0 ? (*ends)[k] + m : (*ends)[k];
      s0 = std::clamp<int64_t>(s0, -1, m - 1);
      e0 = std::clamp<int64_t>(e0, -1, m - 1);
      count = s0 > e0 ? (s0 - e0 + (-step) - 1) / (-step) : 0;
      b = s0;
    }
    if (count == 0)
      return where(n, "an empty slice is not translated");
    if (b == 0 && count == m && step == 1)
      continue;
    TOFU_TRY(x, b_->node(fmt::format("{}_axis{}", name, axis), "Slice", {x},
                         {{"start", b}, {"n", count}, {"step", step}, {"m", m}},
                         {{"pre", axis}, {"post", r - axis - 1}}, k + 1 == axes.size() ? out : ""));
    shape[axis] = count;
  }
  if (x != out)
    TOFU_CHECK(b_->node(name, "Identity", {x}, {}, {}, out));
  return llvm::Error::success();
}

llvm::Error Importer::concatOp(const onnx::NodeProto &n, NodeEnv &env) {
  std::vector<std::string> in;
  for (int k = 0; k < env.inputs(); ++k) {
    // Empty inputs add nothing (and are never made tensors of the graph).
    if (auto it = facts_.shapes.find(env.input(k));
        it != facts_.shapes.end() && (it->second.empty() || elementCount(it->second) == 0))
      continue;
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    in.push_back(*t);
  }
  if (in.empty())
    return where(n, "every input is empty");
  std::string name = nameOf(n), out = n.output(0);
  int64_t r = int64_t(shapeOf(in[0]).size());
  int64_t axis = intAttr(n, "axis").value_or(0);
  axis = axis < 0 ? axis + r : axis;
  if (axis < 0 || axis >= r)
    return where(n, fmt::format("axis {} is out of range for rank {}", axis, r));
  if (in.size() == 1) {
    TOFU_CHECK(b_->node(name, "Identity", {in[0]}, {}, {}, out));
    return llvm::Error::success();
  }
  std::string x = in[0];
  int64_t have = shapeOf(in[0]).at(axis);
  for (size_t k = 1; k < in.size(); ++k) {
    int64_t more = shapeOf(in[k]).at(axis);
    TOFU_TRY(x, b_->node(fmt::format("{}_{}", name, k), "Concat", {x, in[k]},
                         {{"n", have}, {"m", have + more}}, {{"pre", axis}, {"post", r - axis - 1}},
                         k + 1 == in.size() ? out : ""));
    have += more;
  }
  return llvm::Error::success();
}

llvm::Error Importer::transposeOp(const onnx::NodeProto &n, NodeEnv &) {
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  const int64_t rank = int64_t(shapeOf(*in).size());
  auto perm = intsAttr(n, "perm", {});
  if (perm.empty())
    for (int64_t k = rank - 1; k >= 0; --k)
      perm.push_back(k);
  if (int64_t(perm.size()) != rank)
    return where(n, fmt::format("perm has {} entries for an input of rank {}", perm.size(), rank));
  if (!isPermutation(perm, size_t(rank)))
    return where(n, "perm is not a permutation of the input's axes");
  TOFU_CHECK(b_->transpose(nameOf(n), *in, perm, n.output(0)));
  return llvm::Error::success();
}

llvm::Error Importer::expandOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto shape = ints(env.input(1), "shape");
  if (!shape)
    return where(n, llvm::toString(shape.takeError()));
  auto x = tensorInput(n, 0);
  if (!x)
    return x.takeError();
  auto target = broadcastShape(shapeOf(*x), *shape);
  if (!target)
    return where(n, fmt::format("shape [{}] does not broadcast with the input's [{}]",
                                fmt::join(*shape, ", "), fmt::join(shapeOf(*x), ", ")));
  TOFU_CHECK(b_->broadcastTo(nameOf(n), *x, *target, n.output(0)));
  return llvm::Error::success();
}

llvm::Error Importer::padOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string mode = stringAttr(n, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    return where(n,
                 fmt::format("mode '{}' is not translated (constant, edge and reflect are)", mode));
  std::vector<int64_t> pads;
  if (env.present(1)) {
    auto p = ints(env.input(1), "pads");
    if (!p)
      return where(n, llvm::toString(p.takeError()));
    pads = *p;
  } else {
    pads = intsAttr(n, "pads", {});
  }
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::vector<int64_t> shape = shapeOf(*in);
  const int64_t r = int64_t(shape.size());
  if (int64_t(pads.size()) != 2 * r)
    return where(n, fmt::format("{} pads for an input of rank {}", pads.size(), r));
  std::string name = nameOf(n), out = n.output(0);
  if (mode != "constant") {
    // Edge and reflect padding clamp or mirror the index, which is not affine: each padded
    // axis is a selection by a constant matrix.
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < r; ++d)
      if (pads[d] != 0 || pads[d + r] != 0)
        axes.push_back(d);
    std::string x = *in;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t d = axes[k], rows = shape[d] + pads[d] + pads[d + r];
      if (rows <= 0)
        return where(n, "the padding crops the axis away");
      if (rows > kMaxAxisMap / shape[d])
        return where(n, fmt::format("{} padding of axis {} to {}: its selection matrix would "
                                    "hold more than 2^24 entries",
                                    mode, d, rows));
      if (mode == "reflect" && shape[d] == 1 && (pads[d] > 0 || pads[d + r] > 0))
        return where(n, fmt::format("reflect padding of axis {}, of extent 1", d));
      TOFU_TRY(x, b_->axisMap(fmt::format("{}_axis{}", name, d), x, d, rows,
                              padMatrix(shape[d], pads[d], pads[d + r], mode),
                              k + 1 == axes.size() ? out : ""));
    }
    if (axes.empty())
      TOFU_CHECK(b_->node(name, "Identity", {x}, {}, {}, out));
    return llvm::Error::success();
  }
  // The padding value: a constant (or the attribute of opsets before 11), or a tensor.
  std::string value;
  if (env.present(2) && !facts_.consts.count(env.input(2))) {
    auto v = tensorInput(n, 2);
    if (!v)
      return v.takeError();
    value = *v;
  } else {
    double v = floatAttr(n, "value").value_or(0);
    if (env.present(2))
      v = facts_.consts[env.input(2)].v.empty() ? 0 : facts_.consts[env.input(2)].v[0];
    TOFU_TRY(value, b_->constant(fmt::format("{}_value", name), {}, {v}, false));
  }
  std::string x = *in;
  std::vector<int> axes;
  for (int64_t d = 0; d < r; ++d)
    if (pads[d] != 0 || pads[d + r] != 0)
      axes.push_back(int(d));
  if (axes.empty()) {
    TOFU_CHECK(b_->node(name, "Identity", {x}, {}, {}, out));
    return llvm::Error::success();
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t d = axes[k], b = pads[d], e = pads[d + r], m = shape[d];
    std::string target = k + 1 == axes.size() ? out : "";
    std::map<std::string, int64_t> groups = {{"pre", d}, {"post", r - d - 1}};
    if (b < 0 || e < 0) { // negative pads crop
      int64_t start = std::max<int64_t>(-b, 0), count = m - start - std::max<int64_t>(-e, 0);
      if (count <= 0)
        return where(n, "the padding crops the axis away");
      bool grows = b > 0 || e > 0;
      TOFU_TRY(x, b_->node(fmt::format("{}_crop{}", name, d), "Slice", {x},
                           {{"start", start}, {"n", count}, {"step", 1}, {"m", m}}, groups,
                           grows ? "" : target));
      m = count;
      b = std::max<int64_t>(b, 0);
      e = std::max<int64_t>(e, 0);
      if (!grows) {
        shape[d] = m;
        continue;
      }
    }
    TOFU_TRY(x, b_->node(fmt::format("{}_axis{}", name, d), "Pad", {x, value},
                         {{"p", b}, {"n", m + b + e}, {"m", m}}, groups, target));
    shape[d] = m + b + e;
  }
  return llvm::Error::success();
}

llvm::Error Importer::resizeOp(const onnx::NodeProto &n, NodeEnv &env) {
  ResizeSpec spec;
  spec.mode = stringAttr(n, "mode", "nearest");
  // Upsample (opsets 7 to 9) interpolates as Resize-10 does.
  const bool upsample = n.op_type() == "Upsample";
  if (!upsample && opset_ >= 11) {
    spec.transform = stringAttr(n, "coordinate_transformation_mode", "half_pixel");
    spec.nearestMode = stringAttr(n, "nearest_mode", "round_prefer_floor");
    spec.cubicA = floatAttr(n, "cubic_coeff_a").value_or(-0.75f);
    spec.excludeOutside = intAttr(n, "exclude_outside").value_or(0) != 0;
  } else { // Resize-10 and Upsample: asymmetric, nearest rounding down
    spec.transform = "asymmetric";
    spec.nearestMode = "floor";
  }
  if (spec.mode != "nearest" && spec.mode != "linear" && spec.mode != "cubic")
    return where(n, fmt::format("mode '{}' is not one of nearest, linear and cubic", spec.mode));
  static const std::set<std::string> transforms = {"half_pixel",           "pytorch_half_pixel",
                                                   "align_corners",        "asymmetric",
                                                   "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (!transforms.count(spec.transform))
    return where(
        n, fmt::format("coordinate_transformation_mode '{}' is not translated", spec.transform));
  static const std::set<std::string> roundings = {"round_prefer_floor", "round_prefer_ceil",
                                                  "floor", "ceil"};
  if (spec.mode == "nearest" && !roundings.count(spec.nearestMode))
    return where(n, fmt::format("nearest_mode '{}' is not one of round_prefer_floor, "
                                "round_prefer_ceil, floor and ceil",
                                spec.nearestMode));
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  const std::vector<int64_t> from = shapeOf(*in);
  const int64_t r = int64_t(from.size());
  // The scales (Upsample-7: an attribute; Upsample-9 and Resize-10: input 1; later: input 2,
  // else the sizes of input 3).
  const bool modern = !upsample && opset_ >= 11;
  const int scalesAt = modern ? 2 : 1;
  std::vector<double> scales;
  if (upsample)
    for (const onnx::AttributeProto &a : n.attribute())
      if (a.name() == "scales")
        scales.assign(a.floats().begin(), a.floats().end());
  std::vector<int64_t> to;
  if (env.present(scalesAt)) {
    const Const *c = valueOf(env.input(scalesAt));
    if (!c)
      return where(n, fmt::format("its scales ('{}') must be a constant the importer can "
                                  "evaluate",
                                  env.input(scalesAt)));
    scales = c->v;
  }
  if (scales.empty() && modern && env.present(3)) {
    auto sizes = ints(env.input(3), "sizes");
    if (!sizes)
      return where(n, llvm::toString(sizes.takeError()));
    to = *sizes;
    if (int64_t(to.size()) != r)
      return where(n, fmt::format("{} sizes for an input of rank {}", to.size(), r));
    for (int64_t d = 0; d < r; ++d)
      scales.push_back(double(to[size_t(d)]) / double(from[size_t(d)]));
  } else {
    if (int64_t(scales.size()) != r)
      return where(n, fmt::format("{} scales for an input of rank {} (or no scales and no "
                                  "sizes)",
                                  scales.size(), r));
    for (int64_t d = 0; d < r; ++d) {
      if (!(scales[size_t(d)] > 0) || !std::isfinite(scales[size_t(d)]))
        return where(
            n, fmt::format("scale {} of axis {} is not a positive number", scales[size_t(d)], d));
      to.push_back(int64_t(std::floor(double(from[size_t(d)]) * float(scales[size_t(d)]))));
    }
  }
  for (int64_t d = 0; d < r; ++d)
    if (to[size_t(d)] <= 0 || to[size_t(d)] > kMaxAxisMap / std::max<int64_t>(from[size_t(d)], 1))
      return where(n, fmt::format("axis {} resized from {} to {}: {}", d, from[size_t(d)],
                                  to[size_t(d)],
                                  to[size_t(d)] <= 0 ? "an empty axis"
                                                     : "its interpolation matrix would hold more "
                                                       "than 2^24 entries"));
  if (auto known = facts_.shapes.find(n.output(0));
      known != facts_.shapes.end() && known->second != to)
    return where(n, fmt::format("resizes to [{}] but ONNX infers [{}]", fmt::join(to, ", "),
                                fmt::join(known->second, ", ")));
  // tf_crop_and_resize: the region of interest (input 1: every axis's start, then every
  // axis's end), and outputs outside it take extrapolation_value.
  std::vector<double> roi;
  const bool crop = spec.transform == "tf_crop_and_resize";
  if (crop) {
    const Const *c = env.present(1) ? valueOf(env.input(1)) : nullptr;
    if (!c || int64_t(c->v.size()) != 2 * r)
      return where(n, fmt::format("tf_crop_and_resize needs a constant roi of {} values (each "
                                  "axis's start, then each axis's end)",
                                  2 * r));
    roi = c->v;
  }
  // Each axis whose matrix is not the identity is mapped by it.
  std::vector<int64_t> axes;
  std::vector<std::vector<double>> maps;
  std::vector<std::vector<double>> inside(
      static_cast<size_t>(r)); // per axis, output: in the region
  for (int64_t d = 0; d < r; ++d) {
    if (crop) {
      spec.roiStart = roi[size_t(d)];
      spec.roiEnd = roi[size_t(r + d)];
    }
    std::vector<double> m =
        resizeMatrix(from[size_t(d)], to[size_t(d)], double(float(scales[size_t(d)])), spec);
    for (int64_t i = 0; i < to[size_t(d)]; ++i) {
      double row = 0;
      for (int64_t j = 0; j < from[size_t(d)]; ++j)
        row += std::abs(m[size_t(i * from[size_t(d)] + j)]);
      inside[size_t(d)].push_back(row != 0 ? 1.0 : 0.0);
    }
    bool identity = to[size_t(d)] == from[size_t(d)];
    for (int64_t i = 0; identity && i < to[size_t(d)]; ++i)
      for (int64_t j = 0; identity && j < from[size_t(d)]; ++j)
        identity = m[size_t(i * from[size_t(d)] + j)] == (i == j ? 1.0 : 0.0);
    if (!identity) {
      axes.push_back(d);
      maps.push_back(std::move(m));
    }
  }
  std::string name = nameOf(n), out = n.output(0), x = *in;
  if (axes.empty()) {
    TOFU_CHECK(b_->node(name, "Identity", {x}, {}, {}, out));
    return llvm::Error::success();
  }
  // Integer upscaling of the two spatial axes of a rank-4 input, each output reading entry
  // floor(o / f): the library's ResizeNearest2d (no matrix).
  auto repeats = [&](size_t k, int64_t d) {
    const int64_t f = to[size_t(d)] / from[size_t(d)];
    if (f * from[size_t(d)] != to[size_t(d)])
      return int64_t(0);
    for (int64_t o = 0; o < to[size_t(d)]; ++o)
      if (maps[k][size_t(o * from[size_t(d)] + o / f)] != 1)
        return int64_t(0);
    return f;
  };
  if (r == 4 && axes == std::vector<int64_t>{2, 3} && repeats(0, 2) && repeats(1, 3)) {
    TOFU_CHECK(b_->node(name, "ResizeNearest2d", {x},
                        {{"fh", repeats(0, 2)}, {"fw", repeats(1, 3)}}, {}, out));
    return llvm::Error::success();
  }
  // Outputs outside the region (any axis's) are extrapolation_value: the maps give them 0,
  // and a constant adds the value there.
  const double extrapolation = floatAttr(n, "extrapolation_value").value_or(0.0f);
  std::vector<double> outside;
  if (crop && extrapolation != 0) {
    outside.assign(size_t(elementCount(to)), 0.0);
    for (int64_t i = 0; i < elementCount(to); ++i) {
      int64_t rest = i;
      double within = 1;
      for (int64_t d = r - 1; d >= 0; --d) {
        within *= inside[size_t(d)][size_t(rest % to[size_t(d)])];
        rest /= to[size_t(d)];
      }
      outside[size_t(i)] = (1 - within) * extrapolation;
    }
    if (std::all_of(outside.begin(), outside.end(), [](double v) { return v == 0; }))
      outside.clear();
  }
  for (size_t k = 0; k < axes.size(); ++k)
    TOFU_TRY(x,
             b_->axisMap(fmt::format("{}_axis{}", name, axes[k]), x, axes[k], to[size_t(axes[k])],
                         std::move(maps[k]), k + 1 == axes.size() && outside.empty() ? out : ""));
  if (!outside.empty()) {
    std::string fill;
    TOFU_TRY(fill, b_->constant(name + "_extrapolated", to, std::move(outside), false));
    TOFU_CHECK(b_->node(name + "_extrapolate", "Add", {x, fill}, {}, {}, out));
  }
  return llvm::Error::success();
}

llvm::Error Importer::tileOp(const onnx::NodeProto &n, NodeEnv &env) {
  auto reps = ints(env.input(1), "repeats");
  if (!reps)
    return where(n, llvm::toString(reps.takeError()));
  auto in = tensorInput(n, 0);
  if (!in)
    return in.takeError();
  std::vector<int64_t> shape = shapeOf(*in);
  const int64_t r = int64_t(shape.size());
  if (int64_t(reps->size()) != r)
    return where(n, fmt::format("{} repeats for an input of rank {}", reps->size(), r));
  std::string x = *in, name = nameOf(n), out = n.output(0);
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < r; ++d) {
    if ((*reps)[d] < 1)
      return where(n, fmt::format("repeat {} of axis {}", (*reps)[d], d));
    if ((*reps)[d] > 1)
      axes.push_back(d);
  }
  if (axes.empty()) {
    TOFU_CHECK(b_->node(name, "Identity", {x}, {}, {}, out));
    return llvm::Error::success();
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t d = axes[k];
    TOFU_TRY(x, b_->node(fmt::format("{}_axis{}", name, d), "Tile", {x},
                         {{"m", shape[d]}, {"n", shape[d] * (*reps)[d]}},
                         {{"pre", d}, {"post", r - d - 1}}, k + 1 == axes.size() ? out : ""));
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> Importer::flatIndices(const onnx::NodeProto &n, const std::string &idx,
                                                  const std::vector<int64_t> &axes,
                                                  int64_t batches) {
  const std::vector<int64_t> ishape = shapeOf(idx);
  const int64_t depth = int64_t(axes.size()),
                count = elementCount(std::vector<int64_t>(ishape.begin(), ishape.end() - 1));
  const std::string name = nameOf(n);
  // Constant tuples are checked here: TDL reads zeros, or skips an update, off the data
  // silently. Any other indices (an input's, even one given ahead) are wrapped by the graph.
  bool wrapped = depth > 1 || batches > 1;
  if (auto c = facts_.consts.find(idx); c != facts_.consts.end()) {
    for (size_t k = 0; k < c->second.v.size(); ++k) {
      const int64_t d = int64_t(k) % depth, extent = axes[size_t(d)], i = asInt(c->second.v[k]);
      if (i < -extent || i >= extent)
        return where(n, fmt::format("index {} is outside axis {} of extent {} (indices lie in "
                                    "[-{}, {}))",
                                    i, d, extent, extent, extent));
      wrapped = wrapped || i < 0;
    }
  } else {
    wrapped = true;
  }
  std::string i;
  TOFU_TRY(i, b_->reshaped(name + "_idx", idx, {count, depth}));
  if (!wrapped)
    return i;
  std::vector<double> extents(axes.begin(), axes.end()), strides(static_cast<size_t>(depth));
  for (int64_t d = depth - 1, s = 1; d >= 0; --d) {
    strides[size_t(d)] = double(s);
    s *= axes[size_t(d)];
  }
  std::string ext, stride;
  TOFU_TRY(ext, b_->constant(name + "_extents", {depth}, extents, true));
  TOFU_TRY(stride, b_->constant(name + "_strides", {depth}, strides, true));
  TOFU_TRY(i, b_->node(name + "_flat", "FlatIndex", {i, ext, stride}));
  if (batches > 1) { // batch b's tuples index its own block of the flattened data
    std::vector<double> offsets(static_cast<size_t>(count));
    const int64_t block = elementCount(axes), perBatch = count / batches;
    for (int64_t j = 0; j < count; ++j)
      offsets[size_t(j)] = double(j / perBatch * block);
    std::string offset;
    TOFU_TRY(offset, b_->constant(name + "_batch_offsets", {count}, offsets, true));
    TOFU_TRY(i, b_->node(name + "_batched", "Add", {i, offset}));
  }
  return b_->reshaped(name + "_flat", i, {count, 1});
}

llvm::Error Importer::scatterOp(const onnx::NodeProto &n, NodeEnv &) {
  static const std::map<std::string, std::string> byReduction = {{"none", "ScatterND1"},
                                                                 {"add", "ScatterND1Add"},
                                                                 {"mul", "ScatterND1Mul"},
                                                                 {"max", "ScatterND1Max"},
                                                                 {"min", "ScatterND1Min"}};
  const std::string reduction = stringAttr(n, "reduction", "none");
  auto op = byReduction.find(reduction);
  if (op == byReduction.end())
    return where(n,
                 fmt::format("reduction '{}': it must be none, add, mul, max or min", reduction));
  auto data = tensorInput(n, 0), idx = tensorInput(n, 1), upd = tensorInput(n, 2);
  if (!data)
    return data.takeError();
  if (!idx)
    return idx.takeError();
  if (!upd)
    return upd.takeError();
  const std::vector<int64_t> shape = shapeOf(*data), ishape = shapeOf(*idx), ushape = shapeOf(*upd);
  if (ishape.empty())
    return where(n, "its indices must have a rank of at least 1");
  const int64_t depth = ishape.back();
  if (depth < 1 || depth > int64_t(shape.size()))
    return where(
        n, fmt::format("index tuples of {} components for data of rank {}", depth, shape.size()));
  // Updates: the indices' leading axes, then the axes of the data the tuples do not index.
  std::vector<int64_t> tuples(ishape.begin(), ishape.end() - 1),
      rest(shape.begin() + depth, shape.end());
  std::vector<int64_t> wanted = tuples;
  wanted.insert(wanted.end(), rest.begin(), rest.end());
  if (ushape != wanted)
    return where(n, fmt::format("its updates have shape [{}], not [{}] (the indices' leading axes, "
                                "then the data's axes from {})",
                                fmt::join(ushape, ", "), fmt::join(wanted, ", "), depth));
  const std::vector<int64_t> axes(shape.begin(), shape.begin() + depth);
  const std::string name = nameOf(n);
  std::vector<int64_t> flatShape{elementCount(axes)}, updShape{elementCount(tuples)};
  flatShape.insert(flatShape.end(), rest.begin(), rest.end());
  updShape.insert(updShape.end(), rest.begin(), rest.end());
  std::string x, u, i;
  TOFU_TRY(i, flatIndices(n, *idx, axes, 1));
  TOFU_TRY(x, b_->reshaped(name + "_data", *data, flatShape));
  TOFU_TRY(u, b_->reshaped(name + "_upd", *upd, updShape));
  const bool same = flatShape == shape;
  std::string y;
  TOFU_TRY(y, b_->node(name, op->second, {x, i, u}, {}, {{"r", int64_t(rest.size())}},
                       same ? n.output(0) : ""));
  if (!same)
    TOFU_CHECK(b_->reshape(name + "_out", y, flatShape, shape, n.output(0)));
  return llvm::Error::success();
}

llvm::Error Importer::gatherNDOp(const onnx::NodeProto &n, NodeEnv &) {
  auto data = tensorInput(n, 0), idx = tensorInput(n, 1);
  if (!data)
    return data.takeError();
  if (!idx)
    return idx.takeError();
  const std::vector<int64_t> shape = shapeOf(*data), ishape = shapeOf(*idx);
  const int64_t batchDims = intAttr(n, "batch_dims").value_or(0);
  if (ishape.empty())
    return where(n, "its indices must have a rank of at least 1");
  const int64_t depth = ishape.back(), rank = int64_t(shape.size());
  if (batchDims < 0 || batchDims >= std::min<int64_t>(rank, int64_t(ishape.size())))
    return where(n, fmt::format("batch_dims {} for data of rank {} and indices of rank {}",
                                batchDims, rank, ishape.size()));
  if (depth < 1 || batchDims + depth > rank)
    return where(n, fmt::format("index tuples of {} components after {} batch axes, for data of "
                                "rank {}",
                                depth, batchDims, rank));
  const std::vector<int64_t> batch(shape.begin(), shape.begin() + batchDims),
      axes(shape.begin() + batchDims, shape.begin() + batchDims + depth),
      rest(shape.begin() + batchDims + depth, shape.end());
  if (!std::equal(batch.begin(), batch.end(), ishape.begin()))
    return where(n, fmt::format("the indices' batch axes [{}] are not the data's [{}]",
                                fmt::join(ishape.begin(), ishape.begin() + batchDims, ", "),
                                fmt::join(batch, ", ")));
  // The output: the indices' axes but the last, then the axes the tuples do not index.
  std::vector<int64_t> out(ishape.begin(), ishape.end() - 1);
  out.insert(out.end(), rest.begin(), rest.end());
  const int64_t count = elementCount(std::vector<int64_t>(ishape.begin(), ishape.end() - 1));
  std::vector<int64_t> flatShape{elementCount(batch) * elementCount(axes)}, gathered{count};
  flatShape.insert(flatShape.end(), rest.begin(), rest.end());
  gathered.insert(gathered.end(), rest.begin(), rest.end());
  const std::string name = nameOf(n);
  std::string x, i, y;
  TOFU_TRY(i, flatIndices(n, *idx, axes, elementCount(batch)));
  TOFU_TRY(x, b_->reshaped(name + "_data", *data, flatShape));
  const bool same = gathered == out;
  TOFU_TRY(y, b_->node(name, "GatherND1", {x, i}, {}, {{"r", int64_t(rest.size())}},
                       same ? n.output(0) : ""));
  if (!same)
    TOFU_CHECK(b_->reshape(name + "_out", y, gathered, out, n.output(0)));
  return llvm::Error::success();
}

} // namespace onnximport
} // namespace tofu
