// The CUDA backend: device arenas, a stream and events per worker, cuBLAS / cuDNN /
// scatter-add / NVRTC-kernel launches, box copies between arenas.
#include "runtime/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>

#include "codegen/library_plans.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/cuda/device_kernels.h"
#include "runtime/cuda/launch_params.h"
#include "runtime/cuda/library_calls.h"

namespace tofu {
namespace {

using cuda::BoxCopyParams;

llvm::Error cudaFailure(cudaError_t e, const std::string &what) {
  return stringError(fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

#define TOFU_CUDA(expr, what)                                                                      \
  do {                                                                                             \
    cudaError_t tofu_err_ = (expr);                                                                \
    if (tofu_err_ != cudaSuccess)                                                                  \
      return cudaFailure(tofu_err_, what);                                                         \
  } while (0)

#define TOFU_CUBLAS(expr, what)                                                                    \
  do {                                                                                             \
    cublasStatus_t tofu_st_ = (expr);                                                              \
    if (tofu_st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      return stringError(fmt::format("{}: {}", what, cublasGetStatusString(tofu_st_)));            \
  } while (0)

#define TOFU_CUDNN(expr, what)                                                                     \
  do {                                                                                             \
    cudnnStatus_t tofu_st_ = (expr);                                                               \
    if (tofu_st_ != CUDNN_STATUS_SUCCESS)                                                          \
      return stringError(fmt::format("{}: {}", what, cudnnGetErrorString(tofu_st_)));              \
  } while (0)

constexpr int kThreads = cuda::kKernelThreads;

/// The device for the calling host thread (runtime state is per thread), set once.
cudaError_t useDevice(int device) {
  thread_local int current = -1;
  if (current == device)
    return cudaSuccess;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess)
    current = device;
  return e;
}

int64_t aligned(int64_t n) { return (n + 255) / 256 * 256; }

using loops::Element;

/// The element `offset` elements past `base` in a buffer of `element`.
template <typename T> T *elementAt(T *base, int64_t offset, Element element) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T *>(reinterpret_cast<Byte *>(base) + offset * elementBytes(element));
}

cudaDataType_t cublasType(bool bf16) { return bf16 ? CUDA_R_16BF : CUDA_R_32F; }

/// A cuDNN convolution made ready: descriptors, algorithm and its workspace.
struct ConvCall {
  cuda::CudnnConv c;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  int64_t workspace = 0;
  /// Scratch layout: the workspace, then the staged weights, then the staged output.
  int64_t stagedW = 0, stagedOut = 0, scratchBytes = 0;
  BoxCopyParams gatherW, scatterOut;

  ~ConvCall() {
    if (x)
      cudnnDestroyTensorDescriptor(x);
    if (y)
      cudnnDestroyTensorDescriptor(y);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
};

/// One launch made ready: what runs it and its pointers into the worker's arena.
struct Prepared {
  enum Kind { None, Generated, Gemm, Affine, Conv, Scatter } kind = None;
  std::string what;
  std::vector<const float *> in;
  float *out = nullptr;
  // Generated kernel.
  cudaKernel_t kernel = nullptr;
  unsigned blocks = 1;
  std::vector<unsigned char> args;
  /// The multi-launch variant's launches before `kernel`: each temporary's pass, and the
  /// combine of its partial results where it has parts (KernelSource::passes).
  struct PassLaunch {
    cudaKernel_t kernel = nullptr;
    unsigned blocks = 1;
    int64_t parts = 1;
    std::vector<unsigned char> args;
  };
  std::vector<PassLaunch> passes;
  std::vector<int64_t> ints; ///< the integer arguments (args is made with the scratch space)
  bool fast = false;
  Element outElement = Element::F32; ///< the share's element type
  int64_t outputElements = 0;        ///< the share's
  size_t step = 0;                   ///< in its worker's program
  // Library calls.
  cuda::CublasGemm gemm;
  cuda::CublasAffine affine;
  cuda::GemmElements gemmElements; ///< the product's (or the affine plan's) types
  bool convBf16 = false;
  /// Scratch byte offsets: per input, its float32 widening (-1: read in place); the
  /// float32 result rounded into the share (-1: written in place). LibraryCall::widen,
  /// staged.
  std::vector<int64_t> widenAt;
  int64_t stagedAt = -1;
  /// What the library call reads and writes: the arena's buffers, or their float32
  /// stand-ins in scratch space (set once the scratch space exists).
  std::vector<const float *> callIn;
  float *callOut = nullptr;
  std::shared_ptr<ConvCall> conv;
  ScatterPlan scatter;
  cuda::ScatterParams scatterParams;
  BoxCopyParams scatterZero; ///< the `0 * Z` term, where the plan has one
};

struct Worker {
  char *arena = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t sync[2] = {nullptr, nullptr};
  unsigned syncs = 0;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  float *constants = nullptr; ///< {0, 1}: cuBLAS's beta and alpha in device pointer mode
  char *scratch = nullptr;
  int64_t scratchBytes = 0;
  std::vector<cudaEvent_t> marks; ///< per step, one per phase boundary (profiling)
  std::string error;              ///< the first failure of an operation that returns none
};

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(CudaBackendOptions o) : options_(std::move(o)) {}

  ~CudaBackend() override {
    if (useDevice(options_.device) != cudaSuccess)
      return;
    for (Worker &w : workers_) {
      if (w.stream)
        cudaStreamSynchronize(w.stream);
      for (cudaEvent_t e : w.sync)
        if (e)
          cudaEventDestroy(e);
      for (cudaEvent_t e : w.marks)
        cudaEventDestroy(e);
      if (w.blas)
        cublasDestroy(w.blas);
      if (w.dnn)
        cudnnDestroy(w.dnn);
      if (w.stream)
        cudaStreamDestroy(w.stream);
      cudaFree(w.arena);
      cudaFree(w.constants);
      cudaFree(w.scratch);
    }
    prepared_.clear(); // descriptors go before the library handles' process teardown
    for (cudaLibrary_t l : libraries_)
      cudaLibraryUnload(l);
  }

  std::string name() const override { return "cuda"; }

  bool runsWorker(unsigned w) const override {
    return std::find(local_.begin(), local_.end(), w) != local_.end();
  }

  CudaWorkerDevice device(unsigned w) const {
    if (w >= workers_.size())
      return {};
    return {workers_[w].arena, workers_[w].stream};
  }

  llvm::Error prepare(const Program &program) override {
    program_ = &program;
    if (llvm::Error e = cudaDeviceUsable(options_.device))
      return e;
    TOFU_CUDA(useDevice(options_.device), "selecting the device");
    const unsigned k = program.workers;
    local_ = options_.workers;
    if (local_.empty())
      for (unsigned w = 0; w < k; ++w)
        local_.push_back(w);
    for (unsigned w : local_)
      if (w >= k)
        return stringError(fmt::format("worker {} is not in the plan's {}", w, k));
    barrier_ = std::make_unique<SpinBarrier>(static_cast<unsigned>(local_.size()), 2000);
    workers_.resize(k);
    for (unsigned w : local_) {
      Worker &wk = workers_[w];
      const int64_t bytes = std::max<int64_t>(256, program.worker[w].arenaBytes);
      cudaError_t e = cudaMalloc(reinterpret_cast<void **>(&wk.arena), static_cast<size_t>(bytes));
      if (e != cudaSuccess)
        return cudaFailure(e, fmt::format("worker {}: allocating its arena of {} bytes", w,
                                          program.worker[w].arenaBytes));
      TOFU_CUDA(cudaStreamCreateWithFlags(&wk.stream, cudaStreamNonBlocking), "creating a stream");
      for (cudaEvent_t &ev : wk.sync)
        TOFU_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "creating an event");
      TOFU_CUDA(cudaMalloc(reinterpret_cast<void **>(&wk.constants), 2 * sizeof(float)),
                "allocating constants");
      const float constants[2] = {0.0f, 1.0f};
      TOFU_CUDA(cudaMemcpy(wk.constants, constants, sizeof constants, cudaMemcpyHostToDevice),
                "writing constants");
      if (options_.library) {
        TOFU_CUBLAS(cublasCreate(&wk.blas), "cublasCreate");
        TOFU_CUBLAS(cublasSetStream(wk.blas, wk.stream), "cublasSetStream");
        TOFU_CUBLAS(cublasSetPointerMode(wk.blas, CUBLAS_POINTER_MODE_DEVICE),
                    "cublasSetPointerMode");
        TOFU_CUBLAS(cublasSetMathMode(wk.blas, options_.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                             : CUBLAS_DEFAULT_MATH),
                    "cublasSetMathMode");
        TOFU_CUDNN(cudnnCreate(&wk.dnn), "cudnnCreate");
        TOFU_CUDNN(cudnnSetStream(wk.dnn, wk.stream), "cudnnSetStream");
      }
    }
    if (llvm::Error e = loadKernels(program))
      return e;
    stats_.extraBytes.assign(k, 0);
    prepared_.assign(k, {});
    for (unsigned w : local_) {
      const WorkerProgram &wp = program.worker[w];
      prepared_[w].resize(wp.steps.size());
      for (size_t s = 0; s < wp.steps.size(); ++s)
        if (wp.steps[s].launches)
          if (llvm::Error e = prepareLaunch(w, s))
            return e;
      Worker &wk = workers_[w];
      wk.scratchBytes = stats_.extraBytes[w];
      if (wk.scratchBytes > 0)
        TOFU_CUDA(cudaMalloc(reinterpret_cast<void **>(&wk.scratch),
                             static_cast<size_t>(wk.scratchBytes)),
                  fmt::format("worker {}: allocating {} bytes of scratch space (library calls, "
                              "kernel temporaries)",
                              w, wk.scratchBytes));
      // The generated kernels' arguments name the scratch space (the multi-launch variant's
      // temporaries), known only now.
      float *scratch = reinterpret_cast<float *>(wk.scratch);
      for (Prepared &pr : prepared_[w]) {
        pr.callIn = pr.in;
        for (size_t q = 0; q < pr.widenAt.size(); ++q)
          if (pr.widenAt[q] >= 0)
            pr.callIn[q] = reinterpret_cast<const float *>(wk.scratch + pr.widenAt[q]);
        pr.callOut =
            pr.stagedAt >= 0 ? reinterpret_cast<float *>(wk.scratch + pr.stagedAt) : pr.out;
        if (pr.kind != Prepared::Generated)
          continue;
        pr.args = cuda::kernelArgBlock(pr.ints, pr.in, pr.out, pr.fast, scratch);
        for (Prepared::PassLaunch &p : pr.passes)
          p.args = cuda::kernelArgBlock(pr.ints, pr.in, pr.out, pr.fast, scratch, p.parts);
      }
      wk.marks.assign(6 * wp.steps.size(), nullptr);
    }
    return llvm::Error::success();
  }

  void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) override {
    Worker &wk = workers_[w];
    note(w, useDevice(options_.device), "selecting the device");
    const BoxCopyParams p =
        cuda::boxCopyParams(c.dstBox, c.dstOffset / elementBytes(c.dstElement), c.srcBox,
                            c.srcOffset / elementBytes(c.srcElement), c.box,
                            cuda::copyCombine(reducer), c.dstElement, c.srcElement);
    char *dst = wk.arena;
    const char *src = workers_[c.from].arena;
    cudaError_t e = cudaSuccess;
    if (p.elements == 0)
      return;
    if (cuda::isContiguousCopy(p))
      e = cudaMemcpyAsync(elementAt(dst, p.dstOffset, c.dstElement),
                          elementAt(src, p.srcOffset, c.srcElement),
                          static_cast<size_t>(p.elements * cuda::copyElementBytes(p)),
                          cudaMemcpyDeviceToDevice, wk.stream);
    else
      e = cuda::launchBoxCopy(p, dst, src, wk.stream);
    note(w, e, "a region copy");
  }

