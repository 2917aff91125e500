// The processes mpirun started, as a ProcessGroup over MPI (mpi_process_group.h).
#include "runtime/mpi/mpi_process_group.h"

#include <mpi.h>

#include <cstdlib>

namespace tofu {
namespace {

class Mpi final : public ProcessGroup {
public:
  Mpi(int &argc, char **&argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized)
        MPI_Finalize();
    });
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool distributed() const override { return true; }

  int64_t sum(int64_t x) override {
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return x;
  }
  std::vector<int64_t> allGather(int64_t x) override {
    std::vector<int64_t> all(size_);
    MPI_Allgather(&x, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    return all;
  }
  std::vector<double> allGather(const std::vector<double> &x) override {
    std::vector<double> all(x.size() * size_);
    MPI_Allgather(x.data(), static_cast<int>(x.size()), MPI_DOUBLE, all.data(),
                  static_cast<int>(x.size()), MPI_DOUBLE, MPI_COMM_WORLD);
    return all;
  }
  void maxInPlace(std::vector<double> &x) override {
    MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
  }
  std::vector<std::string> gatherOnFirst(const std::string &text) override {
    int n = static_cast<int>(text.size());
    std::vector<int> sizes(size_), starts(size_);
    MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<char> all;
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r)
        starts[r] = starts[r - 1] + sizes[r - 1];
      all.resize(static_cast<size_t>(starts.back()) + sizes.back());
    }
    MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), starts.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    std::vector<std::string> out;
    for (int r = 0; rank_ == 0 && r < size_; ++r)
      out.emplace_back(all.data() + starts[r], sizes[r]);
    return out;
  }
  std::string fromFirst(std::string text) override {
    uint64_t n = fromFirst(uint64_t(text.size()));
    text.resize(n);
    MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    return text;
  }
  uint64_t fromFirst(uint64_t x) override {
    MPI_Bcast(&x, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return x;
  }
  bool sameOnEvery(uint64_t x) override {
    uint64_t lo = x, hi = x;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

private:
  int rank_ = 0, size_ = 1;
};

} // namespace

ProcessGroup &mpiProcessGroup(int &argc, char **&argv) {
  static Mpi group(argc, argv);
  return group;
}

} // namespace tofu
