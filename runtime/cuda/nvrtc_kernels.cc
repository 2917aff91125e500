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

namespace tofu {
namespace {

struct Unit {
  std::vector<const KernelSource *> kernels;
  std::string source, path, error;
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
  std::map<std::string, const KernelSource *> todo;
  for (const KernelSource &k : kernels)
    todo.emplace(k.name, &k);
  std::vector<Cubin> out;
  if (todo.empty())
    return out;
  std::string dir = options.cacheDir.empty() ? defaultKernelCacheDir() : options.cacheDir;
  for (size_t at = 1; at <= dir.size(); ++at)
    if (at == dir.size() || dir[at] == '/')
      ::mkdir(dir.substr(0, at).c_str(), 0755);
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  const unsigned perUnit = std::max(1u, options.kernelsPerUnit);
  unsigned jobs = options.jobs ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  size_t count = (todo.size() + perUnit - 1) / perUnit;
  std::vector<Unit> units(count);
  size_t i = 0;
  for (const auto &[name, k] : todo)
    units[i++ * count / todo.size()].kernels.push_back(k);
  for (Unit &u : units) {
    u.source = kernelPrelude(KernelDialect::Cuda);
    for (const KernelSource *k : u.kernels)
      u.source += "\n" + k->code;
    u.path = fmt::format("{}/{:016x}.cubin", dir,
                         stableHash(fmt::format("nvrtc {}.{} {}\n{}", major, minor, options.arch,
                                                u.source)));
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t n; (n = next++) < units.size();) {
      Unit &u = units[n];
      struct stat st;
      if (::stat(u.path.c_str(), &st) == 0)
        continue;
      u.error = compileUnit(u, options);
      u.compiled = u.error.empty();
    }
  };
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < std::min<size_t>(jobs, units.size()); ++j)
    threads.emplace_back(worker);
  for (std::thread &t : threads)
    t.join();
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
      c.kernels.push_back(k->name);
    out.push_back(std::move(c));
  }
  return out;
}

} // namespace tofu
