// The inference half of the native part: tofu.infer's forward graph, planned across the
// workers (threads of this process), run once on the engine from the model's own values
// and the inputs Python gives, as tofu-run --infer runs it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "python/native.h"
#include "runtime/data_feed.h"
#include "runtime/process_group.h"
#include "runtime/trainer.h"
#include "runtime/training_data.h"

namespace tofupy {
namespace {

/// The outputs of the model `a` names (its forward graph, a.train false) on `inputs` (name
/// -> array, each of its input's shape), as (name, array) in the graph's order of outputs.
py::list infer(const PlanArgs &a, py::dict inputs, unsigned seed) {
  tofu::PipelineOptions options;
  std::optional<tofu::Topology> topology;
  std::optional<int64_t> budget;
  if (auto f = pipelineOptions(a, options, topology, budget))
    raise(*f);
  options.until = tofu::Stage::Execution;
  std::vector<std::pair<std::string, tofu::DataArray>> given;
  for (auto [key, value] : inputs) {
    tofu::DataArray array;
    if (auto f = arrayOf(py::str(key), py::array::ensure(value), array))
      raise(*f);
    given.emplace_back(py::str(key), std::move(array));
  }
  std::optional<Failure> failed;
  std::vector<std::pair<std::string, tofu::Tensor>> outputs;
  {
    py::gil_scoped_release unlocked;
    const tofu::OpLibrary *lib = nullptr;
    std::optional<tofu::PipelineResult> r;
    failed = runModel(a, options, lib, r);
    // Each given array bound to its input: the input's shape, element for element.
    std::vector<std::pair<unsigned, const tofu::DataArray *>> bound;
    for (const auto &[name, array] : given) {
      if (failed)
        break;
      const int t = tofu::findTensor(*r->problem, name);
      if (t < 0 || r->problem->tensors[size_t(t)].role != tofu::TensorRole::Input) {
        failed = Failure{Failure::Data, fmt::format("{}: no input '{}'", r->name, name)};
        break;
      }
      const std::vector<int64_t> &shape = r->problem->tensors[size_t(t)].shape;
      if (array.shape != shape) {
        failed = Failure{Failure::Data,
                         fmt::format("{}: input '{}' is [{}], but the array given is [{}]", r->name,
                                     name, fmt::join(shape, ", "), fmt::join(array.shape, ", "))};
        break;
      }
      bound.emplace_back(unsigned(t), &array);
    }
    if (!failed) {
      const tofu::Problem &p = *r->problem;
      const tofu::Graph &g = r->graph;
      std::unique_ptr<tofu::Engine> engine;
      auto planned = tofu::planForEngine(p, r->exec, r->memory, g.outputs, true);
      if (!planned) {
        failed = failure(planned.takeError(), Failure::Plan);
      } else {
        auto e = makeEngine("cpu", tofu::localProcessGroup(), planned->fused.problem,
                            planned->fused.plan, planned->memory, {}, false);
        if (!e)
          failed = failure(e.takeError(), Failure::Plan);
        else
          engine = std::move(*e);
      }
      if (engine) {
        // The model's own values (its weights, constants), random inputs drawn from `seed`;
        // then the given arrays, each as one batch of its rows.
        const tofu::TrainingData values(p, "", seed, 0.1, g.constants, false, &g.initialValues, {},
                                        &g.randomInputs);
        for (unsigned t : values.tensors())
          engine->setTiles(
              t, [&](const tofu::Box &tile, float *out) { values.fill(t, 0, tile, out); });
        for (const auto &[t, array] : bound) {
          std::vector<int64_t> rows(static_cast<size_t>(array->samples()));
          std::iota(rows.begin(), rows.end(), 0);
          const std::vector<int64_t> &shape = p.tensors[t].shape;
          engine->setTiles(t, [&](const tofu::Box &tile, float *out) {
            tofu::fillBatch(*array, rows, shape, tile, /*raw=*/true, {}, out);
          });
        }
        auto step = engine->step();
        if (!step)
          failed = failure(step.takeError(), Failure::Data);
        else
          for (const std::string &out : g.outputs)
            outputs.emplace_back(out, tofu::wholeTensor(*engine, unsigned(tofu::findTensor(p, out)),
                                                        tofu::localProcessGroup()));
      }
    }
  }
  if (failed)
    raise(*failed);
  py::list out;
  for (const auto &[name, t] : outputs)
    out.append(py::make_tuple(name, numpyOf(t)));
  return out;
}

} // namespace

void bindInfer(py::module_ &m) {
  m.def("infer", &infer, py::arg("args"), py::arg("inputs"), py::arg("seed"));
}

} // namespace tofupy
