#include "support/version.h"

#include "tofu/tofu.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

std::string tofuVersion() {
  return std::to_string(TOFU_VERSION_MAJOR) + "." + std::to_string(TOFU_VERSION_MINOR) + "." +
         std::to_string(TOFU_VERSION_PATCH);
}

namespace {
const char *toolName = "";
const char *toolWhat = "";
void printVersion(llvm::raw_ostream &os) {
  os << toolName << " (Tofu) " << tofuVersion() << "\n" << toolWhat << "\n";
}
} // namespace

void setToolVersion(const char *tool, const char *what) {
  toolName = tool;
  toolWhat = what;
  llvm::cl::SetVersionPrinter(printVersion);
}

} // namespace tofu
