// All-to-all by direct exchange (see all_to_all.hpp).
#include "comm/all_to_all.hpp"

#include "comm/exchange.hpp"

namespace zero::comm::mpi {

std::uint64_t all_to_all(const Link& link, const AllToAllArgs& a) {
  const int N = link.size;
  const int r = link.rank;
  const std::size_t bytes = a.block * a.elem_bytes;
  const auto* in = static_cast<const std::byte*>(a.in);
  auto* out = static_cast<std::byte*>(a.out);
  auto at = [&](auto* base, int p) { return base + static_cast<std::size_t>(p) * bytes; };
  // The all-gather's messages (comm/exchange.cpp says why); peers in the order r+1, r+2, ...
  // so that no rank is everyone's first.
  Exchange x(link, kTagAllToAll, "all_to_all");
  for (int k = 1; k < N; ++k) {
    const int p = (r - k + N) % N;
    x.receive(at(out, p), bytes, p);
  }
  std::uint64_t wire = 0;
  for (int k = 1; k < N; ++k) {
    const int p = (r + k) % N;
    wire += x.send(at(in, p), bytes, p);
  }
  x.copy_own(at(out, r), at(in, r), bytes);
  x.wait();
  return wire;
}

}  // namespace zero::comm::mpi