  /// Buffers of bfloat16 hold each element as its 16 bits; kernels and library calls widen
  /// them and round what they write (codegen/kernel_prelude.h).
  bool supportsBfloat16() const override { return true; }

  void fill(unsigned w, int64_t offset, int64_t bytes, float value,
            loops::Element element) override {
    Worker &wk = workers_[w];
    note(w, useDevice(options_.device), "selecting the device");
    // Zero is all zero bits in both types (and a bfloat16 -0 is 0x8000, not a memset).
    const bool zero = value == 0.0f && !std::signbit(value);
    cudaError_t e =
        zero ? cudaMemsetAsync(wk.arena + offset, 0, static_cast<size_t>(bytes), wk.stream)
        : element == Element::BF16
            ? cuda::launchFillBf16(wk.arena + offset, bytes / 2, value, wk.stream)
            : cuda::launchFill(reinterpret_cast<float *>(wk.arena + offset), bytes / 4, value,
                               wk.stream);
    note(w, e, "a fill");
  }

  llvm::Error launch(unsigned w, size_t step) override {
    TOFU_CUDA(useDevice(options_.device), "selecting the device");
    Worker &wk = workers_[w];
    Prepared &pr = prepared_[w][step];
    switch (pr.kind) {
    case Prepared::None:
      return stringError("no kernel was prepared for this launch");
    case Prepared::Generated: {
      for (Prepared::PassLaunch &p : pr.passes) {
        void *params[] = {p.args.data()};
        TOFU_CUDA(cudaLaunchKernel(reinterpret_cast<const void *>(p.kernel), dim3(p.blocks),
                                   dim3(kThreads), params, 0, wk.stream),
                  "launching a pass of " + pr.what);
      }
      void *params[] = {pr.args.data()};
      TOFU_CUDA(cudaLaunchKernel(reinterpret_cast<const void *>(pr.kernel), dim3(pr.blocks),
                                 dim3(kThreads), params, 0, wk.stream),
                "launching " + pr.what);
      return llvm::Error::success();
    }
    case Prepared::Gemm:
      if (llvm::Error e = widenInputs(w, pr))
        return e;
      if (llvm::Error e = runGemm(wk, pr, pr.gemm))
        return e;
      return roundStaged(w, pr);
    case Prepared::Affine:
      if (llvm::Error e = widenInputs(w, pr))
        return e;
      if (pr.affine.hasRest)
        TOFU_CUDA(
            cuda::launchBoxCopy(pr.affine.rest, pr.callOut, pr.in[pr.affine.restInput], wk.stream),
            "broadcasting the bias of " + pr.what);
      for (const cuda::CublasGemm &g : pr.affine.products)
        if (llvm::Error e = runGemm(wk, pr, g))
          return e;
      return roundStaged(w, pr);
    case Prepared::Conv:
      if (llvm::Error e = widenInputs(w, pr))
        return e;
      if (llvm::Error e = runConv(wk, pr))
        return e;
      return roundStaged(w, pr);
    case Prepared::Scatter:
      return runScatter(wk, pr);
    }
    return llvm::Error::success();
  }

