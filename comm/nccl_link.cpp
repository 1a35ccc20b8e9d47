// nccl::Link (see nccl_link.hpp): construction, polling, abort and teardown of one NCCL
// communicator.
//
// The NCCL communicator is nonblocking (ncclConfig_t::blocking = 0): every NCCL call returns at
// once, possibly with ncclInProgress, and we poll ncclCommGetAsyncError until it settles. That is
// what gives the timeout its reach: a blocking NCCL call that waits for an absent peer (init, the
// connection setup of the first collective of a kind, finalize) could otherwise hang for ever.
#include "comm/nccl_link.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace zero::comm::nccl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Between polls: yield the core for the first 50 ms (a collective in flight usually finishes
// within that), then sleep, so that a slow or absent peer does not cost a spinning core.
void backoff(Clock::time_point start) {
  if (seconds_since(start) < 50e-3)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += cat(" (", last, ")");
  return s;
}

// Polls a nonblocking NCCL communicator until its state leaves ncclInProgress or timeout_s pass;
// returns the state (still ncclInProgress after a timeout).
ncclResult_t settle_state(ncclComm_t comm, double timeout_s) {
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (const ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
    if (state != ncclInProgress || seconds_since(start) > timeout_s) return state;
    backoff(start);
  }
}

// Makes `device` current for a scope and restores the caller's device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    ZERO_NCCL_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device_) ZERO_NCCL_CUDA(cudaSetDevice(device_));
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = -1;
};

cudaStream_t native(kernels::cuda::StreamRef s) {
  return static_cast<cudaStream_t>(s.handle);
}

std::string numbered(const mpi::Signature& sig) {
  return cat(mpi::describe(sig), " (collective #", sig.seq, ")");
}

}  // namespace

