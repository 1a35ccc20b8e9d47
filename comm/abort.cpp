// The process-wide broken flag and abort_job (see abort.hpp).
#include "comm/abort.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <thread>

namespace zero::comm {
namespace {

// One flag per process, not per communicator: MPI_Finalize is per process, and it is the one
// call that a broken communicator makes unsafe. (This is state, not a registry of objects: it
// only ever goes from false to true.)
std::atomic<bool> g_broken{false};

bool mpi_live() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') return std::atoi(v);
  return fallback;
}

}  // namespace

bool any_communicator_broken() {
  return g_broken.load(std::memory_order_acquire);
}

void detail::note_broken() {
  g_broken.store(true, std::memory_order_release);
}

int job_rank() {
  if (mpi_live()) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  return env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
}

int job_size() {
  if (mpi_live()) {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }
  return env_int({"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, 1);
}

void abort_job(std::string_view message, int code) {
  const int rank = job_rank();
  std::fflush(stdout);  // what rank 0 printed so far (progress lines) comes before the error
  if (job_size() > 1 && rank > 0) {
    // Long enough for rank 0's MPI_Abort to reach this process on one node (tens of ms) or a
    // few (hundreds), short enough to stay within "the timeout plus a few seconds".
    const double s = 0.5 + 0.05 * std::min(rank, 40);
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
  }
  std::string line(message);
  line += '\n';
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (mpi_live()) MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; without MPI the launcher ends the other ranks
}

}  // namespace zero::comm
