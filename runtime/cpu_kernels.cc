// Batch compilation, the on-disk cache and dlopen of generated C++ kernels.
#include "runtime/cpu_kernels.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "support/bf16.h"
#include "support/files.h"

extern char **environ;

namespace tofu {
namespace {

std::string envOr(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// An exclusive lock (flock) on the file `path`, created if missing, while the object lives;
/// the holder removes the file when it lets go. A process that opened the file before its
/// removal may then hold the removed file's lock while a newcomer holds the new one's: both
/// then check the unit's cache entry and at worst compile it twice, as without a lock. Where
/// the file cannot be opened it locks nothing.
class UnitLock {
public:
  explicit UnitLock(std::string path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    while (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        ::close(fd_);
        fd_ = -1;
      }
  }
  UnitLock(const UnitLock &) = delete;
  UnitLock &operator=(const UnitLock &) = delete;
  ~UnitLock() {
    if (fd_ < 0)
      return;
    ::unlink(path_.c_str());
    ::close(fd_);
  }

private:
  std::string path_;
  int fd_;
};

/// Runs `command` with /bin/sh; returns its exit status (-1 when it could not start).
int runShell(const std::string &command) {
  pid_t pid;
  const char *argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char **>(argv), environ) != 0)
    return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The file at `path`, cut to `limit` bytes; empty when it cannot be read.
std::string readFile(const std::string &path, size_t limit) {
  auto bytes = tofu::readFile(path);
  std::string s = bytes ? std::move(*bytes) : (llvm::consumeError(bytes.takeError()), "");
  if (s.size() > limit)
    s = s.substr(0, limit) + "\n[...]";
  return s;
}

std::string quote(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// What identifies the compiler in cache keys: its path and what `--version` says (its
/// maker and full version), asked once per compiler.
const std::string &compilerIdentity(const std::string &compiler) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(compiler);
  if (it != known.end())
    return it->second;
  std::string id = compiler;
  if (FILE *p = ::popen((compiler + " --version 2>/dev/null").c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p))
      id += buf;
    ::pclose(p);
  }
  return known.emplace(compiler, id).first->second;
}

/// The prelude every C++ unit starts with, precompiled once per compiler and flags into the
/// cache (GCC's precompiled headers: `H.gch` beside `H`), for units to include instead of
/// parsing its headers again: a third of a small unit's compile time. Returns the header's
/// path, or "" where the compiler (`identity`: compilerIdentity's) is not GCC or the header
/// does not build (units then carry the prelude's text, as before). GCC checks a
/// precompiled header against the unit's flags and falls back to the header's text where
/// they differ, so a unit compiles the same either way.
std::string precompiledPrelude(const std::string &dir, const std::string &compiler,
                               const std::string &identity, const std::string &flags) {
  static std::mutex mu;
  static std::map<std::string, std::string> made; // key -> header ("" failed)
  const std::string &prelude = kernelPrelude(KernelDialect::Cpp);
  const std::string key =
      fmt::format("{:016x}", stableHash(identity + "\n" + flags + "\n" + prelude));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = made.find(dir + "/" + key); it != made.end())
    return it->second;
  std::string &header = made[dir + "/" + key];
  // GCC's --version names the Free Software Foundation; clang's names clang.
  if (identity.find("Free Software Foundation") == std::string::npos ||
      identity.find("clang") != std::string::npos)
    return header;
  const std::string h = dir + "/prelude-" + key + ".h";
  if (h.find_first_of("\"\\\n") != std::string::npos) // not writable in an #include
    return header;
  if (exists(h + ".gch") && exists(h))
    return header = h;
  // Written under private names, then renamed: processes that build it at once each
  // rename a whole file.
  const std::string tmp = fmt::format("{}.{}", h, ::getpid());
  {
    std::ofstream f(tmp);
    f << prelude;
    if (!f)
      return header;
  }
  const std::string cmd = fmt::format("{} {} -x c++-header -o {} {} 2>/dev/null", compiler, flags,
                                      quote(tmp + ".gch"), quote(tmp));
  if (runShell(cmd) != 0 || std::rename(tmp.c_str(), h.c_str()) != 0 ||
      std::rename((tmp + ".gch").c_str(), (h + ".gch").c_str()) != 0) {
    std::remove(tmp.c_str());
    std::remove((tmp + ".gch").c_str());
    return header;
  }
  return header = h;
}

} // namespace

