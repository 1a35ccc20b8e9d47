// Engine: the public calls, each handed to the object whose job it is (zero/engine_impl.hpp),
// init_params, and the narrow state a checkpoint reads (zero/engine_state.hpp).
#include <algorithm>
#include <cstring>

#include "zero/engine_impl.hpp"
#include "zero/engine_state.hpp"
#include "base/fnv.hpp"

namespace zero {

Engine::Engine(const Config& config, comm::Communicator& world, std::vector<UnitSpec> units,
               EngineOptions options)
    : impl_(std::make_unique<Impl>(config, world, std::move(units), std::move(options))) {}

// Never leaves a collective in flight: the reducer, then the gatherer, wait for theirs as they go.
Engine::~Engine() = default;

const Layout& Engine::layout() const { return impl_->ctx.layout; }
const Config& Engine::config() const { return impl_->ctx.config; }
const Settings& Engine::settings() const { return impl_->ctx.settings; }
int Engine::stage() const { return impl_->ctx.config.zero.stage; }
int Engine::rank() const { return impl_->ctx.rank; }
int Engine::ranks() const { return impl_->ctx.ranks; }
int Engine::settings_shard_size() const { return impl_->ctx.groups.shard_ranks; }

namespace {

// This rank's part of every param's fill, written into `host` (its shards, or everything at
// stage 0), and what the ranks agree on before anything is stored: (param, element) of the first
// non-finite value, then a digest of each param's values.
std::vector<std::int64_t> fill_master(const EngineContext& s, std::vector<float>& host,
                                      const std::function<void(int, std::span<float>)>& fill) {
  const std::size_t np = s.layout.params.size();
  std::vector<std::int64_t> mine(2 + np, 0);
  std::int64_t* bad = mine.data();  // (param, element) of the first non-finite value, or -1
  bad[0] = bad[1] = -1;
  std::vector<float> values;
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
      for (const ShardPiece& piece : s.layout.shard_pieces(p.unit, s.groups.shard_rank)) {
        if (piece.param != static_cast<int>(pi)) continue;
        std::copy_n(values.data() + piece.param_offset, piece.count,
                    host.data() + U.shard_offset + piece.shard_offset);
      }
    } else {
      std::copy(values.begin(), values.end(), host.data() + p.global_offset);
    }
  }
  return mine;
}

// Every rank's fill finite and the same: else the same error on every rank.
void check_fills_agree(EngineContext& s, const std::vector<std::int64_t>& mine) {
  const std::size_t np = s.layout.params.size();
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
}

}  // namespace

void Engine::init_params(const std::function<void(int, std::span<float>)>& fill) {
  Impl& s = *impl_;
  // This rank's master values (its shards, or everything at stage 0), built on the host and
  // copied to where the master lives in one piece (counting: nothing to build). Agreed before
  // anything is stored or gathered, so every rank throws the same error and none waits in a
  // collective for a rank that has thrown. Every rank keeps only its shard of what its fill
  // produced (stages 1-3), or applies the same updates to it (stage 0, whose step relies on the
  // replicas being equal), so a fill that differs between ranks would train a model no rank
  // ever saw whole.
  std::vector<float> host(s.ctx.options.count_only ? 0 : s.states.master.bytes() / sizeof(float),
                          0.0f);
  check_fills_agree(s.ctx, fill_master(s.ctx, host, fill));
  s.ctx.state_backend().upload(s.states.master.data(), host.data(), host.size() * sizeof(float));
  s.params_from_master();
}

// The working params are the master weights rounded to the working dtype (init_params, and a
// checkpoint's load).
void Engine::Impl::params_from_master() {
  const Layout& layout = ctx.layout;
  const DType wd = ctx.work_dtype();
  const float* values = static_cast<const float*>(states.master.data());
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    const auto& U = layout.units[u];
    const int ui = static_cast<int>(u);
    const float* src = values + ctx.state_offset(ui);
    // (fp32 params that are the master buffer: the store copies nothing, dst being src.)
    if (ctx.policy.after_step == ParamsAfterStep::update_full) {
      store(slice(states.full_params(), wd, U.offset, U.padded_numel), src);
    } else if (!gatherer.gathers_params(ui)) {
      store(slice(states.shard_params(), wd, U.shard_offset, U.shard_numel), src);
    } else {
      Allocation tmp = ctx.alloc(Category::buckets, bytes(U.shard_numel, wd));
      Slice shard = slice(tmp, wd, 0, U.shard_numel);
      store(shard, src);
      gatherer.all_gather_params(ui, shard);
    }
  }
}

