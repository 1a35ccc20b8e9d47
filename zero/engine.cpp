// Engine: buffers from the layout, gather/release (stage 3), gradient buffers and their reduction.
// The optimizer step is in engine_step.cpp.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "zero/engine_impl.hpp"
#include "base/fnv.hpp"

namespace zero {

Slice slice(const Allocation& a, DType dtype, std::int64_t offset, std::int64_t count) {
  auto* base = static_cast<std::byte*>(a.data());
  return Slice{base + offset * static_cast<std::int64_t>(size_of(dtype)), count, dtype, a.where()};
}

namespace {

std::unique_ptr<Backend> make_backend(const EngineOptions& o, const comm::Communicator& world) {
  std::unique_ptr<Backend> b = o.count_only                    ? make_counting_backend(o.memory)
                               : o.memory == comm::Memory::host ? make_cpu_backend()
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

}  // namespace

// The backend's allocator in the ledger slot of the memory it serves (host: the ledger's own
// heap allocator unless the backend brings one).
Engine::Impl::Allocators Engine::Impl::allocators_of(Backend& b) {
  Allocators a;
  std::unique_ptr<Allocator> mine = b.make_allocator();
  (mine && mine->where() == comm::Memory::host ? a.host : a.device) = std::move(mine);
  return a;
}

namespace {

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
  std::vector<std::int64_t> all(s.agreeing_ranks());
  std::int64_t mine = static_cast<std::int64_t>(h.value);
  s.all_gather_host(&mine, all.data(), 1, DType::i64);
  for (int r = 1; r < s.agreeing_ranks(); ++r)
    if (all[r] != all[0])
      throw Error(cat("rank ", r, " registered different units or parameters than rank 0 (",
                      layout.units.size(), " units, ", layout.params.size(),
                      " params here); every rank must register the same model"),
                  {.rank = s.rank});
}

}  // namespace

Engine::Impl::Impl(const Config& c, comm::Communicator& w, std::vector<UnitSpec> specs,
                   EngineOptions o)
    : config(c),
      world(w),
      options(std::move(o)),
      backend(make_backend(options, w)),
      allocators(allocators_of(*backend)),
      ledger(std::move(allocators.host), std::move(allocators.device)) {
  config.validate_world(w.size());
  rank = w.rank();
  ranks = w.size();
  settings = resolve_settings(config, ranks, options.align_elements);
  if (settings.replicas > 1) {
    groups = world.split_groups(settings.shard_size);
    shard = groups.shard.get();
    replicate = groups.replicate.get();
  } else {
    shard = &world;
  }
  shard_rank = shard->rank();
  shard_ranks = shard->size();
  if (settings.secondary_size > 1) secondary = world.split_groups(settings.secondary_size).shard;
  if (config.max_consecutive_skipped_steps < 0)
    throw Error(cat("expected >= 0 (0: never stop), got ", config.max_consecutive_skipped_steps),
                {.key = "max_consecutive_skipped_steps"});
  if (!options.log)
    options.log = [](const std::string& line) { std::cerr << line << '\n'; };
  for (const std::string& note : settings.notes) log("warning: " + note);  // once, rank 0

  layout = make_layout(specs, settings.layout);
  check_same_layout(*this);
  update_segments = zero::update_segments(layout, param_groups_of(layout, config.param_groups),
                                          policy.shard_optimizer, shard_rank);

  const auto nu = static_cast<std::size_t>(layout.units.size());
  const std::int64_t state_n = policy.shard_optimizer ? layout.shard_numel : layout.padded_numel;
  master = alloc(Category::master, bytes(state_n, DType::f32));
  exp_avg = alloc(Category::optimizer_m, bytes(state_n, DType::f32));
  exp_avg_sq = alloc(Category::optimizer_v, bytes(state_n, DType::f32));

  units.resize(nu);
  if (policy.shard_params) gather_groups.resize(nu);
  if (policy.shard_params) {
    if (!params_alias_master)
      params_shard = alloc(Category::params, bytes(layout.shard_numel, work_dtype));
    for (std::size_t u = 0; u < nu; ++u) {
      if (layout.units[u].persistent) {
        units[u].gathered = alloc(Category::params, bytes(layout.units[u].padded_numel, work_dtype));
      } else {
        units[u].state = UnitState::sharded;
      }
    }
  } else if (!params_alias_master) {
    params_full = alloc(Category::params, bytes(layout.padded_numel, work_dtype));
  }

  if (!policy.shard_grads)
    grads_full = alloc(Category::grads, bytes(layout.padded_numel, work_dtype));

  // The reduced gradient. Stage 0 all-gathers it back to full; when it has the working dtype it
  // lands in the gradient buffer itself. Stages 2-3 count their shard as the ZeRO "grads" term;
  // at stage 1 the full gradient buffer is that term and the shard is a buffer.
  if (policy.gather_grads) {
    if (!reduced_aliases_grads)
      reduced = alloc(Category::reduced_grads, bytes(layout.padded_numel, reduce_dtype));
  } else {
    reduced = alloc(policy.reduced_shard_is_buffer() ? Category::reduced_grads : Category::grads,
                    bytes(layout.shard_numel, reduce_dtype));
  }
  if (accumulation > 1)
    accum = alloc(Category::accumulator,
                  bytes(policy.gather_grads ? layout.padded_numel : layout.shard_numel, DType::f32));
  buckets.resize(layout.buckets.size());
  // The all-gather runs after the step: consecutive units on that path, in forward order, joined
  // while their padded sizes fit allgather_bucket_size (a larger unit is a run of its own).
  std::int64_t run_size = 0;
  for (int u = 0; u < static_cast<int>(nu); ++u) {
    if (!gathers_params(u)) continue;
    const std::int64_t n = layout.units[u].padded_numel;
    if (!param_gather_runs.empty() && param_gather_runs.back().last + 1 == u &&
        run_size + n <= settings.allgather_bucket) {
      param_gather_runs.back().last = u;
      run_size += n;
    } else {
      param_gather_runs.push_back({u, u});
      run_size = n;
    }
  }

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
  return policy.gather_grads ? layout.units[u].offset + layout.units[u].shard_range(shard_rank).begin
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
    if (units[u].state != UnitState::gathered)
      throw Error("its parameters are not gathered: call gather() before reading them (stage 3)",
                  {.rank = rank, .unit = u});
    return slice(units[u].gathered, work_dtype, 0, U.padded_numel);
  }
  return slice(full_params(), work_dtype, U.offset, U.padded_numel);
}

