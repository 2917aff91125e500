// Files and directories (files.h).
#include "support/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fmt/format.h"

namespace tofu {

namespace {

llvm::Error systemError(const char *doing, const std::string &path) {
  return llvm::createStringError(
      std::error_code(errno, std::generic_category()), "%s",
      fmt::format("{} '{}': {}", doing, path, std::strerror(errno)).c_str());
}

} // namespace

bool makeDirs(const std::string &path) {
  for (size_t at = 1; at <= path.size(); ++at)
    if (at == path.size() || path[at] == '/') {
      std::string prefix = path.substr(0, at);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        return false;
    }
  return true;
}

bool pathExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

llvm::Expected<std::string> readFile(const std::string &path, const std::string &what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return systemError("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return llvm::createStringError(std::make_error_code(std::errc::is_a_directory), "%s",
                                   fmt::format("'{}' is a directory, not {}", path, what).c_str());
  }
  std::string bytes;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    bytes.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      llvm::Error e = systemError("cannot read", path);
      ::close(fd);
      return std::move(e);
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

} // namespace tofu
