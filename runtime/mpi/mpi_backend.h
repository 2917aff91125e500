// The MPI backend: one process per worker (`mpirun -np k`), each running its worker's
// program on the CPU backend's kernels over its own arena, and fetching the regions other
// workers hold over MPI. Only the process's own arena is allocated and only the kernels its
// worker launches are compiled.
//
// Two transports move regions, both describing a copy by MPI subarray datatypes over the
// arenas (no packing in our code):
//  - sendrecv (the default): matched MPI_Isend / MPI_Irecv. Every process knows every
//    worker's program, so the owner of a region posts its send as it enters the phase in
//    which the other worker fetches it; messages order every cross-process dependency, so
//    the program's synchronisation points need no barrier.
//  - get: each arena is the process's RMA window (MPI_Win_allocate); a copy is an MPI_Get
//    from the owner's window, issued when the engine asks and completed before the kernel
//    that reads it (one passive-target epoch over the whole run); every synchronisation
//    point is a barrier with the window's memory synchronised around it. Measured slower
//    (bench/mpi_bench.sh: up to 8x on a WResNet, whose step has hundreds of synchronisation
//    points, and never more than 5% faster), so it is the alternative.
// Partial results are combined by the worker that assembles the tile, as on threads: the
// region arrives in a staging buffer (the largest such region, reported as memory beside the
// arena) and is reduced into the tile.
#ifndef TOFU_RUNTIME_MPI_MPI_BACKEND_H
#define TOFU_RUNTIME_MPI_MPI_BACKEND_H

#include <memory>
#include <string>

#include "runtime/cpu_backend.h"

namespace tofu {

enum class MpiTransport { SendRecv, Get };

/// Parses "sendrecv" or "get" into `out`; false for anything else.
bool parseMpiTransport(const std::string &name, MpiTransport &out);
const char *mpiTransportName(MpiTransport t);

struct MpiBackendOptions {
  CpuBackendOptions cpu; ///< its `workers` and `allocateArena` are set by the backend
  MpiTransport transport = MpiTransport::SendRecv;
};

/// A backend that runs the worker whose index is this process's rank in MPI_COMM_WORLD (MPI
/// initialised by the caller with at least MPI_THREAD_FUNNELED; the engine calls it from
/// the caller's thread only). `prepare` fails when the plan's worker count is not the
/// number of processes. Every process must create, prepare and destroy its backend
/// together (windows are collective); a process that fails between must abort the job.
std::unique_ptr<Backend> makeMpiBackend(const MpiBackendOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_MPI_MPI_BACKEND_H
