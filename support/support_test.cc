// support/: byte counts and quantities, files read and written whole, bfloat16 rounding, element
// types, ONNX TensorProto decoding.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "onnx/onnx_pb.h"
#include "support/bf16.h"
#include "support/element_type.h"
#include "support/files.h"
#include "support/json_at.h"
#include "support/tensor_proto.h"
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

TEST(Files, ReadsWholeFilesAndNamesWhyNot) {
  const std::string dir = ::testing::TempDir() + "/support_test_read";
  ASSERT_TRUE(makeDirs(dir));
  // More than one read's worth, with bytes a text read would change.
  std::string bytes;
  for (int k = 0; k < 200000; ++k)
    bytes += static_cast<char>(k * 7 % 256);
  std::ofstream(dir + "/f", std::ios::binary) << bytes;
  auto read = readFile(dir + "/f");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(*read, bytes);
  std::ofstream(dir + "/empty", std::ios::binary).flush();
  auto empty = readFile(dir + "/empty");
  ASSERT_TRUE(bool(empty));
  EXPECT_TRUE(empty->empty());
  EXPECT_TRUE(pathExists(dir + "/f"));
  EXPECT_FALSE(isDirectory(dir + "/f"));
  EXPECT_TRUE(isDirectory(dir));
  EXPECT_FALSE(pathExists(dir + "/nope"));
  EXPECT_EQ(llvm::toString(readFile(dir, "an ONNX model").takeError()),
            fmt::format("'{}' is a directory, not an ONNX model", dir));
  EXPECT_EQ(llvm::toString(readFile(dir + "/nope").takeError()),
            fmt::format("cannot open '{}/nope': No such file or directory", dir));
}

namespace {

std::string contentsOf(const std::string &path) {
  auto bytes = readFile(path);
  return bytes ? *bytes : "(unreadable: " + llvm::toString(bytes.takeError()) + ")";
}

} // namespace

TEST(Files, WritesWholeOrNotAtAll) {
  const std::string dir = ::testing::TempDir() + "/support_test_write";
  ASSERT_TRUE(makeDirs(dir));
  const std::string path = dir + "/f.json";
  // A new file; then the same path replaced, keeping the old one's permissions.
  ASSERT_FALSE(bool(writeFileAtomically(path, "first\n")));
  EXPECT_EQ(contentsOf(path), "first\n");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  {
    auto f = AtomicFile::create(path, "a plan");
    ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
    EXPECT_EQ(f->temporary(), path + ".partial");
    f->write(std::string(3 << 20, 'x')); // past the buffer
    f->write("!");
    EXPECT_EQ(contentsOf(path), "first\n"); // nothing replaced before the commit
    ASSERT_FALSE(bool(f->commit()));
  }
  EXPECT_EQ(contentsOf(path), std::string(3 << 20, 'x') + "!");
  EXPECT_FALSE(pathExists(path + ".partial"));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Given up without a commit (an error on the way): the old file stays, no temporary.
  {
    auto f = AtomicFile::create(path);
    ASSERT_TRUE(bool(f));
    f->write("half");
  }
  EXPECT_EQ(contentsOf(path).size(), (3u << 20) + 1);
  EXPECT_FALSE(pathExists(path + ".partial"));
  // A link is written through: the file it names changes, the link stays a link.
  const std::string link = dir + "/link.json";
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  ASSERT_FALSE(bool(writeFileAtomically(link, "through\n")));
  EXPECT_EQ(contentsOf(path), "through\n");
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // A write that fails (here past the process's file size limit, as a full disk would):
  // the error says why, the old file is as it was, and no temporary is left.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  llvm::Error big = writeFileAtomically(path, std::string(100000, 'y'), "a checkpoint");
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  ASSERT_TRUE(bool(big));
  EXPECT_EQ(llvm::toString(std::move(big)),
            fmt::format("cannot write a checkpoint to '{}': File too large (the file there, if "
                        "any, is as it was)",
                        path));
  EXPECT_EQ(contentsOf(path), "through\n");
  EXPECT_FALSE(pathExists(path + ".partial"));
  // "-" is the standard output, its writes checked too (here /dev/full's "no space").
  const int saved = ::dup(STDOUT_FILENO);
  const std::string out = dir + "/stdout.txt";
  const int outFd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int fullFd = ::open("/dev/full", O_WRONLY);
  ASSERT_GE(saved, 0);
  ASSERT_GE(outFd, 0);
  ASSERT_GE(fullFd, 0);
  std::fflush(stdout);
  ::dup2(outFd, STDOUT_FILENO);
  llvm::Error toOut = writeFileAtomically("-", "to the standard output\n", "metrics");
  ::dup2(fullFd, STDOUT_FILENO);
  llvm::Error toFull = writeFileAtomically("-", "lost", "metrics");
  ::dup2(saved, STDOUT_FILENO);
  for (int fd : {saved, outFd, fullFd})
    ::close(fd);
  EXPECT_FALSE(bool(toOut));
  EXPECT_EQ(contentsOf(out), "to the standard output\n");
  EXPECT_EQ(llvm::toString(std::move(toFull)),
            "cannot write metrics to the standard output: No space left on device");
}

