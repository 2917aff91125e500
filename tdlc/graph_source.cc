// Graphs named on command lines.
#include "tdlc/graph_source.h"

#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tofu {

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
