// The CPU engine: per-worker programs over arenas.
#include "runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "analysis/reducer.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "grammar/diagnostics.h"
#include "runtime/cpu_executor.h"
#include "runtime/library_kernels.h"

namespace tofu {
namespace {

/// A copy of `box` (absolute coordinates) between two buffers of one tensor: from worker
/// `from`'s buffer at `srcOff` holding `srcBox` into the running worker's buffer at `dstOff`
/// holding `dstBox`; with `combine`, reduced into the destination.
struct Copy {
  unsigned from = 0;
  int64_t srcOff = 0, dstOff = 0; ///< in floats
  Box srcBox, dstBox, box;
  bool combine = false;
  unsigned elementBytes = 4; ///< in the tensor's dtype, as the plan counts bytes
};

/// One op instance's kernel call, every argument fixed when the program is built.
struct Compute {
  std::shared_ptr<const LibraryKernel> lib; ///< set: a library call computes the share
  CpuKernelLibrary::Fn fn = nullptr; ///< null (and no lib): the interpreter
  std::vector<int64_t> ints;
  std::vector<int64_t> inOff; ///< per op input, the buffer it reads
  std::vector<const float *> in; ///< the same as pointers into the worker's arena
  std::vector<Box> inBox;     ///< per op input, the box that buffer holds
  int64_t outOff = 0;
  int64_t outElems = 0;
  int32_t fast = 0;
};

struct WorkerStep {
  bool barrierAfterCompute = true;  ///< (same for every worker of a node)
  bool barrierAfterAssembly = true;
  std::vector<Copy> fetch;
  bool computes = false;
  Compute compute;
  bool assembles = false;
  int64_t tileOff = 0;
  int64_t tileElems = 0;
  bool initIdentity = false; ///< several reduction slices combine into the tile
  std::vector<Copy> assemble;
};

/// Reusable barrier for the worker threads of one step: it spins briefly (a barrier between
/// two small nodes should cost a microsecond, not a context switch) and then yields the
/// core, so workers sharing cores (k above the core count) still make progress.
class Barrier {
public:
  /// `spins`: how long to spin before yielding (0 when the workers outnumber the cores, so
  /// a waiting worker gives its core to one that is still computing).
  Barrier(unsigned n, unsigned spins) : n_(n), spins_(spins) {}
  void wait() {
    const unsigned gen = generation_.load(std::memory_order_acquire);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      waiting_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (unsigned spin = 0; generation_.load(std::memory_order_acquire) == gen; ++spin) {
      if (spin < spins_)
        cpuRelax();
      else
        std::this_thread::yield();
    }
  }

private:
  static void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  const unsigned n_, spins_;
  std::atomic<unsigned> waiting_{0};
  std::atomic<unsigned> generation_{0};
};

/// Copies (or combines) `box` between two row-major buffers holding `srcBox` and `dstBox`,
/// a contiguous run per innermost row.
void copyBox(float *dst, const Box &dstBox, const float *src, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer) {
  const size_t r = box.size();
  if (boxElements(box) == 0 && r > 0)
    return;
  if (r == 0) {
    dst[0] = reducer ? reducerCombine(*reducer, dst[0], src[0]) : src[0];
    return;
  }
  std::vector<int64_t> ds(r, 1), ss(r, 1);
  for (size_t d = r - 1; d-- > 0;) {
    ds[d] = ds[d + 1] * dstBox[d + 1].size();
    ss[d] = ss[d + 1] * srcBox[d + 1].size();
  }
  const int64_t inner = box[r - 1].size();
  std::vector<int64_t> c(r, 0);
  for (;;) {
    int64_t doff = 0, soff = 0;
    for (size_t d = 0; d < r; ++d) {
      int64_t abs = box[d].lo + c[d];
      doff += (abs - dstBox[d].lo) * ds[d];
      soff += (abs - srcBox[d].lo) * ss[d];
    }
    if (reducer) {
      for (int64_t k = 0; k < inner; ++k)
        dst[doff + k] = reducerCombine(*reducer, dst[doff + k], src[soff + k]);
    } else {
      std::memcpy(dst + doff, src + soff, sizeof(float) * inner);
    }
    size_t d = r - 1;
    while (d-- > 0) {
      if (++c[d] < box[d].size())
        break;
      c[d] = 0;
    }
    if (d == static_cast<size_t>(-1))
      return;
  }
}

Box intersect(const Box &a, const Box &b) {
  Box out(a.size());
  for (size_t d = 0; d < a.size(); ++d)
    out[d] = {std::max(a[d].lo, b[d].lo), std::min(a[d].hi, b[d].hi)};
  return out;
}

bool contains(const Box &outer, const Box &inner) {
  for (size_t d = 0; d < outer.size(); ++d)
    if (inner[d].size() > 0 && (inner[d].lo < outer[d].lo || inner[d].hi > outer[d].hi))
      return false;
  return true;
}

} // namespace

struct CpuEngine::Impl {
  const Problem &p;
  const ExecPlan &plan;
  const MemoryPlan &memory;
  EngineOptions options;
  unsigned k = 1;
  int threads = 1;
  CpuKernelLibrary kernels;
  std::vector<float *> arenas;
  std::vector<int64_t> arenaFloats;
  /// Per worker, per tensor: the tile's offset (-1 when it holds none).
  std::vector<std::vector<int64_t>> tileOff;
  /// Per node in plan order, per worker.
  std::vector<std::vector<WorkerStep>> program;
  std::vector<std::pair<unsigned, unsigned>> carry;
  std::vector<std::vector<Copy>> carryCopies; ///< per worker
  std::vector<unsigned> inPlace; ///< updates written over the tensor they replace
  std::map<unsigned, Tensor> inputs;          ///< written again before every step
  unsigned interpreted = 0;
  unsigned library = 0;
  std::vector<int64_t> scratch; ///< per worker, the scratch space its library calls share
  std::vector<void *> scratchSpace;
  std::vector<NodeTime> profile; ///< per node in plan order, summed over steps (worker 0)

