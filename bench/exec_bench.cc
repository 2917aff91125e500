// Benchmark of partitioned execution on the CPU reference executor: for small models of the
// zoo at k = 2..8, every worker's peak memory (the static memory plan) relative to 1/k of
// the single-worker peak, and the bytes the executor moved relative to the plan's
// prediction. One run, every figure measured here.
//
//   bazel run -c opt //bench:exec_bench
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/pipeline.h"
#include "runtime/cpu_executor.h"
#include "search/search.h"

int main() {
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load("ops", diags);
  if (!lib) {
    std::fprintf(stderr, "exec_bench: %s\n", llvm::toString(lib.takeError()).c_str());
    return 1;
  }
  struct Model {
    std::string name;
    int64_t batch;
  };
  const Model models[] = {{"wresnet-50-1-i32-c8-k10", 4},
                          {"wresnet-101-1-i32-c4-k10", 4},
                          {"rnn-2-32", 8},
                          {"gpt-2-32-4-16", 2}};
  std::printf(
      "Small zoo models' SGD training steps on the CPU executor (workers as threads). Peak: "
      "the largest worker's arena in the static memory plan.\n\n");
  std::printf(
      "| model | nodes | k | peak / (single peak / k) | bytes moved | predicted | moved / "
      "predicted | step time (s) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Model &m : models) {
    tofu::GraphSource source;
    source.model = m.name;
    source.batch = m.batch;
    tofu::PipelineOptions po;
    po.train = tofu::Optimizer::SGD;
    po.until = tofu::Stage::Problem;
    auto r = tofu::runPipeline(source, *lib, po);
    if (!r) {
      std::printf("| %s | %s |\n", m.name.c_str(), llvm::toString(r.takeError()).c_str());
      continue;
    }
    const tofu::Graph *t = &r->graph;
    const tofu::Problem *p = &*r->problem;
    auto given = tofu::randomGraphInputs(*p, 1);
    int64_t single = 0;
    for (unsigned k : {1u, 2u, 3u, 4u, 6u, 8u}) {
      tofu::PlanOptions o;
      o.workers = k;
      auto plan = tofu::searchPlan(*p, o);
      if (!plan) {
        std::printf("| %s | | %u | %s |\n", m.name.c_str(), k,
                    llvm::toString(plan.takeError()).c_str());
        continue;
      }
      tofu::ExecPlan exec = tofu::buildExecPlan(*p, *plan);
      tofu::MemoryPlan mem = tofu::planMemory(*p, exec, t->outputs);
      if (k == 1) {
        single = mem.largestPeak();
        continue;
      }
      auto start = std::chrono::steady_clock::now();
      auto run = tofu::runPlan(*p, exec, given);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!run) {
        std::printf("| %s | | %u | %s |\n", m.name.c_str(), k,
                    llvm::toString(run.takeError()).c_str());
        continue;
      }
      int64_t predicted = tofu::CostModel(*p).bruteForceCost(plan->steps);
      std::printf("| %s | %zu | %u | %.3f | %lld | %lld | %.3f | %.2f |\n", m.name.c_str(),
                  p->nodes.size(), k, double(mem.largestPeak()) * k / double(single),
                  static_cast<long long>(run->bytesMoved), static_cast<long long>(predicted),
                  predicted ? double(run->bytesMoved) / double(predicted) : 1.0, secs);
      std::fflush(stdout);
    }
  }
  return 0;
}