Allocation Spares::take(Ledger& ledger, std::int64_t bytes, comm::Memory where, bool carry) {
  constexpr Category c = Category::buckets;  // all that keep() holds
  const auto n = static_cast<std::size_t>(bytes);
  if (n == 0) return ledger.allocate(c, n, where);  // an empty buffer that knows its memory
  auto best = kept_.end();
  for (auto k = kept_.begin(); k != kept_.end(); ++k)
    if (k->bytes() >= n && (best == kept_.end() || k->bytes() < best->bytes())) best = k;
  Allocation a = best == kept_.end() ? ledger.allocate_unset(c, n, where) : std::move(*best);
  if (best != kept_.end()) kept_.erase(best);
  if (carry && std::ranges::find(carried_, a.data()) == carried_.end())
    carried_.push_back(a.data());
  return a;
}

void Spares::keep(Allocation a) {
  if (!enabled_ || a.empty() || a.category() != Category::buckets) return;
  kept_.push_back(std::move(a));
}

void Spares::end_step() {
  std::erase_if(kept_, [&](const Allocation& a) {
    return std::ranges::find(carried_, a.data()) == carried_.end();
  });
  carried_.clear();
}

Slice Engine::Impl::grads_of_unit(int u) {
  const auto& U = layout.units[u];
  UnitRun& run = units[u];
  if (!run.grads_fresh) {
    // A new micro-batch for this unit: its previous reduction must be done before we reuse
    // (stages 0-1) or replace (stages 2-3) the buffer it reads, and its bucket must have gone.
    if (run.waiting) {
      const Bucket& b = layout.buckets[U.bucket];
      std::string missing;
      for (int v : b.units)
        if (!units[v].waiting) missing += cat(missing.empty() ? "" : ", ", v);
      throw Error(cat("its gradients were reduced in this micro-batch and its bucket (units ",
                      b.units.back(), "..", b.units.front(), ", reduce_bucket_size ",
                      layout.options.bucket_elements, ") still waits for unit(s) ", missing,
                      ": reduce every unit once per micro-batch before touching any again"),
                  {.rank = rank, .unit = u});
    }
    finish_reductions_of(u);
    const ScopeTimer t(stats.optimizer_seconds);  // zeroing the gradients: the optimizer's zero_grad
    if (policy.shard_grads) {
      run.grads = alloc(Category::grad_buffers, bytes(U.padded_numel, work_dtype));
    } else {
      Slice s = slice(grads_full, work_dtype, U.offset, U.padded_numel);
      backend->fill_zero(s.data, static_cast<std::size_t>(bytes(s.count, work_dtype)));
    }
    run.grads_fresh = true;
  }
  if (policy.shard_grads) return slice(run.grads, work_dtype, 0, U.padded_numel);
  return slice(grads_full, work_dtype, U.offset, U.padded_numel);
}

