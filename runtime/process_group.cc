// The process group of a run in one process (process_group.h), and the text gathering every
// group shares.
#include "runtime/process_group.h"

namespace tofu {

std::vector<std::string> ProcessGroup::allGatherText(const std::string &text) {
  std::vector<std::string> parts = gatherOnFirst(text);
  // Handed on as one text: each part's length, a space, the part.
  std::string joined;
  for (const std::string &p : parts)
    joined += std::to_string(p.size()) + " " + p;
  joined = fromFirst(joined);
  parts.clear();
  for (size_t at = 0; at < joined.size();) {
    const size_t space = joined.find(' ', at);
    const size_t n = std::stoull(joined.substr(at, space - at));
    parts.push_back(joined.substr(space + 1, n));
    at = space + 1 + n;
  }
  return parts;
}

namespace {

class Local final : public ProcessGroup {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool distributed() const override { return false; }
  int64_t sum(int64_t x) override { return x; }
  std::vector<int64_t> allGather(int64_t x) override { return {x}; }
  std::vector<double> allGather(const std::vector<double> &x) override { return x; }
  void maxInPlace(std::vector<double> &) override {}
  std::vector<std::string> gatherOnFirst(const std::string &text) override { return {text}; }
  std::string fromFirst(std::string text) override { return text; }
  uint64_t fromFirst(uint64_t x) override { return x; }
  bool sameOnEvery(uint64_t) override { return true; }
  void barrier() override {}
  void abort(int) override {}
};

} // namespace

ProcessGroup &localProcessGroup() {
  static Local local;
  return local;
}

} // namespace tofu
