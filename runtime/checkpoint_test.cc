// safetensors checkpoints: a round trip keeps names, shapes, values (to float32) and
// metadata; other writers' F16/BF16/F64 tensors load; broken files get errors that say what
// is wrong, never a crash. Sharded checkpoints: tiles written by several writers read back
// as any box (across tile boundaries, from either form), a new generation replaces the
// old one's files only once committed, and broken indexes and tilings are refused.
#include "runtime/checkpoint.h"
#include "support/float16.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/safetensors.h"
#include "support/bf16.h"
#include "support/files.h"
#include "testing/suite.h"
#include "gtest/gtest.h"

namespace tofu {
namespace {

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
  const std::string dir = testTmpDir("ckpt/nested");
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
  writeRaw(testTmpDir("dtypes"),
           R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
           R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]},)"
           R"("c":{"dtype":"F64","shape":[2],"data_offsets":[8,24]}})",
           f16 + bf16 + f64);
  auto c = loadCheckpoint(testTmpDir("dtypes"));
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  for (const char *name : {"a", "b", "c"}) {
    EXPECT_EQ(c->tensors.at(name).data.at(0), 1.0) << name;
    EXPECT_EQ(c->tensors.at(name).data.at(1), -2.0) << name;
  }
}

// Every dtype a header may name: its name read back, its width and class, its element
// type where Tofu has one (support/element_type.h's mapping), and unknown names refused.
TEST(Safetensors, DtypesByName) {
  struct Want {
    const char *name;
    size_t width;
    bool floating;
    std::optional<ElementType> type;
  };
  const Want want[] = {
      {"BOOL", 1, false, ElementType::Bool},    {"U8", 1, false, ElementType::UInt8},
      {"I8", 1, false, ElementType::Int8},      {"U16", 2, false, std::nullopt},
      {"I16", 2, false, ElementType::Int16},    {"F16", 2, true, ElementType::Float16},
      {"BF16", 2, true, ElementType::BFloat16}, {"U32", 4, false, std::nullopt},
      {"I32", 4, false, ElementType::Int32},    {"F32", 4, true, ElementType::Float32},
      {"U64", 8, false, std::nullopt},          {"I64", 8, false, ElementType::Int64},
      {"F64", 8, true, ElementType::Float64}};
  for (const Want &w : want) {
    auto d = safetensorsDtypeNamed(w.name);
    ASSERT_TRUE(d.has_value()) << w.name;
    EXPECT_STREQ(safetensorsDtypeName(*d), w.name);
    EXPECT_EQ(safetensorsWidth(*d), w.width) << w.name;
    EXPECT_EQ(safetensorsFloating(*d), w.floating) << w.name;
    EXPECT_EQ(elementTypeOf(*d), w.type) << w.name;
  }
  for (const char *bad : {"f32", "F8", "C64", ""})
    EXPECT_FALSE(safetensorsDtypeNamed(bad).has_value()) << bad;
  // -2.5 as each floating dtype, and 200 as U8.
  const uint16_t h = 0xc100, b = 0xc020;
  const float f = -2.5f;
  const double x = -2.5;
  const uint8_t u = 200;
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::F16, reinterpret_cast<const char *>(&h)), -2.5);
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::BF16, reinterpret_cast<const char *>(&b)), -2.5);
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::F32, reinterpret_cast<const char *>(&f)), -2.5);
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::F64, reinterpret_cast<const char *>(&x)), -2.5);
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::U8, reinterpret_cast<const char *>(&u)), 200);
  EXPECT_EQ(safetensorsElement(SafetensorsDtype::I8, reinterpret_cast<const char *>(&u)), -56);
}

