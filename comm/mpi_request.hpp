// RAII owners for MPI communicators and requests, and the polling wait with a timeout that every
// MPI collective of the backend uses (so a missing rank is an error, never a hang).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "zero/error.hpp"

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
// a timeout or another error) it is abandoned safely: a receive is cancelled (so it can no longer
// write into its buffer), a send is released to finish on its own, and a nonblocking collective,
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

// How long a wait may take, and how long it polls without giving up the core (see wait()).
struct Patience {
  double timeout_s = 600;
  // Spin this long before yielding: longer than one message takes to arrive on a loaded machine,
  // so that a streaming transfer keeps its core. (Yielding at once when ranks outnumber cores,
  // as Open MPI does, measured slower here: 4 ranks on 2 busy cores, 4 KiB to 256 KiB.)
  double spin_s = 2e-3;
};

// Blocks until r completes, polling MPI_Test: spinning for patience.spin_s, then yielding the
// core between polls, and sleeping briefly between polls after 50 ms (an absent or stalled
// peer). Throws TimeoutError "timed out after T s waiting for <what> [rank <peer>]" if r does
// not complete within patience.timeout_s seconds (peer < 0: no rank is named).
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

}  // namespace zero::comm::mpi
