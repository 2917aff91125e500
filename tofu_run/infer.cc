// tofu-run --infer: the forward graph once on the engine, on the inputs the user gives; every
// output reported, and written as .npy under --output-dir.
#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"
#include "runtime/checkpoint.h"
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

} // namespace

int inferEmptyOutputs(const tofu::Graph &g, const std::string &name) {
  const bool json = format == Format::Json;
  if (llvm::Error e = makeOutputDir())
    return fail(llvm::toString(std::move(e)), 2);
  nlohmann::json j;
  j["model"] = name;
  j["workers"] = unsigned(workers);
  j["seconds"] = 0;
  j["bytes_moved"] = 0;
  if (!json)
    llvm::outs() << fmt::format("{}: every output holds no element: nothing to compute\n\n| "
                                "output | shape | min | max | mean | file |\n| --- | --- | ---: | "
                                "---: | ---: | --- |\n",
                                name);
  if (llvm::Error e = reportEmptyOutputs(g, j, json))
    return fail(llvm::toString(std::move(e)));
  if (json)
    llvm::outs() << j.dump(2) << "\n";
  return 0;
}

int runInference(const tofu::Problem &p, const tofu::Graph &g, const std::string &name,
                 const tofu::ExecPlan &exec, const tofu::MemoryPlan &memory,
                 const tofu::InputArrays &inputs) {
  const bool json = format == Format::Json;
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
    if (llvm::Error e = tofu::restore(**engine, *c, /*forwardOnly=*/true))
      return fail(c->path() + ": " + llvm::toString(std::move(e)));
  }
  // Inputs by name, each of its tensor's exact shape.
  std::set<std::string> given;
  for (const auto &[input, array] : inputs.arrays) {
    const tofu::DataArray *a = &array;
    const std::string &file = a->path;
    int t = -1;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == input)
        t = static_cast<int>(i);
    const tofu::TensorInfo *info = g.tensor(input);
    if ((t < 0 && info && info->role == tofu::TensorRole::Input) ||
        g.inputsTakenWhole.count(input)) {
      // An input no op reads: the importer took its values as a constant (a shape, axes).
      given.insert(input);
      continue;
    }
    if (t < 0 || p.tensors[t].producer >= 0 || p.tensors[t].role != tofu::TensorRole::Input)
      return fail(fmt::format("--input: the model has no input '{}'", input), 2);
    given.insert(input);
    // A bfloat16 input stored as its uint16 bits (as ONNX 1.12's test files store them).
    tofu::DataArray bits;
    if (a->onnxType == 4 /* UINT16 */ && info && info->dtype == "bfloat16") {
      bits = *a;
      tofu::bfloat16FromBits(bits);
      a = &bits;
    }
    if (a->shape != p.tensors[t].shape)
      return fail(fmt::format("--input {}: {} has shape [{}]; the input's is [{}]", input, file,
                              fmt::join(a->shape, ", "), fmt::join(p.tensors[t].shape, ", ")),
                  2);
    // The array as one batch: row r is its sample r, values as they are.
    std::vector<int64_t> rows(static_cast<size_t>(a->samples()));
    std::iota(rows.begin(), rows.end(), 0);
    (*engine)->setTiles(static_cast<unsigned>(t), [&](const tofu::Box &tile, float *out) {
      tofu::fillBatch(*a, rows, p.tensors[t].shape, tile, /*raw=*/true, {}, out);
    });
  }
  std::string missing;
  for (const tofu::ProblemTensor &t : p.tensors)
    if (t.producer < 0 && t.role == tofu::TensorRole::Input && !t.shape.empty() &&
        !given.count(t.name) && !g.constants.count(t.name) && !g.initialValues.count(t.name) &&
        !g.randomInputs.count(t.name))
      missing +=
          (missing.empty() ? "" : ", ") + fmt::format("{} [{}]", t.name, fmt::join(t.shape, ", "));
  if (!missing.empty())
    return fail(name + ": --infer needs a value for every data input; --input gives none for " +
                    missing,
                2);
  if (llvm::Error e = makeOutputDir())
    return fail(llvm::toString(std::move(e)), 2);
  auto r = (*engine)->step();
  if (!r)
    return fail(name + ": " + llvm::toString(r.takeError()));
  nlohmann::json j;
  j["model"] = name;
  j["workers"] = unsigned(workers);
  j["seconds"] = r->seconds;
  j["bytes_moved"] = group->sum(r->bytesMoved);
  if (!json)
    llvm::outs() << fmt::format("{}: forward on {} workers in {:.4f} s\n\n| output | shape | min | "
                                "max | mean | file |\n| --- | --- | ---: | ---: | ---: | --- |\n",
                                name, unsigned(workers), r->seconds);
  for (const std::string &out : g.outputs) {
    unsigned t = 0;
    for (unsigned i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == out)
        t = i;
    const tofu::Tensor x = tofu::wholeTensor(**engine, t, *group);
    const std::string file = outputFile(out);
    if (!file.empty() && group->rank() == 0)
      if (llvm::Error e =
              tofu::writeNpy(file, x.shape, std::vector<float>(x.data.begin(), x.data.end())))
        return fail(llvm::toString(std::move(e)));
    double lo = x.data.empty() ? 0 : x.data[0], hi = lo, sum = 0;
    for (double v : x.data)
      lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    const double mean = x.data.empty() ? 0 : sum / double(x.data.size());
    j["outputs"][out] = {
        {"shape", x.shape}, {"file", file}, {"min", lo}, {"max", hi}, {"mean", mean}};
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

} // namespace tofurun
