// The MPI backend: this process's worker on the CPU backend, other workers' regions over MPI.
#include "runtime/mpi/mpi_backend.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <unordered_map>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

bool parseMpiTransport(const std::string &name, MpiTransport &out) {
  if (name == "get")
    out = MpiTransport::Get;
  else if (name == "sendrecv")
    out = MpiTransport::SendRecv;
  else
    return false;
  return true;
}

const char *mpiTransportName(MpiTransport t) { return t == MpiTransport::Get ? "get" : "sendrecv"; }

namespace {

/// MPI's type for one element of `e` (a bfloat16 moves as its 16 bits).
MPI_Datatype elementType(loops::Element e) {
  return e == loops::Element::BF16 ? MPI_UINT16_T : MPI_FLOAT;
}

/// The subarray `box` of a row-major buffer of `element` holding `held`, as one MPI datatype
/// (committed), or the element's type for a scalar. Fails where an extent does not fit an
/// int.
llvm::Expected<MPI_Datatype> subarrayType(const Box &held, const Box &box, loops::Element element) {
  if (box.empty())
    return elementType(element);
  const int r = static_cast<int>(box.size());
  std::vector<int> sizes(r), subsizes(r), starts(r);
  for (int d = 0; d < r; ++d) {
    if (held[d].size() > INT_MAX)
      return stringError(fmt::format("a buffer's dimension of {} elements is beyond MPI's int "
                                     "counts",
                                     held[d].size()));
    sizes[d] = static_cast<int>(held[d].size());
    subsizes[d] = static_cast<int>(box[d].size());
    starts[d] = static_cast<int>(box[d].lo - held[d].lo);
  }
  MPI_Datatype t;
  MPI_Type_create_subarray(r, sizes.data(), subsizes.data(), starts.data(), MPI_ORDER_C,
                           elementType(element), &t);
  MPI_Type_commit(&t);
  return t;
}

/// One copy from (or to) another process, its datatypes made once.
struct Transfer {
  MPI_Datatype src = MPI_FLOAT; ///< the region in the owner's buffer
  /// The region in the receiver's buffer, where it lands there directly; else (a combined
  /// partial result, or buffers of two element types) it lands in the staging buffer, as
  /// `count` elements of the source's type, and is copied from there converting.
  MPI_Datatype dst = MPI_FLOAT;
  bool staged = false;
  int count = 0; ///< elements
};

/// A send this process posts when it enters a phase: a region of its arena to a worker.
struct Send {
  unsigned to = 0;
  int64_t offset = 0;
  MPI_Datatype type = MPI_FLOAT;
};

constexpr int kTag = 7;

class MpiBackend final : public ForwardingBackend {
public:
  explicit MpiBackend(MpiBackendOptions o) : options_(std::move(o)) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiBackend() override {
    for (MPI_Datatype &t : types_)
      MPI_Type_free(&t);
    // Freeing a window is collective: only when every process got this far together (after
    // a step finished cleanly). A process that failed before aborts the job instead.
    if (window_ != MPI_WIN_NULL && clean_) {
      MPI_Win_unlock_all(window_);
      MPI_Win_free(&window_);
    }
    inner_.reset();
    std::free(hostArena_); // null where the arena is the window's
    std::free(staging_);
    if (clean_)
      MPI_Comm_free(&comm_);
  }

  std::string name() const override {
    return std::string("mpi-") + mpiTransportName(options_.transport);
  }

  bool runsWorker(unsigned w) const override { return static_cast<int>(w) == rank_; }
  /// Regions of bfloat16 tensors cross as their bits; the CPU backend computes them.
  bool supportsBfloat16() const override { return true; }

  llvm::Error prepare(const Program &program) override {
    if (static_cast<int>(program.workers) != size_)
      return stringError(fmt::format("the plan has {} workers but {} processes run it (start "
                                     "one process per worker: mpirun -np {})",
                                     program.workers, size_, program.workers));
    const unsigned me = static_cast<unsigned>(rank_);
    CpuBackendOptions cpu = options_.cpu;
    cpu.workers = {me};
    cpu.allocateArena = [this](unsigned, int64_t bytes) -> llvm::Expected<float *> {
      return allocateArena(bytes);
    };
    inner_ = makeCpuBackend(cpu);
    if (llvm::Error e = inner_->prepare(program))
      return e;
    if (window_ != MPI_WIN_NULL)
      MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);

