// What every one of the engine's objects shares: the resolved Settings, the layout, the named
// process groups, the backend and the ledger, the counters; and the small helpers they all use
// (slices of buffers, the wait timer, the packed form of a run of units, the kept bucket buffers).
// Internal to zero/: not part of the public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zero/backend.hpp"
#include "zero/engine.hpp"
#include "zero/muon_state.hpp"
#include "zero/settings.hpp"
#include "zero/stage_policy.hpp"

namespace zero {

inline std::int64_t bytes(std::int64_t count, DType t) {
  return count * static_cast<std::int64_t>(size_of(t));
}

// A view of `count` elements of `dtype` at element offset `offset` of an allocation.
struct Slice {
  void* data = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  comm::Memory memory = comm::Memory::host;
  comm::View view() const { return comm::View{data, static_cast<std::size_t>(count), dtype, memory}; }
  comm::ConstView cview() const { return view(); }
};
Slice slice(const Allocation& a, DType dtype, std::int64_t offset, std::int64_t count);

// Adds the wall time of its scope to a counter of EngineStats (wait_seconds, optimizer_seconds).
class ScopeTimer {
 public:
  explicit ScopeTimer(double& into) : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() {
    into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopeTimer(const ScopeTimer&) = delete;
  ScopeTimer& operator=(const ScopeTimer&) = delete;

 private:
  double& into_;
  std::chrono::steady_clock::time_point start_;
};

// The packed (rank-major) form of the consecutive units [first, last]: rank r's shards of them,
// in unit order, then rank r + 1's; the layout of one reduce-scatter's input and of one
// all-gather's output over the run. Copies units [from, to] of the run between it and their
// unit-major buffers: unit u's rank-r shard at unit_data(u) + r * shard_numel elements.
struct PackedRun {
  const Layout& layout;
  int first, last;
  std::int64_t shard() const {  // one rank's part: the run's shards, contiguous in shard order
    return layout.units[last].shard_offset + layout.units[last].shard_numel -
           layout.units[first].shard_offset;
  }
  template <class UnitData>
  void copy(Backend& b, int ranks, DType dt, std::byte* packed, int from, int to,
            UnitData unit_data, bool into_packed) const {
    const std::size_t es = size_of(dt);
    const std::int64_t base = layout.units[first].shard_offset, stride = shard();
    for (int u = from; u <= to; ++u) {
      const auto& U = layout.units[u];
      const auto n = static_cast<std::size_t>(U.shard_numel) * es;
      std::byte* unit = unit_data(u);
      for (int r = 0; r < ranks; ++r) {
        std::byte* p = packed + static_cast<std::size_t>(r * stride + U.shard_offset - base) * es;
        std::byte* f = unit + static_cast<std::size_t>(r * U.shard_numel) * es;
        into_packed ? b.copy(p, f, n) : b.copy(f, p, n);
      }
    }
  }
};

// The gradient reductions' bucket buffers kept from one step for the next, as DeepSpeed keeps
// its reduce bucket: every step asks for the same sizes, and a buffer above malloc's mmap ceiling
// (32 MiB in glibc) would otherwise be a fresh mapping each time, zeroed and faulted in page by
// page (a 33.5 MB bucket: 8,192 page faults; 20-30 ms of a 150 ms step at 2 ranks). A request
// takes the smallest kept buffer that holds it (the whole buffer is counted; the caller uses its
// first `bytes`), so the last, smaller bucket of a backward reuses a full one's buffer, and the
// step's staging reuses the backward's. At the end of a step every kept buffer that no reduction
// used in it is freed: only what the next backward will ask for again is carried over (the
// step's own staging, when it did not reuse a bucket, is not held through the next forward).
// The ledger counts what is kept, and the planner, running this code, counts it too.
// Host memory only, not device memory (nor the emulated device, which runs the device path as a
// GPU would): a GPU's stream-ordered pool (cudaMallocAsync) already makes a bucket cheap to
// allocate, and hands the memory to activations between reductions, where a kept buffer would be
// held through the forward pass.
class Spares {
 public:
  explicit Spares(bool enabled) : enabled_(enabled) {}
  // A kept buffer (Category::buckets) of at least `bytes`, or a new one in `where` (not zeroed:
  // every bucket buffer is written whole by its first use). `carry`: asked for by a reduction, so
  // kept past the end of the step.
  Allocation take(Ledger& ledger, std::int64_t bytes, comm::Memory where, bool carry);
  void keep(Allocation a);  // frees one of another category (or any, when not enabled)
  void end_step();          // frees the kept buffers no reduction of this step used

 private:
  bool enabled_;
  std::vector<Allocation> kept_;
  std::vector<const void*> carried_;  // the buffers reductions took in this step
};

// The named process groups: `world` (every rank: the step's small agreements), `shard` (the
// ranks that share one copy of the sharded state: every collective on model data) and
// `replicate` (hierarchical sharding: the ranks holding the same shard in other groups; the
// gradient all-reduce). Flat ZeRO: shard is the world and there is no replicate group. hpZ's
// in-node group is split here, in the same order on every rank, and handed to the gatherer,
// which owns it (ParamGatherer); `secondary` names it for the accounting.
struct ProcessGroups {
  ProcessGroups(comm::Communicator& world, const Settings& s);
  comm::Communicator& world;
  comm::Communicator::Groups split;  // owned sub-communicators (hierarchical sharding only)
  comm::Communicator* shard = nullptr;
  comm::Communicator* replicate = nullptr;
  std::unique_ptr<comm::Communicator> secondary_owned;  // until the gatherer takes it
  comm::Communicator* secondary = nullptr;
  int shard_rank = 0;   // this rank's position in its shard group
  int shard_ranks = 1;  // G: ranks in a shard group (the layout's shard count)
};

// The context the reducer, the gatherer and the step share. Built first, in this order: the
// backend and the ledger, the Settings resolved from the Config, the groups, the layout (checked
// the same on every rank).
struct EngineContext {
  EngineContext(const Config& c, comm::Communicator& world, std::vector<UnitSpec> specs,
                EngineOptions o);

