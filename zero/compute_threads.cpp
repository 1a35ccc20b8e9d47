// A rank's CPU threads: the count and its application (zero/compute_threads.hpp).
#include "zero/compute_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>

#include "base/error.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace zero {
namespace {

constexpr int kMaxThreads = 1024;

// A positive integer, or 0 when `text` is not one (whole, no sign, no list).
int positive(std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && v > 0 ? v : 0;
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

int launcher_local_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var); v != nullptr)
      if (const int n = positive(v); n > 0) return n;
  return 1;
}

ThreadsChoice threads_for(int asked, std::string_view asked_by, int local_ranks) {
  if (asked > kMaxThreads)
    throw Error(cat(asked_by, " asks for ", asked, " threads a rank; at most ", kMaxThreads));
  if (asked > 0) return {asked, std::string(asked_by)};
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr && *omp != '\0') {
    const int n = positive(omp);
    if (n == 0 || n > kMaxThreads)
      throw Error(cat("OMP_NUM_THREADS='", omp, "' is not a thread count from 1 to ", kMaxThreads,
                      " (zero reads one count: the threads of each rank); set it so, or unset it "
                      "to use the cores each rank can have"));
    return {n, "OMP_NUM_THREADS"};
  }
  const int cores = usable_cores();
  const int ranks = local_ranks > 0 ? local_ranks : 1;
  return {std::max(1, cores / ranks), cat(cores, " core", cores == 1 ? "" : "s", " / ", ranks,
                                          " rank", ranks == 1 ? "" : "s", " on this node")};
}

struct ComputeThreads::Impl {
  explicit Impl(int threads) : pool(threads), scope(&pool) {}
  kernels::cpu::ThreadPool pool;
  kernels::cpu::PoolScope scope;
};

ComputeThreads::ComputeThreads(int threads) {
  if (threads < 1 || threads > kMaxThreads)
    throw Error(cat("a rank's threads must be from 1 to ", kMaxThreads, ", got ", threads));
  // One thread a call: zero splits the GEMMs itself (kernels/cpu/gemm.hpp).
  kernels::cpu::set_blas_threads(1);
  impl_ = std::make_unique<Impl>(threads);
}

ComputeThreads::~ComputeThreads() = default;

int ComputeThreads::threads() const {
  return impl_->pool.size();
}

ComputeThreads::InEffect ComputeThreads::in_effect() {
  InEffect e;
  e.zero = kernels::cpu::current_threads();
  e.blas = kernels::cpu::blas_threads();
  const kernels::cpu::OnednnThreads d = kernels::cpu::onednn_threads();
  e.onednn = d.threads;
  e.onednn_runtime = d.runtime;
  return e;
}

std::string threads_line(const ThreadsChoice& choice) {
  const ComputeThreads::InEffect e = ComputeThreads::in_effect();
  return cat(choice.threads, choice.threads == 1 ? " thread" : " threads", " a rank (",
             choice.source, "); in effect: zero's kernels and GEMM row blocks ", e.zero,
             ", OpenBLAS ", e.blas, " a call, oneDNN ", e.onednn, " a call (", e.onednn_runtime,
             ")");
}

}  // namespace zero
