// Semantic checks: turns parsed .tdl files into the checked IR (ir::Module).
#ifndef TOFU_ANALYSIS_SEMA_H
#define TOFU_ANALYSIS_SEMA_H

#include <string>
#include <vector>

#include "analysis/ir.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// Reads `path` and every file it imports (transitively), checks them and returns the
/// module of every op visible from `path`. All problems go to `diags`; the module is
/// returned only when there were no errors (warnings do not fail).
llvm::Expected<ir::Module> loadModule(const std::string &path, DiagnosticEngine &diags);

/// As loadModule, for `text` held in memory and named `path`: imports are resolved
/// relative to `path`'s directory, and diagnostics name `path`.
llvm::Expected<ir::Module> loadModuleFromText(const std::string &path, const std::string &text,
                                              DiagnosticEngine &diags);

/// Every `.tdl` file under the given directories (recursively), sorted; directories that
/// do not exist contribute nothing.
std::vector<std::string> findTdlFiles(const std::vector<std::string> &roots);

} // namespace tofu

#endif // TOFU_ANALYSIS_SEMA_H
