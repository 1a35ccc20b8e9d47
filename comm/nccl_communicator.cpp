// NcclCommunicator: the collectives of the NCCL backend (see nccl_communicator.hpp): argument
// checks, the NCCL calls each collective queues, and its accounting estimates. The communicator's
// life (device, streams, polling, timeouts, abort) is nccl::Link's (nccl_link.hpp).
#include "comm/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "comm/nccl_kernels.hpp"
#include "comm/nccl_link.hpp"
#include "comm/signature.hpp"
#include "comm/validate.hpp"
#include "kernels/cuda/device.hpp"
#include "base/error.hpp"

namespace zero::comm {
namespace {

using mpi::Call;
using mpi::Signature;
using nccl::Link;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::f64:
      return ncclFloat64;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  std::abort();  // every DType is listed above
}

// avg is NCCL's: for floating types it multiplies each input by 1 / size() before summing, which
// equals the sum divided once when size() is a power of two.
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  std::abort();
}

class NcclHandle final : public Handle::State {
 public:
  NcclHandle(std::shared_ptr<Link> link, std::unique_ptr<nccl::Pending> p)
      : link_(std::move(link)), p_(std::move(p)) {}
  void wait() override { link_->wait(*p_); }
  bool test() override { return link_->test(*p_); }

 private:
  std::shared_ptr<Link> link_;  // declared first: destroyed after the pending collective
  std::unique_ptr<nccl::Pending> p_;
};

Signature signature(Call call, ReduceOp op, const ConstView& in, const View& out) {
  return Signature::of(call, op, in, out);
}

