// libtofu_plan's C API (include/tofu/tofu.h) over its C++ API.
#include "tofu/tofu.h"

#include <map>
#include <new>
#include <string>
#include <vector>

#include "tofu/plan.h"

struct tofu_planner {
  tofu::api::Planner planner;
};

struct tofu_graph {
  tofu::api::Graph graph;
};

struct tofu_plan {
  tofu::api::Plan plan;
};

namespace {

thread_local std::string lastError;

tofu_status fail(tofu_status s, std::string message) {
  lastError = std::move(message);
  return s;
}

tofu_status status(const tofu::api::Status &s) {
  return s ? TOFU_OK : fail(static_cast<tofu_status>(s.kind()), s.message());
}

/// The shape of `rank` extents at `shape` (null only with rank 0).
bool readShape(const int64_t *shape, size_t rank, std::vector<int64_t> *out) {
  if (rank > 0 && !shape)
    return false;
  out->assign(shape, shape + rank);
  return true;
}

/// Names and values of `count` entries (null arrays only with count 0).
bool readNamed(const char *const *names, const int64_t *values, size_t count, const char *what,
               std::map<std::string, int64_t> *out) {
  if (count > 0 && (!names || !values)) {
    lastError = std::string("the ") + what + " names and values are null with a count of " +
                std::to_string(count);
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    if (!names[i]) {
      lastError = std::string("the ") + what + " name at " + std::to_string(i) + " is null";
      return false;
    }
    (*out)[names[i]] = values[i];
  }
  return true;
}

tofu_status declare(tofu_graph *graph, const char *name, const int64_t *shape, size_t rank,
                    const char *dtype, bool weight) {
  if (!graph || !name)
    return fail(TOFU_ERROR_ARGUMENT, weight ? "tofu_graph_add_weight: null graph or name"
                                            : "tofu_graph_add_input: null graph or name");
  std::vector<int64_t> s;
  if (!readShape(shape, rank, &s))
    return fail(TOFU_ERROR_ARGUMENT,
                std::string("tensor '") + name + "': null shape of rank " + std::to_string(rank));
  const std::string type = dtype ? dtype : "float32";
  tofu::api::Status st =
      weight ? graph->graph.addWeight(name, s, type) : graph->graph.addInput(name, s, type);
  return status(st);
}

tofu_status options(const tofu_plan_options *given, tofu::api::PlanOptions *o,
                    tofu::api::OnnxOptions *onnx) {
  tofu_plan_options defaults;
  tofu_plan_options_init(&defaults);
  const tofu_plan_options &c = given ? *given : defaults;
  if (c.optimizer != TOFU_SGD && c.optimizer != TOFU_ADAM)
    return fail(TOFU_ERROR_ARGUMENT, "unknown optimizer " + std::to_string(int(c.optimizer)));
  if (c.precision != TOFU_FP32 && c.precision != TOFU_BF16) // an int: any value may come
    return fail(TOFU_ERROR_ARGUMENT, "unknown precision " + std::to_string(c.precision));
  o->precision = c.precision == TOFU_BF16 ? tofu::api::Precision::BF16 : tofu::api::Precision::FP32;
  o->workers = c.workers;
  o->train = c.train != 0;
  o->optimizer = c.optimizer == TOFU_SGD ? tofu::api::Optimizer::SGD : tofu::api::Optimizer::Adam;
  o->algorithm = c.algorithm ? c.algorithm : "tofu";
  o->budgetSeconds = c.budget_seconds;
  o->perWorker = c.per_worker != 0;
  o->device = c.device ? c.device : "h100";
  if (c.memory_per_worker < 0)
    return fail(TOFU_ERROR_ARGUMENT,
                "memory_per_worker must be 0 (no budget) or a number of bytes");
  o->memoryPerWorker = c.memory_per_worker;
  o->recompute = c.recompute ? c.recompute : "auto";
  o->objective = c.objective ? c.objective : "time";
  onnx->batch = c.onnx_batch;
  onnx->dataInputs = c.onnx_data_inputs;
  return TOFU_OK;
}

tofu_status planned(tofu::api::Result<tofu::api::Plan> r, tofu_plan **plan) {
  if (!r)
    return fail(static_cast<tofu_status>(r.status().kind()), r.error());
  tofu_plan *p = new (std::nothrow) tofu_plan{std::move(*r)};
  if (!p)
    return fail(TOFU_ERROR_ARGUMENT, "out of memory");
  *plan = p;
  return TOFU_OK;
}

} // namespace

