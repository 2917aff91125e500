// Semantic checks of TDL: module loading (imports), name resolution, ranks, extents,
// affinity of index expressions, calls and grad clauses. Produces the checked IR.
#include "analysis/sema.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::dyn_cast_or_null;
using llvm::isa;

/// One file of the module, parsed (or not, when it had syntax errors).
struct LoadedFile {
  std::string display;   ///< the path diagnostics use
  std::string canonical; ///< identity, for cycles and diamonds
  std::optional<ast::File> ast;
};

/// .tdl files are small; anything bigger is a mistake (or a device file).
constexpr uint64_t kMaxSourceBytes = 16u << 20;

enum class CheckState { Unchecked, InProgress, Done, Failed };

class ModuleChecker;

/// Checks the body of one op. Lives only while that op is checked.
class OpChecker {
public:
  OpChecker(ModuleChecker &mc, const ast::OpDecl &decl, ir::OpDef &op)
      : mc_(mc), decl_(decl), op_(op) {}

  /// Checks the op's declaration and body; false if any error was reported.
  bool run();
  /// Checks the op's grad clauses, once every op's body is checked (a gradient may call
  /// the op itself, or an op whose gradient calls this one: clauses are not inlined).
  bool runGrads();

private:
  // --- reporting -------------------------------------------------------------------
  void error(SourceLoc loc, std::string msg);
  void note(SourceLoc loc, std::string msg);

  // --- scopes ----------------------------------------------------------------------
  std::optional<unsigned> lookupVar(const std::string &name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->first == name)
        return it->second;
    return std::nullopt;
  }
  bool bindParams(const std::vector<ast::LambdaParam> &params, ir::IndexVar::Role role,
                  std::vector<unsigned> &ids);

  // --- expressions -----------------------------------------------------------------
  ir::ExprPtr value(const ast::Expr &e);
  ir::ExprPtr valueName(const ast::Name &n);
  ir::ExprPtr valueIndex(const ast::Index &ix);
  ir::ExprPtr valueCall(const ast::Call &c, const std::vector<ast::IndexItem> *coords,
                        const ast::Expr *whole);
  ir::ExprPtr reduce(const ast::Call &c, ir::Reducer r);
  ir::ExprPtr constant(const ast::Expr &e, const char *where);
  ir::ExprPtr extentOf(const ast::ExtentOf &x);
  ir::ExprPtr tensorArg(const ast::Expr &e, const std::string &callee);
  std::unique_ptr<ir::OpCall> opCall(const ast::Call &c, const ir::OpDef &callee);

  bool coords(const std::vector<ast::IndexItem> &items, bool allowSlices,
              std::vector<ir::Coord> &out);
  bool coord(const ast::IndexItem &item, bool allowSlices, ir::Coord &out);
  bool checkAffine(const ast::Expr &e, bool &hasVar);
  static bool readsData(const ast::Expr &e);

  void recordRank(unsigned input, const ir::Rank &rank, SourceLoc loc);
  std::string describeRank(const ir::Rank &r) const;
  bool inferExtents(const ir::Reduce &red, SourceLoc fallback);

  ModuleChecker &mc_;
  const ast::OpDecl &decl_;
  ir::OpDef &op_;
  std::vector<std::pair<std::string, unsigned>> scope_;
  std::vector<SourceLoc> rankLoc_;
  std::vector<bool> used_;
  std::vector<bool> passedWhole_; ///< passed as a whole tensor to a call
  struct ExtentUse {
    unsigned input, dim;
    SourceLoc loc;
  };
  std::vector<ExtentUse> extents_; ///< every `x.d`, checked against ranks at the end
  bool inGrad_ = false;
  bool failed_ = false;
};

/// Loads files, creates an OpDef per declaration, then checks each op (callees first).
class ModuleChecker {
public:
  explicit ModuleChecker(DiagnosticEngine &diags) : diags_(diags) {}

  llvm::Expected<ir::Module> run(const std::string &path, const std::string *text);

  DiagnosticEngine &diags() { return diags_; }
  const std::string &currentFile() const { return currentFile_; }
  bool isOpaque(const std::string &name) const { return opaques_.count(name) != 0; }

  /// The op named `name`, checked first if need be; null if none. Reports recursion.
  const ir::OpDef *requireOp(const std::string &name, SourceLoc useLoc, bool &failed);
  bool hasOp(const std::string &name) const { return opIndex_.count(name) != 0; }

private:
  int load(const std::string &display, const std::string *text, const std::string &fromFile,
           SourceLoc fromLoc, std::vector<std::string> &stack);
  void declare();
  bool checkOp(unsigned index);

  DiagnosticEngine &diags_;
  std::vector<LoadedFile> files_;
  std::map<std::string, int> byCanonical_;
  ir::Module module_;
  std::vector<const ast::OpDecl *> decls_;
  std::vector<CheckState> state_;
  std::map<std::string, unsigned> opIndex_;
  std::set<std::string> opaques_;
  std::string currentFile_;
  bool failed_ = false;
};

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

// =====================================================================================
// Ops
// =====================================================================================

void OpChecker::error(SourceLoc loc, std::string msg) {
  mc_.diags().error(op_.file, loc, std::move(msg));
  failed_ = true;
}

void OpChecker::note(SourceLoc loc, std::string msg) {
  mc_.diags().note(op_.file, loc, std::move(msg));
}