TEST(Files, RefusesToReplaceWhatIsNotAFile) {
  const std::string dir = ::testing::TempDir() + "/support_test_refuse";
  ASSERT_TRUE(makeDirs(dir + "/sub"));
  // A device is never replaced: refused before anything is written.
  EXPECT_EQ(llvm::toString(writeFileAtomically("/dev/null", "x", "an ONNX model")),
            "'/dev/null' is a character device: Tofu writes an ONNX model only to a regular file "
            "(written beside it, then renamed into place), so it will not replace it");
  EXPECT_FALSE(pathExists("/dev/null.partial"));
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(llvm::toString(checkWritable(dir + "/sub")).find("' is a directory: Tofu writes"),
            dir.size() + 5);
  const std::string fifo = dir + "/fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(llvm::toString(writeFileAtomically(fifo, "x")).find("is a FIFO"), std::string::npos);
  EXPECT_EQ(llvm::toString(checkWritable(dir + "/none/f.json", "metrics")),
            fmt::format("cannot write metrics to '{0}/none/f.json': its folder '{0}/none' does "
                        "not exist",
                        dir));
  EXPECT_FALSE(bool(checkWritable(dir + "/f.json")));
  EXPECT_FALSE(bool(checkWritable("-")));
  EXPECT_FALSE(bool(checkWritable("relative-here.json")));
  const std::string dangling = dir + "/dangling";
  ::unlink(dangling.c_str());
  ASSERT_EQ(::symlink((dir + "/nowhere").c_str(), dangling.c_str()), 0);
  EXPECT_NE(llvm::toString(checkWritable(dangling)).find("is a link to nothing"),
            std::string::npos);
}

TEST(Json, NamesThePathTheCauseAndTheKeyMeant) {
  EXPECT_EQ(nearestWord("latncy", {"name", "count", "bandwidth", "latency"}), "latency");
  EXPECT_EQ(nearestWord("bf61", {"bf16", "op"}), "bf16"); // a transposition
  EXPECT_EQ(nearestWord("zzz", {"name", "count"}), "");
  EXPECT_EQ(nearestWord("x", {"op"}), ""); // never every letter
  auto j = parseJson(R"({"a": {"n": -1, "f": 2.5, "s": "x", "big": 70000, "b": true}})", "doc");
  ASSERT_TRUE(bool(j)) << llvm::toString(j.takeError());
  const JsonAt a{j->at("a"), "a", "doc"};
  EXPECT_EQ(llvm::toString(a.object({"n", "f", "s"}, {})),
            "doc: a: unknown key 'b' (one of: n, f, s)");
  EXPECT_FALSE(bool(a.object({"n", "f", "s", "big", "b"}, {"n"})));
  EXPECT_EQ(llvm::toString(a.object({"n", "f", "s", "big", "b"}, {"m"})),
            "doc: a: the key 'm' is missing");
  EXPECT_EQ(llvm::toString(a["n"].integer(0, 10).takeError()),
            "doc: a.n: -1 is out of range (0 to 10)");
  EXPECT_EQ(llvm::toString(a["f"].integer().takeError()), "doc: a.f: must be an integer, not 2.5");
  EXPECT_EQ(llvm::toString(a["big"].integer(0, 65535).takeError()),
            "doc: a.big: 70000 is out of range (0 to 65535)");
  EXPECT_EQ(*a["f"].number(0, 10), 2.5);
  EXPECT_FALSE(bool(a["n"].number(0, 10)));
  EXPECT_EQ(llvm::toString(a["s"].boolean().takeError()),
            "doc: a.s: must be true or false, not \"x\"");
  EXPECT_EQ(*a["b"].boolean(), true);
  EXPECT_EQ(llvm::toString(a["s"].array()), "doc: a.s: must be an array, not string");
  // A number past a double is reported as that, a syntax error with where it is.
  EXPECT_EQ(llvm::toString(parseJson("[1e999]", "doc").takeError())
                .rfind("doc: a number is too large for a double", 0),
            0u);
  EXPECT_EQ(llvm::toString(parseJson("{\"a\": }", "doc").takeError())
                .rfind("doc: not valid JSON: parse error at line 1, column 7", 0),
            0u);
  // A key twice in one object is refused; the same key in two objects is not.
  EXPECT_EQ(llvm::toString(parseJson(R"({"a": {"x": 1, "y": 2, "x": 3}})", "doc").takeError()),
            "doc: the key 'x' is given twice in one object (JSON readers differ in which they "
            "keep)");
  EXPECT_TRUE(static_cast<bool>(parseJson(R"([{"x": 1}, {"x": {"x": 2}}])", "doc")));
}