  Impl(const Problem &p, const ExecPlan &plan, const MemoryPlan &memory, EngineOptions o)
      : p(p), plan(plan), memory(memory), options(std::move(o)), k(plan.workers) {}

  ~Impl() {
    for (float *a : arenas)
      std::free(a);
    for (void *s : scratchSpace)
      std::free(s);
  }

  llvm::Error build();
  bool updateInPlace(unsigned upd, unsigned tgt);
  void runWorker(unsigned w, Barrier &barrier, std::vector<std::string> &errors,
                 std::atomic<int64_t> &moved, std::atomic<int64_t> &carried);
  llvm::Error interpret(unsigned w, const NodeExec &ne, const Compute &c);
};

llvm::Error CpuEngine::Impl::build() {
  threads = options.threadsPerWorker > 0
                ? options.threadsPerWorker
                : std::max(1, static_cast<int>(std::thread::hardware_concurrency() / k));
  // Arenas and tile offsets.
  tileOff.assign(k, std::vector<int64_t>(p.tensors.size(), -1));
  std::vector<std::map<std::pair<int, int>, int64_t>> fetchOff(k);
  std::vector<std::map<int, int64_t>> partialOff(k);
  for (unsigned w = 0; w < k; ++w) {
    const WorkerMemory &wm = memory.workers[w];
    int64_t floats = std::max<int64_t>(1, (wm.peak + 3) / 4);
    void *mem = std::aligned_alloc(64, static_cast<size_t>((floats * 4 + 63) / 64 * 64));
    if (!mem)
      return stringError(fmt::format("worker {}: cannot allocate its arena of {} bytes", w, wm.peak));
    arenas.push_back(static_cast<float *>(mem));
    arenaFloats.push_back(floats);
    for (const Buffer &b : wm.buffers) {
      if (b.offset % 4 != 0)
        return stringError("the memory plan places a float buffer at an unaligned offset");
      int64_t off = b.offset / 4;
      switch (b.kind) {
      case Buffer::Kind::Tile: tileOff[w][b.tensor] = off; break;
      case Buffer::Kind::Fetch: fetchOff[w][{b.node, b.input}] = off; break;
      case Buffer::Kind::Partial: partialOff[w][b.node] = off; break;
      }
    }
  }
  // Kernels: one per instantiation, compiled in one batch.
  std::vector<KernelSource> sources;
  std::map<const StrategyTable *, std::string> kernelOf;
  for (const NodeExec &ne : plan.nodes) {
    const StrategyTable *t = p.nodes[ne.node].table.get();
    if (kernelOf.count(t))
      continue;
    auto src = generateKernel(t->op, KernelDialect::Cpp);
    if (!src) {
      llvm::consumeError(src.takeError()); // the interpreter runs it
      kernelOf[t] = "";
      continue;
    }
    kernelOf[t] = src->name;
    sources.push_back(std::move(*src));
  }
  if (llvm::Error e = kernels.add(sources, options.compile))
    return e;
  // Programs.
  scratch.assign(k, 0);
  profile.assign(plan.nodes.size(), {});
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    profile[i].node = p.nodes[plan.nodes[i].node].name;
    profile[i].op = p.nodes[plan.nodes[i].node].table->op.name;
  }
  program.assign(plan.nodes.size(), std::vector<WorkerStep>(k));
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const NodeExec &ne = plan.nodes[i];
    const ProblemNode &node = p.nodes[ne.node];
    const InstOp &op = node.table->op;
    const unsigned out = node.output;
    for (unsigned w = 0; w < k; ++w) {
      const OpInstance &inst = ne.workers[w];
      WorkerStep &ws = program[i][w];
      Compute &c = ws.compute;
      ws.computes = inst.computes;
      for (size_t q = 0; q < inst.inputs.size(); ++q) {
        const InputFetch &f = inst.inputs[q];
        if (f.repeats >= 0) {
          c.inOff.push_back(c.inOff[f.repeats]);
          c.inBox.push_back(c.inBox[f.repeats]);
          continue;
        }
        auto fb = fetchOff[w].find({static_cast<int>(i), static_cast<int>(q)});
        if (fb == fetchOff[w].end()) { // read in place from the worker's own tile
          const Box &tile = plan.tiles[w][f.tensor];
          if (boxElements(f.region) > 0 && (tileOff[w][f.tensor] < 0 || !contains(tile, f.region)))
            return stringError(fmt::format("node '{}', worker {}: input {} is neither fetched nor "
                                           "in the worker's tile",
                                           node.name, w, q));
          c.inOff.push_back(std::max<int64_t>(0, tileOff[w][f.tensor]));
          c.inBox.push_back(tileOff[w][f.tensor] < 0 ? f.region : tile);
          continue;
        }
        c.inOff.push_back(fb->second);
        c.inBox.push_back(f.region);
        for (const Fetch &part : f.parts) {
          Copy cp;
          cp.from = part.from;
          cp.srcOff = tileOff[part.from][f.tensor];
          cp.srcBox = plan.tiles[part.from][f.tensor];
          cp.dstOff = fb->second;
          cp.dstBox = f.region;
          cp.box = part.box;
          cp.elementBytes = p.tensors[f.tensor].elementBytes;
          if (cp.srcOff < 0)
            return stringError(fmt::format("node '{}': worker {} fetches from worker {}, which "
                                           "holds no tile of '{}'",
                                           node.name, w, part.from, p.tensors[f.tensor].name));
          ws.fetch.push_back(std::move(cp));
        }
      }
      if (inst.computes) {
        auto pb = partialOff[w].find(static_cast<int>(i));
        if (pb != partialOff[w].end())
          c.outOff = pb->second;
        else if (writesTileDirectly(ne, w, plan.tiles[w][out]) && tileOff[w][out] >= 0)
          c.outOff = tileOff[w][out];
        else
          return stringError(fmt::format("node '{}', worker {}: no buffer for its result",
                                         node.name, w));
        for (int64_t off : c.inOff)
          c.in.push_back(arenas[w] + off);
        c.outElems = boxElements(inst.produced);
        c.ints = kernelInts(op, node.shapes, inst.ranges, c.inBox);
        c.fast = readsInsideRegions(op, node.shapes, inst.ranges, c.inBox) ? 1 : 0;
        const std::string &name = kernelOf[node.table.get()];
        c.fn = name.empty() ? nullptr : kernels.find(name);
        if (options.library && hasLibraryForm(op))
          c.lib = libraryKernel(op, node.shapes, inst.ranges, c.inBox);
        if (c.lib) {
          ++library;
          scratch[w] = std::max(scratch[w], static_cast<int64_t>(c.lib->scratchBytes()));
          if (w == 0)
            profile[i].kernel = c.lib->describe();
        } else if (w == 0) {
          profile[i].kernel = c.fn ? "generated" : "interpreter";
        }
        if (!c.lib && !c.fn)
          ++interpreted;
      }
    }
    for (const OutputAssembly &a : ne.assemble) {
      WorkerStep &ws = program[i][a.owner];
      if (tileOff[a.owner][out] < 0)
        continue;
      ws.tileOff = tileOff[a.owner][out];
      ws.tileElems = boxElements(a.tile);
      ws.initIdentity = a.slices.size() > 1;
      for (const auto &slice : a.slices)
        for (const Fetch &f : slice) {
          const OpInstance &src = ne.workers[f.from];
          Copy cp;
          cp.from = f.from;
          auto pb = partialOff[f.from].find(static_cast<int>(i));
          if (pb != partialOff[f.from].end()) {
            cp.srcOff = pb->second;
            cp.srcBox = src.produced;
          } else {
            cp.srcOff = tileOff[f.from][out];
            cp.srcBox = plan.tiles[f.from][out];
            if (f.from == a.owner && !ws.initIdentity)
              continue; // written in place by the owner's own kernel
          }
          cp.dstOff = ws.tileOff;
          cp.dstBox = a.tile;
          cp.box = f.box;
          cp.combine = ws.initIdentity;
          cp.elementBytes = p.tensors[out].elementBytes;
          ws.assemble.push_back(std::move(cp));
        }
      ws.assembles = ws.initIdentity || !ws.assemble.empty();
    }
  }
  for (unsigned w = 0; w < k; ++w) {
    scratchSpace.push_back(std::aligned_alloc(64, static_cast<size_t>((scratch[w] + 64) / 64 * 64)));
    if (!scratchSpace.back())
      return stringError(fmt::format("worker {}: cannot allocate {} bytes of scratch space", w,
                                     scratch[w]));
  }
  // Barriers only around phases where a worker reads another's arena: before them (the
  // data is written) and after them (nobody overwrites it while it is read). Phases where
  // every worker reads only its own arena run on without waiting.
  {
    const size_t n = program.size();
    std::vector<bool> crossFetch(n, false), crossAssemble(n, false);
    for (size_t i = 0; i < n; ++i)
      for (unsigned w = 0; w < k; ++w) {
        for (const Copy &cp : program[i][w].fetch)
          crossFetch[i] = crossFetch[i] || cp.from != w;
        for (const Copy &cp : program[i][w].assemble)
          crossAssemble[i] = crossAssemble[i] || cp.from != w;
      }
    for (size_t i = 0; i < n; ++i)
      for (unsigned w = 0; w < k; ++w) {
        program[i][w].barrierAfterCompute = crossFetch[i] || crossAssemble[i];
        // The last node's: the carries read other workers' updates.
        program[i][w].barrierAfterAssembly = crossAssemble[i] || i + 1 == n || crossFetch[i + 1];
      }
  }
  // Updates carried into the next step: an optimiser op's result replaces its first input.
  for (const ProblemNode &n : p.nodes) {
    const std::string &opName = n.table->op.def->name;
    if (opName == "sgd_update" || opName == "adam_update" || opName == "adam_m" ||
        opName == "adam_v")
      carry.push_back({n.output, n.inputs[0]});
  }
  carryCopies.assign(k, {});
  for (auto [upd, tgt] : carry) {
    if (updateInPlace(upd, tgt))
      continue;
    for (unsigned w = 0; w < k; ++w) {
      const Box &want = plan.tiles[w][tgt];
      if (boxElements(want) == 0 || tileOff[w][tgt] < 0)
        continue;
      std::vector<unsigned> order = {w};
      for (unsigned u = 0; u < k; ++u)
        if (u != w)
          order.push_back(u);
      for (unsigned u : order) {
        if (tileOff[u][upd] < 0)
          continue;
        Box part = intersect(plan.tiles[u][upd], want);
        if (boxElements(part) == 0)
          continue;
        Copy cp;
        cp.from = u;
        cp.srcOff = tileOff[u][upd];
        cp.srcBox = plan.tiles[u][upd];
        cp.dstOff = tileOff[w][tgt];
        cp.dstBox = want;
        cp.box = part;
        carryCopies[w].push_back(cp);
        if (contains(plan.tiles[u][upd], want))
          break;
      }
    }
  }
  return llvm::Error::success();
}

