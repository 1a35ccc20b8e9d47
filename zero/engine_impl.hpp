// The engine's private state, shared by engine.cpp (buffers, gather/release, reduction) and
// engine_step.cpp (the optimizer step). Not part of the public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "precision/loss_scaler.hpp"
#include "zero/backend.hpp"
#include "zero/engine.hpp"
#include "zero/param_groups.hpp"
#include "zero/stage_policy.hpp"

namespace zero {

// One reduction in flight: what it writes and the buffers it reads, kept alive until it is done.
struct PendingReduce {
  std::vector<comm::Handle> handles;  // reduce-scatter (and all-gather at stage 0), FIFO
  Allocation unit_grads;              // stages 2-3: the unit's gradient buffer being reduced
  Allocation block;                   // stage 0: this rank's reduced block before the all-gather
  bool active = false;
  std::int64_t issued_at = 0;         // Impl::trainer_calls when it was issued (EngineStats)
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

struct Engine::Impl {
  Impl(const Config& c, comm::Communicator& w, std::vector<UnitSpec> units, EngineOptions o);

  Config config;
  comm::Communicator& world;
  EngineOptions options;
  StagePolicy policy;
  Layout layout;
  int rank = 0;
  int ranks = 1;
  DType work_dtype = DType::bf16;    // params and gradients as the trainer sees them
  DType reduce_dtype = DType::f32;   // the reduced gradient (communication_data_type)
  std::int64_t accumulation = 1;     // gradient_accumulation_steps
  // Where the buffers live and what computes on them (host + kernels/cpu, or device + kernels/cuda).
  std::unique_ptr<Backend> backend;
  comm::Memory mem() const { return backend->memory(); }
  Ledger ledger;

  // fp32 optimizer state: shards (stages 1-3) or full (stage 0), indexed like `master_offset`.
  Allocation master, exp_avg, exp_avg_sq;
  // Working params: full (stages 0-2), or the shard of every unit (stage 3) plus, per unit,
  // the gathered buffer while gathered (persistent units: always).
  Allocation params_full, params_shard;
  // fp32 training at stages 0 and 3: the working params (full, or the shard) are the fp32 master
  // buffer itself, updated in place; no copy is allocated. params() gives the buffer either way.
  bool params_alias_master = false;
  const Allocation& full_params() const { return params_alias_master ? master : params_full; }
  const Allocation& shard_params() const { return params_alias_master ? master : params_shard; }
  std::vector<Allocation> gathered;
  std::vector<UnitState> unit_state;
  std::vector<comm::Handle> gather_handle;
  int last_gathered = -1;
  // Gradients: full working-dtype buffer (stages 0-1) or per-unit buffers in flight (2-3).
  Allocation grads_full;
  std::vector<Allocation> grads_unit;
  std::vector<bool> grads_fresh;     // unit's gradient buffer was zeroed for this micro-batch
  // Reduced gradient in reduce_dtype: full (stage 0) or this rank's shard (stages 1-3).
  Allocation reduced;
  bool reduced_aliases_grads = false;  // stage 0 with reduce dtype == work dtype: in place
  // fp32 sum over micro-batches (gradient_accumulation_steps > 1), shaped like `reduced`.
  Allocation accum;
  std::vector<PendingReduce> pending;
  std::vector<int> reduce_count;     // reductions of each unit since the last step
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
  void store(const Slice& dst, const float* src) {
    backend->store_from_f32(dst.data, dst.dtype, src, dst.count);
  }
  // An all-gather of small host values (layout digests, norms, call counts): straight through a
  // host communicator, staged through device memory for a device one.
  void all_gather_host(const void* in, void* out, std::size_t count, DType dtype);

  void check_unit(int u, const char* what) const;
  void log(const std::string& line) const;
  void finish_reduce(int u);         // waits for unit u's reduction and folds it
  void issue_gather(int u);          // stage 3
  Slice params_of_unit(int u) const; // full working params of a gathered/persistent unit
  Slice grads_of_unit(int u);        // the unit's gradient buffer (allocated if needed)
  void all_gather_params(int u, const Slice& shard_values);  // stages 1-2 and persistent units
  void prefetch_from(int u, int dir);  // stage 3: gathers ahead of u (dir +1 forward, -1 back)
  void record_comm_scratch();          // counts the communicator's staging growth in the ledger
  std::int64_t comm_scratch_recorded = 0;
};

}  // namespace zero
