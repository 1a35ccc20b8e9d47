// The memory planner (zero/planner.hpp): ZeRO's formulas for what persists, term by term, and
// for what does not, the engine's own count (planner_run.cpp). tests/zero/test_planner_engine.cpp
// compares the plan with real runs' ledgers, byte for byte, at every stage and at 1 to 4 ranks.
#include "zero/planner.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <stdexcept>

#include "base/error.hpp"
#include "zero/muon.hpp"
#include "zero/planner_detail.hpp"
#include "zero/settings.hpp"
#include "zero/stage_policy.hpp"

namespace zero {

using plan_detail::add;
using plan_detail::Checked;
using plan_detail::TooLarge;
using plan_detail::with_commas;

std::int64_t count_params(const std::vector<UnitSpec>& units) {
  std::int64_t n = 0;
  for (const auto& u : units)
    for (const auto& p : u.params) {
      std::int64_t k = 1;
      for (auto d : p.shape)
        if (d < 0 || __builtin_mul_overflow(k, d, &k))
          throw Error(cat("parameter '", p.name, "' has a negative dimension or more than "
                          "2^63 - 1 elements"));
      if (__builtin_add_overflow(n, k, &n))
        throw Error("the model has more than 2^63 - 1 parameters: too large to plan");
    }
  return n;
}

std::vector<UnitSpec> uniform_units(std::int64_t params, int units) {
  if (params < 1) throw Error(cat("parameter count must be >= 1, got ", params));
  if (units < 1) throw Error(cat("units must be >= 1, got ", units));
  if (units > params)
    throw Error(cat("cannot cut ", params, " parameters into ", units, " units"));
  if (units > kMaxPlanUnits)
    throw Error(cat(units, " units is more than the planner handles (at most ", kMaxPlanUnits,
                    ": it builds the engine's layout, an entry per unit)"));
  std::vector<UnitSpec> out;
  out.reserve(static_cast<std::size_t>(units));
  for (int u = 0; u < units; ++u) {
    const std::int64_t n = params / units + (u < params % units ? 1 : 0);
    const std::string name = "unit" + std::to_string(u);
    out.push_back({name, {{name + ".weight", {n}}}});
  }
  return out;
}

int state_buffers(PlanOptimizer o) {
  return o == PlanOptimizer::sgd_momentum || o == PlanOptimizer::lion ? 1 : 2;
}

PlanOptimizer plan_optimizer_of(OptimizerType t) {
  return t == OptimizerType::lamb   ? PlanOptimizer::lamb
         : t == OptimizerType::lion ? PlanOptimizer::lion
         : t == OptimizerType::muon ? PlanOptimizer::muon
                                    : PlanOptimizer::adam;
}

PlanInput plan_input_from_config(const Config& config, int ranks) {
  PlanInput in;
  in.ranks = ranks;
  in.config = config;
  in.optimizer = plan_optimizer_of(config.optimizer.type);
  return in;
}

namespace {

// What the planner checks itself: the ranks, the model and the staging. Every rule of the
// settings is resolve_settings's.
void validate(const PlanInput& in) {
  if (in.ranks < 1) throw Error(cat("ranks: expected >= 1, got ", in.ranks));
  if (in.ranks_per_node < 1)
    throw Error(cat("ranks per node: expected >= 1, got ", in.ranks_per_node));
  if (in.activation_bytes < 0)
    throw Error(cat("activation bytes: expected >= 0, got ", in.activation_bytes));
  if (in.comm_chunk_bytes < 1 || in.comm_pipeline_depth < 1)
    throw Error(cat("comm staging: expected chunk bytes and pipeline depth >= 1, got ",
                    in.comm_chunk_bytes, " and ", in.comm_pipeline_depth));
  if (in.units.empty()) throw Error("the model has no units");
  // The layout is a few hundred bytes per unit and tensor: refuse before building it.
  if (static_cast<std::int64_t>(in.units.size()) > kMaxPlanUnits)
    throw Error(cat("the model has ", in.units.size(), " units, more than the planner handles (",
                    kMaxPlanUnits, ")"));
  std::int64_t tensors = 0;
  for (const auto& u : in.units) tensors += static_cast<std::int64_t>(u.params.size());
  if (tensors > kMaxPlanTensors)
    throw Error(cat("the model has ", tensors, " parameter tensors, more than the planner handles (",
                    kMaxPlanTensors, ")"));
}

// The input's settings, resolved as the engine resolves them; a reduce dtype the precision
// cannot use is named as the planner's callers know it.
Settings settle(const PlanInput& in) {
  validate(in);
  try {
    return resolve_settings(in.config, in.ranks, in.align_elements, in.device);
  } catch (const Error& e) {
    if (e.where().key == "communication_data_type") throw Error(cat("reduce dtype: ", e.what()));
    throw;
  }
}

struct UnitSizes {
  std::int64_t numel = 0, padded_numel = 0, shard_numel = 0;
  bool persistent = false;
};
struct Sizes {
  std::vector<UnitSizes> units;
  MuonLoad muon;  // Muon's Newton-Schulz FLOPs and matrix elements by owner (shard rank)
  std::int64_t numel = 0, padded_numel = 0, shard_numel = 0;
};

// The engine's layout (make_layout) of the units, by distinct shape: a unit's padding depends on
// its own parameters' shapes, the shard count and the alignment only, never on where it sits, so
// each distinct unit is laid out once and repeated. A million equal units cost one layout entry.
Sizes lay_out(const std::vector<UnitSpec>& units, const LayoutOptions& lo) {
  std::map<std::vector<std::vector<std::int64_t>>, int> index;  // shapes -> distinct unit
  std::vector<UnitSpec> distinct;
  std::vector<int> which(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::vector<std::vector<std::int64_t>> key;
    key.reserve(units[u].params.size());
    for (const auto& p : units[u].params) {
      key.push_back(p.shape);
      if (std::ranges::count(lo.whole_params, p.name)) key.back().push_back(-1);  // owned whole
    }
    auto [it, fresh] = index.emplace(std::move(key), static_cast<int>(distinct.size()));
    if (fresh) distinct.push_back(units[u]);
    which[u] = it->second;
  }
  const Layout L = make_layout(distinct, lo);
  Sizes out;
  out.units.reserve(units.size());
  for (int d : which) {
    const UnitLayout& U = L.units[static_cast<std::size_t>(d)];
    add_muon_load(L, d, out.muon);
    out.units.push_back({U.numel, U.padded_numel, U.shard_numel, U.persistent});
    if (__builtin_add_overflow(out.numel, U.numel, &out.numel) ||
        __builtin_add_overflow(out.padded_numel, U.padded_numel, &out.padded_numel))
      throw TooLarge(cat("too large to plan: the model's padded size overflows 64-bit element "
                         "counts (", units.size(), " units over ", lo.shard_ranks, " ranks)"));
  }
  out.shard_numel = out.padded_numel / lo.shard_ranks;
  return out;
}

// Whether the engine's prefetch rule gathers any unit ahead in this layout: at a gather of a
// unit, with nothing ahead yet and that unit live, the next sharded unit in the direction of
// travel (forward, then backward) is gathered if Settings::prefetches says so.
bool prefetches_any(const Sizes& L, const Settings& set) {
  if (!set.policy.shard_params) return false;
  std::int64_t previous = -1;  // the last sharded unit's padded size
  for (const UnitSizes& u : L.units) {
    if (u.persistent) continue;
    if (previous >= 0 && (set.prefetches(0, previous, u.padded_numel) ||
                          set.prefetches(0, u.padded_numel, previous)))
      return true;
    previous = u.padded_numel;
  }
  return false;
}

// The plan's terms as they are written: each added with checked arithmetic to its memory space
// and category, and so is each space's running sum, so that the sums PlanBytes computes (model
// states, totals) cannot wrap either.
class Terms {
 public:
  Terms(Plan& plan, Checked checked) : plan_(plan), ck_(std::move(checked)) {}

