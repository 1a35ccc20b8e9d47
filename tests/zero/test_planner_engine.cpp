// The planner against the engine it predicts: for the reference MLP at every stage, at 1 to 4
// ranks (this file runs under mpirun at each), with the settings that change what the engine
// allocates, the planner's bytes equal the ledger's. Model states are compared exactly (the
// issue's bar); the peak too, because the planner replays the engine's allocations. And the
// collectives of a step, by group and op, call for call (what the time model costs).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "tests/zero/engine_harness.hpp"

using namespace zero;
using zero::testing::RunSpec;

namespace {

struct Case {
  int stage;
  Precision precision;
  DType reduce;
  std::int64_t accumulation;
  bool overlap;
  std::int64_t persistence;  // stage 3: units below this stay gathered
  std::int64_t prefetch;     // stage3_prefetch_bucket_size (elements)
  std::int64_t bucket = 0;   // reduce and all-gather bucket size (0: the default, 5e8)
  int shard = -1;            // mics_shard_size (-1: flat)
  int hpz = 1;               // zero_hpz_partition_size (1: off)
  OptimizerType optimizer = OptimizerType::adamw;
};

void compare(comm::Communicator& parent, const Case& c) {
  // A communicator of its own: its staging only grows, so one shared with earlier runs would
  // carry their largest collective into this engine's ledger.
  auto own = parent.split(0, parent.rank());
  comm::Communicator& world = *own;
  RunSpec spec;
  spec.stage = c.stage;
  spec.precision = c.precision;
  spec.reduce = c.reduce;
  spec.accumulation = c.accumulation;
  spec.overlap = c.overlap;
  spec.persistence_threshold = c.persistence;
  spec.reduce_bucket = c.bucket;
  spec.allgather_bucket = c.bucket;
  spec.shard_size = c.shard;
  spec.hpz = c.hpz;
  spec.steps = 3;
  spec.shape = models::MlpShape{4, 40, 48, 3};
  Config config = zero::testing::make_config(spec);
  config.zero.stage3_prefetch_bucket_size = c.prefetch;
  config.optimizer.type = c.optimizer;

  const int n = world.size();
  const std::int64_t micro = spec.shape.global_batch / (n * spec.accumulation);
  Engine engine(config, world, models::mlp_units(spec.shape));
  engine.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
  models::MlpTrainer trainer(spec.shape, micro);
  for (std::int64_t s = 0; s < spec.steps; ++s) {
    if (s + 1 == spec.steps) engine.reset_comm_accounting();
    for (std::int64_t k = 0; k < spec.accumulation; ++k)
      trainer.micro_batch(engine, s * spec.shape.global_batch + world.rank() * micro * spec.accumulation + k * micro);
    engine.step();
  }
  const MemoryReport m = engine.memory();
  const Engine::GroupAccounting traffic = engine.comm_accounting_by_group();

  PlanInput in = plan_input_from_config(config, n);
  in.units = models::mlp_units(spec.shape);
  in.activation_bytes = models::mlp_activation_bytes(spec.shape, micro);
  in.device = false;  // CPU ranks: state in host memory, MPI staging counted
  const Plan p = plan_memory(in);

  INFO("ranks " << n << ", stage " << c.stage << ", " << name_of(c.precision) << ", reduce "
                << name_of(c.reduce) << ", accumulation " << c.accumulation << ", overlap "
                << c.overlap << ", persistence " << c.persistence << ", prefetch " << c.prefetch
                << ", bucket " << c.bucket << ", shard groups of " << c.shard << ", hpZ " << c.hpz
                << ", " << name_of(c.optimizer)
                << "\n"
                << explain(p) << describe(m.ledger));
  CHECK(p.device.params == m.params);
  CHECK(p.device.grads == m.grads);
  CHECK(p.device.master == m.master);
  CHECK(p.device.optimizer == m.optimizer);
  CHECK(p.device.model_states() == m.model_states());
  CHECK(p.device.activations == m.activations);
  CHECK(p.peak_total == m.peak_total);
  CHECK(p.device.buffers == m.buffers);
  CHECK(p.device.total() == m.peak_total);
  CHECK(p.padded_numel == engine.layout().padded_numel);
  // And the bytes each process group moved in the last step (payload, every op).
  auto bytes = [](const comm::Accounting& a) {
    std::int64_t b = 0;
    for (const comm::OpStats& o : a.ops) b += static_cast<std::int64_t>(o.payload_bytes);
    return b;
  };
  CHECK(p.traffic.shard == bytes(traffic.shard));
  CHECK(p.traffic.replicate == bytes(traffic.replicate));
  CHECK(p.traffic.secondary == bytes(traffic.secondary));
  CHECK(p.traffic.world == bytes(traffic.world));
  // Itemised: the calls and payload of every op in every group, which the time model costs.
  auto same_ops = [](const char* group, const GroupOps& planned, const comm::Accounting& a) {
    const std::pair<comm::Op, const OpCount*> ops[] = {
        {comm::Op::all_reduce, &planned.all_reduce},
        {comm::Op::reduce_scatter, &planned.reduce_scatter},
        {comm::Op::all_gather, &planned.all_gather},
        {comm::Op::broadcast, &planned.broadcast},
        {comm::Op::all_to_all, &planned.all_to_all}};
    for (const auto& [op, count] : ops) {
      INFO(group << " group, " << comm::name_of(op));
      CHECK(count->calls == static_cast<std::int64_t>(a[op].calls));
      CHECK(count->payload_bytes == static_cast<std::int64_t>(a[op].payload_bytes));
    }
    CHECK(a[comm::Op::barrier].calls == 0);  // the engine issues none; GroupOps has no row
  };
  same_ops("shard", p.collectives.shard, traffic.shard);
  same_ops("replicate", p.collectives.replicate, traffic.replicate);
  same_ops("secondary", p.collectives.secondary, traffic.secondary);
  same_ops("world", p.collectives.world, traffic.world);
}

}  // namespace

