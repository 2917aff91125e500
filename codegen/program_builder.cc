// Building every worker's program from an execution plan and its memory plan: buffers
// placed at the memory plan's offsets, each node's fetches, launch and assembly as region
// copies, the synchronisations, and the carries of optimiser updates.
#include "codegen/program_builder.h"

#include <algorithm>
#include <map>

#include "codegen/kernel_gen.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "grammar/diagnostics.h"
#include "graph/training.h"

namespace tofu {
namespace {

/// The loop IR's element of an arena buffer holding elements of `t` (float32 or bfloat16:
/// ProblemTensor::storage).
loops::Element elementOf(ElementType t) {
  return t == ElementType::BFloat16 ? loops::Element::BF16 : loops::Element::F32;
}

class Builder {
public:
  Builder(const Problem &p, const ExecPlan &plan, const MemoryPlan &memory, Program &out)
      : p(p), plan(plan), memory(memory), k(plan.workers), out(out) {}

  llvm::Error build();

private:
  llvm::Error placeBuffers();
  llvm::Error buildStep(size_t i);
  void placeSyncs();
  bool updateInPlace(unsigned upd, unsigned tgt);
  void buildCarries();

  const Problem &p;
  const ExecPlan &plan;
  const MemoryPlan &memory;
  const unsigned k;
  Program &out;
  std::vector<std::map<std::pair<int, int>, int64_t>> fetchOff;
  std::vector<std::map<int, int64_t>> partialOff;
};

llvm::Error Builder::placeBuffers() {
  out.worker.assign(k, {});
  fetchOff.assign(k, {});
  partialOff.assign(k, {});
  if (memory.workers.size() != k)
    return stringError(fmt::format("the memory plan has {} workers, the execution plan {}",
                                   memory.workers.size(), k));
  for (unsigned w = 0; w < k; ++w) {
    const WorkerMemory &wm = memory.workers[w];
    WorkerProgram &wp = out.worker[w];
    wp.arenaBytes = wm.peak;
    wp.tileOffset.assign(p.tensors.size(), -1);
    for (const Buffer &b : wm.buffers) {
      if (b.offset < 0 || b.offset % 4 != 0 || b.offset + b.bytes > wm.peak)
        return stringError(fmt::format("worker {}: the memory plan places a buffer of '{}' at "
                                       "offset {} ({} bytes, arena {}): unplaced, misaligned "
                                       "for float32 or outside the arena",
                                       w, p.tensors[b.tensor].name, b.offset, b.bytes, wm.peak));
      switch (b.kind) {
      case Buffer::Kind::Tile:
        wp.tileOffset[b.tensor] = b.offset;
        break;
      case Buffer::Kind::Fetch:
        fetchOff[w][{b.node, b.input}] = b.offset;
        break;
      case Buffer::Kind::Partial:
        partialOff[w][b.node] = b.offset;
        break;
      }
      TensorRole role = p.tensors[b.tensor].role;
      bool resident = b.kind == Buffer::Kind::Tile &&
                      (role == TensorRole::Weight || role == TensorRole::OptimizerState);
      if (!resident && b.bytes > 0)
        wp.scratchBuffers.push_back({b.offset, b.bytes});
    }
  }
  return llvm::Error::success();
}

llvm::Error Builder::buildStep(size_t i) {
  const NodeExec &ne = plan.nodes[i];
  const ProblemNode &node = p.nodes[ne.node];
  const unsigned outT = node.output;
  for (unsigned w = 0; w < k; ++w) {
    const OpInstance &inst = ne.workers[w];
    WorkerProgram &wp = out.worker[w];
    ProgramStep &st = wp.steps[i];
    st.node = static_cast<unsigned>(i);
    Launch &l = st.launch;
    l.kernel = out.nodes[i].kernel;
    l.ranges = inst.ranges;
    l.produced = inst.produced;
    st.launches = inst.computes;
    for (size_t q = 0; q < inst.inputs.size(); ++q) {
      const InputFetch &f = inst.inputs[q];
      if (f.repeats >= 0) {
        l.inputOffsets.push_back(l.inputOffsets[f.repeats]);
        l.inputBoxes.push_back(l.inputBoxes[f.repeats]);
        l.inputElements.push_back(l.inputElements[f.repeats]);
        continue;
      }
      // Fetched regions are stored as their tensor's tiles are.
      const loops::Element element = elementOf(p.tensors[f.tensor].storage);
      l.inputElements.push_back(element);
      auto fb = fetchOff[w].find({static_cast<int>(i), static_cast<int>(q)});
      if (fb == fetchOff[w].end()) { // read in place from the worker's own tile
        const Box &tile = plan.tiles[w][f.tensor];
        const int64_t off = wp.tileOffset[f.tensor];
        if (boxElements(f.region) > 0 && (off < 0 || !boxContains(tile, f.region)))
          return stringError(fmt::format("node '{}', worker {}: input {} is neither fetched nor "
                                         "in the worker's tile",
                                         node.name, w, q));
        l.inputOffsets.push_back(std::max<int64_t>(0, off));
        l.inputBoxes.push_back(off < 0 ? f.region : tile);
        continue;
      }
      l.inputOffsets.push_back(fb->second);
      l.inputBoxes.push_back(f.region);
      for (const Fetch &part : f.parts) {
        RegionCopy cp;
        cp.from = part.from;
        cp.srcOffset = out.worker[part.from].tileOffset[f.tensor];
        cp.srcBox = plan.tiles[part.from][f.tensor];
        cp.dstOffset = fb->second;
        cp.dstBox = f.region;
        cp.box = part.box;
        cp.elementBytes = p.tensors[f.tensor].elementBytes;
        cp.srcElement = cp.dstElement = element;
        if (cp.srcOffset < 0)
          return stringError(fmt::format("node '{}': worker {} fetches from worker {}, which "
                                         "holds no tile of '{}'",
                                         node.name, w, part.from, p.tensors[f.tensor].name));
        st.fetch.push_back(std::move(cp));
      }
    }
    if (inst.computes) {
      auto pb = partialOff[w].find(static_cast<int>(i));
      if (pb != partialOff[w].end()) {
        l.outputOffset = pb->second;
        l.outputElement = elementOf(p.tensors[outT].resultStorage(!singleSlice(ne)));
      } else if (writesTileDirectly(ne, w, plan.tiles[w][outT]) && wp.tileOffset[outT] >= 0) {
        l.outputOffset = wp.tileOffset[outT];
        l.outputElement = elementOf(p.tensors[outT].storage);
      } else
        return stringError(
            fmt::format("node '{}', worker {}: no buffer for its result", node.name, w));
      const InstOp &op = node.table->op;
      l.ints = kernelInts(op, node.shapes, inst.ranges, l.inputBoxes);
      l.fast = readsInsideRegions(op, node.shapes, inst.ranges, l.inputBoxes);
    }
  }
  for (const OutputAssembly &a : ne.assemble) {
    ProgramStep &st = out.worker[a.owner].steps[i];
    const int64_t tileOff = out.worker[a.owner].tileOffset[outT];
    if (tileOff < 0)
      continue;
    st.tileOffset = tileOff;
    st.tileElements = boxElements(a.tile);
    st.initIdentity = a.slices.size() > 1;
    st.tileElement = elementOf(p.tensors[outT].storage);
    for (const auto &slice : a.slices)
      for (const Fetch &f : slice) {
        const OpInstance &src = ne.workers[f.from];
        RegionCopy cp;
        cp.from = f.from;
        auto pb = partialOff[f.from].find(static_cast<int>(i));
        if (pb != partialOff[f.from].end()) {
          cp.srcOffset = pb->second;
          cp.srcBox = src.produced;
          cp.srcElement = elementOf(p.tensors[outT].resultStorage(!singleSlice(ne)));
        } else {
          cp.srcOffset = out.worker[f.from].tileOffset[outT];
          cp.srcBox = plan.tiles[f.from][outT];
          cp.srcElement = st.tileElement;
          if (f.from == a.owner && !st.initIdentity)
            continue; // written in place by the owner's own kernel
        }
        cp.dstOffset = tileOff;
        cp.dstBox = a.tile;
        cp.box = f.box;
        cp.combine = st.initIdentity;
        cp.dstElement = st.tileElement;
        cp.elementBytes = p.tensors[outT].resultBytes(a.slices.size() > 1);
        st.assemble.push_back(std::move(cp));
      }
    st.assembles = st.initIdentity || !st.assemble.empty();
  }
  return llvm::Error::success();
}

void Builder::placeSyncs() {
  // Synchronise only around phases where a worker reads another's arena: before them (the
  // data is written) and after them (nobody overwrites it while it is read). Phases where
  // every worker reads only its own arena run on without waiting.
  const size_t n = plan.nodes.size();
  std::vector<bool> crossFetch(n, false), crossAssemble(n, false);
  for (size_t i = 0; i < n; ++i)
    for (unsigned w = 0; w < k; ++w) {
      for (const RegionCopy &cp : out.worker[w].steps[i].fetch)
        crossFetch[i] = crossFetch[i] || cp.from != w;
      for (const RegionCopy &cp : out.worker[w].steps[i].assemble)
        crossAssemble[i] = crossAssemble[i] || cp.from != w;
    }
  for (size_t i = 0; i < n; ++i)
    for (unsigned w = 0; w < k; ++w) {
      ProgramStep &st = out.worker[w].steps[i];
      st.syncAfterLaunch = crossFetch[i] || crossAssemble[i];
      // The last node's: the carries read other workers' updates.
      st.syncAfterAssembly = crossAssemble[i] || i + 1 == n || crossFetch[i + 1];
    }
}

bool Builder::updateInPlace(unsigned upd, unsigned tgt) {
  // The update must compute each element from its first input at that element alone (read
  // as the tensor it replaces nowhere else), its result read by nothing but the carry, and the old
  // value read by nothing after it: then each worker can write the new value over its own tile of
  // the old one (each element is read before it is written).
  size_t at = plan.nodes.size();
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    if (p.nodes[plan.nodes[i].node].output == upd)
      at = i;
  if (at == plan.nodes.size())
    return false;
  const ProblemNode &node = p.nodes[plan.nodes[at].node];
  const InstOp &op = node.table->op;
  if (node.inputs.empty() || node.inputs[0] != tgt)
    return false;
  for (size_t q = 0; q < node.inputs.size(); ++q)
    if (node.inputs[q] == tgt && !op.mapsInputElementwise(static_cast<unsigned>(q)))
      return false;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const ProblemNode &other = p.nodes[plan.nodes[i].node];
    for (unsigned in : other.inputs)
      if (in == upd || (in == tgt && i > at))
        return false;
  }
  for (unsigned w = 0; w < k; ++w) {
    const OpInstance &inst = plan.nodes[at].workers[w];
    const ProgramStep &st = out.worker[w].steps[at];
    const int64_t tgtOff = out.worker[w].tileOffset[tgt];
    const Box &tile = plan.tiles[w][tgt];
    if (boxElements(tile) == 0 && !inst.computes)
      continue;
    if (!inst.computes || st.assembles || tgtOff < 0 || !(inst.produced == tile) ||
        !(plan.tiles[w][upd] == tile))
      return false;
    for (size_t q = 0; q < node.inputs.size(); ++q)
      if (node.inputs[q] == tgt &&
          (st.launch.inputOffsets[q] != tgtOff || !(st.launch.inputBoxes[q] == tile)))
        return false; // fetched: another worker's tile would be read while it is written
  }
  for (unsigned w = 0; w < k; ++w)
    if (plan.nodes[at].workers[w].computes) {
      Launch &l = out.worker[w].steps[at].launch;
      l.outputOffset = out.worker[w].tileOffset[tgt];
      l.outputElement = elementOf(p.tensors[tgt].storage);
    }
  out.inPlace.push_back(upd);
  return true;
}

void Builder::buildCarries() {
  for (const ProblemNode &n : p.nodes)
    if (p.carriesState(n))
      out.carries.push_back({n.output, n.inputs[0]});
  for (auto [upd, tgt] : out.carries) {
    if (updateInPlace(upd, tgt))
      continue;
    for (unsigned w = 0; w < k; ++w) {
      const Box &want = plan.tiles[w][tgt];
      const int64_t dst = out.worker[w].tileOffset[tgt];
      if (boxElements(want) == 0 || dst < 0)
        continue;
      std::vector<unsigned> order = {w}; // its own copy first
      for (unsigned u = 0; u < k; ++u)
        if (u != w)
          order.push_back(u);
      for (unsigned u : order) {
        const int64_t src = out.worker[u].tileOffset[upd];
        if (src < 0)
          continue;
        Box part = intersectBoxes(plan.tiles[u][upd], want);
        if (boxElements(part) == 0)
          continue;
        RegionCopy cp;
        cp.from = u;
        cp.srcOffset = src;
        cp.srcBox = plan.tiles[u][upd];
        cp.dstOffset = dst;
        cp.dstBox = want;
        cp.box = part;
        cp.elementBytes = p.tensors[upd].elementBytes;
        cp.srcElement = elementOf(p.tensors[upd].storage);
        cp.dstElement = elementOf(p.tensors[tgt].storage);
        out.worker[w].carries.push_back(cp);
        if (boxContains(plan.tiles[u][upd], want))
          break;
      }
    }
  }
}

llvm::Error Builder::build() {
  out.workers = k;
  if (plan.tiles.size() != k)
    return stringError("the execution plan's tiles do not match its worker count");
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    ProgramTensor tensor;
    tensor.name = pt.name;
    tensor.shape = pt.shape;
    tensor.role = pt.role;
    tensor.hasProducer = pt.producer >= 0;
    tensor.element = elementOf(pt.storage);
    for (unsigned w = 0; w < k; ++w)
      tensor.tiles.push_back(plan.tiles[w][t]);
    out.tensors.push_back(std::move(tensor));
  }
  std::map<const StrategyTable *, unsigned> kernelOf;
  for (const NodeExec &ne : plan.nodes) {
    const ProblemNode &node = p.nodes[ne.node];
    auto [it, fresh] =
        kernelOf.emplace(node.table.get(), static_cast<unsigned>(out.kernels.size()));
    if (fresh)
      out.kernels.push_back({std::shared_ptr<const InstOp>(node.table, &node.table->op)});
    ProgramNode pn;
    pn.name = node.name;
    pn.op = node.table->op.name;
    pn.kernel = it->second;
    pn.shapes = node.shapes;
    pn.reducer = ne.reducer;
    pn.inputs = node.inputs;
    pn.output = node.output;
    out.nodes.push_back(std::move(pn));
  }
  if (llvm::Error e = placeBuffers())
    return e;
  for (unsigned w = 0; w < k; ++w)
    out.worker[w].steps.resize(plan.nodes.size());
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    if (llvm::Error e = buildStep(i))
      return e;
  placeSyncs();
  buildCarries();
  out.predictedBytes = plan.bytesMoved(p);
  return llvm::Error::success();
}

} // namespace

llvm::Expected<Program> buildProgram(const Problem &p, const ExecPlan &plan,
                                     const MemoryPlan &memory) {
  Program out;
  Builder b(p, plan, memory, out);
  if (llvm::Error e = b.build())
    return e;
  return out;
}

} // namespace tofu
