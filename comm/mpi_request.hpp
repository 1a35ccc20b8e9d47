// RAII owners for MPI communicators and requests, and the polling wait with a timeout that every
// MPI collective of the backend uses (so a missing rank is an error, never a hang).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.hpp"

namespace zero::comm::mpi {

// Throws zero::Error naming the MPI call and MPI's own message when rc is not MPI_SUCCESS.
void check(int rc, const char* call);

// A wait ran past Options::timeout_seconds without progress. The communicator that sees it
// becomes unusable: messages of the abandoned collective may still be in flight.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Owns an MPI communicator (MPI_Comm_free on destruction). MPI_COMM_WORLD/SELF are never freed.
class CommOwner {
 public:
  CommOwner() = default;
  explicit CommOwner(MPI_Comm c) : c_(c) {}
  CommOwner(CommOwner&& o) noexcept : c_(std::exchange(o.c_, MPI_COMM_NULL)) {}
  CommOwner& operator=(CommOwner&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, MPI_COMM_NULL);
    }
    return *this;
  }
  ~CommOwner() { reset(); }
  MPI_Comm get() const { return c_; }
  // Gives up ownership without freeing: a broken communicator's abandoned collectives still
  // reference it, and Open MPI's progress engine crashes on a freed one (seen in MPI_Finalize).
  void leak() { c_ = MPI_COMM_NULL; }

 private:
  void reset();
  MPI_Comm c_ = MPI_COMM_NULL;
};

// Owns one MPI request. Normally waited to completion; when it is destroyed still pending (after
// a timeout or another error) it is abandoned without blocking: a receive is cancelled (so it can
// no longer write into its buffer; one that a stopped sender's message had already matched cannot
// be, and is left behind after 100 ms), a send is released to finish on its own, and a
// nonblocking collective,
// which MPI allows neither to cancel nor to free, is left alone (its buffers must outlive it:
// see Graveyard in comm/signature.hpp).
class Request {
 public:
  enum class Kind { recv, send, collective };
  Request() = default;
  explicit Request(Kind k) : kind_(k) {}
  Request(Request&& o) noexcept : r_(std::exchange(o.r_, MPI_REQUEST_NULL)), kind_(o.kind_) {}
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      abandon();
      r_ = std::exchange(o.r_, MPI_REQUEST_NULL);
      kind_ = o.kind_;
    }
    return *this;
  }
  ~Request() { abandon(); }

  MPI_Request* slot() { return &r_; }  // for MPI_Isend(..., req.slot())
  bool pending() const { return r_ != MPI_REQUEST_NULL; }
  bool test();  // true when complete (MPI_Test; drives MPI's progress engine)

 private:
  void abandon() noexcept;
  MPI_Request r_ = MPI_REQUEST_NULL;
  Kind kind_ = Kind::send;
};

// How long a wait may take, and how it waits: it polls MPI_Test, spinning for spin_s, then
// yielding the core between polls until yield_s, then sleeping between polls: sleep_min_s at
// first, twice as long each time up to sleep_max_s, and past long_after_s (an absent or stalled
// peer) up to sleep_long_s. The waiting thread's timer slack is 1 ns while it sleeps (Linux's
// default, 50 us, would make every sleep at least that long).
// Why sleep from the first poll: a rank that sleeps is not runnable, so it leaves its core to the
// work that is (the peer it waits for, when ranks outnumber cores), and its timer wakeup is a
// point where the scheduler lets it preempt a process that computes (with the short slice, see
// use_short_time_slices) instead of after that process's slice. A rank that yields stays
// runnable and is preempted at ticks only. bench/oversubscribed.py, 4 ranks on 2 cores with two
// busy loops, interleaved (docs/benchmarks.md): yielding 24-25 ms/step loaded, sleeping 18-20
// (with the single-copy transport, which needs one hand-off a message instead of three, 15-16);
// idle, yielding stays 5-15% faster on the tiny model, and equal on the 8 x 1024.
// An earlier measurement that favoured yielding slept with the default 50 us timer slack.
struct Patience {
  double timeout_s = 600;
  double spin_s = 0;
  double yield_s = 0;
  double sleep_min_s = 5e-6;
  double sleep_max_s = 50e-6;
  double long_after_s = 50e-3;
  double sleep_long_s = 1e-3;
};

