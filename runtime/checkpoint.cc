// Checkpoints in safetensors: whole (model.safetensors) and sharded (tile files + index.json).
#include "runtime/checkpoint.h"
#include "support/float16.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "analysis/checked.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"
#include "runtime/safetensors.h"
#include "support/bf16.h"
#include "support/files.h"

namespace tofu {
namespace {

llvm::Error fail(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s", msg.c_str());
}

/// Opens a checkpoint's safetensors file: its tensors are weights and optimiser state, so
/// floating-point.
llvm::Expected<std::unique_ptr<SafetensorsFile>> openCheckpointFile(const std::string &path) {
  auto f = openSafetensors(path);
  if (!f)
    return f.takeError();
  for (const auto &[name, t] : (*f)->tensors)
    if (!safetensorsFloating(t.dtype))
      return fail(fmt::format("{}: tensor '{}': dtype {} is not a floating-point type Tofu "
                              "loads (F32, F64, F16, BF16)",
                              path, name, safetensorsDtypeName(t.dtype)));
  return f;
}

/// The error for element `flat` of tensor `t` of `f`, `x`, which is not finite (or, from
/// float64, beyond float32).
llvm::Error nonFinite(const SafetensorsFile &f, const SafetensorsTensor &t, int64_t flat,
                      double x) {
  std::vector<int64_t> at(t.shape.size());
  for (size_t a = t.shape.size(); a-- > 0;) {
    const int64_t e = std::max<int64_t>(1, t.shape[a]);
    at[a] = flat % e;
    flat /= e;
  }
  return fail(fmt::format("{}: tensor '{}' holds {} at [{}]{}: a checkpoint's weights and "
                          "state must be finite (was it saved after the loss diverged?)",
                          f.path, t.name, x, fmt::join(at, ", "),
                          std::isfinite(x) ? ", beyond float32's range" : ""));
}

/// Copies `region` of tensor `t` of `f` (whose values lie over `stored`) into `out` (laid
/// over `want`); `region` lies in both boxes. Reads one contiguous run of the file at a time.
template <typename T>
llvm::Error readRegion(const SafetensorsFile &f, const SafetensorsTensor &t, const Box &stored,
                       const Box &want, const Box &region, T *out) {
  const size_t d = region.size();
  // Dimensions j.. are one contiguous run in both layouts: every one after the first of
  // them spans the whole of both boxes.
  size_t j = d;
  while (j > 1 && region[j - 1] == stored[j - 1] && region[j - 1] == want[j - 1])
    --j;
  if (j > 0)
    --j;
  int64_t run = 1;
  for (size_t a = j; a < d; ++a)
    run *= region[a].size();
  if (run == 0)
    return llvm::Error::success();
  std::vector<int64_t> sStride(d, 1), wStride(d, 1);
  for (size_t a = d; a-- > 1;) {
    sStride[a - 1] = sStride[a] * stored[a].size();
    wStride[a - 1] = wStride[a] * want[a].size();
  }
  std::vector<char> buf(static_cast<size_t>(run) * t.width);
  std::vector<int64_t> at(d);
  for (size_t a = 0; a < d; ++a)
    at[a] = region[a].lo;
  for (;;) {
    int64_t src = 0, dst = 0;
    for (size_t a = 0; a < d; ++a) {
      src += (at[a] - stored[a].lo) * sStride[a];
      dst += (at[a] - want[a].lo) * wStride[a];
    }
    if (llvm::Error e =
            f.read(buf.data(), buf.size(), t.begin + static_cast<uint64_t>(src) * t.width))
      return e;
    for (int64_t e = 0; e < run; ++e) {
      const double x = safetensorsElement(t.dtype, buf.data() + e * t.width);
      const T held = static_cast<T>(x);
      // A weight or a state that is not finite would surface steps later as an update
      // that went wrong, naming another tensor: it is refused here, naming this one.
      if (!std::isfinite(held))
        return nonFinite(f, t, src + e, x);
      out[dst + e] = held;
    }
    size_t a = j; // the odometer over the dimensions before the run
    while (a > 0) {
      --a;
      if (++at[a] < region[a].hi)
        break;
      at[a] = region[a].lo;
      if (a == 0)
        return llvm::Error::success();
    }
    if (j == 0)
      return llvm::Error::success();
  }
}

/// A tensor to write: float32 values from `f32` or `f64`.
struct StItem {
  std::string key;
  std::vector<int64_t> shape;
  int64_t count = 0;
  const float *f32 = nullptr;
  const double *f64 = nullptr;
};

/// Writes a safetensors file of `type` tensors beside `path`, then renames it into place.
llvm::Error writeSafetensors(const std::string &path, const std::vector<StItem> &items,
                             const std::map<std::string, std::string> &metadata, StoredType type) {
  const uint64_t width = static_cast<uint64_t>(storedTypeBytes(type));
  nlohmann::json header = nlohmann::json::object();
  uint64_t at = 0;
  for (const StItem &it : items) {
    uint64_t bytes = static_cast<uint64_t>(it.count) * width;
    header[it.key] = {{"dtype", safetensorsDtypeName(safetensorsDtypeOf(type))},
                      {"shape", it.shape},
                      {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  nlohmann::json meta = nlohmann::json::object();
  for (const auto &[k, v] : metadata)
    meta[k] = v;
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  {
    auto file = AtomicFile::create(path, "a checkpoint");
    if (!file)
      return file.takeError();
    AtomicFile &out = *file;
    uint64_t n = text.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(len, 8);
    out.write(text);
    std::vector<float> buf;
    std::vector<uint16_t> narrow;
    for (const StItem &it : items) {
      if (it.f32)
        buf.assign(it.f32, it.f32 + it.count);
      else
        buf.assign(it.f64, it.f64 + it.count);
      if (type == StoredType::F32) {
        out.write(buf.data(), buf.size() * 4);
        continue;
      }
      narrow.resize(buf.size());
      if (type == StoredType::BF16)
        toBf16(buf.data(), narrow.data(), buf.size());
      else
        for (size_t i = 0; i < buf.size(); ++i) {
          narrow[i] = floatToHalf(buf[i]);
          // Not made infinite in silence: such a checkpoint would not load.
          if (std::isfinite(buf[i]) && !std::isfinite(halfToFloat(narrow[i])))
            return fail(fmt::format("{}: tensor '{}' holds {} at element {}, beyond float16's "
                                    "range (65504): save it as bfloat16 or float32",
                                    path, it.key, buf[i], i));
        }
      out.write(narrow.data(), narrow.size() * 2);
    }
    return out.commit();
  }
}

/// The generation of a tile file's name `tiles-G-R.safetensors` (or its .partial), else 0.
unsigned tileFileGeneration(const std::string &name) {
  unsigned g = 0, r = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "tiles-%u-%u.safetensors%n", &g, &r, &used) == 2 &&
      (name.size() == static_cast<size_t>(used) || name.substr(used) == ".partial"))
    return g;
  return 0;
}

/// Removes the files in `dir` of every checkpoint but the tile files of generation `keep`
/// (0: of every sharded one) and, with `keepWhole`, model.safetensors.
void removeOtherCheckpoints(const std::string &dir, unsigned keep, bool keepWhole) {
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const unsigned g = tileFileGeneration(name);
    if ((g != 0 && g != keep) || (!keepWhole && name == "model.safetensors") ||
        (keep == 0 && name == "index.json"))
      std::filesystem::remove(entry.path(), ec);
  }
}

/// A box as JSON [[lo, hi], ...] (boxOf reads it back).
nlohmann::json boxJson(const Box &b) {
  nlohmann::json j = nlohmann::json::array();
  for (const Range &r : b)
    j.push_back({r.lo, r.hi});
  return j;
}

std::string boxText(const Box &b) {
  std::string s;
  for (size_t a = 0; a < b.size(); ++a)
    s += fmt::format("{}{}:{}", a ? "," : "", b[a].lo, b[a].hi);
  return s;
}

/// The name of a tile of `tensor` in its file: `<tensor>@<lo>:<hi>,...`, its box.
std::string tileKey(const std::string &tensor, const Box &box) {
  return tensor + "@" + boxText(box);
}

/// Why `boxes` do not tile a tensor of `shape` exactly ("" when they do).
std::string coverageProblem(const std::vector<int64_t> &shape, const std::vector<Box> &boxes) {
  int64_t covered = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box &b = boxes[i];
    if (b.size() != shape.size())
      return fmt::format("a tile has {} dimensions, the tensor {}", b.size(), shape.size());
    for (size_t a = 0; a < b.size(); ++a)
      if (b[a].lo < 0 || b[a].lo > b[a].hi || b[a].hi > shape[a])
        return fmt::format("the tile [{}] lies outside the tensor", boxText(b));
    for (size_t o = 0; o < i; ++o)
      if (boxElements(intersectBoxes(b, boxes[o])) > 0)
        return fmt::format("the tiles [{}] and [{}] overlap", boxText(b), boxText(boxes[o]));
    covered += boxElements(b);
  }
  const int64_t total = boxElements(wholeBox(shape));
  if (covered != total)
    return fmt::format("its tiles cover {} of its {} elements", covered, total);
  return "";
}

} // namespace

