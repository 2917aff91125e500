// Printing strategy tables: the readable table and the JSON schema of DESIGN.md.
#ifndef TOFU_ANALYSIS_REPORT_H
#define TOFU_ANALYSIS_REPORT_H

#include "analysis/strategy.h"
#include "nlohmann/json.hpp"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

/// One op's entry of `tdlc --strategies --format=json` (DESIGN.md's schema).
nlohmann::ordered_json strategiesJson(const StrategyTable &t);

/// The readable table `tdlc --strategies` prints by default.
void printStrategyTable(llvm::raw_ostream &os, const StrategyTable &t);

/// `b (output dim 0)` / `ci (reduction, Sum)`.
std::string describeStrategy(const StrategyTable &t, const Strategy &s);

} // namespace tofu

#endif // TOFU_ANALYSIS_REPORT_H
