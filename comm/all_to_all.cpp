// All-to-all by direct exchange (see all_to_all.hpp).
#include "comm/all_to_all.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

std::uint64_t all_to_all(const Link& link, const AllToAllArgs& a) {
  const int N = link.size;
  const int r = link.rank;
  const std::size_t bytes = a.block * a.elem_bytes;
  const auto* in = static_cast<const std::byte*>(a.in);
  auto* out = static_cast<std::byte*>(a.out);
  auto at = [&](auto* base, int p) { return base + static_cast<std::size_t>(p) * bytes; };

  struct Pending {
    Request req;
    int peer;
    bool recv;
  };
  std::vector<Pending> pending;
  // The all-gather's message size (comm/all_gather.cpp says why); receives first, so that sends
  // find them posted, and peers in the order r+1, r+2, ... so that no rank is everyone's first.
  const std::size_t msg = std::clamp<std::size_t>(4 * link.chunk_bytes, 1, kMaxMessageBytes);
  for (int k = 1; k < N; ++k) {
    const int p = (r - k + N) % N;
    for (std::size_t off = 0; off < bytes; off += msg)
      pending.push_back(
          {irecv(at(out, p) + off, std::min(msg, bytes - off), p, kTagAllToAll, link.comm), p,
           true});
  }
  std::uint64_t wire = 0;
  for (int k = 1; k < N; ++k) {
    const int p = (r + k) % N;
    for (std::size_t off = 0; off < bytes; off += msg) {
      const std::size_t n = std::min(msg, bytes - off);
      pending.push_back({isend(at(in, p) + off, n, p, kTagAllToAll, link.comm), p, false});
      wire += n;
    }
  }
  // Our own block moves while the messages are in flight, in pieces with progress between them.
  for (std::size_t off = 0; off < bytes; off += kProgressBytes) {
    std::memcpy(at(out, r) + off, at(in, r) + off, std::min(kProgressBytes, bytes - off));
    for (Pending& q : pending)
      if (q.req.pending()) {
        q.req.test();
        break;
      }
  }
  for (Pending& q : pending)
    wait(q.req, link.patience,
         q.recv ? "all_to_all data from" : "all_to_all data to be received by", q.peer);
  return wire;
}

}  // namespace zero::comm::mpi
