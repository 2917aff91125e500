// Backends by name. Each backend's registration library (runtime/register_cpu.cc,
// runtime/cuda/register_cuda.cc, runtime/mpi/register_mpi.cc, runtime/nccl/register_nccl.cc)
// adds an entry when it is linked, so a tool offers exactly the backends its build links and
// names none of them in its code.
//
// An entry makes the engine of a program on its backend. A backend whose workers are
// processes (MPI, NCCL) also names the process group its processes form; the tool makes the
// group before anything else, and passes it back with every engine it asks for.
#ifndef TOFU_RUNTIME_BACKEND_REGISTRY_H
#define TOFU_RUNTIME_BACKEND_REGISTRY_H

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "runtime/engine.h"
#include "runtime/process_group.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// What a tool's options say beyond EngineOptions, for the backends that read it.
struct BackendSettings {
  bool tf32 = false;        ///< CUDA: TF32 tensor-core products in cuBLAS and cuDNN
  std::string mpiTransport; ///< MPI: get or sendrecv (empty: the default)
  /// How messages name these settings and the backend's ("mpi-transport", "backend";
  /// support/errors.h).
  SettingNames names;
};

struct BackendEntry {
  std::string name;
  int order = 0; ///< the place in backendNames() (the default backend is the first)
  bool gpu = false;
  /// The processes the backend's workers run as (nullptr: threads of this process).
  ProcessGroup &(*processes)(int &argc, char **&argv) = nullptr;
  /// Checks the settings: a message saying what is wrong, or empty. Null: the backend
  /// reads none of the backend-specific settings (checkSettings refuses any given).
  std::function<std::string(const BackendSettings &)> check;
  /// The engine of `program` on this backend. `local`: in this process alone, whatever the
  /// group (the unpartitioned references a run compares with).
  std::function<llvm::Expected<std::unique_ptr<Engine>>(
      Program program, const EngineOptions &, const BackendSettings &, ProcessGroup &, bool local)>
      make;
};

/// Adds `entry` (a second entry of the same name replaces the first).
void registerBackend(BackendEntry entry);

/// The entry of `name`; nullptr when this build has none.
const BackendEntry *findBackend(const std::string &name);

/// What is wrong with `settings` for `entry` (its check, or none given where it has none);
/// empty when nothing is.
std::string checkSettings(const BackendEntry &entry, const BackendSettings &settings);

/// Every registered backend's name, in their order.
std::vector<std::string> backendNames();

/// For the backends whose processes each build the program on their own: an error unless
/// every process of `group` built the same one.
llvm::Error sameProgramOnEvery(const Program &program, ProcessGroup &group);

/// Registers an entry from a static object: `static BackendRegistration r({...});`.
struct BackendRegistration {
  explicit BackendRegistration(BackendEntry entry) { registerBackend(std::move(entry)); }
};

} // namespace tofu

#endif // TOFU_RUNTIME_BACKEND_REGISTRY_H