void Engine::Impl::bucket_arrived(int u, const Slice& g) {
  const auto& U = layout.units[u];
  const Bucket& b = layout.buckets[U.bucket];
  UnitRun& run = units[u];
  run.waiting = true;
  if (b.units.size() == 1) {  // a bucket of one unit: the unit's buffer is rank-major already
    issue_reduction(u, u, policy.shard_grads ? std::move(run.grads) : Allocation(), g);
    return;
  }
  // Copy the unit's gradients into the bucket (DeepSpeed's reduce bucket, FSDP2's copy-in); at
  // stages 2-3 its own buffer is freed at once: the bucket holds them now.
  const PackedRun packed{layout, b.units.back(), b.units.front()};
  BucketFill& fill = buckets[U.bucket];
  if (fill.packed.empty())
    fill.packed = bucket_buffer(bytes(shard_ranks * packed.shard(), work_dtype), true);
  {
    const ScopeTimer t = waiting();  // packing for the collective is communication work
    packed.copy(*backend, shard_ranks, work_dtype, static_cast<std::byte*>(fill.packed.data()), u, u,
                [&](int) { return static_cast<std::byte*>(g.data); }, true);
  }
  run.grads.reset();
  if (++fill.arrived < static_cast<int>(b.units.size())) return;
  fill.arrived = 0;
  Allocation input = std::move(fill.packed);
  const Slice in = slice(input, work_dtype, 0, shard_ranks * packed.shard());
  issue_reduction(packed.first, packed.last, std::move(input), in);
}

void Engine::Impl::issue_reduction(int first, int last, Allocation input, const Slice& in) {
  // Its units' earlier reductions write the same regions of `reduced`: they finish first.
  for (int u = first; u <= last; ++u) finish_reductions_of(u);
  const PackedRun run{layout, first, last};
  const std::int64_t shard = run.shard();
  const comm::ReduceOp op = comm::ReduceOp::sum;
  Reduction r;
  r.first = first;
  r.last = last;
  {
    // Handing a collective to the communicator wakes its thread, which may run at once on a busy
    // CPU: that is communication time too (EngineStats::wait_seconds).
    const ScopeTimer issuing = waiting();
    if (policy.gather_grads) {
      // Stage 0: all-reduce as reduce-scatter into this rank's blocks, then all-gather, straight
      // into the unit's full buffer (one unit) or into a packed buffer unpacked when it is done.
      r.block = bucket_buffer(bytes(shard, reduce_dtype), true);
      const Slice block = slice(r.block, reduce_dtype, 0, shard);
      r.handles.push_back(this->shard->reduce_scatter_async(in.cview(), block.view(), op));
      const auto& F = layout.units[first];
      Slice full;
      if (first == last) {
        full = reduced_aliases_grads ? slice(grads_full, work_dtype, F.offset, F.padded_numel)
                                     : slice(reduced, reduce_dtype, F.offset, F.padded_numel);
      } else {
        r.packed_out = bucket_buffer(bytes(shard_ranks * shard, reduce_dtype), true);
        full = slice(r.packed_out, reduce_dtype, 0, shard_ranks * shard);
      }
      if (replicate) {  // the all-gather waits for the replicas' all-reduce (at finish)
        r.replicate_pending = true;
        r.reduced_region = block.view();
        r.gather_to = full.view();
      } else {
        r.handles.push_back(this->shard->all_gather_async(block.cview(), full.view()));
      }
    } else {
      const Slice out = slice(reduced, reduce_dtype, layout.units[first].shard_offset, shard);
      r.handles.push_back(this->shard->reduce_scatter_async(in.cview(), out.view(), op));
      if (replicate) {
        r.replicate_pending = true;
        r.reduced_region = out.view();
      }
    }
  }
  r.input = std::move(input);
  r.issued_at = trainer_calls;
  for (int u = first; u <= last; ++u) {
    units[u].waiting = false;
    units[u].in_flight = true;
  }
  in_flight.push_back(std::move(r));
  ++stats.reduce_collectives;
  // With overlap_comm this reduction runs while the trainer computes the next units; the one
  // before it is finished now, so at most one is in flight (and stages 2-3 hold at most one
  // bucket's gradients besides the unit being computed). Without overlap: finished here.
  while (in_flight.size() > (settings.overlap ? 1u : 0u)) finish_oldest_reduction();
  stats.max_reductions_in_flight =
      std::max(stats.max_reductions_in_flight, static_cast<int>(in_flight.size()));
}

