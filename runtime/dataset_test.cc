// Data sets: IDX, gzipped IDX, .npy, TensorProto and safetensors arrays, their errors, and
// the order batches take samples in.
#include "runtime/dataset.h"

#include "onnx/onnx_pb.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <tuple>

#include "gtest/gtest.h"

namespace tofu {
namespace {

std::string idx(unsigned char type, std::vector<uint32_t> dims, const std::string &body) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int b = 3; b >= 0; --b)
      s.push_back(static_cast<char>((d >> (8 * b)) & 0xff));
  return s + body;
}

/// A fresh directory under Bazel's per-test TEST_TMPDIR (which Bazel removes), else /tmp.
std::string tempDir() {
  const char *base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tofu_dataset_XXXXXX";
  return ::mkdtemp(tmpl.data());
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void writeGz(const std::string &path, const std::string &bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(Idx, ReadsBytesAndBigEndianTypes) {
  auto a = parseIdx(
      idx(0x08, {2, 2, 3}, std::string("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\xff", 12)),
      "x");
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(a->samples(), 2);
  EXPECT_EQ(a->sampleElements(), 6);
  EXPECT_EQ(a->at(5), 5);
  EXPECT_EQ(a->at(11), 255);
  // i32, big-endian: -2 and 258.
  auto b = parseIdx(idx(0x0C, {2}, std::string("\xff\xff\xff\xfe\x00\x00\x01\x02", 8)), "y");
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(b->at(0), -2);
  EXPECT_EQ(b->at(1), 258);
}

TEST(Idx, BadFilesNameTheProblem) {
  auto expectError = [](const std::string &bytes, const std::string &part) {
    auto a = parseIdx(bytes, "f.idx");
    ASSERT_FALSE(bool(a));
    std::string msg = llvm::toString(a.takeError());
    EXPECT_NE(msg.find("f.idx"), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expectError("PK\x03\x04", "not an IDX file");
  expectError(idx(0x07, {1}, "a"), "IDX type 0x07");
  expectError(idx(0x08, {3, 2}, "abcde"), "needs 6 bytes");
  expectError(idx(0x08, {3, 2}, "abcdefg"), "needs 6 bytes");
  expectError(std::string("\x00\x00\x08\x03\x00\x00", 6), "truncated in its header");
  expectError(std::string("\x00\x00\x08\x00", 4), "rank 0");
  // 2^31 x 2^31 x 2^31 elements: no overflow, a refusal.
  expectError(idx(0x0E, {0x80000000u, 0x80000000u, 0x80000000u}, ""), "overflows");
  expectError(idx(0x0E, {0x80000000u, 0x80000000u}, ""), "more than");
}

TEST(Npy, ReadsVersionOneHeaders) {
  auto npy = [](const std::string &dict, const std::string &body) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0)
      h += ' ';
    h += '\n';
    std::string s = "\x93NUMPY";
    s += '\x01';
    s += '\x00';
    s += static_cast<char>(h.size() & 0xff);
    s += static_cast<char>(h.size() >> 8);
    return s + h + body;
  };
  float f[3] = {1.5f, -2.0f, 3.25f};
  auto a = parseNpy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                        std::string(reinterpret_cast<char *>(f), 12)),
                    "a.npy");
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(a->at(1), -2.0);
  int64_t l[4] = {0, 9, 3, -1};
  auto b = parseNpy(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }",
                        std::string(reinterpret_cast<char *>(l), 32)),
                    "b.npy");
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(b->at(3), -1);
  EXPECT_TRUE(b->integral());
  auto fortran = parseNpy(
      npy("{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", std::string(12, '\0')),
      "c.npy");
  ASSERT_FALSE(bool(fortran));
  EXPECT_NE(llvm::toString(fortran.takeError()).find("Fortran"), std::string::npos);
  auto big = parseNpy(
      npy("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", std::string(12, '\0')),
      "d.npy");
  ASSERT_FALSE(bool(big));
  EXPECT_NE(llvm::toString(big.takeError()).find("'>f4'"), std::string::npos);
  auto shortBody = parseNpy(
      npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", std::string(12, '\0')),
      "e.npy");
  ASSERT_FALSE(bool(shortBody));
  EXPECT_NE(llvm::toString(shortBody.takeError()).find("needs 16 bytes"), std::string::npos);
  // float16 and the unsigned types widen as the TensorProto reader widens them; a rank-0
  // array is one value (an inference input; a data set refuses it).
  uint16_t h[2] = {0x3c00, 0xc100}; // 1.0 and -2.5
  auto f16 = parseNpy(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }",
                          std::string(reinterpret_cast<char *>(h), 4)),
                      "f.npy");
  ASSERT_TRUE(bool(f16)) << llvm::toString(f16.takeError());
  EXPECT_EQ(f16->at(0), 1.0);
  EXPECT_EQ(f16->at(1), -2.5);
  uint16_t u[2] = {65535, 7};
  auto u16 = parseNpy(npy("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }",
                          std::string(reinterpret_cast<char *>(u), 4)),
                      "g.npy");
  ASSERT_TRUE(bool(u16)) << llvm::toString(u16.takeError());
  EXPECT_EQ(u16->at(0), 65535);
  EXPECT_TRUE(u16->integral());
  uint64_t huge = ~uint64_t(0);
  auto u64 = parseNpy(npy("{'descr': '<u8', 'fortran_order': False, 'shape': (), }",
                          std::string(reinterpret_cast<char *>(&huge), 8)),
                      "h.npy");
  ASSERT_FALSE(bool(u64));
  EXPECT_NE(llvm::toString(u64.takeError()).find("past int64's range"), std::string::npos);
  float one = 4.5f;
  auto scalar = parseNpy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                             std::string(reinterpret_cast<char *>(&one), 4)),
                         "i.npy");
  ASSERT_TRUE(bool(scalar)) << llvm::toString(scalar.takeError());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->at(0), 4.5);
}

