// NVRTC compilation of generated CUDA kernels, with the disk cache.
#include "runtime/cuda/nvrtc_kernels.h"

#include <nvrtc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/cpu_kernels.h"
#include "support/files.h"

namespace tofu {
namespace {

struct Unit : KernelUnit {
  std::string path, error;
  bool compiled = false;
};

std::string compileUnit(Unit &u, const CubinOptions &options) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, u.source.c_str(), "tofu_kernels.cu", 0, nullptr, nullptr) !=
      NVRTC_SUCCESS)
    return "nvrtcCreateProgram failed";
  std::string archOpt = "--gpu-architecture=" + options.arch;
  const char *opts[] = {archOpt.c_str(), "--std=c++17", "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  std::string error;
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    if (log.size() > 4000)
      log = log.substr(0, 4000) + "\n[...]";
    error = fmt::format("NVRTC: {}\n{}", nvrtcGetErrorString(r), log);
  } else {
    size_t n = 0;
    nvrtcGetCUBINSize(prog, &n);
    std::string cubin(n, '\0');
    nvrtcGetCUBIN(prog, cubin.data());
    std::string tmp = fmt::format("{}.{}.tmp", u.path, ::getpid());
    std::ofstream f(tmp, std::ios::binary);
    f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    f.close();
    if (!f || std::rename(tmp.c_str(), u.path.c_str()) != 0)
      error = "cannot write " + u.path;
  }
  nvrtcDestroyProgram(&prog);
  return error;
}

} // namespace

llvm::Expected<std::vector<Cubin>> compileCubins(const std::vector<KernelSource> &kernels,
                                                 const CubinOptions &options) {
  std::vector<const KernelSource *> all;
  for (const KernelSource &k : kernels)
    all.push_back(&k);
  std::vector<KernelUnit> parts = kernelUnits(all, KernelDialect::Cuda, options.kernelsPerUnit, 1);
  std::vector<Cubin> out;
  if (parts.empty())
    return out;
  std::string dir = options.cacheDir.empty() ? defaultKernelCacheDir() : options.cacheDir;
  makeDirs(dir); // a failure shows when the cubin is written
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::vector<Unit> units(parts.size());
  for (size_t n = 0; n < parts.size(); ++n) {
    Unit &u = units[n];
    static_cast<KernelUnit &>(u) = std::move(parts[n]);
    u.path = fmt::format(
        "{}/{:016x}.cubin", dir,
        stableHash(fmt::format("nvrtc {}.{} {}\n{}", major, minor, options.arch, u.source)));
  }
  forEachInParallel(units.size(), options.jobs, [&](size_t n) {
    Unit &u = units[n];
    struct stat st;
    if (::stat(u.path.c_str(), &st) == 0)
      return;
    u.error = compileUnit(u, options);
    u.compiled = u.error.empty();
  });
  for (Unit &u : units) {
    if (!u.error.empty()) {
      std::string names;
      for (const KernelSource *k : u.kernels)
        names += " " + k->name;
      return stringError(fmt::format("compiling CUDA kernels{} failed: {}", names, u.error));
    }
    Cubin c;
    c.path = u.path;
    c.compiled = u.compiled;
    for (const KernelSource *k : u.kernels)
      for (std::string &name : cudaEntryPoints(*k))
        c.kernels.push_back(std::move(name));
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace tofu