TEST_CASE("Planner equals the engine's ledger at every stage, precision and setting") {
  auto world = comm::make_mpi_communicator();
  const std::int64_t big = 1'000'000'000;
  for (int stage = 0; stage <= 3; ++stage)
    for (auto [prec, reduce] : {std::pair{Precision::bf16, DType::f32},
                                std::pair{Precision::bf16, DType::bf16},
                                std::pair{Precision::fp16, DType::f16},
                                std::pair{Precision::fp32, DType::f32}})
      for (std::int64_t accum : {1, 2})
        for (bool overlap : {false, true})
          compare(*world, {stage, prec, reduce, accum, overlap, 0, 50'000'000});
  // Stage 3's gather settings: no prefetch, a one-unit window, persistent units.
  for (std::int64_t prefetch : {std::int64_t{0}, std::int64_t{1700}, big})
    for (bool overlap : {false, true})
      compare(*world, {3, Precision::bf16, DType::f32, 1, overlap, 0, prefetch});
  compare(*world, {3, Precision::bf16, DType::bf16, 1, false, 2000, 50'000'000});
  // A bucket per unit and buckets of two units (the default is one for this model).
  for (int stage = 0; stage <= 3; ++stage)
    for (std::int64_t bucket : {std::int64_t{1}, std::int64_t{4000}})
      compare(*world, {stage, Precision::bf16, DType::f32, 2, true, 0, 50'000'000, bucket});
  // Three micro-batches: the planner runs two and scales the traffic of the rest.
  compare(*world, {2, Precision::bf16, DType::f32, 3, true, 0, 50'000'000, 1});
  compare(*world, {3, Precision::bf16, DType::bf16, 3, false, 0, 50'000'000});
  // Hierarchical sharding: shard groups of 1 and 2 ranks where they divide the world.
  for (int shard : {1, 2}) {
    if (shard >= world->size() || world->size() % shard != 0) continue;
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t bucket : {std::int64_t{0}, std::int64_t{1}})
        compare(*world, {stage, Precision::bf16, DType::f32, 1, stage == 3, 0, 50'000'000, bucket, shard});
  }
  // ZeRO++ hpZ at stage 3: secondary shards over groups of 2 (and of the whole world).
  for (int hpz : {2, world->size()}) {
    if (hpz < 2 || world->size() % hpz != 0) continue;
    for (std::int64_t prefetch : {std::int64_t{0}, std::int64_t{50'000'000}})
      for (bool overlap : {false, true})
        compare(*world, {3, Precision::bf16, DType::f32, 2, overlap, 0, prefetch, 0, -1, hpz});
  }
}

TEST_CASE("Planner equals the engine's ledger for Lion's one state buffer and LAMB's two") {
  auto world = comm::make_mpi_communicator();
  for (OptimizerType t : {OptimizerType::lion, OptimizerType::lamb})
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t accum : {1, 2}) {
        Case c{stage, Precision::bf16, DType::f32, accum, false, 0, 50'000'000};
        c.optimizer = t;
        compare(*world, c);
      }
}
