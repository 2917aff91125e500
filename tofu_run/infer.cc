// tofu-run --infer: the forward graph once on the engine, on the inputs the user gives; every
// output reported, and written as .npy under --output-dir.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"
#include "runtime/checkpoint.h"
#include "runtime/cpu_executor.h"
#include "runtime/data_feed.h"
#include "runtime/dataset.h"
#include "runtime/trainer.h"
#include "support/errors.h"
#include "tofu_run/driver.h"
#include "tofu_run/options.h"
#include "llvm/Support/raw_ostream.h"

namespace tofurun {

namespace {

/// The path --output-dir gives output `out` ("" without --output-dir).
std::string outputFile(const std::string &out) {
  if (outputDir.empty())
    return "";
  std::string safe = out;
  for (char &c : safe)
    if (c == '/' || c == '\\' || c == ':')
      c = '_';
  return outputDir + "/" + safe + ".npy";
}

/// The output folder, made before any step, so that a step is never run for nothing.
llvm::Error makeOutputDir() {
  if (!outputDir.empty() && group->rank() == 0)
    if (std::error_code ec = std::error_code();
        !std::filesystem::create_directories(std::string(outputDir), ec) && ec)
      return tofu::stringError(
          fmt::format("--output-dir {}: {}", std::string(outputDir), ec.message()));
  return llvm::Error::success();
}

/// The outputs that hold no element: written (empty) and reported like the others.
llvm::Error reportEmptyOutputs(const tofu::Graph &g, nlohmann::json &j, bool json) {
  for (const auto &[out, shape] : g.emptyOutputs) {
    const std::string file = outputFile(out);
    if (!file.empty() && group->rank() == 0)
      if (llvm::Error e = tofu::writeNpy(file, shape, {}))
        return e;
    j["outputs"][out] = {{"shape", shape}, {"file", file}, {"min", 0}, {"max", 0}, {"mean", 0}};
    if (!json)
      llvm::outs() << fmt::format("| {} | [{}] | (empty) | | | {} |\n", out, fmt::join(shape, ", "),
                                  file);
  }
  return llvm::Error::success();
}

/// An input given by --input, bound to its tensor.
struct BoundInput {
  unsigned tensor;
  tofu::DataArray array; ///< bfloat16 bits already decoded
};

/// The --input arrays bound to the problem's inputs, each of its tensor's exact shape; an
/// input the importer took whole is skipped. Every data input must have a value (given, a
/// constant, an initial value or a random input). Errors say what does not fit (exit 2).
llvm::Expected<std::vector<BoundInput>> bindInputs(const tofu::Problem &p, const tofu::Graph &g,
                                                   const std::string &name,
                                                   const tofu::InputArrays &inputs) {
  std::vector<BoundInput> bound;
  std::set<std::string> given;
  for (const auto &[input, array] : inputs.arrays) {
    const int t = tofu::findTensor(p, input);
    const tofu::TensorInfo *info = g.tensor(input);
    if ((t < 0 && info && info->role == tofu::TensorRole::Input) ||
        g.inputsTakenWhole.count(input)) {
      // An input no op reads: the importer took its values as a constant (a shape, axes).
      given.insert(input);
      continue;
    }
    if (t < 0 || p.tensors[t].producer >= 0 || p.tensors[t].role != tofu::TensorRole::Input)
      return tofu::usageError(fmt::format("--input: the model has no input '{}'", input));
    given.insert(input);
    BoundInput b{static_cast<unsigned>(t), array};
    // A bfloat16 input stored as its uint16 bits (as ONNX 1.12's test files store them).
    if (b.array.onnxType == 4 /* UINT16 */ && info && info->dtype == tofu::ElementType::BFloat16)
      tofu::bfloat16FromBits(b.array);
    if (b.array.shape != p.tensors[t].shape)
      return tofu::usageError(fmt::format("--input {}: {} has shape [{}]; the input's is [{}]",
                                          input, array.path, fmt::join(array.shape, ", "),
                                          fmt::join(p.tensors[t].shape, ", ")));
    bound.push_back(std::move(b));
  }
  std::string missing;
  for (const tofu::ProblemTensor &t : p.tensors)
    if (t.producer < 0 && t.role == tofu::TensorRole::Input && !t.shape.empty() &&
        !given.count(t.name) && !g.constants.count(t.name) && !g.initialValues.count(t.name) &&
        !g.randomInputs.count(t.name))
      missing +=
          (missing.empty() ? "" : ", ") + fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", "));
  if (!missing.empty())
    return tofu::usageError(name +
                            ": --infer needs a value for every data input; --input gives "
                            "none for " +
                            missing);
  return bound;
}