void Engine::gather(int u) {
  impl_->ctx.check_unit(u, "gather");
  ++impl_->ctx.trainer_calls;
  impl_->gatherer.gather(u);
}

void Engine::release(int u) {
  impl_->ctx.check_unit(u, "release");
  impl_->gatherer.release(u);
}

namespace {

const ParamLayout& checked_param(const Layout& layout, int p, int rank, const char* what) {
  if (p < 0 || p >= static_cast<int>(layout.params.size()))
    throw Error(cat(what, "(", p, "): no such parameter; the model has ", layout.params.size()),
                {.rank = rank});
  return layout.params[p];
}

// Param `pl`'s elements inside the buffer of its unit, as the trainer sees them: an emulated
// device's memory is host memory, which only a host trainer can compute on, so it is tagged host
// there (the views the engine hands its communicator stay device-tagged).
TensorView param_view(const Slice& unit, const ParamLayout& pl, const EngineOptions& o) {
  return TensorView{static_cast<std::byte*>(unit.data) + bytes(pl.offset, unit.dtype), pl.numel,
                    unit.dtype, pl.shape, o.emulate_device ? comm::Memory::host : unit.memory};
}

}  // namespace

TensorView Engine::param(int p) const {
  const ParamLayout& pl = checked_param(impl_->ctx.layout, p, impl_->ctx.rank, "param");
  return param_view(impl_->gatherer.params_of_unit(pl.unit), pl, impl_->ctx.options);
}

UnitState Engine::unit_state(int u) const {
  impl_->ctx.check_unit(u, "unit_state");
  return impl_->gatherer.state(u);
}

TensorView Engine::grad(int p) {
  const ParamLayout& pl = checked_param(impl_->ctx.layout, p, impl_->ctx.rank, "grad");
  ++impl_->ctx.trainer_calls;
  return param_view(impl_->reducer.grads_of_unit(pl.unit), pl, impl_->ctx.options);
}

void Engine::reduce_grads(int u) {
  impl_->ctx.check_unit(u, "reduce_grads");
  impl_->reducer.reduce_grads(u);
}

StepReport Engine::step(std::optional<double> loss) { return impl_->step.run(loss); }

double Engine::loss_scale() const {
  const auto& scaler = impl_->step.scaler();
  return scaler ? scaler->scale() : 1.0;
}

Ledger& Engine::ledger() { return impl_->ctx.ledger; }
EngineStats Engine::stats() const { return impl_->ctx.stats; }

Engine::GroupAccounting Engine::comm_accounting_by_group() const {
  const ProcessGroups& groups = impl_->ctx.groups;
  GroupAccounting g;
  if (const comm::Communicator* own = impl_->gatherer.own_group()) g.secondary = own->accounting();
  if (!groups.split.shard) {
    g.shard = groups.world.accounting();
    return g;
  }
  g.shard = groups.split.shard->accounting();
  g.replicate = groups.split.replicate->accounting();
  g.world = groups.world.accounting();
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
  ProcessGroups& groups = impl_->ctx.groups;
  groups.world.reset_accounting();
  if (groups.split.shard) groups.split.shard->reset_accounting();
  if (groups.split.replicate) groups.split.replicate->reset_accounting();
  if (comm::Communicator* own = impl_->gatherer.own_group()) own->reset_accounting();
}

