// The kernel generator's lowering of one op (codegen/kernel_gen.h), internal to it: the
// Lowering class, which builds an op's loop nests following its schedule and prints them
// as C++ or CUDA, and the helpers its parts share. Its methods live by concern:
// kernel_expr.cc (expressions, reads, opaque calls), kernel_lower.cc (the loop IR and the
// reductions' placement), kernel_gen.cc (the printers and the public entry points).
#ifndef TOFU_CODEGEN_KERNEL_LOWERING_H
#define TOFU_CODEGEN_KERNEL_LOWERING_H

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernel_gen.h"
#include "codegen/loop_ir.h"
#include "codegen/schedule.h"
#include "fmt/format.h"

namespace tofu {
namespace kernelgen {

using llvm::cast;
using llvm::dyn_cast;

const char *const kNameToken = "@KERNEL@";
/// Output elements per block of an interchanged column reduction (a few cache lines).
constexpr int kRowBlock = 64;
/// At most this many threads share a reduction to a scalar (its partial results' array).
constexpr int kMaxParts = 64;

/// evalIndex's domain that prints C expressions of type i64.
struct CodeDomain {
  using Value = std::string;
  /// Variables printed as others (a fused reduction's, as its group's first).
  const std::map<unsigned, unsigned> *rename = nullptr;
  /// A variable printed as 0 (the offset of a strided loop's congruence); -1: none.
  int zero = -1;
  std::optional<Value> constant(int64_t c) const { return fmt::format("((i64){})", c); }
  std::optional<Value> attr(unsigned) const { return std::nullopt; }
  std::optional<Value> var(unsigned v) const {
    if (static_cast<int>(v) == zero)
      return "((i64)0)";
    if (rename)
      if (auto it = rename->find(v); it != rename->end())
        v = it->second;
    return fmt::format("v{}", v);
  }
  std::optional<Value> extent(unsigned input, unsigned dim) const {
    return fmt::format("s{}_{}", input, dim);
  }
  std::optional<Value> neg(const Value &a) const { return "(-" + a + ")"; }
  std::optional<Value> add(const Value &a, const Value &b) const {
    return "(" + a + " + " + b + ")";
  }
  std::optional<Value> mul(const Value &a, const Value &b) const {
    return "(" + a + " * " + b + ")";
  }
  std::optional<Value> div(const Value &a, const Value &b) const {
    if (exact)
      for (const auto &[num, den] : *exact)
        if (a == num && b == den) // a multiple inside its strided loop: C's division is exact
          return "(" + a + " / " + b + ")";
    return (positive(b) ? "tofu_fdivp(" : "tofu_fdiv(") + a + ", " + b + ")";
  }
  std::optional<Value> mod(const Value &a, const Value &b) const {
    return (positive(b) ? "tofu_imodp(" : "tofu_imod(") + a + ", " + b + ")";
  }
  /// A positive integer literal (as constant() prints it): division by it needs no sign
  /// test of the divisor, and the compiler turns it into a multiplication.
  static bool positive(const Value &b) {
    return b.size() > 7 && b.compare(0, 6, "((i64)") == 0 && b[6] != '-' && b[6] != '0' &&
           b.back() == ')';
  }
  /// Numerators known to be multiples of their divisors (printed forms).
  const std::vector<std::pair<std::string, std::string>> *exact = nullptr;
};

/// An opaque function with a native implementation in both dialects' prelude: it takes one
/// n x n matrix (row-major, overwritten as scratch) and writes its result, rank 0 or n x n.
/// The arithmetic follows the interpreter's (analysis/interpreter.cc) step for step.
struct NativeOpaque {
  const char *name;
  unsigned resultRank;
};

/// A float literal as the kernels print it (TOFU_NAN and TOFU_INF for the others).
std::string floatLiteral(double v);
/// The C function of a builtin (expf, logf).
const char *builtinCall(ir::Builtin b);
/// The prelude's function for a comparison operator (tofu_eq, ...); null for arithmetic.
const char *compareCall(ast::BinaryOp op);
/// kNativeOpaques' entry for an opaque function, or null.
const NativeOpaque *nativeOpaque(const std::string &name);
/// Whether an affine coordinate of a read may leave its tensor where the variables range
/// over the tensor's own extents: a window's (`s*y + k - p`, `(h + p - k) / s`: it uses a
/// reduction variable beside the output's) or a padded one (`h - p`: it subtracts a
/// constant). The unchecked variant guards such a read with a test against the tensor's
/// extent (zero outside, as TDL says) instead of running the checked nest for the whole
/// share; readsInsideRegions then requires only the part inside the tensor to lie in the
/// region. Other coordinates (plain variables, a reshape's divisions) read unguarded.
bool mayLeaveTensor(const InstOp &op, const ir::Coord &c);

/// The loop nest of one op: where each reduction is computed.
class Lowering {
public:
  Lowering(const InstOp &op, KernelDialect dialect, KernelTypes types = {})
      : op_(op), dialect_(dialect), types_(std::move(types)) {}

