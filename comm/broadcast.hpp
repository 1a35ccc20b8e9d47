// Broadcast as a pipelined chain root -> root+1 -> ... -> root-1: each rank forwards each chunk as
// soon as it has it, so every rank but the last sends the buffer exactly once (bandwidth-optimal,
// exact wire accounting, and the same timed polling as the other collectives).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/mpi_link.hpp"

namespace zero::comm::mpi {

// buf: `bytes` bytes, in place. Returns the bytes this rank sent. Throws TimeoutError if the
// previous rank in the chain stalls.
std::uint64_t broadcast(const Link& link, void* buf, std::size_t bytes, int root);

}  // namespace zero::comm::mpi