MemoryReport Engine::memory() const {
  const EngineContext& s = impl_->ctx;
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

std::vector<float> Engine::gather_master(int p) {
  EngineContext& s = impl_->ctx;
  if (p < 0 || p >= static_cast<int>(s.layout.params.size()))
    throw Error(cat("gather_master(", p, "): no such parameter"), {.rank = s.rank});
  const ParamLayout& pl = s.layout.params[p];
  const auto& U = s.layout.units[pl.unit];
  const float* master = impl_->states.master.as<float>().data();
  std::vector<float> out(static_cast<std::size_t>(pl.numel));
  if (!s.policy.shard_optimizer) {
    s.backend->download(out.data(), master + pl.global_offset, out.size() * sizeof(float));
    return out;
  }
  const float* own = master + U.shard_offset;
  Allocation on_device;  // optimizer offload: the shard goes to the device for the collective
  if (s.state_mem() != s.mem()) {
    on_device = s.alloc(Category::other, bytes(U.shard_numel, DType::f32));
    s.backend->upload(on_device.data(), own, on_device.bytes());
    own = on_device.as<float>().data();
  }
  const comm::ConstView shard{own, static_cast<std::size_t>(U.shard_numel), DType::f32, s.mem()};
  if (s.mem() == comm::Memory::host) {  // an inspection copy: the trainer's memory, not the engine's
    std::vector<float> unit(static_cast<std::size_t>(U.padded_numel));
    const ScopeTimer t = s.waiting();
    s.groups.shard->all_gather(shard, comm::View{unit.data(), unit.size(), DType::f32});
    std::copy_n(unit.begin() + pl.offset, pl.numel, out.begin());
    return out;
  }
  Allocation unit = s.alloc(Category::other, bytes(U.padded_numel, DType::f32));
  {
    const ScopeTimer t = s.waiting();
    s.groups.shard->all_gather(shard, slice(unit, DType::f32, 0, U.padded_numel).view());
  }
  s.backend->download(out.data(), unit.as<float>().data() + pl.offset, out.size() * sizeof(float));
  return out;
}

std::uint64_t Engine::master_checksum() {
  Fnv1a h;
  for (int p = 0; p < static_cast<int>(impl_->ctx.layout.params.size()); ++p) {
    for (float x : gather_master(p)) {
      std::uint32_t b;
      std::memcpy(&b, &x, 4);
      h.add(b, 4);
    }
  }
  return h.value;
}

// --- the checkpoint's view ----------------------------------------------------------------------

EngineState CheckpointAccess::state(Engine& e) { return EngineState(*e.impl_); }

const Config& EngineState::config() const { return s_.ctx.config; }
const Layout& EngineState::layout() const { return s_.ctx.layout; }
int EngineState::rank() const { return s_.ctx.rank; }
int EngineState::ranks() const { return s_.ctx.ranks; }
int EngineState::shard_rank() const { return s_.ctx.groups.shard_rank; }
int EngineState::shard_ranks() const { return s_.ctx.groups.shard_ranks; }
bool EngineState::writes_pieces() const {
  return s_.ctx.groups.replicate == nullptr || s_.ctx.groups.replicate->rank() == 0;
}
bool EngineState::counting() const { return s_.ctx.options.count_only; }
bool EngineState::between_steps() const { return s_.reducer.idle(); }
bool EngineState::sharded() const { return s_.ctx.policy.shard_optimizer; }
int EngineState::tensors() const { return 1 + state_buffers(s_.ctx.config.optimizer.type); }
int EngineState::tensors(int param) const {
  const ParamLayout& p = s_.ctx.layout.params[static_cast<std::size_t>(param)];
  return SecondMomentIndex::holds(p) ? tensors() : 2;
}

namespace {
Allocation& state_tensor(ModelStates& m, int t) {
  return t == 0 ? m.master : t == 1 ? m.exp_avg : m.exp_avg_sq;
}
}  // namespace

std::int64_t EngineState::elements(int t) const {
  return static_cast<std::int64_t>(state_tensor(s_.states, t).bytes() / sizeof(float));
}

std::int64_t EngineState::index(int t, int u, std::int64_t unit_pos) const {
  const auto& U = s_.ctx.layout.units[static_cast<std::size_t>(u)];
  const std::int64_t at = unit_pos - (sharded() ? U.shard_range(shard_rank()).begin : 0);
  if (t < 2) return s_.ctx.state_offset(u) + at;
  const SecondMomentIndex& v = s_.states.second_moment;
  return v.unit_offset(u) + v.in_unit(u, at);
}

void EngineState::download(int t, std::int64_t at, std::int64_t count, void* host) const {
  s_.ctx.state_backend().download(host, state_tensor(s_.states, t).as<float>().data() + at,
                           static_cast<std::size_t>(count) * sizeof(float));
}

void EngineState::upload(int t, const float* host, std::int64_t count) {
  s_.ctx.state_backend().upload(state_tensor(s_.states, t).data(), host,
                         static_cast<std::size_t>(count) * sizeof(float));
}

EngineState::Counters EngineState::counters() const {
  const EngineStats& st = s_.ctx.stats;
  return {st.applied_steps, st.skipped_steps, st.consecutive_skipped_steps};
}

void EngineState::restore(const Counters& c) {
  EngineStats& st = s_.ctx.stats;
  st.applied_steps = c.applied_steps;
  st.skipped_steps = c.skipped_steps;
  st.consecutive_skipped_steps = c.consecutive_skipped;
}

std::optional<LossScaler>& EngineState::scaler() { return s_.step.scaler(); }
void EngineState::all_gather_host(const void* in, void* out, std::size_t count, DType dtype) {
  s_.ctx.all_gather_host(in, out, count, dtype);
}
int EngineState::agreeing_ranks() const { return s_.ctx.agreeing_ranks(); }
void EngineState::log(const std::string& line) const { s_.ctx.log(line); }
void EngineState::params_from_master() { s_.params_from_master(); }
Allocation* EngineState::residual() { return s_.reducer.residual(); }

}  // namespace zero
