// The planner's count of what the engine holds and moves (zero/planner_detail.hpp): the engine
// itself, run over a counting backend and a communicator that moves nothing.
#include <algorithm>

#include "comm/counting_communicator.hpp"
#include "zero/engine.hpp"
#include "zero/planner_detail.hpp"

namespace zero::plan_detail {
namespace {


// The counters of a communicator (or of every group) as GroupOps, and their arithmetic: the
// collectives of a stretch of calls are the counters after it less those before.
OpCount op_count(const comm::OpStats& o) {
  return {static_cast<std::int64_t>(o.calls), static_cast<std::int64_t>(o.payload_bytes)};
}
GroupOps group_ops(const comm::Accounting& a) {
  return {op_count(a[comm::Op::all_reduce]), op_count(a[comm::Op::reduce_scatter]),
          op_count(a[comm::Op::all_gather]), op_count(a[comm::Op::broadcast]),
          op_count(a[comm::Op::all_to_all])};
}
GroupedOps grouped_ops(const Engine::GroupAccounting& g) {
  return {group_ops(g.shard), group_ops(g.replicate), group_ops(g.secondary), group_ops(g.world)};
}
// What the engine issued between two snapshots.
GroupedOps issued(const Engine::GroupAccounting& after, const Engine::GroupAccounting& before) {
  GroupedOps d = grouped_ops(after);
  add(d, grouped_ops(before), -1);
  return d;
}


// The keys of the Config that decide what the engine allocates and issues; the optimizer's
// hyper-parameters and groups, the schedule and the batch change no byte.
Config engine_config(const Config& in, PlanOptimizer optimizer) {
  Config c;
  c.optimizer.type = optimizer == PlanOptimizer::lamb   ? OptimizerType::lamb
                     : optimizer == PlanOptimizer::lion ? OptimizerType::lion
                     : optimizer == PlanOptimizer::muon ? OptimizerType::muon
                                                        : OptimizerType::adamw;
  c.optimizer.muon_params = in.optimizer.muon_params;  // which matrices are owned whole
  c.zero.stage = in.zero.stage;
  c.precision = in.precision;
  c.communication_data_type = in.communication_data_type;
  c.gradient_accumulation_steps = in.gradient_accumulation_steps;
  c.zero.overlap_comm = in.zero.overlap_comm;
  c.zero.reduce_bucket_size = in.zero.reduce_bucket_size;
  c.zero.allgather_bucket_size = in.zero.allgather_bucket_size;
  c.zero.stage3_prefetch_bucket_size = in.zero.stage3_prefetch_bucket_size;
  c.zero.stage3_max_live_parameters = in.zero.stage3_max_live_parameters;
  c.zero.stage3_param_persistence_threshold = in.zero.stage3_param_persistence_threshold;
  c.zero.mics_shard_size = in.zero.mics_shard_size;
  c.zero.zero_hpz_partition_size = in.zero.zero_hpz_partition_size;
  c.zero.zero_quantized_gradients = in.zero.zero_quantized_gradients;
  c.zero.zero_quantized_weights = in.zero.zero_quantized_weights;
  c.compression = in.compression;
  c.zero.offload_optimizer_device = in.zero.offload_optimizer_device;
  c.zero.offload_param_device = in.zero.offload_param_device;
  return c;
}

}  // namespace

std::int64_t add_traffic(std::int64_t a, std::int64_t b, std::int64_t times) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(times, b, &r) || __builtin_add_overflow(a, r, &r))
    throw TooLarge(
        "too large to plan: one step's collectives would move more than 2^63 - 1 bytes (8 EiB) "
        "per rank, the most a 64-bit byte count holds; lower gradient_accumulation_steps");
  return r;
}

void add(GroupOps& into, const GroupOps& x, std::int64_t times) {
  auto one = [&](OpCount& a, const OpCount& b) {
    a.calls = add_traffic(a.calls, b.calls, times);
    a.payload_bytes = add_traffic(a.payload_bytes, b.payload_bytes, times);
  };
  one(into.all_reduce, x.all_reduce);
  one(into.reduce_scatter, x.reduce_scatter);
  one(into.all_gather, x.all_gather);
  one(into.broadcast, x.broadcast);
  one(into.all_to_all, x.all_to_all);
}
void add(GroupedOps& into, const GroupedOps& x, std::int64_t times) {
  add(into.shard, x.shard, times);
  add(into.replicate, x.replicate, times);
  add(into.secondary, x.secondary, times);
  add(into.world, x.world, times);
}