void Engine::Impl::finish_oldest_reduction() {
  Reduction& r = in_flight.front();
  try {
    const ScopeTimer t = waiting();
    for (auto& h : r.handles) h.wait();
  } catch (const Error& e) {
    // The communicator names the collective; the engine knows which units it was for.
    throw Error(cat(e.what(), " [while reducing the gradients of ",
                    r.first == r.last ? cat("unit ", r.first, " '", layout.units[r.first].name, "'")
                                      : cat("units ", r.first, "..", r.last, " (one bucket)"),
                    "]"));
  }
  if (r.replicate_pending) {
    // Hierarchical sharding: each shard group has reduced its ranks' gradients; sum the groups.
    const ScopeTimer t = waiting();
    replicate->all_reduce(r.reduced_region, comm::ReduceOp::sum);
    if (policy.gather_grads) shard->all_gather(comm::ConstView(r.reduced_region), r.gather_to);
  }
  // It ran behind the trainer's work if the trainer computed another unit since it was issued.
  if (trainer_calls > r.issued_at) ++stats.reductions_overlapped;
  record_comm_scratch();
  const auto& F = layout.units[r.first];
  const auto& L = layout.units[r.last];
  if (!r.packed_out.empty()) {       // stage 0, several units: back to unit-major order
    const ScopeTimer t = waiting();  // unpacking the collective's output, as packing its input
    const DType dt = reduced_aliases_grads ? work_dtype : reduce_dtype;
    const Allocation& full = reduced_aliases_grads ? grads_full : reduced;
    const PackedRun run{layout, r.first, r.last};
    run.copy(*backend, shard_ranks, dt, static_cast<std::byte*>(r.packed_out.data()), r.first, r.last,
             [&](int u) {
               return static_cast<std::byte*>(full.data()) + bytes(layout.units[u].offset, dt);
             },
             false);
  }
  if (accumulation > 1) {
    // Sum over micro-batches in fp32, in micro-batch order: the same on every stage. The run's
    // region of `reduced` is contiguous in both coordinates (full at stage 0, shards otherwise).
    const std::int64_t off = policy.gather_grads ? F.offset : F.shard_offset;
    const std::int64_t n = policy.gather_grads ? L.offset + L.padded_numel - off
                                               : L.shard_offset + L.shard_numel - off;
    const Slice src = reduced_aliases_grads ? slice(grads_full, work_dtype, off, n)
                                            : slice(reduced, reduce_dtype, off, n);
    backend->accumulate(accum.as<float>().data() + off, src.data, src.dtype, n);
  }
  for (int u = r.first; u <= r.last; ++u) units[u].in_flight = false;
  spares.keep(std::move(r.input));  // the packed bucket (a unit's gradient buffer is freed)
  spares.keep(std::move(r.block));
  spares.keep(std::move(r.packed_out));
  in_flight.pop_front();
}

void Engine::Impl::finish_reductions_of(int u) {
  while (units[u].in_flight) finish_oldest_reduction();
}

void Engine::Impl::finish_all_reductions() {
  while (!in_flight.empty()) finish_oldest_reduction();
}

void Engine::Impl::drop_unissued_buckets() {
  for (BucketFill& b : buckets) {
    b.packed.reset();
    b.arrived = 0;
  }
  for (UnitRun& r : units) r.waiting = false;
}

void Engine::Impl::all_gather_host(const void* in, void* out, std::size_t count, DType dtype) {
  const ScopeTimer t = waiting();
  if (options.count_only) {
    // Every rank is modelled as this one, so `out` holds one block (agreeing_ranks()); the
    // collective is counted (the counting communicator touches no buffer), and so is the
    // device staging a real run takes.
    const std::size_t b = count * size_of(dtype);
    if (world.memory() != comm::Memory::host) {
      Allocation tmp = alloc(Category::other, static_cast<std::int64_t>(b) * (ranks + 1));
      auto* base = static_cast<std::byte*>(tmp.data());
      world.all_gather(comm::ConstView{base, count, dtype, tmp.where()},
                       comm::View{base + b, count * ranks, dtype, tmp.where()});
    } else {
      world.all_gather(comm::ConstView{in, count, dtype}, comm::View{out, count * ranks, dtype});
    }
    std::memcpy(out, in, b);
    return;
  }
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
  // The communicators' staging only grows; count what it grew by since the last look.
  auto now = static_cast<std::int64_t>(world.scratch_bytes_peak());
  if (groups.shard) now += static_cast<std::int64_t>(groups.shard->scratch_bytes_peak());
  if (groups.replicate) now += static_cast<std::int64_t>(groups.replicate->scratch_bytes_peak());
  if (secondary) now += static_cast<std::int64_t>(secondary->scratch_bytes_peak());
  if (now > comm_scratch_recorded) {
    ledger.record_external(Category::comm_staging, now - comm_scratch_recorded, world.memory());
    comm_scratch_recorded = now;
  }
}