namespace {

onnx::TensorProto tensorOf(int32_t type, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_data_type(type);
  for (int64_t d : dims)
    t.add_dims(d);
  return t;
}

std::string decodeError(const onnx::TensorProto &t) {
  auto v = decodeTensorProto(t);
  return v ? "no error" : llvm::toString(v.takeError());
}

} // namespace

TEST(TensorProto, EveryTypeFromItsTypedFieldAndFromRawData) {
  using P = onnx::TensorProto;
  // Each type's values as the typed field holds them, and as raw little-endian bytes.
  struct Case {
    int32_t type;
    std::vector<double> want;
  };
  const Case cases[] = {
      {P::FLOAT, {-1.5, 0, 1048576.25}},
      {P::DOUBLE, {-1e300, 0.25, 7}},
      {P::INT64, {-(1LL << 40), 0, (1LL << 50) + 3}},
      {P::INT32, {-2147483648.0, 0, 2147483647}},
      {P::INT16, {-32768, 1, 32767}},
      {P::INT8, {-128, 0, 127}},
      {P::UINT8, {0, 1, 255}},
      {P::BOOL, {1, 0, 1}},
      {P::UINT16, {0, 40000, 65535}},
      {P::UINT32, {0, 4e9, 4294967295.0}},
      {P::UINT64, {0, 1e15, 18446744073709551615.0}},
      {P::FLOAT16, {1.0, -2.5, 65504}},
      {P::BFLOAT16, {1.0, -2.5, 3.0}},
  };
  const uint16_t f16[] = {0x3c00, 0xc100, 0x7bff}, bf16[] = {0x3f80, 0xc020, 0x4040};
  for (const Case &c : cases) {
    SCOPED_TRACE(tensorProtoTypeName(c.type));
    const size_t width = tensorProtoWidth(c.type);
    ASSERT_GT(width, 0u);
    EXPECT_EQ(tensorProtoIsFloat(c.type), c.type == P::FLOAT || c.type == P::DOUBLE ||
                                              c.type == P::FLOAT16 || c.type == P::BFLOAT16);
    onnx::TensorProto typed = tensorOf(c.type, {3}), raw = tensorOf(c.type, {3});
    std::string bytes(3 * width, '\0');
    for (size_t k = 0; k < 3; ++k) {
      const double w = c.want[k];
      char *at = bytes.data() + k * width;
      auto store = [&](auto x) { std::memcpy(at, &x, sizeof x); };
      switch (c.type) {
      case P::FLOAT:
        typed.add_float_data(static_cast<float>(w));
        store(static_cast<float>(w));
        break;
      case P::DOUBLE:
        typed.add_double_data(w);
        store(w);
        break;
      case P::INT64:
        typed.add_int64_data(static_cast<int64_t>(w));
        store(static_cast<int64_t>(w));
        break;
      case P::UINT32:
        typed.add_uint64_data(static_cast<uint64_t>(w));
        store(static_cast<uint32_t>(w));
        break;
      case P::UINT64: {
        const uint64_t x = k == 2 ? ~uint64_t(0) : static_cast<uint64_t>(w);
        typed.add_uint64_data(x);
        store(x);
        break;
      }
      case P::FLOAT16:
      case P::BFLOAT16: {
        const uint16_t b = (c.type == P::FLOAT16 ? f16 : bf16)[k];
        typed.add_int32_data(b);
        store(b);
        break;
      }
      default: {
        const int64_t x = static_cast<int64_t>(w);
        typed.add_int32_data(static_cast<int32_t>(x));
        std::memcpy(at, &x, width); // the low bytes, little-endian
        break;
      }
      }
    }
    raw.set_raw_data(bytes);
    for (const onnx::TensorProto *t : {&typed, &raw}) {
      auto v = decodeTensorProto(*t);
      ASSERT_TRUE(bool(v)) << llvm::toString(v.takeError());
      EXPECT_EQ(v->shape, std::vector<int64_t>{3});
      EXPECT_EQ(v->width, width);
      EXPECT_EQ(v->bytes, bytes);
      ASSERT_EQ(v->elements(), 3);
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(v->value(k), c.want[static_cast<size_t>(k)]) << "element " << k;
    }
  }
  // A scalar has rank 0 and one value; an empty tensor none.
  onnx::TensorProto scalar = tensorOf(P::INT64, {});
  scalar.add_int64_data(-4);
  auto s = decodeTensorProto(scalar);
  ASSERT_TRUE(bool(s));
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->value(0), -4);
  auto none = decodeTensorProto(tensorOf(P::FLOAT, {2, 0}));
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(none->elements(), 0);
}

