// The graph an import builds (GraphBuilder): nodes and constants added one at a time, each
// returning its error, and the layout helpers every translation uses: reshape, transpose,
// broadcast, concatenation, slices, axis maps. Also the importer's reads of its inputs.
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

llvm::Expected<std::string> GraphBuilder::node(const std::string &name, const std::string &op,
                                               std::vector<std::string> in,
                                               std::map<std::string, int64_t> attrs,
                                               std::map<std::string, int64_t> groups,
                                               const std::string &output) {
  Node n;
  n.name = name;
  n.group = group;
  n.coalesce = coalesce;
  n.op = op;
  n.inputs = std::move(in);
  n.attrs = std::move(attrs);
  n.groups = std::move(groups);
  n.output = output.empty() ? fmt::format("{}__{}", name, counter++) : output;
  std::string out = n.output;
  if (!g_.tensor(out)) {
    TensorInfo t;
    t.name = out;
    t.group = out;
    // Declared with ONNX's inferred shape when it has one: checkGraph compares.
    if (auto it = facts_.shapes.find(out); it != facts_.shapes.end()) {
      t.shape = it->second;
      t.shapeKnown = true;
    }
    if (auto it = facts_.types.find(out); it != facts_.types.end())
      t.dtype = graphElementType(it->second);
    if (llvm::Error e = g_.addTensor(std::move(t)))
      return std::move(e);
  }
  if (llvm::Error e = g_.addNode(std::move(n)))
    return std::move(e);
  // Infer the output's shape now: later nodes (reshapes, slices) read it.
  if (llvm::Error e = inferNode(g_, g_.nodes().back(), lib_))
    return std::move(e);
  if (const TensorInfo *t = g_.tensor(out); t && t->shapeKnown)
    facts_.shapes[out] = t->shape;
  return out;
}

llvm::Expected<std::string> GraphBuilder::constant(const std::string &name,
                                                   std::vector<int64_t> shape,
                                                   std::vector<double> values, bool isInt) {
  Const c;
  c.shape = std::move(shape);
  c.v = std::move(values);
  c.isInt = isInt;
  facts_.shapes[name] = c.shape;
  facts_.consts[name] = std::move(c);
  if (llvm::Error e = materialize(name))
    return std::move(e);
  return name;
}

llvm::Error GraphBuilder::materialize(const std::string &name) {
  auto it = facts_.consts.find(name);
  if (it == facts_.consts.end() || g_.tensor(name))
    return llvm::Error::success();
  TensorInfo t;
  t.name = name;
  t.group = name;
  t.shape = it->second.shape;
  t.shapeKnown = true;
  t.dtype = it->second.isInt ? ElementType::Int64 : ElementType::Float32;
  t.role = TensorRole::Input;
  facts_.shapes[name] = t.shape;
  g_.constants[name] = it->second.v;
  return g_.addTensor(std::move(t));
}

llvm::Expected<std::string> Importer::tensorInput(const onnx::NodeProto &n, int k) {
  if (k < 0 || k >= n.input_size() || n.input(k).empty())
    return where(n, fmt::format("its input {} is needed but absent", k));
  const std::string &t = n.input(k);
  // An empty value is held whole (a constant, or what a node that computes nothing gave);
  // the ops that make something of one are translated where the importer knows its result.
  if (isEmpty(t))
    return where(n, fmt::format("its input '{}' is empty ([{}]), and the importer does not "
                                "compute what ONNX {} makes of an empty tensor",
                                t, fmt::join(known(t)->shape, ", "), n.op_type()));
  if (llvm::Error e = b_->materialize(t))
    return std::move(e);
  if (main_.graph().inputsTakenWhole.count(t))
    return where(n, fmt::format("its input '{}' is empty ([{}]); Tofu's tensors are not", t,
                                fmt::join(shapeOf(t), ", ")));
  if (!b_->graph().tensor(t))
    return where(n, fmt::format("input '{}' is not produced before it", t));
  return t;
}