void Engine::Impl::reserve_gather(int u) {
  const auto& U = layout.units[u];
  UnitRun& run = units[u];
  const ScopeTimer t = waiting();  // the gather's receive buffer is communication time
  run.gathered = alloc_unset(Category::gathered, bytes(U.padded_numel, work_dtype));
  run.state = UnitState::gathering;
  live_elements += U.padded_numel;
  gathers_to_issue.push_back(u);
}

void Engine::Impl::issue_gathers(bool first_alone) {
  // Handing collectives to the communicator (which may switch to its thread at once) is
  // communication time.
  const ScopeTimer t = waiting();
  const std::vector<int> todo = std::move(gathers_to_issue);
  gathers_to_issue.clear();
  for (std::size_t i = 0; i < todo.size();) {
    const int u = todo[i];
    UnitRun& run = units[u];
    const auto& U = layout.units[u];
    // hpZ: once the unit's secondary shards exist (made by its forward gather), gather from them
    // inside the node; otherwise from the primary shards over every rank.
    run.from_secondary = !run.secondary.empty();
    // Consecutive units in the order of travel, all from their primary shards (which lie side by
    // side in the shard buffer), up to allgather_bucket_size padded elements: one all-gather.
    // The unit the trainer waits for now goes alone, so that its compute starts as soon as it
    // is here; the prefetched ones behind it travel together.
    // Only small units are joined (kSmallGatherUnit): measured here, 256 units of 16k params
    // gathered together ran 1.2-1.4x faster, 4 units of 262k params 0.6x slower than alone.
    std::size_t j = i + 1;
    std::int64_t size = U.padded_numel;
    auto small = [&](int v) { return layout.units[v].padded_numel <= kSmallGatherUnit; };
    if (!run.from_secondary && !(first_alone && i == 0) && small(u))
      while (j < todo.size() && std::abs(todo[j] - todo[j - 1]) == 1 &&
             units[todo[j]].secondary.empty() && small(todo[j]) &&
             size + layout.units[todo[j]].padded_numel <= settings.allgather_bucket) {
        size += layout.units[todo[j]].padded_numel;
        ++j;
      }
    if (j == i + 1) {
      const Slice full = slice(run.gathered, work_dtype, 0, U.padded_numel);
      if (run.from_secondary)
        run.gather = secondary->all_gather_async(
            slice(run.secondary, work_dtype, 0, U.padded_numel / secondary->size()).cview(),
            full.view());
      else
        run.gather = this->shard->all_gather_async(
            slice(shard_params(), work_dtype, U.shard_offset, U.shard_numel).cview(), full.view());
      i = j;
      continue;
    }
    const int first = std::min(todo[i], todo[j - 1]), last = std::max(todo[i], todo[j - 1]);
    const PackedRun packed{layout, first, last};
    GatherGroup& g = gather_groups[static_cast<std::size_t>(first)];
    g.first = first;
    g.last = last;
    g.packed = alloc_unset(Category::gathered, bytes(shard_ranks * packed.shard(), work_dtype));
    g.handle = this->shard->all_gather_async(
        slice(shard_params(), work_dtype, layout.units[first].shard_offset, packed.shard()).cview(),
        slice(g.packed, work_dtype, 0, shard_ranks * packed.shard()).view());
    for (int v = first; v <= last; ++v) {
      units[v].gather_group = first;
      units[v].from_secondary = false;
    }
    i = j;
  }
}

void Engine::Impl::complete_gather(int u) {
  UnitRun& run = units[u];
  if (run.state != UnitState::gathering) return;
  if (run.gather_group < 0) {
    {
      const ScopeTimer t = waiting();
      run.gather.wait();
    }
    gathered_now(u);
    return;
  }
  GatherGroup& g = gather_groups[static_cast<std::size_t>(run.gather_group)];
  {
    const ScopeTimer t = waiting();
    g.handle.wait();
  }
  const PackedRun packed{layout, g.first, g.last};
  packed.copy(*backend, shard_ranks, work_dtype, static_cast<std::byte*>(g.packed.data()), g.first,
              g.last, [&](int v) { return static_cast<std::byte*>(units[v].gathered.data()); },
              false);
  g.packed.reset();
  for (int v = g.first; v <= g.last; ++v) {
    units[v].gather_group = -1;
    gathered_now(v);
  }
}