/// The element type of graph tensor `name` (float32 when the graph does not say).
tofu::ElementType dtypeOf(const tofu::Graph &g, const std::string &name) {
  const tofu::TensorInfo *info = g.tensor(name);
  return info ? info->dtype : tofu::ElementType::Float32;
}

bool isInteger(tofu::ElementType dtype) { return !tofu::isFloatType(dtype); }

/// The largest integers the engines' float32 and the interpreter's double hold exactly.
constexpr double kFloatExact = 16777216.0, kDoubleExact = 9007199254740992.0;

/// The first value of an integer tensor at or past `limit` in magnitude, if any (at it, it
/// may be a rounded neighbour).
std::optional<double> pastLimit(tofu::ElementType dtype, const std::vector<double> &values,
                                double limit) {
  if (isInteger(dtype))
    for (double v : values)
      if (std::fabs(v) >= limit)
        return v;
  return std::nullopt;
}

/// What an integer tensor past the arithmetic's exact range is told as.
std::string inexact(const char *what, const std::string &tensor, tofu::ElementType dtype, double v,
                    bool interp) {
  return fmt::format("{} '{}' ({}) holds {:.0f}, at or past 2^{}, beyond which the {} does not "
                     "hold every integer exactly",
                     what, tensor, tofu::elementTypeName(dtype), v, interp ? 53 : 24,
                     interp ? "interpreter's double" : "engine's float32");
}

/// Reports and writes the outputs (`tensorOf` gives each whole, by name), then the empty
/// ones, under `headline` (what ran).
int reportOutputs(const tofu::Graph &g, const std::string &name, const std::string &headline,
                  double seconds, int64_t bytesMoved, bool interp,
                  const std::function<tofu::Tensor(const std::string &)> &tensorOf) {
  const bool json = format == Format::Json;
  nlohmann::json j;
  j["model"] = name;
  j["workers"] = unsigned(workers);
  j["seconds"] = seconds;
  j["bytes_moved"] = bytesMoved;
  if (!json)
    llvm::outs() << fmt::format("{}: {}\n\n| output | shape | min | max | mean | file |\n| --- | "
                                "--- | ---: | ---: | ---: | --- |\n",
                                name, headline);
  for (const std::string &out : g.outputs) {
    const tofu::Tensor x = tensorOf(out);
    const tofu::ElementType dtype = dtypeOf(g, out);
    if (auto v = pastLimit(dtype, x.data, interp ? kDoubleExact : kFloatExact))
      llvm::errs() << "tofu-run: warning: " << inexact("output", out, dtype, *v, interp) << "\n";
    const std::string file = outputFile(out);
    if (!file.empty() && group->rank() == 0)
      if (llvm::Error e = tofu::writeNpyAs(file, x.shape, x.data, dtype))
        return fail(llvm::toString(std::move(e)));
    double lo = x.data.empty() ? 0 : x.data[0], hi = lo, sum = 0;
    for (double v : x.data)
      lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    const double mean = x.data.empty() ? 0 : sum / double(x.data.size());
    j["outputs"][out] = {{"shape", x.shape}, {"dtype", tofu::elementTypeName(dtype)},
                         {"file", file},     {"min", lo},
                         {"max", hi},        {"mean", mean}};
    if (!json)
      llvm::outs() << fmt::format("| {} | [{}] | {:.6g} | {:.6g} | {:.6g} | {} |\n", out,
                                  fmt::join(x.shape, ", "), lo, hi, mean, file);
  }
  if (llvm::Error e = reportEmptyOutputs(g, j, json))
    return fail(llvm::toString(std::move(e)));
  if (json)
    llvm::outs() << j.dump(2) << "\n";
  return 0;
}

