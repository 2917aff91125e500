// The search's helper threads.
#include "search/parallel.h"

#include <algorithm>

namespace tofu {

WorkerPool::WorkerPool(unsigned threads) {
  for (unsigned t = 1; t < std::max(1u, threads); ++t)
    helpers_.emplace_back([this, t] { serve(t); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread &h : helpers_)
    h.join();
}

unsigned WorkerPool::defaultThreads() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

void WorkerPool::run(const std::function<void(unsigned)> &part) {
  if (helpers_.empty()) {
    part(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    part_ = &part;
    running_ = static_cast<unsigned>(helpers_.size());
    ++generation_;
  }
  wake_.notify_all();
  part(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return running_ == 0; });
  part_ = nullptr;
}

void WorkerPool::serve(unsigned t) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(unsigned)> *part;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      part = part_;
    }
    (*part)(t);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--running_ == 0)
      done_.notify_one();
  }
}

} // namespace tofu
