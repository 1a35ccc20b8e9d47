// The counting backend (zero/backend.hpp): allocations that hold no memory and kernels that do
// nothing, for an engine run whose only output is its ledger (EngineOptions::count_only).
#include <atomic>
#include <cstdint>
#include <cstring>

#include "zero/backend.hpp"

namespace zero {
namespace {

// Hands out disjoint, 64-byte-aligned ranges of an address space that is never mapped: the
// engine does offset arithmetic and pointer comparisons (is this view this rank's block of that
// one?) on what it allocates, and distinct buffers must stay distinct. Nothing dereferences them.
class CountingAllocator final : public Allocator {
 public:
  // `base`: where its range starts (offloaded host state gets a range of its own, far above the
  // device's, so that no host buffer shares an address with a device one).
  explicit CountingAllocator(comm::Memory where, std::uintptr_t base = std::uintptr_t{1} << 44)
      : where_(where), next_(base) {}
  void* allocate(std::size_t bytes) override {
    const std::uintptr_t at = next_;
    next_ += (bytes + 63) / 64 * 64 + 64;  // a gap, so that no buffer ends where another starts
    return reinterpret_cast<void*>(at);
  }
  void deallocate(void*, std::size_t) noexcept override {}
  comm::Memory where() const override { return where_; }

 private:
  comm::Memory where_;
  std::uintptr_t next_;  // from 2^44: above any heap a planner process has
};

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(comm::Memory memory) : memory_(memory) {}
  comm::Memory memory() const override { return memory_; }
  std::unique_ptr<Allocator> make_allocator() override {
    return std::make_unique<CountingAllocator>(memory_);
  }
  std::unique_ptr<Allocator> make_host_allocator(bool) override {
    // Offloaded state is counted, never allocated, as the device's is: a plan of a model far
    // larger than this machine's memory must not touch it.
    if (memory_ == comm::Memory::host) return nullptr;
    return std::make_unique<CountingAllocator>(comm::Memory::host, std::uintptr_t{1} << 60);
  }
  std::string describe() const override { return "counting (no memory, no kernels)"; }

  void fill_zero(void*, std::size_t) override {}
  void copy(void*, const void*, std::size_t) override {}
  void upload(void*, const void*, std::size_t) override {}
  void download(void* host, const void*, std::size_t bytes) override {
    std::memset(host, 0, bytes);  // host memory is real: give it defined values
  }
  // Offload's host buffers are counted too (make_host_allocator): nothing to write.
  CopyTicket download_async(void*, const void*, std::size_t) override { return {}; }
  CopyTicket upload_async(void*, const void*, std::size_t) override { return {}; }
  void wait_copy(CopyTicket) override {}
  void store_from_f32(void*, DType, const float*, std::int64_t) override {}
  void load_to_f32(float*, const void*, DType, std::int64_t) override {}
  void accumulate(float*, const void*, DType, std::int64_t) override {}
  void squared_norm(const float*, std::int64_t, int) override {}
  std::vector<double> fetch_norms(int count) override {
    return std::vector<double>(static_cast<std::size_t>(count), 0.0);
  }
  void adamw(float*, float*, float*, const float*, std::int64_t, const kernels::AdamStep&, void*,
             DType, int) override {}
  void lion(float*, float*, const float*, std::int64_t, const kernels::LionStep&, void*, DType,
            int) override {}
  void lamb_direction(const float*, const float*, const float*, const float*, std::int64_t,
                      const kernels::LambStep&, float*) override {}
  void lamb_apply(float*, float*, float*, const float*, std::int64_t, float,
                  const kernels::LambStep&, void*, DType, int) override {}
  void muon(float*, float*, const float*, std::int64_t, std::int64_t, const kernels::MuonStep&,
            float*, void*, DType, int) override {}
  std::vector<std::int64_t> fetch_nonfinite(int count) override {
    return std::vector<std::int64_t>(static_cast<std::size_t>(count), -1);
  }
  void synchronize() override {}

 private:
  comm::Memory memory_;
};

}  // namespace

std::unique_ptr<Backend> make_counting_backend(comm::Memory memory) {
  return std::make_unique<CountingBackend>(memory);
}

std::unique_ptr<Backend> make_host_backend(const Backend& device) {
  if (dynamic_cast<const CountingBackend*>(&device)) return make_counting_backend(comm::Memory::host);
  return make_cpu_backend();
}

}  // namespace zero
