// A communicator that moves nothing: every collective completes at once, having only been
// counted. It stands in for `size` ranks seen from rank `rank`, so that code which drives real
// collectives (the engine) can be run for its decisions and allocations alone: the memory
// planner runs the engine over one of these and a counting backend (zero/planner.cpp). It counts
// what the backend it models would: the calls and payload of each op, and the staging that
// backend's algorithm takes (comm/staging.hpp for MPI; the fp32 widening and padding copies for
// NCCL), so scratch_bytes_peak() is that backend's, byte for byte.
#pragma once

#include <memory>

#include "comm/communicator.hpp"

namespace zero::comm {

enum class StagingModel : std::uint8_t {
  mpi,   // comm::mpi: pipelined reduce-scatter slots (Options::chunk_bytes, pipeline_depth)
  nccl,  // the NCCL backend: an fp32 copy of a 16-bit input reduced into fp32; padded all_reduce
};

// Collectives validate nothing and touch no buffer (the pointers need not be real). split()
// returns a counting communicator over the ranks of the same color, which a planner cannot know:
// it is refused (zero::Error).
std::unique_ptr<Communicator> make_counting_communicator(int size, int rank, Memory memory,
                                                         StagingModel staging,
                                                         const Options& options = {});

}  // namespace zero::comm
