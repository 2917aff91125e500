// Semantic checks of TDL: module loading (imports), name resolution, ranks, extents,
// affinity of index expressions, calls and grad clauses. Produces the checked IR. This file
// loads a module and declares its ops; sema_op.cc and sema_expr.cc check each op.
#include "analysis/sema.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "analysis/sema_internal.h"
#include "fmt/format.h"
#include "grammar/parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

namespace tofu {
namespace semaimpl {

// =====================================================================================
// Module loading
// =====================================================================================

int ModuleChecker::load(const std::string &display, const std::string *text,
                        const std::string &fromFile, SourceLoc fromLoc,
                        std::vector<std::string> &stack) {
  std::string content;
  llvm::SmallString<256> canonical;
  if (text) {
    content = *text;
    canonical = display;
    llvm::sys::fs::make_absolute(canonical);
    llvm::sys::path::remove_dots(canonical, /*remove_dot_dot=*/true);
  } else {
    if (std::error_code ec = llvm::sys::fs::real_path(display, canonical)) {
      if (fromFile.empty())
        diags_.error(display, {}, fmt::format("cannot open file: {}", ec.message()));
      else
        diags_.error(fromFile, fromLoc,
                     fmt::format("cannot open imported file '{}': {}", display, ec.message()));
      failed_ = true;
      return -1;
    }
  }
  std::string key(canonical.str());
  if (std::find(stack.begin(), stack.end(), key) != stack.end()) {
    std::string cycle;
    auto it = std::find(stack.begin(), stack.end(), key);
    for (; it != stack.end(); ++it)
      cycle += files_[byCanonical_[*it]].display + " -> ";
    cycle += display;
    diags_.error(fromFile, fromLoc, fmt::format("import cycle: {}", cycle));
    failed_ = true;
    return -1;
  }
  if (auto it = byCanonical_.find(key); it != byCanonical_.end())
    return it->second;

  if (!text) {
    // Only regular files of sane size: an import of /dev/zero must not hang or eat memory.
    llvm::sys::fs::file_status status;
    std::string problem;
    if (llvm::sys::fs::status(key, status))
      problem = "cannot be read";
    else if (llvm::sys::fs::is_directory(status))
      problem = "is a directory, not a .tdl file";
    else if (!llvm::sys::fs::is_regular_file(status))
      problem = "is not a regular file";
    else if (status.getSize() > kMaxSourceBytes)
      problem = fmt::format("is larger than {} bytes", kMaxSourceBytes);
    if (!problem.empty()) {
      SourceLoc loc = fromFile.empty() ? SourceLoc{} : fromLoc;
      diags_.error(fromFile.empty() ? display : fromFile, loc,
                   fmt::format("'{}' {}", display, problem));
      failed_ = true;
      return -1;
    }
    auto buf = llvm::MemoryBuffer::getFile(key, /*IsText=*/true);
    if (!buf) {
      if (fromFile.empty())
        diags_.error(display, {}, fmt::format("cannot read file: {}", buf.getError().message()));
      else
        diags_.error(
            fromFile, fromLoc,
            fmt::format("cannot read imported file '{}': {}", display, buf.getError().message()));
      failed_ = true;
      return -1;
    }
    content = (*buf)->getBuffer().str();
  }

  int index = static_cast<int>(files_.size());
  files_.push_back({display, key, std::nullopt});
  byCanonical_[key] = index;

  auto parsed = parseTdl(display, content, diags_);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    failed_ = true;
    return index;
  }
  files_[index].ast = std::move(*parsed);

