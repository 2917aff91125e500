// The CPU reference executor.
#include "runtime/cpu_executor.h"

#include <cctype>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "analysis/reducer.h"
#include "analysis/verify.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {
namespace {

std::vector<int64_t> extents(const Box &b) {
  std::vector<int64_t> e;
  for (const Range &r : b)
    e.push_back(r.size());
  return e;
}

/// Calls f(dst offset, src offset) for every element of `box`, given where each buffer
/// starts (its origin) and its shape.
template <typename F>
void forEachElement(const Box &box, const Box &dstOrigin, const std::vector<int64_t> &dstShape,
                    const Box &srcOrigin, const std::vector<int64_t> &srcShape, F f) {
  const std::vector<int64_t> ext = extents(box);
  int64_t n = boxElements(box);
  std::vector<int64_t> c(box.size());
  for (int64_t k = 0; k < n; ++k) {
    unflatten(k, ext, c.data());
    int64_t d = 0, s = 0;
    for (size_t i = 0; i < box.size(); ++i) {
      int64_t abs = box[i].lo + c[i];
      d = d * dstShape[i] + (abs - (dstOrigin.empty() ? 0 : dstOrigin[i].lo));
      s = s * srcShape[i] + (abs - (srcOrigin.empty() ? 0 : srcOrigin[i].lo));
    }
    f(d, s);
  }
}

} // namespace

void CpuTransport::copy(unsigned from, const Tensor &src, const Box &srcOrigin, unsigned to,
                        Tensor &dst, const Box &dstOrigin, const Box &box, unsigned elementBytes,
                        const ir::Reducer *reducer) {
  if (reducer)
    forEachElement(box, dstOrigin, dst.shape, srcOrigin, src.shape, [&](int64_t d, int64_t s) {
      dst.data[d] = reducerCombine(*reducer, dst.data[d], src.data[s]);
    });
  else
    forEachElement(box, dstOrigin, dst.shape, srcOrigin, src.shape,
                   [&](int64_t d, int64_t s) { dst.data[d] = src.data[s]; });
  if (from != to)
    moved_ += boxElements(box) * elementBytes;
}

