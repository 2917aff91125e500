// The static memory planner: every buffer a worker needs while running an ExecPlan (its
// tiles, the buffers MultiFetch assembles inputs in, partial results), with its lifetime
// in the worker's op order, placed at offsets of one arena so that buffers whose lifetimes
// overlap never overlap in memory; the arena's size is the worker's peak.
#ifndef TOFU_CODEGEN_MEMORY_PLAN_H
#define TOFU_CODEGEN_MEMORY_PLAN_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/exec_plan.h"

namespace tofu {

// Bytes per element in an arena: a tile or a fetched region takes its tensor's storage size
// (ProblemTensor::storageBytes(): 4, as the engines hold every tensor as float32 whatever its
// dtype, and 2 for a bfloat16 tensor of a graph in bf16); a result combined from reduction
// slices is float32 until its tile is assembled (resultStorageBytes). Communication is
// counted at the dtype's size, as the search costs it.

struct Buffer {
  enum class Kind { Tile, Fetch, Partial };
  Kind kind = Kind::Tile;
  unsigned tensor = 0;
  int64_t bytes = 0;
  /// Live over [start, end) of the program's time: node i (in plan order) fetches and
  /// computes at 3i, assembles outputs at 3i + 1.
  int64_t start = 0, end = 0;
  int64_t offset = -1; ///< in the worker's arena, once placed
  /// Which instruction it serves: for Fetch and Partial buffers the node's position in plan
  /// order, and for Fetch buffers the input slot.
  int node = -1, input = -1;
};

struct WorkerMemory {
  std::vector<Buffer> buffers;
  int64_t peak = 0;      ///< arena size
  int64_t tileBytes = 0; ///< of the tiles alone, all live at once (no reuse)
};

/// The bytes a worker has live over its program's time: (time, bytes live from that time
/// until the next entry's), in time order, one entry per time a buffer starts or ends.
std::vector<std::pair<int64_t, int64_t>> liveOverTime(const WorkerMemory &w);

/// What is live when the most bytes are (the arena is at least this; more where placement
/// leaves gaps): bytes per buffer kind, and the time.
struct LiveAtMost {
  int64_t time = 0;
  int64_t tiles = 0, fetches = 0, partials = 0;
  int64_t total() const { return tiles + fetches + partials; }
};
LiveAtMost liveAtMost(const WorkerMemory &w);

/// The tiles live at `time` (liveAtMost's, say) by their tensor's role, and how many of
/// their bytes are bfloat16: what a plan's peak is made of (tofu-plan prints it).
struct LiveTiles {
  int64_t inputs = 0, weights = 0, activations = 0, gradients = 0, optimizerState = 0;
  int64_t bfloat16 = 0; ///< of all the above, the tiles stored in bfloat16
  /// The tensors whose tiles take the most of it: (tensor, bytes), largest first, at most
  /// kLargestLiveTiles of them (ties by tensor index).
  std::vector<std::pair<unsigned, int64_t>> largest;
  int64_t total() const { return inputs + weights + activations + gradients + optimizerState; }
};
constexpr size_t kLargestLiveTiles = 8;
LiveTiles liveTilesAt(const Problem &p, const WorkerMemory &w, int64_t time);

struct MemoryPlan {
  std::vector<WorkerMemory> workers;
  int64_t largestPeak() const;
  /// The first worker whose peak is the largest.
  unsigned largestPeakWorker() const;
};

/// Whether node `ne`'s owners each assemble their tile from one slice (no reduction split):
/// every result is final, none is combined.
bool singleSlice(const NodeExec &ne);

/// Whether worker `w` writes its result of `ne` straight into its tile of the output
/// (`tile`): one reduction slice, and the result is exactly the tile. Otherwise the
/// result goes to a partial buffer that the owners assemble from.
bool writesTileDirectly(const NodeExec &ne, unsigned w, const Box &tile);

/// Plans every worker's buffers. Weights, optimiser state and graph outputs live for the
/// whole step; other tiles from their production to their last read by any worker (others
/// fetch from them); a fetch buffer exists only where an input region is not entirely in
/// the worker's own tile, and only while its op runs; a partial result gets its own buffer
/// unless it is exactly the worker's tile of the output.
MemoryPlan planMemory(const Problem &p, const ExecPlan &plan,
                      const std::vector<std::string> &outputs);

/// Checks a plan: every buffer placed, and no two buffers live at the same time overlap.
/// Returns a description of the first violation, or an empty string.
std::string checkMemoryPlan(const MemoryPlan &m);

} // namespace tofu

#endif // TOFU_CODEGEN_MEMORY_PLAN_H
