// The CPU backend: host arenas, oneDNN / generated C++ / interpreter launches, threads.
#include "runtime/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <thread>

#include "analysis/reducer.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/library_kernels.h"
#include "support/bf16.h"

namespace tofu {
namespace {

/// One launch made ready: its callee and its pointers into the worker's arena.
struct Prepared {
  std::shared_ptr<const LibraryKernel> lib; ///< set: a library call computes the share
  CpuKernelLibrary::Fn fn = nullptr;        ///< else the generated kernel; neither: interpreter
  std::vector<const float *> in;
  float *out = nullptr;
  /// A library call on bfloat16 buffers (it takes float32 ones): per input, the elements to
  /// widen into float32 scratch before it (0: the input is float32 and read in place), and
  /// the output's elements to round from float32 scratch after it (0: written in place).
  std::vector<int64_t> widen;
  int64_t narrow = 0;
  /// Where in the worker's scratch space those float32 copies start (after the call's own
  /// scratch), or -1 where the call converts nothing.
  int64_t convertAt = -1;
};

/// The bytes of `n` floats, rounded up to whole 64-byte lines.
int64_t roundedFloats(int64_t n) { return (n * 4 + 63) / 64 * 64; }

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
  bool supportsBfloat16() const override { return true; }

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
    // Kernels: one per instantiation the local workers launch and the element types of its
    // buffers there (a bf16 plan launches an op on bfloat16 data, and on float32 partial
    // results), compiled in one batch.
    using Typed = std::pair<unsigned, std::string>; // kernel, KernelTypes::describe
    auto typesOf = [](const Launch &l) { return KernelTypes{l.inputElements, l.outputElement}; };
    auto typedKey = [&](const Launch &l) {
      return Typed{l.kernel, typesOf(l).describe(l.inputOffsets.size())};
    };
    std::map<Typed, const Launch *> used;
    for (unsigned w = 0; w < k; ++w)
      if (runsWorker(w))
        for (const ProgramStep &st : program.worker[w].steps)
          if (st.launches)
            used.emplace(typedKey(st.launch), &st.launch);
    std::vector<KernelSource> sources;
    struct Made {
      std::string name;
      std::vector<std::vector<unsigned>> temporaries;
    };
    std::map<Typed, Made> made;
    for (const auto &[key, l] : used) {
      Made &m = made[key];
      auto src = generateKernel(*program.kernels[l->kernel].op, KernelDialect::Cpp, typesOf(*l));
      if (!src) {
        llvm::consumeError(src.takeError()); // the interpreter runs it
        continue;
      }
      m.name = src->name;
      m.temporaries = src->temporaries;
      sources.push_back(std::move(*src));
    }
    if (llvm::Error e = kernels_.add(sources, options_.compile))
      return e;
    stats_.compile = kernels_.stats();
    stats_.extraBytes.assign(k, 0);
    prepared_.assign(k, {});
    setLibraryThreads(threads_); // the oneDNN primitives below are made for this many
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
          pr.in.push_back(at(w, off));
        pr.out = at(w, l.outputOffset);
        const Made &m = made[typedKey(l)];
        pr.fn = m.name.empty() ? nullptr : kernels_.find(m.name);
        // A product or convolution of bfloat16 operands runs on oneDNN's native bf16 matmul
        // or convolution where this CPU has one; other library calls take float32 (below).
        std::vector<bool> bf16(l.inputOffsets.size());
        for (size_t q = 0; q < bf16.size(); ++q)
          bf16[q] = q < l.inputElements.size() && l.inputElements[q] == loops::Element::BF16;
        bool native = false;
        if (options_.library && std::count(bf16.begin(), bf16.end(), true) > 0 &&
            hasLibraryForm(op)) {
          pr.lib = bf16LibraryKernel(op, node.shapes, l.ranges, l.inputBoxes, bf16);
          native = pr.lib != nullptr;
        }
        if (options_.library && !pr.lib && hasLibraryForm(op))
          pr.lib = libraryKernel(op, node.shapes, l.ranges, l.inputBoxes);
        if (pr.lib) {
          ++stats_.library;
          // The library calls take float32: bfloat16 operands are widened into the scratch
          // space beside the call's own, and a bfloat16 result rounded from there (on a CPU
          // without bfloat16 arithmetic, oneDNN's bf16 paths convert the same way).
          int64_t converted = 0;
          for (size_t q = 0; q < l.inputOffsets.size(); ++q) {
            pr.widen.push_back(bf16[q] && !native ? boxElements(l.inputBoxes[q]) : 0);
            converted += roundedFloats(pr.widen.back());
          }
          if (l.outputElement == loops::Element::BF16)
            pr.narrow = boxElements(l.produced);
          converted += roundedFloats(pr.narrow);
          const int64_t own = static_cast<int64_t>(pr.lib->scratchBytes() + 63) / 64 * 64;
          if (converted > 0)
            pr.convertAt = own;
          stats_.extraBytes[w] = std::max(stats_.extraBytes[w], own + converted);
        } else if (pr.fn) {
          // The generated kernel's temporaries (codegen/schedule.h) share the same space.
          stats_.extraBytes[w] =
              std::max(stats_.extraBytes[w], kernelScratchBytes(m.temporaries, l.ranges));
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
    copyBox(at(w, c.dstOffset), c.dstElement, c.dstBox, at(c.from, c.srcOffset), c.srcElement,
            c.srcBox, c.box, reducer);
  }