bool CpuEngine::Impl::updateInPlace(unsigned upd, unsigned tgt) {
  // The update must be element-wise over its first input, its result read by nothing but the
  // carry, and the old value read by nothing after it: then each worker can write the new
  // value over its own tile of the old one (each element is read before it is written).
  size_t at = plan.nodes.size();
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    if (p.nodes[plan.nodes[i].node].output == upd)
      at = i;
  if (at == plan.nodes.size())
    return false;
  const ProblemNode &node = p.nodes[plan.nodes[at].node];
  if (!node.table->op.isElementwise() || node.inputs.empty() || node.inputs[0] != tgt)
    return false;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const ProblemNode &other = p.nodes[plan.nodes[i].node];
    for (unsigned in : other.inputs)
      if (in == upd || (in == tgt && i > at))
        return false;
  }
  for (unsigned w = 0; w < k; ++w) {
    const OpInstance &inst = plan.nodes[at].workers[w];
    const WorkerStep &ws = program[at][w];
    const Box &tile = plan.tiles[w][tgt];
    if (boxElements(tile) == 0 && !inst.computes)
      continue;
    if (!inst.computes || ws.assembles || tileOff[w][tgt] < 0 || !(inst.produced == tile) ||
        !(plan.tiles[w][upd] == tile))
      return false;
    for (size_t q = 0; q < node.inputs.size(); ++q)
      if (node.inputs[q] == tgt &&
          (ws.compute.inOff[q] != tileOff[w][tgt] || !(ws.compute.inBox[q] == tile)))
        return false; // fetched: another worker's tile would be read while it is written
  }
  for (unsigned w = 0; w < k; ++w)
    if (plan.nodes[at].workers[w].computes)
      program[at][w].compute.outOff = tileOff[w][tgt];
  inPlace.push_back(upd);
  return true;
}

