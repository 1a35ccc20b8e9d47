// Local argument checks of the MPI backend, run on the caller's thread before anything is queued,
// so that a wrong call fails at the call site with a sentence naming the op and the numbers.
#pragma once

#include <string>

#include "comm/communicator.hpp"

namespace zero::comm::mpi {

// Each returns "" when the arguments are valid, else the message ("reduce_scatter: in.count ...").
std::string check_reduce_scatter(const ConstView& in, const View& out, ReduceOp op, int rank,
                                 int size);
std::string check_all_gather(const ConstView& in, const View& out, int rank, int size);
std::string check_all_reduce(const View& buf, ReduceOp op);
std::string check_broadcast(const View& buf, int root, int size);
std::string check_all_to_all(const ConstView& in, const View& out, int size);

}  // namespace zero::comm::mpi
