// The operator library as one name -> op table, loaded from a directory of .tdl files.
#ifndef TOFU_GRAPH_LIBRARY_H
#define TOFU_GRAPH_LIBRARY_H

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/ir.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// Every op of every .tdl file under a directory, by name.
class OpLibrary {
public:
  /// Loads and checks every .tdl file under `dir`; diagnostics go to `diags`. An op name
  /// declared in two files is an error.
  static llvm::Expected<OpLibrary> load(const std::string &dir, DiagnosticEngine &diags);

  /// The op named `name`, or null.
  const ir::OpDef *find(const std::string &name) const;
  size_t size() const { return ops_.size(); }
  /// Every op, by name.
  const std::map<std::string, const ir::OpDef *> &ops() const { return ops_; }
  /// The directory it was loaded from (its onnx_mapping.json lives there).
  const std::string &dir() const { return dir_; }

private:
  std::string dir_;
  std::vector<std::unique_ptr<ir::Module>> modules_;
  std::map<std::string, const ir::OpDef *> ops_;
};

} // namespace tofu

#endif // TOFU_GRAPH_LIBRARY_H
