// Engine: buffers from the layout, gather/release (stage 3), gradient buffers and their reduction.
// The optimizer step is in engine_step.cpp.
#include <algorithm>
#include <iostream>

#include "zero/engine_impl.hpp"
#include "zero/fnv.hpp"

namespace zero {

Slice slice(const Allocation& a, DType dtype, std::int64_t offset, std::int64_t count) {
  auto* base = static_cast<std::byte*>(a.data());
  return Slice{base + offset * static_cast<std::int64_t>(size_of(dtype)), count, dtype, a.where()};
}

namespace {

std::unique_ptr<Backend> make_backend(const EngineOptions& o, const comm::Communicator& world) {
  std::unique_ptr<Backend> b = o.memory == comm::Memory::host ? make_cpu_backend()
                               : o.emulate_device              ? make_emulated_device_backend()
                                                               : make_cuda_backend(o.device);
  if (world.memory() != b->memory())
    throw Error(cat("the engine keeps its state in ",
                    o.memory == comm::Memory::device ? "device" : "host", " memory but the ",
                    world.backend(), " communicator works on ",
                    world.memory() == comm::Memory::device ? "device" : "host",
                    " memory: pass ",
                    o.memory == comm::Memory::device ? "an NCCL communicator (comm::make_nccl_communicator)"
                                                     : "an MPI communicator (comm::make_mpi_communicator)"),
                {.rank = world.rank()});
  return b;
}

// Checks that every rank registered the same units: a mismatch would pair collectives of
// different units and sum unrelated gradients.
void check_same_layout(Engine::Impl& s) {
  const Layout& layout = s.layout;
  Fnv1a h;
  for (const auto& p : layout.params) {
    h.add(static_cast<std::uint64_t>(p.unit));
    h.add(static_cast<std::uint64_t>(p.numel));
    for (char c : p.name) h.add(static_cast<unsigned char>(c));
  }
  std::vector<std::int64_t> all(s.ranks);
  std::int64_t mine = static_cast<std::int64_t>(h.value);
  s.all_gather_host(&mine, all.data(), 1, DType::i64);
  for (int r = 1; r < s.ranks; ++r)
    if (all[r] != all[0])
      throw Error(cat("rank ", r, " registered different units or parameters than rank 0 (",
                      layout.units.size(), " units, ", layout.params.size(),
                      " params here); every rank must register the same model"),
                  {.rank = s.rank});
}

}  // namespace

Engine::Impl::Impl(const Config& c, comm::Communicator& w, std::vector<UnitSpec> units,
                   EngineOptions o)
    : config(c),
      world(w),
      options(std::move(o)),
      backend(make_backend(options, w)),
      ledger(nullptr, backend->make_allocator()) {
  if (config.zero.stage < 0 || config.zero.stage > 3)
    throw Error(cat("expected 0..3, got ", config.zero.stage), {.key = "zero_optimization.stage"});
  if (config.gradient_accumulation_steps < 1)
    throw Error(cat("expected >= 1, got ", config.gradient_accumulation_steps),
                {.key = "gradient_accumulation_steps"});
  config.validate_world(w.size());
  policy = kStagePolicy[config.zero.stage];
  rank = w.rank();
  ranks = w.size();
  work_dtype = working_dtype(config.precision);
  reduce_dtype = zero::reduce_dtype(config.precision, config.communication_data_type);
  if (reduce_dtype != DType::f32 && reduce_dtype != work_dtype)
    throw Error(cat("expected fp32 or the training dtype (", name_of(work_dtype), "), got ",
                    name_of(reduce_dtype)),
                {.key = "communication_data_type"});
  accumulation = config.gradient_accumulation_steps;
  if (config.max_consecutive_skipped_steps < 0)
    throw Error(cat("expected >= 0 (0: never stop), got ", config.max_consecutive_skipped_steps),
                {.key = "max_consecutive_skipped_steps"});
  if (!options.log)
    options.log = [](const std::string& line) { std::cerr << line << '\n'; };

  LayoutOptions lo;
  lo.shard_ranks = ranks;
  lo.align_elements = options.align_elements;
  lo.persistence_threshold =
      config.zero.stage == 3 ? config.zero.stage3_param_persistence_threshold : 0;
  lo.bucket_elements = config.zero.reduce_bucket_size;
  layout = make_layout(units, lo);
  check_same_layout(*this);
  update_segments = zero::update_segments(layout, param_groups_of(layout, config.param_groups),
                                          policy.shard_optimizer, rank);

  const auto nu = static_cast<std::size_t>(layout.units.size());
  const std::int64_t state_n = policy.shard_optimizer ? layout.shard_numel : layout.padded_numel;
  master = alloc(Category::master, bytes(state_n, DType::f32));
  exp_avg = alloc(Category::optimizer_m, bytes(state_n, DType::f32));
  exp_avg_sq = alloc(Category::optimizer_v, bytes(state_n, DType::f32));

  gathered.resize(nu);
  unit_state.assign(nu, UnitState::gathered);
  gather_handle.resize(nu);
  params_alias_master = work_dtype == DType::f32 && (!policy.shard_optimizer || policy.shard_params);
  if (policy.shard_params) {
    if (!params_alias_master)
      params_shard = alloc(Category::params, bytes(layout.shard_numel, work_dtype));
    for (std::size_t u = 0; u < nu; ++u) {
      if (layout.units[u].persistent) {
        gathered[u] = alloc(Category::params, bytes(layout.units[u].padded_numel, work_dtype));
      } else {
        unit_state[u] = UnitState::sharded;
      }
    }
  } else if (!params_alias_master) {
    params_full = alloc(Category::params, bytes(layout.padded_numel, work_dtype));
  }

  grads_unit.resize(nu);
  grads_fresh.assign(nu, false);
  if (!policy.shard_grads)
    grads_full = alloc(Category::grads, bytes(layout.padded_numel, work_dtype));

  // The reduced gradient. Stage 0 all-gathers it back to full; when it has the working dtype it
  // lands in the gradient buffer itself. Stages 2-3 count their shard as the ZeRO "grads" term;
  // at stage 1 the full gradient buffer is that term and the shard is a buffer.
  if (policy.gather_grads) {
    reduced_aliases_grads = reduce_dtype == work_dtype;
    if (!reduced_aliases_grads)
      reduced = alloc(Category::grad_accum, bytes(layout.padded_numel, reduce_dtype));
  } else {
    reduced = alloc(policy.shard_grads ? Category::grads : Category::grad_accum,
                    bytes(layout.shard_numel, reduce_dtype));
  }
  if (accumulation > 1)
    accum = alloc(Category::grad_accum,
                  bytes(policy.gather_grads ? layout.padded_numel : layout.shard_numel, DType::f32));
  pending.resize(nu);
  reduce_count.assign(nu, 0);

  if (config.precision == Precision::fp16) {
    LossScalerConfig sc;
    sc.loss_scale = static_cast<float>(config.fp16.loss_scale);
    sc.initial_scale_power = config.fp16.initial_scale_power;
    sc.loss_scale_window = static_cast<int>(config.fp16.loss_scale_window);
    sc.hysteresis = config.fp16.hysteresis;
    sc.consecutive_hysteresis = config.fp16.consecutive_hysteresis;
    sc.min_loss_scale = static_cast<float>(config.fp16.min_loss_scale);
    scaler.emplace(sc);
  }
}

std::int64_t Engine::Impl::state_offset(int u) const {
  return policy.shard_optimizer ? layout.units[u].shard_offset : layout.units[u].offset;
}
std::int64_t Engine::Impl::state_count(int u) const {
  return policy.shard_optimizer ? layout.units[u].shard_numel : layout.units[u].padded_numel;
}
std::int64_t Engine::Impl::reduced_offset(int u) const {
  return policy.gather_grads ? layout.units[u].offset : layout.units[u].shard_offset;
}
std::int64_t Engine::Impl::own_shard_offset(int u) const {
  return policy.gather_grads ? layout.units[u].offset + layout.units[u].shard_range(rank).begin
                             : layout.units[u].shard_offset;
}

void Engine::Impl::check_unit(int u, const char* what) const {
  if (u < 0 || u >= static_cast<int>(layout.units.size()))
    throw Error(cat(what, "(", u, "): no such unit; the model has ", layout.units.size(), " units"),
                {.rank = rank});
}

void Engine::Impl::log(const std::string& line) const {
  if (rank == 0 || options.log_all_ranks) options.log(line);
}

Slice Engine::Impl::params_of_unit(int u) const {
  const auto& U = layout.units[u];
  if (policy.shard_params) {
    if (unit_state[u] != UnitState::gathered)
      throw Error("its parameters are not gathered: call gather() before reading them (stage 3)",
                  {.rank = rank, .unit = u});
    return slice(gathered[u], work_dtype, 0, U.padded_numel);
  }
  return slice(full_params(), work_dtype, U.offset, U.padded_numel);
}

Slice Engine::Impl::grads_of_unit(int u) {
  const auto& U = layout.units[u];
  if (!grads_fresh[u]) {
    // A new micro-batch for this unit: its previous reduction must be done before we reuse
    // (stages 0-1) or replace (stages 2-3) the buffer it reads.
    finish_reduce(u);
    const ScopeTimer t(stats.optimizer_seconds);  // zeroing the gradients: the optimizer's zero_grad
    if (policy.shard_grads) {
      grads_unit[u] = alloc(Category::comm_buckets, bytes(U.padded_numel, work_dtype));
    } else {
      Slice s = slice(grads_full, work_dtype, U.offset, U.padded_numel);
      backend->fill_zero(s.data, static_cast<std::size_t>(bytes(s.count, work_dtype)));
    }
    grads_fresh[u] = true;
  }
  if (policy.shard_grads) return slice(grads_unit[u], work_dtype, 0, U.padded_numel);
  return slice(grads_full, work_dtype, U.offset, U.padded_numel);
}

void Engine::Impl::finish_reduce(int u) {
  PendingReduce& p = pending[u];
  if (!p.active) return;
  try {
    const ScopeTimer t = waiting();
    for (auto& h : p.handles) h.wait();
  } catch (const Error& e) {
    // The communicator names the collective; the engine knows which unit it was for.
    throw Error(cat(e.what(), " [while reducing the gradients of unit ", u, " '",
                    layout.units[u].name, "']"));
  }
  p.handles.clear();
  // It ran behind the trainer's work if the trainer computed another unit since it was issued.
  if (trainer_calls > p.issued_at) ++stats.reductions_overlapped;
  record_comm_scratch();
  p.unit_grads.reset();
  p.block.reset();
  p.active = false;
  if (accumulation > 1) {
    // Sum over micro-batches in fp32, in micro-batch order: the same on every stage.
    const std::int64_t off = reduced_offset(u);
    const std::int64_t n = policy.gather_grads ? layout.units[u].padded_numel : layout.units[u].shard_numel;
    Slice src = reduced_aliases_grads ? slice(grads_full, work_dtype, off, n)
                                      : slice(reduced, reduce_dtype, off, n);
    float* acc = accum.as<float>().data() + off;
    backend->accumulate(acc, src.data, src.dtype, n);
  }
}

void Engine::Impl::all_gather_host(const void* in, void* out, std::size_t count, DType dtype) {
  const ScopeTimer t = waiting();
  if (world.memory() == comm::Memory::host) {
    world.all_gather(comm::ConstView{in, count, dtype}, comm::View{out, count * ranks, dtype});
    return;
  }
  const std::size_t b = count * size_of(dtype);
  Allocation tmp = alloc(Category::other, static_cast<std::int64_t>(b) * (ranks + 1));
  auto* base = static_cast<std::byte*>(tmp.data());
  backend->upload(base, in, b);
  world.all_gather(comm::ConstView{base, count, dtype, tmp.where()},
                   comm::View{base + b, count * ranks, dtype, tmp.where()});
  backend->download(out, base + b, b * ranks);
}

void Engine::Impl::record_comm_scratch() {
  // The communicator's staging only grows; count what it grew by since the last look.
  const auto now = static_cast<std::int64_t>(world.scratch_bytes_peak());
  if (now > comm_scratch_recorded) {
    ledger.record_external(Category::comm_buckets, now - comm_scratch_recorded, world.memory());
    comm_scratch_recorded = now;
  }
}

void Engine::Impl::issue_gather(int u) {
  const auto& U = layout.units[u];
  // The gather's receive buffer and handing it to the communicator (which may switch to its
  // thread at once) are communication time.
  const ScopeTimer t = waiting();
  gathered[u] = alloc(Category::gathered, bytes(U.padded_numel, work_dtype));
  Slice shard = slice(shard_params(), work_dtype, U.shard_offset, U.shard_numel);
  gather_handle[u] = world.all_gather_async(shard.cview(),
                                            slice(gathered[u], work_dtype, 0, U.padded_numel).view());
  unit_state[u] = UnitState::gathering;
}

void Engine::Impl::all_gather_params(int u, const Slice& shard_values) {
  const auto& U = layout.units[u];
  Slice full = policy.shard_params ? slice(gathered[u], work_dtype, 0, U.padded_numel)
                                   : slice(full_params(), work_dtype, U.offset, U.padded_numel);
  const ScopeTimer t = waiting();
  world.all_gather(shard_values.cview(), full.view());
}

// ---------------------------------------------------------------------------------------------

Engine::Engine(const Config& config, comm::Communicator& world, std::vector<UnitSpec> units,
               EngineOptions options)
    : impl_(std::make_unique<Impl>(config, world, std::move(units), std::move(options))) {}

Engine::~Engine() {
  // Never leave a collective in flight: the buffers it writes are about to be freed.
  if (!impl_) return;
  for (std::size_t u = 0; u < impl_->pending.size(); ++u) {
    try {
      impl_->finish_reduce(static_cast<int>(u));
      if (impl_->gather_handle[u].valid()) impl_->gather_handle[u].wait();
    } catch (...) {
      // A failed collective already reported its error to the caller that issued it.
    }
  }
}

const Layout& Engine::layout() const { return impl_->layout; }
const Config& Engine::config() const { return impl_->config; }
int Engine::stage() const { return impl_->config.zero.stage; }
int Engine::rank() const { return impl_->rank; }
int Engine::ranks() const { return impl_->ranks; }

void Engine::init_params(const std::function<void(int, std::span<float>)>& fill) {
  Impl& s = *impl_;
  // This rank's master values (its shards, or everything at stage 0), built on the host and
  // copied to where the master lives in one piece.
  std::vector<float> host(s.master.bytes() / sizeof(float), 0.0f), values;
  // The first non-finite value any rank's fill produced, as (param, element); agreed below
  // before anything is stored or gathered, so every rank throws the same error and none waits
  // in a collective for a rank that has thrown.
  std::int64_t bad[2] = {-1, -1};
  for (std::size_t pi = 0; pi < s.layout.params.size(); ++pi) {
    const ParamLayout& p = s.layout.params[pi];
    values.assign(static_cast<std::size_t>(p.numel), 0.0f);
    fill(static_cast<int>(pi), values);
    if (bad[0] < 0) {
      const auto it = std::find_if(values.begin(), values.end(),
                                   [](float x) { return !kernels::is_finite(x); });
      if (it != values.end()) {
        bad[0] = static_cast<std::int64_t>(pi);
        bad[1] = it - values.begin();
      }
    }
    const auto& U = s.layout.units[p.unit];
    if (s.policy.shard_optimizer) {
      for (const ShardPiece& piece : s.layout.shard_pieces(p.unit, s.rank)) {
        if (piece.param != static_cast<int>(pi)) continue;
        std::copy_n(values.data() + piece.param_offset, piece.count,
                    host.data() + U.shard_offset + piece.shard_offset);
      }
    } else {
      std::copy(values.begin(), values.end(), host.data() + p.global_offset);
    }
  }
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(s.ranks));
  s.all_gather_host(bad, all.data(), 2, DType::i64);
  for (int r = 0; r < s.ranks; ++r) {
    if (all[2 * r] < 0) continue;
    const ParamLayout& p = s.layout.params[static_cast<std::size_t>(all[2 * r])];
    throw Error(cat("init_params: param ", all[2 * r], " '", p.name, "' (unit ", p.unit, " '",
                    s.layout.units[p.unit].name, "') element ", all[2 * r + 1],
                    " is not finite (NaN or infinity) on rank ", r,
                    "; the initial parameters must be finite"),
                {.rank = s.rank});
  }
  s.backend->upload(s.master.data(), host.data(), host.size() * sizeof(float));
  const float* master = static_cast<const float*>(s.master.data());
  // The working params are the master weights rounded to the working dtype.
  for (std::size_t u = 0; u < s.layout.units.size(); ++u) {
    const auto& U = s.layout.units[u];
    const int ui = static_cast<int>(u);
    const float* src = master + s.state_offset(ui);
    // (fp32 params that are the master buffer: the store copies nothing, dst being src.)
    if (!s.policy.shard_optimizer) {
      s.store(slice(s.full_params(), s.work_dtype, U.offset, U.padded_numel), src);
    } else if (s.policy.shard_params && !U.persistent) {
      s.store(slice(s.shard_params(), s.work_dtype, U.shard_offset, U.shard_numel), src);
    } else {
      Allocation tmp = s.alloc(Category::comm_buckets, bytes(U.shard_numel, s.work_dtype));
      Slice shard = slice(tmp, s.work_dtype, 0, U.shard_numel);
      s.store(shard, src);
      s.all_gather_params(ui, shard);
    }
  }
}

