// The engine's private state, shared by engine.cpp (buffers, gather/release, reduction) and
// engine_step.cpp (the optimizer step). Not part of the public API.
#pragma once

#include <chrono>
#include <deque>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "precision/loss_scaler.hpp"
#include "zero/backend.hpp"
#include "zero/engine.hpp"
#include "zero/param_groups.hpp"
#include "zero/settings.hpp"
#include "zero/stage_policy.hpp"

namespace zero {

// One unit as the engine runs it: where its parameters are, its gradient buffer, how often it
// was reduced. Indexed like Layout::units.
struct UnitRun {
  UnitState state = UnitState::gathered;  // stage 3 (persistent units and stages 0-2: gathered)
  Allocation gathered;                    // stage 3: the full unit while gathered
  comm::Handle gather;                    // stage 3: its all-gather, while in flight
  bool from_secondary = false;            // hpZ: that all-gather reads the secondary shards
  int gather_group = -1;                  // stage 3: the coalesced gather it is part of (the
                                          // group's first unit), or -1
  Allocation secondary;                   // hpZ: this rank's secondary shard of the unit
  Allocation grads;                       // stages 2-3: its gradient buffer for this micro-batch
  bool grads_fresh = false;               // the gradient buffer was zeroed for this micro-batch
  bool waiting = false;                   // reduced this micro-batch; its bucket not yet issued
  bool in_flight = false;                 // its gradients are in a reduction still in flight
  int reductions = 0;                     // reduce_grads calls since the last step
};

// One reduction in flight: the consecutive units [first, last] of one bucket, reduced as one
// collective (and at stage 0 gathered back as one), with the buffers it reads and writes.
struct Reduction {
  int first = 0;
  int last = 0;
  std::vector<comm::Handle> handles;  // reduce-scatter (and all-gather at stage 0), FIFO
  Allocation input;                   // what it reduces: the packed bucket, or at stages 2-3
                                      // the one unit's gradient buffer
  Allocation block;                   // stage 0: this rank's reduced blocks before the all-gather
  Allocation packed_out;              // stage 0, several units: the all-gathered blocks, rank-major
  std::int64_t issued_at = 0;         // Impl::trainer_calls when it was issued (EngineStats)
  // Hierarchical sharding: the shard-group reduce-scatter is in `handles`; when it is done the
  // reduced region is all-reduced across the replicate group (and at stage 0 then all-gathered
  // inside the shard group into `gather_to`).
  bool replicate_pending = false;
  comm::View reduced_region;
  comm::View gather_to;
};

// The gradient bucket being filled: its units' gradients copied in rank-major order (rank r's
// shards of its units, in unit order, then rank r + 1's), the layout of one reduce-scatter.
struct BucketFill {
  Allocation packed;
  int arrived = 0;  // units reduced into it this micro-batch
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

// The stage-3 prefetch window in the direction of travel: [last, front] has been scanned, every
// non-persistent unit in it is gathered or on its way, and `ahead` is their padded size beyond
// `last`. It only moves forward, so a pass over the model costs time linear in the units.
struct PrefetchFrontier {
  int last = -1;      // the unit gathered last (-1: none since the step)
  int dir = 0;        // +1 forward, -1 backward
  int front = -1;     // the farthest unit scanned
  std::int64_t ahead = 0;
  bool valid = false;  // false: rescan from the next gathered unit
};

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

// Stage 3 coalesces the gathers of consecutive units of at most this many padded elements (see
// Impl::issue_gathers); larger units are gathered one per collective.
inline constexpr std::int64_t kSmallGatherUnit = 65'536;

struct Engine::Impl {
  Impl(const Config& c, comm::Communicator& w, std::vector<UnitSpec> units, EngineOptions o);