TEST(TensorProto, ReadsRawTypedWidenedAndScalarTensors) {
  onnx::TensorProto f;
  f.set_data_type(onnx::TensorProto::FLOAT);
  f.add_dims(2);
  f.add_dims(3);
  for (int k = 0; k < 6; ++k)
    f.add_float_data(0.5f * k - 1);
  auto a = parseTensorProto(f.SerializeAsString(), "f.pb");
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->type, ElementType::Float32);
  EXPECT_EQ(a->at(5), 1.5);
  // Raw int64, and a bool mask.
  onnx::TensorProto i;
  i.set_data_type(onnx::TensorProto::INT64);
  i.add_dims(2);
  const int64_t iv[2] = {-7, 1LL << 40};
  i.set_raw_data(std::string(reinterpret_cast<const char *>(iv), sizeof iv));
  auto ia = parseTensorProto(i.SerializeAsString(), "i.pb");
  ASSERT_TRUE(bool(ia));
  EXPECT_EQ(ia->at(0), -7);
  EXPECT_EQ(ia->at(1), double(1LL << 40));
  onnx::TensorProto b;
  b.set_data_type(onnx::TensorProto::BOOL);
  b.add_dims(3);
  b.set_raw_data(std::string("\x01\x00\x01", 3));
  auto ba = parseTensorProto(b.SerializeAsString(), "b.pb");
  ASSERT_TRUE(bool(ba));
  EXPECT_EQ(ba->at(0) + ba->at(1) + ba->at(2), 2);
  // float16 (1.0 and -2.5) and uint32 widen; a scalar has rank 0 and one value.
  onnx::TensorProto h;
  h.set_data_type(onnx::TensorProto::FLOAT16);
  h.add_dims(2);
  h.add_int32_data(0x3c00);
  h.add_int32_data(0xc100);
  auto ha = parseTensorProto(h.SerializeAsString(), "h.pb");
  ASSERT_TRUE(bool(ha)) << llvm::toString(ha.takeError());
  EXPECT_EQ(ha->at(0), 1.0);
  EXPECT_EQ(ha->at(1), -2.5);
  onnx::TensorProto u;
  u.set_data_type(onnx::TensorProto::UINT32);
  u.add_uint64_data(4000000000u);
  auto ua = parseTensorProto(u.SerializeAsString(), "u.pb");
  ASSERT_TRUE(bool(ua)) << llvm::toString(ua.takeError());
  EXPECT_TRUE(ua->shape.empty());
  EXPECT_EQ(ua->at(0), 4e9);
  float out = 0;
  fillBatch(*ua, {}, {}, {}, /*raw=*/true, {}, &out);
  EXPECT_EQ(out, 4e9f);
  // Errors name the file: short raw data, a count that does not match, strings.
  onnx::TensorProto bad = f;
  bad.add_dims(2);
  EXPECT_NE(llvm::toString(parseTensorProto(bad.SerializeAsString(), "bad.pb").takeError())
                .find("bad.pb: shape [2, 3, 2] needs 12 values; the tensor has 6"),
            std::string::npos);
  onnx::TensorProto shortRaw = i;
  shortRaw.add_dims(2);
  EXPECT_NE(llvm::toString(parseTensorProto(shortRaw.SerializeAsString(), "r.pb").takeError())
                .find("needs 32 bytes of raw data; it has 16"),
            std::string::npos);
  onnx::TensorProto str;
  str.set_data_type(onnx::TensorProto::STRING);
  EXPECT_NE(llvm::toString(parseTensorProto(str.SerializeAsString(), "s.pb").takeError())
                .find("s.pb: element type STRING is not supported"),
            std::string::npos);
  EXPECT_FALSE(bool(parseTensorProto("\xff\xff\xff", "junk.pb")));
}

