// Files and directories: what a tool reads whole (a model, an index, a device model) and
// the folders it writes into.
#ifndef TOFU_SUPPORT_FILES_H
#define TOFU_SUPPORT_FILES_H

#include <string>
#include <string_view>

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

/// A file written whole or not at all, as every writer of Tofu writes: the bytes go to a
/// temporary beside the target (PATH.partial), and commit() checks every write, fsyncs and
/// closes it, then renames it over the target. Until then, and after any failure, the old
/// file is as it was and the temporary is removed. A target that exists and is not a
/// regular file (a device, a FIFO, a directory) is refused before anything is written; a
/// link is written through, to the file it names. "-" is the standard output, written as
/// the bytes come (and checked as well).
class AtomicFile {
public:
  /// Starts writing `path`; `what` names it in errors ("a checkpoint").
  static llvm::Expected<AtomicFile> create(const std::string &path,
                                           const std::string &what = "a file");
  AtomicFile(AtomicFile &&other) noexcept;
  AtomicFile &operator=(AtomicFile &&) = delete;
  AtomicFile(const AtomicFile &) = delete;
  ~AtomicFile();

  /// Appends `n` bytes. A failure is kept for commit() to report; later writes do nothing.
  void write(const void *data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  /// Makes the file the target's contents, or says why not ("cannot write 'P': No space
  /// left on device") with the old file kept.
  llvm::Error commit();

  /// The file written (a link's target), and the temporary.
  const std::string &path() const { return path_; }
  const std::string &temporary() const { return tmp_; }

private:
  AtomicFile() = default;
  void flushBuffer();
  void abandon();

  std::string path_, tmp_, what_;
  int fd_ = -1;
  bool toStdout_ = false;
  int error_ = 0; ///< errno of the first failed write, 0 when none
  std::string buffer_;
};

/// `bytes` written to `path` as AtomicFile writes.
llvm::Error writeFileAtomically(const std::string &path, std::string_view bytes,
                                const std::string &what = "a file");

/// What AtomicFile::create would refuse, asked before long work (a training run, a
/// measurement) so that it fails first: a target that is not a regular file, a folder
/// that does not exist, is not one, or cannot be written. "-" is always writable.
llvm::Error checkWritable(const std::string &path, const std::string &what = "a file");

} // namespace tofu

#endif // TOFU_SUPPORT_FILES_H
