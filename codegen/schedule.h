// The kernel scheduler: where each reduction of an instantiated op is computed, and how
// the loops of a C++ kernel run, decided as data before anything is printed (so the
// decisions can be tested without a compiler, and both printers follow the same ones).
//
// A reduction is computed once per value of the variables it depends on:
//  - inline, at the start of the body of the innermost enclosing loop whose variable it
//    uses, when no loop outside that one runs over a variable it does not use (a softmax's
//    normaliser inside the row loop);
//  - otherwise in a temporary, a buffer indexed by exactly those variables and filled by a
//    pass of its own before the kernel's main loops (a batch norm's per-channel statistics,
//    whose output loops put the batch outside the channel; a layer norm's per-token
//    statistics nested in the scale gradient's sum over tokens). Temporaries live in the
//    scratch space the caller passes (TofuKernelArgs::scratch), sized by
//    kernelScratchBytes;
//  - not at all when it repeats another (the same reduction up to the names of its bound
//    variables, as inlined calls write it again and again): it reads the first one;
//  - as the product of its extents when it counts (`Sum(lambda m, *t: 0 * x[m, c, *t] + 1)`).
// Reductions computed at the same point over loops of the same extents, none reading
// another, share one loop nest (C++): a batch norm's sum and sum of squares are one pass
// over the data.
#ifndef TOFU_CODEGEN_SCHEDULE_H
#define TOFU_CODEGEN_SCHEDULE_H

#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"

namespace tofu {

/// What the scheduler may use. Temporaries need a pass that runs before the main loops
/// over every value of their variables.
///  - Cpp: the C++ kernel, whose passes are parallel loops before the main nest.
///  - Cuda: the CUDA kernel in one launch (a thread per output, or a block per value of
///    the variables its reductions depend on): every reduction is inline.
///  - CudaPasses: the CUDA kernel as several launches, each temporary filled by a launch
///    of its own (its values' reductions split across blocks, partial results combined by
///    another launch) before the main one. A reduction is a temporary where the C++ rule
///    makes it one, and also where one launch would compute it more than once per value:
///    one that depends on no loop (a loss over the whole batch), and one nested in a
///    temporary's reduction that uses none of that reduction's variables (each block of
///    the pass would compute it again).
enum class ScheduleTarget { Cpp, Cuda, CudaPasses };

/// A reduction variable whose loop visits only the solutions of a congruence that the
/// body's condition requires: in `Sum(lambda ky: select((h + ph - ky) % sh == 0 * ..., v, 0))`
/// the terms of every other `ky` are zero, so `ky` steps by `sh` from the one solution
/// (a window gradient visits only the windows that contain the element; no modulo test
/// per window position).
struct StridedVar {
  unsigned var = 0;
  const ir::Expr *guard = nullptr;  ///< the factor `X % modulus == 0` the loop makes true
  const ir::Expr *offset = nullptr; ///< X: affine in `var`, the other variables bound outside
  int64_t coefficient = 0;          ///< X's coefficient of `var` (nonzero)
  int64_t modulus = 0;              ///< positive
};

/// A reduction variable whose loop runs at most once: the body's condition requires
/// `var == value` (a one-hot pick: `Sum(lambda c: select(c == labels[n], x, 0))`), so the
/// loop visits only `value` when it is an integer in the variable's range (a NaN value
/// visits one position, where the condition gives the NaN the whole sum would).
struct PickedVar {
  unsigned var = 0;
  const ir::Expr *value = nullptr; ///< uses no variable of a loop inside var's
};

/// How one reduction of the body is computed.
struct ScheduledReduction {
  enum class Placement {
    Inline,    ///< a scalar at the start of loop `slot`'s body in nest `nest`
    Temporary, ///< a buffer over `index`, filled by its own pass before the main nest
    Alias,     ///< the value of reduction `aliasOf` (an equal reduction)
    Count,     ///< `countScale` times the product of its variables' extents
  };
  const ir::Reduce *node = nullptr;
  unsigned id = 0;
  Placement placement = Placement::Inline;
  /// The nest it is computed in: -1 the kernel's main nest, else the id of the temporary
  /// whose pass computes it (Inline), or that it is itself (Temporary).
  int nest = -1;
  /// Inline: the loop variable at the start of whose body it is computed (-1: once, before
  /// the nest's loops).
  int slot = -1;
  /// The variables its value depends on, outermost loop first. A temporary's index.
  std::vector<unsigned> depends;
  /// Inline: the loops of its nest around the point where it is computed, outermost
  /// first. It is computed once per value of the variables it depends on exactly when
  /// every one of them is in `depends`.
  std::vector<unsigned> loops;
  unsigned aliasOf = 0;
  double countScale = 1;
  /// Inline or Temporary: the reduction whose loops it shares (it is computed in the same
  /// nest, its variables standing for that one's, position by position); -1: its own.
  int fusedWith = -1;
  /// Its variables that step through congruences (serial loops only; a CUDA block that
  /// splits the reduction across threads tests the condition instead).
  std::vector<StridedVar> strides;
  /// Its variables that a condition pins to one value (serial loops only, as strides).
  std::vector<PickedVar> picks;
};

/// Every decision about one kernel.
struct KernelSchedule {
  ScheduleTarget target = ScheduleTarget::Cpp;
  /// In post-order: each after the reductions nested in it. Temporaries are filled in this
  /// order too, so a temporary's pass may read those before it.
  std::vector<ScheduledReduction> reductions;
  /// C++ main nest: the leading output loops flattened into one parallel loop (at least 1
  /// when there is an output loop).
  unsigned parallelLoops = 0;
  /// C++ main nest: the innermost output loop is a SIMD loop.
  bool vectorInnermost = false;
  /// C++ main nest: the body is one reduction over a contraction (a product, a
  /// convolution) whose loops go outside the innermost output loop, which accumulates
  /// into the output row.
  bool interchange = false;

