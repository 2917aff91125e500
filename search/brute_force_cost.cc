// The cost model's oracle: every worker's received bytes evaluated one worker at a time
// (nodes × k region evaluations), which modelCost's sum-products must equal.
#include "search/cost_model.h"

namespace tofu {

int64_t CostModel::bruteForceCost(const std::vector<StepChoice> &steps) const {
  int64_t total = 0;
  for (unsigned n = 0; n < p_.nodes.size(); ++n)
    total += nodeBruteForceCost(n, steps);
  return total;
}

int64_t CostModel::nodeBruteForceCost(unsigned node, const std::vector<StepChoice> &steps,
                                      size_t cut, int64_t *messages) const {
  if (steps.empty())
    return 0;
  std::vector<unsigned> parts;
  unsigned k = 1;
  for (const StepChoice &s : steps) {
    parts.push_back(s.parts);
    k *= s.parts;
  }
  int64_t total = 0;
  for (unsigned w = 0; w < k; ++w)
    total += workerNodeBytes(node, steps, workerCoords(w, parts), cut, messages);
  return total;
}

} // namespace tofu
