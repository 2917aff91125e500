// The partitioned execution plan (paper section 6): from a PartitionPlan, what every worker
// computes (its op instances with concrete variable ranges), the fetches that assemble
// each input region from the tiles of the workers holding it (one MultiFetch per input),
// and how each output tile is assembled from the workers' (partial) results.
#ifndef TOFU_CODEGEN_EXEC_PLAN_H
#define TOFU_CODEGEN_EXEC_PLAN_H

#include <cstdint>
#include <string>
#include <vector>

#include "partition/plan.h"
#include "partition/problem.h"

namespace tofu {

/// A box of a tensor copied from worker `from` (its tile, or its partial output).
struct Fetch {
  unsigned from = 0;
  Box box; ///< absolute coordinates
};

/// One input of an op instance: the region it reads and where each part comes from.
struct InputFetch {
  unsigned tensor = 0;
  Box region;
  std::vector<Fetch> parts; ///< disjoint, covering `region`; `from` may be the worker itself
  /// An earlier input of the op reading the same tensor over the same region, whose buffer
  /// serves this one too (nothing is fetched twice), or -1.
  int repeats = -1;
};

/// What one worker computes of one node.
struct OpInstance {
  std::vector<Range> ranges; ///< the node's variables
  bool computes = true;      ///< false when a range is empty (nothing to do)
  std::vector<InputFetch> inputs;
  Box produced; ///< the output box of its (partial) result
};

/// How an owner's output tile is made: the partial results to combine (one per reduction
/// slice, each a set of disjoint boxes), or, without a reduction split, the one result.
struct OutputAssembly {
  unsigned owner = 0;
  Box tile;
  std::vector<std::vector<Fetch>> slices;
};

struct NodeExec {
  unsigned node = 0;
  ir::Reducer reducer = ir::Reducer::Sum; ///< how slices combine (when there are several)
  std::vector<OpInstance> workers;        ///< per worker
  std::vector<OutputAssembly> assemble;   ///< per worker owning a tile
};

struct ExecPlan {
  unsigned workers = 1;
  std::vector<unsigned> parts; ///< per step
  std::vector<NodeExec> nodes; ///< topological order
  /// Per worker, per tensor, its tile.
  std::vector<std::vector<Box>> tiles;
  /// Pipeline stages (planner/stages.h): groups of workers that run different nodes at once
  /// (1: every node runs on every worker).
  unsigned stages = 1;
  /// Bytes fetched from other workers: inputs and partial outputs.
  int64_t bytesMoved(const Problem &p) const;
};

ExecPlan buildExecPlan(const Problem &p, const PartitionPlan &plan);

/// Calls `moved(from, to, bytes)` for every part node `ne` moves between two workers: each
/// part of an input a worker fetches from another (a read that repeats an earlier one moves
/// nothing) and each part of a result an owner takes from another (a reduction's partial
/// results at their resultBytes). What ExecPlan::bytesMoved adds up.
template <class Moved> void forEachTransfer(const Problem &p, const NodeExec &ne, Moved &&moved) {
  for (unsigned w = 0; w < ne.workers.size(); ++w)
    for (const InputFetch &in : ne.workers[w].inputs) {
      if (in.repeats >= 0)
        continue;
      for (const Fetch &f : in.parts)
        if (f.from != w)
          moved(f.from, w, boxElements(f.box) * int64_t(p.tensors[in.tensor].elementBytes));
    }
  const ProblemTensor &out = p.tensors[p.nodes[ne.node].output];
  for (const OutputAssembly &a : ne.assemble)
    for (const auto &slice : a.slices)
      for (const Fetch &f : slice)
        if (f.from != a.owner)
          moved(f.from, a.owner,
                boxElements(f.box) * int64_t(out.resultBytes(a.slices.size() > 1)));
}
/// The bytes node `ne` moves between workers (forEachTransfer's).
int64_t bytesMoved(const Problem &p, const NodeExec &ne);

/// Where worker `w` gets each part of `region` of a tensor from, given the workers' tiles of
/// it (`holds`: which workers hold their tile): its own tile where that has the part, else
/// the nearest holder, the one whose `coords` agree with w's over the most leading entries
/// (as buildExecPlan chooses). Parts are disjoint and cover what the tiles hold of `region`.
std::vector<Fetch> fetchParts(const Box &region, unsigned w, const std::vector<Box> &tiles,
                              const std::vector<bool> &holds,
                              const std::vector<std::vector<unsigned>> &coords);

/// The plan as JSON: per node (in the order every worker runs them — the control
/// dependencies that let buffers be reused) and per worker, the variable ranges, each
/// input's region and its fetch parts, the produced box, and each owner's assembly.
std::string execPlanJson(const Problem &p, const ExecPlan &plan);
/// A readable dump: one line per op instance and per assembly.
std::string execPlanDump(const Problem &p, const ExecPlan &plan);

} // namespace tofu

#endif // TOFU_CODEGEN_EXEC_PLAN_H