    int64_t stagingElements = 0;
    auto receive = [&](size_t, const RegionCopy &c, const ir::Reducer *) -> llvm::Error {
      if (c.from >= program.workers)
        return stringError(fmt::format("a copy from worker {}, which is not in the plan", c.from));
      Transfer t;
      const int64_t n = boxElements(c.box);
      if (n > INT_MAX)
        return stringError(fmt::format("a region of {} elements is beyond MPI's int counts", n));
      t.count = static_cast<int>(n);
      if (n == 0) { // nothing crosses (MPI has no empty subarrays)
        transfers_.emplace(&c, t);
        return llvm::Error::success();
      }
      auto src = subarrayType(c.srcBox, c.box, c.srcElement);
      if (!src)
        return src.takeError();
      t.src = keep(*src);
      t.staged = c.combine || c.srcElement != c.dstElement;
      if (t.staged) {
        stagingElements = std::max(stagingElements, n);
      } else {
        auto dst = subarrayType(c.dstBox, c.box, c.dstElement);
        if (!dst)
          return dst.takeError();
        t.dst = keep(*dst);
      }
      transfers_.emplace(&c, t);
      return llvm::Error::success();
    };
    if (llvm::Error e = forEachCopyInto(program, me, receive))
      return e;
    if (stagingElements > 0) {
      staging_ = static_cast<float *>(
          std::aligned_alloc(64, static_cast<size_t>((stagingElements * 4 + 63) / 64 * 64)));
      if (!staging_)
        return stringError(
            fmt::format("cannot allocate a staging buffer of {} bytes", stagingElements * 4));
    }
    stagingBytes_ = stagingElements * 4;

    if (options_.transport == MpiTransport::SendRecv) {
      // What the others fetch from this worker, per phase, in each receiver's order (messages
      // between two processes on one tag match in the order they are posted).
      steps_ = program.worker[me].steps.size();
      sends_.assign(2 * steps_ + 1, {});
      auto send = [&](size_t phase, unsigned to, const RegionCopy &c) -> llvm::Error {
        if (boxElements(c.box) == 0)
          return llvm::Error::success();
        auto type = subarrayType(c.srcBox, c.box, c.srcElement);
        if (!type)
          return type.takeError();
        sends_[phase].push_back({to, c.srcOffset, keep(*type)});
        return llvm::Error::success();
      };
      if (llvm::Error e = forEachCopyFrom(program, me, send))
        return e;
    }
    return llvm::Error::success();
  }

  void enter(unsigned w, size_t step, Phase phase) override {
    if (options_.transport == MpiTransport::Get) {
      // Whatever the others wrote before this step (their inputs, the carries) is in place
      // before anyone reads it.
      if (step == 0 && phase == Phase::Fetch)
        windowBarrier();
      return;
    }
    const size_t slot = crossingPhase(step, phase, steps_);
    if (slot >= sends_.size())
      return;
    for (const Send &s : sends_[slot]) {
      sending_.emplace_back();
      MPI_Isend(at(s.offset), 1, s.type, static_cast<int>(s.to), kTag, comm_, &sending_.back());
    }
  }

  void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) override {
    if (c.from == w) {
      inner_->copy(w, c, reducer);
      return;
    }
    auto it = transfers_.find(&c);
    if (it == transfers_.end() || it->second.count == 0)
      return; // an empty region
    const Transfer &t = it->second;
    const int from = static_cast<int>(c.from);
    const MPI_Datatype staged = elementType(c.srcElement);
    if (options_.transport == MpiTransport::Get) {
      const MPI_Aint disp = static_cast<MPI_Aint>(shift_[c.from] + c.srcOffset);
      if (t.staged) {
        MPI_Get(staging_, t.count, staged, from, disp, 1, t.src, window_);
        MPI_Win_flush_local(from, window_);
        copyBox(at(c.dstOffset), c.dstElement, c.dstBox, staging_, c.srcElement, c.box, c.box,
                reducer);
      } else {
        MPI_Get(at(c.dstOffset), 1, t.dst, from, disp, 1, t.src, window_);
        pending_ = true;
      }
      return;
    }
    if (t.staged) {
      MPI_Recv(staging_, t.count, staged, from, kTag, comm_, MPI_STATUS_IGNORE);
      copyBox(at(c.dstOffset), c.dstElement, c.dstBox, staging_, c.srcElement, c.box, c.box,
              reducer);
    } else {
      receiving_.emplace_back();
      MPI_Irecv(at(c.dstOffset), 1, t.dst, from, kTag, comm_, &receiving_.back());
    }
  }

  void fill(unsigned w, int64_t offset, int64_t bytes, float value,
            loops::Element element) override {
    arrive();
    inner_->fill(w, offset, bytes, value, element);
  }

  llvm::Error launch(unsigned w, size_t step) override {
    arrive();
    return inner_->launch(w, step);
  }

  void sync(unsigned w) override {
    complete();
    if (options_.transport == MpiTransport::Get)
      windowBarrier();
  }

  llvm::Error finish(unsigned w) override {
    complete();
    // The carries read the others' updates: nobody writes the next step's inputs over a
    // buffer another process may still be reading.
    if (options_.transport == MpiTransport::Get)
      windowBarrier();
    clean_ = true;
    return inner_->finish(w);
  }

  BackendStats stats() const override {
    BackendStats s = inner_->stats();
    if (s.extraBytes.size() > static_cast<size_t>(rank_))
      s.extraBytes[rank_] += stagingBytes_;
    if (window_ != MPI_WIN_NULL && s.arenaBytes.size() > static_cast<size_t>(rank_)) {
      // What the window really holds, as MPI reports it (less the alignment margin).
      MPI_Aint *size = nullptr;
      int found = 0;
      MPI_Win_get_attr(window_, MPI_WIN_SIZE, &size, &found);
      if (found)
        s.arenaBytes[rank_] = static_cast<int64_t>(*size) - kAlign;
    }
    return s;
  }