extern "C" {

const char *tofu_version(void) {
  static const std::string v = tofu::api::version();
  return v.c_str();
}

const char *tofu_status_name(tofu_status status) {
  switch (status) {
  case TOFU_OK:
    return "ok";
  case TOFU_ERROR_ARGUMENT:
    return "argument";
  case TOFU_ERROR_LIBRARY:
    return "library";
  case TOFU_ERROR_GRAPH:
    return "graph";
  case TOFU_ERROR_PLAN:
    return "plan";
  }
  return "unknown";
}

const char *tofu_last_error(void) { return lastError.c_str(); }

void tofu_plan_options_init(tofu_plan_options *o) {
  if (!o)
    return;
  o->workers = 8;
  o->train = 1;
  o->optimizer = TOFU_ADAM;
  o->algorithm = nullptr;
  o->budget_seconds = 60;
  o->per_worker = 1;
  o->precision = TOFU_FP32;
  o->device = nullptr;
  o->memory_per_worker = 0;
  o->recompute = nullptr;
  o->objective = nullptr;
  o->onnx_batch = 1;
  o->onnx_data_inputs = 1;
}

size_t tofu_plan_options_size(void) { return sizeof(tofu_plan_options); }

tofu_status tofu_planner_open(const char *ops_dir, tofu_planner **planner) {
  if (!planner)
    return fail(TOFU_ERROR_ARGUMENT, "tofu_planner_open: null result pointer");
  *planner = nullptr;
  auto p = tofu::api::Planner::open(ops_dir ? ops_dir : "");
  if (!p)
    return status(p.status());
  *planner = new (std::nothrow) tofu_planner{std::move(*p)};
  return *planner ? TOFU_OK : fail(TOFU_ERROR_ARGUMENT, "out of memory");
}

void tofu_planner_free(tofu_planner *planner) { delete planner; }

tofu_graph *tofu_graph_new(void) { return new (std::nothrow) tofu_graph; }

void tofu_graph_free(tofu_graph *graph) { delete graph; }

tofu_status tofu_graph_add_input(tofu_graph *graph, const char *name, const int64_t *shape,
                                 size_t rank, const char *dtype) {
  return declare(graph, name, shape, rank, dtype, false);
}

tofu_status tofu_graph_add_weight(tofu_graph *graph, const char *name, const int64_t *shape,
                                  size_t rank, const char *dtype) {
  return declare(graph, name, shape, rank, dtype, true);
}

tofu_status tofu_graph_add_node(tofu_graph *graph, const char *name, const char *op,
                                const char *const *inputs, size_t input_count, const char *output,
                                const char *const *attribute_names, const int64_t *attribute_values,
                                size_t attribute_count, const char *const *group_names,
                                const int64_t *group_values, size_t group_count) {
  if (!graph || !name || !op || !output)
    return fail(TOFU_ERROR_ARGUMENT, "tofu_graph_add_node: null graph, name, op or output");
  if (input_count > 0 && !inputs)
    return fail(TOFU_ERROR_ARGUMENT, std::string("node '") + name +
                                         "': null inputs with a count of " +
                                         std::to_string(input_count));
  tofu::api::Node n;
  n.name = name;
  n.op = op;
  n.output = output;
  for (size_t i = 0; i < input_count; ++i) {
    if (!inputs[i])
      return fail(TOFU_ERROR_ARGUMENT,
                  std::string("node '") + name + "': input " + std::to_string(i) + " is null");
    n.inputs.push_back(inputs[i]);
  }
  if (!readNamed(attribute_names, attribute_values, attribute_count, "attribute", &n.attributes) ||
      !readNamed(group_names, group_values, group_count, "group", &n.groups))
    return fail(TOFU_ERROR_ARGUMENT, std::string("node '") + name + "': " + lastError);
  return status(graph->graph.addNode(n));
}

tofu_status tofu_graph_set_outputs(tofu_graph *graph, const char *const *names, size_t count) {
  if (!graph || (count > 0 && !names))
    return fail(TOFU_ERROR_ARGUMENT, "tofu_graph_set_outputs: null graph or names");
  std::vector<std::string> list;
  for (size_t i = 0; i < count; ++i) {
    if (!names[i])
      return fail(TOFU_ERROR_ARGUMENT,
                  "tofu_graph_set_outputs: name " + std::to_string(i) + " is null");
    list.push_back(names[i]);
  }
  return status(graph->graph.setOutputs(list));
}

tofu_status tofu_graph_from_json(const char *json, tofu_graph **graph) {
  if (!json || !graph)
    return fail(TOFU_ERROR_ARGUMENT, "tofu_graph_from_json: null text or result pointer");
  *graph = nullptr;
  auto g = tofu::api::Graph::fromJson(json);
  if (!g)
    return status(g.status());
  *graph = new (std::nothrow) tofu_graph{std::move(*g)};
  return *graph ? TOFU_OK : fail(TOFU_ERROR_ARGUMENT, "out of memory");
}

tofu_status tofu_plan_graph(const tofu_planner *planner, const tofu_graph *graph,
                            const tofu_plan_options *given, tofu_plan **plan) {
  if (!planner || !graph || !plan)
    return fail(TOFU_ERROR_ARGUMENT, "tofu_plan_graph: null planner, graph or result pointer");
  *plan = nullptr;
  tofu::api::PlanOptions o;
  tofu::api::OnnxOptions onnx;
  if (tofu_status s = options(given, &o, &onnx); s != TOFU_OK)
    return s;
  return planned(planner->planner.plan(graph->graph, o), plan);
}

tofu_status tofu_plan_onnx(const tofu_planner *planner, const void *bytes, size_t size,
                           const char *name, const tofu_plan_options *given, tofu_plan **plan) {
  if (!planner || (!bytes && size > 0) || !plan)
    return fail(TOFU_ERROR_ARGUMENT, "tofu_plan_onnx: null planner, bytes or result pointer");
  *plan = nullptr;
  tofu::api::PlanOptions o;
  tofu::api::OnnxOptions onnx;
  if (tofu_status s = options(given, &o, &onnx); s != TOFU_OK)
    return s;
  std::string model(static_cast<const char *>(bytes), size);
  return planned(planner->planner.planOnnx(model, onnx, o, name ? name : "model.onnx"), plan);
}

const char *tofu_plan_json(const tofu_plan *plan) { return plan ? plan->plan.json.c_str() : ""; }

unsigned tofu_plan_workers(const tofu_plan *plan) { return plan ? plan->plan.workers : 0; }

int64_t tofu_plan_communication_bytes(const tofu_plan *plan) {
  return plan ? plan->plan.communicationBytes : 0;
}

double tofu_plan_step_seconds(const tofu_plan *plan) {
  return plan ? plan->plan.stepTime.seconds : 0;
}

void tofu_plan_free(tofu_plan *plan) { delete plan; }

} // extern "C"
