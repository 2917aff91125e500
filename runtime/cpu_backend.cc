// The CPU backend: host arenas, oneDNN / generated C++ / interpreter launches, threads.
#include "runtime/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <thread>

#include "analysis/reducer.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/library_kernels.h"

namespace tofu {
namespace {

/// One launch made ready: its callee and its pointers into the worker's arena.
struct Prepared {
  std::shared_ptr<const LibraryKernel> lib; ///< set: a library call computes the share
  CpuKernelLibrary::Fn fn = nullptr;        ///< else the generated kernel; neither: interpreter
  std::vector<const float *> in;
  float *out = nullptr;
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(CpuBackendOptions o) : options_(std::move(o)) {}
  ~CpuBackend() override {
    if (!options_.allocateArena)
      for (float *a : arenas_)
        std::free(a);
    for (void *s : scratch_)
      std::free(s);
  }

  std::string name() const override { return "cpu"; }

  bool runsWorker(unsigned w) const override { return local_.empty() || local_[w]; }

  llvm::Error prepare(const Program &program) override {
    program_ = &program;
    const unsigned k = program.workers;
    if (!options_.workers.empty()) {
      local_.assign(k, false);
      for (unsigned w : options_.workers) {
        if (w >= k)
          return stringError(
              fmt::format("worker {} is not in the plan, which has {} workers", w, k));
        local_[w] = true;
      }
    }
    threads_ = options_.threadsPerWorker > 0
                   ? options_.threadsPerWorker
                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency() / k));
    const unsigned here =
        local_.empty() ? k : static_cast<unsigned>(std::count(local_.begin(), local_.end(), true));
    barrier_ = std::make_unique<SpinBarrier>(
        here, k <= std::max(1u, std::thread::hardware_concurrency()) ? 2000 : 0);
    arenas_.assign(k, nullptr);
    stats_.arenaBytes.assign(k, 0);
    for (unsigned w = 0; w < k; ++w) {
      if (!runsWorker(w))
        continue;
      const int64_t bytes = (std::max<int64_t>(64, program.worker[w].arenaBytes) + 63) / 64 * 64;
      stats_.arenaBytes[w] = bytes;
      if (options_.allocateArena) {
        auto mem = options_.allocateArena(w, bytes);
        if (!mem)
          return mem.takeError();
        arenas_[w] = *mem;
        continue;
      }
      void *mem = std::aligned_alloc(64, static_cast<size_t>(bytes));
      if (!mem)
        return stringError(fmt::format("worker {}: cannot allocate its arena of {} bytes", w,
                                       program.worker[w].arenaBytes));
      arenas_[w] = static_cast<float *>(mem);
    }
    // Kernels: one per instantiation the local workers launch, compiled in one batch.
    std::vector<bool> used(program.kernels.size(), false);
    for (unsigned w = 0; w < k; ++w)
      if (runsWorker(w))
        for (const ProgramStep &st : program.worker[w].steps)
          if (st.launches)
            used[st.launch.kernel] = true;
    std::vector<KernelSource> sources;
    std::vector<std::string> kernelName(program.kernels.size());
    std::vector<std::vector<std::vector<unsigned>>> temporaries(program.kernels.size());
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      if (!used[i])
        continue;
      auto src = generateKernel(*program.kernels[i].op, KernelDialect::Cpp);
      if (!src) {
        llvm::consumeError(src.takeError()); // the interpreter runs it
        continue;
      }
      kernelName[i] = src->name;
      temporaries[i] = src->temporaries;
      sources.push_back(std::move(*src));
    }
    if (llvm::Error e = kernels_.add(sources, options_.compile))
      return e;
    stats_.compile = kernels_.stats();
    stats_.extraBytes.assign(k, 0);
    prepared_.assign(k, {});
    for (unsigned w = 0; w < k; ++w) {
      if (!runsWorker(w))
        continue;
      const WorkerProgram &wp = program.worker[w];
      prepared_[w].resize(wp.steps.size());
      for (size_t s = 0; s < wp.steps.size(); ++s) {
        const ProgramStep &st = wp.steps[s];
        if (!st.launches)
          continue;
        const Launch &l = st.launch;
        const ProgramNode &node = program.nodes[st.node];
        const InstOp &op = *program.kernels[l.kernel].op;
        Prepared &pr = prepared_[w][s];
        for (int64_t off : l.inputOffsets)
          pr.in.push_back(arenas_[w] + off / 4);
        pr.out = arenas_[w] + l.outputOffset / 4;
        pr.fn = kernelName[l.kernel].empty() ? nullptr : kernels_.find(kernelName[l.kernel]);
        if (options_.library && hasLibraryForm(op))
          pr.lib = libraryKernel(op, node.shapes, l.ranges, l.inputBoxes);
        if (pr.lib) {
          ++stats_.library;
          stats_.extraBytes[w] =
              std::max(stats_.extraBytes[w], static_cast<int64_t>(pr.lib->scratchBytes()));
        } else if (pr.fn) {
          // The generated kernel's temporaries (codegen/schedule.h) share the same space.
          stats_.extraBytes[w] =
              std::max(stats_.extraBytes[w], kernelScratchBytes(temporaries[l.kernel], l.ranges));
        } else {
          ++stats_.interpreted;
        }
      }
    }
    scratch_.assign(k, nullptr);
    for (unsigned w = 0; w < k; ++w) {
      if (!runsWorker(w))
        continue;
      scratch_[w] =
          std::aligned_alloc(64, static_cast<size_t>((stats_.extraBytes[w] + 64) / 64 * 64));
      if (!scratch_[w])
        return stringError(fmt::format("worker {}: cannot allocate {} bytes of scratch space", w,
                                       stats_.extraBytes[w]));
    }
    return llvm::Error::success();
  }

  void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) override {
    copyBox(arenas_[w] + c.dstOffset / 4, c.dstBox, arenas_[c.from] + c.srcOffset / 4, c.srcBox,
            c.box, reducer);
  }

  void fill(unsigned w, int64_t offset, int64_t bytes, float value) override {
    std::fill(arenas_[w] + offset / 4, arenas_[w] + (offset + bytes) / 4, value);
  }

  llvm::Error launch(unsigned w, size_t step) override {
    const Prepared &pr = prepared_[w][step];
    const Launch &l = program_->worker[w].steps[step].launch;
    if (pr.lib) {
      pr.lib->run(pr.in.data(), pr.out, threads_, scratch_[w]);
    } else if (pr.fn) {
      TofuKernelArgs args{l.ints.data(),  pr.in.data(), pr.out,
                          l.fast ? 1 : 0, threads_,     static_cast<float *>(scratch_[w])};
      pr.fn(&args);
    } else {
      return interpret(w, step);
    }
    return llvm::Error::success();
  }

  void sync(unsigned) override { barrier_->wait(); }

  void write(unsigned w, int64_t offset, const Box &held, const float *host, const Box &hostBox,
             const Box &box) override {
    copyBox(arenas_[w] + offset / 4, held, host, hostBox, box, nullptr);
  }

  void read(unsigned w, int64_t offset, const Box &held, float *host, const Box &hostBox,
            const Box &box) const override {
    copyBox(host, hostBox, arenas_[w] + offset / 4, held, box, nullptr);
  }

  std::string describe(unsigned w, size_t step) const override {
    const Prepared &pr = prepared_[w][step];
    if (!program_->worker[w].steps[step].launches)
      return "";
    return pr.lib ? pr.lib->describe() : pr.fn ? "generated" : "interpreter";
  }

  BackendStats stats() const override { return stats_; }