  void add(std::string category, std::string name, std::string formula, std::int64_t b,
           bool on_host = false) {
    PlanBytes& space = on_host ? plan_.host : plan_.device;
    std::int64_t& sum = on_host ? host_sum_ : dev_sum_;
    sum = ck_.add(sum, b, name);
    std::int64_t& slot = category == "params"      ? space.params
                         : category == "grads"     ? space.grads
                         : category == "master"    ? space.master
                         : category == "optimizer" ? space.optimizer
                         : category == "buffers"   ? space.buffers
                                                   : space.activations;
    slot += b;
    plan_.terms.push_back({std::move(category), std::move(name), std::move(formula), b, on_host});
  }
  // A buffer held for the whole run (none when b is 0); the device's are summed apart, for the
  // peak and the check against the engine.
  void buffer(std::string name, std::string formula, std::int64_t b, bool on_host = false) {
    if (b == 0) return;
    if (!on_host) persistent_buffers_ = ck_.add(persistent_buffers_, b, name);
    add("buffers", std::move(name), std::move(formula), b, on_host);
  }
  std::int64_t bytes(std::int64_t per, std::int64_t count, std::string_view what) const {
    return ck_.mul(per, count, what);
  }
  std::int64_t persistent_buffers() const { return persistent_buffers_; }
  const Checked& checked() const { return ck_; }