private:
  static constexpr int64_t kAlign = 64;

  /// The arena: the RMA window's memory (get), else host memory; 64-byte aligned.
  llvm::Expected<float *> allocateArena(int64_t bytes) {
    const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    int64_t myShift = 0;
    if (options_.transport == MpiTransport::Get) {
      // MPI_Win_allocate does not promise 64-byte alignment: allocate a margin and start
      // the arena at the first aligned byte; every process learns every other's start.
      void *base = nullptr;
      if (MPI_Win_allocate(static_cast<MPI_Aint>(rounded + kAlign), 1, MPI_INFO_NULL, comm_, &base,
                           &window_) != MPI_SUCCESS)
        return stringError(
            fmt::format("cannot allocate the arena of {} bytes as an MPI window", bytes));
      const uintptr_t p = reinterpret_cast<uintptr_t>(base);
      myShift = static_cast<int64_t>((kAlign - p % kAlign) % kAlign);
      arena_ = reinterpret_cast<float *>(p + static_cast<uintptr_t>(myShift));
    } else {
      hostArena_ = std::aligned_alloc(kAlign, static_cast<size_t>(rounded));
      if (!hostArena_)
        return stringError(fmt::format("cannot allocate the arena of {} bytes", bytes));
      arena_ = static_cast<float *>(hostArena_);
    }
    shift_.assign(size_, 0);
    MPI_Allgather(&myShift, 1, MPI_INT64_T, shift_.data(), 1, MPI_INT64_T, comm_);
    return arena_;
  }

  /// The arena at byte `offset`.
  char *at(int64_t offset) const { return reinterpret_cast<char *>(arena_) + offset; }

  MPI_Datatype keep(MPI_Datatype t) {
    if (t != MPI_FLOAT && t != MPI_UINT16_T)
      types_.push_back(t);
    return t;
  }

  /// Completes every region coming in: gets have landed, receives are done. Sends stay in
  /// flight: waiting for them here, before this process has posted the receives of the same
  /// phase that others' sends wait for, could deadlock.
  void arrive() {
    if (options_.transport == MpiTransport::Get) {
      if (pending_)
        MPI_Win_flush_local_all(window_);
      pending_ = false;
    } else {
      waitAll(receiving_);
    }
  }

  /// Completes every transfer: the others' reads of this arena are done too (at the
  /// synchronisation points, after which the memory plan may reuse what they read).
  void complete() {
    arrive();
    waitAll(sending_);
  }

  static void waitAll(std::vector<MPI_Request> &requests) {
    if (requests.empty())
      return;
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    requests.clear();
  }

  /// All processes meet, and the window's memory is consistent with the local stores on
  /// both sides of the meeting.
  void windowBarrier() {
    MPI_Win_sync(window_);
    MPI_Barrier(comm_);
    MPI_Win_sync(window_);
  }

  MpiBackendOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  size_t steps_ = 0; ///< in each worker's program
  MPI_Win window_ = MPI_WIN_NULL;
  void *hostArena_ = nullptr;
  float *arena_ = nullptr;
  std::vector<int64_t> shift_; ///< per process, where its arena starts in its window
  float *staging_ = nullptr;
  int64_t stagingBytes_ = 0;
  std::unordered_map<const RegionCopy *, Transfer> transfers_;
  std::vector<std::vector<Send>> sends_; ///< per phase: fetch of step i at 2i, assembly 2i+1
  std::vector<MPI_Datatype> types_;
  std::vector<MPI_Request> sending_, receiving_;
  bool pending_ = false;
  bool clean_ = false;
};

} // namespace

std::unique_ptr<Backend> makeMpiBackend(const MpiBackendOptions &options) {
  return std::make_unique<MpiBackend>(options);
}

} // namespace tofu
