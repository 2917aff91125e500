#include "tofu_run/evaluation.h"

#include "runtime/data_feed.h"
#include "search/cost_model.h"
#include "support/errors.h"

namespace tofurun {

llvm::Expected<EvalSetup> evaluationSetup(const tofu::GraphSource &source,
                                          const tofu::OpLibrary &lib, const tofu::Problem &p,
                                          const tofu::PartitionPlan &plan,
                                          tofu::Precision precision, tofu::EvalNorm norm,
                                          const std::string &lossOutput, const std::string &name,
                                          const tofu::SettingNames &names, unsigned *batchNorms,
                                          const tofu::PlanOptions *search) {
  // The same source as training's (the same batch and data inputs), without the loss.
  std::string fwdName;
  auto fwd = tofu::loadGraph(source, lib, &fwdName);
  if (!fwd)
    return fwd.takeError();
  // Evaluation leaves the running statistics as training carried them, and normalises with
  // them (EvalNorm::Running) or with the batch's own.
  auto norms = tofu::evaluationGraph(*fwd, lib, norm);
  if (!norms)
    return tofu::stringError(fwdName + ": " + llvm::toString(norms.takeError()));
  if (batchNorms)
    *batchNorms = *norms;
  if (auto terms = tofu::lossTerms(lossOutput); terms && !terms->empty())
    fwd->outputs = {terms->front().output}; // the pipeline checked it is an output
  else if (fwd->outputs.size() > 1)
    fwd->outputs.resize(1);
  const tofu::TensorInfo *out = fwd->outputs.size() == 1 ? fwd->tensor(fwd->outputs[0]) : nullptr;
  if (!out || (out->shape.size() != 2 && out->shape.size() != 3))
    return tofu::usageError(name + ": " + names("eval") +
                            " scores a classifier: a model whose one output is [batch, classes] "
                            "logits, or [batch, positions, classes] with a class per position");
  tofu::PipelineOptions forward;
  forward.until = tofu::Stage::Execution;
  // In the training's precision: a bf16 run evaluates in bf16, as PyTorch's evaluates under
  // autocast (until 2026-11-29 it evaluated in float32).
  forward.precision = precision;
  if (search)
    forward.search = *search;
  else
    forward.plan = [&](const tofu::Problem &sub) -> llvm::Expected<tofu::PartitionPlan> {
      auto restricted = tofu::restrictPlan(plan, p, sub);
      if (restricted)
        restricted->totalBytes = tofu::CostModel(sub).bruteForceCost(restricted->steps);
      return restricted;
    };
  auto r = tofu::runPipeline(std::move(*fwd), fwdName, lib, forward);
  if (!r)
    return tofu::stringError(names("eval") +
                             ": the forward graph: " + llvm::toString(r.takeError()));
  EvalSetup setup;
  setup.forward = std::move(*r);
  const tofu::Problem &ep = *setup.forward.problem;
  for (unsigned i = 0; i < ep.tensors.size(); ++i)
    if (ep.tensors[i].name == setup.forward.graph.outputs[0])
      setup.logits = i;
  return setup;
}

} // namespace tofurun
