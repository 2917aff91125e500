// Byte counts as people write and read them (units.h).
#include "support/units.h"

#include <cctype>
#include <cstdlib>
#include <map>

#include "fmt/format.h"

namespace tofu {

namespace {
llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

std::optional<Quantity> readQuantity(const std::string &text) {
  auto digit = [&](size_t at) {
    return at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]));
  };
  size_t at = text.find_first_not_of(' ');
  if (at == std::string::npos)
    return std::nullopt;
  const size_t start = at;
  bool any = false;
  while (digit(at)) {
    ++at;
    any = true;
  }
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (digit(at)) {
      ++at;
      any = true;
    }
  }
  if (!any)
    return std::nullopt;
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    size_t e = at + 1;
    if (e < text.size() && (text[e] == '+' || text[e] == '-'))
      ++e;
    if (digit(e)) { // else the e is the unit's
      at = e;
      while (digit(at))
        ++at;
    }
  }
  Quantity q;
  q.value = std::strtod(text.substr(start, at - start).c_str(), nullptr);
  q.unit = text.substr(at);
  q.unit.erase(0, q.unit.find_first_not_of(' '));
  q.unit.erase(q.unit.find_last_not_of(' ') + 1);
  return q;
}

llvm::Expected<int64_t> parseBytes(const std::string &text) {
  std::optional<Quantity> q = readQuantity(text);
  if (!q)
    return error(fmt::format("'{}' is not a number of bytes (e.g. 80GB, 16GiB, 12e9)", text));
  const double value = q->value;
  const std::string &unit = q->unit;
  std::string lower;
  for (char c : unit)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"b", 1},
                                                      {"kb", 1e3},
                                                      {"mb", 1e6},
                                                      {"gb", 1e9},
                                                      {"tb", 1e12},
                                                      {"kib", 1024.0},
                                                      {"mib", 1024.0 * 1024},
                                                      {"gib", 1024.0 * 1024 * 1024},
                                                      {"tib", 1024.0 * 1024 * 1024 * 1024}};
  auto it = units.find(lower);
  if (it == units.end())
    return error(
        fmt::format("'{}': unknown unit '{}' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text, unit));
  const double bytes = value * it->second;
  if (!(bytes >= 1) || bytes > 9e18)
    return error(fmt::format("'{}' is not a positive number of bytes (1 B to 9e18 B)", text));
  return static_cast<int64_t>(bytes);
}

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

} // namespace tofu
