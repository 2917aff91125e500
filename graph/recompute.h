// The recomputation rewrite of a training graph (recompute.cc): which forward tensors may be
// dropped (recomputeCandidates), the rewrite (applyRecomputation) and the sqrt(n) baseline.
#ifndef TOFU_GRAPH_RECOMPUTE_H
#define TOFU_GRAPH_RECOMPUTE_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/library.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A forward tensor of a training graph that recomputation may drop (applyRecomputation): an
/// activation computed by the forward pass, not an output, not a state update's result.
struct RecomputeCandidate {
  std::string tensor, node; ///< the tensor and the node computing it
  int64_t elements = 0;
  int64_t bytes = 0;           ///< at its storage size (4, or 2 for bfloat16 under BF16)
  bool readByBackward = false; ///< kept for the backward pass unless dropped
  /// A cut of the forward pass: no forward node after this tensor's reads a candidate
  /// computed before it (a transformer's residual stream between sublayers, a CNN's block
  /// outputs). Kept, it bounds every chain of copies (applyRecomputation) at it: a dropped
  /// tensor after it is recomputed from it, never from further back.
  bool cut = false;
};
/// The candidates, in forward (topological) order.
llvm::Expected<std::vector<RecomputeCandidate>> recomputeCandidates(const Graph &g);
/// The same for a forward graph (no backward pass: every node is forward, and nothing is
/// readByBackward): its cuts are where pipeline stages may end (planner/stages.h).
llvm::Expected<std::vector<RecomputeCandidate>> forwardCandidates(const Graph &forward);

/// What applyRecomputation did.
struct RecomputeSummary {
  std::vector<std::string> dropped; ///< as given, sorted
  /// Per copy made: the dropped tensor and the tensor its copy computes.
  std::vector<std::pair<std::string, std::string>> copies;
  int64_t bytes = 0;    ///< of the copies' results (whole tensors, at their dtypes)
  unsigned removed = 0; ///< forward nodes gone: only the backward pass read their results
};

/// Recomputation, as a rewrite of a training graph (buildTrainingGraph's: the forward nodes,
/// then the backward): every backward reader of a tensor of `dropped` reads instead a copy of
/// its forward node (same op, attributes, inputs and groups, named `<node>_recompute`,
/// computing `<tensor>_recompute`), declared just before the first backward node that needs
/// it. A copy reads the copies of the dropped tensors its node reads, so a chain of dropped
/// tensors is recomputed from the kept ones before it (segment checkpointing). The forward
/// tensor then lives only until its last forward reader, and the copy from its recomputation
/// to its last backward reader: the memory planner sees both. A dropped tensor that only the
/// backward pass read is no longer computed by the forward pass. The copies are ordinary
/// nodes: partitioned, searched, fused and run like any other, and, running the same kernels
/// on the same values, they compute what the forward pass did, bit for bit. Errors name a
/// tensor that is not a candidate (recomputeCandidates) and why.
llvm::Expected<RecomputeSummary> applyRecomputation(Graph &g,
                                                    const std::vector<std::string> &dropped);

/// The sqrt(n) baseline (Chen et al., 2016): the candidates in forward order cut into
/// segments of ceil(sqrt(n)), each segment's last tensor kept and the others dropped.
std::vector<std::string> segmentCheckpoints(const std::vector<RecomputeCandidate> &candidates);

} // namespace tofu

#endif // TOFU_GRAPH_RECOMPUTE_H