std::vector<KernelUnit> kernelUnits(const std::vector<const KernelSource *> &kernels,
                                    KernelDialect dialect, unsigned perUnit, size_t minUnits) {
  std::map<std::string, const KernelSource *> distinct;
  for (const KernelSource *k : kernels)
    distinct.emplace(k->name, k);
  if (distinct.empty())
    return {};
  perUnit = std::max(1u, perUnit);
  size_t count = std::max<size_t>((distinct.size() + perUnit - 1) / perUnit,
                                  std::min(minUnits, distinct.size()));
  std::vector<KernelUnit> units(count);
  size_t i = 0;
  for (const auto &[name, k] : distinct)
    units[i++ * count / distinct.size()].kernels.push_back(k);
  for (KernelUnit &u : units) {
    u.source = kernelPrelude(dialect);
    for (const KernelSource *k : u.kernels)
      u.source += "\n" + k->code;
  }
  return units;
}

void forEachInParallel(size_t n, unsigned jobs, const std::function<void(size_t)> &fn) {
  if (jobs == 0)
    jobs = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < std::min<size_t>(jobs, n); ++j)
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < n;)
        fn(i);
    });
  for (std::thread &t : threads)
    t.join();
}

std::string defaultKernelFlags() {
  return fmt::format("-O3 -march={} -fopenmp -fno-math-errno -fPIC -shared -std=c++17 -w",
                     envOr("TOFU_KERNEL_MARCH", "native"));
}

