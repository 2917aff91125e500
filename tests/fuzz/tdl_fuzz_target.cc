// libFuzzer target over the whole frontend: parse + check any bytes; when they check,
// print the IR, check that text again and demand an equal IR (so printer bugs crash too).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "analysis/printer.h"
#include "analysis/sema.h"
#include "llvm/Support/raw_ostream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  tofu::SourceManager sources;
  tofu::DiagnosticEngine diags(sources);
  // Imports resolve relative to the working directory; run the fuzzer in an empty one.
  auto module = tofu::loadModuleFromText("fuzz.tdl", text, diags);
  std::string sink;
  llvm::raw_string_ostream os(sink);
  diags.print(os); // exercises the caret printer on every location reported
  if (!module) {
    llvm::consumeError(module.takeError());
    return 0;
  }
  std::string printed;
  llvm::raw_string_ostream ps(printed);
  tofu::printFile(ps, *module, module->rootFile);
  tofu::SourceManager sources2;
  tofu::DiagnosticEngine diags2(sources2);
  auto again = tofu::loadModuleFromText("fuzz.tdl", ps.str(), diags2);
  if (!again) {
    std::fprintf(stderr, "printed IR does not check again:\n%s\n", printed.c_str());
    diags2.print(llvm::errs());
    std::abort();
  }
  auto before = module->opsInFile(module->rootFile);
  auto after = again->opsInFile(again->rootFile);
  if (before.size() != after.size())
    std::abort();
  for (size_t i = 0; i < before.size(); ++i)
    if (!tofu::ir::equal(*before[i], *after[i])) {
      std::fprintf(stderr, "op '%s' changed in the print/check round trip:\n%s\n",
                   before[i]->name.c_str(), printed.c_str());
      std::abort();
    }
  return 0;
}
