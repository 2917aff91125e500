// Swapping (planner/swap.h): the step simulated node by node, tensors moving over the host
// link under LRU with the dataflow rule and prefetch, two steps for the steady state.
#include "planner/swap.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "fmt/format.h"
#include "grammar/diagnostics.h"
#include "support/units.h"

namespace tofu {
namespace {

struct TensorState {
  bool device = false;    ///< held on the device (or arriving there)
  bool hostValid = false; ///< the host holds its current value (or will, once copied)
  double ready = 0;       ///< when the device copy can be read
  double hostReady = 0;   ///< when the host copy can be read (a copy out's end)
  uint64_t stamp = 0;     ///< last use, for LRU
};

constexpr size_t kNever = std::numeric_limits<size_t>::max();

class Simulation {
public:
  Simulation(const Problem &p, const std::vector<unsigned> &order,
             const std::vector<double> &seconds, const SwapOptions &o)
      : p_(p), order_(order), seconds_(seconds), o_(o), bytes_(p.tensors.size()),
        reads_(order.size()), readAt_(p.tensors.size()), kept_(p.tensors.size(), false),
        st_(p.tensors.size()), cursor_(p.tensors.size(), 0) {
    for (unsigned t = 0; t < p.tensors.size(); ++t) {
      int64_t elements = 1;
      for (int64_t d : p.tensors[t].shape)
        elements *= d;
      bytes_[t] = elements * p.tensors[t].storageBytes();
      kept_[t] = p.tensors[t].producer < 0 || p.tensors[t].consumers.empty();
    }
    for (const ProblemNode &n : p.nodes)
      if (p.carriesState(n)) {
        carry_.emplace_back(n.output, n.inputs[0]);
        kept_[n.output] = true;
      }
    for (size_t i = 0; i < order.size(); ++i) {
      for (unsigned t : p.nodes[order[i]].inputs)
        if (std::find(reads_[i].begin(), reads_[i].end(), t) == reads_[i].end()) {
          reads_[i].push_back(t);
          readAt_[t].push_back(i);
        }
    }
  }

  llvm::Expected<SwapEstimate> run() {
    SwapEstimate e;
    // The most one node needs at once, and the most live at once with no budget.
    for (size_t i = 0; i < order_.size(); ++i) {
      const unsigned out = p_.nodes[order_[i]].output;
      int64_t need = bytes_[out];
      for (unsigned t : reads_[i])
        need += t == out ? 0 : bytes_[t];
      if (need > e.largestNodeBytes) {
        e.largestNodeBytes = need;
        e.largestNode = p_.nodes[order_[i]].name;
      }
    }
    e.wholeBytes = wholeBytes();
    if (e.largestNodeBytes > o_.budget)
      return stringError(fmt::format(
          "swap: node '{}' reads and writes {} at once, more than the {} of device memory: no "
          "swapping runs it",
          e.largestNode, humanBytes(double(e.largestNodeBytes)), humanBytes(double(o_.budget))));
    for (unsigned t = 0; t < p_.tensors.size(); ++t)
      st_[t].hostValid = p_.tensors[t].producer < 0; // weights, state and inputs: on the host
    if (llvm::Error err = step())
      return std::move(err);
    nextStep();
    const double start = computeFree_;
    const Counters before = counters_;
    stall_ = 0;
    if (llvm::Error err = step())
      return std::move(err);
    e.seconds = computeFree_ - start;
    for (unsigned n : order_)
      e.computeSeconds += seconds_[n];
    e.stallSeconds = stall_;
    e.bytesIn = counters_.bytesIn - before.bytesIn;
    e.bytesOut = counters_.bytesOut - before.bytesOut;
    e.transfersIn = counters_.transfersIn - before.transfersIn;
    e.transfersOut = counters_.transfersOut - before.transfersOut;
    e.droppedBytes = counters_.dropped - before.dropped;
    e.peakBytes = peak_;
    return e;
  }

private:
  struct Counters {
    int64_t bytesIn = 0, bytesOut = 0, transfersIn = 0, transfersOut = 0, dropped = 0;
  };

  int64_t wholeBytes() const {
    // Weights, state and inputs live throughout; a result from its node to its last read
    // (kept ones to the end).
    int64_t base = 0;
    std::vector<int64_t> delta(order_.size() + 1, 0);
    std::vector<size_t> at(p_.nodes.size(), 0);
    for (size_t i = 0; i < order_.size(); ++i)
      at[order_[i]] = i;
    for (unsigned t = 0; t < p_.tensors.size(); ++t) {
      const int prod = p_.tensors[t].producer;
      if (prod < 0) {
        base += bytes_[t];
        continue;
      }
      const size_t from = at[prod];
      const size_t to = kept_[t] || readAt_[t].empty() ? order_.size() : readAt_[t].back() + 1;
      delta[from] += bytes_[t];
      delta[std::max(to, from + 1)] -= bytes_[t];
    }
    int64_t live = base, most = base;
    for (size_t i = 0; i < order_.size(); ++i) {
      live += delta[i];
      most = std::max(most, live);
    }
    return most;
  }

