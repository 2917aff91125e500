// The NCCL backend: this process's worker on the CUDA backend, other workers' regions over
// NCCL, bootstrapped by MPI.
#include "runtime/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <unordered_map>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/cuda/device_kernels.h"
#include "runtime/cuda/launch_params.h"

namespace tofu {
namespace {

using cuda::BoxCopyParams;

using loops::Element;

/// One region crossing processes in a phase, in the sender's element type (a bfloat16
/// region crosses as its bits). The sender packs it into staging unless it is contiguous
/// in the arena; the receiver takes it straight into the arena where it is contiguous there,
/// of the same type and not combined, else into staging and unpacks (converting, combining)
/// it.
struct Transfer {
  unsigned peer = 0;
  int64_t elements = 0;
  Element wire = Element::F32; ///< the sender's element type
  bool direct = false;         ///< contiguous in the arena, straight from or into it
  int64_t arenaOffset = 0;     ///< direct: the region's first byte in the arena
  int64_t stagingOffset = 0;   ///< otherwise: its first byte in staging
  BoxCopyParams pack; ///< arena -> staging (sender) or staging -> arena (receiver), staging's
                      ///< part at its start
};

ncclDataType_t ncclType(Element e) { return e == Element::BF16 ? ncclBfloat16 : ncclFloat; }

class NcclBackend final : public ForwardingBackend {
public:
  explicit NcclBackend(NcclBackendOptions o) : options_(std::move(o)) {
    MPI_Comm_dup(MPI_COMM_WORLD, &mpi_);
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
  }

  ~NcclBackend() override {
    if (comm_) {
      // Destroying waits for the others; after a failure only aborting cannot hang.
      if (clean_)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    if (staging_)
      cudaFree(staging_);
    inner_.reset();
    if (clean_)
      MPI_Comm_free(&mpi_);
  }

  std::string name() const override { return "nccl"; }
  /// The CUDA backend computes bfloat16 tensors; their regions cross as their bits.
  bool supportsBfloat16() const override { return true; }
  bool runsWorker(unsigned w) const override { return static_cast<int>(w) == rank_; }

  llvm::Error prepare(const Program &program) override {
    if (static_cast<int>(program.workers) != size_)
      return stringError(fmt::format("the plan has {} workers but {} processes run it (start "
                                     "one process per worker: mpirun -np {})",
                                     program.workers, size_, program.workers));
    // One GPU per process: the process's rank among those of its machine picks it.
    int onNode = 1;
    const int local = ncclProcessDevice(&onNode);
    int devices = 0;
    if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess)
      return stringError(fmt::format("no usable CUDA device: {} ({})", cudaGetErrorName(e),
                                     cudaGetErrorString(e)));
    if (devices < onNode)
      return stringError(fmt::format("{} processes on this machine but {} GPUs: the NCCL "
                                     "backend runs one process per GPU",
                                     onNode, devices));
    const unsigned me = static_cast<unsigned>(rank_);
    NcclBackendOptions o = options_;
    o.cuda.device = local;
    o.cuda.workers = {me};
    if (cudaError_t e = cudaSetDevice(local); e != cudaSuccess)
      return cudaError(e, fmt::format("selecting GPU {}", local));
    inner_ = makeCudaBackend(o.cuda);
    if (llvm::Error e = inner_->prepare(program))
      return e;
    const CudaWorkerDevice dev = cudaWorkerDevice(*inner_, me);
    arena_ = dev.arena;
    stream_ = static_cast<cudaStream_t>(dev.stream);

    // The communicator: the first process's id, over MPI.
    ncclUniqueId id{};
    ncclResult_t made = rank_ == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_);
    if (made != ncclSuccess)
      return ncclError(made, "making the NCCL unique id");
    if (ncclResult_t r = ncclCommInitRank(&comm_, size_, id, rank_); r != ncclSuccess)
      return ncclError(r, "joining the NCCL communicator");

    // Per phase (backend.h: crossingPhase): what the others fetch from this worker, in each
    // receiver's order, and what it fetches.
    steps_ = program.worker[me].steps.size();
    sends_.assign(2 * steps_ + 1, {});
    receives_.assign(2 * steps_ + 1, {});
    std::vector<int64_t> slotBytes(2 * steps_ + 1, 0);
    // Each staged region starts 16-byte aligned.
    auto stage = [&](size_t slot, const Transfer &t) {
      const int64_t at = slotBytes[slot];
      slotBytes[slot] += (t.elements * elementBytes(t.wire) + 15) / 16 * 16;
      return at;
    };
    auto addSend = [&](size_t slot, unsigned to, const RegionCopy &c) -> llvm::Error {
      const int64_t n = boxElements(c.box);
      if (n == 0)
        return llvm::Error::success();
      Transfer t;
      t.peer = to;
      t.elements = n;
      t.wire = c.srcElement;
      t.pack = cuda::boxCopyParams(c.box, 0, c.srcBox, c.srcOffset / elementBytes(c.srcElement),
                                   c.box, cuda::copyCombine(nullptr), t.wire, c.srcElement);
      t.direct = cuda::isContiguousCopy(t.pack);
      if (t.direct)
        t.arenaOffset = t.pack.srcOffset * elementBytes(t.wire);
      else
        t.stagingOffset = stage(slot, t);
      sends_[slot].push_back(t);
      return llvm::Error::success();
    };
    auto addReceive = [&](size_t slot, const RegionCopy &c,
                          const ir::Reducer *reducer) -> llvm::Error {
      const int64_t n = boxElements(c.box);
      if (n == 0)
        return llvm::Error::success();
      Transfer t;
      t.peer = c.from;
      t.elements = n;
      t.wire = c.srcElement;
      t.pack = cuda::boxCopyParams(c.dstBox, c.dstOffset / elementBytes(c.dstElement), c.box, 0,
                                   c.box, cuda::copyCombine(reducer), c.dstElement, t.wire);
      t.direct = cuda::isContiguousCopy(t.pack);
      if (t.direct)
        t.arenaOffset = t.pack.dstOffset * elementBytes(c.dstElement);
      else
        t.stagingOffset = stage(slot, t);
      receives_[slot].push_back(t);
      byCopy_[&c] = {slot, receives_[slot].size() - 1};
      return llvm::Error::success();
    };
    if (llvm::Error e = forEachCopyFrom(program, me, addSend))
      return e;
    if (llvm::Error e = forEachCopyInto(program, me, addReceive))
      return e;
    // Staging is reused phase after phase: one stream runs them in order.
    stagingBytes_ = *std::max_element(slotBytes.begin(), slotBytes.end());
    if (stagingBytes_ > 0)
      if (cudaError_t e =
              cudaMalloc(reinterpret_cast<void **>(&staging_), static_cast<size_t>(stagingBytes_));
          e != cudaSuccess)
        return cudaError(e, fmt::format("allocating {} bytes of NCCL staging", stagingBytes_));
    return llvm::Error::success();
  }

