// comm/nccl_communicator.hpp in a build without CUDA: NCCL is never available, and asking for an
// NCCL communicator says why, so callers need no #if of their own.
#include "comm/nccl_communicator.hpp"
#include "base/error.hpp"

namespace zero::comm {

bool nccl_available() noexcept {
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, NcclOptions) {
  throw Error("this build has no CUDA, so no NCCL communicator: configure with -Dcuda=enabled");
}

}  // namespace zero::comm