TEST(DataSet, OpensMnistDirectoriesGzippedOrNot) {
  const std::string dir = tempDir();
  std::string pixels;
  for (int i = 0; i < 3 * 4; ++i)
    pixels.push_back(static_cast<char>(i * 20));
  writeGz(dir + "/train-images-idx3-ubyte.gz", idx(0x08, {3, 2, 2}, pixels));
  writeFile(dir + "/train-labels-idx1-ubyte", idx(0x08, {3}, std::string("\x02\x00\x01", 3)));
  writeFile(dir + "/t10k-images-idx3-ubyte", idx(0x08, {1, 2, 2}, "abcd"));
  writeFile(dir + "/t10k-labels-idx1-ubyte", idx(0x08, {2}, "\x01\x01"));
  EXPECT_TRUE(hasMnistSplit(dir, "train"));
  EXPECT_FALSE(hasMnistSplit(dir, "valid"));
  auto ds = openDataSet(dir, "train");
  ASSERT_TRUE(bool(ds)) << llvm::toString(ds.takeError());
  EXPECT_EQ(ds->samples, 3);
  ASSERT_NE(ds->find("images"), nullptr);
  ASSERT_NE(ds->find("labels"), nullptr);
  EXPECT_EQ(ds->find("images")->at(5), 100);
  EXPECT_EQ(ds->find("labels")->at(0), 2);
  // The test split's arrays disagree on the sample count: an error naming both files.
  auto test = openDataSet(dir, "t10k");
  ASSERT_FALSE(bool(test));
  std::string msg = llvm::toString(test.takeError());
  EXPECT_NE(msg.find("t10k-labels-idx1-ubyte has 2 samples"), std::string::npos) << msg;
  // NAME=FILE lists.
  auto named = openDataSet(
      "x=" + dir + "/train-images-idx3-ubyte.gz,y=" + dir + "/train-labels-idx1-ubyte", "");
  ASSERT_TRUE(bool(named)) << llvm::toString(named.takeError());
  EXPECT_NE(named->find("x"), nullptr);
  auto bad = openDataSet(dir + "/nothing", "train");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("nothing: no such directory (data takes a"),
            std::string::npos);
  // The setting is named as the caller spells it: by its field, or as a tool's flag.
  EXPECT_EQ(llvm::toString(openDataSet("x=a,y", "train").takeError()),
            "data 'x=a,y': 'y' is not NAME=FILE (give a directory of the MNIST family, or "
            "NAME=FILE,... naming each array)");
  EXPECT_EQ(llvm::toString(openDataSet("x=a,y", "train", SettingNames::flags()).takeError())
                .rfind("--data 'x=a,y': 'y' is not NAME=FILE", 0),
            0u);
  // A corrupt gzip stream.
  writeFile(dir + "/bad.gz", std::string("\x1f\x8b\x08\x00garbage", 11));
  auto corrupt = readDataArray(dir + "/bad.gz");
  ASSERT_FALSE(bool(corrupt));
  EXPECT_NE(llvm::toString(corrupt.takeError()).find("bad.gz"), std::string::npos);
}

