// Ledger: every buffer the engine owns is allocated through it, tagged with a category, so that the
// memory report counts every byte (current and peak, per category and in total, host and device).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "comm/communicator.hpp"
#include "base/error.hpp"

namespace zero {

// What a buffer holds. The report lists one row per category, in this order.
enum class Category : std::uint8_t {
  params,         // working params: 16-bit (fp32 in fp32 mode) full, or the shard on stage 3
  grads,          // the ZeRO "grads" term: full working-dtype grads (stages 0-1) or the reduced
                  // shard (stages 2-3)
  master,         // fp32 master params
  optimizer_m,    // Adam first moment
  optimizer_v,    // Adam second moment
  reduced_grads,  // the reduced gradient where it is not the grads term: stage 0's full fp32
                  // all-reduce result, stage 1's reduced shard
  accumulator,    // fp32 sum over micro-batches (gradient_accumulation_steps > 1)
  grad_buffers,   // stages 2-3: a unit's gradient buffer, from its first grad() to its reduction
  buckets,        // packed buffers of collectives: a reduce bucket, stage 0's reduced blocks and
                  // their all-gather, new param shards staged for their all-gather
  comm_staging,   // the communicator's own staging (pipeline slots, widening copies)
  step_scratch,   // step(): fp32 conversion of one unit's 16-bit reduced gradient
  gathered,       // stage-3 units gathered and in flight
  secondary,      // hpZ: each unit's secondary shard, from its forward gather to its backward one
  residual,       // TopK with error feedback: what each rank has not sent yet (fp32, full size)
  activations,    // the trainer's own activations, recorded by it (Ledger::record_external)
  other,          // anything else
};
inline constexpr std::size_t kCategoryCount = 16;
std::string_view name_of(Category c);

// A memory backend. Host: aligned, zeroed heap memory. A CUDA backend (cudaMalloc + cudaMemset)
// plugs in here with where() == comm::Memory::device and needs nothing else changed.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` (> 0) zero-initialised bytes aligned to at least 64 bytes; throws
  // std::bad_alloc when out of memory (the ledger turns it into a zero::Error with the category).
  virtual void* allocate(std::size_t bytes) = 0;
  // The same without the zeroing, for a buffer that its first use writes entirely (a
  // collective's output, a packed copy); an allocator that cannot skip it zeroes anyway.
  virtual void* allocate_unset(std::size_t bytes) { return allocate(bytes); }
  // Frees what allocate(bytes) returned, with the same `bytes`.
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  virtual comm::Memory where() const = 0;
};

// Host heap memory: std::aligned_alloc to 64 bytes (a cache line, and a full AVX-512 vector).
// A buffer of kHugeFrom bytes or more (the shards, moments, gradients and gathered units of any
// real model) starts on a 2 MiB boundary and asks Linux for transparent huge pages
// (MADV_HUGEPAGE; Debian's default THP mode, "madvise", gives them to no one else). The optimizer
// step streams five arrays: in a VM each 4 KiB page is a two-level page walk, and with huge pages
// the same-traffic copy ran 1.11-1.34x faster, AdamW with its bf16 copy 1.04-1.17x, at 64M
// elements (docs/benchmarks.md, AdamW on the CPU: "huge pages, vcvtneps2bf16, 512-element chunks").
class HostAllocator final : public Allocator {
 public:
  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kHugeFrom = 2 * kHugePage;
  void* allocate(std::size_t bytes) override;
  void* allocate_unset(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  comm::Memory where() const override { return comm::Memory::host; }
};

// Bytes of one category in one memory space.
struct CategoryBytes {
  std::int64_t current = 0;      // held now
  std::int64_t peak = 0;         // the most ever held at once (since construction or reset_peaks)
  std::int64_t allocations = 0;  // buffers allocated since construction (a buffer reused is not
                                 // counted again: the engine's steady state makes none)
};

// The state of one memory space (host or device) at one moment. Plain values: safe to keep.
struct LedgerSnapshot {
  comm::Memory memory = comm::Memory::host;              // which space this describes
  std::array<CategoryBytes, kCategoryCount> categories;  // indexed by Category
  std::int64_t current_total = 0;     // sum of the current bytes of every category
  std::int64_t peak_total = 0;        // the max over time of that sum (not the sum of the peaks)
  std::int64_t live_allocations = 0;  // Allocation objects alive (external records not counted)

