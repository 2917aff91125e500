// The loop IR: a generated kernel as data. Lowering an instantiated op (codegen/kernel_gen)
// builds it following the op's schedule (codegen/schedule.h); one printer writes it as C++
// with OpenMP or as CUDA C++. Every decision about loops is in the tree: which loops there
// are and over what, how each is run (serial, SIMD, across threads, across a GPU's grid or
// a block's threads), where each reduction accumulates, which locals hold temporaries, and
// which loads and stores there are. The two targets differ only where their loops bind to
// hardware (loop kinds, entry points, a block's combine); expressions are C text, the same
// in both, written by the lowering's one expression printer. Arithmetic is float32; a
// buffer's element type (float32 or bfloat16) is in the tree where it is stored (Store's
// `element`) and in the kernel's signature (Kernel::inputs, Kernel::output), and the
// printer writes the conversions from them.
#ifndef TOFU_CODEGEN_LOOP_IR_H
#define TOFU_CODEGEN_LOOP_IR_H

#include <string>
#include <utility>
#include <vector>

#include "analysis/ir.h"

namespace tofu::loops {

enum class Target { Cpp, Cuda };

/// What one element of a buffer is in memory. Loads widen to float32, stores round to the
/// nearest (ties to even).
enum class Element { F32, BF16 };
const char *elementName(Element e); ///< "f32", "bf16"
/// The C type of a pointer to a buffer's elements ("float", "tofu_bf16").
const char *elementCType(Element e);

/// How the iterations of a loop run.
enum class LoopKind {
  Serial,         ///< one after another
  Vector,         ///< C++: a SIMD loop (serial on CUDA); with accumulators, a SIMD reduction
  Parallel,       ///< C++: split across the call's threads (static schedule, `chunk`)
  ParallelVector, ///< C++: split across the call's threads, each share a SIMD loop
  Shared,         ///< C++: inside a Parallel region, split across its threads
  GridThreads,    ///< CUDA: one thread of the grid per iteration (a grid-stride loop)
  GridBlocks,     ///< CUDA: one block per iteration (block-stride; all its threads run it)
  BlockThreads,   ///< CUDA: the threads of one block share the iterations
};

const char *loopKindName(LoopKind k);

struct Node;
using Block = std::vector<Node>;

/// One statement. Which fields matter depends on `kind`.
struct Node {
  enum class Kind {
    Loop,         ///< for `var` from `from` while < `to`, stepping by `step` (empty: 1): body
    Decl,         ///< locals of type `type`: `decls` (name, initial value; empty: none)
    Assign,       ///< `target` `op` `value` (op "=", "/=", ...)
    Combine,      ///< accumulator `target` combined with `value` by `reducer` (NaN-propagating)
    Store,        ///< `target`[`offset`] = `value`: a write to a buffer
    If,           ///< if `cond`: body, else orElse
    Scope,        ///< a nested scope: body
    Region,       ///< C++: a parallel region of the call's threads: body (each thread runs it)
    BlockCombine, ///< CUDA: accumulator `target` of every thread of the block combined by
                  ///< `reducer`, the result given to every thread
    Return,       ///< return `value` (empty: nothing)
    Use,          ///< marks local `target` used (printed as a void cast)
  };
  Kind kind = Kind::Scope;
  // Loop
  LoopKind loop = LoopKind::Serial;
  std::string var, from, to, step;
  /// Vector loops that accumulate: the accumulators (locals) and their reducer.
  std::vector<std::string> accumulators;
  /// Parallel loops: the static schedule's chunk (0: one share per thread).
  int chunk = 0;
  // Decl
  std::string type;
  std::vector<std::pair<std::string, std::string>> decls;
  // Assign, Combine, Store, BlockCombine, Use
  std::string target, op, offset, value;
  /// Store: the element type of the buffer written (BF16: the value is rounded to it).
  Element element = Element::F32;
  ir::Reducer reducer = ir::Reducer::Sum;
  // If
  std::string cond;
  /// Loop and If: a body of one statement printed without braces.
  bool compact = false;
  Block body, orElse;
};

// Statements, made whole (fields not named keep their defaults).
Node loopNode(LoopKind kind, std::string var, std::string from, std::string to,
              std::string step = "", bool compact = false);
Node declNode(std::string type, std::vector<std::pair<std::string, std::string>> decls);
Node assignNode(std::string target, std::string op, std::string value);
Node combineNode(ir::Reducer reducer, std::string accumulator, std::string value);
Node storeNode(std::string buffer, std::string offset, std::string value,
               Element element = Element::F32);
Node ifNode(std::string cond, bool compact = false);
Node returnNode(std::string value);
Node useNode(std::string local);
Node blockCombineNode(ir::Reducer reducer, std::string accumulator);

/// A function of the kernel's translation unit.
struct Function {
  enum class Kind {
    Entry,  ///< an entry point called with the kernel's arguments (`a` in the body)
    Helper, ///< a device/inline helper returning a float, with `params`
  };
  Kind kind = Kind::Entry;
  std::string name;
  std::string params; ///< Helper: the parameter list
  Block body;
};

/// A kernel: its entry points and helpers, in the order they are printed.
struct Kernel {
  /// CUDA: the type of the by-value argument block entry points take (its definition is
  /// `argsDefinition`, printed first); the C++ entry points take TofuKernelArgs.
  std::string argsType, argsDefinition;
  /// The element types of the buffers the kernel reads (per input) and writes.
  std::vector<Element> inputs;
  Element output = Element::F32;
  std::vector<Function> functions;
};

/// Prints a statement list at `indent` (two spaces each) for `target`. Fails (returns
/// false, `error` set) where the tree asks for what the target cannot do (a CUDA loop
/// across OpenMP threads, a block combine in C++).
bool printBlock(const Block &b, Target target, unsigned indent, std::string &out,
                std::string &error);
/// Prints a function, or fails as printBlock.
bool printFunction(const Kernel &k, const Function &f, Target target, std::string &out,
                   std::string &error);

/// An outline of a statement list: one line per loop (its kind, variable and extent), per
/// store, per combine and per block combine, and per condition, indented by nesting; locals
/// and early exits are left out. What golden tests of a lowering compare.
std::string outline(const Block &b, unsigned indent = 0);
/// The outline of every entry point of a kernel, each headed by `entry` and its name
/// without `prefix` (the kernel's own name).
std::string outline(const Kernel &k, const std::string &prefix);

} // namespace tofu::loops

#endif // TOFU_CODEGEN_LOOP_IR_H
