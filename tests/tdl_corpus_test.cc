// Golden diagnostics: every file in tests/tdl/bad states its exact diagnostics in
// '# expect: LINE:COL: severity: message' lines; every file in tests/tdl/good checks clean.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "analysis/sema.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

std::vector<std::string> tdlFilesIn(const std::string &dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".tdl")
      out.push_back(std::string(llvm::sys::path::filename(it->path())));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> expectations(const std::string &file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  std::string line;
  const std::string tag = "# expect: ";
  while (std::getline(in, line))
    if (line.rfind(tag, 0) == 0) {
      std::string e = line.substr(tag.size());
      // Lines without a file name are about the file itself.
      out.push_back(std::isdigit(static_cast<unsigned char>(e[0])) ? file + ":" + e : e);
    }
  std::sort(out.begin(), out.end());
  return out;
}

class CorpusTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_EQ(::getcwd(cwd_, sizeof(cwd_)), cwd_); }
  void TearDown() override { ASSERT_EQ(::chdir(cwd_), 0); }
  char cwd_[4096];
};

TEST_F(CorpusTest, BadFilesGiveExactlyTheirExpectedDiagnostics) {
  ASSERT_EQ(::chdir("tests/tdl/bad"), 0);
  std::vector<std::string> files = tdlFilesIn(".");
  ASSERT_GE(files.size(), 40u) << "the corpus should hold at least 40 invalid files";
  for (const std::string &file : files) {
    SCOPED_TRACE(file);
    std::vector<std::string> want = expectations(file);
    ASSERT_FALSE(want.empty()) << file << " has no '# expect:' line";
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(file, diags);
    bool wantError = std::any_of(want.begin(), want.end(), [](const std::string &s) {
      return s.find(": error: ") != std::string::npos;
    });
    EXPECT_EQ(static_cast<bool>(module), !wantError);
    if (!module)
      llvm::consumeError(module.takeError());
    std::vector<std::string> got;
    for (const Diagnostic &d : diags.diagnostics())
      got.push_back(d.str());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
  }
}

TEST_F(CorpusTest, GoodFilesCheckWithoutAnyDiagnostic) {
  ASSERT_EQ(::chdir("tests/tdl/good"), 0);
  std::vector<std::string> files = tdlFilesIn(".");
  ASSERT_GE(files.size(), 4u);
  for (const std::string &file : files) {
    SCOPED_TRACE(file);
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(file, diags);
    std::string printed;
    for (const Diagnostic &d : diags.diagnostics())
      printed += d.str() + "\n";
    EXPECT_TRUE(static_cast<bool>(module)) << printed;
    if (!module)
      llvm::consumeError(module.takeError());
    EXPECT_TRUE(diags.diagnostics().empty()) << printed;
  }
}

} // namespace
} // namespace tofu
