// Tofu's version (include/tofu/tofu.h's TOFU_VERSION_*), as every tool's --version and the
// Python module give it.
#ifndef TOFU_SUPPORT_VERSION_H
#define TOFU_SUPPORT_VERSION_H

#include <string>

namespace tofu {

/// "MAJOR.MINOR.PATCH".
std::string tofuVersion();

/// Makes the tool's --version print "TOOL (Tofu) VERSION" and `what` (a line on what the
/// tool is), where LLVM's parser would print LLVM's own version.
void setToolVersion(const char *tool, const char *what);

} // namespace tofu

#endif // TOFU_SUPPORT_VERSION_H
