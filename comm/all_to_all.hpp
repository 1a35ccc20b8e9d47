// All-to-all by direct exchange: block j of each rank's input goes to rank j, straight into
// block r (the sender's rank) of rank j's output. No arithmetic, no staging; wire bytes are exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/mpi_link.hpp"

namespace zero::comm::mpi {

struct AllToAllArgs {
  const void* in = nullptr;  // size blocks of `block` elements; block p goes to rank p
  void* out = nullptr;       // size blocks; block p comes from rank p (never overlaps in)
  std::size_t block = 0;     // elements per block
  std::size_t elem_bytes = 1;
};

// Point to point rather than MPI_Ialltoall, as the all-gather: a stalled peer is a timeout that
// names it, a block past 2^31 bytes travels in several messages, and nothing is left as an
// uncancellable collective after a failure. Messages of at most 4 x Link::chunk_bytes. Returns
// the bytes this rank sent ((N-1) x its block). Throws TimeoutError if a peer stalls.
std::uint64_t all_to_all(const Link& link, const AllToAllArgs& args);

}  // namespace zero::comm::mpi
