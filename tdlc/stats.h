// `tdlc --stats DIR`: what an operator library describes, and its ONNX coverage.
#ifndef TOFU_TDLC_STATS_H
#define TOFU_TDLC_STATS_H

#include <map>
#include <string>
#include <vector>

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

struct LibraryStats {
  unsigned files = 0, ops = 0;
  unsigned elementwise = 0, withReduction = 0, opaque = 0, withGrad = 0;
  unsigned uninstantiable = 0; ///< ops that fail to instantiate with defaults
  // ONNX coverage.
  unsigned onnxTotal = 0;
  std::vector<std::string> described, folded, missing;
  std::map<std::string, std::string> notDescribable; ///< operator -> reason
  /// Translated operators beyond the default domain's at the opset: other domains' (the
  /// entry's "domain") and older opsets' (its "opset"), each with where it is from.
  std::vector<std::string> beyond;
  std::vector<std::string> problems; ///< mapping entries naming ops the library lacks, ...
};

/// Computes the statistics of every .tdl file under `dir`, with the ONNX coverage from
/// `dir/onnx_mapping.json` against libonnx's operators at `opset`.
llvm::Expected<LibraryStats> computeStats(const std::string &dir, int opset = 17);

/// Prints the statistics as tables.
void printStats(llvm::raw_ostream &os, const LibraryStats &s);

} // namespace tofu

#endif // TOFU_TDLC_STATS_H
