// An estimate of a training step's time for a plan: every worker's op instances on a device
// model (each instance's FLOPs and bytes against the device's rates, plus a fixed cost per
// instance), and the plan's exact traffic over the machine's links.
//
// The model, per op instance of a worker (after element-wise fusion, as the engines run):
//   seconds = launches + max(flops / rate, bytes / bandwidth)
// where a library call is one launch (DeviceModel::libraryLaunch) and a generated kernel one
// per pass (its main nest, and one per temporary its schedule fills first, each of which
// reads the inputs again: codegen/schedule.h), and `rate` is the device's product rate for its
// operand type (bfloat16 or float32) when the share is a product or convolution that a library runs
// (the shares the engines hand to oneDNN, cuBLAS or cuDNN: codegen/library_plans.h), else the rate
// of generated kernels. A library product's flops are twice its scheduled loops' iterations (a
// multiply-add each); a generated kernel's, the iterations times its body's arithmetic (a
// transcendental function counting 10); a library scatter-add's, one add per element it reads.
// Bytes are the input regions read and the result written, at their storage sizes. Communication is
// every byte a worker receives from the others (its fetches and the partial results it combines,
// counted from the execution plan) over the link's bandwidth, plus the link's latency per message
// (planner/topology.h's count, over the given machine's levels).
//
// Each synchronisation of the workers costs DeviceModel::syncLatency: the engines hold a
// barrier after a node where a worker reads another's data (before the reads, so the data is
// written, and after them, so nobody overwrites it while it is read); with workers that
// share a CPU its cost, waiting for the slowest at each, is what `tofu-run --calibrate`
// measures on a model of many small ops.
//
// Overlap: none is assumed. A worker's step is its compute plus its communication, and the
// step is the slowest worker's. The engines fetch a node's inputs before computing it and
// synchronise the workers at every node that needs another's data, so this is how they run;
// a runtime that overlapped transfers with computation would come closer to the larger of
// the two, which the estimate also reports.
//
// Workers that share one device (threads or processes on one CPU) each get their share of
// its rates, bandwidth and link (DeviceModel::shared; a --topology's levels are taken as
// given).
#ifndef TOFU_PLANNER_STEP_TIME_H
#define TOFU_PLANNER_STEP_TIME_H

#include <optional>
#include <string>
#include <vector>

#include "codegen/exec_plan.h"
#include "graph/graph.h"
#include "partition/problem.h"
#include "planner/topology_spec.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// An op instance's time as `tofu-run --profile-into` measured it: the instances it stands
/// for are those with the same op, kind, FLOPs, bytes, passes and operand type, at the same
/// number of workers sharing the device (0 where the device is not shared).
struct MeasuredOp {
  std::string op, kind; ///< kind: product, convolution, scatter or generated
  double flops = 0, bytes = 0;
  unsigned passes = 1;
  bool bf16 = false;
  unsigned workers = 0;
  double seconds = 0; ///< the median of the instances measured
  unsigned samples = 0;
};

/// What one worker's device does per second. Every rate is > 0.
struct DeviceModel {
  std::string name;            ///< e.g. "H100 SXM", "cpu"
  std::string source;          ///< where the figures come from (a data sheet, a calibration run)
  double productFlops = 0;     ///< FLOP/s of library products and convolutions, float32 operands
  double productFlopsBf16 = 0; ///< ... bfloat16 operands (0: as float32)
  double kernelFlops = 0;      ///< FLOP/s of generated kernels
  double bandwidth = 0;        ///< bytes per second to and from the device's memory
  double convFlops = 0;        ///< FLOP/s of library convolutions (0: as products)
  double launch = 0;        ///< seconds per pass of a generated kernel (a launch, a parallel loop)
  double libraryLaunch = 0; ///< seconds per library call (0: `launch`)
  double convLaunch = 0;    ///< seconds per library convolution (0: `libraryLaunch`)
  double linkBandwidth = 0; ///< bytes per second a worker receives from another worker
  double linkLatency = 0;   ///< seconds per message between workers
  /// Bytes per second each way between a worker and host memory (0: none, a CPU being its
  /// own host), and seconds per transfer: what the Swapping baseline moves over
  /// (planner/swap.h; a topology's host link overrides it).
  double hostBandwidth = 0, hostLatency = 0;
  /// Seconds per synchronisation of the workers: a barrier around each node where a worker
  /// reads another's data (codegen/program_builder.cc: placeSyncs), the waiting at it
  /// included (the workers' jitter; 0: not modelled, as on the data sheets' GPUs, whose
  /// engine orders streams by events).
  double syncLatency = 0;
  /// The workers share this device (threads or processes on one CPU): each of k workers
  /// computes at 1/k of the rates and bandwidth, and receives at 1/k of the link.
  bool shared = false;
  /// Measured op times (tofu-run --profile-into): an op instance that one stands for is
  /// estimated at its measured time instead of by the rates.
  std::vector<MeasuredOp> measured;
};

