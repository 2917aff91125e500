// Learning-rate schedules (see lr_schedule.h).
#include "runtime/lr_schedule.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "fmt/format.h"

namespace tofu {
namespace {

llvm::Error scheduleError(const std::string &text, const std::string &why,
                          const SettingNames &names) {
  return llvm::createStringError(
      std::errc::invalid_argument,
      "%s '%s': %s (expected constant, step:EVERY[:GAMMA] or cosine[:HORIZON])",
      names("lr-schedule").c_str(), text.c_str(), why.c_str());
}

/// A whole decimal number in [1, 2^31), or nothing.
bool parseCount(const std::string &s, unsigned &out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (v < 1 || v >= (1ull << 31))
    return false;
  out = static_cast<unsigned>(v);
  return true;
}

} // namespace

double LrSchedule::at(double lr, unsigned step) const {
  if (step < warmup)
    return lr * double(step + 1) / double(warmup + 1);
  const unsigned u = step - warmup;
  switch (kind) {
  case Kind::Constant:
    return lr;
  case Kind::Step:
    return lr * std::pow(gamma, double(u / every));
  case Kind::Cosine: {
    const unsigned span = horizon > warmup ? horizon - warmup : 1;
    if (u >= span)
      return 0.0;
    return lr * (1.0 + std::cos(M_PI * double(u) / double(span))) / 2.0;
  }
  }
  return lr;
}

std::string LrSchedule::str() const {
  switch (kind) {
  case Kind::Constant:
    return "constant";
  case Kind::Step:
    return fmt::format("step:{}:{}", every, gamma);
  case Kind::Cosine:
    return horizon > 0 ? fmt::format("cosine:{}", horizon) : "cosine";
  }
  return "constant";
}

llvm::Expected<LrSchedule> parseLrSchedule(const std::string &text, const SettingNames &names) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (;;) {
    const size_t colon = text.find(':', from);
    parts.push_back(text.substr(from, colon - from));
    if (colon == std::string::npos)
      break;
    from = colon + 1;
  }
  LrSchedule s;
  if (parts[0] == "constant") {
    if (parts.size() != 1)
      return scheduleError(text, "constant takes no parameters", names);
    return s;
  }
  if (parts[0] == "step") {
    s.kind = LrSchedule::Kind::Step;
    if (parts.size() < 2 || parts.size() > 3)
      return scheduleError(text, "step takes EVERY and an optional GAMMA", names);
    if (!parseCount(parts[1], s.every))
      return scheduleError(
          text, fmt::format("EVERY '{}' is not a whole number of steps >= 1", parts[1]), names);
    if (parts.size() == 3) {
      const std::string &g = parts[2];
      char *end = nullptr;
      errno = 0;
      s.gamma = g.empty() ? -1 : std::strtod(g.c_str(), &end);
      if (g.empty() || *end != '\0' || errno != 0 || !(s.gamma > 0 && s.gamma <= 1))
        return scheduleError(text, fmt::format("GAMMA '{}' is not a number in (0, 1]", g), names);
    }
    return s;
  }
  if (parts[0] == "cosine") {
    s.kind = LrSchedule::Kind::Cosine;
    if (parts.size() > 2)
      return scheduleError(text, "cosine takes an optional HORIZON", names);
    if (parts.size() == 2 && !parseCount(parts[1], s.horizon))
      return scheduleError(
          text, fmt::format("HORIZON '{}' is not a whole number of steps >= 1", parts[1]), names);
    return s;
  }
  return scheduleError(text, fmt::format("unknown schedule '{}'", parts[0]), names);
}

double adamBiasCorrection(double beta, unsigned step) {
  return 1.0 - std::pow(beta, double(step) + 1.0);
}

} // namespace tofu
