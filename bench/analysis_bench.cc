// Benchmark: the time to analyse (instantiate + discover every strategy of) every op of
// the repository's .tdl files. Prints a table per op and the total; figures are medians of
// repeated runs measured in this process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "analysis/sema.h"
#include "analysis/strategy.h"
#include "analysis/verify.h"

namespace {

using Clock = std::chrono::steady_clock;

double medianMicros(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  std::vector<std::string> files = tofu::findTdlFiles({"tests/tdl/good", "ops"});
  if (files.empty()) {
    std::fprintf(stderr, "analysis_bench: no .tdl files found (run from the repository root or "
                         "with bazel run)\n");
    return 1;
  }
  std::printf("%-28s %-16s %10s %12s %12s\n", "file", "op", "strategies", "analyse (us)",
              "check (us)");
  double total = 0, totalCheck = 0;
  unsigned ops = 0, strategies = 0;
  struct FileRow {
    std::string file;
    unsigned ops = 0, strategies = 0;
    double analyse = 0, check = 0;
  };
  std::vector<FileRow> rows;
  for (const std::string &file : files) {
    std::vector<double> checkTimes;
    std::optional<tofu::ir::Module> module;
    for (int r = 0; r < repeats; ++r) {
      tofu::SourceManager sources;
      tofu::DiagnosticEngine diags(sources);
      auto start = Clock::now();
      auto m = tofu::loadModule(file, diags);
      checkTimes.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      if (!m) {
        std::fprintf(stderr, "%s: %s\n", file.c_str(), llvm::toString(m.takeError()).c_str());
        return 1;
      }
      module = std::move(*m);
    }
    double check = medianMicros(checkTimes);
    totalCheck += check;
    std::string shortFile = file.size() > 28 ? "..." + file.substr(file.size() - 25) : file;
    bool first = true;
    rows.push_back({file, 0, 0, 0, check});
    for (const tofu::ir::OpDef *op : module->opsInFile(file)) {
      tofu::Instantiation inst = tofu::completeForVerification(*op, {}, nullptr);
      std::vector<double> times;
      size_t count = 0;
      for (int r = 0; r < repeats; ++r) {
        auto start = Clock::now();
        auto table = tofu::analyzeOp(*op, inst);
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
        if (!table) {
          std::fprintf(stderr, "%s: %s\n", op->name.c_str(),
                       llvm::toString(table.takeError()).c_str());
          return 1;
        }
        count = table->strategies.size();
      }
      double t = medianMicros(times);
      total += t;
      rows.back().ops += 1;
      rows.back().strategies += static_cast<unsigned>(count);
      rows.back().analyse += t;
      ++ops;
      strategies += static_cast<unsigned>(count);
      if (first)
        std::printf("%-28s %-16s %10zu %12.1f %12.1f\n", shortFile.c_str(), op->name.c_str(), count,
                    t, check);
      else
        std::printf("%-28s %-16s %10zu %12.1f\n", "", op->name.c_str(), count, t);
      first = false;
    }
  }
  std::printf("%-28s %-16s %10u %12.1f %12.1f\n", "total", (std::to_string(ops) + " ops").c_str(),
              strategies, total, totalCheck);
  std::printf("(median of %d runs each; 'check' is parsing and checking the whole file)\n\n",
              repeats);
  std::printf("| file | ops | strategies | analyse (us, all ops) | parse + check file (us) |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: |\n");
  for (const FileRow &r : rows)
    std::printf("| %s | %u | %u | %.1f | %.1f |\n", r.file.c_str(), r.ops, r.strategies, r.analyse,
                r.check);
  std::printf("| total | %u | %u | %.1f | %.1f |\n", ops, strategies, total, totalCheck);
  return 0;
}
