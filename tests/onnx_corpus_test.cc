// The ONNX corpus of tests/onnx/ (tools/fixtures/export_onnx_fixtures.py, listed in corpus.json):
// every model imports with the shapes ONNX infers, builds a training graph and plans at
// k = 4; the small models with a reference file compute PyTorch's outputs (the importer's
// translations checked value by value on the unpartitioned step, in the interpreter).
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/test_library.h"
#include "graph/training.h"
#include "onnx/onnx_pb.h"
#include "partition/problem.h"
#include "runtime/cpu_executor.h"
#include "search/search.h"
#include "testing/suite.h"

namespace tofu {
namespace {

using nlohmann::json;

json readJson(const std::string &path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  json j;
  in >> j;
  return j;
}

const json &manifest() {
  static const json m = readJson("tests/onnx/corpus.json")["models"];
  return m;
}

TEST(OnnxCorpus, CoversTheFamiliesAndModes) {
  std::map<std::string, int> families;
  int training = 0, verified = 0, referenced = 0;
  for (const auto &[name, m] : manifest().items()) {
    ++families[m["family"].get<std::string>()];
    training += m["training_mode"].get<bool>();
    verified += m["verify"].get<bool>();
    referenced += m["reference"].get<bool>();
  }
  EXPECT_GE(manifest().size(), 30u);
  EXPECT_GE(families["cnn"], 10);
  EXPECT_GE(families["rnn"], 3);
  EXPECT_GE(families["transformer"], 5);
  EXPECT_GE(training, 4);
  EXPECT_GE(verified, 10);
  EXPECT_GE(referenced, 8);
}

/// Imports, trains and plans each model at k = 4; a model the manifest marks with
/// 'known_failure' must fail with that text (so the test notices when it starts working).
TEST(OnnxCorpus, EveryModelImportsTrainsAndPlans) {
  size_t index = 0, ran = 0;
  for (const auto &[name, m] : manifest().items()) {
    if (!runsInThisSample(index++, 4)) // every model in the plain run; a quarter under ASan
      continue;
    ++ran;
    SCOPED_TRACE(name);
    OnnxImportOptions options;
    options.dataInputs = m["data_inputs"].get<unsigned>();
    std::string failure;
    auto g = importOnnx("tests/onnx/" + name + ".onnx", testLibrary(), options);
    if (!g) {
      failure = llvm::toString(g.takeError());
    } else {
      // Every graph output is produced, with ONNX's inferred shape (the importer compared).
      for (const std::string &o : g->outputs) {
        const TensorInfo *t = g->tensor(o);
        ASSERT_TRUE(t && t->shapeKnown) << o;
      }
      if (g->outputs.size() > 1) // a graph of several outputs trains on the first, as tofu-run
        g->outputs.resize(1);
      auto loss = addLoss(*g, testLibrary());
      ASSERT_TRUE(static_cast<bool>(loss)) << llvm::toString(loss.takeError());
      freezeWeightsNotReaching(*g, *loss); // as tofu-run: weights only other outputs read
      auto tg = buildTrainingGraph(*g, *loss, testLibrary(), Optimizer::SGD);
      if (!tg) {
        failure = llvm::toString(tg.takeError());
      } else {
        auto p = Problem::build(*tg, testLibrary());
        ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
        PlanOptions o;
        o.workers = 4;
        auto plan = searchPlan(*p, o);
        if (!plan)
          failure = llvm::toString(plan.takeError());
        else
          EXPECT_GT(plan->totalBytes, 0);
      }
    }
    if (m.contains("known_failure"))
      EXPECT_NE(failure.find(m["known_failure"].get<std::string>()), std::string::npos)
          << "expected to fail with '" << m["known_failure"].get<std::string>()
          << "', got: " << (failure.empty() ? "success" : failure);
    else
      EXPECT_EQ(failure, "");
  }
  EXPECT_GT(ran, 0u);
}

/// The float values of an initializer (raw_data or float_data).
std::vector<double> floats(const onnx::TensorProto &t) {
  std::vector<double> v;
  if (t.has_raw_data()) {
    const std::string &raw = t.raw_data();
    std::vector<float> f(raw.size() / sizeof(float));
    std::memcpy(f.data(), raw.data(), f.size() * sizeof(float));
    v.assign(f.begin(), f.end());
  } else {
    v.assign(t.float_data().begin(), t.float_data().end());
  }
  return v;
}

TEST(OnnxCorpus, SmallModelsComputePyTorchsOutputs) {
  unsigned checked = 0;
  for (const auto &[name, m] : manifest().items()) {
    if (!m["reference"].get<bool>())
      continue;
    SCOPED_TRACE(name);
    const std::string path = "tests/onnx/" + name + ".onnx";
    json ref = readJson("tests/onnx/" + name + ".ref.json");
    OnnxImportOptions options;
    options.dataInputs = m["data_inputs"].get<unsigned>();
    // The reference inputs' shapes fix the dynamic axes (a scripted model's time axis too).
    for (const auto &[input, v] : ref["inputs"].items())
      options.givenInputs[input].shape = v["shape"].get<std::vector<int64_t>>();
    auto g = importOnnx(path, testLibrary(), options);
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    auto p = Problem::build(*g, testLibrary());
    ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    // Values by name: the data inputs from the reference, the parameters from the file's
    // initializers, the constants from the import.
    std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> byName;
    for (const auto &[input, v] : ref["inputs"].items())
      byName[input] = {v["shape"].get<std::vector<int64_t>>(),
                       v["values"].get<std::vector<double>>()};
    onnx::ModelProto model;
    {
      std::ifstream in(path, std::ios::binary);
      ASSERT_TRUE(model.ParseFromIstream(&in));
    }
    for (const onnx::TensorProto &t : model.graph().initializer())
      if (t.data_type() == onnx::TensorProto::FLOAT)
        byName[t.name()] = {std::vector<int64_t>(t.dims().begin(), t.dims().end()), floats(t)};
    for (const auto &[c, v] : g->constants)
      byName[c] = {g->tensor(c)->shape, v};
    std::map<unsigned, Tensor> given;
    for (unsigned i = 0; i < p->tensors.size(); ++i) {
      if (p->tensors[i].producer >= 0)
        continue;
      auto it = byName.find(p->tensors[i].name);
      ASSERT_NE(it, byName.end()) << "no value for " << p->tensors[i].name;
      Tensor t(p->tensors[i].shape);
      ASSERT_EQ(int64_t(it->second.second.size()), t.size()) << p->tensors[i].name;
      t.data = it->second.second;
      given[i] = std::move(t);
    }
    auto values = runReference(*p, given);
    ASSERT_TRUE(static_cast<bool>(values)) << llvm::toString(values.takeError());
    // Every output PyTorch gave, by name ("output" for a model of one).
    ASSERT_EQ(ref["outputs"].size(), g->outputs.size());
    for (const auto &[output, expect] : ref["outputs"].items()) {
      unsigned out = 0;
      while (out < p->tensors.size() && p->tensors[out].name != output)
        ++out;
      ASSERT_LT(out, p->tensors.size()) << "no output " << output;
      Tensor want(expect["shape"].get<std::vector<int64_t>>());
      want.data = expect["values"].get<std::vector<double>>();
      // PyTorch computed in float32, the interpreter in double.
      double err = maxRelativeError((*values)[out], want);
      EXPECT_LT(err, 1e-4) << "largest relative difference from PyTorch at " << output;
      std::printf("%s %s: largest relative difference from PyTorch %.2g\n", name.c_str(),
                  output.c_str(), err);
    }
    ++checked;
  }
  EXPECT_GE(checked, 8u);
}

} // namespace
} // namespace tofu
