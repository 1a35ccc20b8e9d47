// The threads of one rank's CPU math: how many (threads_for, with who decided), and the RAII
// object that applies the count to OpenBLAS, oneDNN and zero's own kernels for the thread that
// trains (docs/design.md, "Note: threads inside a rank").
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace zero {

// A rank's thread count and where it came from, for the run line and `zero info`.
struct ThreadsChoice {
  int threads = 1;
  std::string source;  // "--threads", "config key threads", "OMP_NUM_THREADS", "2 cores / 1 rank"
};

// The cores this process may run on: its CPU affinity (taskset, cgroup cpusets), else the
// online processors.
int usable_cores();

// The ranks on this node as the launcher tells them in the environment (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS, Slurm's SLURM_NTASKS_PER_NODE), 1 when
// none says: `zero info` and programs without a World use it; a trainer with a World passes
// World::local_size() instead.
int launcher_local_ranks();

// The precedence: `asked` (> 0) when the caller has one (zero train: --threads, else the config
// key "threads"; `asked_by` names it); else OMP_NUM_THREADS, the variable a CPU trainer's user
// expects, when it is set; else the cores each rank can have, usable_cores() / local_ranks (at
// least 1). A count above 1024, or an OMP_NUM_THREADS that is not a positive integer (Open MP's
// lists "4,2" included), is a zero::Error naming it.
ThreadsChoice threads_for(int asked, std::string_view asked_by, int local_ranks);

// Made once per rank, on the thread that runs the model's math, before its first kernel, and
// kept until the last: starts the pool that zero's kernels and its GEMMs split their work
// across (the GEMMs in fixed blocks of rows, each one single-threaded OpenBLAS or oneDNN call:
// their own threads would make the bits depend on the count, kernels/cpu/gemm.hpp) and installs
// it for the constructing thread only. Other threads (the communication thread,
// checkpoint writers) keep running their kernels alone. Destroyed on the same thread.
class ComputeThreads {
 public:
  explicit ComputeThreads(int threads);  // >= 1, zero::Error otherwise
  ~ComputeThreads();
  ComputeThreads(const ComputeThreads&) = delete;
  ComputeThreads& operator=(const ComputeThreads&) = delete;

  int threads() const;

  // The counts in effect, asked of each library (not echoed from the setting).
  struct InEffect {
    int zero = 1;                // zero's pool on the calling thread: kernels and GEMM blocks
    int blas = 1;                // openblas_get_num_threads(): OpenBLAS's threads in one call
    int onednn = 1;              // oneDNN's runtime inside the scope zero's calls set (per call)
    std::string onednn_runtime;  // "OpenMP" for Debian's oneDNN
  };
  static InEffect in_effect();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One line for a run's report and `zero info`: the choice, and the counts in effect on the
// calling thread as the libraries answer, e.g. "2 threads a rank (2 cores / 1 rank on this
// node); in effect: zero's kernels and GEMM row blocks 2, OpenBLAS 1 a call, oneDNN 1 a call
// (OpenMP)".
std::string threads_line(const ThreadsChoice& choice);

}  // namespace zero