  stack.push_back(key);
  llvm::SmallString<256> dir(display);
  llvm::sys::path::remove_filename(dir);
  std::vector<std::string> written;
  for (const ast::ImportDecl &imp : files_[index].ast->imports) {
    written.push_back(imp.path);
    llvm::SmallString<256> target;
    if (llvm::sys::path::is_absolute(imp.path)) {
      target = imp.path;
    } else {
      target = dir;
      llvm::sys::path::append(target, imp.path);
    }
    llvm::sys::path::remove_dots(target, /*remove_dot_dot=*/true);
    load(std::string(target.str()), nullptr, display, imp.loc, stack);
  }
  stack.pop_back();
  module_.importsByFile.push_back({display, std::move(written)});
  return index;
}

// =====================================================================================
// Declarations: one OpDef per op, names checked module-wide
// =====================================================================================

void ModuleChecker::declare() {
  std::map<std::string, std::pair<std::string, SourceLoc>> firstOpaque;
  for (const LoadedFile &f : files_) {
    if (!f.ast)
      continue;
    std::vector<std::string> declared;
    for (const ast::OpaqueName &o : f.ast->opaques) {
      if (ir::lookupBuiltin(o.name) || ir::lookupReducer(o.name)) {
        diags_.error(f.display, o.loc,
                     fmt::format("opaque function '{}' has the name of a builtin", o.name));
        failed_ = true;
        continue;
      }
      if (std::find(declared.begin(), declared.end(), o.name) != declared.end()) {
        diags_.error(f.display, o.loc,
                     fmt::format("opaque function '{}' is declared twice", o.name));
        failed_ = true;
        continue;
      }
      declared.push_back(o.name);
      if (opaques_.insert(o.name).second)
        module_.opaques.push_back(o.name);
    }
    module_.opaquesByFile.push_back({f.display, declared});
  }

  for (const LoadedFile &f : files_) {
    if (!f.ast)
      continue;
    for (const ast::OpDecl &d : f.ast->ops) {
      if (ir::lookupBuiltin(d.name) || ir::lookupReducer(d.name)) {
        diags_.error(f.display, d.loc, fmt::format("op '{}' has the name of a builtin", d.name));
        failed_ = true;
        continue;
      }
      if (opaques_.count(d.name)) {
        diags_.error(f.display, d.loc,
                     fmt::format("op '{}' has the name of an opaque function", d.name));
        failed_ = true;
        continue;
      }
      if (auto it = opIndex_.find(d.name); it != opIndex_.end()) {
        const ir::OpDef &prev = *module_.ops[it->second];
        diags_.error(f.display, d.loc, fmt::format("redefinition of op '{}'", d.name));
        diags_.note(prev.file, prev.loc, "previous definition is here");
        failed_ = true;
        continue;
      }
      auto op = std::make_unique<ir::OpDef>();
      op->name = d.name;
      op->file = f.display;
      op->loc = d.loc;
      for (const ast::AttrParam &a : d.attrs)
        op->attrs.push_back({a.name, a.loc, a.defaultValue});
      for (const ast::InputParam &in : d.inputs)
        op->inputs.push_back({in.name, in.loc, std::nullopt, {}});
      opIndex_[d.name] = static_cast<unsigned>(module_.ops.size());
      module_.ops.push_back(std::move(op));
      decls_.push_back(&d);
      state_.push_back(CheckState::Unchecked);
    }
  }
}

const ir::OpDef *ModuleChecker::requireOp(const std::string &name, SourceLoc useLoc, bool &failed) {
  auto it = opIndex_.find(name);
  if (it == opIndex_.end())
    return nullptr;
  unsigned i = it->second;
  switch (state_[i]) {
  case CheckState::Done:
    return module_.ops[i].get();
  case CheckState::Failed:
    failed = true; // already reported where the callee is declared
    return module_.ops[i].get();
  case CheckState::InProgress:
    diags_.error(currentFile_, useLoc,
                 fmt::format("op '{}' calls itself (directly or through other ops); calls are "
                             "inlined and cannot recurse",
                             name));
    failed = true;
    return module_.ops[i].get();
  case CheckState::Unchecked: {
    std::string saved = currentFile_;
    bool ok = checkOp(i);
    currentFile_ = saved;
    if (!ok)
      failed = true;
    return module_.ops[i].get();
  }
  }
  return nullptr;
}

bool ModuleChecker::checkOp(unsigned i) {
  state_[i] = CheckState::InProgress;
  currentFile_ = module_.ops[i]->file;
  OpChecker checker(*this, *decls_[i], *module_.ops[i]);
  bool ok = checker.run();
  state_[i] = ok ? CheckState::Done : CheckState::Failed;
  return ok;
}

llvm::Expected<ir::Module> ModuleChecker::run(const std::string &path, const std::string *text) {
  std::vector<std::string> stack;
  load(path, text, "", {}, stack);
  module_.rootFile = path;
  for (const LoadedFile &f : files_)
    module_.files.push_back(f.display);
  declare();
  for (unsigned i = 0; i < module_.ops.size(); ++i)
    if (state_[i] == CheckState::Unchecked && !checkOp(i))
      failed_ = true;
  for (unsigned i = 0; i < module_.ops.size(); ++i) {
    if (state_[i] != CheckState::Done || decls_[i]->grads.empty())
      continue;
    currentFile_ = module_.ops[i]->file;
    OpChecker checker(*this, *decls_[i], *module_.ops[i]);
    if (!checker.runGrads())
      failed_ = true;
  }
  for (CheckState s : state_)
    if (s == CheckState::Failed)
      failed_ = true;
  if (failed_ || diags_.errorCount() != 0)
    return diags_.makeError(path);
  return std::move(module_);
}

} // namespace semaimpl

using namespace semaimpl;

std::vector<std::string> findTdlFiles(const std::vector<std::string> &roots) {
  std::vector<std::string> out;
  for (const std::string &root : roots) {
    std::error_code ec;
    for (llvm::sys::fs::recursive_directory_iterator it(root, ec), end; it != end && !ec;
         it.increment(ec))
      if (llvm::sys::path::extension(it->path()) == ".tdl")
        out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

llvm::Expected<ir::Module> loadModule(const std::string &path, DiagnosticEngine &diags) {
  ModuleChecker mc(diags);
  return mc.run(path, nullptr);
}

llvm::Expected<ir::Module> loadModuleFromText(const std::string &path, const std::string &text,
                                              DiagnosticEngine &diags) {
  ModuleChecker mc(diags);
  return mc.run(path, &text);
}

} // namespace tofu