/// A safetensors file of `tensors`: (key, dtype, shape, little-endian bytes).
std::string safetensors(
    const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, std::string>>
        &tensors) {
  std::string header = "{", data;
  for (const auto &[key, dtype, shape, bytes] : tensors) {
    std::string dims;
    for (int64_t d : shape)
      dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + key + "\":{\"dtype\":\"" +
              dtype + "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
              std::to_string(data.size()) + "," + std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T> std::string le(std::vector<T> values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(T));
}

TEST(Safetensors, ReadsEveryTensorAsAnArray) {
  const std::string dir = tempDir();
  // images u8 [3, 2, 2], labels i64 [3], a float16 [3] (1, -2, 0.5), a bfloat16 [3]
  // (1, -2, 0.5), a bool [3] (stored 0, 2, 1) and a uint32 [3].
  std::string pixels;
  for (int i = 0; i < 12; ++i)
    pixels.push_back(static_cast<char>(i * 20));
  writeFile(dir + "/train.safetensors",
            safetensors({{"images", "U8", {3, 2, 2}, pixels},
                         {"labels", "I64", {3}, le<int64_t>({2, 0, 1})},
                         {"half", "F16", {3}, le<uint16_t>({0x3c00, 0xc000, 0x3800})},
                         {"brain", "BF16", {3}, le<uint16_t>({0x3f80, 0xc000, 0x3f00})},
                         {"flag", "BOOL", {3}, std::string("\x00\x02\x01", 3)},
                         {"wide", "U32", {3}, le<uint32_t>({7, 4000000000u, 0})}}));
  auto ds = openDataSet(dir + "/train.safetensors", "train");
  ASSERT_TRUE(bool(ds)) << llvm::toString(ds.takeError());
  EXPECT_EQ(ds->samples, 3);
  EXPECT_EQ(ds->arrays.size(), 6u);
  EXPECT_EQ(ds->find("images")->at(5), 100);
  EXPECT_EQ(ds->find("images")->shape, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(ds->find("labels")->at(0), 2);
  EXPECT_EQ(ds->find("half")->type, ElementType::Float32);
  EXPECT_EQ(ds->find("half")->at(1), -2.0);
  EXPECT_EQ(ds->find("half")->at(2), 0.5);
  EXPECT_EQ(ds->find("brain")->at(0), 1.0);
  EXPECT_EQ(ds->find("brain")->at(2), 0.5);
  EXPECT_EQ(ds->find("flag")->at(1), 1.0);
  EXPECT_EQ(ds->find("wide")->type, ElementType::Int64);
  EXPECT_EQ(ds->find("wide")->at(1), 4000000000.0);
  // One tensor by key, in NAME=FILE lists and for --input.
  auto named = openDataSet(
      "x=" + dir + "/train.safetensors:images,y=" + dir + "/train.safetensors:labels", "");
  ASSERT_TRUE(bool(named)) << llvm::toString(named.takeError());
  EXPECT_EQ(named->find("y")->at(2), 1);
  auto one = readDataArray(dir + "/train.safetensors:half");
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  EXPECT_EQ(one->at(0), 1.0);
  // Errors name the file and what is wrong.
  auto expectError = [](llvm::Expected<DataArray> a, const std::string &want) {
    ASSERT_FALSE(bool(a));
    const std::string msg = llvm::toString(a.takeError());
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  };
  expectError(readDataArray(dir + "/train.safetensors"),
              "holds 6 tensors (brain, flag, half, images, labels, wide); name one as");
  expectError(readDataArray(dir + "/train.safetensors:pixels"), "no tensor 'pixels'");
  writeFile(dir + "/scalar.safetensors", safetensors({{"s", "F32", {}, le<float>({1})}}));
  expectError(readDataArray(dir + "/scalar.safetensors"), "a scalar, not an array of samples");
  writeFile(dir + "/short.safetensors", safetensors({{"s", "F32", {4}, le<float>({1, 2})}}));
  expectError(readDataArray(dir + "/short.safetensors"), "shape and dtype make 16 bytes");
  writeFile(dir + "/odd.safetensors", safetensors({{"s", "C64", {1}, std::string(8, 'x')}}));
  expectError(readDataArray(dir + "/odd.safetensors"), "dtype C64 is not a safetensors type");
  writeFile(dir + "/huge.safetensors", safetensors({{"s", "U64", {1}, le<uint64_t>({~0ull})}}));
  expectError(readDataArray(dir + "/huge.safetensors"), "past int64's range");
  writeFile(dir + "/mixed.safetensors",
            safetensors({{"a", "U8", {2}, "ab"}, {"b", "U8", {3}, "abc"}}));
  auto mixed = openDataSet(dir + "/mixed.safetensors", "");
  ASSERT_FALSE(bool(mixed));
  EXPECT_NE(llvm::toString(mixed.takeError()).find("has 3 samples but"), std::string::npos);
}

TEST(EpochOrder, IsAPermutationFixedBySeedAndEpoch) {
  std::vector<int64_t> a = epochOrder(1000, 1, 0), b = epochOrder(1000, 1, 0),
                       c = epochOrder(1000, 1, 1), d = epochOrder(1000, 2, 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 999);
  // The documented stream (what tools/main/fmnist.py reimplements): n = 4, seed 1, epoch 0.
  EXPECT_EQ(epochOrder(4, 1, 0), epochOrder(4, 1, 0));
  EXPECT_TRUE(epochOrder(0, 1, 0).empty());
  EXPECT_EQ(epochOrder(1, 1, 0), std::vector<int64_t>{0});
}

TEST(FillBatch, CopiesATileOfTheBatchNormalised) {
  // Three samples of 2x2 bytes feeding an input [2, 1, 2, 2]; the batch is samples 2 and 0.
  DataArray a;
  a.shape = {3, 2, 2};
  a.type = ElementType::UInt8;
  for (int i = 0; i < 12; ++i)
    a.bytes.push_back(static_cast<unsigned char>(i * 17));
  const std::vector<int64_t> shape = {2, 1, 2, 2};
  Normalization norm{0.5, 0.25};
  // Worker's tile: both rows, channel 0, row 1 of the image, both columns.
  Box box = {{0, 2}, {0, 1}, {1, 2}, {0, 2}};
  float out[4];
  fillBatch(a, {2, 0}, shape, box, false, norm, out);
  auto expect = [&](int sample, int pixel) {
    return static_cast<float>((a.bytes[sample * 4 + pixel] / 255.0 - 0.5) / 0.25);
  };
  EXPECT_FLOAT_EQ(out[0], expect(2, 2));
  EXPECT_FLOAT_EQ(out[1], expect(2, 3));
  EXPECT_FLOAT_EQ(out[2], expect(0, 2));
  EXPECT_FLOAT_EQ(out[3], expect(0, 3));
  // Labels as they are.
  DataArray labels;
  labels.shape = {3};
  labels.type = ElementType::UInt8;
  labels.bytes = {7, 8, 9};
  float l[1];
  fillBatch(labels, {2, 0}, {2}, Box{{1, 2}}, true, norm, l);
  EXPECT_EQ(l[0], 7.0f);
}

} // namespace
} // namespace tofu