void Engine::Impl::gathered_now(int u) {
  UnitRun& run = units[u];
  run.state = UnitState::gathered;
  if (run.from_secondary) {  // used: the next step's forward gather makes a new one
    run.secondary.reset();
    return;
  }
  if (!secondary) return;
  // hpZ: keep this rank's slice of the gathered unit as its secondary shard (ZeRO++: the
  // forward gather builds the secondary partition; no extra communication).
  const auto& U = layout.units[u];
  const std::int64_t n = U.padded_numel / secondary->size();
  run.secondary = alloc_unset(Category::secondary, bytes(n, work_dtype));
  backend->copy(run.secondary.data(),
                static_cast<const std::byte*>(run.gathered.data()) + bytes(secondary->rank() * n, work_dtype),
                static_cast<std::size_t>(bytes(n, work_dtype)));
}

void Engine::Impl::release_unit(int u) {
  UnitRun& run = units[u];
  if (run.state == UnitState::sharded) return;
  complete_gather(u);
  run.gathered.reset();
  run.state = UnitState::sharded;
  live_elements -= layout.units[u].padded_numel;
}

void Engine::Impl::all_gather_params(int u, const Slice& shard_values) {
  const auto& U = layout.units[u];
  Slice full = policy.shard_params ? slice(units[u].gathered, work_dtype, 0, U.padded_numel)
                                   : slice(full_params(), work_dtype, U.offset, U.padded_numel);
  const ScopeTimer t = waiting();
  shard->all_gather(shard_values.cview(), full.view());
}

void Engine::Impl::all_gather_run(const Run& run, const Allocation& staged) {
  const PackedRun packed{layout, run.first, run.last};
  const std::int64_t n = packed.shard();
  if (run.first == run.last) {
    all_gather_params(run.first, slice(staged, work_dtype, 0, n));
    return;
  }
  // In place: this rank's new shards are block shard_rank of the packed output already.
  {
    const Slice out = slice(staged, work_dtype, 0, shard_ranks * n);
    const ScopeTimer t = waiting();
    shard->all_gather(slice(staged, work_dtype, shard_rank * n, n).cview(), out.view());
  }
  packed.copy(*backend, shard_ranks, work_dtype, static_cast<std::byte*>(staged.data()), run.first,
              run.last,
              [&](int u) {
                const auto& U = layout.units[u];
                return static_cast<std::byte*>(
                    policy.shard_params ? units[u].gathered.data()
                                        : static_cast<std::byte*>(full_params().data()) +
                                              bytes(U.offset, work_dtype));
              },
              false);
}

// ---------------------------------------------------------------------------------------------

Engine::Engine(const Config& config, comm::Communicator& world, std::vector<UnitSpec> units,
               EngineOptions options)
    : impl_(std::make_unique<Impl>(config, world, std::move(units), std::move(options))) {}

Engine::~Engine() {
  // Never leave a collective in flight: the buffers it writes are about to be freed.
  if (!impl_) return;
  try {
    impl_->finish_all_reductions();
  } catch (...) {
    // A failed collective already reported its error to the caller that issued it.
  }
  for (UnitRun& run : impl_->units) {
    try {
      if (run.gather.valid()) run.gather.wait();
    } catch (...) {
    }
  }
  for (Impl::GatherGroup& g : impl_->gather_groups) {
    try {
      if (g.handle.valid()) g.handle.wait();
    } catch (...) {
    }
  }
}

const Layout& Engine::layout() const { return impl_->layout; }
const Config& Engine::config() const { return impl_->config; }
int Engine::stage() const { return impl_->config.zero.stage; }
int Engine::rank() const { return impl_->rank; }
int Engine::ranks() const { return impl_->ranks; }
int Engine::settings_shard_size() const { return impl_->shard_ranks; }