void check_cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that it does not resurface in the next check
  throw Error(cat(call, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

Link::Link(mpi::CommOwner mpi_comm, const mpi::Link& link, int device, ncclComm_t nccl,
           DeviceSide side, const NcclOptions& options)
    : mpi_comm_(std::move(mpi_comm)),
      link_(link),
      device_(device),
      options_(options),
      nccl_(nccl),
      side_(std::move(side)) {
  compute_.handle =
      options.compute_stream ? options.compute_stream : static_cast<void*>(cudaStreamLegacy);
}

Link::~Link() {
  try {
    DeviceGuard guard(device_);
    if (nccl_ != nullptr) {
      // Finalize waits for this rank's queued work and its peers; past the timeout we abort
      // rather than hang in a destructor.
      ncclResult_t r = ncclCommFinalize(nccl_);
      if (r == ncclSuccess || r == ncclInProgress) r = settle_state(nccl_, timeout());
      if (r == ncclSuccess)
        ncclCommDestroy(nccl_);
      else
        ncclCommAbort(nccl_);
      nccl_ = nullptr;
    }
    side_.reset();  // on our device
  } catch (...) {   // only the guard throws: release on whatever device is current
    if (nccl_ != nullptr) ncclCommAbort(nccl_);
  }
}

Error::Where Link::here() const {
  Error::Where w;
  w.rank = rank();
  return w;
}

Error Link::unusable() const {
  return Error(cat("this communicator is unusable since an earlier collective failed: ", broken_),
               here());
}

// Aborts the NCCL communicator (its kernels stop; nothing can be assumed about collectives in
// flight) and returns the error to throw. Every later call throws unusable().
Error Link::break_with(const std::string& what) {
  if (broken_.empty()) broken_ = what;
  if (nccl_ != nullptr) {
    ncclCommAbort(nccl_);
    nccl_ = nullptr;
  }
  return Error(cat(what, "; the NCCL communicator was aborted and is now unusable"), here());
}

void Link::check_in(mpi::Signature& sig) {
  if (nccl_ == nullptr) throw unusable();
  sig.seq = ++seq_;
  if (!options_.common.verify) return;
  std::optional<std::string> mismatch;
  try {
    mismatch = mpi::agree(link_, sig, graveyard_);
  } catch (const mpi::TimeoutError& e) {
    throw break_with(cat(numbered(sig), " ", e.what()));
  } catch (const Error& e) {
    throw break_with(cat(numbered(sig), ": ", e.what()));
  }
  if (mismatch) throw Error(*mismatch, here());
}

std::unique_ptr<Pending> Link::issue(mpi::Signature sig, Op op, std::uint64_t payload,
                                     std::uint64_t wire, std::size_t scratch_bytes,
                                     const Enqueue& enqueue) {
  const auto issued = Clock::now();
  check_in(sig);
  const std::string what = numbered(sig);
  try {
    DeviceGuard guard(device_);
    auto p = std::make_unique<Pending>();
    p->op = op;
    p->what = what;
    p->payload = payload;
    p->wire = wire;
    p->issued = issued;
    std::byte* scratch = scratch_bytes > 0 ? grow_scratch(scratch_bytes, what) : nullptr;
    // The communication stream waits, on the device, for what the compute stream has queued so
    // far (the inputs): an event rather than a host sync, so that the caller keeps queueing.
    side_->ready.record(compute_);
    side_->ready.wait_on(side_->stream);
    enqueue(Queue{this, &what, native(side_->stream), nccl_, scratch, side_->word.data()});
    p->done.record(side_->stream);
    return p;
  } catch (const Error& e) {
    if (nccl_ == nullptr) throw;  // already broken, and the message says so
    throw break_with(cat(what, ": ", e.what()));
  }
}

void Link::reject(mpi::Signature sig, const std::string& why) {
  if (nccl_ == nullptr) throw unusable();
  if (options_.common.verify) {
    sig.valid = 0;
    try {
      check_in(sig);
    } catch (const Error&) {  // the local error is the one worth reporting here
    }
  }
  throw Error(why, here());
}

void Link::queued(ncclResult_t r, const char* call, const std::string& what) {
  if (r == ncclSuccess) return;
  if (r != ncclInProgress)
    throw break_with(cat(what, ": ", call, " failed: ", nccl_error(r, nccl_)));
  await(cat(what, " (", call, ")"), [](ncclResult_t state) { return state == ncclSuccess; });
}

// One poll: NCCL's asynchronous error (a failed or aborted peer, a network error) or a CUDA error
// breaks the communicator; otherwise reports whether ready(NCCL's state) holds.
bool Link::step(const std::string& what, const std::function<bool(ncclResult_t)>& ready) {
  ncclResult_t state = ncclSuccess;
  if (const ncclResult_t r = ncclCommGetAsyncError(nccl_, &state); r != ncclSuccess) state = r;
  if (state != ncclSuccess && state != ncclInProgress)
    throw break_with(cat(what, " failed: ", nccl_error(state, nccl_)));
  try {
    return ready(state);
  } catch (const Error& e) {
    throw break_with(cat(what, " failed: ", e.what()));
  }
}

// Polls until ready() holds; past the timeout, breaks the communicator and throws.
void Link::await(const std::string& what, const std::function<bool(ncclResult_t)>& ready) {
  const auto start = Clock::now();
  while (!step(what, ready)) {
    if (seconds_since(start) > timeout())
      throw break_with(cat(what, " did not complete within ", timeout(),
                           " s (a rank died or called a different collective)"));
    backoff(start);
  }
}

// wait() blocks the host until the collective is done (the polling is what gives it a timeout),
// then orders the compute stream after it, so that compute queued next sees the result.
void Link::wait(Pending& p) {
  if (!p.finished) {
    try {
      if (nccl_ == nullptr) throw unusable();
      DeviceGuard guard(device_);
      await(p.what, [&](ncclResult_t) { return p.done.done(); });
      complete(p);
    } catch (...) {
      p.finished = true;
      p.error = std::current_exception();
    }
  }
  if (p.error) std::rethrow_exception(p.error);
}

bool Link::test(Pending& p) {
  if (p.finished) return true;
  try {
    if (nccl_ == nullptr) throw unusable();
    DeviceGuard guard(device_);
    if (!step(p.what, [&](ncclResult_t) { return p.done.done(); })) return false;
    complete(p);
  } catch (...) {  // wait() rethrows it
    p.finished = true;
    p.error = std::current_exception();
  }
  return true;
}

void Link::complete(Pending& p) {
  p.done.wait_on(compute_);
  p.finished = true;
  std::lock_guard lock(acct_mu_);
  OpStats& s = acct_[p.op];
  s.calls += 1;
  s.payload_bytes += p.payload;
  s.wire_bytes += p.wire;
  s.seconds += seconds_since(p.issued);
}

Accounting Link::accounting() const {
  std::lock_guard lock(acct_mu_);
  return acct_;
}

void Link::reset_accounting() {
  std::lock_guard lock(acct_mu_);
  acct_ = Accounting{};
}

// The staging buffer, at least `bytes` large. Growing frees the old one, which collectives still
// queued on the communication stream may read: they finish first (within the timeout). It only
// grows, so this happens a few times in a run.
std::byte* Link::grow_scratch(std::size_t bytes, const std::string& what) {
  kernels::cuda::DeviceBuffer& s = side_->scratch;
  if (bytes > s.bytes()) {
    const cudaStream_t stream = native(side_->stream);
    await(cat(what, " (waiting for earlier collectives before growing the staging buffer)"),
          [&](ncclResult_t) {
            const cudaError_t e = cudaStreamQuery(stream);
            if (e == cudaErrorNotReady) {
              cudaGetLastError();
              return false;
            }
            ZERO_NCCL_CUDA(e);
            return true;
          });
    s = kernels::cuda::DeviceBuffer();  // free first: the peak is the new size, not the sum
    s = kernels::cuda::DeviceBuffer(bytes);
    scratch_peak_.store(std::max(scratch_peak_.load(), bytes), std::memory_order_relaxed);
  }
  return s.as<std::byte>();
}

namespace {

// Waits, within the timeout, for a nonblocking MPI collective posted on e->req. If it times out,
// MPI may still write its buffers: they go to the graveyard (leaked if still pending).
void finish(std::unique_ptr<mpi::Graveyard::Entry>& e, const mpi::Link& link, std::string_view what,
            mpi::Graveyard& graveyard) {
  try {
    mpi::wait(e->req, link.patience, what);
  } catch (const mpi::TimeoutError&) {
    graveyard.bury(std::move(e));
    throw;
  }
}

// This rank's device: NcclOptions::device, or its rank on this node modulo the visible devices.
// Collective over comm (the node split) whatever the options, so that the ranks stay in step.
int pick_device(MPI_Comm comm, const NcclOptions& options) {
  MPI_Comm node = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
             "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  const mpi::CommOwner owner(node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  const int count = kernels::cuda::device_count();
  if (count == 0)
    throw Error("no CUDA device is visible to this rank (the NCCL backend needs one per rank)");
  if (options.device >= count)
    throw Error(cat("NcclOptions::device is ", options.device, " but only ", count,
                    " CUDA device(s) are visible"));
  if (options.device >= 0) return options.device;
  if (local_size > count)
    throw Error(cat(local_size, " ranks on this node share ", count,
                    " visible CUDA device(s), but NCCL needs a device of its own for each rank; "
                    "run at most ",
                    count, " ranks per node"));
  return local_rank % count;
}

}  // namespace

std::shared_ptr<Link> connect(mpi::CommOwner comm, const NcclOptions& options) {
  mpi::Link link;
  link.comm = comm.get();
  mpi::check(MPI_Comm_set_errhandler(link.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(link.comm, &link.rank);
  MPI_Comm_size(link.comm, &link.size);
  link.patience.timeout_s = options.common.timeout_seconds;
  Error::Where where;
  where.rank = link.rank;
  mpi::Graveyard graveyard;  // buffers of an exchange that timed out; leaked if still pending

  // 1. Local set-up. A failure is kept, not thrown, until every rank has heard of it below: a
  // rank that threw now would leave the others waiting in NCCL's init until the timeout.
  int device = -1;
  std::optional<DeviceSide> side;
  ncclUniqueId id{};
  std::string problem;
  try {
    device = pick_device(link.comm, options);
    ZERO_NCCL_CUDA(cudaSetDevice(device));
    side.emplace();
    ZERO_NCCL_CUDA(cudaMemset(side->word.data(), 0, side->word.bytes()));
    if (link.rank == 0) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        throw Error(cat("ncclGetUniqueId failed: ", nccl_error(r, nullptr)));
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }

  // 2. Every rank learns whether all of them can go on, then gets rank 0's id.
  try {
    auto ok = std::make_unique<mpi::Graveyard::Entry>();
    ok->send = {problem.empty() ? 1 : 0};
    ok->recv = {0};
    mpi::check(MPI_Iallreduce(ok->send.data(), ok->recv.data(), 1, MPI_INT64_T, MPI_MIN, link.comm,
                              ok->req.slot()),
               "MPI_Iallreduce");
    finish(ok, link, "every rank to set up its device", graveyard);
    if (ok->recv[0] == 0)
      throw Error(problem.empty() ? std::string("another rank could not set up its CUDA device "
                                                "or the NCCL id (see its error)")
                                  : problem);
    auto shared = std::make_unique<mpi::Graveyard::Entry>();
    shared->recv.assign((sizeof(id) + 7) / 8, 0);
    if (link.rank == 0) std::memcpy(shared->recv.data(), &id, sizeof(id));
    mpi::check(MPI_Ibcast(shared->recv.data(), static_cast<int>(sizeof(id)), MPI_BYTE, 0, link.comm,
                          shared->req.slot()),
               "MPI_Ibcast");
    finish(shared, link, "rank 0's NCCL id", graveyard);
    std::memcpy(&id, shared->recv.data(), sizeof(id));
  } catch (const Error& e) {
    throw Error(cat("make_nccl_communicator: ", e.what()), where);
  }

  // 3. NCCL's init, nonblocking, so that a rank that never joins is a timeout, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nccl = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&nccl, link.size, id, link.rank, &config);
  if ((r == ncclSuccess || r == ncclInProgress) && nccl != nullptr)
    r = settle_state(nccl, options.common.timeout_seconds);
  if (r != ncclSuccess) {
    const std::string why = r == ncclInProgress
                                ? cat("did not complete within ", options.common.timeout_seconds,
                                      " s (a rank did not join, or is stuck before it)")
                                : cat("failed: ", nccl_error(r, nccl));
    if (nccl != nullptr) ncclCommAbort(nccl);
    throw Error(cat("make_nccl_communicator: ncclCommInitRankConfig (", link.size,
                    " ranks, CUDA device ", device, ") ", why),
                where);
  }
  return std::make_shared<Link>(std::move(comm), link, device, nccl, std::move(*side), options);
}

}  // namespace zero::comm::nccl