// float16 rounding (floatToHalf), checked against bit patterns worked out by hand and
// against halfToFloat: every float16 reads back as itself, and a value halfway between two
// neighbours goes to the even one.
TEST(Checkpoint, Float16RoundsToNearestEven) {
  struct Case {
    float x;
    uint16_t bits;
  } cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},
      {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},
      {1e9f, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-14f, 0x0400},
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},
      {0x1.8p-25f, 0x0001},
      {0x1.8p-24f, 0x0002},
      {0x1.4p-24f, 0x0001},
      {1.0f / 3.0f, 0x3555},
      {1.0f + 0x1p-11f, 0x3c00},
      {1.0f + 0x3p-11f, 0x3c02},
      {0x1.ffcp-15f, 0x0400}, // rounds up from the largest subnormal's range into a normal
  };
  for (const Case &c : cases)
    EXPECT_EQ(floatToHalf(c.x), c.bits) << c.x;
  EXPECT_EQ(floatToHalf(NAN) & 0x7e00u, 0x7e00u); // a quiet NaN
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float x = halfToFloat(bits);
    if (x == x)
      ASSERT_EQ(floatToHalf(x), bits) << h;
  }
}

// --save-dtype: a checkpoint written in bfloat16 or float16, whole or as tiles, says so in
// its header, takes 2 bytes an element, and loads back as the rounded values.
TEST(Checkpoint, WrittenInBfloat16AndFloat16) {
  Checkpoint c;
  Tensor w({3, 4});
  for (int64_t i = 0; i < 12; ++i)
    w.data[i] = 1.0 / 3.0 * double(i) - 1.7 + (i == 11 ? 7e4 : 0.0);
  c.tensors.emplace("w", w);
  c.metadata = {{"steps", "3"}};
  for (StoredType type : {StoredType::F32, StoredType::BF16, StoredType::F16}) {
    const std::string dir = testTmpDir(std::string("stored-") + storedTypeName(type));
    llvm::Error e = saveCheckpoint(dir, c, type);
    if (type == StoredType::F16) {
      // 7e4 - 1.7 + 11/3 is past float16's largest (65504; finite in bfloat16): refused,
      // naming it, not made infinite (the checkpoint would not load); the rest of the test
      // saves 6e4 instead.
      EXPECT_EQ(llvm::toString(std::move(e)),
                checkpointFile(dir) + ": tensor 'w' holds 70001.97 at element 11, beyond "
                                      "float16's range (65504): save it as bfloat16 or float32");
      EXPECT_FALSE(pathExists(checkpointFile(dir) + ".partial"));
      w.data[11] = 6e4;
      c.tensors.at("w") = w;
      e = saveCheckpoint(dir, c, type);
    }
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    auto f = openSafetensors(checkpointFile(dir));
    ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
    EXPECT_EQ((*f)->tensors.at("w").dtype, safetensorsDtypeOf(type));
    EXPECT_EQ(elementTypeOf(safetensorsDtypeOf(type)),
              type == StoredType::F32    ? ElementType::Float32
              : type == StoredType::BF16 ? ElementType::BFloat16
                                         : ElementType::Float16);
    EXPECT_EQ((*f)->tensors.at("w").end - (*f)->tensors.at("w").begin, 12u * storedTypeBytes(type));
    auto back = loadCheckpoint(dir);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    for (int64_t i = 0; i < 12; ++i) {
      const float x = static_cast<float>(w.data[i]);
      const float want = type == StoredType::F32    ? x
                         : type == StoredType::BF16 ? roundToBf16(x)
                                                    : halfToFloat(floatToHalf(x));
      EXPECT_EQ(back->tensors.at("w").data[i], double(want)) << storedTypeName(type) << " " << i;
    }
    // As tiles: the same dtype in the tile file, the same values read back by box.
    CheckpointTile tile{"w", {3, 4}, Box{{0, 3}, {0, 4}}, {}};
    for (double v : w.data)
      tile.data.push_back(static_cast<float>(v));
    auto entries = writeTileFile(dir + "/tiles", tileFileName(1, 0), {tile}, type);
    ASSERT_TRUE(bool(entries)) << llvm::toString(entries.takeError());
    e = writeCheckpointIndex(dir + "/tiles", 1, *entries, c.metadata);
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    auto r = CheckpointReader::open(dir + "/tiles");
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    std::vector<float> got(12);
    e = r->read("w", Box{{0, 3}, {0, 4}}, got.data());
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    for (int64_t i = 0; i < 12; ++i)
      EXPECT_EQ(double(got[i]), back->tensors.at("w").data[i]) << storedTypeName(type) << " " << i;
  }
}