bool OpChecker::run() {
  rankLoc_.assign(op_.inputs.size(), {});
  used_.assign(op_.inputs.size(), false);
  passedWhole_.assign(op_.inputs.size(), false);

  // Attributes and inputs share one namespace.
  std::map<std::string, SourceLoc> seen;
  auto declareName = [&](const std::string &name, SourceLoc loc, const char *what) {
    if (name == "inf" || name == "nan") {
      error(loc, fmt::format("'{}' is reserved and cannot name {}", name, what));
      return;
    }
    auto [it, fresh] = seen.emplace(name, loc);
    if (!fresh) {
      error(loc, fmt::format("duplicate name '{}' in op '{}'", name, op_.name));
      note(it->second, "first declared here");
    }
  };
  for (const ir::Attr &a : op_.attrs)
    declareName(a.name, a.loc, "an attribute");
  for (const ir::Input &in : op_.inputs)
    declareName(in.name, in.loc, "an input");

  // The body: a lambda over the output coordinates.
  const auto *top = dyn_cast<ast::Lambda>(decl_.body.get());
  if (!top) {
    error(
        decl_.body->begin,
        fmt::format("the body of op '{}' must be a lambda over the output coordinates", op_.name));
    return false;
  }
  for (const ast::LambdaParam &p : top->params)
    if (p.kind == ast::LambdaParam::Kind::Extent)
      error(p.loc, fmt::format("output coordinate '{}' cannot have an explicit extent; only "
                               "reduction variables can",
                               p.name));
  if (!bindParams(top->params, ir::IndexVar::Role::Output, op_.outputVars))
    return false;
  op_.body = value(*top->body);

  // The output-shape clause.
  if (decl_.hasShape) {
    std::vector<ir::ShapeDim> dims;
    ir::Rank stated;
    bool ok = true;
    for (const ast::ShapeDim &d : decl_.shape) {
      ir::ShapeDim dim;
      dim.loc = d.loc;
      if (d.isGroup) {
        auto v = lookupVar(d.group);
        if (!v || !op_.vars[*v].isGroup) {
          error(d.loc, fmt::format("'*{}' in the shape clause is not an output group of op '{}'",
                                   d.group, op_.name));
          ok = false;
          continue;
        }
        dim.isGroup = true;
        dim.var = *v;
        stated.groups.push_back(*v);
      } else if (const auto *name = dyn_cast<ast::Name>(d.expr.get());
                 name && lookupVar(name->name) && !op_.vars[*lookupVar(name->name)].isGroup) {
        dim.isVar = true; // an output coordinate: the extent of the dimension it indexes
        dim.var = *lookupVar(name->name);
        ++stated.fixed;
      } else {
        dim.expr = constant(*d.expr, "an output extent");
        if (!dim.expr) {
          ok = false;
          continue;
        }
        ++stated.fixed;
      }
      dims.push_back(std::move(dim));
    }
    std::sort(stated.groups.begin(), stated.groups.end());
    if (ok && stated != op_.outputRank()) {
      error(decl_.shape.empty() ? top->begin : decl_.shape.front().loc,
            fmt::format("the shape clause gives rank {} but the lambda of op '{}' has rank {}",
                        describeRank(stated), op_.name, describeRank(op_.outputRank())));
    }
    op_.shape = std::move(dims);
  }
  scope_.clear();

  // Extents `x.d` name existing dimensions.
  for (const ExtentUse &use : extents_) {
    const ir::Input &in = op_.inputs[use.input];
    if (!in.rank) {
      // Passed whole to an opaque function: the rank is only known at instantiation.
      if (!passedWhole_[use.input])
        error(use.loc, fmt::format("'{}.{}' names a dimension of input '{}', which the op "
                                   "never indexes, so its rank is unknown",
                                   in.name, use.dim, in.name));
      continue;
    }
    if (in.rank->groups.empty() && use.dim >= in.rank->fixed)
      error(use.loc, fmt::format("input '{}' has rank {}; it has no dimension {}", in.name,
                                 in.rank->fixed, use.dim));
  }

  // After an error the op was not read to its end: "never used" could be wrong.
  for (unsigned i = 0; i < op_.inputs.size() && !failed_; ++i)
    if (!used_[i])
      mc_.diags().warning(
          op_.file, op_.inputs[i].loc,
          fmt::format("input '{}' of op '{}' is never used", op_.inputs[i].name, op_.name));
  return !failed_;
}

bool OpChecker::bindParams(const std::vector<ast::LambdaParam> &params, ir::IndexVar::Role role,
                           std::vector<unsigned> &ids) {
  bool ok = true;
  size_t scopeStart = scope_.size();
  for (const ast::LambdaParam &p : params) {
    if (p.name == "inf" || p.name == "nan") {
      error(p.loc, fmt::format("'{}' is reserved and cannot name an index variable", p.name));
      ok = false;
      continue;
    }
    if (op_.findAttr(p.name) || op_.findInput(p.name)) {
      error(p.loc, fmt::format("index variable '{}' has the name of an {} of op '{}'", p.name,
                               op_.findAttr(p.name) ? "attribute" : "input", op_.name));
      ok = false;
      continue;
    }
    if (auto prev = lookupVar(p.name)) {
      bool sameLambda = false;
      for (size_t i = scopeStart; i < scope_.size(); ++i)
        sameLambda |= scope_[i].first == p.name;
      if (sameLambda)
        error(p.loc, fmt::format("index variable '{}' is bound twice in one lambda", p.name));
      else
        error(p.loc,
              fmt::format("index variable '{}' is already bound by an enclosing lambda", p.name));
      note(op_.vars[*prev].loc, "bound here");
      ok = false;
      continue;
    }
    ir::IndexVar v;
    v.name = p.name;
    v.loc = p.loc;
    v.role = role;
    v.isGroup = p.kind == ast::LambdaParam::Kind::Group;
    if (p.kind == ast::LambdaParam::Kind::Extent && role == ir::IndexVar::Role::Reduction) {
      v.extent = constant(*p.extent, "an extent");
      if (!v.extent)
        ok = false;
    }
    unsigned id = static_cast<unsigned>(op_.vars.size());
    op_.vars.push_back(std::move(v));
    scope_.push_back({p.name, id});
    ids.push_back(id);
  }
  return ok;
}