llvm::Expected<std::vector<int64_t>> Importer::ints(const std::string &tensor,
                                                    const std::string &what) {
  const Const *c = valueOf(tensor);
  if (!c)
    return stringError(fmt::format("its {} ('{}') must be a constant the importer can evaluate "
                                   "(or, for an input, a value given ahead: tofu-run --infer "
                                   "--input)",
                                   what, tensor));
  std::vector<int64_t> v;
  for (double x : c->v)
    v.push_back(asInt(x));
  return v;
}

llvm::Expected<std::string> GraphBuilder::broadcastTo(const std::string &name, std::string x,
                                                      const std::vector<int64_t> &to,
                                                      const std::string &out) {
  std::vector<int64_t> from = shapeOf(x);
  if (from.size() < to.size()) {
    std::vector<int64_t> lifted(to.size() - from.size(), 1);
    lifted.insert(lifted.end(), from.begin(), from.end());
    TOFU_TRY(x, reshape(name + "_lift", x, from, lifted, ""));
    from = lifted;
  }
  std::vector<size_t> axes;
  for (size_t d = 0; d < to.size(); ++d)
    if (from[d] == 1 && to[d] != 1)
      axes.push_back(d);
  if (axes.empty()) {
    if (out.empty())
      return x;
    return node(name, "Identity", {x}, {}, {}, out);
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    size_t d = axes[k];
    TOFU_TRY(x, node(fmt::format("{}_expand{}", name, d), "ExpandAxis", {x}, {{"n", to[d]}},
                     {{"pre", int64_t(d)}, {"post", int64_t(to.size() - d - 1)}},
                     k + 1 == axes.size() ? out : ""));
  }
  return x;
}

llvm::Expected<std::string> GraphBuilder::reshape(const std::string &name, std::string x,
                                                  std::vector<int64_t> from,
                                                  const std::vector<int64_t> &to,
                                                  const std::string &out) {
  // Size-1 axes first leave (Squeeze) and finally come back (Unsqueeze); in between, the
  // axes are grouped where the two shapes' running products meet, and each group of
  // source axes is merged into one and split into the group's target axes.
  struct Step {
    std::string op;
    std::map<std::string, int64_t> attrs, groups;
  };
  std::vector<Step> steps;
  auto add = [&](const std::string &op, std::map<std::string, int64_t> attrs,
                 std::map<std::string, int64_t> groups) {
    steps.push_back({op, std::move(attrs), std::move(groups)});
  };
  std::vector<int64_t> cur = from;
  for (size_t d = cur.size(); d-- > 0;)
    if (cur[d] == 1) {
      add("Squeeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d - 1)}});
      cur.erase(cur.begin() + d);
    }
  std::vector<int64_t> target;
  for (int64_t d : to)
    if (d != 1)
      target.push_back(d);
  size_t i = 0, j = 0;
  while (i < cur.size() && j < target.size()) {
    size_t i2 = i + 1, j2 = j + 1;
    int64_t a = cur[i], b = target[j];
    while (a != b) {
      if (a < b)
        a *= cur[i2++];
      else
        b *= target[j2++];
    }
    // Merge cur[i, i2) into one axis at pos, then split it into target[j, j2).
    size_t rank = cur.size();
    for (size_t k = i + 1; k < i2; ++k) {
      int64_t inner = cur[i + 1];
      int64_t merged = cur[i] * inner;
      add("ReshapeMerge", {{"n", inner}, {"m", merged}},
          {{"pre", int64_t(i)}, {"post", int64_t(rank - i - 2)}});
      cur[i] = merged;
      cur.erase(cur.begin() + i + 1);
      rank = cur.size();
    }
    for (size_t k = j2 - 1; k > j; --k) {
      int64_t inner = target[k];
      int64_t outer = cur[i] / inner;
      add("ReshapeSplit", {{"n", inner}, {"outer", outer}},
          {{"pre", int64_t(i)}, {"post", int64_t(cur.size() - i - 1)}});
      cur[i] = outer;
      cur.insert(cur.begin() + i + 1, inner);
    }
    i += j2 - j;
    j = j2;
  }
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] == 1) {
      add("Unsqueeze", {}, {{"pre", int64_t(d)}, {"post", int64_t(cur.size() - d)}});
      cur.insert(cur.begin() + d, 1);
    }
  if (steps.empty())
    return node(name, "Identity", {x}, {}, {}, out);
  for (size_t k = 0; k < steps.size(); ++k)
    TOFU_TRY(x, node(fmt::format("{}_{}{}", name, steps[k].op, k), steps[k].op, {x}, steps[k].attrs,
                     steps[k].groups, k + 1 == steps.size() ? out : ""));
  return x;
}