TEST(Checkpoint, BrokenFilesSayWhatIsWrong) {
  EXPECT_NE(loadError(testTmpDir("missing")).find("cannot open"), std::string::npos);
  // A name given twice (JSON keeps the last copy) is refused.
  writeRaw(testTmpDir("twice"),
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           std::string(8, '\0'));
  EXPECT_EQ(loadError(testTmpDir("twice")),
            checkpointFile(testTmpDir("twice")) + ": the header names tensor 'a' twice");
  // A value that is not finite is reported at load, naming the tensor, where it is and the
  // file; so is a float64 beyond float32.
  for (const auto &[name, bytes, what] :
       {std::tuple{"nan", std::string("\x00\x00\xc0\x7f", 4), std::string("nan")},
        std::tuple{"inf", std::string("\x00\x00\x80\xff", 4), std::string("-inf")}}) {
    const std::string dir = testTmpDir(std::string("nonfinite-") + name);
    writeRaw(dir,
             R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
             std::string(12, '\0') + bytes + std::string(8, '\0'));
    EXPECT_EQ(loadError(dir), checkpointFile(dir) + ": tensor 'w' holds " + what +
                                  " at [1, 1]: a checkpoint's weights and state must be finite "
                                  "(was it saved after the loss diverged?)");
    auto reader = CheckpointReader::open(dir);
    ASSERT_TRUE(bool(reader)) << llvm::toString(reader.takeError());
    float out[4];
    EXPECT_FALSE(bool(reader->read("b", Box{{0, 2}}, out))); // the finite one reads
    EXPECT_TRUE(bool(reader->read("w", Box{{0, 2}, {0, 2}}, out)));
  }
  {
    const double big = 1e300;
    const std::string dir = testTmpDir("beyond-float32");
    writeRaw(dir, R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
             std::string(reinterpret_cast<const char *>(&big), 8));
    EXPECT_EQ(loadError(dir), ""); // held in double, as the file has it
    auto reader = CheckpointReader::open(dir);
    ASSERT_TRUE(bool(reader)) << llvm::toString(reader.takeError());
    float out = 0;
    EXPECT_EQ(llvm::toString(reader->read("w", Box{{0, 1}}, &out)),
              checkpointFile(dir) + ": tensor 'w' holds 1e+300 at [0], beyond float32's range: "
                                    "a checkpoint's weights and state must be finite (was it "
                                    "saved after the loss diverged?)");
  }
  writeRaw(testTmpDir("short"), R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(testTmpDir("short")).find("outside the 8 bytes of data"), std::string::npos);
  writeRaw(testTmpDir("json"), "{not json", "");
  EXPECT_NE(loadError(testTmpDir("json")).find("not JSON"), std::string::npos);
  writeRaw(testTmpDir("shape"), R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(testTmpDir("shape")).find("shape and dtype make 12 bytes"),
            std::string::npos);
  writeRaw(testTmpDir("overlap"),
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, '\0'));
  EXPECT_NE(loadError(testTmpDir("overlap")).find("overlap"), std::string::npos);
  writeRaw(testTmpDir("int"), R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  EXPECT_NE(loadError(testTmpDir("int")).find("dtype I64"), std::string::npos);
  // A header length past the end of the file.
  std::string cmd = "mkdir -p '" + testTmpDir("len") + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ofstream(checkpointFile(testTmpDir("len")), std::ios::binary)
      << std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_NE(loadError(testTmpDir("len")).find("runs past the end"), std::string::npos);
}

/// A tensor whose element at flat index i is i (exact in float32).
std::vector<float> iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(i);
  return v;
}

/// The tile `box` of the 6 x 8 iota tensor.
CheckpointTile tileOf(const std::string &name, const Box &box) {
  const std::vector<float> all = iota(48);
  CheckpointTile t{name, {6, 8}, box, {}};
  for (int64_t r = box[0].lo; r < box[0].hi; ++r)
    for (int64_t c = box[1].lo; c < box[1].hi; ++c)
      t.data.push_back(all[r * 8 + c]);
  return t;
}