std::string OpChecker::describeRank(const ir::Rank &r) const {
  std::string s;
  for (unsigned g : r.groups)
    s += fmt::format("|{}| + ", op_.vars[g].name);
  if (s.empty() || r.fixed != 0)
    s += std::to_string(r.fixed);
  else
    s.resize(s.size() - 3);
  return s;
}

bool OpChecker::runGrads() {
  used_.assign(op_.inputs.size(), true);
  passedWhole_.assign(op_.inputs.size(), false);
  rankLoc_.assign(op_.inputs.size(), op_.loc);
  std::map<unsigned, SourceLoc> gradSeen;
  inGrad_ = true;
  for (const ast::GradItem &g : decl_.grads) {
    auto input = op_.findInput(g.input);
    if (!input) {
      error(g.loc, fmt::format("'{}' is not an input of op '{}'", g.input, op_.name));
      continue;
    }
    if (auto [it, fresh] = gradSeen.emplace(*input, g.loc); !fresh) {
      error(g.loc, fmt::format("input '{}' has two grad clauses", g.input));
      note(it->second, "the first is here");
      continue;
    }
    const auto *call = dyn_cast<ast::Call>(g.value.get());
    if (!call) {
      error(g.value->begin, fmt::format("the gradient of '{}' must be a call of an op, like "
                                        "'grad {} = some_op(dOut, ...)'",
                                        g.input, g.input));
      continue;
    }
    if (!mc_.hasOp(call->callee)) {
      if (ir::lookupBuiltin(call->callee) || ir::lookupReducer(call->callee) ||
          mc_.isOpaque(call->callee))
        error(call->calleeLoc,
              fmt::format("a grad clause must call an op; '{}' is not an op", call->callee));
      else
        error(call->calleeLoc, fmt::format("unknown op '{}'", call->callee));
      continue;
    }
    bool calleeFailed = false;
    const ir::OpDef *callee = mc_.requireOp(call->callee, call->calleeLoc, calleeFailed);
    if (calleeFailed) {
      failed_ = true;
      continue;
    }
    auto irCall = opCall(*call, *callee);
    if (!irCall)
      continue;
    const ir::Input &in = op_.inputs[*input];
    ir::Rank gradRank = callee->outputRank();
    if (in.rank && in.rank->groups.empty() && gradRank.groups.empty() &&
        in.rank->fixed != gradRank.fixed)
      error(call->calleeLoc, fmt::format("the gradient of '{}' has rank {} but '{}' has rank {}",
                                         g.input, gradRank.fixed, g.input, in.rank->fixed));
    op_.grads.push_back({*input, g.loc, std::move(irCall)});
  }
  inGrad_ = false;

  return !failed_;
}

/// Whether some lengths of the groups make the two ranks equal: after cancelling the groups
/// they share, a side left without groups must not exceed the other's fixed part (or must
/// equal it, when neither has groups left).
static bool ranksCompatible(const ir::Rank &a, const ir::Rank &b) {
  std::vector<unsigned> onlyA, onlyB;
  std::set_difference(a.groups.begin(), a.groups.end(), b.groups.begin(), b.groups.end(),
                      std::back_inserter(onlyA));
  std::set_difference(b.groups.begin(), b.groups.end(), a.groups.begin(), a.groups.end(),
                      std::back_inserter(onlyB));
  if (onlyA.empty() && onlyB.empty())
    return a.fixed == b.fixed;
  if (onlyA.empty())
    return a.fixed >= b.fixed;
  if (onlyB.empty())
    return b.fixed >= a.fixed;
  return true;
}

void OpChecker::recordRank(unsigned input, const ir::Rank &rank, SourceLoc loc) {
  ir::Input &in = op_.inputs[input];
  if (!in.rank) {
    in.rank = rank;
    rankLoc_[input] = loc;
    return;
  }
  if (*in.rank != rank && ranksCompatible(*in.rank, rank)) {
    // Another group (a sibling lambda's) reads the input: its length is solved when the
    // op is instantiated.
    if (std::find(in.otherRanks.begin(), in.otherRanks.end(), rank) == in.otherRanks.end())
      in.otherRanks.push_back(rank);
    return;
  }
  if (*in.rank != rank) {
    error(loc, fmt::format("input '{}' is used with rank {} here but with rank {} at {}:{}",
                           in.name, describeRank(rank), describeRank(*in.rank),
                           rankLoc_[input].line, rankLoc_[input].col));
  }
}

// =====================================================================================
// Expressions
// =====================================================================================

template <typename T> std::unique_ptr<T> make(SourceLoc loc) {
  auto e = std::make_unique<T>();
  e->loc = loc;
  return e;
}