  /// The reduction of `node` (every Reduce of the body has one).
  const ScheduledReduction &of(const ir::Reduce *node) const;
  /// Each temporary's index (its `depends`), in the order their passes run: the kernel
  /// lays them out one after another in the scratch space in this order.
  std::vector<std::vector<unsigned>> temporaries() const;
  /// The reduction whose value `r` is: `r` itself, or the one it repeats (Alias).
  const ScheduledReduction &resolved(const ScheduledReduction &r) const;
  /// Whether an inline reduction of nest `nest` is computed at loop `slot`.
  bool hasInlineAt(int nest, int slot) const;
  /// The reductions that share `leader`'s loops, `leader` first.
  std::vector<const ScheduledReduction *> fusedGroup(unsigned leader) const;
};

/// Schedules `op` for `target`.
KernelSchedule scheduleKernel(const InstOp &op, ScheduleTarget target);

/// The terms one evaluation of reduction `r` visits over `ranges`: the product of its
/// variables' extents, a picked variable counting one value and a strided one the share of
/// its range its congruence allows.
double visitedTerms(const ScheduledReduction &r, const std::vector<Range> &ranges);

/// The work of the scheduled loops over `ranges` (one range per variable of `op`): how many
/// times a reduction's body or the output's expression is evaluated, each reduction once
/// per value of its loops (a strided variable counts the share of its range it visits).
/// For a contraction it is the multiply-adds; it is what a step's work is measured in.
double scheduledIterations(const InstOp &op, const KernelSchedule &s,
                           const std::vector<Range> &ranges);

/// The schedule as text, one line per reduction and one for the main nest, naming
/// variables as the op does: what golden tests compare.
std::string describeSchedule(const InstOp &op, const KernelSchedule &s);

} // namespace tofu

#endif // TOFU_CODEGEN_SCHEDULE_H
