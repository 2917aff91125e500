// The one pipeline every tool, benchmark, test fixture and the public API runs:
//
//   model (zoo, graph JSON, ONNX) -> checked graph -> training graph (a loss added to a
//   non-scalar output, backward ops, optimiser updates) -> analysis (Problem) -> partition
//   plan -> execution plan and memory plan
//
// Each stage's errors name the model or file. The internal C++ API for our own tools;
// frameworks use include/tofu/plan.h or include/tofu/tofu.h, which wrap this.
#ifndef TOFU_PLANNER_PIPELINE_H
#define TOFU_PLANNER_PIPELINE_H

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "codegen/exec_plan.h"
#include "codegen/memory_plan.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "partition/problem.h"
#include "search/search.h"

namespace tofu {

struct GraphSource {
  std::string model, graphFile, onnxFile; ///< exactly one set
  int64_t batch = 1;
  unsigned dataInputs = 1;      ///< with onnxFile
  bool dataInputsGiven = false; ///< the user gave dataInputs: it must not exceed the inputs
  bool batchGiven = false;      ///< the user gave batch: an ONNX model must have a batch to set
  /// With onnxFile: inputs given ahead (their shapes, and small integer values that ops
  /// need as constants).
  std::map<std::string, OnnxGivenInput> givenInputs;
  /// With onnxFile: the sample shapes of the data that will feed its inputs
  /// (OnnxImportOptions::sampleShapes).
  std::map<std::string, std::vector<int64_t>> sampleShapes;
  /// With onnxFile: initializers trained or kept constant whatever the importer's rule
  /// (OnnxImportOptions::trainable, frozen).
  std::set<std::string> trainable, frozen;
};

/// What --trainable and --frozen do (tofu-plan's and tofu-run's options, which fill
/// GraphSource::trainable and frozen).
/// --precision bf16's description, shared by tofu-plan and tofu-run.
extern const char *const kBf16PrecisionHelp;
extern const char kTrainableHelp[], kFrozenHelp[];

/// The operator library's directory, wherever the tool runs from: `given` where the user
/// gave one (--ops), else $TOFU_OPS, else the library beside `anchor` (by default the
/// running executable; the shared library passes its own file): its Bazel runfiles
/// (`<anchor>.runfiles/tofu/ops`, the build tree), else the first of `share/tofu/ops` and
/// `ops` holding .tdl files in the anchor's directory or a directory above it (an install
/// tree: PREFIX/bin/../share/tofu/ops, PREFIX/lib/../share/tofu/ops), else `ops` in the
/// working directory. Errors list every place it looked; a `given` directory without .tdl
/// files is an error that calls it `label` (the option or argument that named it).
llvm::Expected<std::string> findOpsDir(const std::string &given, bool userGave,
                                       const std::string &anchor = "",
                                       const std::string &label = "--ops");

/// Builds or reads the graph and checks it (shapes inferred). `name` gets what to call it
/// in messages (the model or the file). Errors say what failed, the file or model named.
llvm::Expected<Graph> loadGraph(const GraphSource &source, const OpLibrary &lib, std::string *name);

/// How far the pipeline goes.
enum class Stage {
  Graph,     ///< the checked (training) graph
  Problem,   ///< ... analysed
  Plan,      ///< ... its partition searched
  Execution, ///< ... the execution plan and every worker's memory planned
};

struct PipelineOptions {
  /// Build the training step with this optimiser. A graph whose (chosen) output is not a
  /// scalar gets a loss first (addLoss: softmax cross-entropy against a new input `labels`
  /// for a rank-2 output, else the mean squared error against a new input `target`); a
  /// scalar output is the loss.
  std::optional<Optimizer> train;
  /// With `train`: add an L2 weight decay to the gradients (AdamW always decays, decoupled);
  /// the graph then reads a rank-0 input `weight_decay`.
  bool weightDecay = false;
  /// With `train`, a graph of several outputs trains on this one (default: the first); the
  /// others are not computed for the step's sake (they are dropped as outputs).
  std::string lossOutput;
  /// With `train`: the loss a graph whose output is not a scalar gets (addLoss).
  LossKind loss = LossKind::Auto;
  /// The element types the step computes in (applyPrecision, once the loss is added and
  /// before the backward ops are built).
  Precision precision = Precision::FP32;
  Stage until = Stage::Plan;
  PlanOptions search;
  /// Where given, replaces the search: a plan received from elsewhere (tofu-run's other
  /// processes get rank 0's). It must be a plan of the given problem.
  std::function<llvm::Expected<PartitionPlan>(const Problem &)> plan;
};

struct PipelineResult {
  std::string name;           ///< the model or file, for messages
  Graph graph;                ///< checked; the training graph when trained
  std::string loss;           ///< the loss tensor (trained graphs), else empty
  std::string lossNote;       ///< how a loss was added to a non-scalar output, else empty
  PrecisionSummary precision; ///< what the precision policy changed
  std::optional<Problem> problem;
  double analysisSeconds = 0;
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
};

/// Runs the pipeline on a built graph (checked here if it is not yet) up to `options.until`.
/// On failure, `failed` (where given) gets the stage that failed: Graph (reading, checking,
/// the training step), Problem (the analysis), Plan (the search) or Execution.
llvm::Expected<PipelineResult> runPipeline(Graph g, const std::string &name, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed = nullptr);
/// The same from a model, graph file or ONNX file.
llvm::Expected<PipelineResult> runPipeline(const GraphSource &source, const OpLibrary &lib,
                                           const PipelineOptions &options, Stage *failed = nullptr);

/// The same problem on one worker (what a partitioned plan is compared with and verified
/// against): its plan, execution plan and memory plan.
struct SingleWorker {
  PartitionPlan plan;
  ExecPlan exec;
  MemoryPlan memory;
};
SingleWorker singleWorker(const Problem &problem, const std::vector<std::string> &outputs);

} // namespace tofu

#endif // TOFU_PLANNER_PIPELINE_H
