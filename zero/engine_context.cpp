// EngineContext and the helpers every engine object shares (zero/engine_context.hpp).
#include "zero/engine_context.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>

#include "base/fnv.hpp"
#include "zero/muon.hpp"
#include "zero/optimizer.hpp"

namespace zero {

Slice slice(const Allocation& a, DType dtype, std::int64_t offset, std::int64_t count) {
  auto* base = static_cast<std::byte*>(a.data());
  return Slice{base + offset * static_cast<std::int64_t>(size_of(dtype)), count, dtype, a.where()};
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

ProcessGroups::ProcessGroups(comm::Communicator& w, const Settings& s) : world(w) {
  if (s.replicas > 1) {
    split = world.split_groups(s.shard_size);
    shard = split.shard.get();
    replicate = split.replicate.get();
  } else {
    shard = &world;
  }
  shard_rank = shard->rank();
  shard_ranks = shard->size();
  if (s.secondary_size > 1) {
    secondary_owned = world.split_groups(s.secondary_size).shard;
    secondary = secondary_owned.get();
  }
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

Settings resolve_for(const Config& c, const comm::Communicator& world, const EngineOptions& o) {
  c.validate_world(world.size());
  return resolve_settings(c, world.size(), o.align_elements, o.memory == comm::Memory::device);
}

// Checks that every rank registered the same units: a mismatch would pair collectives of
// different units and sum unrelated gradients.
void check_same_layout(EngineContext& s) {
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

// The backend's allocator in the ledger slot of the memory it serves (host: the ledger's own
// heap allocator unless the backend brings one).
EngineContext::Allocators EngineContext::allocators_of(Backend& b, bool pinned) {
  Allocators a;
  std::unique_ptr<Allocator> mine = b.make_allocator();
  (mine && mine->where() == comm::Memory::host ? a.host : a.device) = std::move(mine);
  if (!a.host) a.host = b.make_host_allocator(pinned);
  return a;
}

EngineContext::EngineContext(const Config& c, comm::Communicator& w, std::vector<UnitSpec> specs,
                             EngineOptions o)
    : config(c),
      options(std::move(o)),
      backend(make_backend(options, w)),
      host_backend(make_host_backend(*backend)),
      allocators(allocators_of(*backend, c.zero.offload_pin_memory)),
      ledger(std::move(allocators.host), std::move(allocators.device)),
      rank(w.rank()),
      ranks(w.size()),
      settings(resolve_for(config, w, options)),
      groups(w, settings) {
  if (config.max_consecutive_skipped_steps < 0)
    throw Error(cat("expected >= 0 (0: never stop), got ", config.max_consecutive_skipped_steps),
                {.key = "max_consecutive_skipped_steps"});
  if (!options.log)
    options.log = [](const std::string& line) { std::cerr << line << '\n'; };
  for (const std::string& note : settings.notes) log("warning: " + note);  // once, rank 0
  settings.layout.whole_params = muon_params(specs, config.optimizer);  // Muon's owned matrices
  layout = make_layout(specs, settings.layout);
  warn_if_nothing_sharded();
  check_same_layout(*this);
}

// Stage 3 where every unit is under stage3_param_persistence_threshold keeps every param gathered
// on every rank: a small model asked to run at stage 3 would otherwise shard nothing in silence.
void EngineContext::warn_if_nothing_sharded() const {
  const auto& units = layout.units;
  if (settings.stage != 3 || units.empty() ||
      !std::all_of(units.begin(), units.end(), [](const UnitLayout& u) { return u.persistent; }))
    return;
  log(cat("warning: stage 3 shards no parameter: every unit has fewer elements than "
          "stage3_param_persistence_threshold (",
          settings.layout.persistence_threshold,
          "), so each stays gathered on every rank; set it lower (0 shards every unit)"));
}

void EngineContext::check_unit(int u, const char* what) const {
  if (u < 0 || u >= static_cast<int>(layout.units.size()))
    throw Error(cat(what, "(", u, "): no such unit; the model has ", layout.units.size(), " units"),
                {.rank = rank});
}

void EngineContext::log(const std::string& line) const {
  if (rank == 0 || options.log_all_ranks) options.log(line);
}

void EngineContext::all_gather_host(const void* in, void* out, std::size_t count, DType dtype) {
  comm::Communicator& world = groups.world;
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

void EngineContext::record_comm_scratch() {
  // The communicators' staging only grows; count what it grew by since the last look.
  auto now = static_cast<std::int64_t>(groups.world.scratch_bytes_peak());
  const comm::Communicator* subgroups[] = {groups.split.shard.get(), groups.split.replicate.get(),
                                           groups.secondary};
  for (const comm::Communicator* g : subgroups)
    if (g) now += static_cast<std::int64_t>(g->scratch_bytes_peak());
  if (now > comm_scratch_recorded) {
    ledger.record_external(Category::comm_staging, now - comm_scratch_recorded,
                           groups.world.memory());
    comm_scratch_recorded = now;
  }
}

std::int64_t EngineContext::state_offset(int u) const {
  return policy.shard_optimizer ? layout.units[u].shard_offset : layout.units[u].offset;
}
std::int64_t EngineContext::state_count(int u) const {
  return policy.shard_optimizer ? layout.units[u].shard_numel : layout.units[u].padded_numel;
}
std::int64_t EngineContext::reduced_offset(int u) const {
  return policy.gather_grads ? layout.units[u].offset : layout.units[u].shard_offset;
}

ModelStates::ModelStates(EngineContext& ctx)
    : second_moment(ctx.layout, ctx.policy.shard_optimizer, ctx.groups.shard_rank),
      params_alias_master(ctx.settings.params_alias_master) {
  const Layout& layout = ctx.layout;
  const std::int64_t state_n = ctx.policy.shard_optimizer ? layout.shard_numel : layout.padded_numel;
  // Optimizer offload: the master and the moments in host memory (zero/settings.hpp).
  auto state = [&](Category c, std::int64_t n) {
    return ctx.ledger.allocate(c, static_cast<std::size_t>(bytes(n, DType::f32)), ctx.state_mem());
  };
  master = state(Category::master, state_n);
  exp_avg = state(Category::optimizer_m, state_n);
  if (state_buffers(ctx.config.optimizer.type) > 1)  // Lion keeps one
    exp_avg_sq = state(Category::optimizer_v, second_moment.elements());
  if (params_alias_master) return;
  if (ctx.policy.shard_params)
    params_shard = ctx.ledger.allocate(
        Category::params, static_cast<std::size_t>(bytes(layout.shard_numel, ctx.work_dtype())),
        ctx.param_shard_mem());
  else
    params_full = ctx.alloc(Category::params, bytes(layout.padded_numel, ctx.work_dtype()));
}

}  // namespace zero