const char *storedTypeName(StoredType t) {
  switch (t) {
  case StoredType::F32:
    return "f32";
  case StoredType::BF16:
    return "bf16";
  case StoredType::F16:
    return "f16";
  }
  return "?";
}

SafetensorsDtype safetensorsDtypeOf(StoredType t) {
  switch (t) {
  case StoredType::F32:
    return SafetensorsDtype::F32;
  case StoredType::BF16:
    return SafetensorsDtype::BF16;
  case StoredType::F16:
    return SafetensorsDtype::F16;
  }
  return SafetensorsDtype::F32;
}

std::string checkpointFile(const std::string &dir) { return dir + "/model.safetensors"; }
std::string checkpointIndexFile(const std::string &dir) { return dir + "/index.json"; }

llvm::Error saveCheckpoint(const std::string &dir, const Checkpoint &c, StoredType type) {
  if (!makeDirs(dir))
    return fail(fmt::format("{}: cannot create the directory: {}", dir, std::strerror(errno)));
  std::vector<StItem> items;
  for (const auto &[name, t] : c.tensors)
    items.push_back({name, t.shape, t.size(), nullptr, t.data.data()});
  if (llvm::Error e = writeSafetensors(checkpointFile(dir), items, c.metadata, type))
    return e;
  removeOtherCheckpoints(dir, 0, true);
  return llvm::Error::success();
}

