// Strict reading of users' JSON documents (json_at.h).
#include "support/json_at.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "llvm/ADT/StringRef.h"

namespace tofu {

namespace {

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s", message.c_str());
}

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string plainMessage(const char *what) {
  std::string s = what;
  if (s.rfind("[json.exception.", 0) == 0)
    if (const size_t end = s.find("] "); end != std::string::npos)
      s = s.substr(end + 2);
  return s;
}

} // namespace

llvm::Expected<nlohmann::json> parseJson(const std::string &text, const std::string &document) {
  // A key given twice in one object would be read as its last copy: the first one repeated
  // is refused. One set of keys per object open, innermost last.
  std::vector<std::set<std::string>> open;
  std::string repeated;
  auto note = [&](int, nlohmann::json::parse_event_t event, nlohmann::json &parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start)
      open.emplace_back();
    else if (event == E::object_end && !open.empty())
      open.pop_back();
    else if (event == E::key && !open.empty() && parsed.is_string() &&
             !open.back().insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    nlohmann::json v = nlohmann::json::parse(text, note);
    if (!repeated.empty())
      return failure(fmt::format("{}: the key '{}' is given twice in one object (JSON readers "
                                 "differ in which they keep)",
                                 document, repeated));
    return v;
  } catch (const nlohmann::json::out_of_range &e) {
    // 406: a number past a double's range ("1e999").
    return failure(fmt::format("{}: a number is too large for a double ({})", document,
                               plainMessage(e.what())));
  } catch (const nlohmann::json::exception &e) {
    return failure(fmt::format("{}: not valid JSON: {}", document, plainMessage(e.what())));
  }
}

std::string nearestWord(const std::string &word, const std::vector<const char *> &known) {
  std::string best;
  unsigned bestDistance = ~0u;
  for (const char *k : known) {
    const unsigned d = llvm::StringRef(word).edit_distance(k, /*AllowReplacements=*/true);
    if (d < bestDistance) {
      bestDistance = d;
      best = k;
    }
  }
  // Two edits at least (a transposition is two), a third of the word at most beyond that,
  // and never the whole word.
  const unsigned limit = std::max<unsigned>(2, static_cast<unsigned>(word.size() / 3));
  return bestDistance <= limit && bestDistance < word.size() ? best : "";
}

JsonAt JsonAt::operator[](size_t i) const {
  return {v.at(i), fmt::format("{}[{}]", path, i), document};
}

llvm::Error JsonAt::fail(const std::string &what) const {
  return failure(fmt::format("{}: {}: {}", document, path, what));
}

llvm::Error JsonAt::object(const std::vector<const char *> &allowed,
                           const std::vector<const char *> &required) const {
  if (!v.is_object())
    return fail(fmt::format("must be an object, not {}", v.type_name()));
  for (auto it = v.begin(); it != v.end(); ++it)
    if (std::find_if(allowed.begin(), allowed.end(),
                     [&](const char *a) { return it.key() == a; }) == allowed.end()) {
      const std::string near = nearestWord(it.key(), allowed);
      return fail(fmt::format("unknown key '{}' ({}one of: {})", it.key(),
                              near.empty() ? "" : "did you mean '" + near + "'? ",
                              fmt::join(allowed, ", ")));
    }
  for (const char *r : required)
    if (!v.contains(r))
      return fail(fmt::format("the key '{}' is missing", r));
  return llvm::Error::success();
}

llvm::Error JsonAt::array() const {
  if (!v.is_array())
    return fail(fmt::format("must be an array, not {}", v.type_name()));
  return llvm::Error::success();
}

llvm::Expected<std::string> JsonAt::string() const {
  if (!v.is_string())
    return fail(fmt::format("must be a string, not {}", v.type_name()));
  return v.get<std::string>();
}

llvm::Error JsonAt::optionalString(const char *key, std::string *out) const {
  if (!v.contains(key))
    return llvm::Error::success();
  auto s = (*this)[key].string();
  if (!s)
    return s.takeError();
  *out = std::move(*s);
  return llvm::Error::success();
}

llvm::Expected<bool> JsonAt::boolean() const {
  if (!v.is_boolean())
    return fail(fmt::format("must be true or false, not {}", v.dump()));
  return v.get<bool>();
}

llvm::Expected<int64_t> JsonAt::integer(int64_t lo, int64_t hi) const {
  // A whole number written as a float (3.0) is not an integer of the document.
  if (!v.is_number_integer())
    return fail(fmt::format("must be an integer, not {}", v.dump()));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return fail(fmt::format("{} is out of range", v.dump()));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    if (lo == INT64_MIN)
      return fail(fmt::format("{} is out of range (at most {})", x, hi));
    if (hi == INT64_MAX)
      return fail(fmt::format("{} is out of range (at least {})", x, lo));
    return fail(fmt::format("{} is out of range ({} to {})", x, lo, hi));
  }
  return x;
}

llvm::Expected<double> JsonAt::number(double lo, double hi, bool positive) const {
  if (!v.is_number())
    return fail(fmt::format("must be a number, not {}", v.dump()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (positive && !(x > 0)))
    return fail(fmt::format("{} is out of range ({} up to {:g})", v.dump(),
                            positive ? "above 0" : fmt::format("{:g}", lo), hi));
  return x;
}

llvm::Expected<std::vector<std::string>> JsonAt::strings() const {
  if (llvm::Error e = array())
    return std::move(e);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    auto s = (*this)[i].string();
    if (!s)
      return s.takeError();
    out.push_back(*s);
  }
  return out;
}

llvm::Expected<std::map<std::string, int64_t>> JsonAt::integers() const {
  if (!v.is_object())
    return fail(fmt::format("must be an object, not {}", v.type_name()));
  std::map<std::string, int64_t> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    auto n = JsonAt{it.value(), path + "." + it.key(), document}.integer();
    if (!n)
      return n.takeError();
    out[it.key()] = *n;
  }
  return out;
}

} // namespace tofu
