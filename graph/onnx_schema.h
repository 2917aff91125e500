// The ONNX operator set as Debian's libonnx knows it (its schema registry).
#ifndef TOFU_GRAPH_ONNX_SCHEMA_H
#define TOFU_GRAPH_ONNX_SCHEMA_H

#include <string>
#include <vector>

namespace tofu {

/// The names of the default-domain ONNX operators defined at `opset` (the newest version
/// of each at or below it), deprecated ones excluded, sorted.
std::vector<std::string> onnxOperatorNames(int opset);

} // namespace tofu

#endif // TOFU_GRAPH_ONNX_SCHEMA_H
