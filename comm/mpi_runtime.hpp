// MpiRuntime: owns MPI's initialisation for one process (RAII), plus the small questions a launcher
// asks: which rank am I on this node, and was I started by mpirun/srun at all.
#pragma once

#include <mpi.h>

#include <span>
#include <string>

namespace zero::comm {

// Initialises MPI with MPI_THREAD_MULTIPLE (each communicator has a communication thread that
// calls MPI while the caller's thread may too) and finalises it on destruction. If MPI is already
// initialised (by the host program), it does nothing and finalises nothing. Destroy every
// communicator before it. Throws zero::Error when MPI cannot give MPI_THREAD_MULTIPLE.
// It does not finalise after a communicator broke (any_communicator_broken), nor when destroyed
// by an exception in a job of several ranks: MPI_Finalize would wait for ranks that may never
// come. MPI is then left initialised for abort_job (comm/abort.hpp), which the handler calls.
// MPI_Init cannot fail with an error while a rank of the job is missing: it waits for every rank,
// forever (a node that never starts its process, a rank stopped or swapped out before it joins).
// With a startup timeout, a watchdog ends the job with one line naming this rank instead, through
// abort_job (so it is the program's choice: the default, 0, waits as MPI does). zero's commands
// pass their --timeout / comm_timeout.
struct RuntimeOptions {
  double startup_timeout_seconds = 0;  // 0: wait for MPI_Init as long as it takes
  std::string error_prefix;            // put before the watchdog's line ("zero train: error: ")
};

class MpiRuntime {
 public:
  MpiRuntime();
  explicit MpiRuntime(RuntimeOptions options);
  MpiRuntime(int& argc, char**& argv, RuntimeOptions options = {});
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  bool owns() const { return owns_; }                 // this object initialised MPI
  int thread_level() const { return thread_level_; }  // what MPI provides (MPI_THREAD_*)

 private:
  void init(int* argc, char*** argv, RuntimeOptions options);
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

// This process's rank among the ranks of `comm` that share its node (MPI_COMM_TYPE_SHARED).
// Collective over comm. Used to pick a GPU per rank.
int node_local_rank(MPI_Comm comm = MPI_COMM_WORLD);

// True when the process was launched by an MPI/PMI launcher (mpirun, srun, hydra), read from the
// environment without touching MPI. The CLI uses it to decide whether to relaunch under mpirun.
bool in_mpi_job();

// Whether processes of this user on this machine may read each other's memory with
// process_vm_readv, the cross-memory attach (CMA) that Open MPI's shared-memory transport uses to
// move a large message with one copy, by the receiver alone, instead of two copies in pipelined
// fragments that need the sender inside MPI too (three scheduling hand-offs a message instead
// of one: what an oversubscribed or loaded machine pays for). Containers often forbid it
// (seccomp, or Yama's ptrace_scope above 0, which Open MPI then refuses). Probed once by a
// forked child reading a word of this process, which is what a rank does to a sibling.
// Never touches MPI. `zero info` reports it (the -n launcher keeps plain copies unless told:
// cli/launch.cpp says why).
bool cross_memory_attach_permitted();

// An Open MPI parameter that zero sets before MPI_Init, through its environment variable, when
// the environment leaves it unset: a user's or launcher's own value always wins.
struct MpiDefault {
  const char* param;  // Open MPI's name ("pml_ob1_send_pipeline_depth")
  const char* value;
  std::string var() const { return std::string("OMPI_MCA_") + param; }  // what sets it
};

// zero's defaults for the MPI it was built with (none for an MPI other than Open MPI). Open MPI's
// shared-memory transport moves a large message without single copy (cli/launch.cpp says why it
// is off) in fragments of btl_vader_max_send_size (32 KiB), at most pml_ob1_send_pipeline_depth
// (3) of them in flight: 96 KiB per round trip between the sender's and the receiver's
// communication threads, each a wake-up when the rank computes meanwhile (stage 3's prefetched
// gathers: 2 MiB a shard, 21 round trips). With 64 fragments of 128 KiB a round trip moves up to
// the 4 MiB shared segment a rank has. Measured in docs/benchmarks.md ("Open MPI's send
// pipeline"): stage 3 fp32 at 2 ranks, median 795 -> 929 samples/s; stage 0 unchanged.
std::span<const MpiDefault> mpi_transport_defaults();

// Sets every mpi_transport_defaults() variable the environment leaves unset (never overwrites).
// MpiRuntime calls it before MPI_Init_thread, so it holds under mpirun, srun or the -n launcher.
void apply_mpi_transport_defaults();

// The name of an MPI_THREAD_* level, for messages.
const char* thread_level_name(int level);

}  // namespace zero::comm