ir::ExprPtr OpChecker::value(const ast::Expr &e) {
  switch (e.kind()) {
  case ast::ExprKind::IntLit: {
    auto c = make<ir::Const>(e.loc);
    c->isInt = true;
    c->intValue = cast<ast::IntLit>(e).value;
    c->value = static_cast<double>(c->intValue);
    return c;
  }
  case ast::ExprKind::FloatLit: {
    auto c = make<ir::Const>(e.loc);
    c->value = cast<ast::FloatLit>(e).value;
    return c;
  }
  case ast::ExprKind::Name:
    return valueName(cast<ast::Name>(e));
  case ast::ExprKind::ExtentOf:
    return extentOf(cast<ast::ExtentOf>(e));
  case ast::ExprKind::Index:
    return valueIndex(cast<ast::Index>(e));
  case ast::ExprKind::Call:
    return valueCall(cast<ast::Call>(e), nullptr, &e);
  case ast::ExprKind::Lambda:
    error(e.begin, "a lambda is only allowed as the body of an op or as the argument of a "
                   "reducer");
    return nullptr;
  case ast::ExprKind::Neg: {
    auto operand = value(*cast<ast::Neg>(e).operand);
    if (!operand)
      return nullptr;
    auto n = make<ir::Neg>(e.loc);
    n->operand = std::move(operand);
    return n;
  }
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    auto lhs = value(*b.lhs);
    auto rhs = value(*b.rhs);
    if (!lhs || !rhs)
      return nullptr;
    auto r = make<ir::Binary>(e.loc);
    r->op = b.op;
    r->lhs = std::move(lhs);
    r->rhs = std::move(rhs);
    return r;
  }
  }
  return nullptr;
}

ir::ExprPtr OpChecker::valueName(const ast::Name &n) {
  if (auto v = lookupVar(n.name)) {
    if (op_.vars[*v].isGroup) {
      error(n.loc, fmt::format("group '{}' can only be expanded inside an index list, as '*{}'",
                               n.name, n.name));
      return nullptr;
    }
    auto r = make<ir::VarRef>(n.loc);
    r->var = *v;
    return r;
  }
  if (auto a = op_.findAttr(n.name)) {
    auto r = make<ir::AttrRef>(n.loc);
    r->attr = *a;
    return r;
  }
  if (auto in = op_.findInput(n.name)) {
    used_[*in] = true;
    error(n.loc, fmt::format("input '{}' must be indexed, e.g. '{}[i]'", n.name, n.name));
    return nullptr;
  }
  if (n.name == "inf" || n.name == "nan") {
    auto c = make<ir::Const>(n.loc);
    c->value = n.name == "inf" ? std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::quiet_NaN();
    return c;
  }
  if (mc_.hasOp(n.name) || mc_.isOpaque(n.name) || ir::lookupBuiltin(n.name) ||
      ir::lookupReducer(n.name)) {
    error(n.loc, fmt::format("'{}' is a function and must be called", n.name));
    return nullptr;
  }
  if (inGrad_ && (n.name == "dOut" || n.name == "out")) {
    error(n.loc, fmt::format("'{}' is a tensor and can only be passed to the op a grad clause "
                             "calls",
                             n.name));
    return nullptr;
  }
  error(n.loc, fmt::format("unknown name '{}'", n.name));
  return nullptr;
}

ir::ExprPtr OpChecker::extentOf(const ast::ExtentOf &x) {
  const auto *base = dyn_cast<ast::Name>(x.base.get());
  std::optional<unsigned> input = base ? op_.findInput(base->name) : std::nullopt;
  if (!input) {
    error(x.begin, fmt::format("'{}': only an input's extent can be taken, as 'x.0'", x.text));
    return nullptr;
  }
  used_[*input] = true;
  if (x.dim < 0 || x.dim > 1000000) {
    error(x.begin, fmt::format("dimension {} of '{}' is out of range", x.dim, base->name));
    return nullptr;
  }
  auto r = make<ir::ExtentRef>(x.begin);
  r->input = *input;
  r->dim = static_cast<unsigned>(x.dim);
  extents_.push_back({r->input, r->dim, x.begin});
  return r;
}

ir::ExprPtr OpChecker::constant(const ast::Expr &e, const char *where) {
  switch (e.kind()) {
  case ast::ExprKind::IntLit: {
    auto c = make<ir::Const>(e.loc);
    c->isInt = true;
    c->intValue = cast<ast::IntLit>(e).value;
    c->value = static_cast<double>(c->intValue);
    return c;
  }
  case ast::ExprKind::Name: {
    const auto &n = cast<ast::Name>(e);
    if (auto a = op_.findAttr(n.name)) {
      auto r = make<ir::AttrRef>(n.loc);
      r->attr = *a;
      return r;
    }
    if (lookupVar(n.name))
      error(n.loc, fmt::format("index variable '{}' cannot appear in {}, which must be an "
                               "integer constant",
                               n.name, where));
    else if (op_.findInput(n.name))
      error(n.loc, fmt::format("input '{}' cannot appear in {}; its extents can, as '{}.0'", n.name,
                               where, n.name));
    else
      error(n.loc, fmt::format("unknown name '{}' in {}", n.name, where));
    return nullptr;
  }
  case ast::ExprKind::ExtentOf:
    return extentOf(cast<ast::ExtentOf>(e));
  case ast::ExprKind::Neg: {
    auto operand = constant(*cast<ast::Neg>(e).operand, where);
    if (!operand)
      return nullptr;
    auto n = make<ir::Neg>(e.loc);
    n->operand = std::move(operand);
    return n;
  }
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    if (ast::isComparison(b.op)) {
      error(e.begin,
            fmt::format("{} must be an integer constant, not the comparison '{}'", where, e.text));
      return nullptr;
    }
    auto lhs = constant(*b.lhs, where);
    auto rhs = constant(*b.rhs, where);
    if (!lhs || !rhs)
      return nullptr;
    auto r = make<ir::Binary>(e.loc);
    r->op = b.op;
    r->lhs = std::move(lhs);
    r->rhs = std::move(rhs);
    return r;
  }
  case ast::ExprKind::FloatLit:
  case ast::ExprKind::Index:
  case ast::ExprKind::Call:
  case ast::ExprKind::Lambda:
    break;
  }
  error(e.begin, fmt::format("{} must be an integer constant; '{}' is not", where, e.text));
  return nullptr;
}

