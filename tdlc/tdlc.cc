// tdlc: the TDL compiler driver — checks .tdl files and prints their checked IR.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analysis/checked.h"
#include "analysis/printer.h"
#include "analysis/report.h"
#include "analysis/sema.h"
#include "analysis/verify.h"
#include "codegen/kernel_gen.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "runtime/kernel_verify.h"
#include "support/cl_choice.h"
#include "support/errors.h"
#include "support/version.h"
#include "tdlc/op_modes.h"
#include "tdlc/stats.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
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
cl::opt<bool> strategies("strategies",
                         cl::desc("Print every basic partition strategy of every op of FILE "
                                  "(groups default to length 1, attributes to their defaults)"),
                         cl::cat(tdlcCategory));
cl::opt<bool> verify("verify",
                     cl::desc("Check every strategy of every op of FILE by execution: two workers "
                              "that see only their analysed input regions (the rest NaN) must "
                              "reproduce the unpartitioned result; exit 1 on any failure"),
                     cl::cat(tdlcCategory));
cl::opt<bool> kernel("kernel",
                     cl::desc("Print the kernel schedule (where each reduction is computed: "
                              "inline, in a temporary, shared with an equal one, or counted) "
                              "and the generated kernel source of every op of FILE (or --op), "
                              "for --target"),
                     cl::cat(tdlcCategory));
cl::opt<bool> evalMode("eval",
                       cl::desc("Evaluate one op (--op) with the interpreter, in double, on the "
                                "arrays --input gives (.npy, .pb or IDX; a one-element array "
                                "stands for a rank-0 input) and, with --dout, each grad clause "
                                "for that output gradient; write DIR/out.npy and "
                                "DIR/grad_<input>.npy (--output-dir)"),
                       cl::cat(tdlcCategory));
cl::opt<std::string> evalInputs("input",
                                cl::desc("With --eval: NAME=FILE,... one per input of the op"),
                                cl::value_desc("NAME=FILE,..."), cl::cat(tdlcCategory));
cl::opt<std::string> evalDout("dout", cl::desc("With --eval: the output's gradient"),
                              cl::value_desc("FILE"), cl::cat(tdlcCategory));
cl::opt<std::string> evalOutDir("output-dir", cl::desc("With --eval: where the results go"),
                                cl::value_desc("DIR"), cl::cat(tdlcCategory));
enum class Target { Cpp, Cuda };
cl::opt<Target> target("target", cl::desc("With --kernel: the kernel dialect"),
                       cl::values(clEnumValN(Target::Cpp, "cpp", "C++ with OpenMP (default)"),
                                  clEnumValN(Target::Cuda, "cuda", "CUDA C++ for NVRTC")),
                       cl::init(Target::Cpp), cl::cat(tdlcCategory));
// Spelled --stats on the command line; libLLVM already owns an option named "stats", so
// main() renames the argument before parsing (see the overview in --help).
cl::opt<bool> stats("tdlc-stats", cl::Hidden,
                    cl::desc("Print statistics of the operator library in DIR (every .tdl file "
                             "under it) and its ONNX coverage (DIR/onnx_mapping.json against "
                             "libonnx's opset 17)"),
                    cl::cat(tdlcCategory));
cl::opt<unsigned> seed("seed", cl::desc("With --verify: random seed (default 1)"), cl::init(1),
                       cl::cat(tdlcCategory));
cl::opt<std::string> opName("op", cl::desc("With --strategies or --kernel: only the op named NAME"),
                            cl::value_desc("NAME"), cl::cat(tdlcCategory));
cl::list<std::string> attrArgs("attr", cl::desc("With --strategies: attribute value (repeatable)"),
                               cl::value_desc("a=v"), cl::cat(tdlcCategory));
cl::list<std::string> groupArgs("group",
                                cl::desc("With --strategies: variadic group length (repeatable)"),
                                cl::value_desc("g=n"), cl::cat(tdlcCategory));
cl::list<std::string> rankArgs("rank",
                               cl::desc("With --strategies: the rank of an input the op only "
                                        "passes whole to calls (repeatable)"),
                               cl::value_desc("x=n"), cl::cat(tdlcCategory));
enum class Format { Table, Json };
cl::opt<Format> format("format", cl::desc("With --strategies: output format"),
                       cl::values(clEnumValN(Format::Table, "table", "a readable table (default)"),
                                  clEnumValN(Format::Json, "json", "JSON (DESIGN.md's schema)")),
                       cl::init(Format::Table), cl::cat(tdlcCategory));
