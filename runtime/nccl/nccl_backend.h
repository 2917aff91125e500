// The NCCL backend: one process per GPU (`mpirun -np k`, k GPUs), each running the worker
// whose index is its rank in MPI_COMM_WORLD on the CUDA backend (runtime/cuda/cuda_backend.h)
// over its own device arena, and moving the regions that cross processes with NCCL.
//
// MPI bootstraps it: the first process makes the NCCL unique id and broadcasts it over MPI,
// then every process joins one communicator of k ranks on the GPU whose index is its rank
// among the processes of its machine (one process per GPU: more processes than GPUs on a
// machine is an error). Every process knows every worker's program, so as a worker enters
// a phase (the fetch of a step, its assembly, the carries) it issues, in one NCCL group on
// its stream, the sends of what the others fetch from it in that phase and the receives of
// what it fetches there. Both sides list a pair's transfers in the same order, and every
// process passes the phases in the same order, so the groups match without any host
// synchronisation; the stream orders every transfer after the kernels that wrote its region
// and before those that read it, so the program's synchronisation points need no barrier.
// Regions that are not contiguous in the arena are packed into (or unpacked from) a device
// staging buffer by the box-copy kernel; partial results are received into the staging
// buffer and combined into the tile by the worker that assembles it, as on one GPU.
//
// This runs only where a process can have a GPU of its own; elsewhere prepare fails with
// the CUDA runtime's reason.
#ifndef TOFU_RUNTIME_NCCL_NCCL_BACKEND_H
#define TOFU_RUNTIME_NCCL_NCCL_BACKEND_H

#include <memory>

#include "runtime/cuda/cuda_backend.h"

namespace tofu {

struct NcclBackendOptions {
  /// Its `device` and `workers` are set by the backend (the process's GPU and worker).
  CudaBackendOptions cuda;
};

/// The GPU this process takes: its rank among the processes of its machine (collective over
/// MPI_COMM_WORLD); with `processesOnMachine`, how many processes its machine runs.
int ncclProcessDevice(int *processesOnMachine = nullptr);

/// A backend that runs the worker whose index is this process's rank in MPI_COMM_WORLD (MPI
/// initialised by the caller; the engine calls it from the caller's thread only).
/// `prepare` fails when the plan's worker count is not the number of processes, when this
/// machine has fewer GPUs than processes on it, or when NCCL cannot join. Every process must
/// create and prepare its backend together (joining the communicator is collective); a
/// process that fails between must abort the job.
std::unique_ptr<Backend> makeNcclBackend(const NcclBackendOptions &options = {});

} // namespace tofu

#endif // TOFU_RUNTIME_NCCL_NCCL_BACKEND_H
