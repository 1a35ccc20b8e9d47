// All-gather by direct exchange: each rank sends its block once to every peer and receives every
// peer's block straight into the output. No arithmetic, no staging; wire bytes are exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/mpi_link.hpp"

namespace zero::comm::mpi {

struct AllGatherArgs {
  const void* in =
      nullptr;          // this rank's block_len(count, block, rank) elements; may be out's block
  void* out = nullptr;  // `count` elements in blocks of `block`; block p comes from rank p
  std::size_t count = 0;
  std::size_t block = 0;
  std::size_t elem_bytes = 1;
};

// Blocks travel as messages of at most 4 x Link::chunk_bytes. Returns the bytes this rank sent
// ((N-1) x its block). Throws TimeoutError if a peer stalls.
std::uint64_t all_gather(const Link& link, const AllGatherArgs& args);

}  // namespace zero::comm::mpi