  Config config;
  // The named process groups: `world` (every rank: the step's small agreements), `shard` (the
  // ranks that share one copy of the sharded state: every collective on model data) and
  // `replicate` (hierarchical sharding: the ranks holding the same shard in other groups; the
  // gradient all-reduce). Flat ZeRO: shard is the world and there is no replicate group.
  comm::Communicator& world;
  comm::Communicator::Groups groups;  // owned sub-communicators (hierarchical sharding only)
  comm::Communicator* shard = nullptr;
  comm::Communicator* replicate = nullptr;
  std::unique_ptr<comm::Communicator> secondary;  // hpZ: the in-node group of the secondary copy
  int shard_rank = 0;                 // this rank's position in its shard group
  int shard_ranks = 1;                // G: ranks in a shard group (the layout's shard count)
  EngineOptions options;
  Settings settings;                 // the config resolved once (zero/settings.hpp)
  // The values the engine reads most, named into `settings` (bound once; resolve_settings
  // assigns settings in the constructor, the references follow).
  const StagePolicy& policy = settings.policy;
  Layout layout;
  int rank = 0;
  int ranks = 1;
  const DType& work_dtype = settings.work_dtype;        // params and grads as the trainer sees them
  const DType& reduce_dtype = settings.reduce_dtype;    // the reduced gradient
  const std::int64_t& accumulation = settings.accumulation;  // gradient_accumulation_steps
  // Where the buffers live and what computes on them (host + kernels/cpu, or device + kernels/cuda).
  std::unique_ptr<Backend> backend;
  comm::Memory mem() const { return backend->memory(); }
  struct Allocators {
    std::unique_ptr<Allocator> host, device;
  };
  static Allocators allocators_of(Backend& b);
  Allocators allocators;             // handed to the ledger at construction
  Ledger ledger;

  // fp32 optimizer state: shards (stages 1-3) or full (stage 0), indexed like `master_offset`.
  Allocation master, exp_avg, exp_avg_sq;
  // Working params: full (stages 0-2), or the shard of every unit (stage 3) plus, per unit,
  // the gathered buffer while gathered (persistent units: always).
  Allocation params_full, params_shard;
  // fp32 training at stages 0 and 3: the working params (full, or the shard) are the fp32 master
  // buffer itself, updated in place; no copy is allocated. params() gives the buffer either way.
  const bool& params_alias_master = settings.params_alias_master;
  const Allocation& full_params() const { return params_alias_master ? master : params_full; }
  const Allocation& shard_params() const { return params_alias_master ? master : params_shard; }
  std::vector<UnitRun> units;
  // Stage 3: consecutive units gathered by one all-gather into a packed buffer, unpacked into
  // each unit's gathered buffer when the first of them is needed. Indexed by the first unit.
  struct GatherGroup {
    int first = 0, last = 0;
    comm::Handle handle;
    Allocation packed;
  };
  std::vector<GatherGroup> gather_groups;
  std::vector<int> gathers_to_issue;  // reserved by prefetch_after, issued together at its end
  PrefetchFrontier window;
  std::int64_t live_elements = 0;    // stage 3: gathered or gathering non-persistent elements
  // Gradients: full working-dtype buffer (stages 0-1), or per-unit buffers (UnitRun::grads).
  Allocation grads_full;
  // Reduced gradient in reduce_dtype: full (stage 0) or this rank's shard (stages 1-3).
  Allocation reduced;
  const bool& reduced_aliases_grads = settings.reduced_aliases_grads;  // stage 0, in place
  // fp32 sum over micro-batches (gradient_accumulation_steps > 1), shaped like `reduced`.
  Allocation accum;
  std::vector<BucketFill> buckets;   // indexed like Layout::buckets
  // The reductions' bucket buffers, from step to step (host memory only, see Spares).
  Spares spares{mem() == comm::Memory::host};
  // A bucket buffer of at least `bytes`, kept or new; `reduction`: for a gradient reduction.
  Allocation bucket_buffer(std::int64_t bytes, bool reduction) {
    return spares.take(ledger, bytes, mem(), reduction);
  }
  // After the step (stages 1-2, and stage 3's persistent units): consecutive units whose new
  // params are all-gathered as one collective, at most allgather_bucket_size padded elements.
  struct Run {
    int first, last;
  };
  std::vector<Run> param_gather_runs;
  std::deque<Reduction> in_flight;   // issued, not finished, oldest first
  std::vector<int> reduce_log;       // the units passed to reduce_grads since the last step
  // The update's segments (zero/param_groups.hpp): unit by unit, each of one parameter group;
  // a segment's index is its Backend slot (adamw, fetch_nonfinite).
  std::vector<UpdateSegment> update_segments;

