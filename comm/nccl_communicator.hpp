// The NCCL backend of Communicator (device memory): collectives on a communication stream of its
// own, ordered after the caller's compute stream, with the MPI backend's cross-rank signature
// check and timeouts. Compiles without CUDA headers; in a build without CUDA nccl_available()
// returns false and make_nccl_communicator throws zero::Error saying the build has no CUDA.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/communicator.hpp"

namespace zero::comm {

// True when this build has NCCL and at least one CUDA device is visible. Never throws.
bool nccl_available() noexcept;

struct NcclOptions {
  // timeout_seconds and verify as for every backend; chunk_bytes and pipeline_depth are the MPI
  // backend's and are ignored here.
  Options common;
  // The CUDA device of this rank; -1: this rank's index among the ranks of its node, modulo the
  // number of visible devices. NCCL needs a device per rank: two ranks on one device fail.
  int device = -1;
  // The cudaStream_t the caller computes on; nullptr: the legacy default stream. Collectives read
  // their inputs after the work queued on it so far, and a completed wait() orders it after them.
  void* compute_stream = nullptr;
};

// A communicator over NCCL for the ranks of `mpi_comm` (taken as an MPI_Comm, like
// make_mpi_communicator, so that any sub-communicator can be used; pass MPI_COMM_WORLD when
// MpiRuntime set MPI up). Collective over mpi_comm: it duplicates mpi_comm for its own signature
// exchange, rank 0 creates the NCCL id and broadcasts it, and every rank joins the NCCL
// communicator on its device, which it leaves current on the calling thread so that buffers the
// caller allocates next live there. Needs MPI initialised; calls MPI only from the calling thread.
// Throws zero::Error, on every rank, when a rank has no device or NCCL cannot start.
//
// Buffers are device memory on that device (View::memory == Memory::device; a host view is an
// error naming the op). A *_async call returns once the collective is queued on the
// communication stream; Handle::wait() blocks the host until it has completed (polling, which is
// what lets it fail after timeout_seconds of waiting) and then makes the compute stream wait for
// it, so that later compute sees the result. Handle::test() only asks. With verify on, the call
// itself first exchanges signatures with every rank over MPI (blocking, within the timeout). A
// communicator and its handles are used from one thread at a time, as NCCL's own are.
//
// Sums: NCCL's reduction order is not rank order (it follows its ring or tree), so results may
// differ from the MPI backend's rank-order fold in the last bits. all_reduce is a reduce-scatter
// then an all-gather over blocks of ceil(count / size()), so it sums exactly as a reduce_scatter
// of that size does, and the stages agree bitwise with each other. Unlike the MPI backend's,
// NCCL's order may change with the message size (its algorithm choice): sums of one buffer cut
// into different buckets may differ in the last bits. 16-bit same-dtype sums are rounded by NCCL
// at each step; bf16 or fp16 into fp32 is widened to fp32 on the device first and reduced (and
// sent) in fp32. avg is NCCL's: inputs are scaled by 1 / size() before the sum (the sum divided
// once when size() is a power of two). NaN under max follows NCCL.
//
// Failures: wrong arguments on this rank throw at the call; ranks that disagree throw on every
// rank, naming who called what, and the communicator stays usable. An NCCL error, or a collective
// that does not complete within timeout_seconds, aborts the NCCL communicator (ncclCommAbort) and
// throws naming the op and its sequence number; every later call then throws.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm mpi_comm, NcclOptions options = {});

}  // namespace zero::comm