  llvm::Expected<std::string> print();

  const KernelSchedule &schedule() const { return sched_; }

private:
  using Red = ScheduledReduction;
  using Placement = ScheduledReduction::Placement;

  // --- expressions ---------------------------------------------------------------------

  std::string index(const ir::Expr &e);

  std::string coord(const ir::Coord &c);

  std::string read(const ir::Read &r);

  /// An unchecked load of `r` (at coordinates `cs`), tested against the tensor's extent
  /// along every coordinate that may leave it (mayLeaveTensor): zero outside.
  std::string guarded(const ir::Read &r, const std::vector<std::string> &cs,
                      const std::string &load) const;

  /// Whether `e` is integer-valued: index variables, extents, integer constants and their
  /// sums, differences, products and remainders by a nonzero integer constant.
  static bool isInt(const ir::Expr &e);

  /// An integer-valued expression in i64; `%` truncates as fmod does.
  std::string intText(const ir::Expr &e);

  std::string value(const ir::Expr &e);

  /// A reduction's value where it is read.
  std::string reduction(const Red &r);

  /// The element of temporary `r` at the current values of its variables (row-major over
  /// their ranges, as its pass writes it).
  static std::string temporaryOffset(const Red &r);

  /// An opaque function's result at the call's coordinates, through its native
  /// implementation (kNativeOpaques): a helper per call site gathers the argument's slice
  /// with checked loads, calls the function, and indexes the result. In C++ each thread
  /// keeps the last slice's result for the current kernel call (keyed by the slice's fixed
  /// coordinates), so the elements of one result reuse one evaluation.
  std::string opaque(const ir::OpaqueCall &c);

  void emitOpaqueHelper(unsigned id, const NativeOpaque &fn, unsigned input,
                        const std::vector<const ir::Coord *> &coords,
                        const std::vector<unsigned> &freeDims);

  // --- building the loop IR -------------------------------------------------------------

  using Node = loops::Node;
  using LoopKind = loops::LoopKind;

  loops::Block &cur() { return *blocks_.back(); }
  Node &add(Node n);
  void decl(const std::string &type, std::vector<std::pair<std::string, std::string>> names);
  void decl(const std::string &type, const std::string &name, const std::string &value);
  void assign(const std::string &target, const std::string &op, const std::string &value);
  void combine(ir::Reducer reducer, const std::string &acc, const std::string &value);
  void store(const std::string &buffer, const std::string &offset, const std::string &value);
  /// A load of input `input` (C text of an element of its buffer) as a float32.
  std::string widened(unsigned input, const std::string &load) const;
  void use(const std::string &local) { add(loops::useNode(local)); }
  void returnIf(const std::string &cond, const std::string &value);
  /// Adds a compound statement and makes its body the current block.
  Node &open(Node n);
  Node &openLoop(LoopKind kind, const std::string &var, const std::string &from,
                 const std::string &to, const std::string &step = "", bool compact = false);
  void openIf(const std::string &cond, bool compact = false) { open(loops::ifNode(cond, compact)); }
  /// The open If's else branch becomes the current block.
  void elseBranch() { blocks_.back() = &open_.back()->orElse; }
  void openScope(Node::Kind kind = Node::Kind::Scope);
  void close();

  /// How the lowering runs a reduction's loop: serially, or as a SIMD reduction into the
  /// accumulators of its group.
  struct Binding {
    LoopKind kind = LoopKind::Serial;
    std::vector<std::string> accumulators;
    ir::Reducer reducer = ir::Reducer::Sum;
  };

  static std::string accumulator(const Red &r) { return fmt::format("r{}", r.id); }
  static std::string identity(ir::Reducer r) { return floatLiteral(reducerIdentity<float>(r)); }

  // --- lowering ------------------------------------------------------------------------

  /// The inline reductions of nest `nest` computed at the start of loop `slot`'s body (-1:
  /// before the nest's loops).
  void emitSlot(int nest, int slot);

  /// The reductions of the main nest computed per output element, outside any other
  /// reduction's loop.
  bool outerSlot(const Red &r) const;

  /// The number of leading variables of `vars` up to the last one at which some
  /// reduction of nest `nest` is placed (0 when none is).
  size_t slottedPrefix(int nest, const std::vector<unsigned> &vars) const;

  /// The first and end values of loop `v` (a part of its range under bounds_).
  std::string loOf(unsigned v) const;
  std::string hiOf(unsigned v) const;

