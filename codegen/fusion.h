// Element-wise fusion: a node whose result only one other node reads, at that node's own
// output coordinates, on the same worker and over the same box (an element-wise chain that
// the search's coarsening keeps in one cut), is folded into its reader: one kernel computes
// both, and the intermediate tensor is never stored (its tiles are dropped from the plan, so
// the memory planner gives it no buffer). Chains fold repeatedly (bias-add, then ReLU, then
// a scale ...). A node folds only where:
//   - its body is a map: no reduction, no opaque call, every non-scalar input read at the
//     output coordinates (bias-add, activations, scaling, optimiser arithmetic);
//   - its result has exactly one reader, is no graph output, loss or optimiser update, and
//     that reader reads it only at its own output coordinates;
//   - on every worker it computes exactly the box the reader needs of it, into its own tile,
//     with nothing fetched from or assembled by other workers (so no bytes change).
// The reader keeps its inputs in order (the intermediate's slot removed) followed by the
// folded node's inputs, so an optimiser update's first input is still the weight it updates.
#ifndef TOFU_CODEGEN_FUSION_H
#define TOFU_CODEGEN_FUSION_H

#include <string>
#include <vector>

#include "codegen/exec_plan.h"

namespace tofu {

struct FusedPlan {
  Problem problem; ///< the nodes folded away keep their slots, unused by `plan`
  ExecPlan plan;   ///< the folded nodes removed, their readers computing both
  unsigned folded = 0;
  std::vector<std::string> chains; ///< per fused node: "a+b+c"
};

/// Folds every chain it can. `keep`: tensors that must stay stored (the graph's outputs).
FusedPlan fuseElementwise(const Problem &p, const ExecPlan &plan,
                          const std::vector<std::string> &keep);

/// The op computing `consumer` with its inputs `slots` (each reading the producer's result
/// at the consumer's output coordinates) replaced by `producer`'s body: the consumer's
/// inputs without `slots`, then the producer's. The producer must be a map (isMap). With
/// `roundBf16` (the producer's result is stored in bfloat16) each read of it is rounded to
/// bfloat16, as reading it back from its storage would be.
InstOp foldInto(const InstOp &producer, const InstOp &consumer, const std::vector<unsigned> &slots,
                bool roundBf16 = false);

/// Whether `op` is a map: every variable an output variable, no reduction or opaque call
/// (its inputs may be read anyhow: broadcast biases, scalars, shifted windows).
bool isMap(const InstOp &op);

} // namespace tofu

#endif // TOFU_CODEGEN_FUSION_H
