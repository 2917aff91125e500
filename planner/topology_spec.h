// A machine's interconnect as levels, as a user gives it (`--topology 2x8:12.5GB/s,150GB/s`
// or a JSON file): what it is, how it is read and printed. How the search weighs traffic by
// level is planner/topology.h's.
#ifndef TOFU_PLANNER_TOPOLOGY_SPEC_H
#define TOFU_PLANNER_TOPOLOGY_SPEC_H

#include <cstdint>
#include <string>
#include <vector>

#include "llvm/Support/Error.h"

namespace tofu {

/// The most workers a topology describes.
inline constexpr int64_t kMaxTopologyWorkers = 1000000;

struct TopologyLevel {
  std::string name;     ///< e.g. "node", "gpu" (for reports)
  unsigned count = 1;   ///< units of this level in each unit of the level outside it
  double bandwidth = 0; ///< bytes per second a worker receives over this level
  double latency = 0;   ///< seconds per message over this level
};

struct Topology {
  std::vector<TopologyLevel> levels; ///< outermost first
  /// Each worker's link to host memory, bytes per second each way and seconds per transfer
  /// (0: the device model's): what the Swapping baseline moves over (planner/swap.h).
  double hostBandwidth = 0, hostLatency = 0;
  unsigned workers() const;
};

/// `2x8:12.5GB/s,150GB/s` (counts outermost first, then one bandwidth per level, each
/// optionally `@latency`, e.g. `12.5GB/s@5us`; then optionally the host link,
/// `host=64GB/s@3us`), or a JSON object
/// `{"levels": [{"name": "node", "count": 2, "bandwidth": "12.5GB/s", "latency": "5us"}, ...],
/// "host": {"bandwidth": "64GB/s", "latency": "3us"}}` ("host" optional; bandwidth also a
/// number of bytes per second, latency also a number of seconds). An
/// argument naming a file reads the file. Bandwidths: B/s, KB/s, MB/s, GB/s, TB/s, their
/// KiB/s... forms, and Gbit/s (also Mbit/s, Tbit/s); latencies: s, ms, us, ns. Levels must
/// not be faster outside than inside. Errors say what and where.
llvm::Expected<Topology> parseTopology(const std::string &spec);

/// `2 nodes x 4 gpus (node 12.5 GB/s @ 5 us, gpu 150 GB/s @ 1 us)`, and `, host 64 GB/s @ 3 us`
/// inside the brackets where a host link is given.
std::string describeTopology(const Topology &t);

/// The outermost level at which workers a and b differ (levels.size() when a == b).
unsigned levelBetween(const Topology &t, unsigned a, unsigned b);

} // namespace tofu

#endif // TOFU_PLANNER_TOPOLOGY_SPEC_H
