// Diagnostic collection and compiler-style printing.
#include "grammar/diagnostics.h"

#include "fmt/format.h"

namespace tofu {

static const char *severityName(Severity s) {
  switch (s) {
  case Severity::Error:
    return "error";
  case Severity::Warning:
    return "warning";
  case Severity::Note:
    return "note";
  }
  return "error";
}

std::string Diagnostic::str() const {
  if (!loc.isValid())
    return fmt::format("{}: {}: {}", file, severityName(severity), message);
  return fmt::format("{}:{}:{}: {}: {}", file, loc.line, loc.col, severityName(severity), message);
}

llvm::Error stringError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", message.c_str());
}

void SourceManager::addFile(const std::string &path, std::string text) {
  files_[path] = std::move(text);
}

const std::string *SourceManager::text(const std::string &path) const {
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : &it->second;
}

llvm::StringRef SourceManager::line(const std::string &path, uint32_t line) const {
  const std::string *t = text(path);
  if (!t || line == 0)
    return {};
  llvm::StringRef rest(*t);
  for (uint32_t i = 1; i < line; ++i) {
    size_t nl = rest.find('\n');
    if (nl == llvm::StringRef::npos)
      return {};
    rest = rest.drop_front(nl + 1);
  }
  return rest.take_until([](char c) { return c == '\n' || c == '\r'; });
}

void DiagnosticEngine::error(const std::string &file, SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Error, file, loc, std::move(message)});
  ++errors_;
}

void DiagnosticEngine::warning(const std::string &file, SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Warning, file, loc, std::move(message)});
}

void DiagnosticEngine::note(const std::string &file, SourceLoc loc, std::string message) {
  diags_.push_back({Severity::Note, file, loc, std::move(message)});
}

void DiagnosticEngine::print(llvm::raw_ostream &os, const Diagnostic &d) const {
  os << d.str() << "\n";
  if (!d.loc.isValid())
    return;
  llvm::StringRef src = sources_.line(d.file, d.loc.line);
  if (src.empty())
    return;
  os << src << "\n";
  // Columns count code points; keep tabs so the caret lines up under them.
  std::string caret;
  uint32_t col = 1;
  for (size_t i = 0; i < src.size() && col < d.loc.col; ++i) {
    unsigned char c = static_cast<unsigned char>(src[i]);
    if ((c & 0xC0) == 0x80)
      continue; // UTF-8 continuation byte: same code point
    caret += c == '\t' ? '\t' : ' ';
    ++col;
  }
  os << caret << "^\n";
}

void DiagnosticEngine::print(llvm::raw_ostream &os) const {
  for (const Diagnostic &d : diags_)
    print(os, d);
}

llvm::Error DiagnosticEngine::makeError(const std::string &what) const {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%u error%s in %s", errors_,
                                 errors_ == 1 ? "" : "s", what.c_str());
}

} // namespace tofu
