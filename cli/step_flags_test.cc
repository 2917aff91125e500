// The shared flags: each tool's defaults and the help texts that say them, one parse into
// values and enums, repeated --input items, the budget's errors naming the flag.
#include "cli/step_flags.h"

#include <string>
#include <vector>

#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

namespace tofu {
namespace cli {
namespace {

bool parse(std::vector<const char *> args) {
  cl::ResetAllOptionOccurrences();
  args.insert(args.begin(), "step_flags_test");
  return cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(), "",
                                     &llvm::nulls());
}

TEST(StepFlags, ToolDefaultsParseOnceAndSayWhy) {
  static cl::OptionCategory tool("step_flags_test options");
  ToolDefaults d;
  d.batch = 7;
  d.batchWhy = "the tool's reason";
  d.optimizer = Optimizer::AdamW;
  d.optimizerWhy = "another reason";
  d.workersHelp = "what K means here";
  d.inputWhen = "With --onnx";
  d.device = "a100";
  d.deviceHelp = "what the device is for";
  initStepFlags(tool, d);
  EXPECT_NE(batch.HelpStr.find("(default 7: the tool's reason)"), llvm::StringRef::npos);
  EXPECT_NE(optimizer.HelpStr.find("(default adamw: another reason)"), llvm::StringRef::npos);
  EXPECT_TRUE(workers.HelpStr.endswith("what K means here"));
  EXPECT_TRUE(inputOpt.HelpStr.startswith("With --onnx: NAME=FILE"));
  EXPECT_TRUE(deviceOpt.HelpStr.endswith(". what the device is for"));

  // Nothing given: the tool's defaults.
  ASSERT_TRUE(parse({"--model", "mlp"}));
  EXPECT_EQ(batch, 7);
  EXPECT_EQ(optimizer, Optimizer::AdamW);
  EXPECT_EQ(std::string(deviceOpt), "a100");
  EXPECT_EQ(workers, 0u);
  EXPECT_EQ(precisionOpt, Precision::FP32);
  EXPECT_EQ(recomputeOpt, RecomputeMode::None);
  EXPECT_EQ(weightDecayOpt, -1);
  auto none = memoryBudget();
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(*none, 0);
  GraphSource s = graphSource();
  EXPECT_EQ(s.model, "mlp");
  EXPECT_EQ(s.batch, 7);
  EXPECT_FALSE(s.batchGiven);
  EXPECT_FALSE(s.dataInputsGiven);

  // Given: names parsed into their enums, --input repeated and joined, a byte count read.
  ASSERT_TRUE(parse({"--onnx",
                     "m.onnx",
                     "--batch",
                     "3",
                     "--optimizer",
                     "momentum",
                     "--precision",
                     "bf16",
                     "--recompute",
                     "sqrt",
                     "--workers",
                     "4",
                     "--input",
                     "x=a.npy,y=b.npy",
                     "--input",
                     "z=c.pb",
                     "--memory-per-worker",
                     "2KiB",
                     "--frozen",
                     "w1,w2",
                     "--device",
                     "cpu",
                     "--format",
                     "json"}));
  EXPECT_EQ(batch, 3);
  EXPECT_EQ(optimizer, Optimizer::Momentum);
  EXPECT_EQ(precisionOpt, Precision::BF16);
  EXPECT_EQ(recomputeOpt, RecomputeMode::Sqrt);
  EXPECT_EQ(workers, 4u);
  EXPECT_EQ(format, Format::Json);
  EXPECT_EQ(std::string(deviceOpt), "cpu");
  EXPECT_EQ(inputItems(), "x=a.npy,y=b.npy,z=c.pb");
  auto budget = memoryBudget();
  ASSERT_TRUE(bool(budget));
  EXPECT_EQ(*budget, 2048);
  s = graphSource();
  EXPECT_EQ(s.onnxFile, "m.onnx");
  EXPECT_TRUE(s.batchGiven);
  EXPECT_EQ(s.frozen, (std::set<std::string>{"w1", "w2"}));

  // A budget that is no byte count is bad usage naming the flag; an unknown name is refused
  // by the parser.
  ASSERT_TRUE(parse({"--memory-per-worker", "lots"}));
  auto bad = memoryBudget();
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()).rfind("--memory-per-worker: ", 0), 0u);
  EXPECT_FALSE(parse({"--optimizer", "lion"}));
  EXPECT_FALSE(parse({"--precision", "fp8"}));
}

} // namespace
} // namespace cli
} // namespace tofu
