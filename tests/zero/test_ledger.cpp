// Tests of the memory ledger: per-category accounting, peaks, RAII, backends, external records.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "zero/ledger.hpp"

using Catch::Matchers::Contains;
using zero::Allocation;
using zero::Category;
using zero::Ledger;
using zero::comm::Memory;

namespace {

// Host memory that pretends to be somewhere else and counts its calls: stands in for a CUDA
// allocator, and lets tests see when the backend is really called.
class CountingAllocator final : public zero::Allocator {
 public:
  explicit CountingAllocator(Memory where, std::size_t fail_above = SIZE_MAX)
      : where_(where), fail_above_(fail_above) {}
  void* allocate(std::size_t bytes) override {
    if (bytes > fail_above_) throw std::bad_alloc();
    ++allocations;
    return host_.allocate(bytes);
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    ++deallocations;
    freed_bytes += bytes;
    host_.deallocate(p, bytes);
  }
  Memory where() const override { return where_; }

  int allocations = 0;
  int deallocations = 0;
  std::size_t freed_bytes = 0;

 private:
  zero::HostAllocator host_;
  Memory where_;
  std::size_t fail_above_;
};

}  // namespace

TEST_CASE("the ledger tracks current and peak bytes per category", "[ledger]") {
  Ledger ledger;
  Allocation m = ledger.allocate(Category::master, 400);
  Allocation v = ledger.allocate(Category::optimizer_v, 400);
  {
    Allocation g = ledger.allocate(Category::grads, 200);
    Allocation g2 = ledger.allocate(Category::grads, 100);
    const auto s = ledger.snapshot();
    CHECK(s[Category::grads].current == 300);
    CHECK(s[Category::grads].peak == 300);
    CHECK(s.current_total == 1100);
  }
  const auto s = ledger.snapshot();
  CHECK(s[Category::master].current == 400);
  CHECK(s[Category::master].peak == 400);
  CHECK(s[Category::optimizer_v].current == 400);
  CHECK(s[Category::grads].current == 0);
  CHECK(s[Category::grads].peak == 300);
  CHECK(s[Category::params].current == 0);
  CHECK(s[Category::params].peak == 0);
  CHECK(s.current_total == 800);
  CHECK(s.peak_total == 1100);
  CHECK(s.live_allocations == 2);
}

TEST_CASE("peak_total is the peak of the sum, not the sum of the peaks", "[ledger]") {
  Ledger ledger;
  { Allocation a = ledger.allocate(Category::gathered, 1000); }
  Allocation b = ledger.allocate(Category::comm_staging, 3000);
  const auto s = ledger.snapshot();
  CHECK(s[Category::gathered].peak == 1000);
  CHECK(s[Category::comm_staging].peak == 3000);
  CHECK(s.peak_total == 3000);  // max(1000, 3000), not 4000
  CHECK(s.current_total == 3000);
}

TEST_CASE("an allocation frees its memory and its bytes when it goes out of scope", "[ledger]") {
  auto backend = std::make_unique<CountingAllocator>(Memory::host);
  CountingAllocator* counts = backend.get();
  Ledger ledger(std::move(backend));
  {
    Allocation a = ledger.allocate(Category::params, 128);
    CHECK(counts->allocations == 1);
    CHECK(counts->deallocations == 0);
    CHECK(ledger.snapshot()[Category::params].current == 128);
  }
  CHECK(counts->deallocations == 1);
  CHECK(counts->freed_bytes == 128);
  CHECK(ledger.snapshot()[Category::params].current == 0);
  CHECK(ledger.snapshot().live_allocations == 0);
}

TEST_CASE("reset frees an allocation early and leaves it empty", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::other, 64);
  a.reset();
  CHECK(a.empty());
  CHECK(a.bytes() == 0);
  CHECK(ledger.snapshot().current_total == 0);
  a.reset();  // a second reset is harmless
  CHECK(ledger.snapshot().current_total == 0);
}

TEST_CASE("moving an allocation transfers ownership without touching the ledger", "[ledger]") {
  auto backend = std::make_unique<CountingAllocator>(Memory::host);
  CountingAllocator* counts = backend.get();
  Ledger ledger(std::move(backend));
  Allocation a = ledger.allocate(Category::master, 256);
  void* p = a.data();

  Allocation b(std::move(a));
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  CHECK(b.data() == p);
  CHECK(b.bytes() == 256);
  CHECK(b.category() == Category::master);
  CHECK(ledger.snapshot().current_total == 256);
  CHECK(ledger.snapshot().live_allocations == 1);
  CHECK(counts->deallocations == 0);

  // Move-assigning over a live allocation frees the old one first.
  Allocation c = ledger.allocate(Category::grads, 64);
  c = std::move(b);
  CHECK(counts->deallocations == 1);
  CHECK(counts->freed_bytes == 64);
  CHECK(c.data() == p);
  const auto s = ledger.snapshot();
  CHECK(s[Category::grads].current == 0);
  CHECK(s[Category::master].current == 256);
  CHECK(s.live_allocations == 1);

  // Allocations move into containers (the engine keeps one per unit).
  std::vector<Allocation> owned;
  owned.push_back(std::move(c));
  owned.push_back(ledger.allocate(Category::params, 32));
  CHECK(ledger.snapshot().current_total == 288);
  owned.clear();
  CHECK(ledger.snapshot().current_total == 0);
  CHECK(counts->deallocations == 3);
}