  void sync(unsigned w) override {
    Worker &wk = workers_[w];
    if (local_.size() == 1)
      return; // one stream: its own order is the program's (others' processes order theirs)
    note(w, useDevice(options_.device), "selecting the device");
    // Record this worker's point, meet the others on the host (only to know their events
    // are recorded), then order this stream after every other's point. Two events per
    // worker alternate: a worker cannot record twice before all have waited once, since
    // that needs the next meeting.
    const unsigned slot = wk.syncs++ % 2;
    note(w, cudaEventRecord(wk.sync[slot], wk.stream), "recording an event");
    barrier_->wait();
    for (unsigned x : local_)
      if (x != w)
        note(w, cudaStreamWaitEvent(wk.stream, workers_[x].sync[slot], 0), "waiting on an event");
  }

  void write(unsigned w, int64_t offset, const Box &held, const float *host, const Box &hostBox,
             const Box &box, loops::Element element) override {
    const Worker &wk = workers_[w];
    note(w, useDevice(options_.device), "selecting the device");
    // Staged on the host in the buffer's own type (float32 words hold either).
    const size_t bytes = static_cast<size_t>(boxElements(held) * elementBytes(element));
    std::vector<float> stage(std::max<size_t>(1, (bytes + 3) / 4));
    if (box != held) // part of the buffer: keep the rest
      note(w,
           cudaMemcpyAsync(stage.data(), wk.arena + offset, bytes, cudaMemcpyDeviceToHost,
                           wk.stream),
           "reading a buffer");
    note(w, cudaStreamSynchronize(wk.stream), "reading a buffer");
    copyBox(stage.data(), element, held, host, Element::F32, hostBox, box, nullptr);
    note(w,
         cudaMemcpyAsync(wk.arena + offset, stage.data(), bytes, cudaMemcpyHostToDevice, wk.stream),
         "writing a buffer");
    note(w, cudaStreamSynchronize(wk.stream), "writing a buffer");
  }

