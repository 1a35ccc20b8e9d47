// wait_probe: does a wait that blocks in the kernel hold up better than zero's polling waits when
// another process loads the cores? A question for the transport, asked before building one.
//
//   mpirun -n 4 wait_probe [--bytes 1M] [--work 2] [--iters 200] [--reps 3] [--load 1]
//
// Each iteration is the shape of a small training step: `--work` million dependent
// multiply-adds (about 0.7 ms on the Zen 4 machine at --work 2, like the tiny MLP's compute),
// then an all-reduce of `--bytes` of fp32 (the gradient) and of 16 bytes (like the step's norm
// summary). Three ways to move them, in interleaved blocks:
//   zero   zero's MPI communicator (comm/, Open MPI's shared memory underneath; a wait polls
//          MPI_Test and sleeps 5-50 us between polls: that transport has no blocking wait);
//   mpi    Open MPI's own MPI_Allreduce (its waits poll, yielding when oversubscribed);
//   futex  a shared-memory segment (MPI_Win_allocate_shared): every rank copies its buffer into
//          its slot, a barrier, each folds its block of the sum in rank order, a barrier, each
//          copies the sum out. The barrier's waiters sleep on a futex and the last rank to arrive
//          wakes them: the wake-up is an event, not a timer;
//   none   no exchange at all (the compute and the buffer writes alone): the floor;
//   shared the same segment, but the sum is cut into 16 KiB chunks that any rank takes from a
//          shared counter, and a rank waits (on a futex) only until every chunk is folded: a
//          rank that is on a core folds the share of one that the load has descheduled.
// Each block is run on an idle machine and with `--load` busy-loop processes (forked before
// MPI starts, so that they keep Linux's default time slice; stopped with SIGSTOP between loaded
// blocks). Prints ms per iteration (the slowest rank's), the compute part's wall time on the
// fastest and slowest rank, and loaded / idle per method.
#include <linux/futex.h>
#include <mpi.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/mpi_runtime.hpp"
#include "base/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::size_t bytes = 1 << 20;
  double work_m = 2;
  int iters = 200;
  int reps = 3;
  int load = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc % 2 == 0)
    throw zero::Error(zero::cat("wait_probe: option ", argv[argc - 1], " needs a value"));
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    // A number (K/M suffixes for --bytes), whole and in range, or one sentence naming the option.
    std::size_t used = 0;
    double x = 0;
    try {
      x = std::stod(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string unit = v.substr(used);
    const double mult = k == "--bytes" && unit == "K"   ? 1 << 10
                        : k == "--bytes" && unit == "M" ? 1 << 20
                                                        : 1;
    if (used == 0 || (mult == 1 && !unit.empty()) || !(x >= 0))
      throw zero::Error(zero::cat("wait_probe: ", k, " wants a number >= 0, got '", v, "'"));
    x *= mult;
    if (k == "--bytes")
      a.bytes = static_cast<std::size_t>(x);
    else if (k == "--work")
      a.work_m = x;
    else if (k == "--iters")
      a.iters = static_cast<int>(x);
    else if (k == "--reps")
      a.reps = static_cast<int>(x);
    else if (k == "--load")
      a.load = static_cast<int>(x);
    else
      throw zero::Error("wait_probe: unknown option " + k +
                        " (options: --bytes --work --iters --reps --load)");
  }
  if (a.iters < 1 || a.reps < 1 || a.bytes < sizeof(float))
    throw zero::Error("wait_probe: --iters and --reps must be >= 1 and --bytes >= 4");
  return a;
}

// The busy loops: forked before MPI_Init (a child of an initialised MPI process is not safe, and
// would inherit the rank's short time slice), stopped until a loaded block starts.
std::vector<pid_t> fork_load(int n) {
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t p = ::fork();
    if (p == 0) {
      ::raise(SIGSTOP);
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
    kids.push_back(p);
  }
  for (pid_t p : kids) {
    int st = 0;
    ::waitpid(p, &st, WUNTRACED);  // stopped
  }
  return kids;
}

// Dependent multiply-adds: compute that a competing process slows down, with no memory traffic.
double work(double m) {
  double x = 1.0;
  const long n = static_cast<long>(m * 1e6);
  for (long i = 0; i < n; ++i) x = x * 0.999999 + 1e-7;
  return x;
}

long futex(std::atomic<std::uint32_t>* a, int op, std::uint32_t v) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(a), op, v, nullptr, nullptr, 0);
}

