/* libtofu_plan's C API: for frameworks and languages that cannot take C++ (Python's
 * ctypes, Rust, Go, ...). Opaque handles, status codes, error strings, the plan as JSON.
 *
 *   tofu_planner *planner;
 *   if (tofu_planner_open(NULL, &planner) != TOFU_OK)         (NULL: the installed library)
 *     fprintf(stderr, "%s\n", tofu_last_error());
 *   tofu_graph *g = tofu_graph_new();
 *   int64_t xs[] = {64, 256}, ws[] = {256, 10};
 *   tofu_graph_add_input(g, "x", xs, 2, "float32");
 *   tofu_graph_add_weight(g, "w", ws, 2, "float32");
 *   const char *in[] = {"x", "w"};  const char *gn[] = {"b"};  int64_t gv[] = {0};
 *   tofu_graph_add_node(g, "fc", "MatMul", in, 2, "y", NULL, NULL, 0, gn, gv, 1);
 *   const char *out[] = {"y"};
 *   tofu_graph_set_outputs(g, out, 1);
 *   tofu_plan_options o;  tofu_plan_options_init(&o);  o.workers = 8;
 *   tofu_plan *plan;
 *   if (tofu_plan_graph(planner, g, &o, &plan) == TOFU_OK)
 *     puts(tofu_plan_json(plan));
 *   tofu_plan_free(plan); tofu_graph_free(g); tofu_planner_free(planner);
 *
 * Every function returning tofu_status sets, on failure, a message that tofu_last_error()
 * returns (per thread, until the thread's next failing call). Handles are not shared
 * between threads while one of them changes it; a planner may plan from many threads.
 * Link -ltofu_plan (pkg-config --cflags --libs tofu).
 */
#ifndef TOFU_TOFU_H
#define TOFU_TOFU_H

#include <stddef.h>
#include <stdint.h>

#define TOFU_VERSION_MAJOR 0
#define TOFU_VERSION_MINOR 2
#define TOFU_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tofu_status {
  TOFU_OK = 0,
  TOFU_ERROR_ARGUMENT = 1, /* a null or malformed argument, an unknown option value */
  TOFU_ERROR_LIBRARY = 2,  /* the operator library cannot be found or does not check */
  TOFU_ERROR_GRAPH = 3,    /* the graph (or ONNX model) is malformed or does not check */
  TOFU_ERROR_PLAN = 4,     /* the search failed (a budget, a table limit) */
} tofu_status;

typedef struct tofu_planner tofu_planner;
typedef struct tofu_graph tofu_graph;
typedef struct tofu_plan tofu_plan;

typedef enum tofu_optimizer { TOFU_SGD = 0, TOFU_ADAM = 1 } tofu_optimizer;
/* The element types the step computes in; TOFU_BF16 as torch.autocast(dtype=bfloat16). */
typedef enum tofu_precision { TOFU_FP32 = 0, TOFU_BF16 = 1 } tofu_precision;

typedef struct tofu_plan_options {
  unsigned workers;          /* any k >= 1 (default 8) */
  int train;                 /* nonzero: plan the training step (default 1) */
  tofu_optimizer optimizer;  /* default TOFU_ADAM */
  const char *algorithm;     /* "tofu" (default, also NULL), "dp-flat", "data-parallel", ... */
  double budget_seconds;     /* dp-flat and exhaustive (default 60) */
  int per_worker;            /* nonzero: each worker's tiles and memory in the JSON (default 1) */
  int64_t onnx_batch;        /* ONNX: the size of symbolic dimensions (default 1) */
  unsigned onnx_data_inputs; /* ONNX with weights as graph inputs: data inputs first (default 1) */
  int precision;             /* a tofu_precision: TOFU_FP32 (default) or TOFU_BF16 */
  const char *device;        /* the step-time estimate's device: "h100" (default, also NULL),
                                "a100", "cpu", a device model file, or "" for none */
  int64_t memory_per_worker; /* bytes each worker's planned peak may take; 0: no budget
                                (default). None fitting is TOFU_ERROR_PLAN */
  const char *recompute;     /* what a training step recomputes: "auto" (default, also NULL:
                                the least that fits the budget), "sqrt" or "none" */
  const char *objective;     /* what the search minimises: "time" (default, also NULL: the
                                step estimated on the device) or "bytes" (the paper's) */
} tofu_plan_options;

/* "MAJOR.MINOR.PATCH" of the library. */
const char *tofu_version(void);
/* A short name of a status code ("ok", "argument", ...). */
const char *tofu_status_name(tofu_status status);
/* The message of this thread's last failure ("" if none). */
const char *tofu_last_error(void);

/* Fills the defaults. */
void tofu_plan_options_init(tofu_plan_options *options);
/* sizeof(tofu_plan_options) in this library: a binding that declares the struct itself
 * (ctypes, another language's FFI) checks its layout against it, since
 * tofu_plan_options_init writes every field. */
size_t tofu_plan_options_size(void);

/* Loads the operator library from ops_dir; NULL or "": $TOFU_OPS, else the library
 * installed beside libtofu_plan (PREFIX/share/tofu/ops). */
tofu_status tofu_planner_open(const char *ops_dir, tofu_planner **planner);
void tofu_planner_free(tofu_planner *planner);

/* A new empty graph (NULL only when out of memory). */
tofu_graph *tofu_graph_new(void);
void tofu_graph_free(tofu_graph *graph);
/* dtype NULL means "float32". */
tofu_status tofu_graph_add_input(tofu_graph *graph, const char *name, const int64_t *shape,
                                 size_t rank, const char *dtype);
tofu_status tofu_graph_add_weight(tofu_graph *graph, const char *name, const int64_t *shape,
                                  size_t rank, const char *dtype);
/* A node `output = op<attributes>{groups}(inputs)`: attribute and group names with their
 * values (arrays of the given counts; NULL when the count is 0). */
tofu_status tofu_graph_add_node(tofu_graph *graph, const char *name, const char *op,
                                const char *const *inputs, size_t input_count, const char *output,
                                const char *const *attribute_names, const int64_t *attribute_values,
                                size_t attribute_count, const char *const *group_names,
                                const int64_t *group_values, size_t group_count);
tofu_status tofu_graph_set_outputs(tofu_graph *graph, const char *const *names, size_t count);
/* Reads DESIGN.md's graph JSON into a new graph. */
tofu_status tofu_graph_from_json(const char *json, tofu_graph **graph);

/* Plans a graph; options NULL means the defaults. */
tofu_status tofu_plan_graph(const tofu_planner *planner, const tofu_graph *graph,
                            const tofu_plan_options *options, tofu_plan **plan);
/* Plans a serialized ONNX model (ModelProto bytes); name stands for it in messages. */
tofu_status tofu_plan_onnx(const tofu_planner *planner, const void *bytes, size_t size,
                           const char *name, const tofu_plan_options *options, tofu_plan **plan);
/* The plan as JSON (owned by the plan). */
const char *tofu_plan_json(const tofu_plan *plan);
unsigned tofu_plan_workers(const tofu_plan *plan);
/* Communication per training step, in bytes, summed over workers. */
int64_t tofu_plan_communication_bytes(const tofu_plan *plan);
/* The estimated training-step time on the options' device, in seconds (the slowest
 * worker's compute plus communication); 0 when no device was asked for. */
double tofu_plan_step_seconds(const tofu_plan *plan);
void tofu_plan_free(tofu_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* TOFU_TOFU_H */