llvm::Expected<Checkpoint> loadCheckpoint(const std::string &dir) {
  auto f = openCheckpointFile(checkpointFile(dir));
  if (!f)
    return f.takeError();
  Checkpoint c;
  c.metadata = (*f)->metadata;
  for (const auto &[name, t] : (*f)->tensors) {
    Tensor v(t.shape);
    const Box all = wholeBox(t.shape);
    if (llvm::Error e = readRegion(**f, t, all, all, all, v.data.data()))
      return e;
    c.tensors.emplace(name, std::move(v));
  }
  return c;
}

unsigned nextCheckpointGeneration(const std::string &dir) {
  unsigned most = 0;
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(dir, ec))
    most = std::max(most, tileFileGeneration(entry.path().filename().string()));
  return most + 1;
}

std::string tileFileName(unsigned generation, unsigned part) {
  return fmt::format("tiles-{}-{}.safetensors", generation, part);
}

llvm::Expected<std::vector<TileEntry>> writeTileFile(const std::string &dir,
                                                     const std::string &file,
                                                     const std::vector<CheckpointTile> &tiles,
                                                     StoredType type) {
  if (!makeDirs(dir))
    return fail(fmt::format("{}: cannot create the directory: {}", dir, std::strerror(errno)));
  std::vector<StItem> items;
  std::vector<TileEntry> entries;
  for (const CheckpointTile &t : tiles) {
    std::vector<int64_t> extents;
    for (const Range &r : t.box)
      extents.push_back(r.size());
    if (static_cast<int64_t>(t.data.size()) != boxElements(t.box))
      return fail(fmt::format("tile [{}] of '{}' has {} values for {} elements", boxText(t.box),
                              t.tensor, t.data.size(), boxElements(t.box)));
    TileEntry e{t.tensor, t.shape, t.box, file, tileKey(t.tensor, t.box)};
    items.push_back({e.key, extents, boxElements(t.box), t.data.data(), nullptr});
    entries.push_back(std::move(e));
  }
  if (llvm::Error e = writeSafetensors(dir + "/" + file, items, {{"format", "tofu tiles"}}, type))
    return e;
  return entries;
}

