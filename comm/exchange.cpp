// A direct exchange's messages in flight (see exchange.hpp).
#include "comm/exchange.hpp"

#include <algorithm>
#include <cstring>

namespace zero::comm::mpi {

// Messages of 4 x chunk_bytes (4 MiB by default): short enough that a wait longer than one
// really means a missing peer (see mpi::wait), long enough that few rendezvous run at once per
// peer (1 MiB messages measured at 0.75 of MPI_Allgather at 4 MiB, 4 MiB ones at 1.0). A direct
// exchange stages nothing, so unlike the reduce-scatter its message size costs no memory.
Exchange::Exchange(const Link& link, int tag, std::string_view op)
    : link_(link),
      tag_(tag),
      msg_(std::clamp<std::size_t>(4 * link.chunk_bytes, 1, kMaxMessageBytes)),
      from_(std::string(op) + " data from"),
      to_(std::string(op) + " data to be received by") {}

void Exchange::receive(void* at, std::size_t bytes, int peer) {
  auto* p = static_cast<std::byte*>(at);
  for (std::size_t off = 0; off < bytes; off += msg_)
    pending_.push_back(
        {irecv(p + off, std::min(msg_, bytes - off), peer, tag_, link_.comm), peer, true});
}

std::uint64_t Exchange::send(const void* from, std::size_t bytes, int peer) {
  const auto* p = static_cast<const std::byte*>(from);
  std::uint64_t wire = 0;
  for (std::size_t off = 0; off < bytes; off += msg_) {
    const std::size_t n = std::min(msg_, bytes - off);
    pending_.push_back({isend(p + off, n, peer, tag_, link_.comm), peer, false});
    wire += n;
  }
  return wire;
}

void Exchange::copy_own(void* to, const void* from, std::size_t bytes) {
  auto* t = static_cast<std::byte*>(to);
  const auto* f = static_cast<const std::byte*>(from);
  for (std::size_t off = 0; off < bytes; off += kProgressBytes) {
    std::memcpy(t + off, f + off, std::min(kProgressBytes, bytes - off));
    for (Pending& q : pending_)
      if (q.req.pending()) {
        q.req.test();
        break;
      }
  }
}

void Exchange::wait() {
  for (Pending& q : pending_) mpi::wait(q.req, link_.patience, q.recv ? from_ : to_, q.peer);
}

}  // namespace zero::comm::mpi