llvm::Error CpuEngine::Impl::interpret(unsigned w, const NodeExec &ne, const Compute &c) {
  const ProblemNode &node = p.nodes[ne.node];
  std::vector<Tensor> ins;
  for (size_t q = 0; q < node.inputs.size(); ++q) {
    const Box &held = c.inBox[q];
    Tensor t(node.shapes.inputs[q], std::numeric_limits<double>::quiet_NaN());
    Box all;
    for (int64_t e : t.shape)
      all.push_back({0, e});
    std::vector<float> tmp(std::max<int64_t>(1, t.size()), std::numeric_limits<float>::quiet_NaN());
    copyBox(tmp.data(), all, arenas[w] + c.inOff[q], held, intersect(held, all), nullptr);
    for (int64_t e = 0; e < t.size(); ++e)
      t.data[e] = tmp[e];
    ins.push_back(std::move(t));
  }
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : ins)
    ptrs.push_back(&t);
  auto r = evaluate(node.table->op, node.shapes, ptrs, ne.workers[w].ranges);
  if (!r)
    return r.takeError();
  float *dst = arenas[w] + c.outOff;
  for (int64_t e = 0; e < r->size(); ++e)
    dst[e] = static_cast<float>(r->data[e]);
  return llvm::Error::success();
}

void CpuEngine::Impl::runWorker(unsigned w, Barrier &barrier, std::vector<std::string> &errors,
                                std::atomic<int64_t> &moved, std::atomic<int64_t> &carried) {
  float *mine = arenas[w];
  int64_t bytes = 0;
  auto doCopy = [&](const Copy &cp) {
    copyBox(mine + cp.dstOff, cp.dstBox, arenas[cp.from] + cp.srcOff, cp.srcBox, cp.box,
            nullptr);
    if (cp.from != w)
      bytes += boxElements(cp.box) * cp.elementBytes;
  };
  const bool timing = options.profile && w == 0;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const NodeExec &ne = plan.nodes[i];
    const WorkerStep &ws = program[i][w];
    Clock::time_point t0 = timing ? Clock::now() : Clock::time_point();
    for (const Copy &cp : ws.fetch)
      doCopy(cp);
    if (timing)
      profile[i].copySeconds += since(t0), t0 = Clock::now();
    if (ws.computes && errors[w].empty()) {
      const Compute &c = ws.compute;
      if (c.lib) {
        c.lib->run(c.in.data(), mine + c.outOff, threads, scratchSpace[w]);
      } else if (c.fn) {
        TofuKernelArgs args{c.ints.data(), c.in.data(), mine + c.outOff, c.fast, threads};
        c.fn(&args);
      } else if (llvm::Error e = interpret(w, ne, c)) {
        errors[w] = fmt::format("node '{}': {}", p.nodes[ne.node].name, llvm::toString(std::move(e)));
      }
    }
    if (timing)
      profile[i].computeSeconds += since(t0), t0 = Clock::now();
    if (ws.barrierAfterCompute)
      barrier.wait(); // every partial result is written
    if (timing)
      profile[i].waitSeconds += since(t0), t0 = Clock::now();
    if (ws.assembles) {
      float *tile = mine + ws.tileOff;
      if (ws.initIdentity)
        std::fill(tile, tile + ws.tileElems, reducerIdentity<float>(ne.reducer));
      for (const Copy &cp : ws.assemble) {
        copyBox(tile, cp.dstBox, arenas[cp.from] + cp.srcOff, cp.srcBox, cp.box,
                cp.combine ? &ne.reducer : nullptr);
        if (cp.from != w)
          bytes += boxElements(cp.box) * cp.elementBytes;
      }
    }
    if (timing)
      profile[i].copySeconds += since(t0), t0 = Clock::now();
    if (ws.barrierAfterAssembly)
      barrier.wait(); // every tile of the output is assembled
    if (timing)
      profile[i].waitSeconds += since(t0);
  }
  moved += bytes;
  // Carry the updates into the tensors they replace. Updated values and the tiles they
  // replace are distinct live buffers, so workers copy concurrently once all have computed.
  int64_t carriedBytes = 0;
  for (const Copy &cp : carryCopies[w]) {
    copyBox(mine + cp.dstOff, cp.dstBox, arenas[cp.from] + cp.srcOff, cp.srcBox, cp.box, nullptr);
    if (cp.from != w)
      carriedBytes += boxElements(cp.box) * 4;
  }
  carried += carriedBytes;
}