TEST(TensorProto, RefusesWhatDoesNotMatchItsShapeOrType) {
  using P = onnx::TensorProto;
  onnx::TensorProto f = tensorOf(P::FLOAT, {2, 3});
  for (int k = 0; k < 5; ++k)
    f.add_float_data(k);
  EXPECT_EQ(decodeError(f), "shape [2, 3] needs 6 values; the tensor has 5");
  onnx::TensorProto r = tensorOf(P::INT32, {4});
  r.set_raw_data(std::string(12, '\0'));
  EXPECT_EQ(decodeError(r), "shape [4] of int32 needs 16 bytes of raw data; it has 12");
  EXPECT_EQ(decodeError(tensorOf(P::STRING, {1})),
            "element type string holds no numbers Tofu reads (float, double, float16, bfloat16, "
            "int8 to int64, uint8 to uint64, bool)");
  EXPECT_EQ(decodeError(tensorOf(P::COMPLEX64, {1})).find("element type complex64 holds no"), 0u);
  EXPECT_EQ(tensorProtoTypeName(999), "code 999");
  EXPECT_EQ(decodeError(tensorOf(999, {1})).find("element type code 999 holds no"), 0u);
  EXPECT_EQ(decodeError(tensorOf(P::FLOAT, {2, -1})), "shape [2, -1] has a negative dimension");
  EXPECT_EQ(decodeError(tensorOf(P::DOUBLE, {1 << 30, 1 << 30, 1 << 30})),
            "shape [1073741824, 1073741824, 1073741824] is too large");
  onnx::TensorProto ext = tensorOf(P::FLOAT, {1});
  ext.set_data_location(P::EXTERNAL);
  EXPECT_EQ(decodeError(ext), "its data is in an external file");
  // A typed value beyond its type's range, which raw data cannot hold.
  onnx::TensorProto u8 = tensorOf(P::UINT8, {2});
  u8.add_int32_data(7);
  u8.add_int32_data(300);
  EXPECT_EQ(decodeError(u8), "value 1 holds 300, beyond the range of uint8");
  onnx::TensorProto b = tensorOf(P::BOOL, {1});
  b.add_int32_data(2);
  EXPECT_EQ(decodeError(b), "value 0 holds 2, beyond the range of bool");
  onnx::TensorProto u32 = tensorOf(P::UINT32, {1});
  u32.add_uint64_data(uint64_t(1) << 32);
  EXPECT_EQ(decodeError(u32), "value 0 holds 4294967296, beyond the range of uint32");
}

/// bfloat16 rounding by arithmetic, independent of the bit trick: the quantum at x's
/// exponent (8 significant bits, subnormal from 2^-126) scaled away, rounded to the nearest
/// even in double, scaled back; infinite past the largest bfloat16.
float bf16ByArithmetic(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0)
    return x;
  const int e = std::max(std::ilogb(x), -126);
  const double q = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(double(x) / q) * q;
  const double max = 3.3895313892515355e38;
  return r > max ? INFINITY : r < -max ? -INFINITY : static_cast<float>(r);
}

