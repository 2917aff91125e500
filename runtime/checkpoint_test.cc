// safetensors checkpoints: a round trip keeps names, shapes, values (to float32) and
// metadata; other writers' F16/BF16/F64 tensors load; broken files get errors that say what
// is wrong, never a crash.
#include "runtime/checkpoint.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "gtest/gtest.h"

namespace tofu {
namespace {

std::string tmpDir(const std::string &name) {
  const char *t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

void writeRaw(const std::string &dir, const std::string &header, const std::string &data) {
  std::string cmd = "mkdir -p '" + dir + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ofstream out(checkpointFile(dir), std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

std::string loadError(const std::string &dir) {
  auto c = loadCheckpoint(dir);
  if (c)
    return "";
  return llvm::toString(c.takeError());
}

TEST(Checkpoint, RoundTrip) {
  Checkpoint c;
  Tensor w({2, 3});
  for (int64_t i = 0; i < 6; ++i)
    w.data[i] = 0.25 * static_cast<double>(i) - 1;
  c.tensors.emplace("fc.weight", w);
  c.tensors.emplace("scalar", Tensor(std::vector<int64_t>{}, 3.5));
  c.metadata = {{"steps", "10"}, {"model", "mlp"}};
  const std::string dir = tmpDir("ckpt/nested");
  llvm::Error e = saveCheckpoint(dir, c);
  ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  auto back = loadCheckpoint(dir);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->metadata, c.metadata);
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors.at("fc.weight").shape, w.shape);
  EXPECT_EQ(back->tensors.at("fc.weight").data, w.data);
  EXPECT_EQ(back->tensors.at("scalar").data.at(0), 3.5);
  // Saving again replaces the file whole.
  c.tensors.erase("scalar");
  e = saveCheckpoint(dir, c);
  ASSERT_FALSE(bool(e));
  EXPECT_EQ(loadCheckpoint(dir)->tensors.size(), 1u);
}

TEST(Checkpoint, OtherDtypes) {
  // 1.0 and -2.0 as F16 (0x3c00, 0xc000), BF16 (0x3f80, 0xc000) and F64.
  std::string f16("\x00\x3c\x00\xc0", 4), bf16("\x80\x3f\x00\xc0", 4), f64(16, '\0');
  double v[2] = {1.0, -2.0};
  std::memcpy(&f64[0], v, 16);
  writeRaw(tmpDir("dtypes"),
           R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
           R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},)"
           R"("c":{"dtype":"F64","shape":[2],"data_offsets":[8,24]}})",
           f16 + bf16 + f64);
  auto c = loadCheckpoint(tmpDir("dtypes"));
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  for (const char *name : {"a", "b", "c"}) {
    EXPECT_EQ(c->tensors.at(name).data.at(0), 1.0) << name;
    EXPECT_EQ(c->tensors.at(name).data.at(1), -2.0) << name;
  }
}

TEST(Checkpoint, BrokenFilesSayWhatIsWrong) {
  EXPECT_NE(loadError(tmpDir("missing")).find("cannot open"), std::string::npos);
  writeRaw(tmpDir("short"), R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(tmpDir("short")).find("outside the 8 bytes of data"), std::string::npos);
  writeRaw(tmpDir("json"), "{not json", "");
  EXPECT_NE(loadError(tmpDir("json")).find("not JSON"), std::string::npos);
  writeRaw(tmpDir("shape"), R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(tmpDir("shape")).find("shape and dtype make 12 bytes"), std::string::npos);
  writeRaw(tmpDir("overlap"),
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, '\0'));
  EXPECT_NE(loadError(tmpDir("overlap")).find("overlap"), std::string::npos);
  writeRaw(tmpDir("int"), R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(tmpDir("int")).find("dtype I64"), std::string::npos);
  // A header length past the end of the file.
  std::string cmd = "mkdir -p '" + tmpDir("len") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ofstream(checkpointFile(tmpDir("len")), std::ios::binary) << std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_NE(loadError(tmpDir("len")).find("runs past the end"), std::string::npos);
}

} // namespace
} // namespace tofu