private:
  /// The op's interpreter (double precision) over the share, for instantiations the
  /// generator cannot express.
  llvm::Error interpret(unsigned w, size_t step) {
    const ProgramStep &st = program_->worker[w].steps[step];
    const Launch &l = st.launch;
    const ProgramNode &node = program_->nodes[st.node];
    std::vector<Tensor> ins;
    for (size_t q = 0; q < node.shapes.inputs.size(); ++q) {
      const Box &held = l.inputBoxes[q];
      Tensor t(node.shapes.inputs[q], std::numeric_limits<double>::quiet_NaN());
      Box all = wholeBox(t.shape);
      std::vector<float> tmp(std::max<int64_t>(1, t.size()),
                             std::numeric_limits<float>::quiet_NaN());
      copyBox(tmp.data(), all, arenas_[w] + l.inputOffsets[q] / 4, held, intersectBoxes(held, all),
              nullptr);
      for (int64_t e = 0; e < t.size(); ++e)
        t.data[e] = tmp[e];
      ins.push_back(std::move(t));
    }
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : ins)
      ptrs.push_back(&t);
    auto r = evaluate(*program_->kernels[l.kernel].op, node.shapes, ptrs, l.ranges);
    if (!r)
      return r.takeError();
    float *dst = arenas_[w] + l.outputOffset / 4;
    for (int64_t e = 0; e < r->size(); ++e)
      dst[e] = static_cast<float>(r->data[e]);
    return llvm::Error::success();
  }

  CpuBackendOptions options_;
  const Program *program_ = nullptr;
  int threads_ = 1;
  std::unique_ptr<SpinBarrier> barrier_;
  CpuKernelLibrary kernels_;
  std::vector<bool> local_;     ///< per worker, whether it runs here (empty: all do)
  std::vector<float *> arenas_; ///< per worker (null for those that run elsewhere)
  /// Per worker, the scratch space its library calls and generated kernels' temporaries
  /// share (one launch at a time).
  std::vector<void *> scratch_;
  std::vector<std::vector<Prepared>> prepared_; ///< per worker, per step
  BackendStats stats_;
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend(const CpuBackendOptions &options) {
  return std::make_unique<CpuBackend>(options);
}

} // namespace tofu