  const CategoryBytes& operator[](Category c) const { return categories[static_cast<int>(c)]; }
};

class Ledger;

// What the ledger throws when its byte counts would pass 2^63 - 1 (only a counting run, such as
// the planner's, gets there: no machine holds that much).
class LedgerOverflow : public Error {
 public:
  using Error::Error;
};

// An owned buffer (move-only). Destruction frees it and updates the ledger. The ledger must
// outlive it. Device memory is returned the same way; its pointers are only valid on the device.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Allocation&& o) noexcept;
  Allocation& operator=(Allocation&& o) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() { reset(); }

  // Frees the buffer now; the Allocation becomes empty.
  void reset() noexcept;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Category category() const { return category_; }
  comm::Memory where() const { return where_; }
  bool empty() const { return data_ == nullptr; }

  // The buffer as bytes() / sizeof(T) elements of T. Throws if bytes() is not a multiple of it.
  template <class T>
  std::span<T> as() const {
    check_element_size(sizeof(T), alignof(T));
    return {static_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  friend class Ledger;
  Allocation(Ledger* ledger, Allocator* allocator, void* data, std::size_t bytes, Category c);
  void check_element_size(std::size_t size, std::size_t align) const;

  Ledger* ledger_ = nullptr;
  Allocator* allocator_ = nullptr;  // the backend that must free data_
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Category category_ = Category::other;
  comm::Memory where_ = comm::Memory::host;
};

// One per process (one per rank). Thread-safe with a mutex: allocations are few and large
// (setup, and stage-3 gathers a few per step), so the lock costs nothing measurable, and the
// communication thread may record or free its staging scratch while the compute thread allocates.
class Ledger {
 public:
  // `host` defaults to HostAllocator (a pinned-memory backend may replace it); `device` is
  // optional. Each allocator's where() must match its slot.
  explicit Ledger(std::unique_ptr<Allocator> host = nullptr,
                  std::unique_ptr<Allocator> device = nullptr);
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  // Aborts if an Allocation is still alive: it would free into a dead ledger later.
  ~Ledger();

  // A zeroed, 64-byte-aligned buffer of `bytes` in `memory`, counted under `category`.
  // bytes == 0 gives an empty Allocation and counts nothing. Throws zero::Error when no allocator
  // serves `memory` or the backend is out of memory (naming the category and the bytes held).
  Allocation allocate(Category category, std::size_t bytes,
                      comm::Memory memory = comm::Memory::host);
  // The same, not zeroed (Allocator::allocate_unset): for a buffer its first use writes whole.
  Allocation allocate_unset(Category category, std::size_t bytes,
                            comm::Memory memory = comm::Memory::host);

  // Memory held by someone else (the communicator's staging scratch, a library workspace) that
  // the report must include: delta > 0 when it is taken, < 0 when given back. Throws zero::Error
  // if the external bytes of the category would go negative.
  void record_external(Category category, std::int64_t delta,
                       comm::Memory memory = comm::Memory::host);

  LedgerSnapshot snapshot(comm::Memory memory = comm::Memory::host) const;

  // Sets every peak to its current value, to measure the peak of a phase (one step, say).
  void reset_peaks();

  bool has(comm::Memory memory) const { return allocators_[index(memory)] != nullptr; }

 private:
  friend class Allocation;
  struct Space {
    LedgerSnapshot stats;
    std::array<std::int64_t, kCategoryCount> external{};  // external bytes, to catch underflow
  };
  static int index(comm::Memory m) { return static_cast<int>(m); }
  void add(Space& s, Category c, std::int64_t delta);  // caller holds mutex_
  void release(Allocation& a) noexcept;
  Allocation allocate(Category category, std::size_t bytes, comm::Memory memory, bool zeroed);

  std::array<std::unique_ptr<Allocator>, 2> allocators_;  // indexed by Memory
  mutable std::mutex mutex_;
  std::array<Space, 2> spaces_;  // indexed by Memory
};

// A table of one snapshot (one row per category, then the totals), for the memory report.
std::string describe(const LedgerSnapshot& snapshot);

}  // namespace zero
