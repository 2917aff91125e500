// The engine: each worker's program walked on its own thread, on a backend.
#include "runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "analysis/reducer.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "grammar/diagnostics.h"

namespace tofu {
namespace {

/// A weight or optimiser-state tensor that a step reads (not the update it computes).
bool isTrainingState(const ProgramTensor &t) {
  return !t.hasProducer && (t.role == TensorRole::Weight || t.role == TensorRole::OptimizerState);
}

/// What checking runs fill unwritten buffers with: a float32 NaN whose halves are each a
/// bfloat16 NaN (0x7fc0), so that a buffer of either type reads as NaN wherever it was not
/// written.
float poison() {
  const uint32_t bits = 0x7fc07fc0u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

} // namespace

struct Engine::Impl {
  Program program;
  std::unique_ptr<Backend> backend;
  EngineOptions options;
  /// The local tiles of inputs, by (tensor, worker): written again before every step.
  std::map<std::pair<unsigned, unsigned>, std::vector<float>> inputs;
  std::vector<std::vector<NodeTime>> profile; ///< per worker, per node, summed over steps

  // The first local worker runs on the caller's thread; the others are threads that live as
  // long as the engine, so per-thread state (OpenMP's team, oneDNN's caches) is made once,
  // not every step.
  std::vector<unsigned> local; ///< the workers the backend runs in this process
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable wake, done;
  uint64_t generation = 0; ///< bumped to start a step
  unsigned running = 0;    ///< local workers but the first still in the current step
  bool quit = false;
  std::vector<std::string> errors;
  std::atomic<int64_t> moved{0}, carried{0};

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      quit = true;
    }
    wake.notify_all();
    for (std::thread &t : threads)
      t.join();
  }
  void startThreads();
  void runWorker(unsigned w);
};

void Engine::Impl::startThreads() {
  errors.assign(program.workers, "");
  for (size_t i = 1; i < local.size(); ++i)
    threads.emplace_back([this, w = local[i]] {
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mutex);
          wake.wait(lock, [&] { return quit || generation != seen; });
          if (quit)
            return;
          seen = generation;
        }
        runWorker(w);
        std::lock_guard<std::mutex> lock(mutex);
        if (--running == 0)
          done.notify_one();
      }
    });
}