std::vector<int64_t> permutedOf(const std::vector<int64_t> &shape,
                                const std::vector<int64_t> &perm) {
  std::vector<int64_t> r;
  for (int64_t p : perm)
    r.push_back(shape[p]);
  return r;
}

llvm::Expected<std::string> GraphBuilder::transpose(const std::string &name, const std::string &in,
                                                    const std::vector<int64_t> &perm,
                                                    const std::string &out) {
  std::vector<int64_t> from = shapeOf(in);
  // Size-1 axes and runs of source axes that stay adjacent move together: the permutation
  // of the merged axes is usually of a rank the library has (2 to 4).
  std::vector<std::vector<int64_t>> runs; // source axes of each output run, in output order
  for (int64_t p : perm) {
    if (from[p] == 1)
      continue;
    if (!runs.empty() && runs.back().back() + 1 == p)
      runs.back().push_back(p);
    else
      runs.push_back({p});
  }
  std::vector<size_t> order(runs.size()); // runs sorted by their first source axis
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return runs[a][0] < runs[b][0]; });
  std::vector<int64_t> merged, newPerm(runs.size());
  for (size_t s = 0; s < order.size(); ++s) {
    int64_t extent = 1;
    for (int64_t a : runs[order[s]])
      extent *= from[a];
    merged.push_back(extent);
    newPerm[order[s]] = int64_t(s);
  }
  std::vector<int64_t> to;
  for (int64_t p : perm)
    to.push_back(from[p]);
  bool identity = true;
  for (size_t k = 0; k < newPerm.size(); ++k)
    identity &= newPerm[k] == int64_t(k);
  if (identity) {
    return reshape(name, in, from, to, out);
  }
  auto opFor = [](const std::vector<int64_t> &p) {
    std::string s = "Transpose_";
    for (int64_t a : p)
      s += std::to_string(a);
    return s;
  };
  std::string opName = opFor(newPerm);
  std::string x = in;
  if (merged != from)
    TOFU_TRY(x, reshape(name + "_merge", x, from, merged, ""));
  if (!lib_.find(opName)) {
    // Higher ranks: one axis at a time moves to its place, each move a block swap
    // [A, B, C, D] -> [A, C, B, D] of merged axes (Transpose_0213 or a smaller one).
    std::vector<int64_t> cur(newPerm.size()); // source axes, in their current order
    std::iota(cur.begin(), cur.end(), 0);
    for (size_t i = 0; i < cur.size(); ++i) {
      size_t j = std::find(cur.begin(), cur.end(), newPerm[i]) - cur.begin();
      if (j == i)
        continue;
      auto extent = [&](size_t b, size_t e) {
        int64_t v = 1;
        for (size_t q = b; q < e; ++q)
          v *= merged[cur[q]];
        return v;
      };
      std::vector<int64_t> curShape, blocks, blockPerm;
      for (int64_t a : cur)
        curShape.push_back(merged[a]);
      bool hasA = i > 0, hasD = j + 1 < cur.size();
      if (hasA)
        blocks.push_back(extent(0, i));
      blocks.push_back(extent(i, j));
      blocks.push_back(extent(j, j + 1));
      if (hasD)
        blocks.push_back(extent(j + 1, cur.size()));
      size_t b = hasA; // the position of block B
      for (size_t q = 0; q < blocks.size(); ++q)
        blockPerm.push_back(q == b ? int64_t(b + 1) : q == b + 1 ? int64_t(b) : int64_t(q));
      std::string tag = fmt::format("{}_move{}", name, i);
      TOFU_TRY(x, reshape(tag + "_in", x, curShape, blocks, ""));
      TOFU_TRY(x, node(tag, opFor(blockPerm), {x}));
      int64_t moved = cur[j];
      cur.erase(cur.begin() + j);
      cur.insert(cur.begin() + i, moved);
      std::vector<int64_t> nextShape;
      for (int64_t a : cur)
        nextShape.push_back(merged[a]);
      std::vector<int64_t> swapped = blocks;
      std::swap(swapped[b], swapped[b + 1]);
      TOFU_TRY(x, reshape(tag + "_out", x, swapped, nextShape, ""));
    }
    return reshape(name, x, permutedOf(merged, newPerm), to, out);
  }
  std::vector<int64_t> permuted;
  for (int64_t p : newPerm)
    permuted.push_back(merged[p]);
  if (permuted == to)
    return node(name, opName, {x}, {}, {}, out);
  TOFU_TRY(x, node(name, opName, {x}));
  return reshape(name + "_split", x, permuted, to, out);
}

