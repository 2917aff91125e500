// The command-line flags tofu-plan and tofu-run share, declared once: one name, one type,
// one default and one help text each (as LLVM's CodeGen/CommandFlags.h is for llc and opt).
// They name a model, say how its step is built (training, precision, the loss), and how it
// is planned (the search, a memory budget, recomputation). Names are parsed once, into their
// enums; a tool reads the values after llvm::cl has parsed its command line.
//
// A default that must differ between the tools (the batch, the optimiser) is the tool's, set
// by initStepFlags before parsing, and --help says why.
#ifndef TOFU_CLI_STEP_FLAGS_H
#define TOFU_CLI_STEP_FLAGS_H

#include <cstdint>
#include <string>

#include "graph/graph.h"
#include "graph/training.h"
#include "planner/pipeline.h"
#include "planner/recompute.h"
#include "search/search.h"
#include "support/cl_choice.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

namespace tofu {
namespace cli {

namespace cl = llvm::cl;

/// The category the shared flags are listed under in --help.
cl::OptionCategory &stepCategory();

/// --format.
enum class Format { Table, Json };

/// Its help is the tool's (initStepFlags): tofu-plan searches a plan for K workers, tofu-run
/// also runs it.
extern cl::opt<unsigned> workers;
extern cl::opt<std::string> model;
extern cl::opt<std::string> graphFile;
extern cl::opt<std::string> onnxFile;
extern cl::opt<unsigned> dataInputs;
extern cl::list<std::string> trainableOpt;
extern cl::list<std::string> frozenOpt;
extern cl::opt<int64_t> batch;
extern cl::opt<Precision, false, ChoiceParser<Precision>> precisionOpt;
/// Its values are search/search.h's algorithms(), added by initStepFlags.
extern cl::opt<Algorithm, false, ChoiceParser<Algorithm>> algo;
extern cl::opt<Optimizer, false, ChoiceParser<Optimizer>> optimizer;
/// The value given, -1 where not given (then adamw decays by its default, the others not).
extern cl::opt<double> weightDecayOpt;
extern cl::opt<std::string> lossOutput;
extern cl::opt<RecomputeMode, false, ChoiceParser<RecomputeMode>> recomputeOpt;
extern cl::opt<std::string> memoryPerWorker;
/// --objective: what the search minimises (PipelineOptions::objective).
extern cl::opt<PlanObjective, false, ChoiceParser<PlanObjective>> objectiveOpt;
extern cl::opt<Format, false, ChoiceParser<Format>> format;
extern cl::opt<std::string> opsDir;
/// Values of an ONNX model's data inputs, NAME=FILE,...; it may repeat.
extern cl::list<std::string> inputOpt;
/// The device a step time is estimated for; its default is the tool's (initStepFlags).
extern cl::opt<std::string> deviceOpt;
/// Megatron-LM's configuration, TP,PP,DP (--algo megatron).
extern cl::opt<std::string> megatronOpt;

/// Every --input's items, joined by commas.
std::string inputItems();

/// What a tool's defaults are where the tools differ, and why (said in --help).
struct ToolDefaults {
  int64_t batch = 2;
  const char *batchWhy = "";
  Optimizer optimizer = Optimizer::SGD;
  const char *optimizerWhy = "";
  /// What K workers mean to the tool (--workers' help).
  const char *workersHelp = "";
  /// When --input applies ("With --onnx").
  const char *inputWhen = "";
  /// --device's default ("" for none) and what the tool does with the device.
  const char *device = "";
  const char *deviceHelp = "";
};

/// Sets the tool's defaults and the help texts that name them, and the search algorithms'
/// choices; --help then lists the tool's own options (`toolCategory`) and these. Call once,
/// before parsing the command line.
void initStepFlags(cl::OptionCategory &toolCategory, const ToolDefaults &defaults);

/// The model the flags name (--model, --graph or --onnx, with --batch, --data-inputs,
/// --trainable and --frozen); the ONNX import's given inputs and sample shapes are the
/// tool's to add.
GraphSource graphSource();

/// --memory-per-worker in bytes, 0 where not given; a value that is not a number of bytes is
/// bad usage that names the flag.
llvm::Expected<int64_t> memoryBudget();

/// --stages, --microbatches and --schedule. Bad usage, naming the flag: a malformed
/// --stages, no microbatches, a schedule without stages.
extern cl::opt<std::string> stagesOpt;
extern cl::opt<unsigned> microbatchesOpt;
llvm::Expected<StageSpec> stageSpec();
/// The search's algorithm (--algo) into `search`, and with --megatron TP,PP,DP its steps:
/// data parallelism across DP groups (the outer step), Megatron-LM's tensor parallelism
/// over TP workers inside each, and with PP > 1 PP pipeline stages into `stages` (of PP
/// microbatches unless --microbatches gives them), the steps then each stage's. Bad usage,
/// naming the flag: --megatron with another --algo, values that are not positive integers,
/// a product that is not `search.workers`, PP > 1 without `stages` (the tool plans none) or
/// against --stages. --algo placement gives `stages` a group per worker (and as many
/// microbatches unless --microbatches gives them).
llvm::Error applyAlgorithm(PlanOptions &search, StageSpec *stages = nullptr);

} // namespace cli
} // namespace tofu

#endif // TOFU_CLI_STEP_FLAGS_H
