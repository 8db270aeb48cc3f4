// The processes that mpirun (Open MPI) started together: this process's rank,
// how many there are, and the few collectives Tessera uses. Outside mpirun the
// world is this process alone (rank 0 of 1) and MPI is never initialised, so
// every command runs the same with and without a launcher.
//
// One thread calls it at a time (MPI_THREAD_SERIALIZED): the main thread,
// or the server's engine thread while it runs tensor-parallel steps; the
// engine's worker threads never do. mpi.h stays inside world.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "dist/group.h"

namespace tessera::dist {

class World : public Group {
 public:
  // Joins the world when launched by mpirun (OMPI_COMM_WORLD_SIZE or
  // PMIX_RANK in the environment); otherwise a world of one.
  World(int* argc, char*** argv);
  ~World() override;  // MPI_Finalize, when joined
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // The World main() made, for commands that ask (nullptr-free: a world of
  // one until main makes its own).
  static World& current();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const { return local_size_; }  // ranks on this machine
  // Threads for a rank that was given none: this machine's cores divided
  // among its ranks, fixed (an adaptive pool would see the other ranks as
  // load and shrink).
  int threads_per_rank() const;
  bool distributed() const { return size_ > 1; }

  // Waits for every rank without spinning a core: a non-blocking barrier
  // polled with short sleeps, so a rank that finished early leaves its core
  // to ranks still computing.
  void barrier();
  // Element-wise sums over ranks, in place, on every rank.
  void all_reduce_sum(std::span<int64_t> values);
  // Group: floats summed over the ranks, in place (MPI_Allreduce); root's
  // string on every rank (MPI_Bcast).
  void sum(std::span<float> values) override;
  std::string broadcast(std::string value, int root) override;
  void gather(std::span<const float> part, std::span<float> all, int root) override;  // MPI_Gather
  void all_gather(std::span<const float> part, std::span<float> all) override;       // MPI_Allgather
  // Ends every rank at once (one failed rank must not leave the others
  // waiting in a collective); exits with code when not distributed.
  [[noreturn]] void abort(int code);
  // Ends this rank normally (MPI_Finalize, which waits for the others to
  // finalize too), then the process with `code`.
  [[noreturn]] void exit(int code);

  // Time spent in sum() (wall, this rank) and what it moved, since start:
  // tensor parallelism's communication share (tessera bench --tp).
  struct SumStats {
    double seconds = 0.0;
    int64_t calls = 0;
    int64_t bytes = 0;
  };
  const SumStats& sum_stats() const { return sum_stats_; }

 private:
  World();  // a world of one
  bool joined_ = false;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  SumStats sum_stats_;
};

}  // namespace tessera::dist
