// Communicator: the collectives zero needs, behind one small interface with an MPI backend
// (host memory) and an NCCL backend (device memory). It moves typed bytes; it knows nothing of
// what they mean. The summation order it guarantees is stated at reduce_scatter_async below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "precision/bf16.hpp"
#include "precision/dtype.hpp"
#include "precision/fp16.hpp"

namespace zero::comm {

enum class ReduceOp : std::uint8_t { sum, avg, max };
enum class Memory : std::uint8_t { host, device };

// Behaviour every backend honours. Plain values; each field says what it changes.
struct Options {
  // A collective that makes no progress for this long (a rank never arrives, or stops sending)
  // fails with zero::Error naming the operation and its sequence number instead of hanging.
  double timeout_seconds = 600;
  // Exchange a small signature (sequence, op, counts, dtypes) before each collective so that ranks
  // calling different collectives, or the same one with different sizes, all fail with a message
  // naming the ranks. Costs one tiny all-reduce per collective; off only for benchmarking.
  bool verify = true;
  // MPI backend: bytes per peer per pipeline step of the reduce-scatter (and per broadcast step).
  // Bounds the staging memory and sets the granularity at which reduction overlaps transfer.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  // MPI backend: staging slots per peer; while one chunk is reduced, depth - 1 more are arriving.
  int pipeline_depth = 2;
};

// The collectives, for accounting and error messages.
enum class Op : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier,
  all_to_all
};
inline constexpr std::size_t kOpCount = 6;
std::string_view name_of(Op op);
std::string_view name_of(ReduceOp op);

// A typed, untyped-pointer view of a buffer: what a backend needs and nothing more.
struct View {
  void* data = nullptr;
  std::size_t count = 0;  // elements
  DType dtype = DType::f32;
  Memory memory = Memory::host;
  std::size_t bytes() const { return count * size_of(dtype); }
};
struct ConstView {
  const void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::f32;
  Memory memory = Memory::host;
  ConstView() = default;
  ConstView(const void* d, std::size_t n, DType t, Memory m = Memory::host)
      : data(d), count(n), dtype(t), memory(m) {}
  ConstView(const View& v) : data(v.data), count(v.count), dtype(v.dtype), memory(v.memory) {}
  std::size_t bytes() const { return count * size_of(dtype); }
};

// Element type to DType, for the span conveniences below.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<fp16> {
  static constexpr DType value = DType::f16;
};

template <class T>
View view(std::span<T> s, Memory m = Memory::host) {
  return View{s.data(), s.size(), dtype_of<std::remove_const_t<T>>::value, m};
}
template <class T>
ConstView cview(std::span<const T> s, Memory m = Memory::host) {
  return ConstView{s.data(), s.size(), dtype_of<T>::value, m};
}

// A pending collective. wait() blocks until it is done and rethrows its error, if any.
// Destroying a handle that was never waited on waits (a collective is never abandoned); an error
// it would have rethrown is then dropped, so wait() on anything whose failure matters.
class Handle {
 public:
  struct State {
    virtual ~State() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;
  };
  Handle() = default;
  explicit Handle(std::unique_ptr<State> s) : state_(std::move(s)) {}
  Handle(Handle&&) noexcept = default;
  Handle& operator=(Handle&& o) noexcept;
  ~Handle();
  void wait();
  bool test();  // true when done (then wait() returns at once)
  bool valid() const { return state_ != nullptr; }

 private:
  std::unique_ptr<State> state_;
};