  /// A reduction split across the threads of a block. Its leading variables up to the last
  /// one at which a nested reduction is placed loop serially in every thread (the nested
  /// reductions, computed once per value as in the serial nest, are themselves split across
  /// the block); each thread then takes every blockDim.x-th term of the flattened space of
  /// the remaining variables, and the block combines. (Flattening all the variables would
  /// recompute a nested reduction per term: a softmax's normaliser per class.)
  void emitBlockReduction(const Red &r);

  void emitReduction(const Red &r);

  /// Opens the loop of reduction variable `v` of `r`: over its range, or, when the schedule
  /// strides it (StridedVar), from the first solution of its congruence in steps of the
  /// modulus over the gcd, or, when it picks it (PickedVar), over the one position.
  void openReductionLoop(const Red &r, unsigned v, const Binding &how);

  static void bindLoop(Node &loop, const Binding &how);

  /// The reads through which loops `a` (outer) and `b` (inner, adjacent) can run as one
  /// flat loop over contiguous memory, found in `e`: every use of `a` and `b` is as the
  /// last two coordinates, exactly, of a read, and nothing computed at either loop (an
  /// inline reduction there, a temporary indexed by either) stands between. False when
  /// some use is not.
  bool flatReads(const ir::Expr &e, unsigned a, unsigned b,
                 std::vector<const ir::Read *> &reads) const;

  /// The run-time test that each read's row is whole (b's range covers its buffer's last
  /// dimension): then a and b step through contiguous memory.
  std::string flatConditions(unsigned b, const std::vector<const ir::Read *> &reads) const;

  /// A reduction with those fused with it (KernelSchedule::fusedGroup): one loop nest
  /// over the first one's variables, each member's variables renamed to them.
  void emitSerialReduction(const Red &r);

  /// The loops of `r`'s group: the first `loops` variables as loops (a flattened pair after
  /// them when `flat`), then each member's combine. The innermost loop is a SIMD reduction
  /// when nothing is computed at its start.
  void emitReductionLoops(const Red &r, const std::vector<const Red *> &group, size_t loops,
                          bool flat);

  /// Each member's term combined into it, its variables renamed to the first member's.
  void emitCombines(const std::vector<const Red *> &group, const ir::Reduce &node);

  unsigned inputBase(unsigned input) const;

  /// Locals every entry point uses: ranges, input geometry, pointers, output extents.
  void emitLocals();

  std::string outputOffset() const;

  /// Makes a function of the kernel and its body the current block.
  void beginFunction(loops::Function::Kind kind, const std::string &name,
                     const std::string &params = "");

  /// The per-input checked loads (zero outside the tensor, NaN outside the region).
  void emitLoaders();

  /// The pass that fills temporary `t`: one parallel loop over the values of its
  /// variables, each computing the reduction (and what its schedule computes with it) and
  /// storing it at its row-major offset.
  void emitTemporaryPass(const Red &t);

  /// Whether the C++ kernel splits reduction `r` across its threads: a sum to a scalar
  /// output computed once per call (a loss), whose outermost loop is plain.
  bool splitAcrossThreads(const Red &r) const;

  /// `r` split across the threads: each thread its share of the outermost variable's range
  /// (a fixed partition per thread count), the partial results combined in order, so the
  /// result is the same from call to call.
  void emitSplitReduction(const Red &r);

  /// The C++ kernel: the temporaries' passes, then the main nest as the schedule says (its
  /// leading output loops flattened into one OpenMP-parallel loop, the innermost a SIMD
  /// loop or the rows of an interchanged contraction).
  void emitCppNest();

  /// The main nest's output loops, the first `m` flattened into the parallel loop (with
  /// flat_, the last two run as one flat SIMD loop after the others).
  void emitMainLoops(size_t m);

  /// The interchanged contraction: the output row (of the innermost output variable, from
  /// `rowLo` to `rowHi`) starts at the identity, then each term of the reduction's loops
  /// is combined into the whole row, contiguously.
  void emitInterchanged(const ir::Reduce &top, const std::string &rowLo = "",
                        const std::string &rowHi = "");

  /// Decodes the variables `vars` (row-major over their ranges, the last fastest) from the
  /// flat index `flat`: a temporary's element.
  void decodeRanges(const std::vector<unsigned> &vars, const std::string &flat);

  /// Decodes the variables `vars` (row-major, the last fastest) from the flat index `flat`.
  void decode(const std::vector<unsigned> &vars, const std::string &flat);

  static std::string extentProduct(const std::vector<unsigned> &vars);

  /// The CUDA nest. One thread per output element: a grid-stride loop over the share's
  /// elements. With block_, one block per value of the output variables the per-element
  /// reductions depend on (blockOutputVars()): a block-stride loop (the
  /// same trip count for every thread of a block) in which the block computes those
  /// reductions together, each split across its threads, then its threads share the output
  /// elements of that value (a softmax's row: its normaliser once, then the row), or, when
  /// no output variable is left, thread 0 writes the one element.
  void emitCudaNest();

public:
  /// The output variables whose values the block variant gives one block each: those the
  /// reductions computed per output element depend on (a batch norm's channel, a softmax's
  /// row), in output order.
  std::vector<unsigned> blockOutputVars() const;

