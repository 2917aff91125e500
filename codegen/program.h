// The execution plan as a program each worker runs on its own: op instances with their
// kernel, concrete shapes and argument values, buffers at the memory plan's offsets of the
// worker's arena, fetches, reductions and the carries of optimiser updates as region copies.
// It is data alone, naming no partition or search structure (Problem, StrategyTable,
// ExecPlan; codegen/program_builder.h builds it from them), so a backend — threads over CPU
// arenas, GPU streams, MPI ranks — runs it through a handful of operations (runtime/backend.h):
// allocate the arenas, copy a region, launch a kernel, combine partial results, synchronise.
#ifndef TOFU_CODEGEN_PROGRAM_H
#define TOFU_CODEGEN_PROGRAM_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "analysis/strategy.h"
#include "codegen/loop_ir.h"
#include "graph/graph.h"

namespace tofu {

/// A copy of `box` (absolute coordinates of one tensor) from worker `from`'s buffer at
/// `srcOffset` holding `srcBox` into the running worker's buffer at `dstOffset` holding
/// `dstBox`; with `combine`, reduced into the destination by the node's reducer. Buffers are
/// row-major, of elements `srcElement` and `dstElement` (a bfloat16 buffer's values are
/// converted on the way: widened exactly, or rounded to nearest even); offsets are bytes into
/// the arenas.
struct RegionCopy {
  unsigned from = 0;
  int64_t srcOffset = 0, dstOffset = 0;
  Box srcBox, dstBox, box;
  bool combine = false;
  loops::Element srcElement = loops::Element::F32, dstElement = loops::Element::F32;
  /// The tensor's element size as the plan counts bytes moved (its graph dtype).
  unsigned elementBytes = 4;
};

/// One op instance's kernel call, every argument fixed.
struct Launch {
  unsigned kernel = 0;               ///< index into Program::kernels
  std::vector<Range> ranges;         ///< the share: the op's variables
  std::vector<int64_t> inputOffsets; ///< per op input, the buffer it reads (bytes)
  std::vector<Box> inputBoxes;       ///< per op input, the box that buffer holds
  int64_t outputOffset = 0;          ///< where the share (or partial result) is written
  Box produced;                      ///< its output box
  /// The generated kernel's integer arguments (codegen/kernel_gen.h: kernelInts).
  std::vector<int64_t> ints;
  /// Every affine read lies inside its buffer's box: the generated kernel may load unchecked.
  bool fast = false;
  /// The element types of the buffers it reads (per op input) and writes: the types its
  /// kernel is generated for (codegen/kernel_gen.h: KernelTypes).
  std::vector<loops::Element> inputElements;
  loops::Element outputElement = loops::Element::F32;
};

/// What one worker does for one node, in order: fetch its inputs' regions, launch its
/// kernel, (sync), assemble its output tile from the partial results, (sync).
struct ProgramStep {
  unsigned node = 0; ///< index into Program::nodes
  std::vector<RegionCopy> fetch;
  bool launches = false;
  Launch launch;
  bool assembles = false;
  int64_t tileOffset = 0;
  int64_t tileElements = 0;
  /// Several reduction slices are combined into the tile: it starts at the reducer's identity.
  bool initIdentity = false;
  loops::Element tileElement = loops::Element::F32; ///< the output tile's elements
  std::vector<RegionCopy> assemble;
  /// Whether all workers synchronise after the launches (another worker's partial result is
  /// read next) and after the assembly (a worker's tile is read by another next, or this is
  /// the last step and the carries follow). Equal for every worker of one node.
  bool syncAfterLaunch = true;
  bool syncAfterAssembly = true;
};

/// A buffer the step writes before it reads (everything but weights and optimiser state):
/// checking runs fill these with NaN before each step.
struct BufferSpan {
  int64_t offset = 0, bytes = 0;
};

struct WorkerProgram {
  int64_t arenaBytes = 0;
  /// Per tensor, the offset of this worker's tile, or -1 where it holds none.
  std::vector<int64_t> tileOffset;
  std::vector<ProgramStep> steps; ///< one per node, in plan order
  /// After the last step: each update not written in place is copied over the tensor it
  /// replaces (this worker's tile of it), from whichever workers hold it.
  std::vector<RegionCopy> carries;
  std::vector<BufferSpan> scratchBuffers;
};

/// One op instantiation, shared by the nodes that use it: one generated kernel serves them.
struct ProgramKernel {
  std::shared_ptr<const InstOp> op;
};

struct ProgramNode {
  std::string name;
  std::string op; ///< the instantiated op's name
  unsigned kernel = 0;
  Shapes shapes;
  ir::Reducer reducer = ir::Reducer::Sum; ///< how partial results combine
  std::vector<unsigned> inputs;           ///< tensor indices
  unsigned output = 0;
};

struct ProgramTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::Activation;
  bool hasProducer = false;
  std::vector<Box> tiles; ///< per worker
  /// How its tiles and fetched regions are stored: bfloat16 for the tensors a bf16 plan
  /// narrows (partition/problem.h: ProblemTensor::storageBytes 2), else float32.
  loops::Element element = loops::Element::F32;
};

struct Program {
  unsigned workers = 1;
  std::vector<ProgramTensor> tensors;
  std::vector<ProgramKernel> kernels;
  std::vector<ProgramNode> nodes; ///< plan order
  std::vector<WorkerProgram> worker;
  /// Pairs (update, tensor it replaces) carried into the next step, and those of them
  /// written in place over the tensor they replace (element-wise updates of a worker's own
  /// tile whose old value nothing reads later).
  std::vector<std::pair<unsigned, unsigned>> carries;
  std::vector<unsigned> inPlace;
  /// Bytes the plan moves between workers in one step (fetches and reductions).
  int64_t predictedBytes = 0;
  /// Whether some tensor is stored in bfloat16 (a backend that cannot hold it refuses).
  bool hasBfloat16() const;
};

/// Bytes per element of `e` in an arena.
inline unsigned elementBytes(loops::Element e) { return e == loops::Element::BF16 ? 2 : 4; }

/// A readable listing: per worker its arena, then per step its copies, launch and assembly.
std::string programDump(const Program &program);

} // namespace tofu

#endif // TOFU_CODEGEN_PROGRAM_H