  void read(unsigned w, int64_t offset, const Box &held, float *host, const Box &hostBox,
            const Box &box, loops::Element element) const override {
    const Worker &wk = workers_[w];
    if (useDevice(options_.device) != cudaSuccess)
      return;
    const size_t bytes = static_cast<size_t>(boxElements(held) * elementBytes(element));
    std::vector<float> stage(std::max<size_t>(1, (bytes + 3) / 4));
    if (cudaMemcpyAsync(stage.data(), wk.arena + offset, bytes, cudaMemcpyDeviceToHost,
                        wk.stream) != cudaSuccess ||
        cudaStreamSynchronize(wk.stream) != cudaSuccess)
      return; // the host buffer keeps its NaN: the caller sees nothing was read
    copyBox(host, Element::F32, hostBox, stage.data(), element, held, box, nullptr);
  }

  std::string describe(unsigned w, size_t step) const override {
    return program_->worker[w].steps[step].launches ? prepared_[w][step].what : "";
  }

  BackendStats stats() const override { return stats_; }

  llvm::Error finish(unsigned w) override {
    Worker &wk = workers_[w];
    note(w, useDevice(options_.device), "selecting the device");
    cudaError_t e = cudaStreamSynchronize(wk.stream);
    if (wk.error.empty() && e != cudaSuccess)
      wk.error =
          fmt::format("running the step: {} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
    if (!wk.error.empty()) {
      std::string error = std::move(wk.error);
      wk.error.clear();
      return stringError(error);
    }
    return llvm::Error::success();
  }

  bool timesOnDevice() const override { return true; }

  void mark(unsigned w, size_t step, Phase phase) override {
    Worker &wk = workers_[w];
    note(w, useDevice(options_.device), "selecting the device");
    cudaEvent_t &ev = wk.marks[6 * step + static_cast<size_t>(phase)];
    if (!ev)
      note(w, cudaEventCreate(&ev), "creating a timing event");
    note(w, cudaEventRecord(ev, wk.stream), "recording a timing event");
  }

  std::vector<std::array<double, 3>> deviceTimes(unsigned w) override {
    Worker &wk = workers_[w];
    std::vector<std::array<double, 3>> out(wk.marks.size() / 6, {0, 0, 0});
    auto between = [&](size_t a, size_t b) {
      float ms = 0;
      if (!wk.marks[a] || !wk.marks[b] ||
          cudaEventElapsedTime(&ms, wk.marks[a], wk.marks[b]) != cudaSuccess)
        return 0.0;
      return ms / 1e3;
    };
    for (size_t s = 0; s < out.size(); ++s) {
      const size_t b = 6 * s;
      out[s][0] = between(b, b + 1) + between(b + 3, b + 4);     // fetch, assembly
      out[s][1] = between(b + 1, b + 2);                         // the kernel
      out[s][2] = between(b + 2, b + 3) + between(b + 4, b + 5); // the waits
    }
    return out;
  }

private:
  void note(unsigned w, cudaError_t e, const char *what) {
    if (e != cudaSuccess && workers_[w].error.empty())
      workers_[w].error =
          fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
  }

  /// A launch's kernel: its instantiation and its buffers' element types (a bf16 program
  /// launches an op on bfloat16 data, and on float32 partial results).
  using Typed = std::pair<unsigned, std::string>;
  static KernelTypes typesOf(const Launch &l) { return {l.inputElements, l.outputElement}; }
  static Typed typedKey(const Launch &l) {
    return {l.kernel, typesOf(l).describe(l.inputOffsets.size())};
  }

  /// Generates the CUDA source of every kernel the local workers launch (one per
  /// instantiation and element types), compiles the cubins (or finds them cached) and
  /// loads them.
  llvm::Error loadKernels(const Program &program) {
    std::map<Typed, const Launch *> used;
    for (unsigned w : local_)
      for (const ProgramStep &st : program.worker[w].steps)
        if (st.launches)
          used.emplace(typedKey(st.launch), &st.launch);
    std::vector<KernelSource> sources;
    for (const auto &[key, l] : used) {
      const InstOp &op = *program.kernels[l->kernel].op;
      auto src = generateKernel(op, KernelDialect::Cuda, typesOf(*l));
      if (!src)
        return stringError(fmt::format("op '{}' ({}) has no CUDA kernel: {}", op.name, key.second,
                                       llvm::toString(src.takeError())));
      kernelIndex_[key] = sources.size();
      sources.push_back(std::move(*src));
    }
    auto cubins = compileCubins(sources, options_.cubins);
    if (!cubins)
      return cubins.takeError();
    for (KernelSource &k : sources) { // what launches are planned from: all but the code
      k.code.clear();
      k.code.shrink_to_fit();
    }
    kernelInfo_ = std::move(sources);
    stats_.compile.kernels = static_cast<unsigned>(kernelInfo_.size());
    stats_.compile.units = static_cast<unsigned>(cubins->size());
    for (const Cubin &c : *cubins) {
      stats_.compile.unitsCompiled += c.compiled ? 1 : 0;
      cudaLibrary_t lib = nullptr;
      TOFU_CUDA(
          cudaLibraryLoadFromFile(&lib, c.path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "loading " + c.path);
      libraries_.push_back(lib);
      for (const std::string &name : c.kernels) {
        cudaKernel_t fn = nullptr;
        TOFU_CUDA(cudaLibraryGetKernel(&fn, lib, name.c_str()),
                  fmt::format("finding kernel {} in {}", name, c.path));
        kernels_[name] = fn;
      }
    }
    return llvm::Error::success();
  }

  llvm::Error prepareLaunch(unsigned w, size_t s) {
    Worker &wk = workers_[w];
    const ProgramStep &st = program_->worker[w].steps[s];
    const Launch &l = st.launch;
    const ProgramNode &node = program_->nodes[st.node];
    const InstOp &op = *program_->kernels[l.kernel].op;
    Prepared &pr = prepared_[w][s];
    for (int64_t off : l.inputOffsets)
      pr.in.push_back(reinterpret_cast<const float *>(wk.arena + off));
    pr.out = reinterpret_cast<float *>(wk.arena + l.outputOffset);
    pr.outElement = l.outputElement;
    pr.outputElements = boxElements(l.produced);
    pr.step = s;
    if (options_.library) {
      cuda::LibraryCall call =
          cuda::libraryCall(op, node.shapes, l.ranges, l.inputBoxes, typesOf(l));
      if (!call.declined.empty())
        ++stats_.libraryDeclined;
      pr.what = call.describe();
      pr.gemmElements = call.elements;
      std::vector<bool> widen = call.widen;
      const bool staged = call.staged;
      switch (call.kind) {
      case cuda::LibraryCall::None:
        break;
      case cuda::LibraryCall::Gemm:
        pr.kind = Prepared::Gemm;
        pr.gemm = std::move(call.gemm);
        break;
      case cuda::LibraryCall::Affine:
        pr.kind = Prepared::Affine;
        pr.affine = std::move(call.affine);
        break;
      case cuda::LibraryCall::Conv: {
        auto conv = makeConv(wk, std::move(call.conv), call.convBf16);
        if (!conv)
          return conv.takeError();
        if (*conv) { // else cuDNN has no algorithm for these views: the generated kernel
          pr.kind = Prepared::Conv;
          pr.conv = std::move(*conv);
          pr.convBf16 = call.convBf16;
          stats_.extraBytes[w] = std::max(stats_.extraBytes[w], pr.conv->scratchBytes);
        } else {
          ++stats_.libraryDeclined;
        }
        break;
      }
      case cuda::LibraryCall::Scatter:
        pr.kind = Prepared::Scatter;
        pr.scatter = std::move(call.scatter);
        pr.scatterParams = cuda::scatterParams(pr.scatter);
        if (pr.scatter.zeroIn >= 0)
          pr.scatterZero = cuda::scatterZeroTerm(pr.scatter);
        break;
      }
      // After the call's own scratch: bfloat16 operands widened to float32, and a bfloat16
      // result computed in float32 and rounded into the share once.
      if (pr.kind != Prepared::None) {
        int64_t at = pr.kind == Prepared::Conv ? aligned(pr.conv->scratchBytes) : 0;
        pr.widenAt.assign(l.inputOffsets.size(), -1);
        for (size_t q = 0; q < widen.size(); ++q)
          if (widen[q]) {
            pr.widenAt[q] = at;
            at += aligned(boxElements(l.inputBoxes[q]) * 4);
          }
        if (staged) {
          pr.stagedAt = at;
          at += aligned(pr.outputElements * 4);
        }
        stats_.extraBytes[w] = std::max(stats_.extraBytes[w], at);
      }
    }
    if (pr.kind != Prepared::None) {
      ++stats_.library;
      return llvm::Error::success();
    }
    const KernelSource &source = kernelInfo_[kernelIndex_.at(typedKey(l))];
    const cuda::GeneratedLaunch g = cuda::planGeneratedLaunch(source, op, l.ranges);
    auto find = [&](const std::string &entry) -> llvm::Expected<cudaKernel_t> {
      auto it = kernels_.find(entry);
      if (it == kernels_.end())
        return stringError(fmt::format("node '{}': kernel {} was not loaded", node.name, entry));
      return it->second;
    };
    auto main = find(g.entry);
    if (!main)
      return main.takeError();
    pr.kind = Prepared::Generated;
    pr.kernel = *main;
    pr.what = g.describe();
    pr.blocks = g.blocks;
    const std::string &name = source.name;
    for (const cuda::GeneratedLaunch::Pass &p : g.passes) {
      auto pass = find(temporaryPassName(name, p.temporary->id));
      if (!pass)
        return pass.takeError();
      pr.passes.push_back({*pass, p.blocks, p.parts, {}});
      if (p.parts > 1) {
        auto combine = find(temporaryCombineName(name, p.temporary->id));
        if (!combine)
          return combine.takeError();
        pr.passes.push_back({*combine, p.combineBlocks, p.parts, {}});
      }
    }
    if (g.multi)
      stats_.extraBytes[w] =
          std::max(stats_.extraBytes[w], cuda::cudaPassesScratchBytes(source.passes, l.ranges));
    pr.ints = l.ints; // the argument block is made once the scratch space exists
    pr.fast = l.fast;
    return llvm::Error::success();
  }

  /// A convolution's geometry: what its timed algorithm is remembered by.
  static std::string convKey(const cuda::CudnnConv &c) {
    return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}", static_cast<int>(c.kind),
                       fmt::join(c.x.dims, ","), fmt::join(c.x.strides, ","),
                       fmt::join(c.y.dims, ","), fmt::join(c.y.strides, ","),
                       fmt::join(c.w.dims, ","), fmt::join(c.pad, ","), fmt::join(c.stride, ","),
                       fmt::join(c.dilation, ","));
  }