/// Writes a sharded checkpoint of the 6 x 8 iota tensor "w" and a scalar "s" over three
/// files, each holding a different kind of tile (rows, columns, a block).
void writeSharded(const std::string &dir, unsigned generation,
                  const std::vector<std::vector<CheckpointTile>> &parts) {
  std::vector<TileEntry> all;
  for (size_t r = 0; r < parts.size(); ++r) {
    auto e = writeTileFile(dir, tileFileName(generation, r), parts[r]);
    ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
    // Through the text the processes send each other.
    auto back = decodeTileEntries(encodeTileEntries(*e));
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    all.insert(all.end(), back->begin(), back->end());
  }
  llvm::Error err = writeCheckpointIndex(dir, generation, all, {{"steps", "7"}});
  ASSERT_FALSE(bool(err)) << llvm::toString(std::move(err));
}

std::vector<std::vector<CheckpointTile>> threeParts() {
  CheckpointTile s{"s", {}, {}, {2.5f}};
  return {{tileOf("w", {{0, 3}, {0, 8}}), s},                              // the top rows
          {tileOf("w", {{3, 6}, {0, 5}})},                                 // a block
          {tileOf("w", {{3, 4}, {5, 8}}), tileOf("w", {{4, 6}, {5, 8}})}}; // two small blocks
}

std::string openError(const std::string &dir) {
  auto r = CheckpointReader::open(dir);
  if (r)
    return "";
  return llvm::toString(r.takeError());
}

TEST(ShardedCheckpoint, AnyBoxReadsBack) {
  const std::string dir = testTmpDir("sharded");
  writeSharded(dir, 1, threeParts());
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_TRUE(r->sharded());
  EXPECT_EQ(r->metadata().at("steps"), "7");
  EXPECT_EQ(r->shapes().at("w"), (std::vector<int64_t>{6, 8}));
  const std::vector<float> all = iota(48);
  // Boxes of another partition: column halves, row thirds, a block across all tiles.
  for (Box box : {Box{{0, 6}, {0, 4}}, Box{{0, 6}, {4, 8}}, Box{{2, 4}, {0, 8}},
                  Box{{1, 5}, {3, 7}}, Box{{0, 6}, {0, 8}}, Box{{5, 6}, {7, 8}}}) {
    std::vector<float> got(boxElements(box), -1.0f), want;
    for (int64_t i = box[0].lo; i < box[0].hi; ++i)
      for (int64_t j = box[1].lo; j < box[1].hi; ++j)
        want.push_back(all[i * 8 + j]);
    llvm::Error e = r->read("w", box, got.data());
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    EXPECT_EQ(got, want) << "box rows " << box[0].lo << ":" << box[0].hi << " cols " << box[1].lo
                         << ":" << box[1].hi;
  }
  float s = 0;
  llvm::Error e = r->read("s", {}, &s);
  ASSERT_FALSE(bool(e));
  EXPECT_EQ(s, 2.5f);
  auto whole = r->readAll();
  ASSERT_TRUE(bool(whole));
  EXPECT_EQ(whole->tensors.at("w").data.at(47), 47.0);
  // Errors name the tensor and the box.
  std::string msg = llvm::toString(r->read("w", {{0, 7}, {0, 8}}, nullptr));
  EXPECT_NE(msg.find("has no box [0:7,0:8]"), std::string::npos) << msg;
  msg = llvm::toString(r->read("v", {}, nullptr));
  EXPECT_NE(msg.find("no tensor 'v'"), std::string::npos) << msg;
}

TEST(ShardedCheckpoint, WholeCheckpointsReadByBox) {
  Checkpoint c;
  Tensor w({6, 8});
  for (int64_t i = 0; i < 48; ++i)
    w.data[i] = static_cast<double>(i);
  c.tensors.emplace("w", w);
  const std::string dir = testTmpDir("whole-by-box");
  ASSERT_FALSE(bool(saveCheckpoint(dir, c)));
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_FALSE(r->sharded());
  std::vector<float> got(6);
  ASSERT_FALSE(bool(r->read("w", {{2, 5}, {6, 8}}, got.data())));
  EXPECT_EQ(got, (std::vector<float>{22, 23, 30, 31, 38, 39}));
}