  void fill(unsigned w, int64_t offset, int64_t bytes, float value,
            loops::Element element) override {
    if (element == loops::Element::BF16) {
      auto *p = reinterpret_cast<uint16_t *>(at(w, offset));
      std::fill(p, p + bytes / 2, bf16Bits(value));
      return;
    }
    std::fill(at(w, offset), at(w, offset) + bytes / 4, value);
  }

  llvm::Error launch(unsigned w, size_t step) override {
    const Prepared &pr = prepared_[w][step];
    const Launch &l = program_->worker[w].steps[step].launch;
    if (pr.lib && pr.convertAt >= 0) {
      // Float32 copies of the bfloat16 buffers after the call's own scratch space.
      char *next = static_cast<char *>(scratch_[w]) + pr.convertAt;
      std::vector<const float *> in = pr.in;
      for (size_t q = 0; q < in.size(); ++q)
        if (pr.widen[q] > 0) {
          auto *f = reinterpret_cast<float *>(next);
          fromBf16(reinterpret_cast<const uint16_t *>(pr.in[q]), f,
                   static_cast<size_t>(pr.widen[q]));
          in[q] = f;
          next += roundedFloats(pr.widen[q]);
        }
      float *out = pr.narrow ? reinterpret_cast<float *>(next) : pr.out;
      pr.lib->run(in.data(), out, threads_, scratch_[w]);
      if (pr.narrow)
        toBf16(out, reinterpret_cast<uint16_t *>(pr.out), static_cast<size_t>(pr.narrow));
    } else if (pr.lib) {
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
             const Box &box, loops::Element element) override {
    copyBox(at(w, offset), element, held, host, loops::Element::F32, hostBox, box, nullptr);
  }

  void read(unsigned w, int64_t offset, const Box &held, float *host, const Box &hostBox,
            const Box &box, loops::Element element) const override {
    copyBox(host, loops::Element::F32, hostBox, at(w, offset), element, held, box, nullptr);
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
      copyBox(tmp.data(), loops::Element::F32, all, at(w, l.inputOffsets[q]),
              q < l.inputElements.size() ? l.inputElements[q] : loops::Element::F32, held,
              intersectBoxes(held, all), nullptr);
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
    std::vector<float> result(r->data.begin(), r->data.end());
    if (l.outputElement == loops::Element::BF16)
      toBf16(result.data(), reinterpret_cast<uint16_t *>(at(w, l.outputOffset)), result.size());
    else
      std::copy(result.begin(), result.end(), at(w, l.outputOffset));
    return llvm::Error::success();
  }

  /// Worker `w`'s arena at byte `offset`, as the float pointer the kernels' ABI takes (a
  /// bfloat16 buffer's too: offsets are multiples of 4, codegen/memory_plan.cc).
  float *at(unsigned w, int64_t offset) const {
    return reinterpret_cast<float *>(reinterpret_cast<char *>(arenas_[w]) + offset);
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
