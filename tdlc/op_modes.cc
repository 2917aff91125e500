// tdlc's per-op modes (op_modes.h).
#include "tdlc/op_modes.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include "analysis/gradcheck.h"
#include "codegen/kernel_gen.h"
#include "codegen/schedule.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "runtime/dataset.h"
#include "runtime/kernel_verify.h"
#include "support/bf16.h"
#include "support/errors.h"
#include "support/files.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace tdlc {
namespace {

/// An array given to --eval as an interpreter tensor (`rank0`: a one-element array is a
/// rank-0 tensor).
llvm::Expected<tofu::Tensor> toTensor(const tofu::DataArray &a, bool rank0) {
  tofu::Tensor t;
  int64_t n = 1;
  for (int64_t d : a.shape)
    n *= d;
  if (rank0 && n != 1)
    return tofu::stringError(
        fmt::format("{}: the input is a scalar; the array has {} elements", a.path, n));
  t.shape = rank0 ? std::vector<int64_t>{} : a.shape;
  for (int64_t i = 0; i < n; ++i)
    t.data.push_back(a.at(i));
  return t;
}

} // namespace

int evaluateOp(const tofu::ir::OpDef &op, tofu::Instantiation given, const std::string &evalInputs,
               const std::string &evalDout, const std::string &evalOutDir) {
  std::map<std::string, std::string> files;
  std::stringstream items(evalInputs);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      llvm::errs() << "tdlc: --input '" << item << "' is not NAME=FILE\n";
      return 2;
    }
    if (!op.findInput(item.substr(0, eq))) {
      llvm::errs() << "tdlc: op '" << op.name << "' has no input '" << item.substr(0, eq) << "'\n";
      return 2;
    }
    files[item.substr(0, eq)] = item.substr(eq + 1);
  }
  // Each array read once. Their ranks are the inputs' (an op that only passes an input to
  // calls cannot infer it), except a one-element array's, which may stand for a scalar.
  std::vector<tofu::DataArray> arrays;
  given.inputRanks.resize(op.inputs.size());
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    auto f = files.find(op.inputs[i].name);
    if (f == files.end()) {
      llvm::errs() << "tdlc: --eval: no --input for '" << op.inputs[i].name << "' of op '"
                   << op.name << "'\n";
      return 2;
    }
    auto a = tofu::readDataArray(f->second);
    if (!a) {
      llvm::errs() << "tdlc: " << llvm::toString(a.takeError()) << "\n";
      return 2;
    }
    if (a->shape.size() != 1 || a->shape[0] != 1)
      given.inputRanks[i] = static_cast<unsigned>(a->shape.size());
    arrays.push_back(std::move(*a));
  }
  auto inst = tofu::instantiate(op, given);
  if (!inst) {
    llvm::errs() << "tdlc: " << op.name << ": " << llvm::toString(inst.takeError()) << "\n";
    return 1;
  }
  std::vector<tofu::Tensor> inputs;
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    auto t = toTensor(arrays[i], inst->inputs[i].rank == 0);
    if (!t) {
      llvm::errs() << "tdlc: " << llvm::toString(t.takeError()) << "\n";
      return 2;
    }
    inputs.push_back(std::move(*t));
  }
  std::optional<tofu::Tensor> dOut;
  if (!evalDout.empty()) {
    auto a = tofu::readDataArray(evalDout);
    auto t =
        a ? toTensor(*a, inst->outputVars.empty()) : llvm::Expected<tofu::Tensor>(a.takeError());
    if (!t) {
      llvm::errs() << "tdlc: " << llvm::toString(t.takeError()) << "\n";
      return 2;
    }
    dOut = std::move(*t);
  }
  auto values = tofu::evaluateWithGradients(op, given, std::move(inputs), dOut ? &*dOut : nullptr);
  if (!values) {
    llvm::errs() << "tdlc: " << op.name << ": " << llvm::toString(values.takeError()) << "\n";
    return 1;
  }
  if (!tofu::makeDirs(evalOutDir)) {
    llvm::errs() << "tdlc: --output-dir " << evalOutDir << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  auto write = [&](const std::string &name, const tofu::Tensor &t) {
    if (llvm::Error e = tofu::writeNpy(evalOutDir + "/" + name + ".npy", t.shape,
                                       std::vector<float>(t.data.begin(), t.data.end()))) {
      llvm::errs() << "tdlc: " << llvm::toString(std::move(e)) << "\n";
      return false;
    }
    llvm::outs() << name << " [" << fmt::format("{}", fmt::join(t.shape, ", ")) << "]\n";
    return true;
  };
  if (!write("out", values->out))
    return 1;
  for (const auto &[input, g] : values->grads)
    if (!write("grad_" + input, g))
      return 1;
  return 0;
}