void Engine::gather(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "gather");
  ++s.trainer_calls;
  if (!s.policy.shard_params || s.layout.units[u].persistent) return;
  // Direction of travel: ascending in forward, descending in backward.
  const bool backward = s.last_gathered >= 0 && u <= s.last_gathered;
  s.last_gathered = u;
  if (s.unit_state[u] == UnitState::sharded) s.issue_gather(u);
  if (s.unit_state[u] == UnitState::gathering) {
    const ScopeTimer t = s.waiting();
    s.gather_handle[u].wait();
    s.unit_state[u] = UnitState::gathered;
  }
  s.prefetch_from(u, backward ? -1 : +1);
}

void Engine::Impl::prefetch_from(int u, int dir) {
  // Prefetch window (DeepSpeed's stage3_prefetch_bucket_size): the units after u in the direction
  // of travel whose padded sizes add up to at most prefetch_bucket_size elements, and never more
  // gathered elements at once than stage3_max_live_parameters. Both count padded elements.
  const std::int64_t window = config.zero.stage3_prefetch_bucket_size;
  std::int64_t live = 0;
  for (std::size_t v = 0; v < layout.units.size(); ++v)
    if (!layout.units[v].persistent && unit_state[v] != UnitState::sharded)
      live += layout.units[v].padded_numel;
  std::int64_t ahead = 0;
  for (int v = u + dir; v >= 0 && v < static_cast<int>(layout.units.size()); v += dir) {
    const auto& V = layout.units[v];
    if (V.persistent) continue;
    if (unit_state[v] != UnitState::sharded) {  // already on its way: counts toward the window
      ahead += V.padded_numel;
      continue;
    }
    if (ahead + V.padded_numel > window || live + V.padded_numel > config.zero.stage3_max_live_parameters)
      break;
    issue_gather(v);
    ahead += V.padded_numel;
    live += V.padded_numel;
  }
}