std::string encodeTileEntries(const std::vector<TileEntry> &entries) {
  nlohmann::json j = nlohmann::json::array();
  for (const TileEntry &e : entries) {
    j.push_back({{"tensor", e.tensor},
                 {"shape", e.shape},
                 {"box", boxJson(e.box)},
                 {"file", e.file},
                 {"key", e.key}});
  }
  return j.dump();
}

namespace {

/// A box from JSON [[lo, hi], ...].
std::optional<Box> boxOf(const nlohmann::json &j) {
  if (!j.is_array())
    return std::nullopt;
  Box b;
  for (const nlohmann::json &r : j) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
      return std::nullopt;
    const int64_t lo = r[0].get<int64_t>(), hi = r[1].get<int64_t>();
    if (lo < 0 || lo > hi)
      return std::nullopt;
    b.push_back({lo, hi});
  }
  return b;
}

std::optional<std::vector<int64_t>> shapeOf(const nlohmann::json &j) {
  if (!j.is_array())
    return std::nullopt;
  std::vector<int64_t> s;
  for (const nlohmann::json &d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return std::nullopt;
    s.push_back(d.get<int64_t>());
  }
  if (!checkedProduct(s)) // an element count past int64
    return std::nullopt;
  return s;
}

} // namespace

llvm::Expected<std::vector<TileEntry>> decodeTileEntries(const std::string &text) {
  std::vector<TileEntry> out;
  try {
    for (const nlohmann::json &j : nlohmann::json::parse(text)) {
      auto box = boxOf(j.at("box"));
      auto shape = shapeOf(j.at("shape"));
      if (!box || !shape)
        return fail("a tile entry's box or shape is malformed");
      out.push_back({j.at("tensor").get<std::string>(), *shape, *box,
                     j.at("file").get<std::string>(), j.at("key").get<std::string>()});
    }
  } catch (const nlohmann::json::exception &e) {
    return fail(std::string("malformed tile entries: ") + e.what());
  }
  return out;
}

llvm::Error writeCheckpointIndex(const std::string &dir, unsigned generation,
                                 const std::vector<TileEntry> &entries,
                                 const std::map<std::string, std::string> &metadata) {
  std::map<std::string, std::vector<const TileEntry *>> byTensor;
  for (const TileEntry &e : entries)
    byTensor[e.tensor].push_back(&e);
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto &[name, list] : byTensor) {
    std::vector<Box> boxes;
    nlohmann::json tiles = nlohmann::json::array();
    for (const TileEntry *e : list) {
      if (e->shape != list.front()->shape)
        return fail(fmt::format("tensor '{}': its tiles disagree on its shape", name));
      boxes.push_back(e->box);
      tiles.push_back({{"file", e->file}, {"key", e->key}, {"box", boxJson(e->box)}});
    }
    if (std::string bad = coverageProblem(list.front()->shape, boxes); !bad.empty())
      return fail(fmt::format("tensor '{}': {}", name, bad));
    tensors[name] = {{"shape", list.front()->shape}, {"tiles", tiles}};
  }
  nlohmann::json meta = nlohmann::json::object();
  for (const auto &[k, v] : metadata)
    meta[k] = v;
  const std::string path = checkpointIndexFile(dir);
  {
    // One line per tensor: readable, and diffable between checkpoints.
    std::string out = fmt::format("{{\"format\": \"tofu sharded checkpoint\", \"version\": 1, "
                                  "\"generation\": {},\n \"metadata\": {},\n \"tensors\": {{",
                                  generation, meta.dump());
    bool first = true;
    for (auto it = tensors.begin(); it != tensors.end(); ++it, first = false)
      out +=
          (first ? "\n  " : ",\n  ") + nlohmann::json(it.key()).dump() + ": " + it.value().dump();
    out += "}}\n";
    if (llvm::Error e = writeFileAtomically(path, out, "a checkpoint index"))
      return e;
  }
  removeOtherCheckpoints(dir, generation, false);
  return llvm::Error::success();
}

