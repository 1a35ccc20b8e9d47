// All-gather by direct exchange (see all_gather.hpp).
#include "comm/all_gather.hpp"

#include "comm/exchange.hpp"

namespace zero::comm::mpi {

std::uint64_t all_gather(const Link& link, const AllGatherArgs& a) {
  const int N = link.size;
  const int r = link.rank;
  const std::size_t es = a.elem_bytes;
  auto* out = static_cast<std::byte*>(a.out);
  auto block_at = [&](int p) { return out + static_cast<std::size_t>(p) * a.block * es; };
  const std::size_t mine = block_len(a.count, a.block, r) * es;
  const auto* in = static_cast<const std::byte*>(a.in);
  Exchange x(link, kTagAllGather, "all_gather");
  for (int k = 1; k < N; ++k) {
    const int p = (r - k + N) % N;
    x.receive(block_at(p), block_len(a.count, a.block, p) * es, p);
  }
  std::uint64_t wire = 0;
  for (int k = 1; k < N; ++k) wire += x.send(in, mine, (r + k) % N);
  // Sends read `in`, not out's copy: in place, there is nothing to copy.
  if (in != block_at(r)) x.copy_own(block_at(r), in, mine);
  x.wait();
  return wire;
}

}  // namespace zero::comm::mpi
