// Benchmark of the partition search. Search times are the search's own (searchSeconds: not
// the exact per-step accounting searchPlan does after it) unless a table says otherwise.
// Table 1: the paper's models at k = 8, every algorithm's
// search time and communication relative to tofu's. Table 2: tofu from k = 2 to 1024 on
// WResNet-152-10 and RNN-10-8K. Table 3: the memory options (planner/memory_fit.h): what
// planning memory adds to a search, a budget 10% under the unpriced plan's peak, and the
// smallest count of 80 GiB workers, on training steps with Adam. Table 4: tofu's search
// time on training steps with Adam at k = 8 (the least of five runs), on the machine's
// threads and on one, what the moves beyond the sweeps (pairs, merged-factor starts) and
// --topology add. Every figure is measured in
// this run.
//
//   bazel run -c opt //bench:search_bench -- [--budget SECONDS] [--quick]
//
// --budget bounds dp-flat per model (default 10 s); --quick runs one model per family.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "fmt/format.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "planner/memory_fit.h"
#include "planner/pipeline.h"
#include "planner/topology.h"
#include "search/parallel.h"
#include "search/report.h"
#include "search/search.h"
#include "support/units.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string cpuName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

struct Model {
  std::string name;
  int64_t batch;
};

llvm::Expected<tofu::Problem> problemFor(const Model &m, const tofu::OpLibrary &lib,
                                         tofu::Optimizer optimizer = tofu::Optimizer::SGD,
                                         std::vector<std::string> *outputs = nullptr) {
  tofu::GraphSource source;
  source.model = m.name;
  source.batch = m.batch;
  tofu::PipelineOptions po;
  po.train = optimizer;
  po.until = tofu::Stage::Problem;
  auto r = tofu::runPipeline(source, lib, po);
  if (!r)
    return r.takeError();
  if (outputs)
    *outputs = r->graph.outputs;
  return std::move(*r->problem);
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

int main(int argc, char **argv) {
  double budget = 10;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--budget") && i + 1 < argc)
      budget = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else {
      std::fprintf(stderr, "usage: search_bench [--budget SECONDS] [--quick]\n");
      return 2;
    }
  }
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  auto lib = tofu::OpLibrary::load("ops", diags);
  if (!lib) {
    std::fprintf(stderr, "search_bench: %s (run with bazel run from the repository)\n",
                 llvm::toString(lib.takeError()).c_str());
    return 1;
  }
  std::printf("machine: %s, %u hardware threads; training graphs with SGD; WResNet batch 8, "
              "RNN batch 512 (the paper's); dp-flat budget %.0f s\n\n",
              cpuName().c_str(), std::thread::hardware_concurrency(), budget);

  std::vector<Model> models;
  for (int depth : {50, 101, 152})
    for (int w : {4, 6, 8, 10})
      if (!quick || (depth == 152 && w == 10))
        models.push_back({fmt::format("wresnet-{}-{}", depth, w), 8});
  for (int layers : {6, 8, 10})
    for (const char *h : {"4K", "6K", "8K"})
      if (!quick || (layers == 10 && std::string(h) == "8K"))
        models.push_back({fmt::format("rnn-{}-{}", layers, h), 512});

  const tofu::Algorithm algos[] = {tofu::Algorithm::Tofu,        tofu::Algorithm::DpFlat,
                                   tofu::Algorithm::Icml18,      tofu::Algorithm::EqualChop,
                                   tofu::Algorithm::Spartan,     tofu::Algorithm::AllRow,
                                   tofu::Algorithm::DataParallel};
  std::printf("Table 1: k = 8. tofu's search time and communication per training step; every other "
              "algorithm as time / communication relative to tofu's.\n\n");
  std::printf("| model | nodes | tofu time | tofu comm |");
  for (size_t a = 1; a < std::size(algos); ++a)
    std::printf(" %s |", tofu::algorithmName(algos[a]));
  std::printf("\n| --- | ---: | ---: | ---: |");
  for (size_t a = 1; a < std::size(algos); ++a)
    std::printf(" ---: |");
  std::printf("\n");
  for (const Model &m : models) {
    auto p = problemFor(m, *lib);
    if (!p) {
      std::printf("| %s | error: %s |\n", m.name.c_str(), llvm::toString(p.takeError()).c_str());
      continue;
    }
    double tofuTime = 0;
    int64_t tofuBytes = 0;
    std::string row;
    for (tofu::Algorithm a : algos) {
      tofu::PlanOptions o;
      o.workers = 8;
      o.algorithm = a;
      o.budgetSeconds = budget;
      auto start = Clock::now();
      auto plan = tofu::searchPlan(*p, o);
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      if (plan) // the search's own time (without the exact per-step accounting after it)
        secs = plan->searchSeconds;
      if (!plan) {
        std::string why = llvm::toString(plan.takeError());
        row += why.find("budget") != std::string::npos ? fmt::format(" > {:.0f} s budget |", budget)
               : why.find("too wide") != std::string::npos ? " table over the 2^24 limit |"
                                                           : " fails: " + why + " |";
        continue;
      }
      if (a == tofu::Algorithm::Tofu) {
        tofuTime = secs;
        tofuBytes = plan->totalBytes;
        row += fmt::format(" {:.3f} s | {} |", secs, tofu::humanBytes(double(plan->totalBytes)));
      } else {
        row += fmt::format(" {:.2f}x / {:.3f}x |", secs / tofuTime,
                           tofuBytes ? double(plan->totalBytes) / double(tofuBytes) : 1.0);
      }
    }
    std::printf("| %s | %zu |%s\n", m.name.c_str(), p->nodes.size(), row.c_str());
    std::fflush(stdout);
  }

  std::printf("\nTable 2: tofu's scaling with k (k1 >= k2 >= ... factors; communication counted "
              "over every worker). Search time: the search's own; with accounting: also the "
              "exact communication of every step's prefix after it (searchPlan's whole call).\n\n");
  std::printf("| model | k | factors | search time | with accounting | communication | worker 0 "
              "tensor memory | 1/k of single |\n");
  std::printf("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<Model> scaling = {{"wresnet-152-10", 8}, {"rnn-10-8K", 512}};
  for (const Model &m : scaling) {
    auto p = problemFor(m, *lib);
    if (!p) {
      std::printf("| %s | error: %s |\n", m.name.c_str(), llvm::toString(p.takeError()).c_str());
      continue;
    }
    int64_t single = p->workerTensorBytes({}, {});
    for (unsigned k : {2u, 3u, 4u, 6u, 8u, 12u, 16u, 32u, 64u, 128u, 256u, 512u, 1024u}) {
      if (quick && k != 8 && k != 1024)
        continue;
      tofu::PlanOptions o;
      o.workers = k;
      auto start = Clock::now();
      auto plan = tofu::searchPlan(*p, o);
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      if (!plan) {
        std::printf("| %s | %u | fails: %s |\n", m.name.c_str(), k,
                    llvm::toString(plan.takeError()).c_str());
        continue;
      }
      std::string factors;
      std::vector<unsigned> parts;
      for (const tofu::StepChoice &s : plan->steps) {
        factors += (factors.empty() ? "" : "x") + std::to_string(s.parts);
        parts.push_back(s.parts);
      }
      int64_t mem = p->workerTensorBytes(plan->steps, std::vector<unsigned>(parts.size(), 0));
      std::printf(
          "| %s | %u | %s | %.3f s | %.3f s | %s | %s | %s |\n", m.name.c_str(), k, factors.c_str(),
          plan->searchSeconds, secs, tofu::humanBytes(double(plan->totalBytes)).c_str(),
          tofu::humanBytes(double(mem)).c_str(), tofu::humanBytes(double(single) / k).c_str());
      std::fflush(stdout);
    }
  }
  std::printf("\nTable 3: memory budgets (training with Adam, k = 8 unless searched). Search: tofu "
              "alone; + memory plan: also the execution plan and every worker's memory plan "
              "(the planned peak). --memory-per-worker at 90%% of the unpriced plan's peak: "
              "plans searched, the peak and communication of the plan chosen, the time. "
              "--fit 80GiB: the smallest count, the counts tried, the time.\n\n");
  std::printf("| model | batch | search | + memory plan | unpriced peak | 90%% budget: fits | "
              "searches | peak | comm vs unpriced | time | --fit 80GiB | tried | time |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
              "---: |\n");
  std::vector<Model> budgets = {
      {"wresnet-152-10", 32}, {"rnn-10-8K", 512}, {"gpt-12-768-12-1024", 8}};
  if (!quick)
    budgets.push_back({"gpt-48-8192-64-2048", 8});
  for (const Model &m : budgets) {
    std::vector<std::string> outputs;
    auto p = problemFor(m, *lib, tofu::Optimizer::Adam, &outputs);
    if (!p) {
      std::printf("| %s | error: %s |\n", m.name.c_str(), llvm::toString(p.takeError()).c_str());
      continue;
    }
    tofu::PlanOptions o;
    o.workers = 8;
    auto start = Clock::now();
    auto plan = tofu::searchPlan(*p, o);
    const double search = since(start);
    if (!plan) {
      std::printf("| %s | fails: %s |\n", m.name.c_str(), llvm::toString(plan.takeError()).c_str());
      continue;
    }
    const int64_t peak =
        tofu::planMemory(*p, tofu::buildExecPlan(*p, *plan), outputs).largestPeak();
    const double planned = since(start);
    const int64_t limit = peak / 10 * 9;
    start = Clock::now();
    auto fit = tofu::searchWithinMemory(*p, o, limit, outputs);
    const double budgetTime = since(start);
    start = Clock::now();
    auto count = tofu::fitWorkers(*p, o, int64_t(80) << 30, outputs, 1024);
    const double countTime = since(start);
    std::string budgetCells =
        fit ? fmt::format("{} | {} | {} | {:.3f}x | {:.2f} s", fit->fits ? "yes" : "no",
                          fit->searches, tofu::humanBytes(double(fit->peak)),
                          double(fit->plan.totalBytes) / double(plan->totalBytes), budgetTime)
            : "fails: " + llvm::toString(fit.takeError()) + " | | | |";
    std::string countCells =
        count ? fmt::format("{} | {}-{} | {:.2f} s", count->fit.plan.workers, count->lowerBound,
                            count->fit.plan.workers, countTime)
              : "fails: " + llvm::toString(count.takeError()) + " | |";
    std::printf("| %s | %lld | %.3f s | %.3f s | %s | %s | %s |\n", m.name.c_str(),
                (long long)m.batch, search, planned, tofu::humanBytes(double(peak)).c_str(),
                budgetCells.c_str(), countCells.c_str());
    std::fflush(stdout);
  }

  std::printf("\nTable 4: search time (the search's own, as tofu-plan's search_seconds), "
              "training with Adam, k = 8, the least of 5 runs. tofu: the default search (%u "
              "threads on this machine: its cores, at most 8); 1 thread: the same search on one "
              "thread (PlanOptions::threads; the same plan); sweeps only: without the pair and "
              "merged-factor moves (PlanOptions::jointMoves); "
              "--topology 2x4:12.5GB/s@5us,150GB/s@1us: the whole call, the machine's search and "
              "the plan of least bytes, each one's traffic per level counted from its execution "
              "plan.\n\n",
              tofu::WorkerPool::defaultThreads());
  std::printf("| model | batch | nodes | DP variables | tofu | 1 thread | sweeps only | "
              "--topology 2x4 |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<Model> timed = {{"wresnet-152-10", 8}, {"rnn-10-8K", 512}, {"gpt-12-768-12-1024", 8}};
  auto topology = tofu::parseTopology("2x4:12.5GB/s@5us,150GB/s@1us");
  if (!topology) {
    std::printf("topology: %s\n", llvm::toString(topology.takeError()).c_str());
    return 1;
  }
  for (const Model &m : timed) {
    auto p = problemFor(m, *lib, tofu::Optimizer::Adam);
    if (!p) {
      std::printf("| %s | error: %s |\n", m.name.c_str(), llvm::toString(p.takeError()).c_str());
      continue;
    }
    size_t variables = 0;
    // The least of five runs of `search` (which gives its seconds), or its error.
    auto best = [&](auto search) -> std::string {
      double least = 1e30;
      for (int run = 0; run < 5; ++run) {
        llvm::Expected<double> secs = search();
        if (!secs)
          return "fails: " + llvm::toString(secs.takeError());
        least = std::min(least, *secs);
      }
      return fmt::format("{:.3f} s", least);
    };
    tofu::PlanOptions o;
    o.workers = 8;
    auto plain = [&](bool joint, unsigned threads) { // the search's own time (searchSeconds)
      return [&, joint, threads]() -> llvm::Expected<double> {
        tofu::PlanOptions q = o;
        q.jointMoves = joint;
        q.threads = threads;
        auto plan = tofu::searchPlan(*p, q);
        if (!plan)
          return plan.takeError();
        variables = plan->variables;
        return plan->searchSeconds;
      };
    };
    const std::string tofuTime = best(plain(true, 0)), oneThread = best(plain(true, 1)),
                      sweepsTime = best(plain(false, 0));
    const std::string topologyTime = best([&]() -> llvm::Expected<double> { // the whole call
      auto start = Clock::now();
      auto plan = tofu::searchForTopology(*p, o, *topology);
      if (!plan)
        return plan.takeError();
      return since(start);
    });
    std::printf("| %s | %lld | %zu | %zu | %s | %s | %s | %s |\n", m.name.c_str(),
                (long long)m.batch, p->nodes.size(), variables, tofuTime.c_str(), oneThread.c_str(),
                sweepsTime.c_str(), topologyTime.c_str());
    std::fflush(stdout);
  }
  return 0;
}