  double transfer(double &link, double from, int64_t bytes) {
    const double start = std::max(link, from);
    link = start + o_.hostLatency + double(bytes) / o_.hostBandwidth;
    return link;
  }

  size_t nextRead(unsigned t) const {
    return cursor_[t] < readAt_[t].size() ? readAt_[t][cursor_[t]] : kNever;
  }

  void hold(unsigned t) {
    st_[t].device = true;
    st_[t].stamp = ++stamp_;
    lru_.insert({st_[t].stamp, t});
    used_ += bytes_[t];
    peak_ = std::max(peak_, used_);
  }
  void touch(unsigned t) {
    lru_.erase({st_[t].stamp, t});
    st_[t].stamp = ++stamp_;
    lru_.insert({st_[t].stamp, t});
  }
  void release(unsigned t) {
    lru_.erase({st_[t].stamp, t});
    st_[t].device = false;
    used_ -= bytes_[t];
  }
  /// Swaps `t` out: copied to the host unless its copy there is current; the memory is free
  /// once the copy ends (`memReady`).
  void evict(unsigned t, double &memReady) {
    if (!st_[t].hostValid) {
      const double end = transfer(toHost_, st_[t].ready, bytes_[t]);
      st_[t].hostValid = true;
      st_[t].hostReady = end;
      memReady = std::max(memReady, end);
      counters_.bytesOut += bytes_[t];
      ++counters_.transfersOut;
    } else {
      counters_.dropped += bytes_[t];
    }
    release(t);
  }
  /// Room for `need` more bytes: the least recently used tensors out, never those in
  /// `spare`, and those read by position `horizon` or before only where `force` allows and
  /// nothing else is left.
  bool makeRoom(int64_t need, const std::set<unsigned> &spare, size_t horizon, bool force,
                double &memReady) {
    for (int pass = 0; pass < (force ? 2 : 1) && used_ + need > o_.budget; ++pass)
      for (auto it = lru_.begin(); it != lru_.end() && used_ + need > o_.budget;) {
        const unsigned t = it->second;
        ++it;
        if (spare.count(t) || (pass == 0 && nextRead(t) <= horizon))
          continue;
        evict(t, memReady);
      }
    return used_ + need <= o_.budget;
  }

  llvm::Error step() {
    std::fill(cursor_.begin(), cursor_.end(), 0);
    int64_t freedLast = 0; // bytes the previous node's end released
    for (size_t i = 0; i < order_.size(); ++i) {
      const unsigned n = order_[i];
      const unsigned out = p_.nodes[n].output;
      std::set<unsigned> working(reads_[i].begin(), reads_[i].end());
      working.insert(out);
      int64_t need = 0;
      for (unsigned t : working)
        need += st_[t].device ? 0 : bytes_[t];
      // Memory the previous node's end released is free from then.
      double memReady = used_ + need + freedLast > o_.budget ? computeFree_ : 0;
      if (!makeRoom(need, working, i + o_.lookahead, true, memReady))
        return stringError(fmt::format("swap: no room for node '{}' ({} needed, {} held)",
                                       p_.nodes[n].name, humanBytes(double(need)),
                                       humanBytes(double(used_))));
      double start = std::max(computeFree_, memReady);
      for (unsigned t : reads_[i]) {
        if (!st_[t].device) { // on demand, once the previous node is done
          hold(t);
          st_[t].ready =
              transfer(toDevice_, std::max({memReady, st_[t].hostReady, computeFree_}), bytes_[t]);
          counters_.bytesIn += bytes_[t];
          ++counters_.transfersIn;
        }
        start = std::max(start, st_[t].ready);
      }
      if (!st_[out].device)
        hold(out);
      stall_ += start - computeFree_;
      computeFree_ = start + seconds_[n];
      st_[out].ready = computeFree_;
      st_[out].hostValid = false; // a new value: any host copy is stale
      for (unsigned t : working)
        touch(t);
      for (unsigned t : reads_[i])
        ++cursor_[t];
      prefetch(i, start);
      // Results read for the last time are dead.
      freedLast = 0;
      for (unsigned t : working)
        if (!kept_[t] && nextRead(t) == kNever && st_[t].device) {
          release(t);
          freedLast += bytes_[t];
        }
    }
    return llvm::Error::success();
  }

  /// As node `i` starts (at `now`), the host-held inputs of the next nodes come in where
  /// memory allows without swapping out what the nodes up to the lookahead read.
  void prefetch(size_t i, double now) {
    const size_t last = std::min(order_.size() - 1, i + o_.lookahead);
    std::set<unsigned> spare(reads_[i].begin(), reads_[i].end());
    spare.insert(p_.nodes[order_[i]].output);
    for (size_t j = i + 1; j <= last; ++j)
      spare.insert(reads_[j].begin(), reads_[j].end());
    for (size_t j = i + 1; j <= last; ++j)
      for (unsigned t : reads_[j]) {
        if (st_[t].device || !st_[t].hostValid)
          continue;
        double memReady = now;
        if (!makeRoom(bytes_[t], spare, last, false, memReady))
          return;
        hold(t);
        st_[t].ready = transfer(toDevice_, std::max(memReady, st_[t].hostReady), bytes_[t]);
        counters_.bytesIn += bytes_[t];
        ++counters_.transfersIn;
      }
  }

