// Helper threads for the search: one job split into parts that run at the same time, the
// calling thread taking part 0.
#ifndef TOFU_SEARCH_PARALLEL_H
#define TOFU_SEARCH_PARALLEL_H

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tofu {

/// A fixed set of threads kept for the life of one search (starting a thread per job costs
/// more than the search's smaller jobs). Not reentrant: a part must not call run().
class WorkerPool {
public:
  /// `threads` in all, the caller's included (at least 1: no helper threads).
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool &) = delete;
  WorkerPool &operator=(const WorkerPool &) = delete;

  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }
  /// Runs part(t) for every t in [0, threads()), part 0 on the calling thread, and returns
  /// when all of them have.
  void run(const std::function<void(unsigned)> &part);

  /// The threads a search uses by default: the machine's cores, at most 8.
  static unsigned defaultThreads();

private:
  void serve(unsigned t);
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(unsigned)> *part_ = nullptr;
  uint64_t generation_ = 0; ///< jobs handed out so far
  unsigned running_ = 0;    ///< helper parts of the current job not yet finished
  bool stop_ = false;
};

} // namespace tofu

#endif // TOFU_SEARCH_PARALLEL_H