llvm::Error printKernel(const tofu::ir::OpDef &op, const tofu::Instantiation &mine, bool cuda,
                        tofu::loops::Element storage) {
  auto inst = tofu::instantiate(op, mine);
  if (!inst)
    return inst.takeError();
  auto describe = [&](const char *title, tofu::ScheduleTarget t) {
    llvm::outs() << "// op " << op.name << ": " << title << "\n";
    std::string text = tofu::describeSchedule(*inst, tofu::scheduleKernel(*inst, t));
    for (llvm::StringRef line : llvm::split(llvm::StringRef(text).rtrim('\n'), '\n'))
      llvm::outs() << "//   " << line << "\n";
  };
  describe(cuda ? "schedule (one launch)" : "schedule",
           cuda ? tofu::ScheduleTarget::Cuda : tofu::ScheduleTarget::Cpp);
  if (cuda && !tofu::scheduleKernel(*inst, tofu::ScheduleTarget::CudaPasses).temporaries().empty())
    describe("schedule (several launches: the _p, _c and _mp entry points)",
             tofu::ScheduleTarget::CudaPasses);
  std::vector<tofu::Range> whole;
  const tofu::Shapes shapes = tofu::randomShapes(*inst, 1, 2, 5);
  for (int64_t e : shapes.vars)
    whole.push_back({0, e});
  auto k = tofu::generateKernel(*inst, cuda ? tofu::KernelDialect::Cuda : tofu::KernelDialect::Cpp,
                                tofu::verificationTypes(*inst, shapes, whole, storage));
  if (!k) {
    llvm::outs() << "// no kernel: " << llvm::toString(k.takeError()) << "\n";
    return llvm::Error::success();
  }
  llvm::outs() << k->code << "\n";
  return llvm::Error::success();
}

bool verifyOp(const tofu::ir::OpDef &op, const tofu::StrategyTable &table,
              const tofu::Example *example, const std::string &defaults, unsigned seed,
              tofu::CpuKernelLibrary *kernels, tofu::loops::Element storage, VerifyCounts &counts) {
  bool ok = true;
  tofu::VerifyOptions options;
  options.seed = seed;
  if (kernels && storage == tofu::loops::Element::F32) {
    options.evaluate = tofu::libraryEvaluator(tofu::compiledEvaluator(*kernels, {}), nullptr);
    options.tolerance = tofu::kFloat32VerifyTolerance;
  } else if (kernels) {
    options.evaluate = tofu::compiledEvaluator(*kernels, {}, 1, storage);
    options.quantize = [](double v) {
      return static_cast<double>(tofu::roundToBf16(static_cast<float>(v)));
    };
    options.tolerance = tofu::kBfloat16VerifyTolerance;
  }
  if (example)
    options.exampleShapes = &example->inputShapes;
  tofu::OpCheck check = tofu::verifyStrategies(table, options);
  llvm::outs() << op.name << "  " << check.shapes;
  if (!defaults.empty())
    llvm::outs() << "  (chosen for verification:" << defaults << ")";
  llvm::outs() << "\n";
  if (!check.problem.empty()) {
    llvm::outs() << "  FAIL  " << check.problem << "\n";
    ++counts.failed;
  }
  if (check.problem.empty() && check.strategies.empty())
    llvm::outs() << "  (no strategy to check: a scalar output without a top-level "
                    "reducer)\n";
  for (const tofu::StrategyCheck &c : check.strategies) {
    llvm::outs() << "  " << (c.ok ? "OK  " : "FAIL") << "  " << c.strategy;
    if (c.ok)
      llvm::outs() << llvm::format("  max rel err %.2g", c.maxRelError);
    else
      llvm::outs() << "  " << c.problem;
    llvm::outs() << "\n";
    ++(c.ok ? counts.passed : counts.failed);
  }
  tofu::GradCheckOptions gradOptions;
  gradOptions.seed = seed;
  gradOptions.example = example;
  for (const tofu::GradCheck &g : tofu::checkGradients(op, gradOptions)) {
    llvm::outs() << "  "
                 << (g.ok        ? "OK  "
                     : g.skipped ? "SKIP"
                                 : "FAIL")
                 << "  grad " << g.input << " = " << g.call << "(...)";
    if (g.ok)
      llvm::outs() << llvm::format("  max err %.2g vs finite differences", g.maxError);
    else
      llvm::outs() << "  " << g.problem;
    llvm::outs() << "\n";
    if (!g.skipped)
      ++(g.ok ? counts.passed : counts.failed);
    if (!g.ok && !g.skipped)
      ok = false;
  }
  if (!check.ok())
    ok = false;
  return ok;
}

} // namespace tdlc
