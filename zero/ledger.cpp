// Ledger, Allocation and the host allocator (see ledger.hpp).
#include "zero/ledger.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <new>
#include <sstream>

#include "base/error.hpp"

namespace zero {
namespace {

std::string_view memory_name(comm::Memory m) {
  return m == comm::Memory::device ? "device" : "host";
}

}  // namespace

std::string_view name_of(Category c) {
  switch (c) {
    case Category::params:
      return "params";
    case Category::grads:
      return "grads";
    case Category::master:
      return "master";
    case Category::optimizer_m:
      return "optimizer_m";
    case Category::optimizer_v:
      return "optimizer_v";
    case Category::reduced_grads:
      return "reduced_grads";
    case Category::accumulator:
      return "accumulator";
    case Category::grad_buffers:
      return "grad_buffers";
    case Category::buckets:
      return "buckets";
    case Category::comm_staging:
      return "comm_staging";
    case Category::step_scratch:
      return "step_scratch";
    case Category::gathered:
      return "gathered";
    case Category::secondary:
      return "secondary";
    case Category::residual:
      return "residual";
    case Category::activations:
      return "activations";
    case Category::other:
      return "other";
  }
  return "?";
}

// --- HostAllocator ---------------------------------------------------------------------------

void* HostAllocator::allocate(std::size_t bytes) {
  void* p = allocate_unset(bytes);
  // Zeroing also commits the pages, so the process's resident memory matches the ledger.
  std::memset(p, 0, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  return p;
}

void* HostAllocator::allocate_unset(std::size_t bytes) {
  const bool huge = bytes >= kHugeFrom;
  const std::size_t align = huge ? kHugePage : kAlignment;
  if (bytes > SIZE_MAX - align) throw std::bad_alloc();
  // aligned_alloc wants a size that is a multiple of the alignment.
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Huge pages over the whole 2 MiB pages inside the buffer only: the rest of the last one is
  // never touched, so it costs no memory. Where THP is off, madvise fails and nothing changes.
  if (huge) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return p;  // its first use writes it whole, and so commits the pages
}

void HostAllocator::deallocate(void* p, std::size_t) noexcept {
  std::free(p);
}

// --- Allocation ------------------------------------------------------------------------------

Allocation::Allocation(Ledger* ledger, Allocator* allocator, void* data, std::size_t bytes,
                       Category c)
    : ledger_(ledger),
      allocator_(allocator),
      data_(data),
      bytes_(bytes),
      category_(c),
      where_(allocator->where()) {}

Allocation::Allocation(Allocation&& o) noexcept
    : ledger_(o.ledger_),
      allocator_(o.allocator_),
      data_(o.data_),
      bytes_(o.bytes_),
      category_(o.category_),
      where_(o.where_) {
  o.ledger_ = nullptr;
  o.allocator_ = nullptr;
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Allocation& Allocation::operator=(Allocation&& o) noexcept {
  if (this == &o) return *this;
  reset();
  ledger_ = o.ledger_;
  allocator_ = o.allocator_;
  data_ = o.data_;
  bytes_ = o.bytes_;
  category_ = o.category_;
  where_ = o.where_;
  o.ledger_ = nullptr;
  o.allocator_ = nullptr;
  o.data_ = nullptr;
  o.bytes_ = 0;
  return *this;
}

void Allocation::reset() noexcept {
  if (data_ == nullptr) return;
  ledger_->release(*this);
  ledger_ = nullptr;
  allocator_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

void Allocation::check_element_size(std::size_t size, std::size_t align) const {
  if (bytes_ % size != 0)
    throw Error(cat("a ", bytes_, "-byte ", name_of(category_), " buffer is not a whole number of ",
                    size, "-byte elements"));
  if (reinterpret_cast<std::uintptr_t>(data_) % align != 0)
    throw Error(cat("a ", name_of(category_), " buffer is not aligned to ", align, " bytes"));
}

// --- Ledger ----------------------------------------------------------------------------------

Ledger::Ledger(std::unique_ptr<Allocator> host, std::unique_ptr<Allocator> device) {
  if (!host) host = std::make_unique<HostAllocator>();
  if (host->where() != comm::Memory::host)
    throw Error("the host allocator given to the ledger allocates device memory");
  if (device && device->where() != comm::Memory::device)
    throw Error("the device allocator given to the ledger allocates host memory");
  allocators_[index(comm::Memory::host)] = std::move(host);
  allocators_[index(comm::Memory::device)] = std::move(device);
  spaces_[index(comm::Memory::host)].stats.memory = comm::Memory::host;
  spaces_[index(comm::Memory::device)].stats.memory = comm::Memory::device;
}

Ledger::~Ledger() {
  for (const Space& s : spaces_) {
    if (s.stats.live_allocations != 0) {
      // A broken ownership invariant, not a user error: the Allocation would later free into
      // freed memory. Abort with a message rather than corrupt the heap silently.
      std::fprintf(stderr,
                   "zero: Ledger destroyed while %lld %s allocations are alive; "
                   "buffers must be destroyed before the ledger that owns them\n",
                   static_cast<long long>(s.stats.live_allocations),
                   memory_name(s.stats.memory).data());
      std::abort();
    }
  }
}

void Ledger::add(Space& s, Category c, std::int64_t delta) {
  CategoryBytes& b = s.stats.categories[static_cast<int>(c)];
  b.current += delta;
  b.peak = std::max(b.peak, b.current);
  s.stats.current_total += delta;
  s.stats.peak_total = std::max(s.stats.peak_total, s.stats.current_total);
}

Allocation Ledger::allocate(Category category, std::size_t bytes, comm::Memory memory) {
  return allocate(category, bytes, memory, true);
}

Allocation Ledger::allocate_unset(Category category, std::size_t bytes, comm::Memory memory) {
  return allocate(category, bytes, memory, false);
}

Allocation Ledger::allocate(Category category, std::size_t bytes, comm::Memory memory,
                            bool zeroed) {
  Allocator* allocator = allocators_[index(memory)].get();
  if (allocator == nullptr)
    throw Error(cat("cannot allocate ", bytes, " bytes of ", name_of(category), ": no ",
                    memory_name(memory), " allocator is installed in the ledger"));
  if (bytes == 0) {  // nothing to hold, but views of it still say which memory they are in
    Allocation empty;
    empty.category_ = category;
    empty.where_ = memory;
    return empty;
  }
  if (bytes > static_cast<std::size_t>(INT64_MAX))
    throw Error(cat("cannot allocate ", bytes, " bytes of ", name_of(category), ": too large"));
  void* data = nullptr;
  try {
    // Outside the lock: zeroing a large buffer takes a while.
    data = zeroed ? allocator->allocate(bytes) : allocator->allocate_unset(bytes);
  } catch (const std::bad_alloc&) {
    const LedgerSnapshot s = snapshot(memory);
    throw Error(cat("out of ", memory_name(memory), " memory allocating ", bytes, " bytes of ",
                    name_of(category), " (the ledger already holds ", s.current_total, " bytes of ",
                    memory_name(memory), " memory, of which ", s[category].current, " are ",
                    name_of(category), ")"));
  }
  std::lock_guard lock(mutex_);
  Space& s = spaces_[index(memory)];
  if (std::int64_t sum = 0; __builtin_add_overflow(s.stats.current_total,
                                                   static_cast<std::int64_t>(bytes), &sum)) {
    allocator->deallocate(data, bytes);
    throw LedgerOverflow(cat("allocating ", bytes, " bytes of ", name_of(category), " would make the ",
                             memory_name(memory), " ledger hold more than 2^63 - 1 bytes"));
  }
  add(s, category, static_cast<std::int64_t>(bytes));
  ++s.stats.live_allocations;
  ++s.stats.categories[static_cast<int>(category)].allocations;
  return Allocation(this, allocator, data, bytes, category);
}

void Ledger::release(Allocation& a) noexcept {
  a.allocator_->deallocate(a.data_, a.bytes_);
  std::lock_guard lock(mutex_);
  Space& s = spaces_[index(a.where_)];
  add(s, a.category_, -static_cast<std::int64_t>(a.bytes_));
  --s.stats.live_allocations;
}

void Ledger::record_external(Category category, std::int64_t delta, comm::Memory memory) {
  std::lock_guard lock(mutex_);
  Space& s = spaces_[index(memory)];
  std::int64_t& external = s.external[static_cast<int>(category)];
  if (external + delta < 0)
    throw Error(cat("external ", name_of(category), " bytes on the ", memory_name(memory),
                    " would go negative: ", external, " recorded, ", -delta, " given back"));
  if (std::int64_t sum = 0; __builtin_add_overflow(s.stats.current_total, delta, &sum))
    throw LedgerOverflow(cat("recording ", delta, " bytes of ", name_of(category), " would make the ",
                             memory_name(memory), " ledger hold more than 2^63 - 1 bytes"));
  external += delta;
  add(s, category, delta);
}

LedgerSnapshot Ledger::snapshot(comm::Memory memory) const {
  std::lock_guard lock(mutex_);
  return spaces_[index(memory)].stats;
}

void Ledger::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (Space& s : spaces_) {
    for (CategoryBytes& b : s.stats.categories) b.peak = b.current;
    s.stats.peak_total = s.stats.current_total;
  }
}

std::string describe(const LedgerSnapshot& s) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  o << memory_name(s.memory) << " memory (MiB)\n";
  o << std::left << std::setw(14) << "category" << std::right << std::setw(14) << "current"
    << std::setw(14) << "peak" << '\n';
  for (std::size_t c = 0; c < kCategoryCount; ++c) {
    o << std::left << std::setw(14) << name_of(static_cast<Category>(c)) << std::right
      << std::setw(14) << s.categories[c].current / kMiB << std::setw(14)
      << s.categories[c].peak / kMiB << '\n';
  }
  o << std::left << std::setw(14) << "total" << std::right << std::setw(14)
    << s.current_total / kMiB << std::setw(14) << s.peak_total / kMiB << "  (peak of the sum; "
    << s.live_allocations << " live allocations)\n";
  return o.str();
}

}  // namespace zero