  Config config;
  EngineOptions options;
  // Where the buffers live and what computes on them (host + kernels/cpu, or device + kernels/cuda).
  std::unique_ptr<Backend> backend;
  // ZeRO-Offload: the CPU kernels on the offloaded host state (docs/offload.md).
  std::unique_ptr<Backend> host_backend;
  struct Allocators {
    std::unique_ptr<Allocator> host, device;
  };
  static Allocators allocators_of(Backend& b, bool pinned = false);
  Allocators allocators;  // handed to the ledger at construction
  Ledger ledger;          // declared before every holder of an Allocation: it outlives them
  int rank = 0;
  int ranks = 1;
  Settings settings;      // the config resolved once (zero/settings.hpp)
  const StagePolicy& policy = settings.policy;
  ProcessGroups groups;
  Layout layout;
  EngineStats stats;
  std::int64_t trainer_calls = 0;  // gather() and grad() calls: the trainer computing a unit
  // The reductions' bucket buffers, from step to step (host memory only, see Spares).
  Spares spares{mem() == comm::Memory::host};
  std::int64_t comm_scratch_recorded = 0;

  comm::Memory mem() const { return backend->memory(); }
  // Where the fp32 master, the optimizer state and the fp32 reduced gradient live, and what
  // computes on them: host memory and the CPU kernels with optimizer offload, else mem().
  comm::Memory state_mem() const { return settings.offload ? comm::Memory::host : mem(); }
  Backend& state_backend() const { return settings.offload ? *host_backend : *backend; }
  // Where stage 3's 16-bit param shards live (offload_param: host memory).
  comm::Memory param_shard_mem() const {
    return settings.offload_params ? comm::Memory::host : mem();
  }
  DType work_dtype() const { return settings.work_dtype; }
  Allocation alloc(Category c, std::int64_t bytes) {
    return ledger.allocate(c, static_cast<std::size_t>(bytes), mem());
  }
  // Not zeroed: for a buffer its first use writes whole (a gather's output, a copy's target).
  Allocation alloc_unset(Category c, std::int64_t bytes) {
    return ledger.allocate_unset(c, static_cast<std::size_t>(bytes), mem());
  }
  // A bucket buffer of at least `bytes`, kept or new; `reduction`: for a gradient reduction.
  Allocation bucket_buffer(std::int64_t bytes, bool reduction) {
    return spares.take(ledger, bytes, mem(), reduction);
  }
  // Time this thread blocks on a collective (a handle's wait, a blocking collective): every
  // such wait in the engine sits inside one of these, and none nests inside another.
  [[nodiscard]] ScopeTimer waiting() { return ScopeTimer(stats.wait_seconds); }
  // An all-gather of small host values (layout digests, norms, call counts): straight through a
  // host communicator, staged through device memory for a device one. `out` holds
  // agreeing_ranks() blocks: every rank's, or with count_only this rank's alone (a counting run
  // models every rank as this one, at any rank count, without rank-sized host buffers).
  void all_gather_host(const void* in, void* out, std::size_t count, DType dtype);
  int agreeing_ranks() const { return options.count_only ? 1 : ranks; }
  void check_unit(int u, const char* what) const;
  void warn_if_nothing_sharded() const;  // stage 3 with every unit persistent: say so, once
  void log(const std::string& line) const;
  void record_comm_scratch();  // counts the communicators' staging growth in the ledger

  // Element offset of unit u's optimizer-state region (shard or full), and its length.
  std::int64_t state_offset(int u) const;
  std::int64_t state_count(int u) const;
  // Element offset in the reduced gradient (and the accumulator) of unit u's region.
  std::int64_t reduced_offset(int u) const;
};

// The model states: the fp32 master weights and the optimizer's state buffers (exp_avg, and
// exp_avg_sq unless the optimizer keeps one: zero/optimizer.hpp) (this rank's shards at stages 1-3,
// full at stage 0, indexed by EngineContext::state_offset; exp_avg_sq by `second_moment`, which
// cuts Muon's matrices out of it: zero/muon_state.hpp) and the working params (full at
// stages 0-2; at stage 3 this rank's shard of every unit, the gathered units being the
// ParamGatherer's). fp32 training at stages 0 and 3: the working params are the fp32 master
// buffer itself, updated in place; no copy is allocated.
struct ModelStates {
  explicit ModelStates(EngineContext& ctx);
  SecondMomentIndex second_moment;
  Allocation master, exp_avg, exp_avg_sq;
  Allocation params_full, params_shard;
  bool params_alias_master = false;
  const Allocation& full_params() const { return params_alias_master ? master : params_full; }
  const Allocation& shard_params() const { return params_alias_master ? master : params_shard; }
};

}  // namespace zero
