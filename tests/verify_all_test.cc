// Every strategy of every op in every .tdl file of the repository, checked by execution,
// and every grad clause against finite differences (what `tdlc --verify` does), so that
// every op anyone adds is checked; only a gradient passed straight through a rounding, which
// its example declares ("straight_through"), is left to the PyTorch oracle.
#include <algorithm>
#include <string>
#include <vector>

#include "analysis/gradcheck.h"
#include "analysis/sema.h"
#include "analysis/verify.h"
#include "llvm/Support/Path.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

TEST(VerifyAll, EveryStrategyOfEveryOpReproducesTheUnpartitionedResult) {
  std::vector<std::string> files = findTdlFiles({"tests/tdl/good", "ops"});
  ASSERT_FALSE(files.empty());
  unsigned ops = 0, strategies = 0, grads = 0, straight = 0;
  for (const std::string &file : files) {
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(file, diags);
    ASSERT_TRUE(static_cast<bool>(module)) << file << ": " << llvm::toString(module.takeError());
    auto examples = loadExamples(std::string(llvm::sys::path::parent_path(file)));
    ASSERT_TRUE(static_cast<bool>(examples)) << llvm::toString(examples.takeError());
    for (const ir::OpDef *op : module->opsInFile(file)) {
      // The library's ops state their output shapes, so graphs can infer shapes from TDL.
      if (llvm::StringRef(file).startswith("ops/")) {
        EXPECT_TRUE(op->shape.has_value())
            << file << ": op " << op->name << " has no output-shape clause";
      }
      GradCheckOptions options;
      if (auto it = examples->find(op->name); it != examples->end())
        options.example = &it->second;
      for (const GradCheck &g : checkGradients(*op, options)) {
        if (g.skipped && options.example && !options.example->straightThrough.empty()) {
          ++straight;
          continue;
        }
        ++grads;
        EXPECT_TRUE(g.ok) << (g.skipped ? "(not checked) " : "") << file << ": " << op->name
                          << ": grad " << g.input << " = " << g.call << ": " << g.problem;
      }
    }
    for (const OpCheck &c : verifyFile(*module, file)) {
      ++ops;
      EXPECT_TRUE(c.problem.empty()) << file << ": " << c.op << ": " << c.problem;
      for (const StrategyCheck &s : c.strategies) {
        ++strategies;
        EXPECT_TRUE(s.ok) << file << ": " << c.op << " split " << s.strategy << ": " << s.problem
                          << " (shapes " << c.shapes << ")";
      }
    }
  }
  std::printf("verified %u strategies of %u ops in %zu files, and %u grad clauses (%u more "
              "straight through a rounding)\n",
              strategies, ops, files.size(), grads, straight);
  EXPECT_GE(ops, 30u);
  EXPECT_GE(grads, 100u);
}

} // namespace
} // namespace tofu