void Engine::release(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "release");
  if (!s.policy.shard_params || s.layout.units[u].persistent) return;
  if (s.unit_state[u] == UnitState::gathering) {
    const ScopeTimer t = s.waiting();
    s.gather_handle[u].wait();
  }
  s.gathered[u].reset();
  s.unit_state[u] = UnitState::sharded;
}

namespace {

const ParamLayout& checked_param(const Layout& layout, int p, int rank, const char* what) {
  if (p < 0 || p >= static_cast<int>(layout.params.size()))
    throw Error(cat(what, "(", p, "): no such parameter; the model has ", layout.params.size()),
                {.rank = rank});
  return layout.params[p];
}

// Param `pl`'s elements inside the buffer of its unit.
TensorView param_view(const Slice& unit, const ParamLayout& pl) {
  return TensorView{static_cast<std::byte*>(unit.data) + bytes(pl.offset, unit.dtype), pl.numel,
                    unit.dtype, pl.shape, unit.memory};
}

}  // namespace

TensorView Engine::param(int p) const {
  const ParamLayout& pl = checked_param(impl_->layout, p, impl_->rank, "param");
  return param_view(impl_->params_of_unit(pl.unit), pl);
}

UnitState Engine::unit_state(int u) const {
  impl_->check_unit(u, "unit_state");
  return impl_->unit_state[static_cast<std::size_t>(u)];
}

