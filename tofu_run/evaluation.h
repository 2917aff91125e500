// The forward graph evaluation runs, planned as the training plan restricted to it: what
// tofu-run --eval and the Python module's Trainer.evaluate score a classifier with
// (runtime/trainer.h: EvalGraph).
#ifndef TOFU_TOFU_RUN_EVALUATION_H
#define TOFU_TOFU_RUN_EVALUATION_H

#include <string>

#include "graph/graph.h"
#include "graph/library.h"
#include "graph/training.h"
#include "partition/plan.h"
#include "partition/problem.h"
#include "planner/pipeline.h"
#include "search/search.h"
#include "support/errors.h"
#include "llvm/Support/Error.h"

namespace tofurun {

/// The forward graph and which of its tensors are the logits.
struct EvalSetup {
  tofu::PipelineResult forward;
  unsigned logits = 0; ///< the output tensor
};

/// `source` read again without its loss (its one output, or the first of `lossOutput`'s
/// terms), made the graph evaluation runs (graph/training.h: evaluationGraph, `norm`), and
/// planned as `plan` (the training step `p`'s) restricted to it, in `precision`. Errors:
/// the model does not read or plan (`name` says whose), or its output is not a classifier's
/// logits ([batch, classes], or [batch, positions, classes]); the latter is bad usage.
/// `batchNorms` gets how many batch norms the evaluation graph changed; messages name the
/// evaluation as `names` spells "eval". With `search` (a pipeline's training step, whose
/// stages are no one plan to restrict), the forward graph is searched with it instead, over
/// the same workers; copyState then re-lays the weights out at each evaluation.
llvm::Expected<EvalSetup>
evaluationSetup(const tofu::GraphSource &source, const tofu::OpLibrary &lib, const tofu::Problem &p,
                const tofu::PartitionPlan &plan, tofu::Precision precision, tofu::EvalNorm norm,
                const std::string &lossOutput, const std::string &name,
                const tofu::SettingNames &names, unsigned *batchNorms = nullptr,
                const tofu::PlanOptions *search = nullptr);

} // namespace tofurun

#endif // TOFU_TOFU_RUN_EVALUATION_H
