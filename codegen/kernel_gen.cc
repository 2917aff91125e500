// Lowering of an instantiated op to loop nests, and its two printers (C++ with OpenMP, and
// CUDA), both following the op's schedule (codegen/schedule.h).
//
// The main nest: one loop per output variable (in output order, so the innermost loop
// writes contiguous elements). Each reduction is computed where the schedule says: inline
// at the start of a loop's body (a softmax's denominator inside the row loop), or — C++ —
// in a temporary that a pass fills before the main nest (a batch norm's per-channel
// statistics, whose output loops run the batch outside the channel), in the scratch space
// the caller passes; repeats read the first, counts are products of extents computed once
// per call, and reductions the schedule fuses share one loop nest. Reads have two forms:
// checked (zero outside the tensor, NaN outside the region the buffer holds, as the
// interpreter's poisoned workers see it) and unchecked, used when the caller proved every
// affine read lies inside its region (`readsInsideRegions`); the nests are printed once for
// each, and the kernel picks at run time.
#include "codegen/kernel_gen.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "analysis/index_eval.h"
#include "analysis/reducer.h"
#include "codegen/kernel_lowering.h"
#include "fmt/format.h"

namespace tofu {

extern const char kKernelPreludeText[]; // codegen/kernel_prelude.h (codegen/BUILD)

namespace kernelgen {

llvm::Expected<std::string> Lowering::print() {
  sched_ = scheduleKernel(op_, dialect_ == KernelDialect::Cpp ? ScheduleTarget::Cpp
                                                              : ScheduleTarget::Cuda);
  // An interchanged nest accumulates into the output buffer itself: a bfloat16 output would
  // round every partial sum. Its reduction is then computed inline, in a float32
  // accumulator, and the sum stored once.
  if (types_.output != loops::Element::F32)
    sched_.interchange = false;
  kernel_.inputs.clear();
  for (size_t i = 0; i < op_.inputs.size(); ++i)
    kernel_.inputs.push_back(types_.input(i));
  kernel_.output = types_.output;
  std::string out = dialect_ == KernelDialect::Cpp ? printCpp() : printCuda();
  if (!error_.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "op '%s': %s", op_.name.c_str(),
                                   error_.c_str());
  return out;
}

std::vector<unsigned> Lowering::blockOutputVars() const {
  std::set<unsigned> used;
  for (const Red &r : sched_.reductions)
    if (outerSlot(r))
      used.insert(r.depends.begin(), r.depends.end());
  std::vector<unsigned> out;
  for (unsigned v : op_.outputVars)
    if (used.count(v))
      out.push_back(v);
  return out;
}

const std::vector<std::vector<unsigned>> &Lowering::passesBlockReductions() const {
  return passesBlockReductions_;
}

std::vector<std::vector<unsigned>> Lowering::blockReductions() const {
  std::vector<std::vector<unsigned>> out;
  for (const Red &r : sched_.reductions)
    if (outerSlot(r))
      out.push_back(r.node->vars);
  return out;
}

void Lowering::emitVariants(void (Lowering::*nest)()) {
  openIf("a->fast");
  fast_ = true;
  (this->*nest)();
  elseBranch();
  fast_ = false;
  (this->*nest)();
  close();
}

unsigned Lowering::opaqueSites() const {
  unsigned n = 0;
  ir::walk(*op_.body, [&](const ir::Expr &e) { n += llvm::isa<ir::OpaqueCall>(e) ? 1 : 0; });
  return n;
}

std::string Lowering::printKernel(const std::string &argsDefinition) {
  const loops::Target target =
      dialect_ == KernelDialect::Cpp ? loops::Target::Cpp : loops::Target::Cuda;
  std::string out, error;
  for (const loops::Function &f : kernel_.functions)
    if (f.kind == loops::Function::Kind::Helper)
      loops::printFunction(kernel_, f, target, out, error);
  out += helpers_ + argsDefinition;
  for (const loops::Function &f : kernel_.functions)
    if (f.kind == loops::Function::Kind::Entry)
      loops::printFunction(kernel_, f, target, out, error);
  if (!error.empty())
    fail(error);
  return out;
}

std::string Lowering::printCpp() {
  emitLoaders();
  beginFunction(loops::Function::Kind::Entry, kNameToken);
  emitLocals();
  std::string prev; // the temporaries, one after another in the scratch space
  for (const Red &r : sched_.reductions) {
    if (r.placement != Placement::Temporary)
      continue;
    decl("float *const", fmt::format("t{}", r.id), prev.empty() ? "a->scratch" : prev);
    prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
  }
  if (opaqueSites() > 0) // outside the parallel loop (reductions computed once per call)
    decl("TofuOpqMemo", fmt::format("memo[{}]", opaqueSites()), "");
  emitVariants(&Lowering::emitCppNest);
  return printKernel("");
}

std::string Lowering::printCuda() {
  emitLoaders();
  kernel_.argsType = std::string(kNameToken) + "_args";
  const std::string args =
      fmt::format("typedef TofuCudaArgs<{}, {}> {};\n",
                  std::max(1u, inputBase(static_cast<unsigned>(op_.inputs.size()))),
                  std::max<size_t>(1, op_.inputs.size()), kernel_.argsType);
  emitCudaMain("");
  KernelSchedule passes = scheduleKernel(op_, ScheduleTarget::CudaPasses);
  if (!passes.temporaries().empty()) {
    const KernelSchedule single = std::move(sched_);
    sched_ = std::move(passes);
    for (const Red &t : sched_.reductions)
      if (t.placement == Placement::Temporary) {
        CudaTemporaryPass pass{t.id, t.depends, t.node->vars, {}};
        for (const Red &n : sched_.reductions)
          if (n.placement == Placement::Inline && n.nest == static_cast<int>(t.id))
            pass.nested.push_back(n.node->vars);
        passes_.push_back(std::move(pass));
        emitCudaPass(t);
        emitCudaCombine(t);
      }
    emitCudaMain("_mp");
    passesBlockReductions_ = blockReductions();
    passesBlockOutputVars_ = blockOutputVars();
    sched_ = single;
  }
  return printKernel(args);
}

void Lowering::emitCudaMain(const std::string &suffix) {
  for (bool block : {false, true}) {
    if (block && blockReductions().empty())
      break;
    beginFunction(loops::Function::Kind::Entry,
                  fmt::format("{}{}{}", kNameToken, suffix, block ? "_blk" : ""));
    emitCudaLocals();
    block_ = block;
    emitVariants(&Lowering::emitCudaNest);
    block_ = false;
  }
}

void Lowering::emitCudaLocals() {
  emitLocals();
  std::string prev = "a->scratch";
  for (const Red &r : sched_.reductions) {
    if (r.placement != Placement::Temporary)
      continue;
    decl("float *const", fmt::format("t{}", r.id), prev);
    prev = fmt::format("t{} + {}", r.id, rangeProduct(r.depends));
  }
  if (prev != "a->scratch") {
    decl("float *const", "tpart", prev);
    use("tpart");
  }
}

void Lowering::emitCudaPass(const Red &t) {
  pass_ = &t;
  beginFunction(loops::Function::Kind::Entry, fmt::format("{}_p{}", kNameToken, t.id));
  emitCudaLocals();
  emitVariants(&Lowering::emitCudaPassNest);
  pass_ = nullptr;
}

void Lowering::emitCudaPassNest() {
  const Red &t = *pass_;
  decl("const i64", "parts", "a->parts > 0 ? a->parts : 1");
  decl("const i64", "count", rangeProduct(t.depends));
  openLoop(LoopKind::GridBlocks, "b", "", "count * parts");
  decl("const i64", {{"e", "b / parts"}, {"p", "b % parts"}});
  decodeRanges(t.depends, "e");
  use("p");
  collective_ = true;
  block_ = true;
  emitSlot(t.id, -1);
  for (unsigned v : t.depends)
    emitSlot(t.id, static_cast<int>(v));
  if (!t.node->vars.empty()) {
    const unsigned v = t.node->vars.front();
    decl("const i64", fmt::format("span{}", v),
         fmt::format("hi{0} > lo{0} ? hi{0} - lo{0} : 0", v));
    decl("const i64",
         {{fmt::format("plo{}", v), fmt::format("lo{0} + span{0} * p / parts", v)},
          {fmt::format("phi{}", v), fmt::format("lo{0} + span{0} * (p + 1) / parts", v)}});
    bounds_[v] = {fmt::format("plo{}", v), fmt::format("phi{}", v)};
  }
  emitReduction(t);
  bounds_.clear();
  collective_ = false;
  block_ = false;
  openIf("threadIdx.x == 0");
  openIf("parts == 1", true);
  store(fmt::format("t{}", t.id), "e", accumulator(t));
  elseBranch();
  store("tpart", "e * parts + p", accumulator(t));
  close();
  close();
  close();
}

void Lowering::emitCudaCombine(const Red &t) {
  beginFunction(loops::Function::Kind::Entry, fmt::format("{}_c{}", kNameToken, t.id));
  emitCudaLocals();
  decl("const i64", "parts", "a->parts > 0 ? a->parts : 1");
  decl("const i64", "count", rangeProduct(t.depends));
  openLoop(LoopKind::GridThreads, "e", "", "count");
  decl("float", accumulator(t), identity(t.node->reducer));
  openLoop(LoopKind::Serial, "p", "0", "parts", "", true);
  combine(t.node->reducer, accumulator(t), "tpart[e * parts + p]");
  close();
  store(fmt::format("t{}", t.id), "e", accumulator(t));
  close();
}

std::string Lowering::rangeProduct(const std::vector<unsigned> &vars) {
  std::string p;
  for (unsigned v : vars)
    p += fmt::format("{0}(hi{1} > lo{1} ? hi{1} - lo{1} : 0)", p.empty() ? "" : " * ", v);
  return p.empty() ? "1" : p;
}

void Lowering::fail(const std::string &msg) {
  if (error_.empty())
    error_ = msg;
}

} // namespace kernelgen

namespace {

using namespace kernelgen;

void replaceAll(std::string &s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

} // namespace

const std::string &kernelPrelude(KernelDialect dialect) {
  static const std::string cpp =
      std::string("// Generated by Tofu's kernel generator.\n#define TOFU_KERNEL_UNIT 1\n") +
      kKernelPreludeText;
  static const std::string cuda =
      std::string("// Generated by Tofu's kernel generator (CUDA).\n#define TOFU_KERNEL_UNIT 1\n") +
      kKernelPreludeText;
  return dialect == KernelDialect::Cpp ? cpp : cuda;
}

uint64_t stableHash(const std::string &s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool KernelTypes::allF32() const {
  return output == loops::Element::F32 &&
         std::all_of(inputs.begin(), inputs.end(),
                     [](loops::Element e) { return e == loops::Element::F32; });
}

std::string KernelTypes::describe(size_t inputCount) const {
  std::string out;
  for (size_t i = 0; i < inputCount; ++i)
    out += fmt::format("{}{}", i ? "," : "", loops::elementName(input(i)));
  return out + "->" + loops::elementName(output);
}

llvm::Expected<KernelSource> generateKernel(const InstOp &op, KernelDialect dialect,
                                            const KernelTypes &types) {
  // The name hashes the C++ lowering, whatever the dialect: the two dialects' kernels of
  // one instantiation share it. The lowering declares the buffers' types, so kernels of
  // one op with other element types have other names.
  Lowering cppLowering(op, KernelDialect::Cpp, types);
  auto cpp = cppLowering.print();
  if (!cpp)
    return cpp.takeError();
  KernelSource k;
  k.name = fmt::format("tofu_k_{:016x}", stableHash(*cpp));
  if (dialect == KernelDialect::Cpp) {
    k.code = std::move(*cpp);
    k.temporaries = cppLowering.schedule().temporaries();
  } else {
    Lowering lowering(op, KernelDialect::Cuda, types);
    auto cuda = lowering.print();
    if (!cuda)
      return cuda.takeError();
    k.code = std::move(*cuda);
    k.blockReductions = lowering.blockReductions();
    k.blockOutputVars = lowering.blockOutputVars();
    k.passes = lowering.passes();
    k.passesBlockReductions = lowering.passesBlockReductions();
    k.passesBlockOutputVars = lowering.passesBlockOutputVars();
  }
  replaceAll(k.code, kNameToken, k.name);
  k.code = fmt::format("// op {}{}\n", op.name,
                       types.allF32() ? "" : " (" + types.describe(op.inputs.size()) + ")") +
           k.code;
  return k;
}

const char *const kKernelNameToken = kNameToken;

llvm::Expected<loops::Kernel> lowerKernel(const InstOp &op, KernelDialect dialect,
                                          const KernelTypes &types) {
  Lowering lowering(op, dialect, types);
  auto printed = lowering.print();
  if (!printed)
    return printed.takeError();
  return lowering.kernel();
}

std::string blockKernelName(const std::string &kernel) { return kernel + "_blk"; }
std::string passesKernelName(const std::string &kernel) { return kernel + "_mp"; }
std::string temporaryPassName(const std::string &kernel, unsigned id) {
  return fmt::format("{}_p{}", kernel, id);
}
std::string temporaryCombineName(const std::string &kernel, unsigned id) {
  return fmt::format("{}_c{}", kernel, id);
}

std::vector<std::string> cudaEntryPoints(const KernelSource &k) {
  std::vector<std::string> out{k.name};
  if (!k.blockReductions.empty())
    out.push_back(blockKernelName(k.name));
  if (k.passes.empty())
    return out;
  for (const CudaTemporaryPass &t : k.passes) {
    out.push_back(temporaryPassName(k.name, t.id));
    out.push_back(temporaryCombineName(k.name, t.id));
  }
  out.push_back(passesKernelName(k.name));
  if (!k.passesBlockReductions.empty())
    out.push_back(blockKernelName(passesKernelName(k.name)));
  return out;
}

int64_t kernelScratchBytes(const std::vector<std::vector<unsigned>> &temporaries,
                           const std::vector<Range> &ranges) {
  int64_t floats = 0;
  for (const std::vector<unsigned> &t : temporaries) {
    int64_t n = 1;
    for (unsigned v : t)
      n *= ranges[v].size();
    floats += n;
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t kernelScratchBytes(const KernelSource &k, const std::vector<Range> &ranges) {
  return kernelScratchBytes(k.temporaries, ranges);
}

int64_t kernelScratchBytes(const InstOp &op, const std::vector<Range> &ranges) {
  return kernelScratchBytes(scheduleKernel(op, ScheduleTarget::Cpp).temporaries(), ranges);
}

std::vector<int64_t> kernelInts(const InstOp &op, const Shapes &shapes,
                                const std::vector<Range> &ranges, const std::vector<Box> &regions) {
  std::vector<int64_t> ints;
  for (const Range &r : ranges) {
    ints.push_back(r.lo);
    ints.push_back(r.hi);
  }
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    for (unsigned d = 0; d < op.inputs[i].rank; ++d) {
      ints.push_back(shapes.inputs[i][d]);
      ints.push_back(regions[i][d].lo);
      ints.push_back(regions[i][d].size());
    }
  return ints;
}

namespace {
/// The exact range of an index expression of one variable with a division (a reshape's
/// `k - n * (k / n)`, which intervals widen to beyond the dimension), by evaluating it at
/// each of the variable's values; none otherwise or for more than 65536 values.
std::optional<std::pair<int64_t, int64_t>> exactValueRange(const ir::Expr &e, const Shapes &shapes,
                                                           const std::vector<Range> &ranges) {
  std::set<unsigned> vars;
  bool divides = false; // an affine coordinate's interval is exact already
  ir::walk(e, [&](const ir::Expr &x) {
    if (const auto *v = dyn_cast<ir::VarRef>(&x))
      vars.insert(v->var);
    if (const auto *b = dyn_cast<ir::Binary>(&x))
      divides |= b->op == ast::BinaryOp::Div || b->op == ast::BinaryOp::Mod;
  });
  if (!divides || vars.size() != 1 || ranges[*vars.begin()].size() > (int64_t(1) << 16))
    return std::nullopt;
  const unsigned v = *vars.begin();
  std::vector<int64_t> env(ranges.size(), 0);
  PointDomain d{env.data(), &shapes.inputs, nullptr};
  std::optional<std::pair<int64_t, int64_t>> out;
  for (int64_t x = ranges[v].lo; x < ranges[v].hi; ++x) {
    env[v] = x;
    auto y = evalIndex(e, d);
    if (!y)
      return std::nullopt;
    out = out ? std::make_pair(std::min(out->first, *y), std::max(out->second, *y))
              : std::make_pair(*y, *y);
  }
  return out;
}
} // namespace

bool readsInsideRegions(const InstOp &op, const Shapes &shapes, const std::vector<Range> &ranges,
                        const std::vector<Box> &regions) {
  for (const Range &r : ranges)
    if (r.size() == 0 || r.lo < INT32_MIN || r.hi > INT32_MAX)
      return false;
  for (const std::vector<int64_t> &s : shapes.inputs)
    for (int64_t e : s)
      if (e > INT32_MAX)
        return false;
  bool inside = true;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    const auto *r = dyn_cast<ir::Read>(&e);
    if (!r || !inside)
      return;
    for (unsigned d = 0; d < r->coords.size(); ++d) {
      if (r->coords[d].kind != ir::Coord::Kind::Affine)
        continue; // data-dependent coordinates are always checked
      const bool guard = mayLeaveTensor(op, r->coords[d]);
      const int64_t extent = shapes.inputs[r->input][d];
      const auto clip = [&](std::optional<std::pair<int64_t, int64_t>> sp) {
        if (sp && guard) { // guarded: only the part inside the tensor is read
          sp->first = std::max<int64_t>(sp->first, 0);
          sp->second = std::min<int64_t>(sp->second, extent - 1);
        }
        return sp;
      };
      const Range &reg = regions[r->input][d];
      const auto outside = [&](const std::pair<int64_t, int64_t> &sp) {
        return sp.first <= sp.second && (sp.first < reg.lo || sp.second >= reg.hi);
      };
      auto span = clip(indexValueRange(*r->coords[d].expr, shapes, ranges));
      if (span && outside(*span)) // intervals overshoot
        span = clip(exactValueRange(*r->coords[d].expr, shapes, ranges));
      if (!span || outside(*span))
        inside = false;
    }
  });
  return inside;
}

} // namespace tofu