  /// The convolution's descriptors and algorithm; null where cuDNN has no algorithm for it
  /// (the generated kernel runs it). `bf16`: x, w and y are bfloat16, accumulated in float32
  /// (cuDNN's pseudo-bfloat16 configuration) on tensor cores.
  llvm::Expected<std::shared_ptr<ConvCall>> makeConv(Worker &wk, cuda::CudnnConv call, bool bf16) {
    auto cc = std::make_shared<ConvCall>();
    cc->c = std::move(call);
    const cuda::CudnnConv &c = cc->c;
    if (c.zeros)
      return cc;
    const int nb = static_cast<int>(c.x.dims.size());
    const cudnnDataType_t data = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    TOFU_CUDNN(cudnnCreateTensorDescriptor(&cc->x), "cudnnCreateTensorDescriptor");
    TOFU_CUDNN(cudnnCreateTensorDescriptor(&cc->y), "cudnnCreateTensorDescriptor");
    TOFU_CUDNN(cudnnCreateFilterDescriptor(&cc->w), "cudnnCreateFilterDescriptor");
    TOFU_CUDNN(cudnnCreateConvolutionDescriptor(&cc->conv), "cudnnCreateConvolutionDescriptor");
    // A bfloat16 geometry cuDNN will not describe is declined like one it has no algorithm
    // for: the generated kernel computes it.
    auto described = [&](cudnnStatus_t st, const char *what) -> llvm::Error {
      if (st == CUDNN_STATUS_SUCCESS)
        return llvm::Error::success();
      if (bf16 && st == CUDNN_STATUS_NOT_SUPPORTED)
        return llvm::Error::success();
      return stringError(fmt::format("{}: {}", what, cudnnGetErrorString(st)));
    };
    cudnnStatus_t st =
        cudnnSetTensorNdDescriptor(cc->x, data, nb, c.x.dims.data(), c.x.strides.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetTensorNdDescriptor(cc->y, data, nb, c.y.dims.data(), c.y.strides.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetFilterNdDescriptor(cc->w, data, CUDNN_TENSOR_NCHW, nb, c.w.dims.data());
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetConvolutionNdDescriptor(cc->conv, nb - 2, c.pad.data(), c.stride.data(),
                                           c.dilation.data(), CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetConvolutionMathType(cc->conv, bf16 ? CUDNN_TENSOR_OP_MATH
                                                 : options_.tf32
                                                     ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                                                     : CUDNN_FMA_MATH);
    if (st != CUDNN_STATUS_SUCCESS) {
      if (llvm::Error e = described(st, "describing the convolution to cuDNN"))
        return e;
      return nullptr;
    }
    // The fastest algorithm whose workspace fits the limit: timed once per geometry (cuDNN
    // runs each algorithm on scratch buffers of its own) and remembered, else by cuDNN's
    // heuristics.
    bool found = false;
    auto choose = [&](auto *perf, int count, auto time, auto heuristics,
                      const char *what) -> llvm::Error {
      int returned = 0;
      auto pick = [&]() -> bool {
        for (int i = 0; i < returned; ++i)
          if (perf[i].status == CUDNN_STATUS_SUCCESS &&
              static_cast<int64_t>(perf[i].memory) <= options_.convWorkspaceLimit) {
            cc->algo = static_cast<int>(perf[i].algo);
            cc->workspace = static_cast<int64_t>(perf[i].memory);
            return true;
          }
        return false;
      };
      const std::string key = convKey(c) + (bf16 ? "|bf16" : "");
      if (auto it = timedAlgorithms_.find(key); it != timedAlgorithms_.end()) {
        std::tie(cc->algo, cc->workspace) = it->second;
        found = true;
        return llvm::Error::success();
      }
      if (options_.timeConvAlgorithms && time(count, &returned) == CUDNN_STATUS_SUCCESS && pick()) {
        timedAlgorithms_[key] = {cc->algo, cc->workspace};
        found = true;
        return llvm::Error::success();
      }
      TOFU_CUDNN(heuristics(count, &returned), what);
      found = pick();
      return llvm::Error::success();
    };
    llvm::Error chosen = llvm::Error::success();
    switch (c.kind) {
    case ConvKind::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      chosen = choose(
          perf, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          [&](int n, int *r) {
            return cudnnFindConvolutionForwardAlgorithm(wk.dnn, cc->x, cc->w, cc->conv, cc->y, n, r,
                                                        perf);
          },
          [&](int n, int *r) {
            return cudnnGetConvolutionForwardAlgorithm_v7(wk.dnn, cc->x, cc->w, cc->conv, cc->y, n,
                                                          r, perf);
          },
          "choosing a forward convolution algorithm");
      break;
    }
    case ConvKind::Data: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      chosen = choose(
          perf, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          [&](int n, int *r) {
            return cudnnFindConvolutionBackwardDataAlgorithm(wk.dnn, cc->w, cc->y, cc->conv, cc->x,
                                                             n, r, perf);
          },
          [&](int n, int *r) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(wk.dnn, cc->w, cc->y, cc->conv,
                                                               cc->x, n, r, perf);
          },
          "choosing a data-gradient convolution algorithm");
      break;
    }
    case ConvKind::Filter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      chosen = choose(
          perf, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          [&](int n, int *r) {
            return cudnnFindConvolutionBackwardFilterAlgorithm(wk.dnn, cc->x, cc->y, cc->conv,
                                                               cc->w, n, r, perf);
          },
          [&](int n, int *r) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(wk.dnn, cc->x, cc->y, cc->conv,
                                                                 cc->w, n, r, perf);
          },
          "choosing a filter-gradient convolution algorithm");
      break;
    }
    }
    if (chosen)
      return std::move(chosen);
    if (!found) // e.g. a data gradient into a strided view: cuDNN 9 offers no engine
      return nullptr;
    const Element element = bf16 ? Element::BF16 : Element::F32;
    const int64_t bytes = elementBytes(element);
    cc->stagedW = aligned(cc->workspace);
    cc->stagedOut = cc->stagedW + (c.stageWeights ? aligned(c.w.elements() * bytes) : 0);
    cc->scratchBytes = cc->stagedOut + (c.stageOutput ? aligned(c.x.elements() * bytes) : 0);
    if (c.stageWeights) // the filter's box of its held buffer, gathered dense
      cc->gatherW = cuda::boxCopyParams(c.weightsBox, 0, c.weightsHeld, 0, c.weightsBox,
                                        cuda::kOverwrite, element, element);
    if (c.stageOutput) { // the share's box of the wider result, copied out dense
      Box computed, share;
      for (size_t d = 0; d < c.outputDims.size(); ++d) {
        computed.push_back({0, c.x.dims[d]});
        share.push_back({c.outputLead[d], c.outputLead[d] + c.outputDims[d]});
      }
      cc->scatterOut =
          cuda::boxCopyParams(share, 0, computed, 0, share, cuda::kOverwrite, element, element);
    }
    return cc;
  }

  llvm::Error runGemm(Worker &wk, const Prepared &pr, const cuda::CublasGemm &g) {
    const float *alpha = g.alphaInput >= 0 ? pr.callIn[g.alphaInput] : wk.constants + 1;
    const cuda::GemmElements &types = pr.gemmElements;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    if (!types.bf16Operands && !types.bf16Output) { // float32: sgemm, as before bf16
      g.forEachCall([&](int64_t offX, int64_t offY, int64_t offC, bool first) {
        status = cublasSgemmStridedBatched(
            wk.blas, g.transX ? CUBLAS_OP_T : CUBLAS_OP_N, g.transY ? CUBLAS_OP_T : CUBLAS_OP_N,
            static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), alpha,
            pr.callIn[g.x] + offX, static_cast<int>(g.ldx), g.strideX, pr.callIn[g.y] + offY,
            static_cast<int>(g.ldy), g.strideY, first ? wk.constants : wk.constants + 1,
            pr.callOut + offC, static_cast<int>(g.ldc), g.strideC, static_cast<int>(g.batch));
        return status == CUBLAS_STATUS_SUCCESS;
      });
      TOFU_CUBLAS(status, pr.what);
      return llvm::Error::success();
    }
    // bfloat16 operands and/or output: GemmEx with float32 accumulation (tensor cores for
    // bfloat16 operands); a staged output is float32 in scratch.
    const Element operand = types.bf16Operands ? Element::BF16 : Element::F32;
    const bool cBf16 = types.bf16Output && !types.staged;
    const Element result = cBf16 ? Element::BF16 : Element::F32;
    float *out = pr.callOut;
    g.forEachCall([&](int64_t offX, int64_t offY, int64_t offC, bool first) {
      status = cublasGemmStridedBatchedEx(
          wk.blas, g.transX ? CUBLAS_OP_T : CUBLAS_OP_N, g.transY ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), alpha,
          elementAt(pr.callIn[g.x], offX, operand), cublasType(types.bf16Operands),
          static_cast<int>(g.ldx), g.strideX, elementAt(pr.callIn[g.y], offY, operand),
          cublasType(types.bf16Operands), static_cast<int>(g.ldy), g.strideY,
          first ? wk.constants : wk.constants + 1, elementAt(out, offC, result), cublasType(cBf16),
          static_cast<int>(g.ldc), g.strideC, static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT);
      return status == CUBLAS_STATUS_SUCCESS;
    });
    TOFU_CUBLAS(status, pr.what);
    return llvm::Error::success();
  }

  /// A library call's bfloat16 operands widened into its float32 stand-ins (exact).
  llvm::Error widenInputs(unsigned w, const Prepared &pr) {
    Worker &wk = workers_[w];
    const Launch &l = program_->worker[w].steps[pr.step].launch;
    for (size_t q = 0; q < pr.widenAt.size(); ++q) {
      if (pr.widenAt[q] < 0)
        continue;
      const Box all{{0, boxElements(l.inputBoxes[q])}};
      const BoxCopyParams p =
          cuda::boxCopyParams(all, 0, all, 0, all, cuda::kOverwrite, Element::F32, Element::BF16);
      TOFU_CUDA(cuda::launchBoxCopy(p, const_cast<float *>(pr.callIn[q]), pr.in[q], wk.stream),
                "widening an operand of " + pr.what);
    }
    return llvm::Error::success();
  }

  /// A staged call's float32 result rounded once into its bfloat16 share.
  llvm::Error roundStaged(unsigned w, const Prepared &pr) {
    if (pr.stagedAt < 0)
      return llvm::Error::success();
    Worker &wk = workers_[w];
    const Box all{{0, pr.outputElements}};
    const BoxCopyParams p =
        cuda::boxCopyParams(all, 0, all, 0, all, cuda::kOverwrite, Element::BF16, Element::F32);
    TOFU_CUDA(cuda::launchBoxCopy(p, pr.out, pr.callOut, wk.stream),
              "rounding the result of " + pr.what);
    return llvm::Error::success();
  }

  llvm::Error runConv(Worker &wk, const Prepared &pr) {
    const ConvCall &cc = *pr.conv;
    const cuda::CudnnConv &c = cc.c;
    if (c.zeros) { // the share in its own type (no call, nothing staged)
      TOFU_CUDA(cudaMemsetAsync(pr.out, 0,
                                static_cast<size_t>(c.outputElements * elementBytes(pr.outElement)),
                                wk.stream),
                "zeroing a convolution share");
      return llvm::Error::success();
    }
    const Element element = pr.convBf16 ? Element::BF16 : Element::F32;
    auto at = [&](const cuda::TensorView &v) -> void * {
      return elementAt(v.input >= 0 ? const_cast<float *>(pr.callIn[v.input]) : pr.callOut,
                       v.offset, element);
    };
    void *x = at(c.x), *w = at(c.w), *y = at(c.y);
    char *scratch = wk.scratch;
    if (c.stageWeights) {
      void *dense = scratch + cc.stagedW;
      TOFU_CUDA(cuda::launchBoxCopy(cc.gatherW, dense, pr.callIn[c.w.input], wk.stream),
                "gathering a filter");
      w = dense;
    }
    if (c.stageOutput)
      x = scratch + cc.stagedOut;
    const float one = 1.0f, zero = 0.0f;
    void *ws = cc.workspace > 0 ? scratch : nullptr;
    const size_t wsBytes = static_cast<size_t>(cc.workspace);
    switch (c.kind) {
    case ConvKind::Forward:
      TOFU_CUDNN(cudnnConvolutionForward(wk.dnn, &one, cc.x, x, cc.w, w, cc.conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(cc.algo), ws,
                                         wsBytes, &zero, cc.y, y),
                 pr.what);
      break;
    case ConvKind::Data:
      TOFU_CUDNN(cudnnConvolutionBackwardData(wk.dnn, &one, cc.w, w, cc.y, y, cc.conv,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(cc.algo),
                                              ws, wsBytes, &zero, cc.x, x),
                 pr.what);
      break;
    case ConvKind::Filter:
      TOFU_CUDNN(
          cudnnConvolutionBackwardFilter(wk.dnn, &one, cc.x, x, cc.y, y, cc.conv,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(cc.algo), ws,
                                         wsBytes, &zero, cc.w, w),
          pr.what);
      break;
    }
    if (c.stageOutput)
      TOFU_CUDA(cuda::launchBoxCopy(cc.scatterOut, pr.callOut, x, wk.stream),
                "copying a data gradient's share out of its wider result");
    return llvm::Error::success();
  }

  llvm::Error runScatter(Worker &wk, const Prepared &pr) {
    const ScatterPlan &p = pr.scatter;
    TOFU_CUDA(cudaMemsetAsync(pr.out, 0, static_cast<size_t>(p.outElems) * 4, wk.stream),
              "zeroing a scatter share");
    if (p.zeroIn >= 0)
      TOFU_CUDA(cuda::launchBoxCopy(pr.scatterZero, pr.out, pr.in[p.zeroIn], wk.stream),
                "a scatter's zero term");
    TOFU_CUDA(
        cuda::launchScatter(pr.scatterParams, pr.out, pr.in[p.idxIn], pr.in[p.dyIn], wk.stream),
        "a scatter-add");
    return llvm::Error::success();
  }

  CudaBackendOptions options_;
  const Program *program_ = nullptr;
  std::unique_ptr<SpinBarrier> barrier_;
  std::vector<unsigned> local_; ///< the workers this process runs
  std::vector<Worker> workers_; ///< per worker of the plan (only local ones made)
  std::vector<cudaLibrary_t> libraries_;
  std::map<std::string, cudaKernel_t> kernels_;
  std::vector<KernelSource> kernelInfo_; ///< per typed kernel, its entry points (no code)
  std::map<Typed, size_t> kernelIndex_;  ///< a launch's typed kernel in kernelInfo_
  /// Timed convolution algorithms (and their workspaces) by geometry (convKey).
  std::map<std::string, std::pair<int, int64_t>> timedAlgorithms_;
  std::vector<std::vector<Prepared>> prepared_;
  BackendStats stats_;
};

} // namespace

llvm::Error cudaDeviceUsable(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return stringError(
        fmt::format("no usable CUDA device: {} ({})", cudaGetErrorName(e), cudaGetErrorString(e)));
  if (device < 0 || device >= count)
    return stringError(fmt::format("no CUDA device {} ({} present)", device, count));
  return llvm::Error::success();
}

std::unique_ptr<Backend> makeCudaBackend(const CudaBackendOptions &options) {
  return std::make_unique<CudaBackend>(options);
}

CudaWorkerDevice cudaWorkerDevice(const Backend &backend, unsigned w) {
  if (const auto *cuda = dynamic_cast<const CudaBackend *>(&backend))
    return cuda->device(w);
  return {};
}

} // namespace tofu