EngineRun run_engine(const PlanInput& in) {
  Config c = engine_config(in.config, in.optimizer);
  c.gradient_accumulation_steps = std::min<std::int64_t>(c.gradient_accumulation_steps, 2);
  EngineOptions o;
  o.count_only = true;
  o.memory = in.device ? comm::Memory::device : comm::Memory::host;
  o.align_elements = in.align_elements;
  o.log = [](const std::string&) {};
  comm::Options co;
  co.chunk_bytes = in.comm_chunk_bytes;
  co.pipeline_depth = in.comm_pipeline_depth;
  auto world = comm::make_counting_communicator(
      in.ranks, 0, o.memory,
      in.device && !in.emulated_device ? comm::StagingModel::nccl : comm::StagingModel::mpi, co);
  Engine e(c, *world, in.units, o);
  EngineRun run;
  const MemoryReport built = e.memory();
  run.base = built.ledger.current_total;
  run.states = built.model_states();
  auto host = [&] { return e.ledger().snapshot(comm::Memory::host); };
  const bool beside = o.memory == comm::Memory::device;  // a host space of the engine's own
  if (beside) run.host_base = host().current_total;
  e.init_params([](int, std::span<float>) {});
  e.ledger().record_external(Category::activations, in.activation_bytes, o.memory);
  const Layout& L = e.layout();
  const auto nu = static_cast<int>(L.units.size());
  // The second step records what each engine call issued (the first grows the staging).
  bool record = false;
  Plan::Phases last_micro_batch;  // of the recorded step
  auto snapshot = [&] { return record ? e.comm_accounting_by_group() : Engine::GroupAccounting{}; };
  auto one_step = [&] {
    for (std::int64_t mb = 0; mb < c.gradient_accumulation_steps; ++mb) {
      Plan::Phases ops;
      const Engine::GroupAccounting start = snapshot();
      for (int u = 0; u < nu; ++u) {
        e.gather(u);
        e.release(u);
      }
      if (in.tied_head) {  // the output head reads the token embedding of unit 0
        e.gather(0);
        e.release(0);
      }
      const Engine::GroupAccounting forward_done = snapshot();
      for (int u = nu - 1; u >= 0; --u) {
        const Engine::GroupAccounting before = snapshot();
        e.gather(u);
        if (record) add(ops.backward_gathers, issued(snapshot(), before));
        e.grad(L.units[u].first_param);
        e.release(u);
        e.reduce_grads(u);
      }
      if (!record) continue;
      ops.forward = issued(forward_done, start);
      ops.reductions = issued(snapshot(), forward_done);
      add(ops.reductions, ops.backward_gathers, -1);
      last_micro_batch = ops;
      add(run.phases.forward, ops.forward);
      add(run.phases.backward_gathers, ops.backward_gathers);
      add(run.phases.reductions, ops.reductions);
    }
    const Engine::GroupAccounting before_step = snapshot();
    e.step();
    if (record) run.phases.step = issued(snapshot(), before_step);
  };
  one_step();
  const std::int64_t first_peak = e.memory().peak_total;
  if (beside) run.host_peak = host().peak_total;
  e.ledger().reset_peaks();
  record = true;
  one_step();
  // Every micro-batch after the first issues what the second did (the first follows a step, and
  // its stage-3 gathers may travel in other groups), so a step of K micro-batches issues the
  // run's (K' = min(K, 2) of them) plus K - K' more of the second.
  {
    const std::int64_t more = in.config.gradient_accumulation_steps - c.gradient_accumulation_steps;
    add(run.phases.forward, last_micro_batch.forward, more);
    add(run.phases.backward_gathers, last_micro_batch.backward_gathers, more);
    add(run.phases.reductions, last_micro_batch.reductions, more);
  }
  const std::int64_t second_peak = e.memory().peak_total;
  run.peak = std::max(first_peak, second_peak);
  if (beside) run.host_peak = std::max(run.host_peak, host().peak_total);
  run.staging = e.memory().ledger[Category::comm_staging].current;  // every group's
  run.step_transient = second_peak - run.base - in.activation_bytes - run.staging;
  e.ledger().record_external(Category::activations, -in.activation_bytes, o.memory);
  return run;
}


}  // namespace zero::plan_detail