ir::ExprPtr OpChecker::valueIndex(const ast::Index &ix) {
  if (const auto *call = dyn_cast<ast::Call>(ix.base.get()))
    return valueCall(*call, &ix.items, &ix);
  const auto *name = dyn_cast<ast::Name>(ix.base.get());
  if (!name) {
    error(ix.begin, fmt::format("'{}' cannot be indexed; only inputs and the results of op and "
                                "opaque calls can",
                                ix.base->text));
    return nullptr;
  }
  auto input = op_.findInput(name->name);
  if (!input) {
    if (lookupVar(name->name) || op_.findAttr(name->name))
      error(name->loc, fmt::format("'{}' is not a tensor and cannot be indexed", name->name));
    else if (inGrad_ && (name->name == "dOut" || name->name == "out"))
      error(name->loc,
            fmt::format("'{}' cannot be indexed in a grad clause; pass it whole", name->name));
    else if (mc_.hasOp(name->name) || mc_.isOpaque(name->name))
      error(name->loc, fmt::format("'{}' is a function; call it before indexing, as '{}(...)[...]'",
                                   name->name, name->name));
    else
      error(name->loc, fmt::format("unknown tensor '{}'", name->name));
    return nullptr;
  }
  used_[*input] = true;
  auto read = make<ir::Read>(ix.loc);
  read->input = *input;
  if (!coords(ix.items, /*allowSlices=*/false, read->coords))
    return nullptr;
  ir::Rank rank;
  for (const ir::Coord &c : read->coords) {
    if (c.kind == ir::Coord::Kind::Splat)
      rank.groups.push_back(c.var);
    else
      ++rank.fixed;
  }
  std::sort(rank.groups.begin(), rank.groups.end());
  recordRank(*input, rank, ix.loc);
  return read;
}

bool OpChecker::coords(const std::vector<ast::IndexItem> &items, bool allowSlices,
                       std::vector<ir::Coord> &out) {
  bool ok = true;
  for (const ast::IndexItem &item : items) {
    ir::Coord c;
    if (coord(item, allowSlices, c))
      out.push_back(std::move(c));
    else
      ok = false;
  }
  return ok;
}

bool OpChecker::readsData(const ast::Expr &e) {
  switch (e.kind()) {
  case ast::ExprKind::Index:
    return true;
  case ast::ExprKind::Call: {
    const auto &c = cast<ast::Call>(e);
    if (!ir::lookupBuiltin(c.callee))
      return true;
    for (const auto &a : c.args)
      if (readsData(*a))
        return true;
    return false;
  }
  case ast::ExprKind::Neg:
    return readsData(*cast<ast::Neg>(e).operand);
  case ast::ExprKind::Binary:
    return readsData(*cast<ast::Binary>(e).lhs) || readsData(*cast<ast::Binary>(e).rhs);
  case ast::ExprKind::IntLit:
  case ast::ExprKind::FloatLit:
  case ast::ExprKind::Name:
  case ast::ExprKind::ExtentOf:
  case ast::ExprKind::Lambda:
    return false;
  }
  return false;
}

bool OpChecker::coord(const ast::IndexItem &item, bool allowSlices, ir::Coord &out) {
  out.loc = item.loc;
  switch (item.kind) {
  case ast::IndexItem::Kind::Slice:
    if (!allowSlices) {
      error(item.loc, "a slice ':' is only allowed in an argument of an op or opaque call");
      return false;
    }
    out.kind = ir::Coord::Kind::Slice;
    return true;
  case ast::IndexItem::Kind::Group: {
    auto v = lookupVar(item.group);
    if (!v) {
      error(item.loc, fmt::format("unknown group '{}'", item.group));
      return false;
    }
    if (!op_.vars[*v].isGroup) {
      error(item.loc, fmt::format("'{}' is an index variable, not a group; write '{}' without "
                                  "'*'",
                                  item.group, item.group));
      return false;
    }
    out.kind = ir::Coord::Kind::Splat;
    out.var = *v;
    return true;
  }
  case ast::IndexItem::Kind::Expr:
    break;
  }
  const ast::Expr &e = *item.expr;
  if (readsData(e)) {
    out.kind = ir::Coord::Kind::DataDependent;
    out.expr = value(e);
    return out.expr != nullptr;
  }
  bool hasVar = false;
  if (!checkAffine(e, hasVar))
    return false;
  out.kind = ir::Coord::Kind::Affine;
  out.expr = value(e);
  return out.expr != nullptr;
}

