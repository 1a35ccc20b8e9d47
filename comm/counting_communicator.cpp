// The counting communicator (comm/counting_communicator.hpp).
#include "comm/counting_communicator.hpp"

#include <algorithm>

#include "comm/staging.hpp"
#include "base/error.hpp"

namespace zero::comm {
namespace {

class CountingCommunicator final : public Communicator {
 public:
  CountingCommunicator(int size, int rank, Memory memory, StagingModel staging, const Options& o)
      : size_(size), rank_(rank), memory_(memory), staging_(staging), options_(o) {
    if (size < 1 || rank < 0 || rank >= size)
      throw Error(cat("counting communicator: rank ", rank, " of ", size, " ranks"));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override {
    return staging_ == StagingModel::mpi ? "mpi (counted)" : "nccl (counted)";
  }
  Memory memory() const override { return memory_; }

  Handle all_reduce_async(View buf, ReduceOp) override {
    const std::size_t n = static_cast<std::size_t>(size_);
    const std::size_t block = (buf.count + n - 1) / n;
    if (staging_ == StagingModel::mpi)
      grow(reduce_scatter_staging_bytes(buf.count, block, size_, buf.dtype, buf.dtype, true,
                                        options_.chunk_bytes, options_.pipeline_depth));
    else if (block * n != buf.count)
      grow(block * n * size_of(buf.dtype));
    return count(Op::all_reduce, buf.bytes());
  }
  Handle reduce_scatter_async(ConstView in, View out, ReduceOp) override {
    if (staging_ == StagingModel::mpi) {
      const bool aliases = out.count > 0 && in.dtype == out.dtype &&
                           static_cast<const std::byte*>(in.data) +
                                   static_cast<std::size_t>(rank_) * out.bytes() ==
                               out.data;
      grow(reduce_scatter_staging_bytes(in.count, out.count, size_, in.dtype, out.dtype, aliases,
                                        options_.chunk_bytes, options_.pipeline_depth));
    } else if (in.dtype != out.dtype) {
      grow(in.count * sizeof(float));
    }
    return count(Op::reduce_scatter, in.bytes());
  }
  Handle all_gather_async(ConstView, View out) override {
    return count(Op::all_gather, out.bytes());
  }
  Handle broadcast_async(View buf, int) override { return count(Op::broadcast, buf.bytes()); }
  Handle barrier_async() override { return count(Op::barrier, 0); }
  // The MPI and NCCL all-to-all stage nothing.
  Handle all_to_all_async(ConstView in, View) override { return count(Op::all_to_all, in.bytes()); }

  std::unique_ptr<Communicator> split(int, int) override {
    throw Error("a counting communicator cannot split: which ranks share a color is not known");
  }
  // Both groups are known from the layout of the ranks: counting communicators of their sizes.
  Groups split_groups(int shard_size) override {
    if (shard_size < 1 || size_ % shard_size != 0)
      throw Error(cat("counting communicator: a shard group of ", shard_size, " does not divide ",
                      size_, " ranks"));
    Groups g;
    g.shard = std::make_unique<CountingCommunicator>(shard_size, rank_ % shard_size, memory_,
                                                     staging_, options_);
    g.replicate = std::make_unique<CountingCommunicator>(size_ / shard_size, rank_ / shard_size,
                                                         memory_, staging_, options_);
    return g;
  }

  Accounting accounting() const override { return accounting_; }
  void reset_accounting() override { accounting_ = {}; }
  std::size_t scratch_bytes_peak() const override { return scratch_; }

 private:
  // The grow-only staging: the MPI backend's Scratch rounds to whole 8-byte words; the NCCL
  // backend's buffer is exactly the bytes asked for.
  void grow(std::size_t bytes) {
    if (staging_ == StagingModel::mpi) bytes = scratch_rounded(bytes);
    scratch_ = std::max(scratch_, bytes);
  }
  Handle count(Op op, std::size_t payload) {
    OpStats& s = accounting_[op];
    ++s.calls;
    s.payload_bytes += payload;
    return Handle();  // already complete
  }

  int size_, rank_;
  Memory memory_;
  StagingModel staging_;
  Options options_;
  Accounting accounting_;
  std::size_t scratch_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_counting_communicator(int size, int rank, Memory memory,
                                                         StagingModel staging,
                                                         const Options& options) {
  return std::make_unique<CountingCommunicator>(size, rank, memory, staging, options);
}

}  // namespace zero::comm
