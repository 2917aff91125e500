// Reading and printing a topology.
#include "planner/topology_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "analysis/checked.h"
#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "nlohmann/json.hpp"
#include "support/files.h"
#include "support/json_at.h"
#include "support/units.h"

namespace tofu {
namespace {

std::string lowered(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// A number followed by a unit from `units` (lower case); `what` names the quantity.
llvm::Expected<double> quantity(const std::string &text, const std::map<std::string, double> &units,
                                const char *what, const char *unitList) {
  std::optional<Quantity> q = readQuantity(text);
  if (!q)
    return stringError(
        fmt::format("'{}' is not a {} (a number and a unit: {})", text, what, unitList));
  auto it = units.find(lowered(q->unit));
  if (it == units.end())
    return stringError(
        fmt::format("'{}': unknown {} unit '{}' ({})", text, what, q->unit, unitList));
  const double value = q->value * it->second;
  if (!std::isfinite(value))
    return stringError(fmt::format("{} '{}' is out of range", what, text));
  return value;
}

llvm::Expected<double> bandwidthOf(const std::string &text) {
  static const std::map<std::string, double> units = {
      {"b/s", 1},           {"kb/s", 1e3},           {"mb/s", 1e6},
      {"gb/s", 1e9},        {"tb/s", 1e12},          {"kib/s", 1024.0},
      {"mib/s", 1048576.0}, {"gib/s", 1073741824.0}, {"tib/s", 1099511627776.0},
      {"mbit/s", 1e6 / 8},  {"gbit/s", 1e9 / 8},     {"tbit/s", 1e12 / 8}};
  auto v = quantity(text, units, "bandwidth",
                    "B/s, KB/s, MB/s, GB/s, TB/s, KiB/s ... TiB/s, "
                    "Mbit/s, Gbit/s, Tbit/s");
  if (v && !(*v > 0))
    return stringError(fmt::format("bandwidth '{}' is not positive", text));
  return v;
}

llvm::Expected<double> latencyOf(const std::string &text) {
  static const std::map<std::string, double> units = {{"s", 1},     {"ms", 1e-3}, {"us", 1e-6},
                                                      {"µs", 1e-6}, {"ns", 1e-9}, {"", 1}};
  auto v = quantity(text, units, "latency", "s, ms, us, ns");
  if (v && !(*v >= 0))
    return stringError(fmt::format("latency '{}' is negative", text));
  return v;
}

/// A JSON field given as a string with a unit (`parse`) or as a number in the base unit,
/// which must pass `valid` (else "NAME INVALID").
template <typename Parse, typename Valid>
llvm::Expected<double> jsonQuantity(const nlohmann::json &value, const char *name, Parse parse,
                                    Valid valid, const char *invalid) {
  if (value.is_string())
    return parse(value.get<std::string>());
  if (!value.is_number())
    return stringError(fmt::format("{} is neither a string nor a number", name));
  const double v = value.get<double>();
  if (!valid(v))
    return stringError(fmt::format("{} {}", name, invalid));
  return v;
}

/// A link's "bandwidth" (required) and "latency" (optional) of JSON object `o`; an error
/// is the message alone, for the caller to say where.
llvm::Error jsonLink(const nlohmann::json &o, double &bandwidth, double &latency) {
  if (!o.contains("bandwidth"))
    return stringError("needs \"bandwidth\" (e.g. \"12.5GB/s\", or bytes per second)");
  auto bw = jsonQuantity(
      o["bandwidth"], "bandwidth", bandwidthOf, [](double v) { return v > 0; }, "is not positive");
  if (!bw)
    return bw.takeError();
  bandwidth = *bw;
  if (o.contains("latency")) {
    auto lat = jsonQuantity(
        o["latency"], "latency", latencyOf, [](double v) { return v >= 0; }, "is negative");
    if (!lat)
      return lat.takeError();
    latency = *lat;
  }
  return llvm::Error::success();
}

/// A link of the compact form, `BANDWIDTH[@LATENCY]`; an error is the message alone.
llvm::Error compactLink(const std::string &text, double &bandwidth, double &latency) {
  const size_t at = text.find('@');
  auto bw = bandwidthOf(text.substr(0, at));
  if (!bw)
    return bw.takeError();
  bandwidth = *bw;
  if (at != std::string::npos) {
    auto lat = latencyOf(text.substr(at + 1));
    if (!lat)
      return lat.takeError();
    latency = *lat;
  }
  return llvm::Error::success();
}

llvm::Expected<Topology> fromJson(const std::string &text) {
  Topology t;
  auto parsed = parseJson(text, "the topology");
  if (!parsed)
    return parsed.takeError();
  const nlohmann::json &j = *parsed;
  if (!j.is_object() || !j.contains("levels") || !j["levels"].is_array() || j["levels"].empty())
    return stringError("a JSON topology is an object with a non-empty array \"levels\"");
  // A misspelled key is an error, not a default taken in silence.
  if (llvm::Error e =
          JsonAt{j, "the top level", "the topology"}.object({"levels", "host"}, {"levels"}))
    return std::move(e);
  if (j.contains("host")) {
    const nlohmann::json &h = j["host"];
    auto where = [&](const std::string &msg) {
      return stringError(fmt::format("topology host link: {}", msg));
    };
    if (!h.is_object())
      return where("not an object");
    if (llvm::Error e =
            JsonAt{h, "host", "the topology"}.object({"bandwidth", "latency"}, {"bandwidth"}))
      return std::move(e);
    if (llvm::Error e = jsonLink(h, t.hostBandwidth, t.hostLatency))
      return where(llvm::toString(std::move(e)));
  }
  for (size_t i = 0; i < j["levels"].size(); ++i) {
    const nlohmann::json &l = j["levels"][i];
    auto where = [&](const std::string &msg) {
      return stringError(fmt::format("topology level {}: {}", i + 1, msg));
    };
    if (!l.is_object())
      return where("not an object");
    if (llvm::Error e = JsonAt{l, fmt::format("levels[{}]", i), "the topology"}.object(
            {"name", "count", "bandwidth", "latency"}, {}))
      return std::move(e);
    TopologyLevel level;
    level.name = fmt::format("level{}", i + 1);
    if (l.contains("name")) {
      if (!l["name"].is_string())
        return where("\"name\" is not a string");
      level.name = l["name"].get<std::string>();
    }
    if (!l.contains("count") || !l["count"].is_number_integer() || l["count"].get<int64_t>() < 1 ||
        l["count"].get<int64_t>() > kMaxTopologyWorkers)
      return where(fmt::format("needs \"count\", an integer from 1 to {}", kMaxTopologyWorkers));
    level.count = l["count"].get<unsigned>();
    if (llvm::Error e = jsonLink(l, level.bandwidth, level.latency))
      return where(llvm::toString(std::move(e)));
    t.levels.push_back(level);
  }
  return t;
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

llvm::Expected<Topology> fromCompact(const std::string &spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos)
    return stringError(fmt::format("topology '{}': expected COUNTS:BANDWIDTHS, e.g. "
                                   "2x8:12.5GB/s,150GB/s (or a JSON file)",
                                   spec));
  Topology t;
  for (const std::string &c : split(spec.substr(0, colon), 'x')) {
    auto n = parseInteger(c, 1, kMaxTopologyWorkers, "a level's count");
    if (!n)
      return stringError(fmt::format("topology '{}': {}", spec, llvm::toString(n.takeError())));
    TopologyLevel l;
    l.count = static_cast<unsigned>(*n);
    t.levels.push_back(l);
  }
  std::vector<std::string> links = split(spec.substr(colon + 1), ',');
  if (links.size() > 1 && links.back().rfind("host=", 0) == 0) { // the host link
    const std::string host = links.back().substr(5);
    links.pop_back();
    if (llvm::Error e = compactLink(host, t.hostBandwidth, t.hostLatency))
      return stringError(
          fmt::format("topology '{}', host link: {}", spec, llvm::toString(std::move(e))));
  }
  if (links.size() != t.levels.size())
    return stringError(fmt::format("topology '{}': {} level{} but {} bandwidth{}", spec,
                                   t.levels.size(), t.levels.size() == 1 ? "" : "s", links.size(),
                                   links.size() == 1 ? "" : "s"));
  for (size_t i = 0; i < links.size(); ++i) {
    if (llvm::Error e = compactLink(links[i], t.levels[i].bandwidth, t.levels[i].latency))
      return stringError(
          fmt::format("topology '{}', level {}: {}", spec, i + 1, llvm::toString(std::move(e))));
    t.levels[i].name =
        t.levels.size() == 2 ? (i == 0 ? "node" : "gpu") : fmt::format("level{}", i + 1);
  }
  return t;
}

std::string rate(double bytesPerSecond) {
  if (bytesPerSecond >= 1e12)
    return fmt::format("{:.4g} TB/s", bytesPerSecond / 1e12);
  if (bytesPerSecond >= 1e9)
    return fmt::format("{:.4g} GB/s", bytesPerSecond / 1e9);
  if (bytesPerSecond >= 1e6)
    return fmt::format("{:.4g} MB/s", bytesPerSecond / 1e6);
  return fmt::format("{:.4g} B/s", bytesPerSecond);
}

std::string duration(double s) {
  if (s >= 1)
    return fmt::format("{:.4g} s", s);
  if (s >= 1e-3)
    return fmt::format("{:.4g} ms", s * 1e3);
  if (s >= 1e-6)
    return fmt::format("{:.4g} us", s * 1e6);
  return fmt::format("{:.4g} ns", s * 1e9);
}

} // namespace

unsigned Topology::workers() const {
  unsigned k = 1;
  for (const TopologyLevel &l : levels)
    k *= l.count;
  return k;
}

llvm::Expected<Topology> parseTopology(const std::string &spec) {
  std::string text = spec;
  if (pathExists(spec)) {
    auto bytes = readFile(spec, "a topology file");
    if (!bytes)
      return bytes.takeError();
    text = std::move(*bytes);
  } else if (spec.find(':') == std::string::npos && spec.find('{') == std::string::npos) {
    return stringError(fmt::format("topology '{}' is neither a file nor COUNTS:BANDWIDTHS "
                                   "(e.g. 2x8:12.5GB/s,150GB/s)",
                                   spec));
  }
  const size_t first = text.find_first_not_of(" \t\r\n");
  auto t = first != std::string::npos && text[first] == '{' ? fromJson(text) : fromCompact(text);
  if (!t)
    return t.takeError();
  double workers = 1;
  for (const TopologyLevel &l : t->levels)
    workers *= l.count;
  if (workers > kMaxTopologyWorkers)
    return stringError(
        fmt::format("the topology has {} workers (at most {})", workers, kMaxTopologyWorkers));
  for (size_t i = 0; i + 1 < t->levels.size(); ++i)
    if (t->levels[i].bandwidth > t->levels[i + 1].bandwidth)
      return stringError(fmt::format(
          "topology level {} ({}) is faster than level {} inside it ({}): give the levels "
          "outermost (slowest) first",
          i + 1, rate(t->levels[i].bandwidth), i + 2, rate(t->levels[i + 1].bandwidth)));
  return t;
}

std::string describeTopology(const Topology &t) {
  std::string counts, links;
  for (size_t i = 0; i < t.levels.size(); ++i) {
    const TopologyLevel &l = t.levels[i];
    counts += fmt::format("{}{} {}{}", i ? " x " : "", l.count, l.name, l.count == 1 ? "" : "s");
    links += fmt::format("{}{} {}{}", i ? ", " : "", l.name, rate(l.bandwidth),
                         l.latency > 0 ? " @ " + duration(l.latency) : "");
  }
  if (t.hostBandwidth > 0)
    links += fmt::format(", host {}{}", rate(t.hostBandwidth),
                         t.hostLatency > 0 ? " @ " + duration(t.hostLatency) : "");
  return counts + " (" + links + ")";
}

unsigned levelBetween(const Topology &t, unsigned a, unsigned b) {
  unsigned inner = t.workers();
  for (unsigned i = 0; i < t.levels.size(); ++i) {
    inner /= t.levels[i].count;
    if (a / inner != b / inner)
      return i;
    a %= inner;
    b %= inner;
  }
  return static_cast<unsigned>(t.levels.size());
}

} // namespace tofu
