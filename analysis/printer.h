// Prints the checked IR back as canonical TDL text (it parses and checks to an equal IR).
#ifndef TOFU_ANALYSIS_PRINTER_H
#define TOFU_ANALYSIS_PRINTER_H

#include <string>

#include "analysis/instantiate.h"
#include "analysis/ir.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

/// Prints one op declaration (ending in ';' and a newline).
void printOp(llvm::raw_ostream &os, const ir::OpDef &op);

/// Prints what `file` of `m` declares: its imports as written, its opaque functions and
/// its ops, so that the text, read from the same directory, checks back to the same IR.
void printFile(llvm::raw_ostream &os, const ir::Module &m, const std::string &file);

/// Prints one expression of `op` in canonical form.
std::string printExpr(const ir::OpDef &op, const ir::Expr &e);

/// Prints an expression of an instantiated op (variables and inputs by name).
std::string printInst(const InstOp &op, const ir::Expr &e);

} // namespace tofu

#endif // TOFU_ANALYSIS_PRINTER_H
