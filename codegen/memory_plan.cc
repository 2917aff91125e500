// The static memory planner.
#include "codegen/memory_plan.h"

#include <algorithm>
#include <limits>
#include <map>

#include "fmt/format.h"

namespace tofu {
namespace {

/// The bytes of a buffer of `elements` elements of `size` bytes, rounded up to whole 4-byte
/// words: every buffer starts aligned for float32, whatever the buffers before it hold (a
/// float32 buffer's size is unchanged).
int64_t storedBytes(int64_t elements, unsigned size) { return (elements * size + 3) / 4 * 4; }

/// Offsets by "largest first, lowest free offset": each buffer goes to the lowest offset
/// where it overlaps no already-placed buffer whose lifetime it shares. The placed buffers
/// are kept in offset order, so the first gap large enough is found in one pass.
void place(std::vector<Buffer> &buffers) {
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].bytes != buffers[b].bytes ? buffers[a].bytes > buffers[b].bytes
                                                : buffers[a].start < buffers[b].start;
  });
  std::vector<const Buffer *> placed; // by offset
  for (size_t i : order) {
    Buffer &b = buffers[i];
    int64_t offset = 0;
    for (const Buffer *o : placed) {
      if (o->start >= b.end || b.start >= o->end)
        continue; // not live together
      if (offset + b.bytes <= o->offset)
        break;
      offset = std::max(offset, o->offset + o->bytes);
    }
    b.offset = offset;
    placed.insert(std::upper_bound(placed.begin(), placed.end(), offset,
                                   [](int64_t v, const Buffer *o) { return v < o->offset; }),
                  &b);
  }
}

} // namespace

bool singleSlice(const NodeExec &ne) {
  bool single = true;
  for (const OutputAssembly &a : ne.assemble)
    single &= a.slices.size() == 1;
  return single;
}

bool writesTileDirectly(const NodeExec &ne, unsigned w, const Box &tile) {
  return singleSlice(ne) && ne.workers[w].computes && ne.workers[w].produced == tile;
}

int64_t MemoryPlan::largestPeak() const {
  int64_t peak = 0;
  for (const WorkerMemory &w : workers)
    peak = std::max(peak, w.peak);
  return peak;
}

unsigned MemoryPlan::largestPeakWorker() const {
  unsigned at = 0;
  for (unsigned w = 0; w < workers.size(); ++w)
    if (workers[w].peak > workers[at].peak)
      at = w;
  return at;
}

MemoryPlan planMemory(const Problem &p, const ExecPlan &plan,
                      const std::vector<std::string> &outputs) {
  const unsigned k = plan.workers;
  const int64_t forever = 3 * int64_t(plan.nodes.size()) + 3;
  // When each tensor is produced and last read (by any worker), in plan time.
  std::vector<int64_t> born(p.tensors.size(), 0), lastRead(p.tensors.size(), -1);
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const ProblemNode &node = p.nodes[plan.nodes[i].node];
    born[node.output] = 3 * int64_t(i) + 1;
    for (unsigned t : node.inputs)
      lastRead[t] = std::max(lastRead[t], 3 * int64_t(i) + 1);
  }
  std::vector<bool> keep(p.tensors.size(), false);
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    keep[t] = p.tensors[t].role == TensorRole::Weight ||
              p.tensors[t].role == TensorRole::OptimizerState ||
              std::find(outputs.begin(), outputs.end(), p.tensors[t].name) != outputs.end();
  MemoryPlan m;
  m.workers.resize(k);
  std::map<std::vector<int64_t>, std::vector<int64_t>> placements;
  for (unsigned w = 0; w < k; ++w) {
    WorkerMemory &wm = m.workers[w];
    // A result that is exactly the worker's tile is written into the tile by the op itself:
    // that tile is live from the op's start, not only from the assembly.
    std::vector<int64_t> start = born;
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      const NodeExec &ne = plan.nodes[i];
      const unsigned out = p.nodes[ne.node].output;
      if (writesTileDirectly(ne, w, plan.tiles[w][out]))
        start[out] = 3 * int64_t(i);
    }
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      int64_t bytes = storedBytes(boxElements(plan.tiles[w][t]), p.tensors[t].storageBytes());
      if (bytes == 0)
        continue;
      Buffer b;
      b.kind = Buffer::Kind::Tile;
      b.tensor = t;
      b.bytes = bytes;
      b.start = start[t];
      b.end = keep[t] || lastRead[t] < 0 ? forever : std::max(lastRead[t], born[t] + 1);
      wm.buffers.push_back(b);
      wm.tileBytes += bytes;
    }
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      const NodeExec &ne = plan.nodes[i];
      const OpInstance &inst = ne.workers[w];
      const int64_t at = 3 * int64_t(i);
      for (size_t q = 0; q < inst.inputs.size(); ++q) {
        const InputFetch &f = inst.inputs[q];
        if (f.repeats >= 0)
          continue; // shares the buffer of the earlier, identical read
        bool remote = false;
        for (const Fetch &part : f.parts)
          remote |= part.from != w;
        if (!remote)
          continue; // read in place from the worker's own tile
        Buffer b;
        b.kind = Buffer::Kind::Fetch;
        b.tensor = f.tensor;
        b.bytes = storedBytes(boxElements(f.region), p.tensors[f.tensor].storageBytes());
        b.start = at;
        b.end = at + 1;
        b.node = static_cast<int>(i);
        b.input = static_cast<int>(q);
        wm.buffers.push_back(b);
      }
      const unsigned out = p.nodes[ne.node].output;
      if (inst.computes && !writesTileDirectly(ne, w, plan.tiles[w][out])) {
        Buffer b;
        b.kind = Buffer::Kind::Partial;
        b.tensor = out;
        b.bytes = storedBytes(boxElements(inst.produced),
                              p.tensors[out].resultStorageBytes(!singleSlice(ne)));
        b.start = at;
        b.end = at + 2; // until every owner has assembled its tile
        b.node = static_cast<int>(i);
        wm.buffers.push_back(b);
      }
    }
    // Workers whose buffers have the same sizes and lifetimes (even splits) get the same
    // placement: it is computed once.
    std::vector<int64_t> signature;
    for (const Buffer &b : wm.buffers)
      signature.insert(signature.end(), {b.bytes, b.start, b.end});
    auto known = placements.find(signature);
    if (known != placements.end()) {
      for (size_t i = 0; i < wm.buffers.size(); ++i)
        wm.buffers[i].offset = known->second[i];
    } else {
      place(wm.buffers);
      std::vector<int64_t> offsets;
      for (const Buffer &b : wm.buffers)
        offsets.push_back(b.offset);
      placements.emplace(std::move(signature), std::move(offsets));
    }
    for (const Buffer &b : wm.buffers)
      wm.peak = std::max(wm.peak, b.offset + b.bytes);
  }
  return m;
}

