// libFuzzer target over what users type as option values. The first byte chooses the
// reader; the rest is the text:
//   0: a topology (--topology: COUNTS:BANDWIDTHS or JSON; never a file name here)
//   1: a byte count (--memory, --fit)
//   2: a zoo model's name (--model); small models are built too
//   3: a learning-rate schedule (--lr-schedule)
//   4: an integer with a range (every numeric option)
// Errors are fine; a crash, a sanitizer report or an uncaught exception is a finding.
#include <cstdint>
#include <string>

#include "analysis/checked.h"
#include "graph/zoo.h"
#include "planner/topology_spec.h"
#include "runtime/lr_schedule.h"
#include "support/units.h"

namespace {

template <typename T> void consume(llvm::Expected<T> v) {
  if (!v)
    llvm::consumeError(v.takeError());
}

/// Whether building the model is cheap enough for a fuzz iteration.
bool small(const tofu::ModelName &m) {
  switch (m.family) {
  case tofu::ModelName::Mlp:
    return true;
  case tofu::ModelName::WResNet:
    return m.numbers[2] <= 32 && m.numbers[3] <= 16 && m.numbers[1] <= 2;
  case tofu::ModelName::Rnn:
    return m.numbers[0] <= 4 && m.numbers[1] <= 64;
  case tofu::ModelName::Gpt:
    return m.numbers[0] <= 2 && m.numbers[1] <= 64 && m.numbers[3] <= 32;
  }
  return false;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  switch (data[0] % 5) {
  case 0:
    // A name of an existing file would be read; only texts that are not file names.
    if (text.find(':') != std::string::npos || text.find('{') != std::string::npos) {
      auto t = tofu::parseTopology(text);
      if (t)
        (void)tofu::describeTopology(*t);
      else
        llvm::consumeError(t.takeError());
    }
    break;
  case 1: {
    auto b = tofu::parseBytes(text);
    if (b)
      (void)tofu::humanBytes(static_cast<double>(*b));
    else
      llvm::consumeError(b.takeError());
    break;
  }
  case 2: {
    auto m = tofu::parseModelName(text);
    if (!m) {
      llvm::consumeError(m.takeError());
      break;
    }
    if (small(*m))
      consume(tofu::buildModel(*m, 2));
    break;
  }
  case 3:
    consume(tofu::parseLrSchedule(text));
    break;
  case 4:
    consume(tofu::parseInteger(text, -1000, 1000000, "a number"));
    break;
  }
  return 0;
}