/// Checks that `e` (which reads no tensor data) is affine in index variables with integer
/// constant coefficients; `hasVar` tells whether it involves any index variable.
bool OpChecker::checkAffine(const ast::Expr &e, bool &hasVar) {
  hasVar = false;
  switch (e.kind()) {
  case ast::ExprKind::IntLit:
  case ast::ExprKind::ExtentOf:
    return true;
  case ast::ExprKind::FloatLit:
    error(e.begin, fmt::format("index expression uses the non-integer constant '{}'", e.text));
    return false;
  case ast::ExprKind::Name: {
    const auto &n = cast<ast::Name>(e);
    if (n.name == "inf" || n.name == "nan") {
      error(e.begin, fmt::format("index expression uses the non-integer constant '{}'", n.name));
      return false;
    }
    hasVar = lookupVar(n.name).has_value();
    return true; // other problems are reported when the expression is built
  }
  case ast::ExprKind::Neg:
    return checkAffine(*cast<ast::Neg>(e).operand, hasVar);
  case ast::ExprKind::Binary: {
    const auto &b = cast<ast::Binary>(e);
    bool lv = false, rv = false;
    if (!checkAffine(*b.lhs, lv) || !checkAffine(*b.rhs, rv))
      return false;
    hasVar = lv || rv;
    switch (b.op) {
    case ast::BinaryOp::Add:
    case ast::BinaryOp::Sub:
      return true;
    case ast::BinaryOp::Mul:
      if (lv && rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: it multiplies index "
                                   "variables",
                                   e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Div:
      if (rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: it divides by an index "
                                   "variable",
                                   e.text));
        return false;
      }
      if (const auto *lit = dyn_cast<ast::IntLit>(b.rhs.get()); lit && lit->value == 0) {
        error(b.rhs->begin, fmt::format("index expression '{}' divides by zero", e.text));
        return false;
      }
      if (const auto *neg = dyn_cast<ast::Neg>(b.rhs.get());
          neg && isa<ast::IntLit>(*neg->operand)) {
        error(b.rhs->begin, fmt::format("index expression '{}' divides by a negative constant; "
                                        "only division by a positive constant is affine",
                                        e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Mod:
      if (lv || rv) {
        error(e.begin, fmt::format("index expression '{}' is not affine: '%' of an index "
                                   "variable",
                                   e.text));
        return false;
      }
      return true;
    case ast::BinaryOp::Eq:
    case ast::BinaryOp::Ne:
    case ast::BinaryOp::Lt:
    case ast::BinaryOp::Le:
    case ast::BinaryOp::Gt:
    case ast::BinaryOp::Ge:
      error(e.begin,
            fmt::format("index expression '{}' is not affine: it is a comparison", e.text));
      return false;
    }
    return false;
  }
  case ast::ExprKind::Call:
    error(e.begin, fmt::format("index expression '{}' is not affine: '{}' is not an affine "
                               "function",
                               e.text, cast<ast::Call>(e).callee));
    return false;
  case ast::ExprKind::Lambda:
    error(e.begin, "a lambda cannot be an index");
    return false;
  case ast::ExprKind::Index:
    return true; // data-dependent; never reaches here (see readsData)
  }
  return false;
}

ir::ExprPtr OpChecker::valueCall(const ast::Call &c, const std::vector<ast::IndexItem> *items,
                                 const ast::Expr *whole) {
  // Builtins and reducers.
  if (auto b = ir::lookupBuiltin(c.callee)) {
    if (items) {
      error(whole->begin, fmt::format("the result of builtin '{}' is a value and cannot be "
                                      "indexed",
                                      c.callee));
      return nullptr;
    }
    if (c.hasAttrList || !c.groups.empty()) {
      error(c.calleeLoc, fmt::format("builtin '{}' takes no attributes or groups", c.callee));
      return nullptr;
    }
    unsigned arity = ir::builtinArity(*b);
    if (c.args.size() != arity) {
      error(c.calleeLoc,
            fmt::format("builtin '{}' takes {} argument{} but {} {} given", c.callee, arity,
                        arity == 1 ? "" : "s", c.args.size(), c.args.size() == 1 ? "was" : "were"));
      return nullptr;
    }
    auto a = make<ir::Apply>(c.calleeLoc);
    a->fn = *b;
    bool ok = true;
    for (const auto &arg : c.args) {
      auto v = value(*arg);
      ok &= v != nullptr;
      a->args.push_back(std::move(v));
    }
    return ok ? std::move(a) : nullptr;
  }
  if (auto r = ir::lookupReducer(c.callee)) {
    if (items) {
      error(whole->begin, fmt::format("the result of reducer '{}' is a value and cannot be "
                                      "indexed",
                                      c.callee));
      return nullptr;
    }
    return reduce(c, *r);
  }
  // Locals are not functions.
  if (lookupVar(c.callee) || op_.findAttr(c.callee) || op_.findInput(c.callee)) {
    error(c.calleeLoc, fmt::format("'{}' is not a function", c.callee));
    return nullptr;
  }
  if (mc_.isOpaque(c.callee)) {
    if (c.hasAttrList || !c.groups.empty()) {
      error(c.calleeLoc,
            fmt::format("opaque function '{}' takes no attributes or groups", c.callee));
      return nullptr;
    }
    if (!items) {
      error(c.calleeLoc, fmt::format("the result of opaque function '{}' is a tensor and must "
                                     "be indexed, as '{}(...)[i, j]'",
                                     c.callee, c.callee));
      return nullptr;
    }
    if (c.args.empty()) {
      error(c.calleeLoc, fmt::format("opaque function '{}' needs at least one argument", c.callee));
      return nullptr;
    }
    auto call = make<ir::OpaqueCall>(c.calleeLoc);
    call->function = c.callee;
    bool ok = true;
    for (const auto &arg : c.args) {
      auto t = tensorArg(*arg, c.callee);
      ok &= t != nullptr;
      call->args.push_back(std::move(t));
    }
    ok &= coords(*items, /*allowSlices=*/false, call->coords);
    return ok ? std::move(call) : nullptr;
  }
  if (!mc_.hasOp(c.callee)) {
    error(c.calleeLoc, fmt::format("unknown function '{}'", c.callee));
    return nullptr;
  }
  bool calleeFailed = false;
  const ir::OpDef *callee = mc_.requireOp(c.callee, c.calleeLoc, calleeFailed);
  if (calleeFailed) {
    failed_ = true;
    return nullptr;
  }
  if (!items) {
    error(c.calleeLoc, fmt::format("the result of op '{}' is a tensor and must be indexed, as "
                                   "'{}(...)[...]'",
                                   c.callee, c.callee));
    return nullptr;
  }
  auto call = opCall(c, *callee);
  if (!call)
    return nullptr;
  call->indexed = true;
  if (!coords(*items, /*allowSlices=*/false, call->coords))
    return nullptr;
  ir::Rank want = callee->outputRank();
  bool anySplat = false;
  for (const ir::Coord &co : call->coords)
    anySplat |= co.kind == ir::Coord::Kind::Splat;
  if (want.groups.empty() && !anySplat && call->coords.size() != want.fixed) {
    error(whole->begin,
          fmt::format("op '{}' has rank {} but is indexed with {} coordinate{}", c.callee,
                      want.fixed, call->coords.size(), call->coords.size() == 1 ? "" : "s"));
    return nullptr;
  }
  return call;
}

std::unique_ptr<ir::OpCall> OpChecker::opCall(const ast::Call &c, const ir::OpDef &callee) {
  auto call = make<ir::OpCall>(c.calleeLoc);
  call->callee = &callee;
  bool ok = true;
  if (c.args.size() != callee.inputs.size()) {
    error(c.calleeLoc, fmt::format("op '{}' takes {} input{} but {} {} given", callee.name,
                                   callee.inputs.size(), callee.inputs.size() == 1 ? "" : "s",
                                   c.args.size(), c.args.size() == 1 ? "was" : "were"));
    return nullptr;
  }
  std::set<unsigned> given;
  for (const ast::AttrArg &a : c.attrs) {
    auto idx = callee.findAttr(a.name);
    if (!idx) {
      error(a.loc, fmt::format("op '{}' has no attribute '{}'", callee.name, a.name));
      ok = false;
      continue;
    }
    if (!given.insert(*idx).second) {
      error(a.loc, fmt::format("attribute '{}' is given twice", a.name));
      ok = false;
      continue;
    }
    auto v = constant(*a.value, "an attribute value");
    if (!v) {
      ok = false;
      continue;
    }
    call->attrs.push_back({*idx, std::move(v)});
  }
  for (unsigned i = 0; i < callee.attrs.size(); ++i)
    if (!callee.attrs[i].defaultValue && !given.count(i)) {
      error(c.calleeLoc, fmt::format("call of op '{}' must give attribute '{}', which has no "
                                     "default",
                                     callee.name, callee.attrs[i].name));
      ok = false;
    }
  std::set<unsigned> groupsGiven;
  for (const ast::GroupArg &g : c.groups) {
    std::optional<unsigned> var;
    for (unsigned v = 0; v < callee.vars.size(); ++v)
      if (callee.vars[v].isGroup && callee.vars[v].name == g.name)
        var = v;
    if (!var) {
      error(g.loc, fmt::format("op '{}' has no group '{}'", callee.name, g.name));
      ok = false;
      continue;
    }
    if (!groupsGiven.insert(*var).second) {
      error(g.loc, fmt::format("group '{}' is given twice", g.name));
      ok = false;
      continue;
    }
    call->groups.push_back({*var, g.length});
  }
  for (unsigned i = 0; i < c.args.size(); ++i) {
    auto t = tensorArg(*c.args[i], callee.name);
    if (!t) {
      ok = false;
      continue;
    }
    // A whole input passed where the callee reads a fixed rank: the ranks must agree.
    const auto *ref = dyn_cast<ir::TensorRef>(t.get());
    const auto &want = callee.inputs[i].rank;
    if (ref && ref->source == ir::TensorRef::Source::Input && want && want->groups.empty())
      recordRank(ref->input, *want, c.args[i]->begin);
    call->args.push_back(std::move(t));
  }
  return ok ? std::move(call) : nullptr;
}

ir::ExprPtr OpChecker::tensorArg(const ast::Expr &e, const std::string &callee) {
  if (const auto *n = dyn_cast<ast::Name>(&e)) {
    if (inGrad_ && (n->name == "dOut" || n->name == "out") && !op_.findInput(n->name)) {
      auto r = make<ir::TensorRef>(n->loc);
      r->source = n->name == "dOut" ? ir::TensorRef::Source::DOut : ir::TensorRef::Source::Out;
      return r;
    }
    if (auto in = op_.findInput(n->name)) {
      used_[*in] = true;
      passedWhole_[*in] = true;
      auto r = make<ir::TensorRef>(n->loc);
      r->input = *in;
      return r;
    }
    if (!lookupVar(n->name) && !op_.findAttr(n->name) && n->name != "inf" && n->name != "nan") {
      error(n->loc, fmt::format("unknown tensor '{}'", n->name));
      return nullptr;
    }
  } else if (const auto *ix = dyn_cast<ast::Index>(&e)) {
    const auto *base = dyn_cast<ast::Name>(ix->base.get());
    if (auto in = base ? op_.findInput(base->name) : std::nullopt) {
      used_[*in] = true;
      auto read = make<ir::Read>(ix->loc);
      read->input = *in;
      if (!coords(ix->items, /*allowSlices=*/true, read->coords))
        return nullptr;
      ir::Rank rank;
      bool anySlice = false;
      for (const ir::Coord &c : read->coords) {
        anySlice |= c.kind == ir::Coord::Kind::Slice;
        if (c.kind == ir::Coord::Kind::Splat)
          rank.groups.push_back(c.var);
        else
          ++rank.fixed;
      }
      std::sort(rank.groups.begin(), rank.groups.end());
      recordRank(*in, rank, ix->loc);
      if (!anySlice) {
        error(ix->begin, fmt::format("argument '{}' of '{}' is a single element; pass a tensor "
                                     "or a slice with ':'",
                                     ix->text, callee));
        return nullptr;
      }
      return read;
    }
  } else if (const auto *c = dyn_cast<ast::Call>(&e)) {
    if (mc_.hasOp(c->callee) && !lookupVar(c->callee) && !op_.findInput(c->callee) &&
        !op_.findAttr(c->callee)) {
      bool calleeFailed = false;
      const ir::OpDef *op = mc_.requireOp(c->callee, c->calleeLoc, calleeFailed);
      if (calleeFailed) {
        failed_ = true;
        return nullptr;
      }
      return opCall(*c, *op);
    }
  }
  error(e.begin, fmt::format("argument '{}' of '{}' must be a tensor: an input, a slice of one, "
                             "or an op call",
                             e.text, callee));
  return nullptr;
}

ir::ExprPtr OpChecker::reduce(const ast::Call &c, ir::Reducer r) {
  if (c.hasAttrList || !c.groups.empty()) {
    error(c.calleeLoc, fmt::format("reducer '{}' takes no attributes or groups", c.callee));
    return nullptr;
  }
  const ast::Lambda *lam =
      c.args.size() == 1 ? dyn_cast<ast::Lambda>(c.args.front().get()) : nullptr;
  if (!lam) {
    error(c.calleeLoc, fmt::format("reducer '{}' takes one argument, a lambda over the reduction "
                                   "variables",
                                   c.callee));
    return nullptr;
  }
  if (lam->params.empty()) {
    error(lam->begin, fmt::format("reducer '{}' needs at least one reduction variable", c.callee));
    return nullptr;
  }
  size_t mark = scope_.size();
  auto red = make<ir::Reduce>(c.calleeLoc);
  red->reducer = r;
  bool ok = bindParams(lam->params, ir::IndexVar::Role::Reduction, red->vars);
  red->body = value(*lam->body);
  ok &= red->body != nullptr;
  scope_.resize(mark);
  if (!ok)
    return nullptr;
  if (!inferExtents(*red, lam->begin))
    return nullptr;
  return red;
}

/// Finds, for each reduction variable of `red` without an explicit extent, an input
/// dimension that it indexes alone (`v` or `v + c`), as TDL.md section 3 prescribes.
bool OpChecker::inferExtents(const ir::Reduce &red, SourceLoc) {
  bool ok = true;
  for (unsigned v : red.vars) {
    ir::IndexVar &var = op_.vars[v];
    if (var.extent)
      continue;
    std::optional<ir::ExtentSource> found;
    auto alone = [&](const ir::Coord &c) {
      if (c.kind == ir::Coord::Kind::Splat)
        return c.var == v;
      if (c.kind != ir::Coord::Kind::Affine)
        return false;
      const ir::Expr *e = c.expr.get();
      if (const auto *b = dyn_cast<ir::Binary>(e);
          b && (b->op == ast::BinaryOp::Add || b->op == ast::BinaryOp::Sub)) {
        bool lhsVar = isa<ir::VarRef>(*b->lhs);
        const ir::Expr &other = lhsVar ? *b->rhs : *b->lhs;
        if (b->op == ast::BinaryOp::Sub && !lhsVar)
          return false; // c - v has coefficient -1
        bool otherConst = true;
        ir::walk(other, [&](const ir::Expr &s) {
          otherConst &= !isa<ir::VarRef>(s) && !isa<ir::Read>(s);
        });
        e = otherConst ? (lhsVar ? b->lhs.get() : b->rhs.get()) : nullptr;
      }
      const auto *ref = dyn_cast_or_null<ir::VarRef>(e);
      return ref && ref->var == v;
    };
    ir::walk(*red.body, [&](const ir::Expr &e) {
      const auto *read = dyn_cast<ir::Read>(&e);
      if (found || !read)
        return;
      ir::ExtentSource src;
      src.input = read->input;
      for (unsigned i = 0; i < read->coords.size(); ++i) {
        const ir::Coord &c = read->coords[i];
        if (alone(c)) {
          src.coord = i;
          found = src;
          return;
        }
        if (c.kind == ir::Coord::Kind::Splat)
          src.groupsBefore.push_back(c.var);
        else
          ++src.fixedBefore;
      }
    });
    if (!found) {
      error(var.loc,
            var.isGroup
                ? fmt::format("cannot infer the lengths and extents of reduction group '{}': no "
                              "input is indexed with '*{}'",
                              var.name, var.name)
                : fmt::format("cannot infer the extent of reduction variable '{}': it indexes no "
                              "input dimension alone; give it as '({} : K)'",
                              var.name, var.name));
      ok = false;
      continue;
    }
    var.inferred = std::move(found);
  }
  return ok;
}

} // namespace

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