cl::opt<bool> quiet("quiet", cl::desc("With --check, do not print warnings"),
                    cl::cat(tdlcCategory));
enum class Kernels { Interp, Compiled };
cl::opt<Kernels, false, tofu::ChoiceParser<Kernels>> kernelsMode(
    "kernels", cl::desc("With --verify: what computes each worker's share:"),
    cl::values(clEnumValN(Kernels::Interp, "interp", "the TDL interpreter, double (default)"),
               clEnumValN(Kernels::Compiled, "compiled",
                          "oneDNN where a library call expresses the share, else the op's "
                          "generated C++ kernel, float32, as tofu-run runs them")),
    cl::init(Kernels::Interp), cl::cat(tdlcCategory));
cl::opt<tofu::loops::Element, false, tofu::ChoiceParser<tofu::loops::Element>> storage(
    "storage",
    cl::desc("With --kernel, or --verify --kernels compiled: the element type of the kernels' "
             "buffers in memory (arithmetic is float32 either way):"),
    cl::values(clEnumValN(tofu::loops::Element::F32, "f32", "float32 (default)"),
               clEnumValN(tofu::loops::Element::BF16, "bf16",
                          "bfloat16: float inputs and the output loaded widened and stored "
                          "rounded to the nearest (a reduction's partial results float32); "
                          "verified on inputs bfloat16 holds exactly, within its rounding, "
                          "without library calls")),
    cl::init(tofu::loops::Element::F32), cl::cat(tdlcCategory));
tdlc::VerifyCounts counts;
/// With --kernels compiled: the kernels, compiled once per file in one batch.
std::unique_ptr<tofu::CpuKernelLibrary> kernelLibrary;

cl::list<std::string> files(cl::Positional, cl::desc("FILE..."), cl::cat(tdlcCategory));

/// Parses `name=value` arguments of --attr / --group into `out`; false on a bad one.
bool parseAssignments(const std::vector<std::string> &args, const char *flag, int64_t lo,
                      int64_t hi, const char *what, std::map<std::string, int64_t> &out) {
  for (const std::string &a : args) {
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      llvm::errs() << "tdlc: --" << flag << " expects NAME=INTEGER, got '" << a << "'\n";
      return false;
    }
    auto v = tofu::parseInteger(llvm::StringRef(a).substr(eq + 1), lo, hi,
                                fmt::format("{} ({})", what, a.substr(0, eq)));
    if (!v) {
      llvm::errs() << "tdlc: --" << flag << " " << a << ": " << llvm::toString(v.takeError())
                   << "\n";
      return false;
    }
    out[a.substr(0, eq)] = *v;
  }
  return true;
}