TEST(ShardedCheckpoint, GenerationsReplaceEachOther) {
  namespace fs = std::filesystem;
  const std::string dir = testTmpDir("generations");
  Checkpoint c;
  c.tensors.emplace("w", Tensor({6, 8}, 1.0));
  ASSERT_FALSE(bool(saveCheckpoint(dir, c)));
  EXPECT_EQ(nextCheckpointGeneration(dir), 1u);
  writeSharded(dir, 1, threeParts());
  // The sharded checkpoint replaced the whole one.
  EXPECT_FALSE(fs::exists(checkpointFile(dir)));
  EXPECT_EQ(nextCheckpointGeneration(dir), 2u);
  // Generation 2's files written but not committed: generation 1 still loads, unchanged.
  auto parts = threeParts();
  parts[0][1].data = {9.0f};
  ASSERT_TRUE(bool(writeTileFile(dir, tileFileName(2, 0), parts[0])));
  float s = 0;
  {
    auto r = CheckpointReader::open(dir);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    ASSERT_FALSE(bool(r->read("s", {}, &s)));
    EXPECT_EQ(s, 2.5f);
  }
  writeSharded(dir, 2, parts);
  auto r = CheckpointReader::open(dir);
  ASSERT_TRUE(bool(r));
  ASSERT_FALSE(bool(r->read("s", {}, &s)));
  EXPECT_EQ(s, 9.0f);
  EXPECT_FALSE(fs::exists(dir + "/" + tileFileName(1, 0)));
  EXPECT_TRUE(fs::exists(dir + "/" + tileFileName(2, 2)));
  // A whole checkpoint saved over it removes the sharded one.
  ASSERT_FALSE(bool(saveCheckpoint(dir, c)));
  EXPECT_FALSE(fs::exists(checkpointIndexFile(dir)));
  EXPECT_FALSE(fs::exists(dir + "/" + tileFileName(2, 0)));
  EXPECT_FALSE(CheckpointReader::open(dir)->sharded());
}