/// The built-in models by name (`h100`, `a100`, from their data sheets), or a model read from
/// a JSON file (DeviceModel's fields, as deviceModelJson writes them: what `tofu-run
/// --calibrate` measures). `cpu` reads the calibration at defaultCpuModelPath(); an error
/// says how to make it.
llvm::Expected<DeviceModel> deviceModelNamed(const std::string &nameOrFile);
/// What --device's help lists.
extern const char kDeviceHelp[];
/// Where `tofu-run --calibrate` keeps this machine's model by default: $TOFU_CPU_MODEL, else
/// $XDG_CACHE_HOME/tofu/cpu-model.json, else $HOME/.cache/tofu/cpu-model.json.
std::string defaultCpuModelPath();
/// The model as JSON; without `withMeasured`, without the measured ops (stepTimeJson counts
/// them).
std::string deviceModelJson(const DeviceModel &d, bool withMeasured = true);
/// Reads deviceModelJson's form; errors name the field.
llvm::Expected<DeviceModel> parseDeviceModel(const std::string &json, const std::string &where);

enum class StepPhase { Forward, Backward, Update };
const char *phaseName(StepPhase p);

/// One op instance of one worker.
struct OpTimeEstimate {
  unsigned node = 0; ///< in the fused problem (StepTimeEstimate::nodeNames)
  StepPhase phase = StepPhase::Forward;
  bool product = false;  ///< a library product or convolution
  bool conv = false;     ///< the product is a convolution
  bool scatter = false;  ///< a library scatter-add (flops: one add per element read)
  bool map = false;      ///< a map (codegen/fusion.h: isMap): an element-wise kernel
  unsigned passes = 1;   ///< a generated kernel's: its main nest and one per temporary
  bool bf16 = false;     ///< its operands are bfloat16
  bool measured = false; ///< `seconds` is a measured time (DeviceModel::measured)
  double flops = 0, bytes = 0, seconds = 0;
};

/// The kind MeasuredOp names: product, convolution, scatter or generated.
const char *opKind(const OpTimeEstimate &o);
/// The MeasuredOp that stands for `o` (of op `op`, one of `workers` workers).
MeasuredOp measuredOpOf(const std::string &op, const OpTimeEstimate &o, unsigned workers,
                        bool shared);
/// What a measured op is looked up by: its op, kind, counts (whole numbers, as the estimate
/// makes them), operand type and workers.
std::string measuredKey(const MeasuredOp &m);

struct WorkerTime {
  double phase[3] = {0, 0, 0}; ///< compute per StepPhase
  double communication = 0;
  int64_t bytesReceived = 0;
  int64_t messages = 0;
  int64_t syncs = 0; ///< synchronisations (in `communication`, at DeviceModel::syncLatency)
  double compute() const { return phase[0] + phase[1] + phase[2]; }
  double total() const { return compute() + communication; }
};

struct StepTimeEstimate {
  DeviceModel device;
  unsigned workers = 1;
  std::vector<WorkerTime> perWorker;
  unsigned slowest = 0;
  double seconds = 0;           ///< the slowest worker's compute plus communication
  double overlappedSeconds = 0; ///< the slowest worker's larger of the two
  /// A pipelined plan (ExecPlan::stages > 1): `seconds` is its schedule simulated, every
  /// worker's nodes in order and all waiting for the slowest at each synchronisation (the
  /// bubbles included), not the slowest worker's sum.
  bool pipelined = false;
  double flops = 0; ///< every worker's, summed
  /// Per op instance of the slowest worker, in plan order.
  std::vector<OpTimeEstimate> ops;
  /// Per worker, its op instances in plan order (`ops` is the slowest's).
  std::vector<std::vector<OpTimeEstimate>> workerOps;
  unsigned measuredOps = 0; ///< of the slowest worker's, those at a measured time
  std::vector<std::string> nodeNames, nodeOps; ///< per node of the fused problem
};

/// The FLOP/s `o` runs at on `d` (at all of its rates).
double opRate(const DeviceModel &d, const OpTimeEstimate &o);
/// One op's estimated seconds on `d` at `share` of its rates (the model above): its launches
/// plus its work.
double opSeconds(const DeviceModel &d, const OpTimeEstimate &o, double share = 1);
double opLaunchSeconds(const DeviceModel &d, const OpTimeEstimate &o);
double opWorkSeconds(const DeviceModel &d, const OpTimeEstimate &o, double share = 1);

/// The estimate for plan `plan` of `p` on `device`. `topology`, where given, is the machine
/// (its levels' bandwidths and latencies); otherwise every pair of workers is joined by the
/// device's link. Workers are the plan's.
llvm::Expected<StepTimeEstimate> estimateStepTime(const Problem &p, const ExecPlan &plan,
                                                  const std::vector<std::string> &outputs,
                                                  const DeviceModel &device,
                                                  const std::optional<Topology> &topology = {});

/// The estimate as text: a line of totals (and the phases), then, with `top` > 0, the slowest
/// worker's `top` costliest ops as a markdown table.
std::string formatStepTime(const StepTimeEstimate &e, unsigned top = 0);
/// The estimate as a JSON object (seconds; per phase; per worker; the model).
std::string stepTimeJson(const StepTimeEstimate &e);

} // namespace tofu

#endif // TOFU_PLANNER_STEP_TIME_H