/// --strategies and --verify over one checked module: every op of its root file (or --op).
int analyseModule(const tofu::ir::Module &module) {
  tofu::Instantiation inst;
  std::map<std::string, int64_t> ranks;
  // Ranks as far as the analysis goes, group counts and attributes as far as any shape.
  if (!parseAssignments(attrArgs, "attr", -(int64_t(1) << 31), int64_t(1) << 31,
                        "an attribute's value", inst.attrs) ||
      !parseAssignments(groupArgs, "group", 1, int64_t(1) << 20, "a group count", inst.groups) ||
      !parseAssignments(rankArgs, "rank", 0, 32, "a rank", ranks))
    return 2;
  std::vector<const tofu::ir::OpDef *> ops;
  if (!opName.empty()) {
    const tofu::ir::OpDef *op = module.findOp(opName);
    if (!op) {
      llvm::errs() << "tdlc: no op named '" << opName << "' in " << module.rootFile << "\n";
      return 1;
    }
    ops.push_back(op);
  } else {
    ops = module.opsInFile(module.rootFile);
  }
  int status = 0;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  std::map<std::string, tofu::Example> examples;
  if (verify && kernelsMode == Kernels::Compiled) {
    std::vector<std::string> notCompiled;
    std::vector<tofu::KernelSource> kernels = tofu::verificationKernels(
        module, module.rootFile, &notCompiled, tofu::KernelDialect::Cpp, storage);
    kernelLibrary = std::make_unique<tofu::CpuKernelLibrary>();
    if (llvm::Error e = kernelLibrary->add(kernels, {})) {
      llvm::errs() << "tdlc: compiling the kernels of " << module.rootFile << ": "
                   << llvm::toString(std::move(e)) << "\n";
      return 1;
    }
    const tofu::KernelCompileStats &cs = kernelLibrary->stats();
    llvm::outs() << llvm::format("kernels: %u compiled in %.1f s (%u units from the cache)\n",
                                 cs.kernels, cs.seconds, cs.units - cs.unitsCompiled);
    for (const std::string &why : notCompiled)
      llvm::outs() << "on the interpreter: " << why << "\n";
  }
  if (verify) {
    auto loaded = tofu::loadExamples(std::string(llvm::sys::path::parent_path(module.rootFile)));
    if (!loaded) {
      llvm::errs() << "tdlc: " << llvm::toString(loaded.takeError()) << "\n";
      return 1;
    }
    examples = std::move(*loaded);
  }
  // A name given on the command line that no op of the selection has is a mistake (a typo,
  // the wrong op), not something to ignore.
  {
    std::string unused;
    for (const auto &entry : inst.attrs)
      if (const auto &name = entry.first;
          std::none_of(ops.begin(), ops.end(),
                       [&](const tofu::ir::OpDef *op) { return op->findAttr(name).has_value(); }))
        unused += fmt::format(" --attr {}", name);
    for (const auto &entry : inst.groups)
      if (const auto &name = entry.first;
          std::none_of(ops.begin(), ops.end(), [&](const tofu::ir::OpDef *op) {
            return std::any_of(op->vars.begin(), op->vars.end(), [&](const tofu::ir::IndexVar &v) {
              return v.isGroup && v.name == name;
            });
          }))
        unused += fmt::format(" --group {}", name);
    for (const auto &entry : ranks)
      if (const auto &name = entry.first;
          std::none_of(ops.begin(), ops.end(),
                       [&](const tofu::ir::OpDef *op) { return op->findInput(name).has_value(); }))
        unused += fmt::format(" --rank {}", name);
    if (!unused.empty()) {
      llvm::errs() << "tdlc: no op "
                   << (opName.empty() ? "of " + module.rootFile : "'" + opName + "'")
                   << " has what these name:" << unused << "\n";
      return 2;
    }
  }
  for (const tofu::ir::OpDef *op : ops) {
    if (evalMode) {
      tofu::Instantiation mine = inst;
      for (const auto &[name, value] : ranks)
        if (auto i = op->findInput(name)) {
          mine.inputRanks.resize(op->inputs.size());
          mine.inputRanks[*i] = static_cast<unsigned>(value);
        }
      return tdlc::evaluateOp(*op, mine, evalInputs, evalDout, evalOutDir);
    }
    const tofu::Example *example = nullptr;
    if (auto it = examples.find(op->name); it != examples.end())
      example = &it->second;
    // Attributes and groups given on the command line apply to the ops that have them.
    tofu::Instantiation mine;
    for (const auto &[name, value] : inst.attrs)
      if (op->findAttr(name))
        mine.attrs[name] = value;
    for (const auto &[name, value] : inst.groups)
      for (const tofu::ir::IndexVar &v : op->vars)
        if (v.isGroup && v.name == name)
          mine.groups[name] = value;
    for (const auto &[name, value] : ranks)
      if (auto i = op->findInput(name)) {
        mine.inputRanks.resize(op->inputs.size());
        mine.inputRanks[*i] = static_cast<unsigned>(value);
      }
    std::string defaults;
    if (verify) { // verification needs some value for everything; it says which it chose
      if (example)
        for (const auto &[name, value] : example->inst.attrs)
          mine.attrs.emplace(name, value);
      if (example)
        for (const auto &[name, value] : example->inst.groups)
          mine.groups.emplace(name, value);
      if (example && mine.inputRanks.empty())
        mine.inputRanks = example->inst.inputRanks;
      mine = tofu::completeForVerification(*op, std::move(mine), &defaults);
    }
    // An op that cannot be instantiated or analysed: its location, the reason.
    auto opError = [&](llvm::Error e) {
      llvm::errs() << op->file << ":" << op->loc.line << ":" << op->loc.col
                   << ": error: " << llvm::toString(std::move(e)) << "\n";
      status = 1;
    };
    if (kernel) {
      if (llvm::Error e = tdlc::printKernel(*op, mine, target == Target::Cuda, storage))
        opError(std::move(e));
      continue;
    }
    auto table = tofu::analyzeOp(*op, mine);
    if (!table) {
      opError(table.takeError());
      continue;
    }
    if (verify) {
      if (!tdlc::verifyOp(*op, *table, example, defaults, seed, kernelLibrary.get(), storage,
                          counts))
        status = 1;
      continue;
    }
    if (format == Format::Json)
      all.push_back(tofu::strategiesJson(*table));
    else
      tofu::printStrategyTable(llvm::outs(), *table);
  }
  if (verify) {
    llvm::outs() << "verify: " << counts.passed << " passed, " << counts.failed << " failed\n";
    return status;
  }
  if (format == Format::Json)
    llvm::outs() << nlohmann::ordered_json{{"ops", all}}.dump(2) << "\n";
  return status;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<char *> args(argv, argv + argc);
  static char renamed[] = "--tdlc-stats";
  for (char *&a : args)
    if (llvm::StringRef(a) == "--stats" || llvm::StringRef(a) == "-stats")
      a = renamed;
  argc = static_cast<int>(args.size());
  argv = args.data();
  cl::HideUnrelatedOptions(tdlcCategory);
  tofu::setToolVersion("tdlc", "TDL frontend: ANTLR 4 grammar, semantic checks to the checked IR");
  // Bad usage exits 2, as --help says (llvm's parser would exit 1).
  const bool parsed = cl::ParseCommandLineOptions(
      argc, argv,
      "tdlc - the Tofu TDL compiler\n\n"
      "  tdlc --check FILE...     check .tdl files (imports included)\n"
      "  tdlc --dump-ir FILE      print the checked IR of FILE as canonical TDL\n"
      "  tdlc --strategies FILE   print every basic partition strategy of FILE's ops\n"
      "                           [--op NAME] [--attr a=v] [--group g=n] [--format=table|json]\n"
      "  tdlc --verify FILE...    check every strategy of the files' ops by execution\n"
      "  tdlc --verify --kernels compiled FILE...   the same on the compiled kernels tofu-run "
      "runs\n"
      "  tdlc --eval FILE --op NAME --input x=X.npy,... [--dout D.npy] --output-dir DIR\n"
      "                           [--attr a=v] [--group g=n]: one op and its grad clauses on\n"
      "                           given arrays, by the interpreter\n"
      "  tdlc --kernel FILE       print each op's kernel schedule and generated source\n"
      "                           [--op NAME] [--attr a=v] [--group g=n] [--target=cpp|cuda]\n"
      "  tdlc --stats DIR         statistics of an operator library and its ONNX coverage\n\n"
      "Exit status: 0 when every file checks, 1 when a file has an error, 2 on bad usage.\n",
      &llvm::errs());
  if (!parsed)
    return 2;

  if (int(checkMode) + int(dumpIr) + int(strategies) + int(verify) + int(stats) + int(kernel) +
          int(evalMode) !=
      1) {
    llvm::errs() << "tdlc: give exactly one of --check, --dump-ir, --strategies, --verify, "
                    "--kernel, --eval or --stats (see --help)\n";
    return 2;
  }
  if (evalMode && (opName.empty() || evalOutDir.empty() || files.size() != 1)) {
    llvm::errs() << "tdlc: --eval takes one file, --op NAME, --input and --output-dir DIR\n";
    return 2;
  }
  if (!evalMode && (!evalInputs.empty() || !evalDout.empty() || !evalOutDir.empty())) {
    llvm::errs() << "tdlc: --input, --dout and --output-dir are for --eval\n";
    return 2;
  }
  if (stats) {
    if (files.size() != 1) {
      llvm::errs() << "tdlc: --stats takes one directory\n";
      return 2;
    }
    const tofu::LibraryStats s = tofu::exitOnError("tdlc")(tofu::computeStats(files.front()));
    tofu::printStats(llvm::outs(), s);
    return s.problems.empty() ? 0 : 1;
  }
  if (files.empty()) {
    llvm::errs() << "tdlc: no input files (see --help)\n";
    return 2;
  }
  if ((dumpIr || strategies || kernel) && files.size() != 1) {
    llvm::errs() << "tdlc: --dump-ir, --strategies and --kernel take exactly one file\n";
    return 2;
  }
  if (target.getNumOccurrences() > 0 && !kernel) {
    llvm::errs() << "tdlc: --target applies to --kernel only\n";
    return 2;
  }
  if (storage.getNumOccurrences() > 0 && !kernel && !(verify && kernelsMode == Kernels::Compiled)) {
    llvm::errs() << "tdlc: --storage applies to --kernel and to --verify --kernels compiled only\n";
    return 2;
  }
  if (format == Format::Json && !strategies) {
    llvm::errs() << "tdlc: --format applies to --strategies only\n";
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
    if (strategies || verify || kernel || evalMode)
      status = std::max(status, analyseModule(*module));
  }
  return status;
}