TEST_CASE("external records count toward current, peak and the total", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::comm_staging, 100);
  ledger.record_external(Category::comm_staging, 50);
  auto s = ledger.snapshot();
  CHECK(s[Category::comm_staging].current == 150);
  CHECK(s[Category::comm_staging].peak == 150);
  CHECK(s.current_total == 150);
  CHECK(s.live_allocations == 1);  // an external record is not an allocation
  ledger.record_external(Category::comm_staging, -50);
  s = ledger.snapshot();
  CHECK(s[Category::comm_staging].current == 100);
  CHECK(s.peak_total == 150);
}

TEST_CASE("giving back more external bytes than were recorded is an error", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::comm_staging, 100);  // owned, not external
  ledger.record_external(Category::comm_staging, 10);
  CHECK_THROWS_WITH(ledger.record_external(Category::comm_staging, -20),
                    Contains("comm_staging") && Contains("negative"));
  CHECK(ledger.snapshot()[Category::comm_staging].current == 110);  // unchanged by the failure
}

TEST_CASE("returned memory is 64-byte aligned and zeroed", "[ledger]") {
  Ledger ledger;
  std::vector<Allocation> keep;
  for (std::size_t bytes : {1, 3, 63, 64, 65, 1000, 4096, 1 << 20}) {
    Allocation a = ledger.allocate(Category::other, bytes);
    INFO(bytes << " bytes");
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
    const auto view = a.as<std::uint8_t>();
    REQUIRE(view.size() == bytes);
    bool zero = true;
    for (std::uint8_t byte : view) zero = zero && byte == 0;
    CHECK(zero);
    keep.push_back(std::move(a));
  }
}

TEST_CASE("an unset allocation is aligned and counted like a zeroed one, and counted apart", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate_unset(Category::gathered, 1000);
  Allocation z = ledger.allocate(Category::gathered, 24);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
  CHECK(a.bytes() == 1000);
  CHECK(ledger.snapshot()[Category::gathered].current == 1024);
  CHECK(ledger.snapshot()[Category::gathered].allocations == 2);
  CHECK(ledger.snapshot().live_allocations == 2);
  a.reset();
  CHECK(ledger.snapshot()[Category::gathered].current == 24);
  CHECK(ledger.snapshot()[Category::gathered].allocations == 2);  // made, not alive
  CHECK(ledger.allocate_unset(Category::params, 0).empty());
  // An allocator that cannot skip the zeroing (a device one without the override) zeroes.
  auto device = std::make_unique<CountingAllocator>(Memory::device);
  CountingAllocator* counts = device.get();
  Ledger on_device(nullptr, std::move(device));
  Allocation d = on_device.allocate_unset(Category::buckets, 4096, Memory::device);
  CHECK(counts->allocations == 1);
  bool zero = true;
  for (std::uint8_t byte : d.as<std::uint8_t>()) zero = zero && byte == 0;
  CHECK(zero);
}

namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds address p ("" if none).
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a large host buffer starts on a 2 MiB boundary and asks for huge pages", "[ledger]") {
  zero::HostAllocator host;
  const std::size_t bytes = zero::HostAllocator::kHugeFrom + 12345;
  for (const bool unset : {false, true}) {
    void* p = unset ? host.allocate_unset(bytes) : host.allocate(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % zero::HostAllocator::kHugePage == 0);
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(thp, modes);
    if (modes.find("[never]") == std::string::npos && !modes.empty()) {
      const std::string flags = vm_flags_at(p);
      INFO(flags);
      CHECK(flags.find(" hg") != std::string::npos);  // MADV_HUGEPAGE on this mapping
    } else {
      WARN("transparent huge pages are off here: only the alignment was checked");
    }
    host.deallocate(p, bytes);
  }
  // A small one is not rounded to 2 MiB.
  void* q = host.allocate_unset(4096);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % zero::HostAllocator::kAlignment == 0);
  host.deallocate(q, 4096);
}

TEST_CASE("as<T> views the buffer as whole elements and rejects a partial one", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::master, 40);
  const auto f = a.as<float>();
  CHECK(f.size() == 10);
  CHECK(static_cast<void*>(f.data()) == a.data());
  f[9] = 1.5f;
  CHECK(a.as<float>()[9] == 1.5f);
  CHECK(a.as<double>().size() == 5);
  Allocation odd = ledger.allocate(Category::master, 6);
  CHECK_THROWS_WITH(odd.as<float>(), Contains("6-byte") && Contains("master"));
}

TEST_CASE("a zero-byte allocation is empty and counts nothing", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::params, 0);
  CHECK(a.empty());
  CHECK(a.as<float>().empty());
  CHECK(ledger.snapshot().live_allocations == 0);
}

