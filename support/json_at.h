// Strict reading of the JSON documents users write (graph JSON, topologies, device models):
// a value at a path, read with errors that name the document, the path and what is wrong
// with it; an unknown key named with the nearest known one; numbers checked against their
// range; a number too large for a double reported as that, not as a syntax error.
#ifndef TOFU_SUPPORT_JSON_AT_H
#define TOFU_SUPPORT_JSON_AT_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "llvm/Support/Error.h"

namespace tofu {

/// `text` parsed as the JSON of `document` ("graph JSON", "topology", a file's name).
/// Errors: "DOCUMENT: not valid JSON: syntax error at line 1, column 9 ...", "DOCUMENT: the
/// number at byte 12 is too large for a double".
llvm::Expected<nlohmann::json> parseJson(const std::string &text, const std::string &document);

/// The one of `known` nearest to `word` by edit distance, where it is near enough to be a
/// misspelling (two edits, or a third of the word's letters where that is more, and never
/// all of them); else empty.
std::string nearestWord(const std::string &word, const std::vector<const char *> &known);

/// A value at a path of a document (`nodes[3].inputs` of graph JSON).
struct JsonAt {
  const nlohmann::json &v;
  std::string path;
  std::string document;

  JsonAt operator[](const char *key) const { return {v.at(key), path + "." + key, document}; }
  JsonAt operator[](size_t i) const;

  /// "DOCUMENT: PATH: what".
  llvm::Error fail(const std::string &what) const;
  /// An object whose keys are among `allowed`, having every one of `required`. An unknown
  /// key is named with the nearest allowed one: "unknown key 'latncy' (did you mean
  /// 'latency'?; the keys are name, count, bandwidth, latency)".
  llvm::Error object(const std::vector<const char *> &allowed,
                     const std::vector<const char *> &required) const;
  llvm::Error array() const;
  llvm::Expected<std::string> string() const;
  /// The string at `key` into `*out`, where the object has that key (else `*out` stays).
  llvm::Error optionalString(const char *key, std::string *out) const;
  llvm::Expected<bool> boolean() const;
  /// A whole number in [lo, hi].
  llvm::Expected<int64_t> integer(int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
  /// A finite number in [lo, hi] (positive: lo > 0 is given as `positive`).
  llvm::Expected<double> number(double lo, double hi, bool positive = false) const;
  llvm::Expected<std::vector<std::string>> strings() const;
  llvm::Expected<std::map<std::string, int64_t>> integers() const;
};

} // namespace tofu

#endif // TOFU_SUPPORT_JSON_AT_H