TEST(Bf16, RoundsToNearestEvenAsArithmeticDoes) {
  // Every 1021st float32 bit pattern (all exponents, both signs, subnormals and NaNs), and
  // the cases the rounding turns on.
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) {
    const uint32_t v = static_cast<uint32_t>(u);
    float x;
    std::memcpy(&x, &v, sizeof x);
    xs.push_back(x);
  }
  for (uint32_t v : {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0x7f7f7fffu,
                     0xff7f8000u, 0x00008000u, 0x00018000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                     0x7f800001u, 0xffc00001u}) {
    float x;
    std::memcpy(&x, &v, sizeof x);
    xs.push_back(x);
  }
  std::vector<uint16_t> vec(xs.size());
  toBf16(xs.data(), vec.data(), xs.size());
  size_t wrong = 0, nans = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint16_t bits = bf16Bits(xs[i]);
    const float got = floatFromBf16(bits), want = bf16ByArithmetic(xs[i]);
    if (std::isnan(want)) {
      ++nans;
      wrong += !std::isnan(got) || (bits & 0x0040u) == 0 || (bits >> 15) != std::signbit(xs[i]);
    } else {
      wrong += std::memcmp(&got, &want, sizeof got) != 0; // -0 kept, too
    }
    wrong += vec[i] != bits;
  }
  EXPECT_EQ(wrong, 0u) << "of " << xs.size();
  EXPECT_GT(nans, 10000u);
  EXPECT_EQ(bf16Bits(1.00390625f), 0x3f80); // a tie, to even
  EXPECT_EQ(bf16Bits(1.01171875f), 0x3f82); // a tie, to even (up)
  EXPECT_EQ(roundToBf16(3.4e38f), INFINITY);
}

TEST(Bf16, WideningIsExact) {
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i * 7);
  std::vector<float> wide(all.size());
  fromBf16(all.data(), wide.data(), all.size());
  size_t wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &wide[i], sizeof u);
    wrong += u != static_cast<uint32_t>(all[i]) << 16;
    if (!std::isnan(wide[i]))
      wrong += bf16Bits(wide[i]) != all[i]; // narrowing a bfloat16 gives it back
  }
  EXPECT_EQ(wrong, 0u);
}

// Every element type's name, ONNX code and safetensors dtype lead back to it, and its width
// and class are ONNX's and safetensors' (codes from onnx.proto's TensorProto.DataType).
TEST(ElementType, NamesAndCodesRoundTrip) {
  struct Want {
    ElementType type;
    const char *name;
    int32_t onnx;
    const char *safetensors;
    unsigned bytes;
    bool isFloat;
  };
  const Want want[] = {
      {ElementType::Float32, "float32", 1, "F32", 4, true},
      {ElementType::Float64, "float64", 11, "F64", 8, true},
      {ElementType::Float16, "float16", 10, "F16", 2, true},
      {ElementType::BFloat16, "bfloat16", 16, "BF16", 2, true},
      {ElementType::Int64, "int64", 7, "I64", 8, false},
      {ElementType::Int32, "int32", 6, "I32", 4, false},
      {ElementType::Int16, "int16", 5, "I16", 2, false},
      {ElementType::Int8, "int8", 3, "I8", 1, false},
      {ElementType::UInt8, "uint8", 2, "U8", 1, false},
      {ElementType::Bool, "bool", 9, "BOOL", 1, false},
  };
  ASSERT_EQ(std::size(want), std::size(kElementTypes));
  for (size_t i = 0; i < std::size(want); ++i) {
    const Want &w = want[i];
    EXPECT_EQ(kElementTypes[i], w.type);
    EXPECT_STREQ(elementTypeName(w.type), w.name);
    EXPECT_EQ(elementTypeNamed(w.name), w.type);
    EXPECT_EQ(onnxDataType(w.type), w.onnx);
    EXPECT_EQ(elementTypeOfOnnx(w.onnx), w.type);
    EXPECT_STREQ(safetensorsDtype(w.type), w.safetensors);
    EXPECT_EQ(elementTypeOfSafetensors(w.safetensors), w.type);
    EXPECT_EQ(elementTypeBytes(w.type), w.bytes) << w.name;
    EXPECT_EQ(isFloatType(w.type), w.isFloat) << w.name;
  }
  // What is none of them: strings, uint16, complex, and names in other spellings.
  for (int32_t code : {0, 4, 8, 12, 13, 14, 15, 17})
    EXPECT_EQ(elementTypeOfOnnx(code), std::nullopt) << code;
  for (const char *name : {"float", "double", "Float32", "fp32", ""})
    EXPECT_EQ(elementTypeNamed(name), std::nullopt) << name;
  EXPECT_EQ(elementTypeOfSafetensors("U16"), std::nullopt);
  EXPECT_EQ(elementTypeNames(),
            "float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool");
}

} // namespace
} // namespace tofu
