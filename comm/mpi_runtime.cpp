// MpiRuntime and the launcher helpers (see mpi_runtime.hpp).
#include "comm/mpi_runtime.hpp"

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include "comm/abort.hpp"
#include "comm/mpi_request.hpp"
#include "base/error.hpp"

namespace zero::comm {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown MPI thread level";
}

std::span<const MpiDefault> mpi_transport_defaults() {
#if defined(OMPI_MAJOR_VERSION)
  // Open MPI 5 renamed the shared-memory transport from vader to sm.
  constexpr const char* max_send =
      OMPI_MAJOR_VERSION >= 5 ? "btl_sm_max_send_size" : "btl_vader_max_send_size";
  static constexpr MpiDefault defaults[] = {{"pml_ob1_send_pipeline_depth", "64"},
                                            {max_send, "131072"}};
  return defaults;
#else
  return {};
#endif
}

void apply_mpi_transport_defaults() {
  for (const MpiDefault& d : mpi_transport_defaults()) ::setenv(d.var().c_str(), d.value, 0);
}

MpiRuntime::MpiRuntime() {
  init(nullptr, nullptr, {});
}
MpiRuntime::MpiRuntime(RuntimeOptions options) {
  init(nullptr, nullptr, options);
}
MpiRuntime::MpiRuntime(int& argc, char**& argv, RuntimeOptions options) {
  init(&argc, &argv, options);
}

namespace {

// Ends the job if MPI startup has not finished after `seconds` (see RuntimeOptions). Joined when
// MPI_Init_thread returns, which wakes it at once.
class StartupWatchdog {
 public:
  StartupWatchdog(double seconds, std::string prefix) {
    if (!(seconds > 0)) return;
    thread_ = std::thread([this, seconds, prefix = std::move(prefix)] {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; })) return;
      abort_job(cat(prefix, "rank ", job_rank(), " of ", job_size(),
                    ": MPI startup (MPI_Init_thread) did not finish within ", seconds,
                    " s: a rank of the job did not start or stalled before joining it (a process "
                    "stopped or swapped out, a node unreachable); the limit is the communication "
                    "timeout (--timeout, comm_timeout)"),
                1);
    });
  }
  ~StartupWatchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

void MpiRuntime::init(int* argc, char*** argv, RuntimeOptions options) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised) throw Error("MPI was already finalised in this process; it cannot be restarted");
  if (initialised) {
    // The host program owns MPI; make_mpi_communicator checks the thread level it chose.
    MPI_Query_thread(&thread_level_);
    return;
  }
  // This rank's threads, and those MPI and the communicators start, under any launcher.
  mpi::use_short_time_slices();
  apply_mpi_transport_defaults();
  int rc = MPI_SUCCESS;
  {
    const StartupWatchdog watchdog(options.startup_timeout_seconds, options.error_prefix);
    rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
  }
  if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread failed");
  if (thread_level_ < MPI_THREAD_MULTIPLE) {
    // Leave MPI as we found it (finalised), then say what to do about it.
    MPI_Finalize();
    throw Error(cat("MPI provides only ", thread_level_name(thread_level_),
                    " but zero needs MPI_THREAD_MULTIPLE (each communicator runs MPI calls on its "
                    "own communication thread); use an MPI built with thread support "
                    "(Open MPI: --enable-mpi-thread-multiple, the default since 3.0)"));
  }
  owns_ = true;
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  // MPI_Finalize waits for every rank. After a communicator broke (a rank stalled or died) it
  // would wait forever, and a stalled rank resuming would deliver its abandoned collective into
  // freed state (a segfault inside MPI_Finalize, seen with Open MPI 4.1). Likewise when an
  // exception unwinds us in a job of several ranks: the others may be waiting for this rank in a
  // collective, not in MPI_Finalize. In both cases MPI stays initialised so that the handler can
  // end the job with abort_job (docs/design.md, "Note: the failure path").
  if (any_communicator_broken()) return;
  if (std::uncaught_exceptions() > 0) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) return;
  }
  MPI_Finalize();
}

int node_local_rank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    throw Error("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

bool in_mpi_job() {
  // Open MPI's mpirun, MPICH/Hydra (PMI), PMIx launchers and srun (PMI2/PMIx plugins, and its
  // per-step variable) each set one of these. SLURM_NTASKS alone is not enough: sbatch sets it in
  // the batch script too, where no launcher has run.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                        "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (const char* s = std::getenv(v); s != nullptr && *s != '\0') return true;
  }
  return false;
}

bool cross_memory_attach_permitted() {
  static const bool permitted = [] {
    // Open MPI turns CMA off itself when Yama restricts ptrace (siblings may not read each other).
    std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
    int scope = 0;
    if (yama && yama >> scope && scope != 0) return false;
    static volatile std::uint64_t word = 0x5a45524f2d434d41ULL;
    const pid_t child = ::fork();
    if (child < 0) return false;
    if (child == 0) {
      std::uint64_t got = 0;
      iovec local{&got, sizeof got};
      iovec remote{const_cast<std::uint64_t*>(&word), sizeof word};
      const ssize_t n = ::process_vm_readv(::getppid(), &local, 1, &remote, 1, 0);
      ::_exit(n == static_cast<ssize_t>(sizeof got) && got == word ? 0 : 1);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return permitted;
}

}  // namespace zero::comm
