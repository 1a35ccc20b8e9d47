// One direct exchange's messages in flight (comm/all_gather.cpp, comm/all_to_all.cpp): every
// receive and send posted at once, split into messages of at most 4 x Link::chunk_bytes, the
// rank's own block copied in pieces that keep them moving, and a wait that names the peer a
// stalled message is from or for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mpi_link.hpp"
#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

class Exchange {
 public:
  // `op` names the collective in a timeout's sentence ("all_gather"); `tag` its messages.
  Exchange(const Link& link, int tag, std::string_view op);
  // Posts the receives of `bytes` from `peer` into `at`. Post every receive before the sends, so
  // that sends find them posted.
  void receive(void* at, std::size_t bytes, int peer);
  // Posts the sends of `bytes` at `from` to `peer`; returns the bytes it puts on the wire.
  std::uint64_t send(const void* from, std::size_t bytes, int peer);
  // Copies the rank's own block while the messages are in flight, in pieces of kProgressBytes
  // with a test of the first pending message between them, so that those messages keep moving.
  void copy_own(void* to, const void* from, std::size_t bytes);
  // Waits for every message, in the order posted (TimeoutError naming the peer if one stalls).
  void wait();

 private:
  struct Pending {
    Request req;
    int peer;
    bool recv;
  };
  const Link& link_;
  int tag_;
  std::size_t msg_;
  std::string from_, to_;  // "<op> data from", "<op> data to be received by"
  std::vector<Pending> pending_;
};

}  // namespace zero::comm::mpi
