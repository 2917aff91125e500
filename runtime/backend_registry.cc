// The registry of backends by name (backend_registry.h).
#include "runtime/backend_registry.h"

#include <algorithm>
#include <map>

namespace tofu {
namespace {

std::map<std::string, BackendEntry> &registry() {
  static std::map<std::string, BackendEntry> entries; // made on first use: no init order
  return entries;
}

} // namespace

void registerBackend(BackendEntry entry) {
  std::string name = entry.name;
  registry()[name] = std::move(entry);
}

const BackendEntry *findBackend(const std::string &name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

llvm::Error sameProgramOnEvery(const Program &program, ProcessGroup &group) {
  if (group.sameOnEvery(std::hash<std::string>()(programDump(program))))
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "the processes built different programs from the same model "
                                 "(were they given different options or operator libraries?)");
}

std::string checkSettings(const BackendEntry &entry, const BackendSettings &settings) {
  if (entry.check)
    return entry.check(settings);
  return settings.mpiTransport.empty()
             ? std::string()
             : settings.names("mpi-transport") + " is for " + settings.names("backend") + " mpi";
}

std::vector<std::string> backendNames() {
  std::vector<const BackendEntry *> all;
  for (const auto &[name, entry] : registry())
    all.push_back(&entry);
  std::stable_sort(all.begin(), all.end(), [](const BackendEntry *a, const BackendEntry *b) {
    return a->order < b->order;
  });
  std::vector<std::string> names;
  for (const BackendEntry *e : all)
    names.push_back(e->name);
  return names;
}

} // namespace tofu
