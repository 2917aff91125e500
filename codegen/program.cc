// Building the per-worker programs from an execution plan and its memory plan.
#include "codegen/program.h"

#include <algorithm>
#include <map>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "grammar/diagnostics.h"

namespace tofu {
namespace {

std::string boxText(const Box &b) {
  std::vector<std::string> parts;
  for (const Range &r : b)
    parts.push_back(fmt::format("{}:{}", r.lo, r.hi));
  return "[" + fmt::format("{}", fmt::join(parts, ",")) + "]";
}

/// " (bf16 -> f32)" for a copy between buffers of other types than float32, else "".
std::string typesText(loops::Element from, loops::Element to) {
  if (from == loops::Element::F32 && to == loops::Element::F32)
    return "";
  return fmt::format(" ({} -> {})", loops::elementName(from), loops::elementName(to));
}

} // namespace

bool Program::hasBfloat16() const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [](const ProgramTensor &t) { return t.element == loops::Element::BF16; });
}

std::string programDump(const Program &program) {
  std::string s;
  auto copyText = [&](const RegionCopy &c) {
    return fmt::format("{} from worker {} @{} {} -> @{} {}{}", boxText(c.box), c.from, c.srcOffset,
                       boxText(c.srcBox), c.dstOffset, boxText(c.dstBox),
                       c.combine ? " (combine)" : "") +
           typesText(c.srcElement, c.dstElement);
  };
  for (unsigned w = 0; w < program.workers; ++w) {
    const WorkerProgram &wp = program.worker[w];
    s += fmt::format("worker {}: arena {} bytes\n", w, wp.arenaBytes);
    for (const ProgramStep &st : wp.steps) {
      const ProgramNode &n = program.nodes[st.node];
      s += fmt::format("  {} ({})\n", n.name, n.op);
      for (const RegionCopy &c : st.fetch)
        s += "    fetch " + copyText(c) + "\n";
      if (st.launches) {
        std::vector<std::string> ins;
        for (size_t q = 0; q < st.launch.inputOffsets.size(); ++q)
          ins.push_back(
              fmt::format("@{} {}", st.launch.inputOffsets[q], boxText(st.launch.inputBoxes[q])));
        const Launch &l = st.launch;
        // The buffers' types where some is not float32: "(bf16,f32 -> bf16)".
        std::string types;
        if (l.outputElement != loops::Element::F32 ||
            std::count(l.inputElements.begin(), l.inputElements.end(), loops::Element::BF16)) {
          std::vector<std::string> names;
          for (loops::Element e : l.inputElements)
            names.push_back(loops::elementName(e));
          types = fmt::format(" ({} -> {})", fmt::join(names, ","),
                              loops::elementName(l.outputElement));
        }
        s += fmt::format("    launch kernel {} ({}) -> @{} {}{}\n", l.kernel, fmt::join(ins, ", "),
                         l.outputOffset, boxText(l.produced), types);
      }
      if (st.syncAfterLaunch)
        s += "    sync\n";
      if (st.initIdentity)
        s += fmt::format("    fill @{} ({} elements{}) with the identity\n", st.tileOffset,
                         st.tileElements, st.tileElement == loops::Element::F32 ? "" : ", bf16");
      for (const RegionCopy &c : st.assemble)
        s += "    assemble " + copyText(c) + "\n";
      if (st.syncAfterAssembly)
        s += "    sync\n";
    }
    for (const RegionCopy &c : wp.carries)
      s += "  carry " + copyText(c) + "\n";
  }
  return s;
}

} // namespace tofu
