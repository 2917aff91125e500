// Semantic checks of TDL (analysis/sema.h), internal to them: the module checker (loading,
// declarations) and the op checker (an op's declaration, body and grad clauses). Their
// parts live by concern: sema.cc (loading a module and declaring its ops), sema_op.cc (an
// op's declaration, ranks and grad clauses), sema_expr.cc (expressions, index affinity,
// calls and reductions).
#ifndef TOFU_ANALYSIS_SEMA_INTERNAL_H
#define TOFU_ANALYSIS_SEMA_INTERNAL_H

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "fmt/format.h"

namespace tofu {
namespace semaimpl {

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

} // namespace semaimpl
} // namespace tofu

#endif // TOFU_ANALYSIS_SEMA_INTERNAL_H
