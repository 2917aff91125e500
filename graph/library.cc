// Loading the operator library.
#include "graph/library.h"

#include "analysis/sema.h"
#include "fmt/format.h"

namespace tofu {

llvm::Expected<OpLibrary> OpLibrary::load(const std::string &dir, DiagnosticEngine &diags) {
  OpLibrary lib;
  lib.dir_ = dir;
  std::vector<std::string> files = findTdlFiles({dir});
  if (files.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no .tdl files under '%s'",
                                   dir.c_str());
  std::map<std::string, std::string> fileOf;
  for (const std::string &file : files) {
    auto module = loadModule(file, diags);
    if (!module)
      return module.takeError();
    auto owned = std::make_unique<ir::Module>(std::move(*module));
    for (const ir::OpDef *op : owned->opsInFile(file)) {
      auto [it, fresh] = fileOf.emplace(op->name, file);
      if (!fresh)
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(), "%s",
            fmt::format("op '{}' is declared in both {} and {}", op->name, it->second, file)
                .c_str());
      lib.ops_[op->name] = op;
    }
    lib.modules_.push_back(std::move(owned));
  }
  return lib;
}

const ir::OpDef *OpLibrary::find(const std::string &name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second;
}

} // namespace tofu