llvm::Expected<ExecResult> runPlan(const Problem &p, const ExecPlan &plan,
                                   const std::map<unsigned, Tensor> &given, Transport *transport) {
  CpuTransport cpu;
  Transport &net = transport ? *transport : cpu;
  const unsigned k = plan.workers, T = static_cast<unsigned>(p.tensors.size());
  std::vector<std::vector<Tensor>> tiles(k, std::vector<Tensor>(T));
  for (unsigned t = 0; t < T; ++t) {
    if (p.tensors[t].producer >= 0)
      continue;
    auto it = given.find(t);
    if (it == given.end())
      return stringError(fmt::format("no value given for tensor '{}'", p.tensors[t].name));
    if (it->second.shape != p.tensors[t].shape)
      return stringError(
          fmt::format("the value given for '{}' has the wrong shape", p.tensors[t].name));
    for (unsigned w = 0; w < k; ++w) {
      const Box &tile = plan.tiles[w][t];
      Tensor &dst = tiles[w][t] = Tensor(extents(tile));
      forEachElement(tile, tile, dst.shape, {}, it->second.shape,
                     [&](int64_t d, int64_t s) { dst.data[d] = it->second.data[s]; });
    }
  }
  for (const NodeExec &ne : plan.nodes) {
    const ProblemNode &node = p.nodes[ne.node];
    std::vector<Tensor> partial(k);
    std::vector<std::string> errors(k);
    auto compute = [&](unsigned w) {
      const OpInstance &inst = ne.workers[w];
      std::vector<Tensor> inputs(inst.inputs.size());
      std::vector<const Tensor *> ptrs(inst.inputs.size());
      for (size_t i = 0; i < inst.inputs.size(); ++i) {
        const InputFetch &f = inst.inputs[i];
        if (f.repeats >= 0) { // the same region of the same tensor: one buffer serves both
          ptrs[i] = ptrs[f.repeats];
          continue;
        }
        // Whole-shape buffer, NaN outside the fetched region: a read the plan did not
        // provide shows up in the result.
        inputs[i] = Tensor(p.tensors[f.tensor].shape, std::numeric_limits<double>::quiet_NaN());
        for (const Fetch &part : f.parts)
          net.copy(part.from, tiles[part.from][f.tensor], plan.tiles[part.from][f.tensor], w,
                   inputs[i], {}, part.box, p.tensors[f.tensor].elementBytes, nullptr);
        ptrs[i] = &inputs[i];
      }
      if (!inst.computes) {
        partial[w] = Tensor(extents(inst.produced));
        return;
      }
      auto r = evaluate(node.table->op, node.shapes, ptrs, inst.ranges);
      if (!r) {
        errors[w] = llvm::toString(r.takeError());
        return;
      }
      partial[w] = std::move(*r);
    };
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < k; ++w)
      threads.emplace_back(compute, w);
    for (std::thread &t : threads)
      t.join();
    for (unsigned w = 0; w < k; ++w)
      if (!errors[w].empty())
        return stringError(fmt::format("node '{}', worker {}: {}", node.name, w, errors[w]));
    // Each owner assembles its tile from the partial results, combining reduction slices.
    auto assemble = [&](const OutputAssembly &a) {
      Tensor tile(extents(a.tile), reducerIdentity<double>(ne.reducer));
      for (const auto &slice : a.slices)
        for (const Fetch &f : slice)
          net.copy(f.from, partial[f.from], ne.workers[f.from].produced, a.owner, tile, a.tile,
                   f.box, p.tensors[node.output].resultBytes(a.slices.size() > 1), &ne.reducer);
      tiles[a.owner][node.output] = std::move(tile);
    };
    threads.clear();
    for (const OutputAssembly &a : ne.assemble)
      threads.emplace_back(assemble, std::cref(a));
    for (std::thread &t : threads)
      t.join();
  }
  ExecResult result;
  result.bytesMoved = net.bytesMoved();
  for (unsigned t = 0; t < T; ++t) {
    Tensor whole(p.tensors[t].shape, std::numeric_limits<double>::quiet_NaN());
    for (unsigned w = 0; w < k; ++w) {
      const Box &tile = plan.tiles[w][t];
      if (boxElements(tile) == 0)
        continue;
      const Tensor &src = tiles[w][t];
      forEachElement(tile, {}, whole.shape, tile, src.shape,
                     [&](int64_t d, int64_t s) { whole.data[d] = src.data[s]; });
    }
    result.tensors.push_back(std::move(whole));
  }
  return result;
}

llvm::Expected<std::vector<Tensor>> runReference(const Problem &p,
                                                 const std::map<unsigned, Tensor> &given) {
  std::vector<Tensor> values(p.tensors.size());
  for (const auto &[t, v] : given)
    values[t] = v;
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    std::vector<const Tensor *> ptrs;
    for (unsigned t : node.inputs)
      ptrs.push_back(&values[t]);
    auto r = evaluate(node.table->op, node.shapes, ptrs, fullRanges(node.shapes));
    if (!r)
      return stringError(fmt::format("node '{}': {}", node.name, llvm::toString(r.takeError())));
    values[node.output] = std::move(*r);
  }
  return values;
}

std::map<unsigned, Tensor> randomGraphInputs(const Problem &p, unsigned seed,
                                             std::pair<double, double> range) {
  std::map<unsigned, Tensor> out;
  for (unsigned n : p.order) {
    const ProblemNode &node = p.nodes[n];
    std::vector<Tensor> values;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      unsigned t = node.inputs[i];
      if (p.tensors[t].producer >= 0 || out.count(t))
        continue;
      if (values.empty())
        values = randomInputs(node.table->op, node.shapes, seed + n, range);
      out[t] = values[i];
    }
  }
  for (unsigned t = 0; t < p.tensors.size(); ++t) // tensors nothing reads
    if (p.tensors[t].producer < 0 && !out.count(t))
      out[t] = Tensor(p.tensors[t].shape, 0.5);
  // A normalisation's epsilon must be positive (a negative one makes every later value
  // NaN, and NaN compares equal to NaN in the tests' comparisons).
  for (auto &[t, v] : out) {
    std::string name = p.tensors[t].name;
    for (char &c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v.shape.empty() && name.find("eps") != std::string::npos)
      v.data.assign(1, 0.1);
  }
  return out;
}

double maxRelativeError(const Tensor &a, const Tensor &b) {
  if (a.shape != b.shape || a.data.size() != b.data.size())
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y))
        return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

} // namespace tofu
