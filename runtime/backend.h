// What the engine asks of the machine that holds the workers' arenas and runs their kernels.
// The engine (runtime/engine.h) walks each worker's program (codegen/program.h) and turns
// its steps into these operations; the CPU backend runs them on host memory with threads,
// a GPU backend enqueues them on one stream per worker. Every operation names the worker it
// runs for; one worker's operations are issued in program order from one thread, and
// different workers' from different threads, concurrently.
#ifndef TOFU_RUNTIME_BACKEND_H
#define TOFU_RUNTIME_BACKEND_H

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codegen/program.h"
#include "runtime/kernel_stats.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace tofu {

/// Figures a backend reports after `prepare`.
struct BackendStats {
  KernelCompileStats compile;
  unsigned interpreted = 0; ///< launches run on the interpreter (no kernel could be made)
  unsigned library = 0;     ///< launches run as a library call (oneDNN, cuBLAS, cuDNN)
  /// Launches with a library form that the library itself declined at preparation (cuDNN
  /// with no algorithm for the views within the workspace limit): they run generated.
  unsigned libraryDeclined = 0;
  /// Per worker, memory the backend needs beside its arena (library scratch space, the
  /// generated kernels' temporaries, a transport's staging buffer).
  std::vector<int64_t> extraBytes;
  /// Per worker, the arena this process allocated for it (0 where it runs elsewhere).
  std::vector<int64_t> arenaBytes;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// Allocates each worker's arena (WorkerProgram::arenaBytes), once, and prepares every
  /// launch of every worker: kernels compiled or loaded, library calls set up. The program
  /// must outlive the backend.
  virtual llvm::Error prepare(const Program &program) = 0;
  /// Copies `c.box` from worker `c.from`'s arena into worker `w`'s; with `reducer`,
  /// combines it into what is there.
  virtual void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) = 0;
  /// Sets the elements of `element` in `bytes` bytes at `offset` of worker `w`'s arena to
  /// `value` (rounded to bfloat16 for a bfloat16 buffer).
  virtual void fill(unsigned w, int64_t offset, int64_t bytes, float value,
                    loops::Element element = loops::Element::F32) = 0;
  /// Runs the kernel of worker `w`'s step `step`.
  virtual llvm::Error launch(unsigned w, size_t step) = 0;
  /// Returns when every worker has called `sync` as often as `w` (all operations issued
  /// before it, by every worker, are complete or ordered before any issued after it).
  virtual void sync(unsigned w) = 0;
  /// Host data in and out: `box` of a tensor between a host buffer of float32 holding
  /// `hostBox` and worker `w`'s buffer of `element` at `offset` holding `held` (converted on
  /// the way). Called between steps only.
  virtual void write(unsigned w, int64_t offset, const Box &held, const float *host,
                     const Box &hostBox, const Box &box,
                     loops::Element element = loops::Element::F32) = 0;
  virtual void read(unsigned w, int64_t offset, const Box &held, float *host, const Box &hostBox,
                    const Box &box, loops::Element element = loops::Element::F32) const = 0;
  /// Whether it holds and computes tensors stored in bfloat16 (Program::hasBfloat16).
  virtual bool supportsBfloat16() const { return false; }
  /// What computes worker `w`'s step `step` ("generated", the library call, "interpreter").
  virtual std::string describe(unsigned w, size_t step) const = 0;
  virtual BackendStats stats() const = 0;
  /// Returns when everything worker `w` issued has run; the first error any of it met
  /// (an asynchronous backend reports failed copies and kernels here).
  virtual llvm::Error finish(unsigned w) { return llvm::Error::success(); }
  /// Whether this process runs worker `w`. A backend of one process per worker (MPI) runs
  /// one; the engine walks only the programs of the workers its backend runs, and copies
  /// from the others cross the backend's transport.
  virtual bool runsWorker(unsigned w) const { return true; }

  /// Timing on the device, for backends whose operations run asynchronously (host clocks
  /// would time the issuing): the engine marks each phase boundary of each step and, after
  /// finish, collects the seconds spent per step in copies, kernels and waiting.
  enum class Phase { Fetch, Launch, Wait, Assemble, WaitAssembled, End, Carry };
  /// Called as worker `w` enters the fetch and the assembly of step `step` and, with
  /// `step` = the number of steps, the carries, whether or not it copies anything there:
  /// a transport of matched sends posts then what the other workers fetch from `w`.
  virtual void enter(unsigned w, size_t step, Phase phase) {}
  virtual bool timesOnDevice() const { return false; }
  virtual void mark(unsigned w, size_t step, Phase phase) {}
  /// Per step of worker `w`: {copy, kernel, idle} seconds of the step just finished.
  virtual std::vector<std::array<double, 3>> deviceTimes(unsigned w) { return {}; }
};