 private:
  Plan& plan_;
  Checked ck_;
  std::int64_t dev_sum_ = 0, host_sum_ = 0, persistent_buffers_ = 0;
};

// What the formulas read: the dtypes' sizes and names, Ψp (padded), Ψs (a shard) and the count
// the optimizer's state covers, as numbers and as the text the terms print.
struct Formula {
  StagePolicy pol;
  bool offload = false;         // the optimizer's state, its fp32 gradient and update on the host
  bool offload_params = false;  // stage 3's 16-bit param shards on the host
  std::int64_t w = 0, r = 0;  // bytes of the working and the reduce dtype
  std::string wn, rn;         // their names
  std::int64_t P = 0, Sh = 0, state = 0;
  std::int64_t v = 0;  // Muon: AdamW's v (zero/muon_state.hpp); else `state`
  std::string Ps, Ss, state_name, state_count;
};

Formula formula_of(const Settings& set, const Sizes& L) {
  Formula f;
  f.pol = set.policy;
  f.offload = set.offload;
  f.offload_params = set.offload_params;
  f.w = static_cast<std::int64_t>(size_of(set.work_dtype));
  f.r = static_cast<std::int64_t>(size_of(set.reduce_dtype));
  f.wn = std::string(name_of(set.work_dtype));
  f.rn = std::string(name_of(set.reduce_dtype));
  f.P = L.padded_numel;
  f.Sh = L.shard_numel;
  f.state = f.pol.shard_optimizer ? f.Sh : f.P;
  f.v = second_moment_elements(f.state, L.muon.elements, set.layout.shard_ranks,
                               f.pol.shard_optimizer);
  f.Ps = with_commas(f.P);
  f.Ss = with_commas(f.Sh);
  f.state_name = f.pol.shard_optimizer ? "Ψs" : "Ψp";
  f.state_count = f.pol.shard_optimizer ? f.Ss : f.Ps;
  return f;
}

// The working params: full (stages 0-2) or the shard and the persistent units (stage 3). fp32
// training at stage 0 (and stage 3's shard) updates the master weights in place: the working
// params are the master buffer, not a copy.
void add_params(Terms& t, const Formula& f, const Sizes& L, const Settings& set) {
  std::int64_t persistent_full = 0;
  for (const auto& U : L.units)
    if (U.persistent) persistent_full += U.padded_numel;
  const bool params_alias_master = set.params_alias_master;
  const std::int64_t w = f.w;
  if (!f.pol.shard_params) {
    if (params_alias_master)
      t.add("params", "fp32 params (are the master weights)", "0 (no copy)", 0);
    else
      t.add("params", f.wn + " params (full)", cat(w, " B x Ψp = ", w, " x ", f.Ps),
            t.bytes(w, f.P, "the params"));
    return;
  }
  if (params_alias_master)
    t.add("params", "fp32 param shard (is the master shard)", "0 (no copy)", 0);
  else
    t.add("params", f.wn + " param shard" + std::string(f.offload_params ? " (offloaded)" : ""),
          cat(w, " B x Ψs = ", w, " x ", f.Ss), t.bytes(w, f.Sh, "the param shard"),
          f.offload_params);
  if (persistent_full > 0)
    t.add("params", f.wn + " persistent units (full: below the threshold)",
          cat(w, " B x ", with_commas(persistent_full)),
          t.bytes(w, persistent_full, "the persistent units"));
}

// Gradients: the full working-dtype buffer (stages 0-1), or the reduced shard (2-3).
void add_grads(Terms& t, const Formula& f) {
  if (!f.pol.shard_grads)
    t.add("grads", f.wn + " grads (full)", cat(f.w, " B x Ψp = ", f.w, " x ", f.Ps),
          t.bytes(f.w, f.P, "the grads"));
  else if (f.offload)
    t.add("grads", "fp32 grad shard (offloaded)", cat("4 B x Ψs = 4 x ", f.Ss),
          t.bytes(4, f.Sh, "the grad shard"), true);
  else
    t.add("grads", f.rn + " reduced grad shard", cat(f.r, " B x Ψs = ", f.r, " x ", f.Ss),
          t.bytes(f.r, f.Sh, "the grad shard"));
}

// The fp32 master weights and the optimizer's state (Adam's or LAMB's m and v, SGD's or Lion's
// momentum).
void add_optimizer_states(Terms& t, const Formula& f, PlanOptimizer optimizer) {
  const std::int64_t opt_states = state_buffers(optimizer);
  const char* names[] = {"fp32 Adam m and v", "fp32 SGD momentum", "fp32 LAMB m and v",
                         "fp32 Lion momentum", "fp32 Muon momentum and AdamW's m"};
  t.add("master", "fp32 master weights" + std::string(f.pol.shard_optimizer ? " (shard)" : " (full)"),
        cat("4 B x ", f.state_name, " = 4 x ", f.state_count),
        t.bytes(4, f.state, "the master weights"), f.offload);
  const bool muon = optimizer == PlanOptimizer::muon;  // v apart: AdamW's elements only
  const std::int64_t n = muon ? 1 : opt_states;
  t.add("optimizer", names[static_cast<int>(optimizer)],
        cat(4 * n, " B x ", f.state_name, " = ", 4 * n, " x ", f.state_count),
        t.bytes(4 * n, f.state, "the optimizer state"), f.offload);
  if (muon)  // zero/muon_state.hpp
    t.add("optimizer", "fp32 AdamW v (none beside Muon's matrices)",
          cat("4 B x (", f.state_name,
              f.pol.shard_optimizer ? " - the fewest Muon elements a rank owns"
                                    : " - Muon's elements",
              ") = 4 x ", with_commas(f.v)),
          t.bytes(4, f.v, "the optimizer state"), f.offload);
}

// Persistent buffers: the reduced gradient where it is not the "grads" term, the accumulator.
void add_persistent_buffers(Terms& t, const Formula& f, const Settings& set) {
  const std::int64_t r = f.r;
  if (f.pol.gather_grads && set.reduce_dtype != set.work_dtype)
    t.buffer("fp32 reduced grads (full, stage 0 all-reduce result)",
             cat(r, " B x Ψp = ", r, " x ", f.Ps), t.bytes(r, f.P, "the reduced grads"));
  if (f.pol.reduced_shard_is_buffer()) {
    const std::int64_t b = f.offload ? 4 : r;
    t.buffer(f.rn + " reduced grad shard" + std::string(f.offload ? " (offloaded, fp32)" : ""),
             cat(b, " B x Ψs = ", b, " x ", f.Ss), t.bytes(b, f.Sh, "the reduced grad shard"),
             f.offload);
  }
  // Offloaded, the host's fp32 gradient shard is the sum over the micro-batches itself.
  if (set.accumulation > 1 && !f.offload)
    t.buffer("fp32 gradient accumulator",
             cat("4 B x ", f.pol.gather_grads ? "Ψp = " + f.Ps : "Ψs = " + f.Ss),
             t.bytes(4, f.pol.gather_grads ? f.P : f.Sh, "the gradient accumulator"));
  if (set.compression.error_feedback)  // zero/wire_compress.cpp: every rank's own, full size
    t.buffer("fp32 TopK residual (error feedback)", cat("4 B x Ψp = 4 x ", f.Ps),
             t.bytes(4, f.P, "the TopK residual"));
}

// The engine's counting run, checked against the formulas above (they must agree on the model
// states and the persistent buffers where the engine holds them: on the device, an optimizer the
// engine runs).
plan_detail::EngineRun run_and_check(const PlanInput& in, const Formula& f, const Plan& plan,
                                     const Terms& t) {
  plan_detail::EngineRun run;
  try {
    run = plan_detail::run_engine(in);
  } catch (const LedgerOverflow&) {
    t.checked().fail("the engine's buffers with the activations");
  }
  const std::int64_t states = plan.device.model_states(), buffers = t.persistent_buffers();
  if (in.optimizer != PlanOptimizer::sgd_momentum &&
      (run.states != states || run.base != run.states + buffers ||
       (in.device && run.host_base != plan.host.total())))
    throw std::logic_error(cat("planner: the formulas give ", states, " B of model states and ",
                               buffers, " B of persistent buffers (", plan.host.total(),
                               " B on the host), the engine holds ", run.states, " and ",
                               run.base - run.states, " (", run.host_base, "; ",
                               plan.terms.size(), " terms)"));
  return run;
}

// Everything else comes from running the engine itself over counting memory: the transient
// buffers at their peak, the communicator's staging, the collectives of a step. Offload and SGD
// change only the persistent terms; what the engine computes on the device around them is the
// same.
void add_engine_run(Terms& t, Plan& plan, const PlanInput& in, const Formula& f) {
  const plan_detail::EngineRun run = run_and_check(in, f, plan, t);
  const std::int64_t states = plan.device.model_states();
  const std::int64_t act = in.activation_bytes;
  plan.peak_total =
      t.checked().add(states + t.persistent_buffers(), run.peak - run.base, "the peak");
  plan.step_transient_peak = run.step_transient;
  plan.phases = run.phases;
  for (const GroupedOps* phase : {&run.phases.forward, &run.phases.backward_gathers,
                                  &run.phases.reductions, &run.phases.step})
    add(plan.collectives, *phase);
  const GroupedOps& all = plan.collectives;
  plan.traffic = {all.shard.payload_bytes(), all.replicate.payload_bytes(),
                  all.secondary.payload_bytes(), all.world.payload_bytes()};
  if (in.device && !in.emulated_device)
    t.buffer("NCCL staging: fp32 copy of the largest reduce-scatter's input",
             "4 B x the largest unit's (or bucket's) padded size", run.staging);
  else
    t.buffer("MPI reduce-scatter staging (largest collective)",
             cat(in.comm_pipeline_depth, " slots x ", plan.shard_size - 1, " peers x min(",
                 in.comm_chunk_bytes, " B, one shard)"),
             run.staging);
  const std::int64_t transient = plan.peak_total - states - act - t.persistent_buffers();
  if (transient != 0)
    t.add("buffers",
          f.pol.shard_params ? "gathered units + prefetch, grads in flight, buckets, scratch"
                             : "gradient buffers and buckets in flight, step scratch",
          cat("the engine's own allocations at its peak, counted by running it (",
              with_commas(run.step_transient), " B in a step)"),
          transient);
  if (act > 0)
    t.add("activations", in.model_name.empty() ? "activations" : in.model_name + " activations",
          cat(with_commas(act), " B, from the model"), act);
  // Offload's host staging at its peak: a bucket's reduced shard on its way to the host, a
  // unit's new params on their way to the device (counted by the same run).
  if (run.host_peak > run.host_base)
    t.add("buffers", "host staging of the transfers (a reduced bucket, a unit's new params)",
          "the engine's own host allocations at their peak, counted by running it",
          run.host_peak - run.host_base, true);
}

// The plan's facts before any term: the stage, the groups, the sizes, the settings.
Plan plan_header(const Settings& set, const Sizes& L) {
  Plan plan;
  plan.notes = set.notes;
  plan.stage = set.stage;
  plan.ranks = set.world;
  plan.shard_size = set.shard_size;
  plan.secondary_size = set.secondary_size;
  plan.numel = L.numel;
  plan.padded_numel = L.padded_numel;
  plan.settings = set;
  plan.prefetches = prefetches_any(L, set);
  std::tie(plan.newton_schulz_flops_max, plan.newton_schulz_flops_mean) =
      newton_schulz_load(L.muon.flops, set.shard_size, !set.policy.shard_optimizer);
  return plan;
}

}  // namespace

Plan plan_memory(const PlanInput& in) {
  Settings set = settle(in);
  OptimizerConfig muon = in.config.optimizer;  // the optimizer the plan is for
  muon.type = in.optimizer == PlanOptimizer::muon ? OptimizerType::muon : OptimizerType::adamw;
  set.layout.whole_params = muon_params(in.units, muon);
  const Sizes L = lay_out(in.units, set.layout);
  Plan plan = plan_header(set, L);
  const Formula f = formula_of(set, L);
  Terms t(plan, Checked{cat("stage ", set.stage, ", ", in.ranks,
                            in.ranks == 1 ? " rank, " : " ranks, ", with_commas(L.numel),
                            " params")});
  add_params(t, f, L, set);
  add_grads(t, f);
  add_optimizer_states(t, f, in.optimizer);
  add_persistent_buffers(t, f, set);
  add_engine_run(t, plan, in, f);
  return plan;
}

std::int64_t GroupOps::calls() const {
  using plan_detail::add_traffic;
  return add_traffic(add_traffic(add_traffic(add_traffic(all_reduce.calls, reduce_scatter.calls),
                                             all_gather.calls),
                                 broadcast.calls),
                     all_to_all.calls);
}
std::int64_t GroupOps::payload_bytes() const {
  using plan_detail::add_traffic;
  return add_traffic(
      add_traffic(add_traffic(add_traffic(all_reduce.payload_bytes, reduce_scatter.payload_bytes),
                              all_gather.payload_bytes),
                  broadcast.payload_bytes),
      all_to_all.payload_bytes);
}

}  // namespace zero