std::vector<std::pair<int64_t, int64_t>> liveOverTime(const WorkerMemory &w) {
  std::map<int64_t, int64_t> change; // time -> bytes becoming live (or dead)
  for (const Buffer &b : w.buffers) {
    change[b.start] += b.bytes;
    change[b.end] -= b.bytes;
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t live = 0;
  for (const auto &[time, delta] : change)
    out.push_back({time, live += delta});
  return out;
}

LiveAtMost liveAtMost(const WorkerMemory &w) {
  const auto profile = liveOverTime(w);
  LiveAtMost out;
  if (profile.empty())
    return out;
  out.time = std::max_element(profile.begin(), profile.end(), [](const auto &a, const auto &b) {
               return a.second < b.second;
             })->first;
  for (const Buffer &b : w.buffers)
    if (b.start <= out.time && out.time < b.end)
      (b.kind == Buffer::Kind::Tile    ? out.tiles
       : b.kind == Buffer::Kind::Fetch ? out.fetches
                                       : out.partials) += b.bytes;
  return out;
}

LiveTiles liveTilesAt(const Problem &p, const WorkerMemory &w, int64_t time) {
  LiveTiles out;
  std::map<unsigned, int64_t> perTensor;
  for (const Buffer &b : w.buffers) {
    if (b.kind != Buffer::Kind::Tile || b.start > time || time >= b.end)
      continue;
    perTensor[b.tensor] += b.bytes;
    const ProblemTensor &t = p.tensors[b.tensor];
    switch (t.role) {
    case TensorRole::Input:
      out.inputs += b.bytes;
      break;
    case TensorRole::Weight:
      out.weights += b.bytes;
      break;
    case TensorRole::Activation:
      out.activations += b.bytes;
      break;
    case TensorRole::Gradient:
      out.gradients += b.bytes;
      break;
    case TensorRole::OptimizerState:
      out.optimizerState += b.bytes;
      break;
    }
    if (t.storage == ElementType::BFloat16)
      out.bfloat16 += b.bytes;
  }
  out.largest.assign(perTensor.begin(), perTensor.end());
  std::stable_sort(out.largest.begin(), out.largest.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });
  if (out.largest.size() > kLargestLiveTiles)
    out.largest.resize(kLargestLiveTiles);
  return out;
}

std::string checkMemoryPlan(const MemoryPlan &m) {
  for (size_t w = 0; w < m.workers.size(); ++w) {
    const auto &bs = m.workers[w].buffers;
    // Sweep over time: buffers sorted by start; the live set checked at each start.
    std::vector<size_t> order(bs.size());
    for (size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
      if (bs[i].offset < 0)
        return fmt::format("worker {}: buffer {} is not placed", w, i);
      if (bs[i].offset + bs[i].bytes > m.workers[w].peak)
        return fmt::format("worker {}: buffer {} ends past the peak", w, i);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return bs[a].start < bs[b].start; });
    std::vector<size_t> live;
    for (size_t i : order) {
      live.erase(std::remove_if(live.begin(), live.end(),
                                [&](size_t j) { return bs[j].end <= bs[i].start; }),
                 live.end());
      for (size_t j : live)
        if (bs[j].offset < bs[i].offset + bs[i].bytes && bs[i].offset < bs[j].offset + bs[j].bytes)
          return fmt::format("worker {}: buffers {} and {} are live together at time {} and "
                             "overlap in memory",
                             w, j, i, bs[i].start);
      live.push_back(i);
    }
  }
  return "";
}

} // namespace tofu