void Engine::init_params(const std::function<void(int, std::span<float>)>& fill) {
  Impl& s = *impl_;
  // This rank's master values (its shards, or everything at stage 0), built on the host and
  // copied to where the master lives in one piece (counting: nothing to build).
  std::vector<float> host(s.options.count_only ? 0 : s.master.bytes() / sizeof(float), 0.0f), values;
  // Agreed below before anything is stored or gathered, so every rank throws the same error and
  // none waits in a collective for a rank that has thrown: the first non-finite value any rank's
  // fill produced, as (param, element), then a digest of each param's values. Every rank keeps
  // only its shard of what its fill produced (stages 1-3), or applies the same updates to it
  // (stage 0, whose step relies on the replicas being equal), so a fill that differs between
  // ranks would train a model no rank ever saw whole.
  const std::size_t np = s.layout.params.size();
  std::vector<std::int64_t> mine(2 + np, 0);
  std::int64_t* bad = mine.data();  // (param, element) of the first non-finite value, or -1
  bad[0] = bad[1] = -1;
  for (std::size_t pi = 0; pi < np && !s.options.count_only; ++pi) {
    const ParamLayout& p = s.layout.params[pi];
    values.assign(static_cast<std::size_t>(p.numel), 0.0f);
    fill(static_cast<int>(pi), values);
    Fnv1a digest;
    digest.add_words(values.data(), values.size() * sizeof(float));
    mine[2 + pi] = static_cast<std::int64_t>(digest.value);
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
      for (const ShardPiece& piece : s.layout.shard_pieces(p.unit, s.shard_rank)) {
        if (piece.param != static_cast<int>(pi)) continue;
        std::copy_n(values.data() + piece.param_offset, piece.count,
                    host.data() + U.shard_offset + piece.shard_offset);
      }
    } else {
      std::copy(values.begin(), values.end(), host.data() + p.global_offset);
    }
  }
  const std::size_t w = 2 + np;
  std::vector<std::int64_t> all(w * static_cast<std::size_t>(s.agreeing_ranks()));
  s.all_gather_host(mine.data(), all.data(), w, DType::i64);
  for (int r = 0; r < s.agreeing_ranks(); ++r) {
    const std::int64_t* at = all.data() + w * r;
    if (at[0] < 0) continue;
    const ParamLayout& p = s.layout.params[static_cast<std::size_t>(at[0])];
    throw Error(cat("init_params: param ", at[0], " '", p.name, "' (unit ", p.unit, " '",
                    s.layout.units[p.unit].name, "') element ", at[1],
                    " is not finite (NaN or infinity) on rank ", r,
                    "; the initial parameters must be finite"),
                {.rank = s.rank});
  }
  for (std::size_t pi = 0; pi < np; ++pi)
    for (int r = 1; r < s.agreeing_ranks(); ++r) {
      if (all[w * r + 2 + pi] == all[2 + pi]) continue;
      const ParamLayout& p = s.layout.params[pi];
      throw Error(cat("init_params: param ", pi, " '", p.name, "' (unit ", p.unit, " '",
                      s.layout.units[p.unit].name, "') has other values on rank ", r,
                      " than on rank 0; every rank's fill must produce the same values (seed "
                      "its generator the same way on every rank)"),
                  {.rank = s.rank});
    }
  s.backend->upload(s.master.data(), host.data(), host.size() * sizeof(float));
  s.params_from_master();
}

// The working params are the master weights rounded to the working dtype (init_params, and a
// checkpoint's load).
void Engine::Impl::params_from_master() {
  const float* values = static_cast<const float*>(master.data());
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    const auto& U = layout.units[u];
    const int ui = static_cast<int>(u);
    const float* src = values + state_offset(ui);
    // (fp32 params that are the master buffer: the store copies nothing, dst being src.)
    if (policy.after_step == ParamsAfterStep::update_full) {
      store(slice(full_params(), work_dtype, U.offset, U.padded_numel), src);
    } else if (!gathers_params(ui)) {
      store(slice(shard_params(), work_dtype, U.shard_offset, U.shard_numel), src);
    } else {
      Allocation tmp = alloc(Category::buckets, bytes(U.shard_numel, work_dtype));
      Slice shard = slice(tmp, work_dtype, 0, U.shard_numel);
      store(shard, src);
      all_gather_params(ui, shard);
    }
  }
}

void Engine::gather(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "gather");
  ++s.trainer_calls;
  if (!s.policy.shard_params || s.layout.units[u].persistent) return;
  s.prefetch_after(u);  // moves the window to start at u (and gathers u if needed)
  s.complete_gather(u);
}

