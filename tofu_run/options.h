// tofu-run's command-line options (llvm::cl), shared by the driver's files, and the checks
// of their values and combinations that need no model.
#ifndef TOFU_TOFU_RUN_OPTIONS_H
#define TOFU_TOFU_RUN_OPTIONS_H

#include <cstdint>
#include <optional>
#include <string>

#include "cli/step_flags.h"
#include "graph/training.h"
#include "runtime/backend_registry.h"
#include "runtime/checkpoint.h"
#include "runtime/dataset.h"
#include "runtime/lr_schedule.h"
#include "search/search.h"
#include "support/cl_choice.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

namespace tofurun {

namespace cl = llvm::cl;

extern cl::OptionCategory runCategory;

// The flags tofu-plan shares (cli/step_flags.h): the model, its step and its plan.
using namespace tofu::cli;

/// --kernels: what computes each op's share.
enum class Kernels { Compiled, Generated, Interp };

extern cl::opt<std::string> backend;
extern cl::opt<std::string> mpiTransport;
extern cl::opt<bool> tf32;
extern cl::opt<std::string> lrScheduleOpt;
extern cl::opt<unsigned> warmupOpt;
extern cl::opt<bool> infer;
extern cl::opt<std::string> shuffleOpt;
extern cl::opt<std::string> outputDir;
extern cl::opt<tofu::LossKind, false, tofu::ChoiceParser<tofu::LossKind>> lossKindOpt;
extern cl::opt<tofu::StoredType, false, tofu::ChoiceParser<tofu::StoredType>> saveType;
extern cl::opt<double> momentumOpt;
extern cl::opt<bool> verify;
extern cl::opt<unsigned> seed;
extern cl::opt<bool> fusion;
extern cl::opt<std::string> dataMode;
extern cl::opt<std::string> feedOpt;
extern cl::opt<std::string> normalizeOpt;
extern cl::opt<unsigned> epochs;
extern cl::opt<std::string> evalOpt;
extern cl::opt<unsigned> evalEvery;
extern cl::opt<std::string> evalModeOpt;
extern cl::opt<std::string> saveOnnx;
extern cl::opt<bool> saveOnnxExternal;
extern cl::opt<unsigned> logEvery;
extern cl::opt<double> tolerance;
extern cl::opt<Kernels, false, tofu::ChoiceParser<Kernels>> kernelsMode;
extern cl::opt<unsigned> steps;
extern cl::opt<double> learningRate;
extern cl::opt<int> threadsPerWorker;
extern cl::opt<bool> checking;
extern cl::opt<std::string> saveDir;
extern cl::opt<std::string> loadDir;
extern cl::opt<unsigned> profileTop;
extern cl::opt<std::string> profileInto;
extern cl::opt<std::string> calibrateOpt;
extern cl::opt<bool> continueNonFinite;
extern cl::opt<bool> kernelReportOpt;
extern cl::opt<std::string> metricsFile;
extern cl::opt<std::string> planJson;
extern cl::opt<bool> dumpPlan;

/// The most workers the in-process engines (CPU, CUDA) run: each is a thread (or stream)
/// with its own arena in this process; 1024 take some 20 s and 3 GB to set up for an MLP.
constexpr unsigned kMaxEngineWorkers = 1024;

/// --normalize, parsed by checkOptions.
extern tofu::Normalization normalization;
/// --lr-schedule, parsed by checkOptions (unset: none given).
extern std::optional<tofu::LrSchedule> lrSchedule;

/// Checks the options' values and combinations for the backend `entry` (what needs no model): a
/// UsageError naming the option otherwise. Parses --normalize into `normalization`.
llvm::Error checkOptions(const tofu::BackendEntry &entry);

} // namespace tofurun

#endif // TOFU_TOFU_RUN_OPTIONS_H
