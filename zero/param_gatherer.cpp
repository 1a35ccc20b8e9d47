// ParamGatherer (zero/param_gatherer.hpp): stage 3's gather/prefetch/release windows and the
// all-gather of the new params after the step.
#include "zero/param_gatherer.hpp"

#include <algorithm>
#include <cstdlib>

namespace zero {

ParamGatherer::ParamGatherer(EngineContext& ctx, ModelStates& states)
    : ctx_(ctx), states_(states), route_(make_gather_route(ctx)), units_(ctx.layout.units.size()) {
  const Layout& layout = ctx.layout;
  const auto nu = static_cast<int>(layout.units.size());
  if (ctx.policy.shard_params) {
    groups_.resize(static_cast<std::size_t>(nu));
    for (int u = 0; u < nu; ++u) {
      if (layout.units[u].persistent)
        units_[u].gathered =
            ctx.alloc(Category::params, bytes(layout.units[u].padded_numel, ctx.work_dtype()));
      else
        units_[u].state = UnitState::sharded;
    }
  }
  // The all-gather runs after the step: consecutive units on that path, in forward order, joined
  // while their padded sizes fit allgather_bucket_size (a larger unit is a run of its own).
  std::int64_t run_size = 0;
  for (int u = 0; u < nu; ++u) {
    if (!gathers_params(u)) continue;
    const std::int64_t n = layout.units[u].padded_numel;
    if (!runs_.empty() && runs_.back().last + 1 == u &&
        run_size + n <= ctx.settings.allgather_bucket) {
      runs_.back().last = u;
      run_size += n;
    } else {
      runs_.push_back({u, u});
      run_size = n;
    }
  }
}

ParamGatherer::~ParamGatherer() {
  // Never leave a gather in flight: the buffers it writes are about to be freed. A failed
  // collective already reported its error to the caller that issued it.
  for (UnitGather& g : units_) {
    try {
      if (g.gather.valid()) g.gather.wait();
    } catch (...) {
    }
  }
  for (GatherGroup& g : groups_) {
    try {
      if (g.handle.valid()) g.handle.wait();
    } catch (...) {
    }
  }
}

bool ParamGatherer::gathers_params(int u) const {
  const ParamsAfterStep after = ctx_.policy.after_step;
  return after == ParamsAfterStep::all_gather ||
         (after == ParamsAfterStep::update_shard && ctx_.layout.units[u].persistent);
}

Slice ParamGatherer::params_of_unit(int u) const {
  const auto& U = ctx_.layout.units[u];
  if (ctx_.policy.shard_params) {
    if (units_[u].state != UnitState::gathered)
      throw Error("its parameters are not gathered: call gather() before reading them (stage 3)",
                  {.rank = ctx_.rank, .unit = u});
    return slice(units_[u].gathered, ctx_.work_dtype(), 0, U.padded_numel);
  }
  return slice(states_.full_params(), ctx_.work_dtype(), U.offset, U.padded_numel);
}

void ParamGatherer::gather(int u) {
  if (!ctx_.policy.shard_params || ctx_.layout.units[u].persistent) return;
  prefetch_after(u);  // moves the window to start at u (and gathers u if needed)
  complete_gather(u);
}

void ParamGatherer::release(int u) {
  if (!ctx_.policy.shard_params || ctx_.layout.units[u].persistent) return;
  // A unit inside the scanned window given back early: the window's count is stale; rescan.
  const Frontier& w = window_;
  if (w.valid && u != w.last &&
      (w.dir > 0 ? u > w.last && u <= w.front : u < w.last && u >= w.front))
    window_.valid = false;
  release_unit(u);
}

void ParamGatherer::release_all() {
  if (ctx_.policy.shard_params)
    for (int u = 0; u < static_cast<int>(units_.size()); ++u)
      if (!ctx_.layout.units[u].persistent) release_unit(u);
  route_->params_changed();
  window_ = Frontier{};
}

void ParamGatherer::prefetch_after(int u) {
  // Prefetch window (DeepSpeed's stage3_prefetch_bucket_size): the units after u in the direction
  // of travel (ascending in forward, descending in backward) whose padded sizes add up to at most
  // prefetch_bucket_size elements, and never more gathered elements at once than
  // stage3_max_live_parameters. Both count padded elements; units already gathered or on their
  // way count toward the window. The scanned part [last, front] is kept between calls, so a pass
  // over the model scans each unit once.
  Frontier& w = window_;
  const Layout& layout = ctx_.layout;
  auto padded = [&](int v) { return layout.units[v].padded_numel; };
  auto persistent = [&](int v) { return layout.units[v].persistent; };
  const int d = w.last >= 0 && u <= w.last ? -1 : +1;
  const bool inside = w.valid && d == w.dir && w.last >= 0 &&
                      (d > 0 ? u > w.last && u <= w.front : u < w.last && u >= w.front);
  if (inside) {  // the window now starts after u: drop what lies between the old start and u
    for (int v = w.last + d; v != u + d; v += d)
      if (!persistent(v) && units_[v].state != UnitState::sharded) w.ahead -= padded(v);
  } else {
    w.front = u;
    w.ahead = 0;
  }
  w.last = u;
  w.dir = d;
  w.valid = true;
  const bool needed_now = units_[u].state == UnitState::sharded;
  if (needed_now) reserve_gather(u);
  const auto nu = static_cast<int>(layout.units.size());
  for (int v = w.front + d; v >= 0 && v < nu; v += d) {
    if (!persistent(v) && units_[v].state == UnitState::sharded) {
      if (!ctx_.settings.prefetches(w.ahead, live_elements_, padded(v))) break;
      reserve_gather(v);
    }
    if (!persistent(v)) w.ahead += padded(v);
    w.front = v;
  }
  issue_gathers(needed_now);
}

void ParamGatherer::reserve_gather(int u) {
  const auto& U = ctx_.layout.units[u];
  UnitGather& run = units_[u];
  const ScopeTimer t = ctx_.waiting();  // the gather's receive buffer is communication time
  run.gathered = ctx_.alloc_unset(Category::gathered, bytes(U.padded_numel, ctx_.work_dtype()));
  run.state = UnitState::gathering;
  live_elements_ += U.padded_numel;
  to_issue_.push_back(u);
}

void ParamGatherer::issue_gathers(bool first_alone) {
  // Handing collectives to the communicator (which may switch to its thread at once) is
  // communication time.
  const ScopeTimer t = ctx_.waiting();
  const std::vector<int> todo = std::move(to_issue_);
  to_issue_.clear();
  const Layout& layout = ctx_.layout;
  const DType wd = ctx_.work_dtype();
  const int G = ctx_.groups.shard_ranks;
  for (std::size_t i = 0; i < todo.size();) {
    const int u = todo[i];
    UnitGather& run = units_[u];
    const auto& U = layout.units[u];
    // Consecutive units in the order of travel that the route gathers from their primary shards
    // (which lie side by side in the shard buffer), up to allgather_bucket_size padded elements:
    // one all-gather. The unit the trainer waits for now goes alone, so that its compute starts
    // as soon as it is here; the prefetched ones behind it travel together.
    // Only small units are joined (kSmallGatherUnit): measured here, 256 units of 16k params
    // gathered together ran 1.2-1.4x faster, 4 units of 262k params 0.6x slower than alone.
    std::size_t j = i + 1;
    std::int64_t size = U.padded_numel;
    auto small = [&](int v) { return layout.units[v].padded_numel <= kSmallGatherUnit; };
    if (route_->joins_primary(u) && !(first_alone && i == 0) && small(u))
      while (j < todo.size() && std::abs(todo[j] - todo[j - 1]) == 1 &&
             route_->joins_primary(todo[j]) && small(todo[j]) &&
             size + layout.units[todo[j]].padded_numel <= ctx_.settings.allgather_bucket) {
        size += layout.units[todo[j]].padded_numel;
        ++j;
      }
    if (j == i + 1) {
      run.gather = route_->gather(u, primary(U.shard_offset, U.shard_numel, run.primary),
                                  slice(run.gathered, wd, 0, U.padded_numel));
      i = j;
      continue;
    }
    const int first = std::min(todo[i], todo[j - 1]), last = std::max(todo[i], todo[j - 1]);
    const PackedRun packed{layout, first, last};
    GatherGroup& g = groups_[static_cast<std::size_t>(first)];
    g.first = first;
    g.last = last;
    g.packed = ctx_.alloc_unset(Category::gathered, bytes(G * packed.shard(), wd));
    g.handle = ctx_.groups.shard->all_gather_async(
        primary(layout.units[first].shard_offset, packed.shard(), g.primary).cview(),
        slice(g.packed, wd, 0, G * packed.shard()).view());
    for (int v = first; v <= last; ++v) units_[v].group = first;
    i = j;
  }
}

void ParamGatherer::complete_gather(int u) {
  UnitGather& run = units_[u];
  if (run.state != UnitState::gathering) return;
  if (run.group < 0) {
    {
      const ScopeTimer t = ctx_.waiting();
      run.gather.wait();
    }
    run.primary.reset();
    run.state = UnitState::gathered;
    route_->gathered(u, run.gathered);
    return;
  }
  GatherGroup& g = groups_[static_cast<std::size_t>(run.group)];
  {
    const ScopeTimer t = ctx_.waiting();
    g.handle.wait();
  }
  g.primary.reset();
  const PackedRun packed{ctx_.layout, g.first, g.last};
  packed.copy(*ctx_.backend, ctx_.groups.shard_ranks, ctx_.work_dtype(),
              static_cast<std::byte*>(g.packed.data()), g.first, g.last,
              [&](int v) { return static_cast<std::byte*>(units_[v].gathered.data()); }, false);
  g.packed.reset();
  for (int v = g.first; v <= g.last; ++v) {
    units_[v].group = -1;
    units_[v].state = UnitState::gathered;
    route_->gathered(v, units_[v].gathered);
  }
}

void ParamGatherer::release_unit(int u) {
  UnitGather& run = units_[u];
  if (run.state == UnitState::sharded) return;
  complete_gather(u);
  run.gathered.reset();
  run.state = UnitState::sharded;
  live_elements_ -= ctx_.layout.units[u].padded_numel;
}

Slice ParamGatherer::primary(std::int64_t offset, std::int64_t count, Allocation& staged) {
  const DType wd = ctx_.work_dtype();
  const Slice shard = slice(states_.shard_params(), wd, offset, count);
  if (shard.memory == ctx_.mem()) return shard;
  staged = ctx_.alloc_unset(Category::gathered, bytes(count, wd));
  ctx_.backend->upload(staged.data(), shard.data, static_cast<std::size_t>(bytes(count, wd)));
  return slice(staged, wd, 0, count);
}

std::byte* ParamGatherer::full_params_of(int u) const {
  if (ctx_.policy.shard_params) return static_cast<std::byte*>(units_[u].gathered.data());
  return static_cast<std::byte*>(states_.full_params().data()) +
         bytes(ctx_.layout.units[u].offset, ctx_.work_dtype());
}

void ParamGatherer::all_gather_params(int u, const Slice& shard_values) {
  const auto& U = ctx_.layout.units[u];
  const Slice full{full_params_of(u), U.padded_numel, ctx_.work_dtype(), ctx_.mem()};
  const ScopeTimer t = ctx_.waiting();
  ctx_.groups.shard->all_gather(shard_values.cview(), full.view());
}

void ParamGatherer::all_gather_run(const Run& run, const Allocation& staged) {
  const PackedRun packed{ctx_.layout, run.first, run.last};
  const std::int64_t n = packed.shard();
  const DType wd = ctx_.work_dtype();
  if (run.first == run.last) {
    all_gather_params(run.first, slice(staged, wd, 0, n));
    return;
  }
  // In place: this rank's new shards are block shard_rank of the packed output already.
  const int G = ctx_.groups.shard_ranks;
  {
    const Slice out = slice(staged, wd, 0, G * n);
    const ScopeTimer t = ctx_.waiting();
    ctx_.groups.shard->all_gather(slice(staged, wd, ctx_.groups.shard_rank * n, n).cview(),
                                  out.view());
  }
  packed.copy(*ctx_.backend, G, wd, static_cast<std::byte*>(staged.data()), run.first, run.last,
              [&](int u) { return full_params_of(u); }, false);
}

}  // namespace zero
