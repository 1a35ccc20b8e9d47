// Deterministic reduce-scatter over point-to-point messages, pipelined in chunks: every element is
// folded in rank order 0..N-1, whatever the message size, chunk size or bucketing, so that stage 0
// (all-reduce) and stages 1-3 (reduce-scatter) produce bitwise the same sums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.hpp"
#include "comm/mpi_link.hpp"

namespace zero::comm::mpi {

struct ReduceScatterArgs {
  const void* in = nullptr;  // `count` elements, cut into blocks of `block`; block p goes to rank p
  DType in_type = DType::f32;
  std::size_t count = 0;
  std::size_t block = 0;
  void* out = nullptr;  // block_len(count, block, rank) elements of out_type
  DType out_type = DType::f32;
  ReduceOp op = ReduceOp::sum;
  bool out_aliases_in = false;  // out is this rank's own block of in (in place)
};

// Algorithm (direct exchange, bandwidth-optimal like a ring: each rank sends (N-1)/N of its input
// once): this rank's block is cut into chunks of Link::chunk_bytes. For chunk c every peer sends
// its slice of our block into a staging slot; we fold the N slices in rank order (our own slice is
// read straight from `in`) and write the chunk of out. Link::depth slots per peer rotate, so the
// transfer of the next chunks overlaps the reduction of this one and staging stays bounded at
// depth * (N-1) * chunk_bytes (+ one chunk of fp32 accumulators for 16-bit outputs, in-place
// calls, and N >= 3). Returns the bytes this rank sent. Throws TimeoutError if a peer stalls.
std::uint64_t reduce_scatter(const Link& link, const ReduceScatterArgs& args, Scratch& scratch);

}  // namespace zero::comm::mpi