/// --infer --kernels interp: the plan on the reference executor, in double precision.
int inferOnInterpreter(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                       const tofu::ExecPlan &exec, const std::vector<BoundInput> &bound) {
  // Weights, constants and random inputs as the engine gets them; constants and the given
  // inputs then in double precision.
  std::map<unsigned, tofu::Tensor> values;
  const tofu::TrainingData data(p, "", seed, 0.1, g.constants, false, &g.initialValues, {},
                                &g.randomInputs);
  for (unsigned t : data.tensors()) {
    tofu::Tensor x(p.tensors[t].shape);
    std::vector<float> buffer(x.data.size());
    data.fill(t, 0, tofu::wholeBox(x.shape), buffer.data());
    x.data.assign(buffer.begin(), buffer.end());
    values[t] = std::move(x);
  }
  tofu::applyConstants(p, g.constants, values);
  for (const BoundInput &b : bound) {
    tofu::Tensor x(p.tensors[b.tensor].shape);
    for (int64_t i = 0; i < x.size(); ++i)
      x.data[size_t(i)] = b.array.at(i);
    values[b.tensor] = std::move(x);
  }
  if (llvm::Error e = makeOutputDir())
    return fail(llvm::toString(std::move(e)), 2);
  const auto start = std::chrono::steady_clock::now();
  auto r = tofu::runPlan(p, exec, values);
  if (!r)
    return fail(name + ": " + llvm::toString(r.takeError()));
  const double took = seconds(start);
  return reportOutputs(g, name,
                       fmt::format("forward on {} workers (interpreter, double) in {:.4f} s",
                                   unsigned(workers), took),
                       took, r->bytesMoved, /*interp=*/true, [&](const std::string &out) {
                         return r->tensors[size_t(tofu::findTensor(p, out))];
                       });
}

} // namespace

int inferEmptyOutputs(const tofu::Graph &g, const std::string &name) {
  if (llvm::Error e = makeOutputDir())
    return fail(llvm::toString(std::move(e)), 2);
  return reportOutputs(g, name, "every output holds no element: nothing to compute", 0, 0,
                       /*interp=*/false, [](const std::string &) { return tofu::Tensor(); });
}

