// The staging memory the MPI backend's reduce-scatter takes for a call, as a pure function, so
// that the memory planner (zero/planner) predicts exactly what the algorithm allocates: the
// algorithm itself sizes its staging with this function.
#pragma once

#include <cstddef>

#include "precision/dtype.hpp"

namespace zero::comm {

// Bytes of staging one reduce-scatter of `count` elements in blocks of `block` over `ranks` ranks
// takes (before the 8-byte rounding of the grow-only scratch): depth slots per peer of one chunk
// each, each slot rounded up to 64 bytes, plus one chunk of fp32 accumulators when the fold cannot
// run in `out` (16-bit output, in place, and ranks >= 3). A chunk is chunk_bytes of input, but
// never longer than block 0. 0 for a single rank.
std::size_t reduce_scatter_staging_bytes(std::size_t count, std::size_t block, int ranks,
                                         DType in, DType out, bool out_aliases_in,
                                         std::size_t chunk_bytes, int depth);

// What the grow-only scratch holds after a request for `bytes` (whole 8-byte words).
inline std::size_t scratch_rounded(std::size_t bytes) {
  return (bytes + 7) / 8 * 8;
}

}  // namespace zero::comm
