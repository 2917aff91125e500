// Files and directories (files.h).
#include "support/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "fmt/format.h"

namespace tofu {

namespace {

llvm::Error systemError(const char *doing, const std::string &path) {
  return llvm::createStringError(
      std::error_code(errno, std::generic_category()), "%s",
      fmt::format("{} '{}': {}", doing, path, std::strerror(errno)).c_str());
}

llvm::Error failure(std::errc code, const std::string &message) {
  return llvm::createStringError(std::make_error_code(code), "%s", message.c_str());
}

/// The folder `path` is in ("." for a bare name).
std::string folderOf(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
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
  const bool known = ::fstat(fd, &st) == 0;
  if (known && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return failure(std::errc::is_a_directory,
                   fmt::format("'{}' is a directory, not {}", path, what));
  }
  std::string bytes;
  if (known && S_ISREG(st.st_mode) && st.st_size > 0)
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

namespace {

/// What a file that is not a regular one is, for messages.
const char *kindOf(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

/// The file a write of `path` replaces (a link's target), once checked: missing or a
/// regular file, in a folder that exists.
llvm::Expected<std::string> writableTarget(const std::string &path, const std::string &what) {
  if (path.empty())
    return failure(std::errc::invalid_argument,
                   fmt::format("an empty path is no place for {}", what));
  std::string target = path;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char real[PATH_MAX];
    if (!::realpath(path.c_str(), real))
      return failure(std::errc::no_such_file_or_directory,
                     fmt::format("cannot write {} to '{}': it is a link to nothing ({})", what,
                                 path, std::strerror(errno)));
    target = real;
  }
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return failure(std::errc::invalid_argument,
                   fmt::format("'{}' is {}: Tofu writes {} only to a regular file (written beside "
                               "it, then renamed into place), so it will not replace it",
                               path, kindOf(st.st_mode), what));
  const std::string dir = folderOf(target);
  if (::stat(dir.c_str(), &st) != 0)
    return failure(
        std::errc::no_such_file_or_directory,
        fmt::format("cannot write {} to '{}': its folder '{}' does not exist", what, path, dir));
  if (!S_ISDIR(st.st_mode))
    return failure(std::errc::not_a_directory,
                   fmt::format("cannot write {} to '{}': '{}' is not a folder", what, path, dir));
  return target;
}

} // namespace

llvm::Error checkWritable(const std::string &path, const std::string &what) {
  if (path == "-")
    return llvm::Error::success();
  auto target = writableTarget(path, what);
  if (!target)
    return target.takeError();
  const std::string dir = folderOf(*target);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return failure(std::errc::permission_denied,
                   fmt::format("cannot write {} to '{}': its folder '{}' is not writable ({})",
                               what, path, dir, std::strerror(errno)));
  return llvm::Error::success();
}

llvm::Expected<AtomicFile> AtomicFile::create(const std::string &path, const std::string &what) {
  AtomicFile f;
  f.what_ = what;
  if (path == "-") {
    f.path_ = "-";
    f.fd_ = STDOUT_FILENO;
    f.toStdout_ = true;
    return std::move(f);
  }
  auto target = writableTarget(path, what);
  if (!target)
    return target.takeError();
  f.path_ = *target;
  f.tmp_ = f.path_ + ".partial";
  struct stat st;
  // A leftover temporary is replaced; anything else in its place is refused (opening a
  // FIFO to write would wait for a reader).
  if (::lstat(f.tmp_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return failure(std::errc::invalid_argument,
                   fmt::format("cannot write {} to '{}': its temporary '{}' is {}", what, path,
                               f.tmp_, kindOf(st.st_mode)));
  f.fd_ = ::open(f.tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (f.fd_ < 0)
    return failure(std::errc::io_error,
                   fmt::format("cannot write {} to '{}': {}", what, path, std::strerror(errno)));
  // The new file keeps the old one's permissions.
  if (::stat(f.path_.c_str(), &st) == 0)
    (void)::fchmod(f.fd_, st.st_mode & 07777);
  return std::move(f);
}

AtomicFile::AtomicFile(AtomicFile &&o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), what_(std::move(o.what_)), fd_(o.fd_),
      toStdout_(o.toStdout_), error_(o.error_), buffer_(std::move(o.buffer_)) {
  o.fd_ = -1;
  o.toStdout_ = false;
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() {
  if (fd_ < 0 || toStdout_)
    return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

namespace {

/// Writes all of `n` bytes to `fd`; errno of the failure, else 0.
int writeAll(int fd, const char *p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

constexpr size_t kBuffer = size_t(1) << 20;

} // namespace

void AtomicFile::flushBuffer() {
  if (!error_ && !buffer_.empty())
    error_ = writeAll(fd_, buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write(const void *data, size_t n) {
  if (error_ || fd_ < 0)
    return;
  if (buffer_.size() + n <= kBuffer) {
    buffer_.append(static_cast<const char *>(data), n);
    return;
  }
  flushBuffer();
  if (!error_)
    error_ = writeAll(fd_, static_cast<const char *>(data), n);
}

llvm::Error AtomicFile::commit() {
  if (fd_ < 0)
    return failure(std::errc::bad_file_descriptor,
                   fmt::format("{} to '{}' was written already", what_, path_));
  flushBuffer();
  auto fail = [&](int code) {
    abandon();
    return failure(std::errc::io_error,
                   fmt::format("cannot write {} to {}: {}{}", what_,
                               toStdout_ ? "the standard output" : "'" + path_ + "'",
                               std::strerror(code),
                               toStdout_ ? "" : " (the file there, if any, is as it was)"));
  };
  if (error_)
    return fail(error_);
  if (toStdout_) {
    fd_ = -1;
    return llvm::Error::success();
  }
  if (::fsync(fd_) != 0 && errno != EINVAL)
    return fail(errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int code = errno;
    ::unlink(tmp_.c_str());
    return fail(code);
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int code = errno;
    ::unlink(tmp_.c_str());
    return failure(std::errc::io_error,
                   fmt::format("cannot write {} to '{}': renaming its temporary '{}' failed: {}",
                               what_, path_, tmp_, std::strerror(code)));
  }
  // The rename itself durable: the folder synced (where the system allows it).
  const int dfd = ::open(folderOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return llvm::Error::success();
}

llvm::Error writeFileAtomically(const std::string &path, std::string_view bytes,
                                const std::string &what) {
  auto f = AtomicFile::create(path, what);
  if (!f)
    return f.takeError();
  f->write(bytes);
  return f->commit();
}

} // namespace tofu