TensorView Engine::grad(int p) {
  const ParamLayout& pl = checked_param(impl_->layout, p, impl_->rank, "grad");
  ++impl_->trainer_calls;
  return param_view(impl_->grads_of_unit(pl.unit), pl);
}

void Engine::reduce_grads(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "reduce_grads");
  if (s.reduce_count[u] >= s.accumulation)
    throw Error(cat("reduce_grads called ", s.reduce_count[u] + 1,
                    " times since the last step, but gradient_accumulation_steps is ",
                    s.accumulation, "; call step() after every ", s.accumulation, " micro-batches"),
                {.rank = s.rank, .unit = u});
  Slice g = s.grads_of_unit(u);  // a unit with no gradient written still reduces its zeros
  const auto& U = s.layout.units[u];
  PendingReduce& p = s.pending[u];
  const comm::ReduceOp op = comm::ReduceOp::sum;
  {
    // Handing a collective to the communicator wakes its thread, which may run at once on a busy
    // CPU: that is communication time too (EngineStats::wait_seconds).
    const ScopeTimer issuing = s.waiting();
    if (s.policy.gather_grads) {
      // Stage 0: all-reduce as reduce-scatter into this rank's block, then all-gather.
      p.block = s.alloc(Category::comm_buckets, bytes(U.shard_numel, s.reduce_dtype));
      Slice block = slice(p.block, s.reduce_dtype, 0, U.shard_numel);
      Slice full = s.reduced_aliases_grads ? g : slice(s.reduced, s.reduce_dtype, U.offset, U.padded_numel);
      p.handles.push_back(s.world.reduce_scatter_async(g.cview(), block.view(), op));
      p.handles.push_back(s.world.all_gather_async(block.cview(), full.view()));
    } else {
      Slice out = slice(s.reduced, s.reduce_dtype, U.shard_offset, U.shard_numel);
      p.handles.push_back(s.world.reduce_scatter_async(g.cview(), out.view(), op));
      if (s.policy.shard_grads) p.unit_grads = std::move(s.grads_unit[u]);
    }
  }
  p.active = true;
  p.issued_at = s.trainer_calls;
  ++s.stats.reductions;
  s.grads_fresh[u] = false;
  ++s.reduce_count[u];
  s.reduce_log.push_back(u);
  // With overlap_comm, unit u's reduction runs while the trainer computes the next unit; the one
  // before it is finished now, so at most one reduction (and its gradient buffer) is in flight
  // and stages 2-3 never hold more than two units' gradients. Without overlap: finish it here.
  for (int v = 0; v < static_cast<int>(s.pending.size()); ++v)
    if (v != u || !s.config.zero.overlap_comm) s.finish_reduce(v);
  int in_flight = 0;
  for (const PendingReduce& q : s.pending) in_flight += q.active;
  s.stats.max_reductions_in_flight = std::max(s.stats.max_reductions_in_flight, in_flight);
}

double Engine::loss_scale() const { return impl_->scaler ? impl_->scaler->scale() : 1.0; }

Ledger& Engine::ledger() { return impl_->ledger; }
EngineStats Engine::stats() const {
  return impl_->stats;
}

comm::Accounting Engine::comm_accounting() const { return impl_->world.accounting(); }
void Engine::reset_comm_accounting() { impl_->world.reset_accounting(); }

MemoryReport Engine::memory() const {
  const Impl& s = *impl_;
  MemoryReport r;
  r.ledger = s.ledger.snapshot(s.mem());
  auto cur = [&](Category c) { return r.ledger[c].current; };
  auto peak = [&](Category c) { return r.ledger[c].peak; };
  r.params = cur(Category::params);
  r.grads = cur(Category::grads);
  r.master = cur(Category::master);
  r.optimizer = cur(Category::optimizer_m) + cur(Category::optimizer_v);
  r.activations = peak(Category::activations);
  r.peak_total = r.ledger.peak_total;
  r.buffers = r.peak_total - r.model_states() - r.activations;
  return r;
}

}  // namespace zero