  /// The multi-launch entry points (after print(); KernelSource::passes).
  const std::vector<CudaTemporaryPass> &passes() const { return passes_; }
  const std::vector<std::vector<unsigned>> &passesBlockReductions() const;
  const std::vector<unsigned> &passesBlockOutputVars() const { return passesBlockOutputVars_; }

  /// The variables of the reductions a block variant splits (after print()).
  std::vector<std::vector<unsigned>> blockReductions() const;

  /// The kernel as loop IR (after print()).
  const loops::Kernel &kernel() const { return kernel_; }

private:
  /// The nest twice: unchecked loads when the caller proved every read inside its region
  /// (a->fast), checked ones otherwise.
  void emitVariants(void (Lowering::*nest)());

  /// How many opaque calls the body makes: each call site has a memo per thread (its last
  /// argument slice and result), made by the kernel for the duration of one call.
  unsigned opaqueSites() const;

  /// The kernel's translation unit: the loaders, the opaque calls' helpers (which call
  /// them), the CUDA argument block, then the entry points.
  std::string printKernel(const std::string &argsDefinition);

  std::string printCpp();

  /// The CUDA kernels: the one-launch entry points (`<name>`, and `<name>_blk` where
  /// reductions are computed per output), then, where the CudaPasses schedule has
  /// temporaries, the multi-launch ones: per temporary its pass (`<name>_p<id>`) and the
  /// combine of its partial results (`<name>_c<id>`), and the main nest reading them
  /// (`<name>_mp`, and `<name>_mp_blk`).
  std::string printCuda();

  /// The main nest's entry points under the current schedule, named `<name><suffix>`: a
  /// thread per output, and, where reductions are computed per output, `..._blk`.
  void emitCudaMain(const std::string &suffix);

  /// An entry point's locals: emitLocals' and the temporaries' pointers into the scratch
  /// space, one after another in the order of their passes, then the partial results.
  void emitCudaLocals();

  /// The pass of temporary `t` (`<name>_p<id>`): a block per value of its index and part of
  /// its first variable's range (a->parts parts, a block-stride loop over both), the block
  /// splitting that part's terms across its threads. One part writes the temporary; more
  /// write partial results, in `tpart` (value-major), for `<name>_c<id>` to combine.
  void emitCudaPass(const Red &t);

  void emitCudaPassNest();

  /// The combine of temporary `t`'s partial results (`<name>_c<id>`), a thread per value,
  /// in part order (the same result from run to run).
  void emitCudaCombine(const Red &t);

  /// The number of values `vars` take together: the product of their ranges (a
  /// temporary's size, its pass's trip count).
  static std::string rangeProduct(const std::vector<unsigned> &vars);

  void fail(const std::string &msg);

  const InstOp &op_;
  KernelDialect dialect_;
  KernelTypes types_;
  KernelSchedule sched_;
  std::map<unsigned, unsigned> rename_; ///< while printing a fused member's body
  /// Loops over a part of their range (a split reduction's share): bound expressions.
  std::map<unsigned, std::pair<std::string, std::string>> bounds_;
  int zero_ = -1; ///< a variable printed as 0 (CodeDomain::zero)
  /// Inside strided loops: their offsets and moduli (CodeDomain::exact).
  std::vector<std::pair<std::string, std::string>> exact_;
  std::set<const ir::Expr *> knownTrue_; ///< guards a strided loop makes true, printed as 1
  /// Two adjacent loops run as one flat loop `fl` over contiguous rows (fast variant).
  struct FlatPair {
    unsigned outer, inner;
  };
  std::optional<FlatPair> flat_;
  std::map<const ir::OpaqueCall *, unsigned> opaqueSite_;
  std::string helpers_; ///< one function per opaque call site, before the kernel
  loops::Kernel kernel_;
  /// The blocks being built, innermost last, and the compound statements they belong to.
  std::vector<loops::Block *> blocks_;
  std::vector<Node *> open_;
  bool fast_ = false;
  /// The CUDA multi-launch entry points' temporaries and main nest (printCuda).
  std::vector<CudaTemporaryPass> passes_;
  std::vector<std::vector<unsigned>> passesBlockReductions_;
  std::vector<unsigned> passesBlockOutputVars_;
  const Red *pass_ = nullptr; ///< the temporary whose pass is being printed
  bool block_ = false;        ///< printing the block-per-output CUDA variant
  bool collective_ = false;   ///< block_: every thread of the block runs here alike
  std::string error_;
};

} // namespace kernelgen
} // namespace tofu

#endif // TOFU_CODEGEN_KERNEL_LOWERING_H
