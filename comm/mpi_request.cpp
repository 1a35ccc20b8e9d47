// RAII MPI owners and the polling wait (see mpi_request.hpp).
#include "comm/mpi_request.hpp"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <thread>

namespace zero::comm::mpi {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(cat(call, " failed: ", std::string(msg, static_cast<std::size_t>(len))));
}

void CommOwner::reset() {
  if (c_ != MPI_COMM_NULL && c_ != MPI_COMM_WORLD && c_ != MPI_COMM_SELF) {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Comm_free(&c_);
  }
  c_ = MPI_COMM_NULL;
}

bool Request::test() {
  if (r_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  check(MPI_Test(&r_, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

void Request::abandon() noexcept {
  if (r_ == MPI_REQUEST_NULL) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  int done = 0;
  MPI_Test(&r_, &done, MPI_STATUS_IGNORE);
  if (done) return;
  switch (kind_) {
    case Kind::recv: {
      // A receive not yet matched is cancelled at once. One already matched by a large message
      // whose sender stopped midway can be neither cancelled nor finished, and MPI_Wait would
      // block for as long as the sender stays stopped (seen: a SIGSTOPped rank hung its peers'
      // error path forever). So it is tested for a short while and else left behind: the
      // communicator is broken and the job is ending (comm/abort.hpp), and until then this rank
      // drives MPI progress only inside the other requests' abandon().
      MPI_Cancel(&r_);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      while (!done && std::chrono::steady_clock::now() < until) {
        MPI_Test(&r_, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::yield();
      }
      break;
    }
    case Kind::send:
      // Open MPI cannot cancel sends; the send buffer is the caller's input, which outlives us.
      MPI_Request_free(&r_);
      break;
    case Kind::collective:
      // Neither cancellable nor freeable; the owner keeps its buffers alive (or leaks them).
      break;
  }
  r_ = MPI_REQUEST_NULL;
}

bool use_short_time_slices() {
#ifdef SYS_sched_setattr
  // struct sched_attr of linux/sched/types.h (SCHED_ATTR_SIZE_VER1), which glibc does not wrap.
  struct {
    std::uint32_t size = 56;
    std::uint32_t sched_policy = 0;  // SCHED_OTHER
    std::uint64_t sched_flags = 0;
    std::int32_t sched_nice = 0;
    std::uint32_t sched_priority = 0;
    std::uint64_t sched_runtime = 100'000;  // ns: the slice; Linux's minimum
    std::uint64_t sched_deadline = 0;
    std::uint64_t sched_period = 0;
    std::uint32_t sched_util_min = 0;
    std::uint32_t sched_util_max = 0;
  } attr;
  static_assert(sizeof(attr) == 56);
  // Only a normal thread, keeping its nice value (sched_setattr sets both).
  if (::sched_getscheduler(0) != SCHED_OTHER) return false;
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);
  if (errno != 0) return false;
  attr.sched_nice = nice;
  return ::syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
#else
  return false;
#endif
}

namespace {

// Sets the calling thread's timer slack to 1 ns on the first sleep() and puts the thread's own
// back when the wait ends (a user's thread may wait here: its slack is its own).
class PreciseSleeps {
 public:
  PreciseSleeps() = default;
  PreciseSleeps(const PreciseSleeps&) = delete;
  PreciseSleeps& operator=(const PreciseSleeps&) = delete;
  ~PreciseSleeps() {
    if (saved_ > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_), 0, 0, 0);
  }
  void sleep(double seconds) {
    if (saved_ == 0) {
      // Already precise, unknown or refused: nothing to put back.
      const long own = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
      saved_ = own > 1 && ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0 ? own : -1;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

 private:
  long saved_ = 0;  // 0: not yet asked; -1: nothing to restore
};

}  // namespace

void poll_until(const std::function<bool()>& done, const Patience& patience, std::string_view what,
                int peer) {
  using clock = std::chrono::steady_clock;
  if (done()) return;
  PreciseSleeps sleeper;
  const double timeout_s = patience.timeout_s;
  const auto start = clock::now();
  Backoff backoff(patience);
  for (;;) {
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited > timeout_s)
      throw TimeoutError(
          peer < 0 ? cat("timed out after ", timeout_s, " s waiting for ", what)
                   : cat("timed out after ", timeout_s, " s waiting for ", what, " rank ", peer));
    switch (backoff.next(waited)) {
      case Backoff::Step::spin:
        break;
      case Backoff::Step::yield:
        std::this_thread::yield();
        break;
      case Backoff::Step::sleep:
        sleeper.sleep(backoff.sleep_seconds());
        break;
    }
    if (done()) return;
  }
}

void wait(Request& r, const Patience& patience, std::string_view what, int peer) {
  poll_until([&] { return r.test(); }, patience, what, peer);
}

void wait_all(std::span<Request> rs, const Patience& patience, std::string_view what) {
  poll_until(
      [&] {
        bool all = true;
        for (Request& r : rs)
          if (r.pending() && !r.test()) all = false;
        return all;
      },
      patience, what, -1);
}

Request isend(const void* data, std::size_t bytes, int dest, int tag, MPI_Comm comm) {
  Request r(Request::Kind::send);
  check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm, r.slot()), "MPI_Isend");
  return r;
}

Request irecv(void* data, std::size_t bytes, int source, int tag, MPI_Comm comm) {
  Request r(Request::Kind::recv);
  check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm, r.slot()),
        "MPI_Irecv");
  return r;
}

}  // namespace zero::comm::mpi