void Engine::Impl::runWorker(unsigned w) {
  Backend &b = *backend;
  const WorkerProgram &wp = program.worker[w];
  int64_t bytes = 0;
  // Host clocks time a synchronous backend; an asynchronous one marks phase boundaries on
  // the device and reports the times once the step has run.
  const bool onDevice = options.profile && b.timesOnDevice();
  const bool timing = options.profile && !onDevice;
  using Clock = std::chrono::steady_clock;
  using Phase = Backend::Phase;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto mark = [&](size_t i, Phase phase) {
    if (onDevice)
      b.mark(w, i, phase);
  };
  for (size_t i = 0; i < wp.steps.size(); ++i) {
    const ProgramStep &st = wp.steps[i];
    Clock::time_point t0 = timing ? Clock::now() : Clock::time_point();
    mark(i, Phase::Fetch);
    b.enter(w, i, Phase::Fetch);
    for (const RegionCopy &cp : st.fetch) {
      b.copy(w, cp, nullptr);
      if (cp.from != w)
        bytes += boxElements(cp.box) * cp.elementBytes;
    }
    if (timing)
      profile[w][i].copySeconds += since(t0), t0 = Clock::now();
    mark(i, Phase::Launch);
    if (st.launches && errors[w].empty())
      if (llvm::Error e = b.launch(w, i))
        errors[w] =
            fmt::format("node '{}': {}", program.nodes[st.node].name, llvm::toString(std::move(e)));
    if (timing)
      profile[w][i].computeSeconds += since(t0), t0 = Clock::now();
    mark(i, Phase::Wait);
    if (st.syncAfterLaunch)
      b.sync(w); // every partial result is written
    if (timing)
      profile[w][i].waitSeconds += since(t0), t0 = Clock::now();
    mark(i, Phase::Assemble);
    b.enter(w, i, Phase::Assemble);
    if (st.assembles) {
      const ir::Reducer &reducer = program.nodes[st.node].reducer;
      if (st.initIdentity)
        b.fill(w, st.tileOffset, st.tileElements * elementBytes(st.tileElement),
               reducerIdentity<float>(reducer), st.tileElement);
      for (const RegionCopy &cp : st.assemble) {
        b.copy(w, cp, cp.combine ? &reducer : nullptr);
        if (cp.from != w)
          bytes += boxElements(cp.box) * cp.elementBytes;
      }
    }
    if (timing)
      profile[w][i].copySeconds += since(t0), t0 = Clock::now();
    mark(i, Phase::WaitAssembled);
    if (st.syncAfterAssembly)
      b.sync(w); // every tile of the output is assembled
    if (timing)
      profile[w][i].waitSeconds += since(t0);
    mark(i, Phase::End);
  }
  moved += bytes;
  // Carry the updates into the tensors they replace. Updated values and the tiles they
  // replace are distinct live buffers, so workers copy concurrently once all have computed.
  int64_t carriedBytes = 0;
  b.enter(w, wp.steps.size(), Phase::Carry);
  for (const RegionCopy &cp : wp.carries) {
    b.copy(w, cp, nullptr);
    if (cp.from != w)
      carriedBytes += boxElements(cp.box) * cp.elementBytes;
  }
  carried += carriedBytes;
  if (llvm::Error e = b.finish(w)) {
    if (errors[w].empty())
      errors[w] = llvm::toString(std::move(e));
    else
      llvm::consumeError(std::move(e));
  }
  if (onDevice) {
    const std::vector<std::array<double, 3>> t = b.deviceTimes(w);
    for (size_t i = 0; i < t.size() && i < profile[w].size(); ++i) {
      profile[w][i].copySeconds += t[i][0];
      profile[w][i].computeSeconds += t[i][1];
      profile[w][i].waitSeconds += t[i][2];
    }
  }
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

llvm::Expected<std::unique_ptr<Engine>>
Engine::create(Program program, std::unique_ptr<Backend> backend, const EngineOptions &options) {
  auto impl = std::make_unique<Impl>();
  impl->program = std::move(program);
  impl->backend = std::move(backend);
  impl->options = options;
  const Program &prog = impl->program;
  if (prog.hasBfloat16() && !impl->backend->supportsBfloat16())
    return stringError(fmt::format("the {} backend does not run plans that store tensors in "
                                   "bfloat16 ({} bf16); the cpu, mpi, cuda and nccl "
                                   "backends do",
                                   impl->backend->name(), options.names("precision")));
  if (llvm::Error e = impl->backend->prepare(prog))
    return e;
  for (unsigned w = 0; w < prog.workers; ++w)
    if (impl->backend->runsWorker(w))
      impl->local.push_back(w);
  if (impl->local.empty())
    return stringError("the backend runs none of the plan's workers");
  impl->profile.assign(prog.workers, {});
  for (unsigned w : impl->local)
    for (size_t i = 0; i < prog.worker[w].steps.size(); ++i) {
      const ProgramNode &n = prog.nodes[prog.worker[w].steps[i].node];
      impl->profile[w].push_back({n.name, n.op, impl->backend->describe(w, i), 0, 0, 0});
    }
  impl->startThreads();
  if (options.checking)
    for (unsigned w : impl->local)
      impl->backend->fill(w, 0, prog.worker[w].arenaBytes / 4 * 4, poison());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

llvm::Error Engine::set(unsigned tensor, const Tensor &value) {
  Impl &m = *impl_;
  if (tensor >= m.program.tensors.size() || value.shape != m.program.tensors[tensor].shape)
    return stringError("Engine::set: no such tensor, or the value has the wrong shape");
  const Box all = wholeBox(value.shape);
  std::vector<float> f(value.data.begin(), value.data.end());
  if (f.empty())
    f.push_back(0);
  setTiles(tensor,
           [&](const Box &tile, float *out) { copyBox(out, tile, f.data(), all, tile, nullptr); });
  return llvm::Error::success();
}

void Engine::setTiles(unsigned tensor, const std::function<void(const Box &, float *)> &fill) {
  Impl &m = *impl_;
  const ProgramTensor &pt = m.program.tensors[tensor];
  const bool input = pt.role != TensorRole::Weight && pt.role != TensorRole::OptimizerState;
  std::vector<float> buf;
  for (unsigned w : m.local) {
    if (!holdsTile(tensor, w))
      continue;
    const Box &tile = pt.tiles[w];
    std::vector<float> &values = input ? m.inputs[{tensor, w}] : buf;
    values.assign(boxElements(tile), 0.0f);
    fill(tile, values.data());
    m.backend->write(w, m.program.worker[w].tileOffset[tensor], tile, values.data(), tile, tile,
                     pt.element);
  }
}

llvm::Expected<StepStats> Engine::step() {
  Impl &m = *impl_;
  const unsigned k = m.program.workers;
  auto start = std::chrono::steady_clock::now();
  if (m.options.checking) // what a step did not write must not be read
    for (unsigned w : m.local)
      for (const BufferSpan &b : m.program.worker[w].scratchBuffers)
        m.backend->fill(w, b.offset, b.bytes, poison());
  for (const auto &[at, values] : m.inputs) {
    const auto [t, w] = at;
    const ProgramTensor &pt = m.program.tensors[t];
    const Box &tile = pt.tiles[w];
    m.backend->write(w, m.program.worker[w].tileOffset[t], tile, values.data(), tile, tile,
                     pt.element);
  }
  m.errors.assign(k, "");
  m.moved = 0;
  m.carried = 0;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.running = static_cast<unsigned>(m.local.size()) - 1;
    ++m.generation;
  }
  m.wake.notify_all();
  m.runWorker(m.local.front());
  {
    std::unique_lock<std::mutex> lock(m.mutex);
    m.done.wait(lock, [&] { return m.running == 0; });
  }
  for (unsigned w = 0; w < k; ++w)
    if (!m.errors[w].empty())
      return stringError(fmt::format("worker {}: {}", w, m.errors[w]));
  StepStats stats;
  stats.bytesMoved = m.moved;
  stats.carryBytes = m.carried;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Tensor Engine::get(unsigned tensor) const {
  const Impl &m = *impl_;
  const ProgramTensor &pt = m.program.tensors[tensor];
  Tensor out(pt.shape, std::numeric_limits<double>::quiet_NaN());
  Box all = wholeBox(pt.shape);
  std::vector<float> f(std::max<int64_t>(1, out.size()), std::numeric_limits<float>::quiet_NaN());
  for (unsigned w : m.local)
    if (holdsTile(tensor, w))
      m.backend->read(w, m.program.worker[w].tileOffset[tensor], pt.tiles[w], f.data(), all,
                      pt.tiles[w], pt.element);
  for (int64_t e = 0; e < out.size(); ++e)
    out.data[e] = f[e];
  return out;
}

bool Engine::holdsTile(unsigned tensor, unsigned w) const {
  const Program &p = impl_->program;
  return p.worker[w].tileOffset[tensor] >= 0 && boxElements(p.tensors[tensor].tiles[w]) > 0;
}

std::vector<float> Engine::readTile(unsigned tensor, unsigned w) const {
  const Impl &m = *impl_;
  const ProgramTensor &pt = m.program.tensors[tensor];
  const Box &tile = pt.tiles[w];
  std::vector<float> out(boxElements(tile));
  if (holdsTile(tensor, w))
    m.backend->read(w, m.program.worker[w].tileOffset[tensor], tile, out.data(), tile, tile,
                    pt.element);
  return out;
}

void Engine::writeTile(unsigned tensor, unsigned w, const float *values) {
  Impl &m = *impl_;
  const ProgramTensor &pt = m.program.tensors[tensor];
  const Box &tile = pt.tiles[w];
  if (holdsTile(tensor, w))
    m.backend->write(w, m.program.worker[w].tileOffset[tensor], tile, values, tile, tile,
                     pt.element);
}

std::vector<int64_t> Engine::arenaBytes() const {
  std::vector<int64_t> out;
  for (const WorkerProgram &w : impl_->program.worker)
    out.push_back(w.arenaBytes);
  return out;
}

const Program &Engine::program() const { return impl_->program; }
const std::vector<unsigned> &Engine::localWorkers() const { return impl_->local; }
const Backend &Engine::backend() const { return *impl_->backend; }
BackendStats Engine::backendStats() const { return impl_->backend->stats(); }
const std::vector<std::vector<NodeTime>> &Engine::profile() const { return impl_->profile; }
const std::vector<std::pair<unsigned, unsigned>> &Engine::carries() const {
  return impl_->program.carries;
}

Checkpoint checkpointOf(const Engine &engine) {
  Checkpoint c;
  const Program &prog = engine.program();
  for (unsigned t = 0; t < prog.tensors.size(); ++t)
    if (isTrainingState(prog.tensors[t]))
      c.tensors.emplace(prog.tensors[t].name, engine.get(t));
  return c;
}

std::vector<CheckpointTile> trainingTiles(const Engine &engine) {
  std::vector<CheckpointTile> out;
  const Program &prog = engine.program();
  for (unsigned t = 0; t < prog.tensors.size(); ++t) {
    const ProgramTensor &pt = prog.tensors[t];
    if (!isTrainingState(pt))
      continue;
    for (unsigned w : engine.localWorkers()) {
      if (!engine.holdsTile(t, w))
        continue;
      bool replica = false; // an earlier worker holds the same tile
      for (unsigned o = 0; o < w && !replica; ++o)
        replica = engine.holdsTile(t, o) && pt.tiles[o] == pt.tiles[w];
      if (!replica)
        out.push_back({pt.name, pt.shape, pt.tiles[w], engine.readTile(t, w)});
    }
  }
  return out;
}

llvm::Error restore(Engine &engine, const CheckpointReader &c, bool forwardOnly,
                    const SettingNames &names) {
  std::set<std::string> used;
  const Program &prog = engine.program();
  std::vector<float> buf;
  for (unsigned t = 0; t < prog.tensors.size(); ++t) {
    const ProgramTensor &pt = prog.tensors[t];
    if (!isTrainingState(pt))
      continue;
    auto it = c.shapes().find(pt.name);
    if (it == c.shapes().end())
      return stringError(fmt::format(
          "the checkpoint has no tensor '{}' ({} of shape [{}]){}", pt.name,
          pt.role == TensorRole::Weight ? "a weight" : "state", fmt::join(pt.shape, ", "),
          pt.role == TensorRole::Weight
              ? ""
              : ": an optimiser's, or a batch norm's running statistic, which checkpoints written "
                "before tofu-run carried them lack (" +
                    names("eval-mode") + " batch normalises with the batch's own)"));
    if (it->second != pt.shape)
      return stringError(
          fmt::format("tensor '{}': the checkpoint's shape [{}] is not the graph's [{}]", pt.name,
                      fmt::join(it->second, ", "), fmt::join(pt.shape, ", ")));
    for (unsigned w : engine.localWorkers()) {
      if (!engine.holdsTile(t, w))
        continue;
      buf.assign(boxElements(pt.tiles[w]), 0.0f);
      if (llvm::Error e = c.read(pt.name, pt.tiles[w], buf.data()))
        return e;
      engine.writeTile(t, w, buf.data());
    }
    used.insert(pt.name);
  }
  if (forwardOnly)
    return llvm::Error::success();
  // A tensor of the graph that it does not train (a weight frozen in this run, trained in
  // the one that saved), or that tensor's optimiser state ("adam_m_W"): said as that, not as
  // another model's.
  for (const auto &[name, shape] : c.shapes()) {
    if (used.count(name))
      continue;
    for (const ProgramTensor &pt : prog.tensors) {
      const std::string &w = pt.name;
      const bool stateOf = name.size() > w.size() + 1 &&
                           name.compare(name.size() - w.size(), w.size(), w) == 0 &&
                           name[name.size() - w.size() - 1] == '_';
      if (!isTrainingState(pt) && (name == w || stateOf))
        return stringError(fmt::format(
            "the checkpoint holds '{}' as a trained tensor{}, which this graph holds fixed "
            "(frozen or a constant): the run that saved it trained it (other {} or {} "
            "settings?)",
            w, name == w ? "" : " ('" + name + "' is its optimiser state)", names("frozen"),
            names("trainable")));
    }
  }
  for (const auto &[name, shape] : c.shapes()) {
    if (used.count(name))
      continue;
    return stringError(fmt::format("the checkpoint holds '{}', which is not a weight or "
                                   "optimiser state of this graph (another model, or another "
                                   "optimiser?)",
                                   name));
  }
  return llvm::Error::success();
}

} // namespace tofu
