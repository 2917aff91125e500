// Graphs named on command lines.
#include "tdlc/graph_source.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tofu {
namespace {

/// Whether `dir` holds a .tdl file (in it or up to two folders down).
bool holdsTdl(const std::filesystem::path &dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return false;
  // Symbolic links inside are not followed and the walk stays shallow: a directory given by
  // mistake (/, a home) is answered quickly.
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tdl")
      return true;
    if (it.depth() >= 2)
      it.disable_recursion_pending();
  }
  return false;
}

} // namespace

llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave) {
  if (userGave) {
    if (!holdsTdl(given))
      return stringError("--ops " + given + ": no .tdl files there");
    return given;
  }
  std::vector<std::string> looked;
  if (const char *env = std::getenv("TOFU_OPS"); env && *env) {
    if (!holdsTdl(env))
      return stringError(std::string("TOFU_OPS=") + env + ": no .tdl files there");
    return std::string(env);
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) {
    // A Bazel build: the library is among the binary's runfiles.
    const std::filesystem::path runfiles = exe.string() + ".runfiles/tofu/ops";
    if (holdsTdl(runfiles))
      return runfiles.string();
    looked.push_back(runfiles.string());
  }
  if (!ec)
    for (std::filesystem::path d = exe.parent_path();; d = d.parent_path()) {
      for (const char *sub : {"share/tofu/ops", "ops"}) {
        const std::filesystem::path candidate = d / sub;
        if (holdsTdl(candidate))
          return candidate.string();
        looked.push_back(candidate.string());
      }
      if (d == d.parent_path())
        break;
    }
  if (holdsTdl("ops"))
    return std::string("ops");
  looked.push_back(std::filesystem::absolute("ops", ec).string());
  std::string list;
  std::sort(looked.begin(), looked.end());
  looked.erase(std::unique(looked.begin(), looked.end()), looked.end());
  for (const std::string &l : looked)
    list += "\n  " + l;
  return stringError("cannot find the operator library (.tdl files); give --ops DIR or set "
                     "TOFU_OPS. Looked in:" + list);
}

llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib, std::string *name) {
  llvm::Expected<Graph> g = stringError("no graph named");
  if (!source.model.empty()) {
    *name = source.model;
    g = buildModel(source.model, source.batch);
  } else if (!source.onnxFile.empty()) {
    *name = source.onnxFile;
    OnnxImportOptions options;
    options.batch = source.batch;
    options.dataInputs = source.dataInputs;
    g = importOnnx(source.onnxFile, lib, options);
  } else {
    *name = source.graphFile;
    auto buf = llvm::MemoryBuffer::getFile(source.graphFile);
    if (!buf)
      return stringError("cannot read " + source.graphFile + ": " + buf.getError().message());
    g = graphFromJson((*buf)->getBuffer().str());
  }
  if (!g)
    return g.takeError();
  if (llvm::Error e = checkGraph(*g, lib))
    return stringError(*name + ": " + llvm::toString(std::move(e)));
  return g;
}

} // namespace tofu
