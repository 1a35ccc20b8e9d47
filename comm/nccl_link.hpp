// nccl::Link: one NCCL communicator and what every collective on it needs: its device, the
// communication stream ordered after the caller's compute stream, the signature exchange over MPI,
// polling with the timeout, abort, the staging buffer and the accounting. The collectives
// themselves are in nccl_communicator.cpp. Internal to comm/'s CUDA build.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/communicator.hpp"
#include "comm/mpi_link.hpp"
#include "comm/mpi_request.hpp"
#include "comm/nccl_communicator.hpp"
#include "comm/signature.hpp"
#include "kernels/cuda/device.hpp"
#include "base/error.hpp"

namespace zero::comm::nccl {

// Throws zero::Error naming the call and CUDA's error when e is not cudaSuccess.
void check_cuda(cudaError_t e, const char* call);
#define ZERO_NCCL_CUDA(call) ::zero::comm::nccl::check_cuda((call), #call)

// The device-side resources of a communicator, made on its device before NCCL starts.
struct DeviceSide {
  kernels::cuda::Stream stream;  // the communication stream (non-blocking)
  kernels::cuda::Event ready;    // marks the compute stream's work before a collective
  kernels::cuda::DeviceBuffer word{sizeof(std::int32_t)};  // what barrier() all-reduces
  kernels::cuda::DeviceBuffer scratch;  // staging for widening and padding; only grows
};

// One issued collective, owned by its Handle. Made on the communicator's device (its event).
struct Pending {
  Op op = Op::barrier;
  std::string what;  // "all_reduce(count=16, fp32, sum) (collective #2)"
  std::uint64_t payload = 0, wire = 0;
  std::chrono::steady_clock::time_point issued;
  kernels::cuda::Event done;  // recorded on the communication stream after the last call
  bool finished = false;
  std::exception_ptr error;
};

// Shared by a communicator and its handles, so that a handle may outlive the communicator object;
// the NCCL communicator is finalised when the last of them goes. Used from one thread at a time
// (accounting() and scratch_bytes_peak() excepted).
class Link {
 public:
  Link(mpi::CommOwner mpi_comm, const mpi::Link& link, int device, ncclComm_t nccl, DeviceSide side,
       const NcclOptions& options);
  ~Link();  // ncclCommFinalize within the timeout, then destroy; abort if that fails
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int rank() const { return link_.rank; }
  int size() const { return link_.size; }
  int device() const { return device_; }
  const NcclOptions& options() const { return options_; }
  MPI_Comm mpi_comm() const { return link_.comm; }

  // What a collective's enqueue step gets: the communication stream, NCCL, the scratch and the
  // barrier's device int. queued() follows each ncclX call.
  struct Queue {
    Link* link;
    const std::string* what;
    cudaStream_t stream;
    ncclComm_t nccl;
    std::byte* scratch;
    void* word;
    void queued(ncclResult_t r, const char* call) const { link->queued(r, call, *what); }
  };
  using Enqueue = std::function<void(const Queue&)>;

  // The signature check of one collective (Options::verify), which takes its sequence number. A
  // mismatch throws on every rank and leaves the communicator usable; a timeout breaks it.
  void check_in(mpi::Signature& sig);
  // One collective: check_in, then `enqueue` on the communication stream after the work queued
  // on the compute stream so far. scratch_bytes: the staging enqueue needs.
  std::unique_ptr<Pending> issue(mpi::Signature sig, Op op, std::uint64_t payload,
                                 std::uint64_t wire, std::size_t scratch_bytes,
                                 const Enqueue& enqueue);
  // A call that failed local validation: takes its turn in the signature exchange, marked
  // invalid, so that ranks that called correctly fail with a mismatch naming this rank instead of
  // waiting for it until the timeout; then throws `why`.
  [[noreturn]] void reject(mpi::Signature sig, const std::string& why);
  // After an ncclX call: waits, within the timeout, until NCCL has queued it.
  void queued(ncclResult_t r, const char* call, const std::string& what);

  // Handle::wait and Handle::test of a Pending.
  void wait(Pending& p);
  bool test(Pending& p);

  Accounting accounting() const;
  void reset_accounting();
  std::size_t scratch_bytes_peak() const { return scratch_peak_.load(std::memory_order_relaxed); }

 private:
  double timeout() const { return options_.common.timeout_seconds; }
  Error::Where here() const;
  Error unusable() const;
  Error break_with(const std::string& what);
  bool step(const std::string& what, const std::function<bool(ncclResult_t)>& ready);
  void await(const std::string& what, const std::function<bool(ncclResult_t)>& ready);
  void complete(Pending& p);
  std::byte* grow_scratch(std::size_t bytes, const std::string& what);

  mpi::CommOwner mpi_comm_;  // the duplicate that carries signatures; freed last
  mpi::Link link_;
  int device_;
  NcclOptions options_;
  kernels::cuda::StreamRef compute_;
  ncclComm_t nccl_;  // nullptr once aborted
  std::optional<DeviceSide> side_;
  mpi::Graveyard graveyard_;
  std::int64_t seq_ = 0;
  std::string broken_;  // the failure that aborted NCCL
  std::atomic<std::size_t> scratch_peak_{0};

  mutable std::mutex acct_mu_;
  Accounting acct_;
};

// Collective over `comm` (which it takes over): picks and sets this rank's device, agrees with
// every rank that all could, shares rank 0's NCCL id and joins the NCCL communicator, each step
// within the timeout. Leaves the device current. Throws zero::Error, naming the rank.
std::shared_ptr<Link> connect(mpi::CommOwner comm, const NcclOptions& options);

}  // namespace zero::comm::nccl
