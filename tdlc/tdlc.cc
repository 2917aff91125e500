// tdlc: the TDL compiler driver — checks .tdl files and prints their checked IR.
#include <string>
#include <vector>

#include "analysis/printer.h"
#include "analysis/sema.h"
#include "grammar/diagnostics.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

cl::OptionCategory tdlcCategory("tdlc options");

cl::opt<bool> checkMode("check",
                        cl::desc("Check every FILE: print diagnostics (file:line:col: error: "
                                 "...), exit 1 if any file has an error"),
                        cl::cat(tdlcCategory));
cl::opt<bool> dumpIr("dump-ir",
                     cl::desc("Check FILE and print its checked IR as canonical TDL (imports, "
                              "opaque declarations and ops of FILE; it parses back to the same "
                              "IR)"),
                     cl::cat(tdlcCategory));
cl::opt<bool> quiet("quiet", cl::desc("With --check, do not print warnings"),
                    cl::cat(tdlcCategory));
cl::list<std::string> files(cl::Positional, cl::desc("FILE..."), cl::cat(tdlcCategory));

constexpr const char *kVersion = "0.1.0";

void printVersion(llvm::raw_ostream &os) {
  os << "tdlc (Tofu) " << kVersion << "\n"
     << "TDL frontend: ANTLR 4 grammar, semantic checks to the checked IR\n";
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(tdlcCategory);
  cl::SetVersionPrinter(printVersion);
  cl::ParseCommandLineOptions(
      argc, argv,
      "tdlc - the Tofu TDL compiler\n\n"
      "  tdlc --check FILE...     check .tdl files (imports included)\n"
      "  tdlc --dump-ir FILE      print the checked IR of FILE as canonical TDL\n\n"
      "Exit status: 0 when every file checks, 1 when a file has an error, 2 on bad usage.\n");

  if (checkMode == dumpIr) {
    llvm::errs() << "tdlc: give exactly one of --check or --dump-ir (see --help)\n";
    return 2;
  }
  if (files.empty()) {
    llvm::errs() << "tdlc: no input files (see --help)\n";
    return 2;
  }
  if (dumpIr && files.size() != 1) {
    llvm::errs() << "tdlc: --dump-ir takes exactly one file\n";
    return 2;
  }

  int status = 0;
  for (const std::string &file : files) {
    tofu::SourceManager sources;
    tofu::DiagnosticEngine diags(sources);
    auto module = tofu::loadModule(file, diags);
    for (const tofu::Diagnostic &d : diags.diagnostics())
      if (!(quiet && d.severity == tofu::Severity::Warning))
        diags.print(llvm::errs(), d);
    if (!module) {
      llvm::consumeError(module.takeError());
      status = 1;
      continue;
    }
    if (dumpIr)
      tofu::printFile(llvm::outs(), *module, module->rootFile);
  }
  return status;
}