  void enter(unsigned w, size_t step, Phase phase) override {
    const size_t slot = crossingPhase(step, phase, steps_);
    if (slot >= sends_.size() || (sends_[slot].empty() && receives_[slot].empty()))
      return;
    for (const Transfer &t : sends_[slot]) // packing precedes the group on the stream
      if (!t.direct)
        note(cuda::launchBoxCopy(t.pack, staging_ + t.stagingOffset, arena_, stream_),
             "packing a region");
    noteNccl(ncclGroupStart(), "ncclGroupStart");
    for (const Transfer &t : sends_[slot])
      noteNccl(ncclSend(t.direct ? arena_ + t.arenaOffset : staging_ + t.stagingOffset,
                        static_cast<size_t>(t.elements), ncclType(t.wire), static_cast<int>(t.peer),
                        comm_, stream_),
               "ncclSend");
    for (const Transfer &t : receives_[slot])
      noteNccl(ncclRecv(t.direct ? arena_ + t.arenaOffset : staging_ + t.stagingOffset,
                        static_cast<size_t>(t.elements), ncclType(t.wire), static_cast<int>(t.peer),
                        comm_, stream_),
               "ncclRecv");
    noteNccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  void copy(unsigned w, const RegionCopy &c, const ir::Reducer *reducer) override {
    if (c.from == w) {
      inner_->copy(w, c, reducer);
      return;
    }
    auto it = byCopy_.find(&c);
    if (it == byCopy_.end())
      return; // an empty region
    const Transfer &t = receives_[it->second.first][it->second.second];
    if (!t.direct) // received into staging at enter: into (or combined with) the arena now
      note(cuda::launchBoxCopy(t.pack, arena_, staging_ + t.stagingOffset, stream_),
           "unpacking a region");
  }

  llvm::Error finish(unsigned w) override {
    llvm::Error e = inner_->finish(w); // the stream has run: NCCL's work in it too
    if (!e && error_.empty()) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess)
        error_ = fmt::format("NCCL: {}", ncclGetErrorString(async));
    }
    if (e)
      return e;
    if (!error_.empty()) {
      std::string msg = std::move(error_);
      error_.clear();
      return stringError(msg);
    }
    clean_ = true;
    return llvm::Error::success();
  }

  BackendStats stats() const override {
    BackendStats s = inner_->stats();
    if (s.extraBytes.size() > static_cast<size_t>(rank_))
      s.extraBytes[rank_] += stagingBytes_;
    return s;
  }

private:
  static llvm::Error cudaError(cudaError_t e, const std::string &what) {
    return stringError(
        fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  static llvm::Error ncclError(ncclResult_t r, const std::string &what) {
    return stringError(fmt::format("{}: {}", what, ncclGetErrorString(r)));
  }
  void note(cudaError_t e, const char *what) {
    if (e != cudaSuccess && error_.empty())
      error_ = fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  void noteNccl(ncclResult_t r, const char *what) {
    if (r != ncclSuccess && error_.empty())
      error_ = fmt::format("{}: {}", what, ncclGetErrorString(r));
  }

  NcclBackendOptions options_;
  MPI_Comm mpi_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  size_t steps_ = 0; ///< in each worker's program
  ncclComm_t comm_ = nullptr;
  char *arena_ = nullptr;
  cudaStream_t stream_ = nullptr;
  char *staging_ = nullptr;
  int64_t stagingBytes_ = 0;
  std::vector<std::vector<Transfer>> sends_, receives_; ///< per phase
  std::unordered_map<const RegionCopy *, std::pair<size_t, size_t>> byCopy_;
  std::string error_; ///< the first failure of an operation that returns none
  bool clean_ = false;
};

} // namespace

int ncclProcessDevice(int *processesOnMachine) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, onNode = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &onNode);
  MPI_Comm_free(&node);
  if (processesOnMachine)
    *processesOnMachine = onNode;
  return local;
}

std::unique_ptr<Backend> makeNcclBackend(const NcclBackendOptions &options) {
  return std::make_unique<NcclBackend>(options);
}

} // namespace tofu