void Engine::Impl::prefetch_after(int u) {
  // Prefetch window (DeepSpeed's stage3_prefetch_bucket_size): the units after u in the direction
  // of travel (ascending in forward, descending in backward) whose padded sizes add up to at most
  // prefetch_bucket_size elements, and never more gathered elements at once than
  // stage3_max_live_parameters. Both count padded elements; units already gathered or on their
  // way count toward the window. The scanned part [last, front] is kept between calls, so a pass
  // over the model scans each unit once.
  PrefetchFrontier& w = window;
  auto padded = [&](int v) { return layout.units[v].padded_numel; };
  auto persistent = [&](int v) { return layout.units[v].persistent; };
  const int d = w.last >= 0 && u <= w.last ? -1 : +1;
  const bool inside = w.valid && d == w.dir && w.last >= 0 &&
                      (d > 0 ? u > w.last && u <= w.front : u < w.last && u >= w.front);
  if (inside) {  // the window now starts after u: drop what lies between the old start and u
    for (int v = w.last + d; v != u + d; v += d)
      if (!persistent(v) && units[v].state != UnitState::sharded) w.ahead -= padded(v);
  } else {
    w.front = u;
    w.ahead = 0;
  }
  w.last = u;
  w.dir = d;
  w.valid = true;
  const bool needed_now = units[u].state == UnitState::sharded;
  if (needed_now) reserve_gather(u);
  const std::int64_t limit = settings.prefetch_window;
  const auto nu = static_cast<int>(layout.units.size());
  for (int v = w.front + d; v >= 0 && v < nu; v += d) {
    if (!persistent(v) && units[v].state == UnitState::sharded) {
      if (w.ahead + padded(v) > limit ||
          live_elements + padded(v) > settings.max_live)
        break;
      reserve_gather(v);
    }
    if (!persistent(v)) w.ahead += padded(v);
    w.front = v;
  }
  issue_gathers(needed_now);
}

void Engine::release(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "release");
  if (!s.policy.shard_params || s.layout.units[u].persistent) return;
  // A unit inside the scanned window given back early: the window's count is stale; rescan.
  const PrefetchFrontier& w = s.window;
  if (w.valid && u != w.last &&
      (w.dir > 0 ? u > w.last && u <= w.front : u < w.last && u >= w.front))
    s.window.valid = false;
  s.release_unit(u);
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
  return impl_->units[static_cast<std::size_t>(u)].state;
}

TensorView Engine::grad(int p) {
  const ParamLayout& pl = checked_param(impl_->layout, p, impl_->rank, "grad");
  ++impl_->trainer_calls;
  return param_view(impl_->grads_of_unit(pl.unit), pl);
}

void Engine::reduce_grads(int u) {
  Impl& s = *impl_;
  s.check_unit(u, "reduce_grads");
  UnitRun& run = s.units[u];
  if (run.reductions >= s.accumulation)
    throw Error(cat("reduce_grads called ", run.reductions + 1,
                    " times since the last step, but gradient_accumulation_steps is ",
                    s.accumulation, "; call step() after every ", s.accumulation, " micro-batches"),
                {.rank = s.rank, .unit = u});
  const Slice g = s.grads_of_unit(u);  // a unit with no gradient written still reduces its zeros
  ++s.stats.reductions;
  run.grads_fresh = false;
  ++run.reductions;
  s.reduce_log.push_back(u);
  s.bucket_arrived(u, g);
}

double Engine::loss_scale() const { return impl_->scaler ? impl_->scaler->scale() : 1.0; }

Ledger& Engine::ledger() { return impl_->ledger; }
EngineStats Engine::stats() const {
  return impl_->stats;
}

Engine::GroupAccounting Engine::comm_accounting_by_group() const {
  const Impl& s = *impl_;
  GroupAccounting g;
  if (s.secondary) g.secondary = s.secondary->accounting();
  if (!s.groups.shard) {
    g.shard = s.world.accounting();
    return g;
  }
  g.shard = s.groups.shard->accounting();
  g.replicate = s.groups.replicate->accounting();
  g.world = s.world.accounting();
  return g;
}

comm::Accounting Engine::comm_accounting() const {
  const GroupAccounting g = comm_accounting_by_group();
  comm::Accounting sum = g.shard;
  for (const comm::Accounting* a : {&g.replicate, &g.world, &g.secondary})
    for (std::size_t op = 0; op < comm::kOpCount; ++op) {
      sum.ops[op].calls += a->ops[op].calls;
      sum.ops[op].payload_bytes += a->ops[op].payload_bytes;
      sum.ops[op].wire_bytes += a->ops[op].wire_bytes;
      sum.ops[op].seconds += a->ops[op].seconds;
    }
  return sum;
}

void Engine::reset_comm_accounting() {
  impl_->world.reset_accounting();
  if (impl_->groups.shard) impl_->groups.shard->reset_accounting();
  if (impl_->groups.replicate) impl_->groups.replicate->reset_accounting();
  if (impl_->secondary) impl_->secondary->reset_accounting();
}

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
