#include <string>

#include "support/files.h"
#include "support/units.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

int64_t bytes(const std::string &text) {
  auto b = parseBytes(text);
  if (!b) {
    ADD_FAILURE() << text << ": " << llvm::toString(b.takeError());
    return -1;
  }
  return *b;
}

std::string refusal(const std::string &text) {
  auto b = parseBytes(text);
  if (b) {
    ADD_FAILURE() << text << " was accepted as " << *b;
    return "";
  }
  return llvm::toString(b.takeError());
}

TEST(Units, ParsesByteCounts) {
  EXPECT_EQ(bytes("80GB"), 80'000'000'000);
  EXPECT_EQ(bytes("16GiB"), int64_t(16) << 30);
  EXPECT_EQ(bytes("12e9"), 12'000'000'000);
  EXPECT_EQ(bytes("512 mib"), int64_t(512) << 20);
  EXPECT_EQ(bytes("1.5KB"), 1500);
  EXPECT_EQ(bytes("1e+3"), 1000);
}

TEST(Units, RefusesWhatIsNotAByteCount) {
  EXPECT_NE(refusal("").find("not a number of bytes"), std::string::npos);
  EXPECT_NE(refusal("GB").find("not a number of bytes"), std::string::npos);
  EXPECT_NE(refusal("nan").find("not a number of bytes"), std::string::npos);
  EXPECT_NE(refusal("inf").find("not a number of bytes"), std::string::npos);
  EXPECT_NE(refusal("0x10").find("unknown unit 'x10'"), std::string::npos);
  EXPECT_NE(refusal("1.2.3GB").find("unknown unit '.3GB'"), std::string::npos);
  EXPECT_NE(refusal("5PB").find("unknown unit 'PB'"), std::string::npos);
  EXPECT_NE(refusal("0").find("not a positive number of bytes"), std::string::npos);
  EXPECT_NE(refusal("-1GB").find("not a number of bytes"), std::string::npos);
  EXPECT_NE(refusal("1e300").find("not a positive number of bytes"), std::string::npos);
}

TEST(Units, ReadsQuantities) {
  auto q = readQuantity(" 12.5 GB/s ");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->value, 12.5);
  EXPECT_EQ(q->unit, "GB/s");
  q = readQuantity("3e-6s");
  ASSERT_TRUE(q.has_value());
  EXPECT_DOUBLE_EQ(q->value, 3e-6);
  EXPECT_EQ(q->unit, "s");
  q = readQuantity("2e"); // the e is the unit's
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->value, 2);
  EXPECT_EQ(q->unit, "e");
  for (const char *bad : {"", " ", ".", "inf", "nan", "-1", "+1", "GB"})
    EXPECT_FALSE(readQuantity(bad).has_value()) << bad;
}

TEST(Units, PrintsBinaryUnits) {
  EXPECT_EQ(humanBytes(512), "512.00 B");
  EXPECT_EQ(humanBytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
}

TEST(Files, MakesNestedDirectories) {
  const std::string base = ::testing::TempDir() + "/support_test_dirs";
  EXPECT_TRUE(makeDirs(base + "/a/b/c"));
  EXPECT_TRUE(makeDirs(base + "/a/b/c")); // again: it exists
  EXPECT_FALSE(makeDirs("/proc/no/such/place"));
}

} // namespace
} // namespace tofu
