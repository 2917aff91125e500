#include "search/test_problem.h"

#include "api/pipeline.h"
#include "graph/test_library.h"
#include "gtest/gtest.h"

namespace tofu {

Problem trainingProblem(llvm::Expected<Graph> g, Optimizer optimizer,
                        std::vector<std::string> *outputs) {
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  PipelineOptions options;
  options.train = optimizer;
  options.until = Stage::Problem;
  auto r = runPipeline(std::move(*g), "the test graph", testLibrary(), options);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  if (outputs)
    *outputs = r->graph.outputs;
  return std::move(*r->problem);
}

} // namespace tofu