// Per-operation accounting, per rank. payload_bytes: the size of the whole logical buffer the
// operation works on (the input of a reduce-scatter, the output of an all-gather, the buffer of an
// all-reduce or broadcast, the input of an all-to-all). wire_bytes: the data bytes this rank
// itself sent under the algorithm the backend runs (the signature exchange of Options::verify is
// not counted). Only operations that completed without error are counted.
struct OpStats {
  std::uint64_t calls = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t wire_bytes = 0;
  double seconds = 0;  // from issue (the *_async call) to completion on the communication thread
};
struct Accounting {
  OpStats ops[kOpCount];
  const OpStats& operator[](Op op) const { return ops[static_cast<int>(op)]; }
  OpStats& operator[](Op op) { return ops[static_cast<int>(op)]; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;  // "mpi" or "nccl"
  // Where the buffers passed to the collectives must live: host (MPI) or device (NCCL).
  virtual Memory memory() const { return Memory::host; }

  // Non-blocking collectives. Every rank must call them in the same order with the same sizes;
  // a mismatch is detected and reported as zero::Error naming the ranks and the operation.
  //
  // all_reduce: in place. Implemented as reduce_scatter + all_gather so that it sums in the same
  //   order as a reduce-scatter (stage 0 and stages 1-3 then agree bitwise).
  // reduce_scatter: in.count == size() * out.count; out receives this rank's block. out.dtype may
  //   be wider than in.dtype (bf16 in, fp32 out): the sum is then kept in fp32 and not rounded.
  //   Sums run in rank order 0, 1, ..., N-1 in fp32 (fp64 for f64 inputs), independent of how a
  //   caller splits the buffer into buckets.
  //   avg divides the fp32 sum by size() and then rounds once; max propagates NaN. Integer sums
  //   wrap (two's complement) and integers have no avg. out may alias in exactly at this rank's
  //   block (in place); any other overlap is an error.
  // all_gather: out.count == size() * in.count; rank r's input lands at block r. in may be
  //   exactly block r of out (in place).
  // all_reduce pads a count that size() does not divide: block b = ceil(count / size()) and the
  //   last blocks are shorter (or empty); nothing is copied. The result equals a reduce_scatter of
  //   the buffer padded to size() * b, followed by an all_gather, bitwise.
  // broadcast: in place from root.
  // all_to_all: in.count == out.count == size() x b, in blocks of b; block j of rank r's `in`
  //   lands at block r of rank j's `out` (this rank's own block j = rank() is copied locally).
  //   Equal blocks for every peer; in and out must not overlap, and have the same dtype. Each
  //   rank sends (size() - 1) x b elements: (n - 1) / n of its buffer.
  // Wrong local arguments throw zero::Error at the call, naming the op and the numbers.
  virtual Handle all_reduce_async(View buf, ReduceOp op) = 0;
  virtual Handle reduce_scatter_async(ConstView in, View out, ReduceOp op) = 0;
  virtual Handle all_gather_async(ConstView in, View out) = 0;
  virtual Handle broadcast_async(View buf, int root) = 0;
  virtual Handle barrier_async() = 0;
  virtual Handle all_to_all_async(ConstView in, View out) = 0;

  // A sub-communicator of the ranks that pass the same color, ordered by key (MPI_Comm_split),
  // with its own communication thread and accounting. Collective over this communicator; a rank
  // passing a negative color takes part but gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Hierarchical sharding's two groups (HSDP, MiCS): the shard group of `shard_size`
  // consecutive ranks that share one copy of the sharded state (ranks g*G .. g*G + G - 1, rank
  // r at position r % G), and the replicate group of the ranks at the same position in every
  // shard group (r % G, ordered by group). Collective over this communicator; shard_size must
  // divide size(). The default splits twice; a communicator that cannot split models them.
  struct Groups {
    std::unique_ptr<Communicator> shard, replicate;
  };
  virtual Groups split_groups(int shard_size);

  // A snapshot (the communication thread updates the counters as operations complete).
  virtual Accounting accounting() const = 0;
  virtual void reset_accounting() = 0;
  // The most bytes the backend has held at once in internal staging buffers (pipeline slots,
  // accumulators), for the engine's memory ledger ("comm_staging").
  virtual std::size_t scratch_bytes_peak() const = 0;

  // Blocking forms: the same ordering, results and errors as *_async(...).wait(). A backend may
  // override them to skip its queue when nothing is pending (the MPI backend does).
  virtual void all_reduce(View buf, ReduceOp op) { all_reduce_async(buf, op).wait(); }
  virtual void reduce_scatter(ConstView in, View out, ReduceOp op) {
    reduce_scatter_async(in, out, op).wait();
  }
  virtual void all_gather(ConstView in, View out) { all_gather_async(in, out).wait(); }
  virtual void broadcast(View buf, int root) { broadcast_async(buf, root).wait(); }
  virtual void barrier() { barrier_async().wait(); }
  virtual void all_to_all(ConstView in, View out) { all_to_all_async(in, out).wait(); }
};

}  // namespace zero::comm