TEST(ShardedCheckpoint, BadTilingsAndIndexesSayWhatIsWrong) {
  // Overlapping and missing tiles are refused when the index is written.
  auto parts = threeParts();
  parts[1][0] = tileOf("w", {{2, 6}, {0, 5}}); // overlaps the top rows
  std::vector<TileEntry> all;
  for (size_t r = 0; r < parts.size(); ++r) {
    auto entries = writeTileFile(testTmpDir("overlapping"), tileFileName(1, r), parts[r]);
    ASSERT_TRUE(bool(entries)) << llvm::toString(entries.takeError());
    all.insert(all.end(), entries->begin(), entries->end());
  }
  std::string msg = llvm::toString(writeCheckpointIndex(testTmpDir("overlapping"), 1, all, {}));
  EXPECT_NE(msg.find("tensor 'w': the tiles [2:6,0:5] and [0:3,0:8] overlap"), std::string::npos)
      << msg;
  all.erase(all.begin() + 2); // the block [2:6, 0:5]
  msg = llvm::toString(writeCheckpointIndex(testTmpDir("overlapping"), 1, all, {}));
  EXPECT_NE(msg.find("its tiles cover 33 of its 48 elements"), std::string::npos) << msg;

  // Broken indexes, each naming the index and what is wrong.
  const std::string dir = testTmpDir("badindex");
  writeSharded(dir, 1, threeParts());
  const std::string good = [&] {
    std::ifstream in(checkpointIndexFile(dir));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  auto withIndex = [&](const std::string &text) {
    std::ofstream(checkpointIndexFile(dir), std::ios::trunc) << text;
    return openError(dir);
  };
  auto edited = [&](const std::string &from, const std::string &to) {
    std::string t = good;
    size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return withIndex(t.replace(at, from.size(), to));
  };
  EXPECT_NE(withIndex("{").find("index.json: not JSON"), std::string::npos);
  EXPECT_NE(withIndex("{\"format\": \"x\"}").find("not the index of a sharded Tofu checkpoint"),
            std::string::npos);
  EXPECT_NE(edited("\"version\": 1", "\"version\": 2").find("version 2; this Tofu reads version 1"),
            std::string::npos);
  msg = edited("tiles-1-2.safetensors", "tiles-9-9.safetensors");
  EXPECT_NE(msg.find("tiles-9-9.safetensors: cannot open"), std::string::npos) << msg;
  msg = edited("tiles-1-0.safetensors", "../x.safetensors");
  EXPECT_NE(msg.find("is not a file name in the checkpoint's directory"), std::string::npos) << msg;
  msg = edited("\"key\":\"w@0:3,0:8\"", "\"key\":\"w@0:3,0:9\"");
  EXPECT_NE(msg.find("tile 'w@0:3,0:9' is named for another place than its box [0:3,0:8]"),
            std::string::npos)
      << msg;
  msg = edited("[[0,3],[0,8]]", "[[0,2],[0,8]]");
  EXPECT_NE(msg.find("tile 'w@0:3,0:8' is named for another place than its box [0:2,0:8]"),
            std::string::npos)
      << msg;
  msg = edited("[[0,3],[0,8]]", "[[0,3],[0,8,1]]");
  EXPECT_NE(msg.find("a tile needs a file, a key and a box"), std::string::npos) << msg;
  msg = edited("[[0,3],[0,8]]", "[[3,0],[0,8]]"); // lo > hi
  EXPECT_NE(msg.find("a tile needs a file, a key and a box"), std::string::npos) << msg;
  msg = edited("\"shape\":[6,8]", "\"shape\":[4611686018427387904,8]"); // 2^65 elements
  EXPECT_NE(msg.find("needs a shape"), std::string::npos) << msg;
  msg = withIndex("{\"format\": 3}"); // was an uncaught type error
  EXPECT_NE(msg.find("not the index of a sharded Tofu checkpoint"), std::string::npos) << msg;
  msg = edited("\"shape\":[6,8]", "\"shape\":[6,9]");
  EXPECT_NE(msg.find("tensor 'w': its tiles cover 48 of its 54 elements"), std::string::npos)
      << msg;
  // Two tiles of the same shape with their boxes swapped in the index: each tile's name
  // carries its box, so the swap is refused rather than loading the halves swapped.
  {
    const std::string halves = testTmpDir("swapped");
    writeSharded(halves, 1, {{tileOf("w", {{0, 3}, {0, 8}})}, {tileOf("w", {{3, 6}, {0, 8}})}});
    std::ifstream in(checkpointIndexFile(halves));
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    const size_t a = t.find("[[0,3],[0,8]]"), b = t.find("[[3,6],[0,8]]");
    ASSERT_TRUE(a != std::string::npos && b != std::string::npos) << t;
    t.replace(a, 13, "[[3,6],[0,8]]");
    t.replace(b, 13, "[[0,3],[0,8]]");
    std::ofstream(checkpointIndexFile(halves), std::ios::trunc) << t;
    msg = openError(halves);
    EXPECT_NE(msg.find("is named for another place than its box"), std::string::npos) << msg;
  }
  // A truncated tile file.
  withIndex(good);
  std::filesystem::resize_file(dir + "/" + tileFileName(1, 1), 100);
  msg = openError(dir);
  EXPECT_NE(msg.find("tiles-1-1.safetensors"), std::string::npos) << msg;
  // No checkpoint at all.
  msg = openError(testTmpDir("nothing-here"));
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  std::filesystem::create_directories(testTmpDir("empty"));
  msg = openError(testTmpDir("empty"));
  EXPECT_NE(msg.find("holds no checkpoint (neither index.json nor model.safetensors)"),
            std::string::npos)
      << msg;
}

} // namespace
} // namespace tofu
