// All-gather by direct exchange (see all_gather.hpp).
#include "comm/all_gather.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

std::uint64_t all_gather(const Link& link, const AllGatherArgs& a) {
  const int N = link.size;
  const int r = link.rank;
  const std::size_t es = a.elem_bytes;
  auto* out = static_cast<std::byte*>(a.out);
  auto block_at = [&](int p) { return out + static_cast<std::size_t>(p) * a.block * es; };
  const std::size_t mine = block_len(a.count, a.block, r) * es;
  const auto* in = static_cast<const std::byte*>(a.in);

  struct Pending {
    Request req;
    int peer;
    bool recv;
  };
  std::vector<Pending> pending;
  // Messages of 4 x chunk_bytes (4 MiB by default): short enough that a wait longer than one
  // really means a missing peer (see mpi::wait), long enough that few rendezvous run at once per
  // peer (1 MiB messages measured at 0.75 of MPI_Allgather at 4 MiB, 4 MiB ones at 1.0). An
  // all-gather stages nothing, so unlike the reduce-scatter its message size costs no memory.
  // Receives first, so that sends find them posted.
  const std::size_t msg = std::clamp<std::size_t>(4 * link.chunk_bytes, 1, kMaxMessageBytes);
  for (int k = 1; k < N; ++k) {
    const int p = (r - k + N) % N;
    const std::size_t bytes = block_len(a.count, a.block, p) * es;
    for (std::size_t off = 0; off < bytes; off += msg)
      pending.push_back(
          {irecv(block_at(p) + off, std::min(msg, bytes - off), p, kTagAllGather, link.comm), p,
           true});
  }
  std::uint64_t wire = 0;
  for (int k = 1; k < N; ++k) {
    const int p = (r + k) % N;
    for (std::size_t off = 0; off < mine; off += msg) {
      const std::size_t n = std::min(msg, mine - off);
      pending.push_back({isend(in + off, n, p, kTagAllGather, link.comm), p, false});
      wire += n;
    }
  }
  // Our own block moves while the messages are in flight (sends read `in`, not out's copy), in
  // pieces with progress() between them so that those messages keep moving.
  if (in != block_at(r)) {
    for (std::size_t off = 0; off < mine; off += kProgressBytes) {
      std::memcpy(block_at(r) + off, in + off, std::min(kProgressBytes, mine - off));
      for (Pending& q : pending)
        if (q.req.pending()) {
          q.req.test();
          break;
        }
    }
  }
  for (Pending& q : pending)
    wait(q.req, link.patience,
         q.recv ? "all_gather data from" : "all_gather data to be received by", q.peer);
  return wire;
}

}  // namespace zero::comm::mpi