CpuEngine::CpuEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuEngine::~CpuEngine() = default;

llvm::Expected<std::unique_ptr<CpuEngine>> CpuEngine::create(const Problem &p, const ExecPlan &plan,
                                                             const MemoryPlan &memory,
                                                             const EngineOptions &options) {
  auto impl = std::make_unique<Impl>(p, plan, memory, options);
  if (llvm::Error e = impl->build())
    return std::move(e);
  if (options.checking)
    for (unsigned w = 0; w < impl->k; ++w)
      std::fill(impl->arenas[w], impl->arenas[w] + impl->arenaFloats[w],
                std::numeric_limits<float>::quiet_NaN());
  return std::unique_ptr<CpuEngine>(new CpuEngine(std::move(impl)));
}

llvm::Error CpuEngine::set(unsigned tensor, const Tensor &value) {
  Impl &m = *impl_;
  if (tensor >= m.p.tensors.size() || value.shape != m.p.tensors[tensor].shape)
    return stringError("CpuEngine::set: no such tensor, or the value has the wrong shape");
  Box all;
  for (int64_t e : value.shape)
    all.push_back({0, e});
  std::vector<float> f(value.data.begin(), value.data.end());
  if (f.empty())
    f.push_back(0);
  for (unsigned w = 0; w < m.k; ++w) {
    const Box &tile = m.plan.tiles[w][tensor];
    if (m.tileOff[w][tensor] < 0 || boxElements(tile) == 0)
      continue;
    copyBox(m.arenas[w] + m.tileOff[w][tensor], tile, f.data(), all, tile, nullptr);
  }
  TensorRole role = m.p.tensors[tensor].role;
  if (role != TensorRole::Weight && role != TensorRole::OptimizerState)
    m.inputs[tensor] = value;
  return llvm::Error::success();
}

