/* Plans a perceptron's training step through Tofu's installed C API and prints the plan as
 * JSON (to a file) and its headline figures; then shows the errors the API reports.
 *
 *   cc plan.c $(pkg-config --cflags --libs tofu) -o plan && ./plan 4 plan.json
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tofu/tofu.h"

static int check(tofu_status s, const char *what) {
  if (s != TOFU_OK)
    fprintf(stderr, "plan: %s: %s error: %s\n", what, tofu_status_name(s), tofu_last_error());
  return s == TOFU_OK;
}

int main(int argc, char **argv) {
  unsigned workers = argc > 1 ? (unsigned)atoi(argv[1]) : 4;
  const char *json_path = argc > 2 ? argv[2] : "plan.json";
  printf("libtofu_plan %s\n", tofu_version());

  tofu_planner *planner = NULL;
  if (!check(tofu_planner_open(NULL, &planner), "opening the operator library"))
    return 1;

  tofu_graph *g = tofu_graph_new();
  /* Large enough that the time objective (the default) splits it on an H100. */
  const int64_t x[] = {4096, 1024}, labels[] = {4096}, w1[] = {1024, 4096}, w2[] = {4096, 10};
  const char *fc1_in[] = {"x", "w1"}, *relu_in[] = {"h"}, *fc2_in[] = {"a", "w2"},
             *loss_in[] = {"logits", "labels"}, *outputs[] = {"loss"};
  const char *batch_group[] = {"b"}, *elementwise_group[] = {"i"};
  const int64_t zero[] = {0}, two[] = {2};
  int ok = check(tofu_graph_add_input(g, "x", x, 2, NULL), "x") &&
           check(tofu_graph_add_input(g, "labels", labels, 1, "int64"), "labels") &&
           check(tofu_graph_add_weight(g, "w1", w1, 2, "float32"), "w1") &&
           check(tofu_graph_add_weight(g, "w2", w2, 2, "float32"), "w2") &&
           check(tofu_graph_add_node(g, "fc1", "MatMul", fc1_in, 2, "h", NULL, NULL, 0, batch_group,
                                     zero, 1),
                 "fc1") &&
           check(tofu_graph_add_node(g, "relu", "Relu", relu_in, 1, "a", NULL, NULL, 0,
                                     elementwise_group, two, 1),
                 "relu") &&
           check(tofu_graph_add_node(g, "fc2", "MatMul", fc2_in, 2, "logits", NULL, NULL, 0,
                                     batch_group, zero, 1),
                 "fc2") &&
           check(tofu_graph_add_node(g, "xent", "softmax_cross_entropy", loss_in, 2, "loss", NULL,
                                     NULL, 0, NULL, NULL, 0),
                 "xent") &&
           check(tofu_graph_set_outputs(g, outputs, 1), "outputs");
  if (!ok)
    return 1;

  tofu_plan_options options;
  tofu_plan_options_init(&options);
  options.workers = workers;
  tofu_plan *plan = NULL;
  if (!check(tofu_plan_graph(planner, g, &options, &plan), "planning"))
    return 1;
  const char *json = tofu_plan_json(plan);
  FILE *f = fopen(json_path, "w");
  if (!f || fputs(json, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "plan: cannot write %s\n", json_path);
    return 1;
  }
  printf("planned on %u workers: %lld bytes of communication per step; %zu bytes of JSON in %s\n",
         tofu_plan_workers(plan), (long long)tofu_plan_communication_bytes(plan), strlen(json),
         json_path);
  tofu_plan_free(plan);

  /* Errors are status codes with messages. */
  options.workers = 0;
  tofu_status s = tofu_plan_graph(planner, g, &options, &plan);
  printf("0 workers: %s: %s\n", tofu_status_name(s), tofu_last_error());
  options.workers = 4;
  options.algorithm = "best";
  s = tofu_plan_graph(planner, g, &options, &plan);
  printf("algorithm 'best': %s: %s\n", tofu_status_name(s), tofu_last_error());
  s = tofu_graph_add_input(g, "x", x, 2, "float32");
  printf("x again: %s: %s\n", tofu_status_name(s), tofu_last_error());
  s = tofu_plan_onnx(planner, "not a model", 11, "junk.onnx", NULL, &plan);
  printf("junk ONNX: %s: %s\n", tofu_status_name(s), tofu_last_error());
  s = tofu_plan_graph(NULL, g, NULL, &plan);
  printf("no planner: %s: %s\n", tofu_status_name(s), tofu_last_error());

  tofu_graph_free(g);
  tofu_planner_free(planner);
  return 0;
}
