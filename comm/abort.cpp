// The process-wide broken flag and abort_job (see abort.hpp).
#include "comm/abort.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/socket.h>
#include <sys/un.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The job's identity from its launcher (Open MPI's PMIx namespace, Slurm's job and step), or ""
// outside a job.
std::string job_key() {
  for (const char* n : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') return v;
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (job != nullptr && step != nullptr) return std::string(job) + "." + step;
  return "";
}

// The first rank of this job on this node to end it, by a file in the job's session directory
// (PMIx's PMIX_SERVER_TMPDIR, which mpirun or slurmstepd removes when the job ends): 1 when this
// rank made it, 0 when another had, -1 when there is no such directory. A file, not the socket
// below, because it outlives the rank that made it: that rank exits in MPI_Abort as soon as the
// launcher has the message, and on a loaded machine the launcher took longer than that to end a
// rank that then found the socket's name free and printed the error a second time.
int first_by_file(const std::string& key) {
  const char* dir = std::getenv("PMIX_SERVER_TMPDIR");
  if (dir == nullptr || *dir == '\0') return -1;
  std::string name = "zero-abort-" + key;
  std::replace(name.begin(), name.end(), '/', '_');
  const std::string path = std::string(dir) + "/" + name;
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return 1;
  }
  return errno == EEXIST ? 0 : -1;
}

// True for the first rank of this job on this node to end the job, false for any later one: the
// file above, else a Linux abstract socket named after the job (a name that vanishes with the
// process, so nothing is left behind): the first binds it, the others find the name taken. True
// where that cannot be told (no job key, not Linux).
bool first_to_report() {
#ifdef __linux__
  const std::string key = job_key();
  if (key.empty()) return true;
  if (const int by_file = first_by_file(key); by_file >= 0) return by_file == 1;
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "zero-abort-" + key.substr(0, sizeof(addr.sun_path) - 13);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return true;  // fd kept
  const bool taken = errno == EADDRINUSE;
  ::close(fd);
  return !taken;
#else
  return true;
#endif
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
    // few (hundreds), short enough to stay within "the timeout plus a few seconds". Without MPI
    // (a rank ending during MPI startup) rank 0 can only _exit, and the launcher takes most of a
    // second more to notice and end the others. Ranks whose errors come further apart (a loaded
    // machine: one rank's last data arrived a second later) are kept from printing twice on one
    // node by first_to_report.
    const double s = (mpi_live() ? 0.5 : 2.0) + 0.05 * std::min(rank, 40);
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
  }
  std::string line(message);
  line += '\n';
  if (!first_to_report()) line.clear();  // another rank of this node printed the error
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (mpi_live()) MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; without MPI the launcher ends the other ranks
}

}  // namespace zero::comm
