// The flags tofu-plan and tofu-run share (step_flags.h).
#include "cli/step_flags.h"

#include "fmt/format.h"
#include "graph/training.h"
#include "planner/step_time.h"
#include "support/errors.h"
#include "support/units.h"

namespace tofu {
namespace cli {

cl::OptionCategory &stepCategory() {
  static cl::OptionCategory category("model, step and plan options (tofu-plan's and tofu-run's)");
  return category;
}

// Its help is the tool's (initStepFlags).
cl::opt<unsigned> workers("workers", cl::value_desc("K"), cl::init(0), cl::cat(stepCategory()));
cl::opt<std::string> model("model", cl::desc("A zoo model (see --help)"), cl::value_desc("NAME"),
                           cl::cat(stepCategory()));
cl::opt<std::string> graphFile("graph", cl::desc("A graph in JSON (DESIGN.md's format)"),
                               cl::value_desc("FILE.json"), cl::cat(stepCategory()));
cl::opt<std::string> onnxFile("onnx", cl::desc("An ONNX model (weights included or not)"),
                              cl::value_desc("FILE.onnx"), cl::cat(stepCategory()));
cl::opt<unsigned> dataInputs("data-inputs",
                             cl::desc("With --onnx, when weights are graph inputs: how many "
                                      "leading inputs are data (default 1)"),
                             cl::init(1), cl::cat(stepCategory()));
cl::list<std::string> trainableOpt("trainable", cl::CommaSeparated, cl::desc(kTrainableHelp),
                                   cl::value_desc("NAME,..."), cl::cat(stepCategory()));
cl::list<std::string> frozenOpt("frozen", cl::CommaSeparated, cl::desc(kFrozenHelp),
                                cl::value_desc("NAME,..."), cl::cat(stepCategory()));
// Its default and help are the tool's (initStepFlags).
cl::opt<int64_t> batch("batch", cl::cat(stepCategory()));
cl::opt<Precision, false, ChoiceParser<Precision>> precisionOpt(
    "precision",
    cl::desc("The element types the step computes and stores its tensors in (bf16 tensors take "
             "2 bytes in the arenas; on tofu-run's cuda and nccl backends products of bf16 "
             "operands run on tensor cores):"),
    cl::values(clEnumValN(Precision::FP32, "fp32", "every float tensor float32 (default)"),
               clEnumValN(Precision::BF16, "bf16", kBf16PrecisionHelp)),
    cl::init(Precision::FP32), cl::cat(stepCategory()));
cl::opt<Algorithm, false, ChoiceParser<Algorithm>> algo("algo", cl::desc("The search algorithm:"),
                                                        cl::init(Algorithm::Tofu),
                                                        cl::cat(stepCategory()));
// Its default and help are the tool's (initStepFlags).
cl::opt<Optimizer, false, ChoiceParser<Optimizer>>
    optimizer("optimizer",
              cl::values(clEnumValN(Optimizer::SGD, "sgd", "SGD"),
                         clEnumValN(Optimizer::Momentum, "momentum",
                                    "SGD with momentum, PyTorch's form: v = mu v + g, w -= lr v"),
                         clEnumValN(Optimizer::Nesterov, "nesterov", "w -= lr (g + mu v)"),
                         clEnumValN(Optimizer::Adam, "adam", "Adam"),
                         clEnumValN(Optimizer::AdamW, "adamw", "Adam with decoupled weight decay")),
              cl::cat(stepCategory()));
cl::opt<double> weightDecayOpt("weight-decay",
                               cl::desc("Weight decay: with sgd, momentum, nesterov and adam an "
                                        "L2 term added to the gradient (g + wd w, PyTorch's "
                                        "weight_decay); with adamw decoupled (w -= lr wd w; "
                                        "default 0.01 there, else 0)"),
                               cl::init(-1), cl::value_desc("WD"), cl::cat(stepCategory()));
cl::opt<std::string> lossOutput("loss-output",
                                cl::desc("With a training step, a graph of several outputs trains "
                                         "on these, on the sum of their losses, each times its "
                                         "WEIGHT (default 1): NAME[:WEIGHT],... (default: the "
                                         "first output). Weights that reach no loss stay as they "
                                         "are, with a note"),
                                cl::value_desc("NAME[:WEIGHT],..."), cl::cat(stepCategory()));
cl::opt<RecomputeMode, false, ChoiceParser<RecomputeMode>> recomputeOpt(
    "recompute",
    cl::desc("What a training step recomputes instead of keeping for the backward pass "
             "(tofu-run's --verify also runs the first step without recomputation and says "
             "whether the two are bit-identical):"),
    cl::values(clEnumValN(RecomputeMode::Auto, "auto",
                          "the default with a memory budget: nothing if the plan fits without, "
                          "else the least found that fits, cheapest to recompute first"),
               clEnumValN(RecomputeMode::Sqrt, "sqrt",
                          "segment checkpointing: every ceil(sqrt(n))-th forward tensor kept, "
                          "the rest recomputed"),
               clEnumValN(RecomputeMode::None, "none", "the default without a budget")),
    cl::init(RecomputeMode::None), cl::cat(stepCategory()));
cl::opt<PlanObjective, false, ChoiceParser<PlanObjective>> objectiveOpt(
    "objective", cl::desc(kObjectiveHelp),
    cl::values(clEnumValN(PlanObjective::Time, "time", "the estimated step (the default)"),
               clEnumValN(PlanObjective::Bytes, "bytes", "the bytes moved (the paper's)")),
    cl::init(PlanObjective::Time), cl::cat(stepCategory()));
cl::opt<std::string> memoryPerWorker(
    "memory-per-worker",
    cl::desc("Plan within BYTES per worker (e.g. 80GB, 16GiB): the plan of least communication "
             "found whose planned peak (the memory planner's, each worker's arena) fits on "
             "every worker, recomputing what the budget needs on a training step (--recompute "
             "auto), or fail saying by how much the closest plan misses. With --algo "
             "smallbatch and swap, the memory of their one worker"),
    cl::value_desc("BYTES"), cl::cat(stepCategory()));
cl::opt<Format, false, ChoiceParser<Format>>
    format("format", cl::desc("How the results are printed:"),
           cl::values(clEnumValN(Format::Table, "table", "tables (default)"),
                      clEnumValN(Format::Json, "json", "one JSON object")),
           cl::init(Format::Table), cl::cat(stepCategory()));
cl::opt<std::string>
    opsDir("ops",
           cl::desc("The operator library (default: $TOFU_OPS, else found beside the executable: "
                    "its Bazel runfiles or PREFIX/share/tofu/ops, else ./ops)"),
           cl::init("ops"), cl::value_desc("DIR"), cl::cat(stepCategory()));

// Its help begins with the tool's words (initStepFlags).
cl::list<std::string> inputOpt("input", cl::value_desc("NAME=FILE,..."), cl::ZeroOrMore,
                               cl::cat(stepCategory()));
// Its default and help are the tool's (initStepFlags).
cl::opt<std::string> deviceOpt("device", cl::value_desc("h100|a100|cpu|FILE"),
                               cl::cat(stepCategory()));

std::string inputItems() {
  std::string all;
  for (const std::string &item : inputOpt)
    all += (all.empty() || item.empty() ? "" : ",") + item;
  return all;
}

void initStepFlags(cl::OptionCategory &toolCategory, const ToolDefaults &d) {
  cl::HideUnrelatedOptions({&toolCategory, &stepCategory()});
  // cl::desc keeps a pointer to its text: the composed texts live as long as the options.
  static std::string batchHelp, optimizerHelp, workersHelp, inputHelp, deviceHelp;
  workersHelp = fmt::format("Workers to partition across (any K >= 1): {}", d.workersHelp);
  workers.setDescription(workersHelp);
  inputHelp = fmt::format(
      "{}: NAME=FILE,... (.npy, ONNX TensorProto .pb, IDX or FILE.safetensors[:KEY]), values "
      "of the ONNX model's data inputs, read before its import: each input takes its array's "
      "shape (fixing dynamic dimensions), and an op that needs an input as a constant (a "
      "shape, axes, starts) takes the values of an array of at most 4096 elements. A sequence "
      "input is given element by element, NAME[0]=FILE,NAME[1]=FILE,...; an optional holding "
      "a tensor as NAME[0]=FILE; an empty sequence, or an optional holding nothing, as "
      "NAME[]. May repeat: --input x=a.npy --input y=b.npy",
      d.inputWhen);
  inputOpt.setDescription(inputHelp);
  deviceHelp = fmt::format("{}. {}", kDeviceHelp, d.deviceHelp);
  deviceOpt.setDescription(deviceHelp);
  deviceOpt.setInitialValue(d.device);
  batchHelp =
      fmt::format("Batch size of a zoo or ONNX model (default {}: {})", d.batch, d.batchWhy);
  batch.setDescription(batchHelp);
  batch.setInitialValue(d.batch);
  optimizerHelp = fmt::format("The optimiser of a training step, each as torch.optim's (default "
                              "{}: {}):",
                              optimizerName(d.optimizer), d.optimizerWhy);
  optimizer.setDescription(optimizerHelp);
  optimizer.setInitialValue(d.optimizer);
  addAlgorithmChoices(algo.getParser());
}

GraphSource graphSource() {
  GraphSource s;
  s.model = model;
  s.graphFile = graphFile;
  s.onnxFile = onnxFile;
  s.batch = batch;
  s.dataInputs = dataInputs;
  s.dataInputsGiven = dataInputs.getNumOccurrences() > 0;
  s.batchGiven = batch.getNumOccurrences() > 0;
  s.trainable = {trainableOpt.begin(), trainableOpt.end()};
  s.frozen = {frozenOpt.begin(), frozenOpt.end()};
  return s;
}

cl::opt<std::string> megatronOpt(
    "megatron",
    cl::desc("With --algo megatron: Megatron-LM's configuration, tensor x pipeline x data "
             "parallelism (their product the workers; PP pipeline stages under --schedule, "
             "each of TP x DP workers: data parallelism across its groups, tensor "
             "parallelism inside each). Default: the best of the grid by the step estimated on the "
             "device model "
             "(TP = the workers where there is none)"),
    cl::value_desc("TP,PP,DP"), cl::cat(stepCategory()));

cl::opt<std::string> stagesOpt(
    "stages",
    cl::desc("Pipeline stages of the training step: S stages of about equal forward work, or "
             "each stage's layers by commas (a layer is a segment of the forward graph between "
             "two cuts, the tensors a stage can hand the next alone; tofu-plan lists them). "
             "Each stage runs on its own group of K/S workers, partitioned over them by the "
             "search. auto (tofu-plan): the stages and microbatches of least estimated step, "
             "each candidate planned whole (1 stage; each power of two dividing the workers, "
             "and a machine's outermost count, with S, 2S and 4S microbatches)"),
    cl::value_desc("S|L1,L2,...|auto"), cl::cat(stepCategory()));
cl::opt<unsigned> microbatchesOpt(
    "microbatches",
    cl::desc("Split the batch into M microbatches of --batch/M (with --stages, pipelined "
             "through them; each weight is updated once per step with the gradient of the "
             "whole batch). Default: 1, PP with --megatron, the workers with --algo placement"),
    cl::value_desc("M"), cl::init(1), cl::cat(stepCategory()));
cl::opt<Schedule, false, ChoiceParser<Schedule>> scheduleOpt(
    "schedule", cl::desc("How the stages run the microbatches:"),
    cl::values(clEnumValN(Schedule::OneFOneB, "1f1b",
                          "PipeDream-Flush: after S - s forwards, stage s alternates a forward "
                          "and a backward (at most S - s microbatches' activations held; "
                          "default)"),
               clEnumValN(Schedule::GPipe, "gpipe",
                          "every microbatch's forward, then every backward (all M held)")),
    cl::init(Schedule::OneFOneB), cl::cat(stepCategory()));

llvm::Expected<StageSpec> stageSpec() {
  StageSpec spec;
  if (stagesOpt.getNumOccurrences())
    if (llvm::Error e = parseStages(stagesOpt, spec))
      return usageError(llvm::toString(std::move(e)));
  if (microbatchesOpt == 0)
    return usageError("--microbatches must be at least 1");
  spec.microbatches = microbatchesOpt;
  spec.schedule = scheduleOpt;
  if (algo == Algorithm::Placement) {
    if (stagesOpt.getNumOccurrences())
      return usageError("--algo placement puts every layer on a worker in turn: --stages does "
                        "not apply");
    if (scheduleOpt.getNumOccurrences() && scheduleOpt != Schedule::GPipe)
      return usageError("--algo placement runs GPipe's order (every forward, then every "
                        "backward): 1F1B over round-robin layers is Megatron's interleaved "
                        "schedule, which is not built");
    spec.roundRobin = true;
    spec.schedule = Schedule::GPipe;
  } else if (spec.automatic && microbatchesOpt.getNumOccurrences()) {
    return usageError("--stages auto chooses the microbatches too: give --stages S with "
                      "--microbatches M, or neither");
  } else if (scheduleOpt.getNumOccurrences() && spec.stages == 1 && !spec.automatic)
    return usageError("--schedule orders pipeline stages: give --stages too");
  return spec;
}

llvm::Error applyAlgorithm(PlanOptions &search, StageSpec *stages) {
  AlgorithmChoice choice;
  choice.algorithm = algo;
  choice.algorithmGiven = algo.getNumOccurrences() > 0;
  if (megatronOpt.getNumOccurrences())
    choice.megatron = megatronOpt;
  choice.stagesGiven = stagesOpt.getNumOccurrences() > 0;
  choice.microbatchesGiven = microbatchesOpt.getNumOccurrences() > 0;
  return applyAlgorithmChoice(choice, search, stages, SettingNames::flags());
}

llvm::Expected<int64_t> memoryBudget() {
  if (!memoryPerWorker.getNumOccurrences())
    return 0;
  auto bytes = parseBytes(memoryPerWorker);
  if (!bytes)
    return usageError("--memory-per-worker: " + llvm::toString(bytes.takeError()));
  return *bytes;
}

} // namespace cli
} // namespace tofu
