#include "search/test_problem.h"

#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {

Problem trainingProblem(llvm::Expected<Graph> g, Optimizer optimizer,
                        std::vector<std::string> *outputs) {
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  const OpLibrary &lib = testLibrary();
  llvm::Error e = checkGraph(*g, lib);
  EXPECT_FALSE(e) << llvm::toString(std::move(e));
  auto t = buildTrainingGraph(*g, g->outputs.at(0), lib, optimizer);
  EXPECT_TRUE(bool(t)) << llvm::toString(t.takeError());
  if (outputs)
    *outputs = t->outputs;
  auto p = Problem::build(*t, lib);
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  return std::move(*p);
}

} // namespace tofu
