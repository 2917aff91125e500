// The processes of one run, as the tools and the trainer see them: this process's rank
// among them, and the few collectives a run needs beside the engine's own communication
// (figures summed or gathered, a plan or a file name handed from the first process, a
// barrier, ending the whole job on an error).
//
// Two forms: one process alone (localProcessGroup: every collective is the identity), and
// the processes mpirun started (runtime/mpi/mpi_process_group.h), one worker each. Nothing
// here names MPI, so a build without it links the same trainer.
#ifndef TOFU_RUNTIME_PROCESS_GROUP_H
#define TOFU_RUNTIME_PROCESS_GROUP_H

#include <cstdint>
#include <string>
#include <vector>

namespace tofu {

class ProcessGroup {
public:
  virtual ~ProcessGroup() = default;
  /// This process among size() processes; the first (rank 0) reports.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Whether the run's workers are processes (true under mpirun, even with one process).
  virtual bool distributed() const = 0;

  /// `x` summed over every process.
  virtual int64_t sum(int64_t x) = 0;
  /// Every process's `x`, by rank, on every process.
  virtual std::vector<int64_t> allGather(int64_t x) = 0;
  /// Every process's `x` (each the same length), concatenated by rank, on every process.
  virtual std::vector<double> allGather(const std::vector<double> &x) = 0;
  /// Each element the largest over every process (each `x` the same length).
  virtual void maxInPlace(std::vector<double> &x) = 0;
  /// Every process's `text`, by rank, on the first process (elsewhere: empty).
  virtual std::vector<std::string> gatherOnFirst(const std::string &text) = 0;
  /// The first process's value, on every process.
  virtual std::string fromFirst(std::string text) = 0;
  virtual uint64_t fromFirst(uint64_t x) = 0;
  /// Whether every process passed the same `x`.
  virtual bool sameOnEvery(uint64_t x) = 0;
  /// Waits until every process has come here.
  virtual void barrier() = 0;
  /// Ends every process of the job with `code` (the others may be waiting on this one in a
  /// collective); alone, it does nothing and the caller returns `code`.
  virtual void abort(int code) = 0;

  /// Every process's `text`, by rank, on every process.
  std::vector<std::string> allGatherText(const std::string &text);
};

/// This process alone: rank 0 of 1, not distributed.
ProcessGroup &localProcessGroup();

} // namespace tofu

#endif // TOFU_RUNTIME_PROCESS_GROUP_H
