// The graph a command line names: a zoo model, a JSON file or an ONNX model, checked.
#ifndef TOFU_TDLC_GRAPH_SOURCE_H
#define TOFU_TDLC_GRAPH_SOURCE_H

#include <string>

#include "graph/graph.h"

namespace tofu {

struct GraphSource {
  std::string model, graphFile, onnxFile; ///< exactly one set
  int64_t batch = 1;
  unsigned dataInputs = 1; ///< with onnxFile
};

/// The operator library's directory, wherever the tool runs from: `given` where the user
/// gave one (--ops), else $TOFU_OPS, else the library among the executable's Bazel runfiles
/// (the build tree), else the first of `share/tofu/ops` and `ops` holding .tdl files in the
/// executable's directory or a directory above it (an install tree:
/// PREFIX/bin/../share/tofu/ops), else `ops` in the working directory. Errors list every
/// place it looked.
llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave);

/// Builds or reads the graph and checks it (shapes inferred). `name` gets what to call it
/// in messages (the model or the file). Errors say what failed, the file or model named.
llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib, std::string *name);

} // namespace tofu

#endif // TOFU_TDLC_GRAPH_SOURCE_H