// --- Reading ---------------------------------------------------------------------------

struct CheckpointReader::Impl {
  struct Piece {
    const SafetensorsFile *file;
    const SafetensorsTensor *tensor;
    Box box;
  };
  std::string path;
  bool sharded = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<Piece>> pieces;
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::CheckpointReader(CheckpointReader &&) noexcept = default;
CheckpointReader &CheckpointReader::operator=(CheckpointReader &&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

llvm::Expected<CheckpointReader> CheckpointReader::open(const std::string &dir) {
  auto m = std::make_unique<Impl>();
  const std::string indexPath = checkpointIndexFile(dir);
  struct stat st;
  if (::stat(indexPath.c_str(), &st) != 0) { // a whole checkpoint
    if (::stat(dir.c_str(), &st) != 0)
      return fail(fmt::format("{}: cannot open: {}", dir, std::strerror(errno)));
    if (::stat(checkpointFile(dir).c_str(), &st) != 0)
      return fail(fmt::format("{}: holds no checkpoint (neither index.json nor "
                              "model.safetensors)",
                              dir));
    auto f = openCheckpointFile(checkpointFile(dir));
    if (!f)
      return f.takeError();
    m->path = checkpointFile(dir);
    m->metadata = (*f)->metadata;
    for (const auto &[name, t] : (*f)->tensors) {
      m->shapes[name] = t.shape;
      m->pieces[name].push_back({f->get(), &t, wholeBox(t.shape)});
    }
    m->files.push_back(std::move(*f));
    return CheckpointReader(std::move(m));
  }
  m->path = indexPath;
  m->sharded = true;
  auto bad = [&](const std::string &what) { return fail(indexPath + ": " + what); };
  nlohmann::json index;
  {
    auto text = readFile(indexPath, "a checkpoint index");
    if (!text)
      return fail(llvm::toString(text.takeError()));
    try {
      index = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception &e) {
      return bad(std::string("not JSON: ") + e.what());
    }
  }
  if (!index.is_object() || !index.contains("format") ||
      index["format"] != "tofu sharded checkpoint")
    return bad("not the index of a sharded Tofu checkpoint (format \"tofu sharded checkpoint\")");
  if (!index.contains("version") || index["version"] != 1)
    return bad("version " + (index.contains("version") ? index["version"].dump() : "missing") +
               "; this Tofu reads version 1");
  if (!index.contains("tensors") || !index["tensors"].is_object())
    return bad("no \"tensors\" object");
  if (index.contains("metadata") && index["metadata"].is_object())
    for (auto it = index["metadata"].begin(); it != index["metadata"].end(); ++it)
      if (it.value().is_string())
        m->metadata[it.key()] = it.value().get<std::string>();
  std::map<std::string, const SafetensorsFile *> opened;
  for (auto it = index["tensors"].begin(); it != index["tensors"].end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &v = it.value();
    auto badTensor = [&](const std::string &what) {
      return bad(fmt::format("tensor '{}': {}", name, what));
    };
    std::optional<std::vector<int64_t>> shape;
    if (!v.is_object() || !(shape = shapeOf(v.value("shape", nlohmann::json()))) ||
        !v.contains("tiles") || !v["tiles"].is_array())
      return badTensor("needs a shape (non-negative integers) and an array of tiles");
    std::vector<Box> boxes;
    for (const nlohmann::json &tile : v["tiles"]) {
      std::optional<Box> box;
      if (!tile.is_object() || !tile.contains("file") || !tile["file"].is_string() ||
          !tile.contains("key") || !tile["key"].is_string() ||
          !(box = boxOf(tile.value("box", nlohmann::json()))))
        return badTensor("a tile needs a file, a key and a box [[lo, hi], ...]");
      const std::string file = tile["file"].get<std::string>(),
                        key = tile["key"].get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
        return badTensor("tile file '" + file +
                         "' is not a file name in the checkpoint's directory");
      const SafetensorsFile *f = opened[file];
      if (!f) {
        auto o = openCheckpointFile(dir + "/" + file);
        if (!o)
          return badTensor(llvm::toString(o.takeError()));
        f = opened[file] = o->get();
        m->files.push_back(std::move(*o));
      }
      // A tile's name carries its box (writeTileFile): the index must say the same, or the
      // tile would load into another tile's place.
      if (key != tileKey(name, *box))
        return badTensor(fmt::format("tile '{}' is named for another place than its box [{}] "
                                     "(its name would be '{}')",
                                     key, boxText(*box), tileKey(name, *box)));
      auto t = f->tensors.find(key);
      if (t == f->tensors.end())
        return badTensor(fmt::format("{} has no tile '{}'", f->path, key));
      std::vector<int64_t> extents;
      for (const Range &r : *box)
        extents.push_back(r.size());
      if (t->second.shape != extents)
        return badTensor(fmt::format("tile '{}' of {} has shape [{}], its box [{}]", key, f->path,
                                     fmt::join(t->second.shape, ", "), boxText(*box)));
      boxes.push_back(*box);
      m->pieces[name].push_back({f, &t->second, *box});
    }
    if (std::string problem = coverageProblem(*shape, boxes); !problem.empty())
      return badTensor(problem);
    m->shapes[name] = *shape;
    m->pieces[name]; // a tensor of no elements may have no tiles
  }
  return CheckpointReader(std::move(m));
}

const std::string &CheckpointReader::path() const { return impl_->path; }
bool CheckpointReader::sharded() const { return impl_->sharded; }
const std::map<std::string, std::string> &CheckpointReader::metadata() const {
  return impl_->metadata;
}
const std::map<std::string, std::vector<int64_t>> &CheckpointReader::shapes() const {
  return impl_->shapes;
}

llvm::Error CheckpointReader::read(const std::string &name, const Box &box, float *out) const {
  auto s = impl_->shapes.find(name);
  if (s == impl_->shapes.end())
    return fail(fmt::format("{}: no tensor '{}'", impl_->path, name));
  if (box.size() != s->second.size() || !boxContains(wholeBox(s->second), box))
    return fail(fmt::format("{}: tensor '{}' of shape [{}] has no box [{}]", impl_->path, name,
                            fmt::join(s->second, ", "), boxText(box)));
  for (const Impl::Piece &p : impl_->pieces.at(name)) {
    const Box region = intersectBoxes(p.box, box);
    if (boxElements(region) == 0)
      continue;
    if (llvm::Error e = readRegion(*p.file, *p.tensor, p.box, box, region, out))
      return e;
  }
  return llvm::Error::success();
}

llvm::Expected<Checkpoint> CheckpointReader::readAll() const {
  Checkpoint c;
  c.metadata = impl_->metadata;
  for (const auto &[name, shape] : impl_->shapes) {
    std::vector<float> f(std::max<int64_t>(1, boxElements(wholeBox(shape))));
    if (llvm::Error e = read(name, wholeBox(shape), f.data()))
      return e;
    Tensor t(shape);
    std::copy(f.begin(), f.begin() + t.size(), t.data.begin());
    c.tensors.emplace(name, std::move(t));
  }
  return c;
}

} // namespace tofu