// The shared segment: a sense-counting barrier and N slots plus the sum.
struct alignas(64) Control {
  std::atomic<std::uint32_t> arrived{0};
  alignas(64) std::atomic<std::uint32_t> generation{0};
  // The shared fold (FutexAllReduce::Fold::shared): the next chunk to take, the chunks folded,
  // and a generation the rank that folds the last chunk bumps and wakes.
  alignas(64) std::atomic<std::uint32_t> next_chunk{0};
  alignas(64) std::atomic<std::uint32_t> folded{0};
  alignas(64) std::atomic<std::uint32_t> fold_generation{0};
};

class FutexAllReduce {
 public:
  FutexAllReduce(MPI_Comm comm, std::size_t max_floats) : max_(max_floats) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    const MPI_Aint bytes =
        rank_ == 0 ? static_cast<MPI_Aint>(sizeof(Control) + (size_ + 1) * max_ * sizeof(float))
                   : 0;
    void* base = nullptr;
    MPI_Win_allocate_shared(bytes, 64, MPI_INFO_NULL, comm, &base, &win_);
    MPI_Aint got = 0;
    int disp = 0;
    MPI_Win_shared_query(win_, 0, &got, &disp, &base);
    if (rank_ == 0) new (base) Control;
    MPI_Barrier(comm);
    ctl_ = static_cast<Control*>(base);
    slots_ = reinterpret_cast<float*>(static_cast<char*>(base) + sizeof(Control));
  }
  ~FutexAllReduce() { MPI_Win_free(&win_); }

  void barrier() {
    const std::uint32_t g = ctl_->generation.load(std::memory_order_acquire);
    if (ctl_->arrived.fetch_add(1, std::memory_order_acq_rel) ==
        static_cast<std::uint32_t>(size_ - 1)) {
      ctl_->arrived.store(0, std::memory_order_relaxed);
      ctl_->next_chunk.store(0, std::memory_order_relaxed);  // for a shared fold after it
      ctl_->folded.store(0, std::memory_order_relaxed);
      ctl_->generation.store(g + 1, std::memory_order_release);
      futex(&ctl_->generation, FUTEX_WAKE, INT_MAX);
      return;
    }
    while (ctl_->generation.load(std::memory_order_acquire) == g)
      futex(&ctl_->generation, FUTEX_WAIT, g);
  }

  // own: each rank folds its own block, then a barrier (a descheduled rank holds up the rest).
  // shared: the sum is cut into chunks that any rank takes from a shared counter, and a rank
  // waits only for the chunks to be folded, not for the other ranks: one that is on a core
  // folds the share of one that is not.
  enum class Fold { own, shared };

  void all_reduce(float* buf, std::size_t n, Fold fold) {
    float* mine = slots_ + static_cast<std::size_t>(rank_) * max_;
    float* sum = slots_ + static_cast<std::size_t>(size_) * max_;
    std::memcpy(mine, buf, n * sizeof(float));
    const std::uint32_t fg = ctl_->fold_generation.load(std::memory_order_acquire);
    barrier();
    auto fold_range = [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        float s = slots_[i];
        for (int p = 1; p < size_; ++p) s += slots_[static_cast<std::size_t>(p) * max_ + i];
        sum[i] = s;
      }
    };
    if (fold == Fold::own) {
      const std::size_t block = (n + size_ - 1) / size_;
      const std::size_t b = std::min(n, block * rank_), e = std::min(n, b + block);
      fold_range(b, e);
      barrier();
    } else {
      constexpr std::size_t kChunk = 4096;  // floats: 16 KiB
      const auto chunks = static_cast<std::uint32_t>((n + kChunk - 1) / kChunk);
      for (;;) {
        const std::uint32_t c = ctl_->next_chunk.fetch_add(1, std::memory_order_acq_rel);
        if (c >= chunks) break;
        fold_range(c * kChunk, std::min(n, (c + 1) * kChunk));
        if (ctl_->folded.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
          ctl_->fold_generation.store(fg + 1, std::memory_order_release);
          futex(&ctl_->fold_generation, FUTEX_WAKE, INT_MAX);
        }
      }
      while (ctl_->fold_generation.load(std::memory_order_acquire) == fg)
        futex(&ctl_->fold_generation, FUTEX_WAIT, fg);
    }
    std::memcpy(buf, sum, n * sizeof(float));
  }

 private:
  std::size_t max_;
  int rank_ = 0, size_ = 1;
  MPI_Win win_ = MPI_WIN_NULL;
  Control* ctl_ = nullptr;
  float* slots_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::vector<pid_t> load =
      (world_rank && std::string(world_rank) == "0") ? fork_load(a.load) : std::vector<pid_t>{};
  try {
    zero::comm::MpiRuntime runtime(argc, argv);
    auto comm = zero::comm::make_mpi_communicator(MPI_COMM_WORLD, {});
    MPI_Comm raw = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    const int rank = comm->rank();
    const std::size_t n = a.bytes / sizeof(float);
    FutexAllReduce shm(MPI_COMM_WORLD, n);
    std::vector<float> grad(n, 1.0f), summary(4, 1.0f);

    using Step = std::function<void()>;
    const std::vector<std::pair<std::string, Step>> methods = {
        {"zero",
         [&] {
           comm->all_reduce(zero::comm::View{grad.data(), n, zero::DType::f32},
                            zero::comm::ReduceOp::sum);
           comm->all_reduce(zero::comm::View{summary.data(), 4, zero::DType::f32},
                            zero::comm::ReduceOp::sum);
         }},
        {"mpi",
         [&] {
           MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
           MPI_Allreduce(MPI_IN_PLACE, summary.data(), 4, MPI_FLOAT, MPI_SUM, raw);
         }},
        {"futex",
         [&] {
           shm.all_reduce(grad.data(), n, FutexAllReduce::Fold::own);
           shm.all_reduce(summary.data(), 4, FutexAllReduce::Fold::own);
         }},
        {"none", [] {}},  // no exchange at all: how the compute alone degrades
        {"shared",
         [&] {
           shm.all_reduce(grad.data(), n, FutexAllReduce::Fold::shared);
           shm.all_reduce(summary.data(), 4, FutexAllReduce::Fold::shared);
         }},
    };
    // [method][idle/loaded] -> ms per iteration, one entry per rep.
    std::vector<std::vector<std::vector<double>>> ms(methods.size(),
                                                     std::vector<std::vector<double>>(2));
    double sink = 0;
    for (int rep = 0; rep < a.reps; ++rep) {
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const std::size_t mi = rep % 2 ? methods.size() - 1 - m : m;
        for (int c = 0; c < 2; ++c) {
          const int loaded = (rep + c) % 2;  // idle first on even reps
          if (rank == 0)
            for (pid_t p : load) ::kill(p, loaded ? SIGCONT : SIGSTOP);
          MPI_Barrier(raw);
          for (int i = 0; i < 5; ++i) methods[mi].second();  // warm-up
          MPI_Barrier(raw);
          const auto t0 = Clock::now();
          double computing = 0;  // this rank's wall time in the compute part
          for (int i = 0; i < a.iters; ++i) {
            const auto w0 = Clock::now();
            sink += work(a.work_m);
            std::fill(grad.begin(), grad.end(), 1.0f);  // what a backward pass would write
            std::fill(summary.begin(), summary.end(), 1.0f);
            computing += std::chrono::duration<double>(Clock::now() - w0).count();
            methods[mi].second();
          }
          double s = std::chrono::duration<double>(Clock::now() - t0).count() / a.iters;
          MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, raw);
          ms[mi][loaded].push_back(1e3 * s);
          // The compute part's wall time on the fastest and the slowest rank: how unevenly the
          // cores were shared out.
          double fastest = computing / a.iters, slowest = fastest;
          MPI_Allreduce(MPI_IN_PLACE, &fastest, 1, MPI_DOUBLE, MPI_MIN, raw);
          MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, raw);
          if (rank == 0) {
            std::printf("  rep %d %-6s %-6s %8.3f ms/iteration (compute %.3f-%.3f ms a rank)\n",
                        rep + 1, methods[mi].first.c_str(), loaded ? "loaded" : "idle", 1e3 * s,
                        1e3 * fastest, 1e3 * slowest);
            std::fflush(stdout);
          }
        }
      }
    }
    if (rank == 0) {
      for (pid_t p : load) ::kill(p, SIGSTOP);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf(
          "\n%d ranks, %.1f M multiply-adds + all-reduce of %zu bytes and 16 bytes an "
          "iteration, %d iterations a block, %zu busy loops when loaded%s\n",
          comm->size(), a.work_m, a.bytes, a.iters, load.size(),
          load.size() < static_cast<std::size_t>(a.load)
              ? " (they start only under Open MPI's mpirun, which names rank 0 before MPI_Init)"
              : "");
      std::printf(
          "| method | idle ms (min / med) | loaded ms (min / med) | loaded / idle (med) |\n");
      std::printf("|---|---:|---:|---:|\n");
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const auto& v = ms[m];
        std::printf("| %s | %.3f / %.3f | %.3f / %.3f | %.2f |\n", methods[m].first.c_str(),
                    *std::min_element(v[0].begin(), v[0].end()), median(v[0]),
                    *std::min_element(v[1].begin(), v[1].end()), median(v[1]),
                    median(v[1]) / median(v[0]));
      }
      std::printf("(checksum %g)\n", sink + grad[0] + summary[0]);
    }
    MPI_Comm_free(&raw);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wait_probe: %s\n", e.what());
    for (pid_t p : load) ::kill(p, SIGKILL);
    return 1;
  }
  for (pid_t p : load) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  return 0;
}
