#include "dist/world.h"

// The C API only: mpi.h would otherwise pull in Open MPI's deprecated C++
// bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace tessera::dist {
namespace {

World* g_current = nullptr;

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, message, &length);
  fail(ErrorCode::kIo, "MPI {} failed: {}", what, std::string(message, static_cast<size_t>(length)));
}

}  // namespace

World::World() = default;

World::World(int* argc, char*** argv) {
  if (launched_by_mpirun()) {
    // One thread at a time, not always the same one: the server's engine
    // thread runs the tensor-parallel steps, the main thread the rest.
    // MPI's own threads start here: with SIGINT and SIGTERM blocked, so
    // those signals reach this process's threads (tessera serve's waiter
    // shuts down cleanly), never a helper thread whose default kills it.
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGINT);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, &old);
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    check(rc, "init");
    joined_ = true;
    TESSERA_CHECK(provided >= MPI_THREAD_SERIALIZED, kIo, "this MPI does not allow calls from more than one thread");
    // Errors come back as codes (and become exceptions) instead of aborting
    // inside MPI, so a rank can say what failed before it ends the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }
  g_current = this;
}

World::~World() {
  if (g_current == this) g_current = nullptr;
  if (joined_) MPI_Finalize();
}

World& World::current() {
  static World alone;
  return g_current != nullptr ? *g_current : alone;
}

void World::barrier() {
  if (!joined_) return;
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "barrier");
  for (int done = 0;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "barrier");
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void World::all_reduce_sum(std::span<int64_t> values) {
  if (!joined_ || values.empty()) return;
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, MPI_SUM,
                      MPI_COMM_WORLD),
        "all-reduce");
}

void World::sum(std::span<float> values) {
  if (!joined_ || values.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
        "all-reduce");
  sum_stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++sum_stats_.calls;
  sum_stats_.bytes += static_cast<int64_t>(values.size_bytes());
}

void World::gather(std::span<const float> part, std::span<float> all, int root) {
  if (!joined_) {
    std::copy(part.begin(), part.end(), all.begin());
    return;
  }
  check(MPI_Gather(part.data(), static_cast<int>(part.size()), MPI_FLOAT, rank_ == root ? all.data() : nullptr,
                   static_cast<int>(part.size()), MPI_FLOAT, root, MPI_COMM_WORLD),
        "gather");
}

void World::all_gather(std::span<const float> part, std::span<float> all) {
  if (!joined_) {
    std::copy(part.begin(), part.end(), all.begin());
    return;
  }
  check(MPI_Allgather(part.data(), static_cast<int>(part.size()), MPI_FLOAT, all.data(), static_cast<int>(part.size()),
                      MPI_FLOAT, MPI_COMM_WORLD),
        "all-gather");
}

std::string World::broadcast(std::string value, int root) {
  if (!joined_) return value;
  int64_t length = static_cast<int64_t>(value.size());
  check(MPI_Bcast(&length, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "broadcast");
  value.resize(static_cast<size_t>(length));
  check(MPI_Bcast(value.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD), "broadcast");
  return value;
}

void World::exit(int code) {
  if (joined_) {
    joined_ = false;
    MPI_Finalize();
  }
  std::exit(code);
}

void World::abort(int code) {
  if (joined_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

int World::threads_per_rank() const {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_size_);
}

}  // namespace tessera::dist
