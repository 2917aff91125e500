// The processes mpirun started, as a ProcessGroup (runtime/process_group.h): MPI is
// initialised when the group is made and finalised at exit.
#ifndef TOFU_RUNTIME_MPI_MPI_PROCESS_GROUP_H
#define TOFU_RUNTIME_MPI_MPI_PROCESS_GROUP_H

#include "runtime/process_group.h"

namespace tofu {

/// Initialises MPI (funnelled threads: only the thread that made it calls MPI) and returns
/// the group of MPI_COMM_WORLD. Made once per process; later calls return the same group.
ProcessGroup &mpiProcessGroup(int &argc, char **&argv);

} // namespace tofu

#endif // TOFU_RUNTIME_MPI_MPI_PROCESS_GROUP_H