// comm/validate.hpp holds the MPI backend's argument checks, which reject device memory. We check
// the memory here, then hand it host-tagged copies for everything else (counts, dtypes, overlap).
std::string check_device(std::string_view op, std::string_view name, Memory m) {
  if (m == Memory::device) return {};
  return cat(op, ": ", name, " is host memory, but the NCCL backend works on device memory ",
             "(View::memory must be Memory::device; use the MPI backend for host buffers)");
}
template <class V>
V host_tagged(V v) {
  v.memory = Memory::host;
  return v;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<Link> link) : link_(std::move(link)) {}

  int rank() const override { return link_->rank(); }
  int size() const override { return link_->size(); }
  std::string_view backend() const override { return "nccl"; }
  Memory memory() const override { return Memory::device; }

  Handle reduce_scatter_async(ConstView in, View out, ReduceOp op) override {
    const Signature sig = signature(Call::reduce_scatter, op, in, out);
    std::string e = check_device("reduce_scatter", "in", in.memory);
    if (e.empty()) e = check_device("reduce_scatter", "out", out.memory);
    if (e.empty())
      e = mpi::check_reduce_scatter(host_tagged(in), host_tagged(out), op, rank(), size());
    if (!e.empty()) link_->reject(sig, e);
    // bf16 or fp16 into fp32: widen the input into the scratch, then reduce (and send) fp32, so
    // that the sum is kept in fp32 as the interface promises.
    const bool widen = in.dtype != out.dtype;
    const DType type = widen ? DType::f32 : in.dtype;
    const std::uint64_t wire = (n() - 1) * out.count * size_of(type);
    const std::size_t scratch = widen ? in.count * sizeof(float) : 0;
    return issue(sig, Op::reduce_scatter, in.bytes(), wire, scratch, [=](const Link::Queue& q) {
      if (out.count == 0) return;
      const void* send = in.data;
      if (widen) {
        ZERO_NCCL_CUDA(nccl::widen_to_f32(in.data, in.dtype, in.count,
                                          reinterpret_cast<float*>(q.scratch), q.stream));
        send = q.scratch;
      }
      // In place when out is block rank() of in (validated: the only overlap allowed).
      q.queued(ncclReduceScatter(send, out.data, out.count, nccl_type(type), nccl_op(op), q.nccl,
                                 q.stream),
               "ncclReduceScatter");
    });
  }

  Handle all_gather_async(ConstView in, View out) override {
    Signature sig = signature(Call::all_gather, ReduceOp::sum, in, out);
    sig.reduce_op = -1;
    std::string e = check_device("all_gather", "in", in.memory);
    if (e.empty()) e = check_device("all_gather", "out", out.memory);
    if (e.empty()) e = mpi::check_all_gather(host_tagged(in), host_tagged(out), rank(), size());
    if (!e.empty()) link_->reject(sig, e);
    const std::uint64_t wire = (n() - 1) * in.bytes();
    return issue(sig, Op::all_gather, out.bytes(), wire, 0, [=](const Link::Queue& q) {
      if (in.count == 0) return;
      // In place when in is block rank() of out.
      q.queued(ncclAllGather(in.data, out.data, in.count, nccl_type(in.dtype), q.nccl, q.stream),
               "ncclAllGather");
    });
  }

  Handle all_reduce_async(View buf, ReduceOp op) override {
    const Signature sig = signature(Call::all_reduce, op, buf, buf);
    std::string e = check_device("all_reduce", "buf", buf.memory);
    if (e.empty()) e = mpi::check_all_reduce(host_tagged(buf), op);
    if (!e.empty()) link_->reject(sig, e);
    // A reduce-scatter into this rank's block, then an all-gather, both in place, so that the
    // sums are bitwise those of a reduce_scatter of the same size and the stages agree. The
    // blocks are the MPI backend's, ceil(count / size()); NCCL needs equal blocks, so a count
    // that size() does not divide is reduced in a zero-padded copy in the scratch.
    const std::size_t es = size_of(buf.dtype);
    const std::size_t block = (buf.count + n() - 1) / n();
    const std::size_t padded = block * n();
    const bool pad = padded != buf.count;
    const std::uint64_t wire = 2 * (n() - 1) * block * es;
    const std::size_t own_offset = static_cast<std::size_t>(rank()) * block * es;
    return issue(
        sig, Op::all_reduce, buf.bytes(), wire, pad ? padded * es : 0, [=](const Link::Queue& q) {
          if (buf.count == 0) return;
          std::byte* base = pad ? q.scratch : static_cast<std::byte*>(buf.data);
          if (pad) {
            ZERO_NCCL_CUDA(
                cudaMemcpyAsync(base, buf.data, buf.bytes(), cudaMemcpyDeviceToDevice, q.stream));
            ZERO_NCCL_CUDA(
                cudaMemsetAsync(base + buf.bytes(), 0, (padded - buf.count) * es, q.stream));
          }
          std::byte* own = base + own_offset;
          const ncclDataType_t t = nccl_type(buf.dtype);
          q.queued(ncclReduceScatter(base, own, block, t, nccl_op(op), q.nccl, q.stream),
                   "ncclReduceScatter");
          q.queued(ncclAllGather(own, base, block, t, q.nccl, q.stream), "ncclAllGather");
          if (pad)
            ZERO_NCCL_CUDA(
                cudaMemcpyAsync(buf.data, base, buf.bytes(), cudaMemcpyDeviceToDevice, q.stream));
        });
  }

  Handle broadcast_async(View buf, int root) override {
    Signature sig = signature(Call::broadcast, ReduceOp::sum, buf, buf);
    sig.reduce_op = -1;
    sig.root = root;
    std::string e = check_device("broadcast", "buf", buf.memory);
    if (e.empty()) e = mpi::check_broadcast(host_tagged(buf), root, size());
    if (!e.empty()) link_->reject(sig, e);
    // An estimate: down a chain from the root, every rank but the last forwards the buffer once.
    const bool last = rank() == (root + size() - 1) % size();
    const std::uint64_t wire = last ? 0 : buf.bytes();
    return issue(sig, Op::broadcast, buf.bytes(), wire, 0, [=](const Link::Queue& q) {
      if (buf.count == 0) return;
      q.queued(ncclBroadcast(buf.data, buf.data, buf.count, nccl_type(buf.dtype), root, q.nccl,
                             q.stream),
               "ncclBroadcast");
    });
  }

  // One grouped send and receive per peer (NCCL has no all-to-all collective; this is what
  // nccl-tests' alltoall runs), and this rank's own block copied on the same stream.
  Handle all_to_all_async(ConstView in, View out) override {
    Signature sig = signature(Call::all_to_all, ReduceOp::sum, in, out);
    sig.reduce_op = -1;
    std::string e = check_device("all_to_all", "in", in.memory);
    if (e.empty()) e = check_device("all_to_all", "out", out.memory);
    if (e.empty()) e = mpi::check_all_to_all(host_tagged(in), host_tagged(out), size());
    if (!e.empty()) link_->reject(sig, e);
    const std::size_t block = in.count / n();
    const std::size_t block_bytes = block * size_of(in.dtype);
    const std::uint64_t wire = (n() - 1) * block_bytes;
    const int me = rank(), N = size();
    return issue(sig, Op::all_to_all, in.bytes(), wire, 0, [=](const Link::Queue& q) {
      if (block == 0) return;
      const auto* src = static_cast<const std::byte*>(in.data);
      auto* dst = static_cast<std::byte*>(out.data);
      const auto at = [&](int p) { return static_cast<std::size_t>(p) * block_bytes; };
      ZERO_NCCL_CUDA(cudaMemcpyAsync(dst + at(me), src + at(me), block_bytes,
                                     cudaMemcpyDeviceToDevice, q.stream));
      const ncclDataType_t t = nccl_type(in.dtype);
      q.queued(ncclGroupStart(), "ncclGroupStart");
      for (int k = 1; k < N; ++k) {
        const int to = (me + k) % N, from = (me - k + N) % N;
        q.queued(ncclSend(src + at(to), block, t, to, q.nccl, q.stream), "ncclSend");
        q.queued(ncclRecv(dst + at(from), block, t, from, q.nccl, q.stream), "ncclRecv");
      }
      q.queued(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  // An all-reduce of one device int, complete once every rank's communication stream has reached
  // it (the signature check alone would only order the hosts). Payload and wire count 0, as the
  // MPI backend's barrier's do.
  Handle barrier_async() override {
    Signature sig;
    sig.call = Call::barrier;
    return issue(sig, Op::barrier, 0, 0, 0, [](const Link::Queue& q) {
      q.queued(ncclAllReduce(q.word, q.word, 1, ncclInt32, ncclSum, q.nccl, q.stream),
               "ncclAllReduce");
    });
  }

  // MPI_Comm_split of the signature communicator, then a new NCCL communicator over it on this
  // communicator's device (rather than ncclCommSplit: one construction path, with its timeouts).
  // The blocking split is safe once the signature check has seen every rank arrive.
  std::unique_ptr<Communicator> split(int color, int key) override {
    Signature sig;
    sig.call = Call::split;
    link_->check_in(sig);
    MPI_Comm made = MPI_COMM_NULL;
    mpi::check(MPI_Comm_split(link_->mpi_comm(), color < 0 ? MPI_UNDEFINED : color, key, &made),
               "MPI_Comm_split");
    if (made == MPI_COMM_NULL) return nullptr;
    NcclOptions o = link_->options();
    o.device = link_->device();
    return std::make_unique<NcclCommunicator>(nccl::connect(mpi::CommOwner(made), o));
  }

  Accounting accounting() const override { return link_->accounting(); }
  void reset_accounting() override { link_->reset_accounting(); }
  std::size_t scratch_bytes_peak() const override { return link_->scratch_bytes_peak(); }

 private:
  std::uint64_t n() const { return static_cast<std::uint64_t>(size()); }

  Handle issue(const Signature& sig, Op op, std::uint64_t payload, std::uint64_t wire,
               std::size_t scratch, const Link::Enqueue& enqueue) {
    return Handle(std::make_unique<NcclHandle>(
        link_, link_->issue(sig, op, payload, wire, scratch, enqueue)));
  }

  std::shared_ptr<Link> link_;
};

}  // namespace

bool nccl_available() noexcept {
  return kernels::cuda::device_count() > 0;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm mpi_comm, NcclOptions options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    throw Error(
        "make_nccl_communicator: MPI is not initialised; create a zero::comm::MpiRuntime first");
  if (!(options.common.timeout_seconds > 0))
    throw Error(cat("make_nccl_communicator: timeout_seconds must be > 0, got ",
                    options.common.timeout_seconds));
  if (options.device < -1)
    throw Error(
        cat("make_nccl_communicator: NcclOptions::device must be >= 0, or -1 to pick by "
            "node-local rank; got ",
            options.device));
  MPI_Comm dup = MPI_COMM_NULL;
  mpi::check(MPI_Comm_dup(mpi_comm, &dup), "MPI_Comm_dup");
  return std::make_unique<NcclCommunicator>(nccl::connect(mpi::CommOwner(dup), options));
}

}  // namespace zero::comm