llvm::Expected<std::string> GraphBuilder::axisMap(const std::string &name, const std::string &x,
                                                  int64_t axis, int64_t rows, std::vector<double> m,
                                                  const std::string &out) {
  const int64_t r = int64_t(shapeOf(x).size()), extent = shapeOf(x)[size_t(axis)];
  std::string matrix;
  TOFU_TRY(matrix, constant(name + "_map", {rows, extent}, std::move(m), false));
  return node(name, "AxisMap", {x, matrix}, {}, {{"pre", axis}, {"post", r - axis - 1}}, out);
}

/// Balanced concatenation of `parts` along `axis` (all of one rank): log-depth, so a
/// long sequence is not copied once per element.
llvm::Expected<std::string> GraphBuilder::concatAll(const std::string &name,
                                                    std::vector<std::string> parts, int64_t axis,
                                                    const std::string &out) {
  if (parts.size() == 1) {
    if (out.empty())
      return parts[0];
    return node(name, "Identity", {parts[0]}, {}, {}, out);
  }
  for (unsigned round = 0; parts.size() > 1; ++round) {
    std::vector<std::string> next;
    for (size_t k = 0; k + 1 < parts.size(); k += 2) {
      const std::vector<int64_t> &a = shapeOf(parts[k]), &b = shapeOf(parts[k + 1]);
      int64_t r = int64_t(a.size());
      std::string joined;
      TOFU_TRY(joined, node(fmt::format("{}_cat{}_{}", name, round, k / 2), "Concat",
                            {parts[k], parts[k + 1]}, {{"n", a[axis]}, {"m", a[axis] + b[axis]}},
                            {{"pre", axis}, {"post", r - axis - 1}}, parts.size() == 2 ? out : ""));
      next.push_back(joined);
    }
    if (parts.size() % 2)
      next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts[0];
}

llvm::Expected<std::string> GraphBuilder::sliceAxis(const std::string &name, const std::string &x,
                                                    int64_t axis, int64_t start, int64_t count) {
  const std::vector<int64_t> &shape = shapeOf(x);
  int64_t r = int64_t(shape.size());
  return node(name, "Slice", {x}, {{"start", start}, {"n", count}, {"step", 1}, {"m", shape[axis]}},
              {{"pre", axis}, {"post", r - axis - 1}});
}

llvm::Expected<std::string> GraphBuilder::reshaped(const std::string &name, const std::string &x,
                                                   const std::vector<int64_t> &to) {
  if (shapeOf(x) == to)
    return x;
  return reshape(name, x, shapeOf(x), to, "");
}

} // namespace onnximport
} // namespace tofu