int runInference(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                 const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                 const tofu::InputArrays &inputs) {
  auto bound = bindInputs(p, g, name, inputs);
  if (!bound)
    return fail(llvm::toString(bound.takeError()), 2);
  // Integers past float32's exact range: the run goes to the interpreter (double) where it
  // can (one process, no --load), else it warns.
  const bool canSwitch = !group->distributed() && loadDir.empty();
  bool interp = kernelsMode == Kernels::Interp;
  for (const BoundInput &b : *bound) {
    const std::string &input = p.tensors[b.tensor].name;
    const tofu::ElementType dtype = dtypeOf(g, input);
    if ((dtype != tofu::ElementType::Float64 || interp) && !isInteger(dtype))
      continue;
    std::vector<double> v(b.array.bytes.size() / size_t(tofu::elementTypeBytes(b.array.type)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = b.array.at(int64_t(i));
    // A double beyond float32's range would be infinite on the engine: the run goes to the
    // interpreter (double), else it is refused, never an infinity in its place.
    if (dtype == tofu::ElementType::Float64) {
      auto big = std::find_if(v.begin(), v.end(), [](double x) {
        return std::isfinite(x) && std::fabs(x) > double(std::numeric_limits<float>::max());
      });
      if (big == v.end())
        continue;
      const std::string what = fmt::format(
          "input '{}' (float64) holds {:g}, beyond the range of the engine's float32", input, *big);
      if (!canSwitch)
        return fail(what + " (the interpreter computes in double: one process, without --load)", 1);
      llvm::errs() << "tofu-run: " << what << ": running on the interpreter (double)\n";
      interp = true;
      continue;
    }
    if (auto past = pastLimit(dtype, v, interp ? kDoubleExact : kFloatExact)) {
      const std::string what = inexact("input", input, dtype, *past, interp);
      if (!interp && canSwitch) {
        llvm::errs() << "tofu-run: " << what << ": running on the interpreter (double, exact to "
                     << "2^53)\n";
        interp = true;
      } else {
        llvm::errs() << "tofu-run: warning: " << what << "\n";
      }
    }
  }
  if (interp)
    return inferOnInterpreter(p, g, name, exec, *bound);
  auto planned = tofu::planForEngine(p, exec, memory, g.outputs, fusion);
  if (!planned)
    return fail(name + ": " + llvm::toString(planned.takeError()));
  auto engine =
      makeEngine(planned->fused.problem, planned->fused.plan, planned->memory, engineOptions());
  if (!engine)
    return fail(name + ": " + llvm::toString(engine.takeError()));
  // Weights: the model's initial values, else drawn; then --load over them. Random masks
  // and other random inputs (a training-mode Dropout's, ONNX's random generators) are drawn
  // from --seed unless --input gives them.
  const tofu::TrainingData values(p, "", seed, 0.1, g.constants, false, &g.initialValues, {},
                                  &g.randomInputs);
  for (unsigned t : values.tensors())
    (*engine)->setTiles(t,
                        [&](const tofu::Box &tile, float *out) { values.fill(t, 0, tile, out); });
  if (!loadDir.empty()) {
    auto c = tofu::CheckpointReader::open(loadDir);
    if (!c)
      return fail(llvm::toString(c.takeError()));
    if (llvm::Error e =
            tofu::restore(**engine, *c, /*forwardOnly=*/true, tofu::SettingNames::flags()))
      return fail(c->path() + ": " + llvm::toString(std::move(e)));
  }
  for (const BoundInput &b : *bound) {
    // The array as one batch: row r is its sample r, values as they are.
    std::vector<int64_t> rows(static_cast<size_t>(b.array.samples()));
    std::iota(rows.begin(), rows.end(), 0);
    const std::vector<int64_t> &shape = p.tensors[b.tensor].shape;
    (*engine)->setTiles(b.tensor, [&](const tofu::Box &tile, float *out) {
      tofu::fillBatch(b.array, rows, shape, tile, /*raw=*/true, {}, out);
    });
  }
  if (llvm::Error e = makeOutputDir())
    return fail(llvm::toString(std::move(e)), 2);
  auto r = (*engine)->step();
  if (!r)
    return fail(name + ": " + llvm::toString(r.takeError()));
  // The outputs, whole; an integer one past float32's exact range sends the run to the
  // interpreter where it can go.
  std::map<std::string, tofu::Tensor> outputs;
  for (const std::string &out : g.outputs) {
    if (outputs.count(out))
      continue;
    const tofu::Tensor &x = outputs[out] =
        tofu::wholeTensor(**engine, unsigned(tofu::findTensor(p, out)), *group);
    if (auto past = pastLimit(dtypeOf(g, out), x.data, kFloatExact); past && canSwitch) {
      llvm::errs() << "tofu-run: " << inexact("output", out, dtypeOf(g, out), *past, false)
                   << ": running again on the interpreter (double, exact to 2^53)\n";
      return inferOnInterpreter(p, g, name, exec, *bound);
    }
  }
  return reportOutputs(
      g, name,
      fmt::format("forward on {} workers{} in {:.4f} s", unsigned(workers),
                  precisionOpt == tofu::Precision::BF16 ? " (bf16 as torch.autocast)" : "",
                  r->seconds),
      r->seconds, group->sum(r->bytesMoved), /*interp=*/false,
      [&](const std::string &out) { return outputs.at(out); });
}

} // namespace tofurun
