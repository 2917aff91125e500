// Compiler-style diagnostics: 'file:line:col: error: message', the source line, a caret.
#ifndef TOFU_GRAMMAR_DIAGNOSTICS_H
#define TOFU_GRAMMAR_DIAGNOSTICS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace tofu {

/// A position in a source file: 1-based line and column (columns count code points).
/// Line 0 means "no position" (e.g. a file that could not be opened).
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;

  bool isValid() const { return line != 0; }
  bool operator==(const SourceLoc &o) const { return line == o.line && col == o.col; }
  bool operator<(const SourceLoc &o) const { return line != o.line ? line < o.line : col < o.col; }
};

enum class Severity { Error, Warning, Note };

/// One reported problem, with the file it is in.
struct Diagnostic {
  Severity severity;
  std::string file;
  SourceLoc loc;
  std::string message;

  /// 'file:line:col: error: message' (no source excerpt).
  std::string str() const;
};

/// An llvm::Error carrying `message` (a one-line description, lowercase, no period).
llvm::Error stringError(const std::string &message);

/// Keeps the text of every file read so diagnostics can quote their source line.
class SourceManager {
public:
  /// Registers `text` as the contents of `path` (replacing an earlier text).
  void addFile(const std::string &path, std::string text);
  /// The text of `path`, or null if it was never added.
  const std::string *text(const std::string &path) const;
  /// Line `line` (1-based) of `path` without its newline; empty if unknown.
  llvm::StringRef line(const std::string &path, uint32_t line) const;

private:
  std::map<std::string, std::string> files_;
};

/// Collects diagnostics from every stage; a library reports here and returns an error
/// that says how many errors were found, a `main` prints them.
class DiagnosticEngine {
public:
  explicit DiagnosticEngine(SourceManager &sources) : sources_(sources) {}

  void error(const std::string &file, SourceLoc loc, std::string message);
  void warning(const std::string &file, SourceLoc loc, std::string message);
  void note(const std::string &file, SourceLoc loc, std::string message);

  unsigned errorCount() const { return errors_; }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  SourceManager &sources() { return sources_; }

  /// Prints every diagnostic with its source line and a caret under the column.
  void print(llvm::raw_ostream &os) const;
  /// Prints one diagnostic with its source line and caret.
  void print(llvm::raw_ostream &os, const Diagnostic &d) const;

  /// An llvm::Error summarising the errors reported so far ("2 errors in f.tdl").
  llvm::Error makeError(const std::string &what) const;

private:
  SourceManager &sources_;
  std::vector<Diagnostic> diags_;
  unsigned errors_ = 0;
};

} // namespace tofu

#endif // TOFU_GRAMMAR_DIAGNOSTICS_H
