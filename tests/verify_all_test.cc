// Every strategy of every op in every .tdl file of the repository, checked by execution
// (what `tdlc --verify` does), so that every op anyone adds is checked.
#include <algorithm>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "analysis/verify.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(VerifyAll, EveryStrategyOfEveryOpReproducesTheUnpartitionedResult) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  unsigned ops = 0, strategies = 0;
  for (const std::string &file : files) {
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    for (const OpCheck &c : verifyFile(*module, file)) {
      ++ops;
      EXPECT_TRUE(c.problem.empty()) << file << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++strategies;
        EXPECT_TRUE(s.ok) << file << ": " << c.op << " split " << s.strategy << ": "
                          << s.problem << " (shapes " << c.shapes << ")";
      }
    }
  }
  std::printf("verified %u strategies of %u ops in %zu files\n", strategies, ops, files.size());
  EXPECT_GE(ops, 30u);
}

} // namespace
} // namespace tofu