  /// Between steps: each update's result takes the place of what it updates, a new batch
  /// arrives on the host, and the step's other results are gone.
  void nextStep() {
    for (const auto &[out, in] : carry_) {
      if (st_[in].device)
        release(in);
      const TensorState moved = st_[out];
      if (moved.device) {
        lru_.erase({moved.stamp, out});
        lru_.insert({moved.stamp, in});
      }
      st_[in] = moved;
      st_[out] = TensorState();
    }
    std::set<unsigned> carried;
    for (const auto &pair : carry_)
      carried.insert(pair.second);
    for (unsigned t = 0; t < p_.tensors.size(); ++t) {
      if (carried.count(t))
        continue;
      // A weight nothing updates (frozen) stays where it is; a batch input is new, on the
      // host; the step's other results are gone.
      const bool batch = p_.tensors[t].role == TensorRole::Input;
      if (p_.tensors[t].producer < 0 && !batch)
        continue;
      if (st_[t].device)
        release(t);
      st_[t].hostValid = batch;
      st_[t].hostReady = 0;
    }
  }

  const Problem &p_;
  const std::vector<unsigned> &order_;
  const std::vector<double> &seconds_;
  const SwapOptions o_;
  std::vector<int64_t> bytes_;
  std::vector<std::vector<unsigned>> reads_; ///< per position, the tensors its node reads
  std::vector<std::vector<size_t>> readAt_;  ///< per tensor, the positions that read it
  std::vector<bool> kept_;                   ///< held to the step's end (not dead at last read)
  std::vector<std::pair<unsigned, unsigned>> carry_; ///< (an update's result, what it updates)
  std::vector<TensorState> st_;
  std::vector<size_t> cursor_; ///< per tensor, its next read among readAt_
  std::set<std::pair<uint64_t, unsigned>> lru_;
  uint64_t stamp_ = 0;
  int64_t used_ = 0, peak_ = 0;
  double computeFree_ = 0, toDevice_ = 0, toHost_ = 0, stall_ = 0;
  Counters counters_;
};

} // namespace

llvm::Expected<SwapEstimate> estimateSwap(const Problem &p, const std::vector<unsigned> &order,
                                          const std::vector<double> &seconds,
                                          const SwapOptions &options) {
  if (!(options.hostBandwidth > 0))
    return stringError("swap needs a host link: the device model has none (a CPU is its own "
                       "host); give one with --topology's host field (e.g. "
                       "1:450GB/s,host=64GB/s@3us)");
  if (options.budget <= 0)
    return stringError("swap needs the memory of a worker: give --memory-per-worker");
  return Simulation(p, order, seconds, options).run();
}

llvm::Expected<Swapping> swapping(const GraphSource &source, const OpLibrary &lib,
                                  PipelineOptions pipeline, const SwapOptions &options,
                                  unsigned workers, const DeviceModel &device) {
  if (!source.graphFile.empty())
    return stringError("swap counts samples a second: give --model or --onnx (a graph JSON "
                       "has no batch to count)");
  pipeline.search.workers = 1;
  pipeline.search.algorithm = Algorithm::Tofu; // one worker: the plan is the whole step
  pipeline.until = Stage::Execution;
  pipeline.memoryPerWorker = 0; // the budget is the swapping's
  pipeline.recompute.reset();
  pipeline.fitWorkersUpTo = 0;
  pipeline.machine.reset();
  pipeline.stages = StageSpec();
  auto piped = runPipeline(source, lib, pipeline);
  if (!piped)
    return piped.takeError();
  auto step = estimateStepTime(*piped->problem, piped->exec, piped->graph.outputs, device);
  if (!step)
    return step.takeError();
  std::vector<double> seconds(piped->problem->nodes.size(), 0);
  for (const OpTimeEstimate &op : step->workerOps[0])
    seconds[op.node] += op.seconds;
  std::vector<unsigned> order;
  for (const NodeExec &ne : piped->exec.nodes)
    order.push_back(ne.node);
  auto swap = estimateSwap(*piped->problem, order, seconds, options);
  if (!swap)
    return swap.takeError();
  Swapping r;
  r.name = piped->name;
  r.batch = source.batch;
  r.plannedPeak = piped->memory.largestPeak();
  r.swap = *swap;
  r.options = options;
  r.samplesPerSecond = swap->seconds > 0 ? double(r.batch) / swap->seconds : 0;
  r.allWorkers = r.samplesPerSecond * workers;
  return r;
}

} // namespace tofu
