// Parsing .tdl text into the AST. ANTLR stays behind this header.
#ifndef TOFU_GRAMMAR_PARSER_H
#define TOFU_GRAMMAR_PARSER_H

#include <string>

#include "grammar/ast.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// Limits that keep hostile input from exhausting the stack of the recursive-descent
/// parser and of the passes over the tree.
constexpr unsigned kMaxNestingDepth = 200;
constexpr unsigned kMaxTokensPerDeclaration = 4000;

/// Parses `text`, the contents of the file named `path`. Every syntax error is reported
/// to `diags` (as many as recovery finds); the AST is returned only when there were none.
llvm::Expected<ast::File> parseTdl(const std::string &path, const std::string &text,
                                   DiagnosticEngine &diags);

} // namespace tofu

#endif // TOFU_GRAMMAR_PARSER_H