llvm::Expected<StepStats> CpuEngine::step() {
  Impl &m = *impl_;
  auto start = std::chrono::steady_clock::now();
  if (m.options.checking) // what a step did not write must not be read
    for (unsigned w = 0; w < m.k; ++w)
      for (const Buffer &b : m.memory.workers[w].buffers) {
        TensorRole role = m.p.tensors[b.tensor].role;
        if (b.kind == Buffer::Kind::Tile &&
            (role == TensorRole::Weight || role == TensorRole::OptimizerState))
          continue;
        std::fill(m.arenas[w] + b.offset / 4, m.arenas[w] + (b.offset + b.bytes) / 4,
                  std::numeric_limits<float>::quiet_NaN());
      }
  for (const auto &[t, v] : m.inputs)
    if (llvm::Error e = set(t, v))
      return std::move(e);
  Barrier barrier(m.k, m.k <= std::max(1u, std::thread::hardware_concurrency()) ? 2000 : 0);
  std::vector<std::string> errors(m.k);
  std::atomic<int64_t> moved{0}, carried{0};
  std::vector<std::thread> workers;
  for (unsigned w = 1; w < m.k; ++w)
    workers.emplace_back([&, w] { m.runWorker(w, barrier, errors, moved, carried); });
  m.runWorker(0, barrier, errors, moved, carried);
  for (std::thread &t : workers)
    t.join();
  for (unsigned w = 0; w < m.k; ++w)
    if (!errors[w].empty())
      return stringError(fmt::format("worker {}: {}", w, errors[w]));
  StepStats stats;
  stats.bytesMoved = moved;
  stats.carryBytes = carried;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Tensor CpuEngine::get(unsigned tensor) const {
  const Impl &m = *impl_;
  const std::vector<int64_t> &shape = m.p.tensors[tensor].shape;
  Tensor out(shape, std::numeric_limits<double>::quiet_NaN());
  Box all;
  for (int64_t e : shape)
    all.push_back({0, e});
  std::vector<float> f(std::max<int64_t>(1, out.size()), std::numeric_limits<float>::quiet_NaN());
  for (unsigned w = 0; w < m.k; ++w) {
    const Box &tile = m.plan.tiles[w][tensor];
    if (m.tileOff[w][tensor] < 0 || boxElements(tile) == 0)
      continue;
    copyBox(f.data(), all, m.arenas[w] + m.tileOff[w][tensor], tile, tile, nullptr);
  }
  for (int64_t e = 0; e < out.size(); ++e)
    out.data[e] = f[e];
  return out;
}

std::vector<int64_t> CpuEngine::arenaBytes() const {
  std::vector<int64_t> out;
  for (const WorkerMemory &w : impl_->memory.workers)
    out.push_back(w.peak);
  return out;
}

const KernelCompileStats &CpuEngine::compileStats() const { return impl_->kernels.stats(); }
unsigned CpuEngine::interpretedInstances() const { return impl_->interpreted; }
unsigned CpuEngine::libraryInstances() const { return impl_->library; }
std::vector<int64_t> CpuEngine::libraryScratchBytes() const { return impl_->scratch; }
const std::vector<NodeTime> &CpuEngine::profile() const { return impl_->profile; }
const std::vector<std::pair<unsigned, unsigned>> &CpuEngine::carries() const { return impl_->carry; }

/// A weight or optimiser-state tensor that a step reads (not the update it computes).
bool isTrainingState(const ProblemTensor &t) {
  return t.producer < 0 && (t.role == TensorRole::Weight || t.role == TensorRole::OptimizerState);
}

Checkpoint checkpointOf(const Problem &p, const CpuEngine &engine) {
  Checkpoint c;
  for (unsigned t = 0; t < p.tensors.size(); ++t)
    if (isTrainingState(p.tensors[t]))
      c.tensors.emplace(p.tensors[t].name, engine.get(t));
  return c;
}

llvm::Error restore(const Problem &p, CpuEngine &engine, const Checkpoint &c) {
  std::set<std::string> used;
  for (unsigned t = 0; t < p.tensors.size(); ++t) {
    const ProblemTensor &pt = p.tensors[t];
    if (!isTrainingState(pt))
      continue;
    auto it = c.tensors.find(pt.name);
    if (it == c.tensors.end())
      return stringError(fmt::format("the checkpoint has no tensor '{}' ({} of shape [{}])",
                                     pt.name, pt.role == TensorRole::Weight ? "a weight" : "optimiser state",
                                     fmt::join(pt.shape, ", ")));
    if (it->second.shape != pt.shape)
      return stringError(fmt::format("tensor '{}': the checkpoint's shape [{}] is not the graph's [{}]",
                                     pt.name, fmt::join(it->second.shape, ", "),
                                     fmt::join(pt.shape, ", ")));
    if (llvm::Error e = engine.set(t, it->second))
      return e;
    used.insert(pt.name);
  }
  for (const auto &[name, t] : c.tensors)
    if (!used.count(name))
      return stringError(fmt::format("the checkpoint holds '{}', which is not a weight or "
                                     "optimiser state of this graph (another model, or another "
                                     "optimiser?)",
                                     name));
  return llvm::Error::success();
}

std::map<unsigned, Tensor> trainingValues(const Problem &p, const std::string &loss, unsigned seed,
                                          double lr) {
  std::map<unsigned, Tensor> v = randomGraphInputs(p, seed, {-1.0, 1.0});
  std::mt19937 rng(seed);
  for (auto &[t, value] : v) {
    const ProblemTensor &pt = p.tensors[t];
    auto fill = [&](double x) { value.data.assign(value.data.size(), x); };
    if (pt.name == "d_" + loss)
      fill(1.0);
    else if (pt.name == "lr")
      fill(lr);
    else if (pt.name == "adam_b1")
      fill(0.9);
    else if (pt.name == "adam_b2")
      fill(0.999);
    else if (pt.name == "adam_c1")
      fill(1.0 / (1.0 - 0.9));
    else if (pt.name == "adam_c2")
      fill(1.0 / (1.0 - 0.999));
    else if (pt.name == "adam_eps")
      fill(1e-8);
    else if (pt.shape.empty() && pt.name.size() >= 3 &&
             pt.name.compare(pt.name.size() - 3, 3, "eps") == 0)
      fill(0.1); // a normalisation's epsilon (ln_eps, bn_eps); see trainingValues in engine.h
    else if (pt.role == TensorRole::OptimizerState)
      fill(0.0);
    else if (pt.role == TensorRole::Weight && pt.shape.size() >= 2) {
      int64_t fanIn = pt.shape.size() == 2 ? pt.shape[0] : value.size() / pt.shape[0];
      double bound = 1.0 / std::sqrt(double(std::max<int64_t>(1, fanIn)));
      std::uniform_real_distribution<double> u(-bound, bound);
      for (double &x : value.data)
        x = u(rng);
    }
  }
  return v;
}

} // namespace tofu
