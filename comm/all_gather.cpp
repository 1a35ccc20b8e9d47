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
  if (mine > 0 && a.in != block_at(r)) std::memcpy(block_at(r), a.in, mine);

  struct Pending {
    Request req;
    int peer;
    bool recv;
  };
  std::vector<Pending> pending;
  // Receives first so that every send finds its receive posted; messages of at most
  // kMaxMessageBytes (MPI counts are int).
  for (int k = 1; k < N; ++k) {
    const int p = (r - k + N) % N;
    const std::size_t bytes = block_len(a.count, a.block, p) * es;
    for (std::size_t off = 0; off < bytes; off += kMaxMessageBytes)
      pending.push_back({irecv(block_at(p) + off, std::min(kMaxMessageBytes, bytes - off), p,
                               kTagAllGather, link.comm),
                         p, true});
  }
  std::uint64_t wire = 0;
  for (int k = 1; k < N; ++k) {
    const int p = (r + k) % N;
    for (std::size_t off = 0; off < mine; off += kMaxMessageBytes) {
      const std::size_t n = std::min(kMaxMessageBytes, mine - off);
      pending.push_back({isend(block_at(r) + off, n, p, kTagAllGather, link.comm), p, false});
      wire += n;
    }
  }
  for (Pending& q : pending)
    wait(q.req, link.timeout_s,
         q.recv ? "all_gather data from" : "all_gather data to be received by", q.peer);
  return wire;
}

}  // namespace zero::comm::mpi