TEST_CASE("host and device memory are accounted separately", "[ledger]") {
  auto device = std::make_unique<CountingAllocator>(Memory::device);
  CountingAllocator* counts = device.get();
  Ledger ledger(nullptr, std::move(device));
  CHECK(ledger.has(Memory::device));
  Allocation h = ledger.allocate(Category::master, 1000);
  Allocation d = ledger.allocate(Category::params, 300, Memory::device);
  CHECK(d.where() == Memory::device);
  // An empty buffer (a rank's empty shard) still says where it is, so views of it are tagged
  // device and a device communicator accepts them.
  Allocation e = ledger.allocate(Category::grads, 0, Memory::device);
  CHECK(e.empty());
  CHECK(e.where() == Memory::device);
  CHECK(e.category() == Category::grads);
  CHECK(h.where() == Memory::host);
  CHECK(counts->allocations == 1);
  ledger.record_external(Category::comm_staging, 50, Memory::device);

  const auto hs = ledger.snapshot(Memory::host);
  const auto ds = ledger.snapshot(Memory::device);
  CHECK(hs.memory == Memory::host);
  CHECK(ds.memory == Memory::device);
  CHECK(hs.current_total == 1000);
  CHECK(hs[Category::params].current == 0);
  CHECK(ds.current_total == 350);
  CHECK(ds[Category::params].current == 300);
  CHECK(ds[Category::comm_staging].current == 50);
  CHECK(ds[Category::master].current == 0);
  CHECK_THAT(zero::describe(ds), Contains("device"));
}

TEST_CASE("allocating where no allocator is installed names the memory and category", "[ledger]") {
  Ledger ledger;
  CHECK_FALSE(ledger.has(Memory::device));
  CHECK_THROWS_WITH(ledger.allocate(Category::optimizer_m, 64, Memory::device),
                    Contains("device") && Contains("optimizer_m"));
}

TEST_CASE("an allocator in the wrong slot is rejected", "[ledger]") {
  CHECK_THROWS_AS(Ledger(std::make_unique<CountingAllocator>(Memory::device)), zero::Error);
  CHECK_THROWS_AS(Ledger(nullptr, std::make_unique<CountingAllocator>(Memory::host)), zero::Error);
}

TEST_CASE("out of memory is a zero::Error naming the category and the bytes held", "[ledger]") {
  Ledger ledger(std::make_unique<CountingAllocator>(Memory::host, 1000));
  Allocation a = ledger.allocate(Category::master, 800);
  CHECK_THROWS_WITH(ledger.allocate(Category::optimizer_v, 5000),
                    Contains("out of host memory") && Contains("5000") && Contains("optimizer_v") &&
                        Contains("800"));
  CHECK(ledger.snapshot().current_total == 800);
  CHECK(ledger.snapshot().live_allocations == 1);
}

TEST_CASE("reset_peaks starts a new peak measurement from the current bytes", "[ledger]") {
  Ledger ledger;
  Allocation keep = ledger.allocate(Category::master, 100);
  { Allocation temp = ledger.allocate(Category::gathered, 500); }
  CHECK(ledger.snapshot().peak_total == 600);
  ledger.reset_peaks();
  auto s = ledger.snapshot();
  CHECK(s.peak_total == 100);
  CHECK(s[Category::gathered].peak == 0);
  CHECK(s[Category::master].peak == 100);
  { Allocation temp = ledger.allocate(Category::gathered, 200); }
  s = ledger.snapshot();
  CHECK(s.peak_total == 300);
  CHECK(s[Category::gathered].peak == 200);
}

TEST_CASE("allocations and external records from two threads add up", "[ledger]") {
  // The compute thread allocates while the communication thread records its scratch.
  Ledger ledger;
  auto work = [&](Category c) {
    for (int i = 0; i < 2000; ++i) {
      Allocation a = ledger.allocate(c, 64);
      ledger.record_external(c, 8);
      ledger.record_external(c, -8);
    }
  };
  std::thread t1(work, Category::gathered);
  std::thread t2(work, Category::comm_staging);
  t1.join();
  t2.join();
  const auto s = ledger.snapshot();
  CHECK(s.current_total == 0);
  CHECK(s.live_allocations == 0);
  CHECK(s.peak_total <= 2 * (64 + 8));
  CHECK(s.peak_total >= 64 + 8);
}

TEST_CASE("every category has a distinct name and the report lists them all", "[ledger]") {
  Ledger ledger;
  Allocation a = ledger.allocate(Category::optimizer_m, 1 << 20);
  const std::string d = zero::describe(ledger.snapshot());
  for (std::size_t c = 0; c < zero::kCategoryCount; ++c) {
    const auto name = zero::name_of(static_cast<Category>(c));
    CHECK(name != "?");
    CHECK_THAT(d, Contains(std::string(name)));
    for (std::size_t o = 0; o < c; ++o) CHECK(name != zero::name_of(static_cast<Category>(o)));
  }
  CHECK_THAT(d, Contains("1.00"));  // 1 MiB of optimizer_m
}