std::string defaultKernelCacheDir() {
  if (const char *d = std::getenv("TOFU_KERNEL_CACHE"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/tofu/kernels";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/tofu/kernels";
  return fmt::format("/tmp/tofu-kernels-{}", ::getuid());
}

CpuKernelLibrary::~CpuKernelLibrary() {
  for (void *h : handles_)
    ::dlclose(h);
}

CpuKernelLibrary::Fn CpuKernelLibrary::find(const std::string &name) const {
  auto it = fns_.find(name);
  return it == fns_.end() ? nullptr : it->second;
}

llvm::Expected<VectorizationReport> vectorizationReport(const KernelSource &k,
                                                        const KernelCompileOptions &options) {
  const std::string source = kernelPrelude(KernelDialect::Cpp) + k.code;
  const std::string compiler = options.compiler.empty() ? envOr("CXX", "c++") : options.compiler;
  char dirTemplate[] = "/tmp/tofu-vec-XXXXXX";
  if (!::mkdtemp(dirTemplate))
    return stringError(
        fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
  const std::string dir = dirTemplate, src = dir + "/kernel.cc", log = dir + "/remarks.txt";
  {
    std::ofstream f(src);
    f << source;
  }
  const std::string cmd = fmt::format("{} {} -c -o /dev/null -fopt-info-vec-all {} 2> {}", compiler,
                                      options.flags, quote(src), quote(log));
  const int status = runShell(cmd);
  const std::string remarks = readFile(log, size_t(64) << 20);
  std::remove(src.c_str());
  std::remove(log.c_str());
  ::rmdir(dir.c_str());
  if (status != 0)
    return stringError(
        fmt::format("compiling for the vectorisation report failed (exit {}): {}\n{}", status, cmd,
                    remarks.substr(0, 4000)));
  // The source's lines (1-based), and per line the remarks about it.
  std::vector<std::string> lines{""};
  for (size_t at = 0; at <= source.size();) {
    size_t end = source.find('\n', at);
    if (end == std::string::npos)
      end = source.size();
    lines.push_back(source.substr(at, end - at));
    at = end + 1;
  }
  std::map<size_t, std::vector<std::string>> about;
  std::istringstream rs(remarks);
  for (std::string r; std::getline(rs, r);) {
    const size_t colon = r.find(".cc:");
    if (colon == std::string::npos)
      continue;
    about[std::strtoul(r.c_str() + colon + 4, nullptr, 10)].push_back(r);
  }
  const auto trimmed = [](const std::string &l) {
    const size_t b = l.find_first_not_of(' ');
    return b == std::string::npos ? std::string() : l.substr(b);
  };
  // The line after which a compound statement opened on line `from` closes.
  const auto closing = [&](size_t from) {
    long depth = 0;
    for (size_t j = from; j < lines.size(); ++j) {
      depth += std::count(lines[j].begin(), lines[j].end(), '{') -
               std::count(lines[j].begin(), lines[j].end(), '}');
      if (depth <= 0 || (j > from && depth == 1 && trimmed(lines[j]) == "} else {"))
        return j;
    }
    return lines.size() - 1;
  };
  VectorizationReport report;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (trimmed(lines[i]) != "if (a->fast) {")
      continue;
    const size_t fastEnd = closing(i);
    for (size_t p = i + 1; p + 1 < fastEnd; ++p) {
      const std::string t = trimmed(lines[p]);
      if (t.rfind("#pragma omp simd", 0) != 0 && t.rfind("#pragma omp parallel for simd", 0) != 0)
        continue;
      const size_t loop = p + 1;
      const size_t end = lines[loop].back() == '{' ? closing(loop) : loop + 1;
      ++report.simdLoops;
      bool done = false;
      std::string why;
      for (size_t l = loop; l <= end && !done; ++l)
        for (const std::string &r : about[l]) {
          done |= r.find("optimized: loop vectorized") != std::string::npos ||
                  r.find("__builtin_memset") != std::string::npos ||
                  r.find("__builtin_memcpy") != std::string::npos;
          if (why.empty() && r.find("not vectorized:") != std::string::npos)
            why = r.substr(r.find("not vectorized:"));
        }
      if (done)
        ++report.vectorized;
      else
        report.missed.push_back(fmt::format("line {}: {}{}", loop, trimmed(lines[loop]),
                                            why.empty() ? "" : " (" + why + ")"));
    }
    i = fastEnd;
  }
  return report;
}

llvm::Error CpuKernelLibrary::add(const std::vector<KernelSource> &kernels,
                                  const KernelCompileOptions &options) {
  auto start = std::chrono::steady_clock::now();
  // Kernels not loaded yet.
  std::vector<const KernelSource *> todo;
  for (const KernelSource &k : kernels)
    if (!fns_.count(k.name))
      todo.push_back(&k);
  if (todo.empty())
    return llvm::Error::success();
  unsigned jobs = options.jobs ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  const std::string dir = options.cacheDir.empty() ? defaultKernelCacheDir() : options.cacheDir;
  if (!makeDirs(dir))
    return stringError(fmt::format("cannot create the kernel cache directory '{}': {}", dir,
                                   std::strerror(errno)));
  const std::string compiler = options.compiler.empty() ? envOr("CXX", "c++") : options.compiler;
  const std::string &identity = compilerIdentity(compiler);
  const std::string &preludeText = kernelPrelude(KernelDialect::Cpp);

  // Kernels already compiled into some cached unit, found through the per-kernel index
  // (`K.kernel` holds the name of the shared object that defines the kernel whose key is K).
  // Units are keyed by all their kernels, so without it a kernel that two batches share
  // with different companions would be compiled once per batch.
  const std::string config =
      identity + "\n" + options.flags + "\n" + options.libs + "\n" + preludeText + "\n";
  auto indexPath = [&](const KernelSource &k) {
    return fmt::format("{}/{:016x}.kernel", dir, stableHash(config + k.code));
  };
  std::map<std::string, std::vector<const KernelSource *>> cached; // shared object -> kernels
  {
    std::vector<const KernelSource *> rest;
    std::map<std::string, bool> seen;
    for (const KernelSource *k : todo) {
      std::string so = readFile(indexPath(*k), 256);
      if (!so.empty() && so.find('/') == std::string::npos && so.find('\n') == std::string::npos) {
        auto it = seen.find(so);
        if (it == seen.end())
          it = seen.emplace(so, exists(dir + "/" + so)).first;
        if (it->second) {
          cached[so].push_back(k);
          continue;
        }
      }
      rest.push_back(k);
    }
    todo = std::move(rest);
  }

  // Spread small batches over every job rather than filling the first units.
  std::vector<KernelUnit> parts =
      kernelUnits(todo, KernelDialect::Cpp, options.kernelsPerUnit, jobs);
  for (const auto &[so, ks] : cached) {
    KernelUnit u;
    u.kernels = ks;
    parts.push_back(std::move(u));
  }
  for (const KernelUnit &u : parts)
    stats_.kernels += static_cast<unsigned>(u.kernels.size());

  struct Unit : KernelUnit {
    std::string key, so;
    std::string error;
    bool compiled = false;
  };
  std::vector<Unit> units(parts.size());
  auto found = cached.begin();
  for (size_t n = 0; n < parts.size(); ++n) {
    Unit &u = units[n];
    static_cast<KernelUnit &>(u) = std::move(parts[n]);
    if (u.source.empty()) { // found through the index
      u.so = dir + "/" + (found++)->first;
      continue;
    }
    u.key = fmt::format("{:016x}", stableHash(identity + "\n" + options.flags + "\n" +
                                              options.libs + "\n" + u.source));
    u.so = dir + "/" + u.key + ".so";
  }

  // The prelude precompiled, where some unit is to compile.
  std::string prelude;
  if (std::any_of(units.begin(), units.end(), [](const Unit &u) { return !exists(u.so); }))
    prelude = precompiledPrelude(dir, compiler, identity, options.flags);
  forEachInParallel(units.size(), jobs, [&](size_t n) {
    Unit &u = units[n];
    if (u.source.empty())
      return;
    // Each kernel's index entry, written by rename like the unit (a failure to write one
    // only costs a later compile).
    auto index = [&] {
      for (const KernelSource *k : u.kernels) {
        const std::string path = indexPath(*k);
        const std::string tmp = fmt::format("{}.{}.{}.tmp", path, ::getpid(), n);
        {
          std::ofstream f(tmp);
          f << u.key << ".so";
          if (!f)
            continue;
        }
        if (std::rename(tmp.c_str(), path.c_str()) != 0)
          std::remove(tmp.c_str());
      }
    };
    if (exists(u.so)) {
      index();
      return;
    }
    // Processes that would compile the unit at once (tests in parallel, the workers under
    // mpirun) take turns; the later ones find it compiled.
    UnitLock lock(u.so + ".lock");
    if (exists(u.so)) {
      index();
      return;
    }
    // Private names until the rename: processes compiling the same unit at once (one per
    // worker under mpirun) must not truncate each other's source while a compiler reads it.
    std::string tmp = fmt::format("{}.{}.{}.tmp", u.so, ::getpid(), n);
    std::string src = tmp + ".cc";
    std::string log = tmp + ".log";
    {
      std::ofstream f(src);
      if (!prelude.empty() && u.source.compare(0, preludeText.size(), preludeText) == 0)
        f << "#include \"" << prelude << "\"\n" << u.source.substr(preludeText.size());
      else
        f << u.source;
      if (!f) {
        u.error = "cannot write " + src;
        return;
      }
    }
    std::string cmd = fmt::format("{} {} -o {} {} {} 2> {}", compiler, options.flags, quote(tmp),
                                  quote(src), options.libs, quote(log));
    int status = runShell(cmd);
    if (status != 0) {
      u.error = fmt::format("compiling generated kernels failed (exit {}): {}\nsource: {}\n{}",
                            status, cmd, src, readFile(log, 4000));
      std::remove(tmp.c_str());
      std::remove(log.c_str());
      return;
    }
    std::remove(log.c_str());
    std::remove(src.c_str());
    if (std::rename(tmp.c_str(), u.so.c_str()) != 0) {
      u.error = fmt::format("cannot move {} into the cache: {}", tmp, std::strerror(errno));
      return;
    }
    u.compiled = true;
    index();
  });

  // The OpenMP runtime the kernels load must outlive them: its idle pool threads would run
  // unmapped code once the last kernel library is closed.
  static void *openmp = ::dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  (void)openmp;
  for (Unit &u : units) {
    if (!u.error.empty())
      return stringError(u.error);
    void *h = ::dlopen(u.so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      return stringError(fmt::format("cannot load compiled kernels {}: {}", u.so, ::dlerror()));
    handles_.push_back(h);
    for (const KernelSource *k : u.kernels) {
      auto fn = reinterpret_cast<Fn>(::dlsym(h, k->name.c_str()));
      if (!fn)
        return stringError(fmt::format("{} has no kernel {}", u.so, k->name));
      fns_[k->name] = fn;
    }
    stats_.units += 1;
    stats_.unitsCompiled += u.compiled ? 1 : 0;
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return llvm::Error::success();
}

Tensor runOnRegions(const InstOp &op, const Shapes &shapes,
                    const std::vector<const Tensor *> &inputs, const std::vector<Range> &ranges,
                    const std::function<void(const std::vector<Box> &regions,
                                             const float *const *in, float *out)> &call) {
  std::vector<Box> regions = inputRegions(op, shapes, ranges);
  std::vector<std::vector<float>> buffers(inputs.size());
  std::vector<const float *> ptrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &t = *inputs[i];
    const Box &box = regions[i];
    std::vector<int64_t> ext;
    for (const Range &r : box)
      ext.push_back(r.size());
    int64_t n = boxElements(box);
    buffers[i].resize(std::max<int64_t>(n, 1));
    std::vector<int64_t> c(box.size()), abs(box.size());
    for (int64_t k = 0; k < n; ++k) {
      unflatten(k, ext, c.data());
      for (size_t d = 0; d < box.size(); ++d)
        abs[d] = box[d].lo + c[d];
      buffers[i][k] = static_cast<float>(t.data[t.offset(abs.data())]);
    }
    ptrs[i] = buffers[i].data();
  }
  std::vector<int64_t> shape;
  for (unsigned v : op.outputVars)
    shape.push_back(ranges[v].size());
  Tensor out(shape);
  std::vector<float> result(std::max<int64_t>(out.size(), 1));
  call(regions, ptrs.data(), result.data());
  for (int64_t k = 0; k < out.size(); ++k)
    out.data[k] = result[k];
  return out;
}

llvm::Expected<Tensor> runKernel(CpuKernelLibrary::Fn fn, const InstOp &op, const Shapes &shapes,
                                 const std::vector<const Tensor *> &inputs,
                                 const std::vector<Range> &ranges, int threads,
                                 const KernelTypes &types) {
  return runOnRegions(
      op, shapes, inputs, ranges,
      [&](const std::vector<Box> &regions, const float *const *in, float *out) {
        withKernelBuffers(
            op, ranges, regions, in, out, types, [&](const float *const *given, float *dst) {
              std::vector<int64_t> ints = kernelInts(op, shapes, ranges, regions);
              std::vector<float> scratch(kernelScratchBytes(op, ranges) / sizeof(float));
              TofuKernelArgs args{
                  ints.data(), given,
                  dst,         readsInsideRegions(op, shapes, ranges, regions) ? 1 : 0,
                  threads,     scratch.data()};
              fn(&args);
            });
      });
}

void withKernelBuffers(const InstOp &op, const std::vector<Range> &ranges,
                       const std::vector<Box> &regions, const float *const *in, float *out,
                       const KernelTypes &types,
                       const std::function<void(const float *const *in, float *out)> &call) {
  // Buffers of bfloat16 bits where the kernel's types say so. Their arrays go through the
  // float pointers of the ABI, as the engines' arenas do.
  std::vector<std::vector<uint16_t>> narrow(regions.size());
  std::vector<const float *> given(in, in + regions.size());
  for (size_t i = 0; i < regions.size(); ++i)
    if (types.input(i) == loops::Element::BF16) {
      const size_t n = static_cast<size_t>(std::max<int64_t>(boxElements(regions[i]), 1));
      narrow[i].resize(n);
      toBf16(in[i], narrow[i].data(), n);
      given[i] = reinterpret_cast<const float *>(narrow[i].data());
    }
  int64_t outElements = 1;
  for (unsigned v : op.outputVars)
    outElements *= ranges[v].size();
  const size_t outN = static_cast<size_t>(std::max<int64_t>(outElements, 1));
  std::vector<uint16_t> narrowOut(types.output == loops::Element::BF16 ? outN : 0);
  call(given.data(), narrowOut.empty() ? out : reinterpret_cast<float *>(narrowOut.data()));
  if (!narrowOut.empty())
    fromBf16(narrowOut.data(), out, outN);
}

} // namespace tofu