// Asks Linux (6.12 and later: EEVDF's per-task slice, sched_setattr's sched_runtime for
// SCHED_OTHER) for the shortest time slice, 100 us, for the calling thread and the threads and
// processes it starts afterwards. A rank that wakes up or is handed a yielded core then preempts
// a process that computes instead of waiting for its slice (about 3 ms here) to end: on a loaded
// or oversubscribed machine a collective is a chain of such hand-offs between ranks. Its CPU
// share is unchanged (EEVDF shares time by weight, not by slice). Returns false, changing
// nothing, where the kernel refuses it; older kernels accept and ignore it.
bool use_short_time_slices();

// The schedule of one wait, as plain arithmetic so that it can be tested without MPI.
class Backoff {
 public:
  enum class Step { spin, yield, sleep };
  explicit Backoff(const Patience& p) : p_(p) {}
  // What to do before the next poll after waiting `waited` seconds; for Step::sleep, how long
  // is sleep_seconds() (sleep_min_s, doubling on each sleep up to sleep_max_s, or sleep_long_s
  // once the wait is past long_after_s; never past the timeout, so that the wait gives up on
  // time).
  Step next(double waited) {
    if (waited < p_.spin_s) return Step::spin;
    if (waited < p_.yield_s) return Step::yield;
    const double cap = waited < p_.long_after_s ? p_.sleep_max_s : p_.sleep_long_s;
    if (next_ > cap) next_ = cap;
    const double left = p_.timeout_s - waited;
    sleep_ = left < next_ ? (left > 0 ? left : 0) : next_;
    next_ = next_ * 2 < cap ? next_ * 2 : cap;
    return Step::sleep;
  }
  double sleep_seconds() const { return sleep_; }

 private:
  Patience p_;
  double next_ = p_.sleep_min_s;
  double sleep_ = 0;
};

// Polls done() until it returns true, following Backoff(patience); throws TimeoutError
// "timed out after T s waiting for <what> [rank <peer>]" past patience.timeout_s (peer < 0: no
// rank is named). What wait() and wait_all() run; a function of its own for the tests.
void poll_until(const std::function<bool()>& done, const Patience& patience, std::string_view what,
                int peer = -1);

// Blocks until r completes (poll_until over MPI_Test, which also drives MPI's progress engine).
void wait(Request& r, const Patience& patience, std::string_view what, int peer = -1);
// The same for every request of rs (each is tested in turn, which also drives progress). After a
// TimeoutError, the requests that completed are exactly those no longer pending().
void wait_all(std::span<Request> rs, const Patience& patience, std::string_view what);

// Shared-memory MPI moves a message only while its ranks are inside MPI calls. Long local work
// (a fold, a copy) is therefore cut into pieces of this many bytes with a progress() between
// them, so that the transfers in flight keep moving instead of waiting for the next wait().
inline constexpr std::size_t kProgressBytes = std::size_t{64} << 10;
// Drives MPI's progress engine by testing the first pending request of `requests`, if any.
inline void progress(std::span<Request> requests) {
  for (Request& r : requests)
    if (r.pending()) {
      r.test();
      return;
    }
}

// Post one MPI_BYTE message. Callers split buffers into messages of at most kMaxMessageBytes
// (MPI counts are int).
inline constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;
Request isend(const void* data, std::size_t bytes, int dest, int tag, MPI_Comm comm);
Request irecv(void* data, std::size_t bytes, int source, int tag, MPI_Comm comm);

// Message tags, one per algorithm, so that a stray message of one can never match another.
inline constexpr int kTagReduceScatter = 101;
inline constexpr int kTagAllGather = 102;
inline constexpr int kTagBroadcast = 103;
inline constexpr int kTagSignature = 104;
inline constexpr int kTagAllToAll = 105;

}  // namespace zero::comm::mpi