  std::optional<LossScaler> scaler;  // fp16 only
  EngineStats stats;
  std::int64_t& applied_steps = stats.applied_steps;
  std::int64_t& skipped_steps = stats.skipped_steps;
  std::int64_t trainer_calls = 0;    // gather() and grad() calls: the trainer computing a unit
  // Time this thread blocks on a collective (a handle's wait, a blocking collective): every
  // such wait in the engine sits inside one of these, and none nests inside another.
  [[nodiscard]] ScopeTimer waiting() { return ScopeTimer(stats.wait_seconds); }

  // Element offset of unit u's optimizer-state region (shard or full).
  std::int64_t state_offset(int u) const;
  std::int64_t state_count(int u) const;
  // Element offset in `reduced`/`accum` of unit u's region, and of this rank's shard within it.
  std::int64_t reduced_offset(int u) const;
  std::int64_t own_shard_offset(int u) const;  // in `reduced` coordinates

  Allocation alloc(Category c, std::int64_t bytes) {
    return ledger.allocate(c, static_cast<std::size_t>(bytes), mem());
  }
  // Not zeroed: for a buffer its first use writes whole (a gather's output, a copy's target).
  Allocation alloc_unset(Category c, std::int64_t bytes) {
    return ledger.allocate_unset(c, static_cast<std::size_t>(bytes), mem());
  }
  void store(const Slice& dst, const float* src) {
    backend->store_from_f32(dst.data, dst.dtype, src, dst.count);
  }
  // An all-gather of small host values (layout digests, norms, call counts): straight through a
  // host communicator, staged through device memory for a device one. `out` holds
  // agreeing_ranks() blocks: every rank's, or with count_only this rank's alone (a counting run
  // models every rank as this one, at any rank count, without rank-sized host buffers).
  void all_gather_host(const void* in, void* out, std::size_t count, DType dtype);
  int agreeing_ranks() const { return options.count_only ? 1 : ranks; }

  void check_unit(int u, const char* what) const;
  void log(const std::string& line) const;
  void finish_oldest_reduction();   // waits for it, unpacks and folds it, frees its buffers
  void finish_reductions_of(int u);  // finishes reductions until none holds unit u's gradients
  void finish_all_reductions();
  void bucket_arrived(int u, const Slice& grads);  // reduce_grads: into its bucket, issue if full
  void issue_reduction(int first, int last, Allocation input, const Slice& in);
  void drop_unissued_buckets();      // step(): buckets still waiting for units (an error follows)
  void reserve_gather(int u);        // stage 3: its buffer and state now; issued by issue_gathers
  // Stage 3: the reserved gathers, coalesced where they can be (the first alone when the trainer
  // waits for it now).
  void issue_gathers(bool first_alone);
  void complete_gather(int u);       // stage 3: waits for the unit's gather (and its group's)
  void release_unit(int u);          // stage 3: back to its shard (waiting for a gather in flight)
  void gathered_now(int u);          // stage 3: its gather is done (hpZ: keep the secondary shard)
  Slice params_of_unit(int u) const; // full working params of a gathered/persistent unit
  Slice grads_of_unit(int u);        // the unit's gradient buffer (allocated if needed)
  void all_gather_params(int u, const Slice& shard_values);  // stages 1-2 and persistent units
  // All-gathers the new shards of run [first, last] into each unit's full params. `staged`
  // holds this rank's shards of the run, in unit order: alone for one unit, or for several at
  // block shard_rank of a packed buffer of shard_ranks blocks (the all-gather runs in place).
  void all_gather_run(const Run& run, const Allocation& staged);
  bool gathers_params(int u) const {  // after the step: through an all-gather
    return policy.after_step == ParamsAfterStep::all_gather ||
           (policy.after_step == ParamsAfterStep::update_shard && layout.units[u].persistent);
  }
  void prefetch_after(int u);          // stage 3: gathers ahead of u in the direction of travel
  // The working params from the fp32 master (rounded to the working dtype; all-gathered where
  // the stage keeps them whole): after init_params and after a checkpoint's load.
  void params_from_master();
  void record_comm_scratch();          // counts the communicator's staging growth in the ledger
  std::int64_t comm_scratch_recorded = 0;
};

}  // namespace zero
