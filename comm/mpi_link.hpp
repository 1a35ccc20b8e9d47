// What an MPI collective algorithm needs to run: the communicator, this rank's place in it, the
// tuning and timeout options, and a grow-only staging buffer owned by the calling communicator.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

struct Link {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  Patience patience;
  std::size_t chunk_bytes = std::size_t{1} << 20;
  int depth = 2;
};

// Staging memory reused by every collective of one communicator (only its communication thread
// touches it). It only grows, so after the first large collective no allocation happens on the
// data path; its size is what scratch_bytes_peak() reports.
class Scratch {
 public:
  std::byte* get(std::size_t bytes) {
    const std::size_t words = (bytes + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t);
    if (words > words_.size()) {
      words_.assign(words, 0);
      peak_.store(words * sizeof(std::uint64_t), std::memory_order_relaxed);
    }
    return reinterpret_cast<std::byte*>(words_.data());
  }
  std::size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::uint64_t> words_;  // 8-byte aligned: enough for every element type
  std::atomic<std::size_t> peak_{0};
};

// The length of block p when `count` elements are cut into blocks of `block` (the last blocks of
// a count that size() does not divide are shorter, or empty).
inline std::size_t block_len(std::size_t count, std::size_t block, int p) {
  const std::size_t begin = static_cast<std::size_t>(p) * block;
  if (begin >= count) return 0;
  return count - begin < block ? count - begin : block;
}

}  // namespace zero::comm::mpi
