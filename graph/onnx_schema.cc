// Reads libonnx's schema registry.
#include "graph/onnx_schema.h"

#include <map>

#include "onnx/defs/schema.h"

namespace tofu {

std::vector<std::string> onnxOperatorNames(int opset) {
  std::map<std::string, const onnx::OpSchema *> newest;
  static const std::vector<onnx::OpSchema> all =
      onnx::OpSchemaRegistry::get_all_schemas_with_history();
  for (const onnx::OpSchema &s : all) {
    if (!s.domain().empty() && s.domain() != "ai.onnx")
      continue;
    if (s.SinceVersion() > opset)
      continue;
    auto it = newest.find(s.Name());
    if (it == newest.end() || it->second->SinceVersion() < s.SinceVersion())
      newest[s.Name()] = &s;
  }
  std::vector<std::string> out;
  for (const auto &[name, schema] : newest)
    if (!schema->Deprecated())
      out.push_back(name);
  return out;
}

} // namespace tofu