/// A backend that hands every operation to another: a transport between processes (MPI,
/// NCCL) runs its worker on a compute backend and overrides what crosses processes.
class ForwardingBackend : public Backend {
public:
  void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) override {
    inner_->copy(w, c, reducer);
  }
  void fill(unsigned w, int64_t offset, int64_t bytes, float value,
            loops::Element element = loops::Element::F32) override {
    inner_->fill(w, offset, bytes, value, element);
  }
  llvm::Error launch(unsigned w, size_t step) override { return inner_->launch(w, step); }
  void sync(unsigned w) override { inner_->sync(w); }
  void write(unsigned w, int64_t offset, const Box &held, const float *host, const Box &hostBox,
             const Box &box, loops::Element element = loops::Element::F32) override {
    inner_->write(w, offset, held, host, hostBox, box, element);
  }
  void read(unsigned w, int64_t offset, const Box &held, float *host, const Box &hostBox,
            const Box &box, loops::Element element = loops::Element::F32) const override {
    inner_->read(w, offset, held, host, hostBox, box, element);
  }
  std::string describe(unsigned w, size_t step) const override { return inner_->describe(w, step); }
  BackendStats stats() const override { return inner_->stats(); }
  llvm::Error finish(unsigned w) override { return inner_->finish(w); }
  bool runsWorker(unsigned w) const override { return inner_->runsWorker(w); }
  void enter(unsigned w, size_t step, Phase phase) override { inner_->enter(w, step, phase); }
  bool timesOnDevice() const override { return inner_->timesOnDevice(); }
  void mark(unsigned w, size_t step, Phase phase) override { inner_->mark(w, step, phase); }
  std::vector<std::array<double, 3>> deviceTimes(unsigned w) override {
    return inner_->deviceTimes(w);
  }

protected:
  std::unique_ptr<Backend> inner_; ///< made by the subclass's prepare
};

// One process per worker: regions cross processes in phases that every worker passes in the
// same order — the fetch of step i is phase 2i, its assembly 2i + 1, the carries 2n (n
// steps) — and both sides of a transfer list it under the same phase, in the receiver's
// program order, so matched sends and receives pair up.

/// The phase of `step`'s `phase` (Fetch, Assemble or Carry) in a program of `steps` steps.
size_t crossingPhase(size_t step, Backend::Phase phase, size_t steps);
/// Calls `fn(phase, to, copy)` for every copy another worker `to` makes from worker `me`'s
/// arena, each receiver's in its program order; the first error stops it. Errors when the
/// workers' programs have different numbers of steps.
llvm::Error forEachCopyFrom(
    const Program &program, unsigned me,
    llvm::function_ref<llvm::Error(size_t phase, unsigned to, const RegionCopy &copy)> fn);
/// Calls `fn(phase, copy, reducer)` for every copy worker `me` makes from another worker's
/// arena, in program order (`reducer`: the node's, where the copy combines a partial
/// result); the first error stops it.
llvm::Error forEachCopyInto(const Program &program, unsigned me,
                            llvm::function_ref<llvm::Error(size_t phase, const RegionCopy &copy,
                                                           const ir::Reducer *reducer)>
                                fn);

/// A reusable barrier for the threads that issue the workers' operations: it spins briefly
/// (a barrier between two small nodes should cost a microsecond, not a context switch) and
/// then yields the core, so threads sharing cores still make progress.
class SpinBarrier {
public:
  /// `spins`: how long to spin before yielding (0 when the threads outnumber the cores, so
  /// a waiting thread gives its core to one that is still working).
  SpinBarrier(unsigned n, unsigned spins) : n_(n), spins_(spins) {}
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

/// Copies (or combines with `reducer`) `box` between two row-major float buffers holding
/// `dstBox` and `srcBox` (absolute coordinates), a contiguous run per innermost row.
void copyBox(float *dst, const Box &dstBox, const float *src, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer);
/// The same between buffers of the given element types: a bfloat16 source is widened
/// exactly; a bfloat16 destination is rounded to nearest even once per element, after the
/// combination (which reads its value widened).
void copyBox(void *dst, loops::Element dstElement, const Box &dstBox, const void *src,
             loops::Element srcElement, const Box &srcBox, const Box &box,
             const ir::Reducer *reducer);

} // namespace tofu

#endif // TOFU_RUNTIME_BACKEND_H
