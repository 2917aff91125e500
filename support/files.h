// Files and directories: what a tool reads whole (a model, an index, a device model) and
// the folders it writes into.
#ifndef TOFU_SUPPORT_FILES_H
#define TOFU_SUPPORT_FILES_H

#include <string>

#include "llvm/Support/Error.h"

namespace tofu {

/// Creates `path` and every missing directory above it (mkdir -p). False, with errno set,
/// when one cannot be created.
bool makeDirs(const std::string &path);

/// Whether anything (a file, a directory, a device) is at `path`, following links.
bool pathExists(const std::string &path);

/// Whether `path` is a directory, following links.
bool isDirectory(const std::string &path);

/// The whole of the file at `path`. `what` names what the file should be ("an ONNX model")
/// in the error for a directory; the others say the system's reason: "cannot open 'P': No
/// such file or directory", "cannot read 'P': Input/output error".
llvm::Expected<std::string> readFile(const std::string &path, const std::string &what = "a file");

} // namespace tofu

#endif // TOFU_SUPPORT_FILES_H
