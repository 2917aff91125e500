// IR print -> parse round trip: for every .tdl file in the repository that checks, the
// printed IR of each of its files checks back to an equal IR, and printing is a fixpoint.
#include <string>
#include <vector>

#include "analysis/printer.h"
#include "analysis/sema.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

std::string print(const ir::Module &m, const std::string &file) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printFile(os, m, file);
  return os.str();
}

TEST(RoundTrip, PrintedIrChecksBackToTheSameIr) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "tests/tdl/bad", "ops"});
  ASSERT_FALSE(files.empty());
  unsigned checkedFiles = 0, checkedOps = 0;
  for (const std::string &path : files) {
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(path, diags);
    if (!module) { // the invalid corpus: nothing to print
      llvm::consumeError(module.takeError());
      continue;
    }
    for (const std::string &file : module->files) {
      SCOPED_TRACE(file);
      std::string text = print(*module, file);
      SourceManager sources2;
      DiagnosticEngine diags2(sources2);
      auto again = loadModuleFromText(file, text, diags2);
      if (!again) {
        llvm::consumeError(again.takeError());
        std::string errs;
        for (const Diagnostic &d : diags2.diagnostics())
          errs += d.str() + "\n";
        ADD_FAILURE() << "printed IR does not check:\n" << text << errs;
        continue;
      }
      std::vector<const ir::OpDef *> before = module->opsInFile(file);
      std::vector<const ir::OpDef *> after = again->opsInFile(file);
      ASSERT_EQ(before.size(), after.size());
      for (size_t i = 0; i < before.size(); ++i) {
        EXPECT_TRUE(ir::equal(*before[i], *after[i]))
            << "op '" << before[i]->name << "' differs after the round trip:\n"
            << text;
        ++checkedOps;
      }
      EXPECT_EQ(print(*again, file), text) << "printing is not a fixpoint";
      ++checkedFiles;
    }
  }
  EXPECT_GE(checkedFiles, 5u);
  EXPECT_GE(checkedOps, 30u);
}

} // namespace
} // namespace tofu
