// tofu-run's runs in other processes: --batch's runs, each forked from a parent that loaded
// the operator library once, and --backend cuda or nccl handed to tofu-run-gpu.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "graph/onnx_import.h"
#include "nlohmann/json.hpp"
#include "planner/pipeline.h"
#include "support/files.h"
#include "support/sanitizer.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

int runGpuBuild(char **argv) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return fail("--backend " + backend +
                    ": cannot find this binary's folder (/proc/self/exe: " + ec.message() + ")",
                1);
  const std::string gpu = (self.parent_path() / "tofu-run-gpu").string();
  if (::access(gpu.c_str(), X_OK) != 0)
    return fail(fmt::format("--backend {} runs in tofu-run-gpu, the build with the CUDA "
                            "backends, which is not beside this tofu-run ({}: {}); build "
                            "//tofu_run:tofu-run-gpu or install it there",
                            std::string(backend), gpu, std::strerror(errno)),
                1);
  std::fflush(nullptr);
  ::execv(gpu.c_str(), argv);
  return fail(fmt::format("--backend {}: cannot run {}: {}", std::string(backend), gpu,
                          std::strerror(errno)),
              1);
}

namespace {

/// An operator library loaded once by a --batch parent, for the runs it forks.
struct Preloaded {
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags{sources};
  std::optional<llvm::Expected<tofu::OpLibrary>> library;
};
std::map<std::string, std::unique_ptr<Preloaded>> &preloaded() {
  static std::map<std::string, std::unique_ptr<Preloaded>> libraries;
  return libraries;
}

} // namespace

const tofu::OpLibrary *preloadedLibrary(const std::string &dir) {
  auto it = preloaded().find(dir);
  return it == preloaded().end() ? nullptr : &**it->second->library;
}

/// `tofu-run --batch FILE`: many --infer runs in one process. Each line of FILE is a JSON
/// object {"args": [ARG, ...], "stdout": PATH, "stderr": PATH, "timeout": SECONDS}: a
/// tofu-run command line without the program's name, where its output goes, and how long
/// it may take. The operator library is loaded once (and the tool's libraries linked
/// once); each run is a child forked from that state, so that runs share nothing else, a
/// crash ends only its own run, and a run past its timeout is killed. For each line, in
/// order, one JSON line on the standard output: {"line": N, "exit": STATUS}, {"line": N,
/// "signal": SIGNAL} or {"line": N, "timeout": SECONDS}, each with the run's "seconds". ONNX's node
/// tests run so (tools/oracles/onnx_node_tests.py): a run of tofu-run costs 0.25 s, most of it
/// linking and parsing the library, against a few milliseconds of work for a node test.
int runBatch(const char *argv0, const std::string &file, int (*run)(int, char **)) {
  auto runs = tofu::readFile(file, "a file of runs (JSON lines)");
  if (!runs)
    return fail("--batch: " + llvm::toString(runs.takeError()), 2);
  std::istringstream in(*runs);
  std::string text;
  for (unsigned lineNo = 1; std::getline(in, text); ++lineNo) {
    if (text.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::vector<std::string> args;
    std::string out = "/dev/null", err = "/dev/null";
    double timeout = 0;
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      args = j.at("args").get<std::vector<std::string>>();
      out = j.value("stdout", out);
      err = j.value("stderr", err);
      timeout = j.value("timeout", 0.0);
    } catch (const std::exception &e) {
      return fail(fmt::format("--batch: {} line {}: not a run ({})", file, lineNo, e.what()), 2);
    }
    if (std::find(args.begin(), args.end(), "--infer") == args.end())
      return fail(fmt::format("--batch: {} line {}: a batch runs --infer runs only", file, lineNo),
                  2);
    // The library, loaded here once for every run that names the same directory.
    std::string given;
    for (size_t a = 0; a + 1 < args.size(); ++a)
      if (args[a] == "--ops")
        given = args[a + 1];
      else if (args[a].rfind("--ops=", 0) == 0)
        given = args[a].substr(6);
    if (auto dir = tofu::findOpsDir(given, !given.empty())) {
      std::unique_ptr<Preloaded> &p = preloaded()[*dir];
      if (!p) {
        p = std::make_unique<Preloaded>();
        p->library.emplace(tofu::OpLibrary::load(*dir, p->diags));
        if (!*p->library) { // each run loads it again, and reports why it fails
          llvm::consumeError(p->library->takeError());
          preloaded().erase(*dir);
        } else if (llvm::Error e = tofu::prepareOnnxImport(**p->library)) {
          llvm::consumeError(std::move(e)); // each run's import reports it
        }
      }
    } else {
      llvm::consumeError(dir.takeError());
    }
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child < 0)
      return fail(fmt::format("--batch: cannot fork: {}", std::strerror(errno)));
    if (child == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0)
        ::_exit(127);
      ::close(o);
      ::close(e);
      std::vector<char *> av = {const_cast<char *>(argv0)};
      for (std::string &a : args)
        av.push_back(a.data());
      av.push_back(nullptr);
      int code = 1;
      try {
        code = run(static_cast<int>(av.size()) - 1, av.data());
      } catch (const std::bad_alloc &) {
        code = fail("out of memory");
      }
      llvm::outs().flush();
      llvm::errs().flush();
      std::fflush(nullptr);
#if TOFU_ASAN
      std::exit(code); // LeakSanitizer checks the run at exit
#else
      ::_exit(code); // the teardown of the parent's state (a tenth of a run) is left undone
#endif
    }
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    bool late = false;
    while (true) {
      const pid_t r = ::waitpid(child, &status, WNOHANG);
      if (r == child || (r < 0 && errno != EINTR))
        break;
      if (timeout > 0 && !late &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
              timeout) {
        ::kill(child, SIGKILL);
        late = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string result =
        late ? fmt::format("{{\"line\": {}, \"timeout\": {}, \"seconds\": {:.3f}}}", lineNo,
                           timeout, seconds)
        : WIFSIGNALED(status) ? fmt::format("{{\"line\": {}, \"signal\": {}, \"seconds\": {:.3f}}}",
                                            lineNo, WTERMSIG(status), seconds)
                              : fmt::format("{{\"line\": {}, \"exit\": {}, \"seconds\": {:.3f}}}",
                                            lineNo, WEXITSTATUS(status), seconds);
    std::printf("%s\n", result.c_str());
    std::fflush(stdout);
  }
  return 0;
}

} // namespace tofurun
