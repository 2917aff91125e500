// Files and directories.
#ifndef TOFU_SUPPORT_FILES_H
#define TOFU_SUPPORT_FILES_H

#include <string>

namespace tofu {

/// Creates `path` and every missing directory above it (mkdir -p). False, with errno set,
/// when one cannot be created.
bool makeDirs(const std::string &path);

} // namespace tofu

#endif // TOFU_SUPPORT_FILES_H
