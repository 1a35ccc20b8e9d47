// The GPT trainer through the engine, under mpirun at 1 to 4 ranks: stages 0-3 give bitwise the
// same weights (bf16 and fp32 compute, with gradient accumulation), the planner's bytes equal the
// engine's ledger at every stage (the trainer's activations included), recomputation changes no
// bit of the weights, and the loss falls.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "models/gpt.hpp"
#include "zero/zero.hpp"

using namespace zero;
using zero::models::GptShape;
using zero::models::gpt_units;
using zero::models::gpt_trainer_activation_bytes;
using models::GptCompute;

namespace {

GptShape tiny(int micro_batch) {
  GptShape s;
  s.layers = 2;
  s.hidden = 32;
  s.heads = 4;
  s.vocab = 64;
  s.seq_len = 16;
  s.micro_batch = micro_batch;
  return s;
}

// Sequence i of the synthetic corpus: a repeating pattern with a per-sequence offset, so that
// the next token is predictable and the loss can fall within a few steps.
void sequence(std::int64_t i, const GptShape& s, std::int32_t* in, std::int32_t* tg) {
  for (int t = 0; t <= s.seq_len; ++t) {
    const auto v = static_cast<std::int32_t>((i * 7 + t * 3 + (t / 4)) % s.vocab);
    if (t < s.seq_len) in[t] = v;
    if (t > 0) tg[t - 1] = v;
  }
}

struct Run {
  Precision precision = Precision::bf16;
  GptCompute compute = GptCompute::bf16;
  int stage = 0;
  std::int64_t accumulation = 1;
  std::int64_t global_batch = 24;  // sequences per step over all ranks (any of 1-4 ranks x 1-2)
  int steps = 3;
  bool overlap = false;
  std::int64_t bucket = 0;  // reduce and all-gather bucket size, elements (0: default)
  bool recompute = false;   // GptShape::recompute
};

struct Result {
  std::uint64_t checksum = 0;
  std::vector<double> losses;
  MemoryReport memory;
  Plan plan;
};

Result train(comm::Communicator& parent, const Run& r) {
  auto own = parent.split(0, parent.rank());  // fresh staging for an exact ledger
  comm::Communicator& world = *own;
  const int n = world.size();
  const std::int64_t micro = r.global_batch / (n * r.accumulation);
  REQUIRE(micro * n * r.accumulation == r.global_batch);
  GptShape shape = tiny(static_cast<int>(micro));
  shape.recompute = r.recompute;
  Config c;
  c.zero.stage = r.stage;
  c.precision = r.precision;
  c.gradient_accumulation_steps = r.accumulation;
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.1;
  c.gradient_clipping = 1.0;
  c.zero.overlap_comm = r.overlap;
  c.zero.stage3_param_persistence_threshold = 0;
  if (r.bucket > 0) c.zero.reduce_bucket_size = c.zero.allgather_bucket_size = r.bucket;
  c.param_groups = models::gpt_param_groups();
  Engine engine(c, world, gpt_units(shape));
  engine.init_params([&](int p, std::span<float> out) { models::gpt_init(shape, 5, p, out); });
  models::GptTrainer trainer(shape, r.compute);
  const auto N = static_cast<std::size_t>(micro * shape.seq_len);
  std::vector<std::int32_t> in(N), tg(N);
  Result out;
  for (int s = 0; s < r.steps; ++s) {
    double loss = 0;
    for (std::int64_t k = 0; k < r.accumulation; ++k) {
      for (std::int64_t b = 0; b < micro; ++b) {
        const std::int64_t i = s * r.global_batch + (k * n + world.rank()) * micro + b;
        sequence(i, shape, in.data() + b * shape.seq_len, tg.data() + b * shape.seq_len);
      }
      loss += trainer.micro_batch(engine, in, tg);
    }
    engine.step();
    out.losses.push_back(loss / static_cast<double>(r.accumulation));
  }
  out.memory = engine.memory();
  out.checksum = engine.master_checksum();

  PlanInput p = plan_input_from_config(c, n);
  p.units = gpt_units(shape);
  p.activation_bytes =
      gpt_trainer_activation_bytes(shape, r.compute == GptCompute::bf16 ? DType::bf16 : DType::f32);
  p.tied_head = true;
  p.device = false;
  out.plan = plan_memory(p);
  return out;
}

}  // namespace

TEST_CASE("GPT: stages 0-3 give bitwise equal weights") {
  auto world = comm::make_mpi_communicator();
  for (auto [precision, compute] :
       {std::pair{Precision::bf16, GptCompute::bf16}, std::pair{Precision::bf16, GptCompute::fp32},
        std::pair{Precision::fp16, GptCompute::fp32}, std::pair{Precision::fp32, GptCompute::fp32}})
    for (std::int64_t accum : {1, 2}) {
      Run r{precision, compute, 0, accum};
      const Result base = train(*world, r);
      for (int stage = 1; stage <= 3; ++stage)
        for (bool overlap : {false, true}) {
          r.stage = stage;
          r.overlap = overlap;
          INFO("stage " << stage << ", " << name_of(compute) << " compute, " << name_of(precision)
                        << " params, accumulation " << accum << ", overlap " << overlap);
          const Result got = train(*world, r);
          CHECK(got.checksum == base.checksum);
          CHECK(got.losses == base.losses);
        }
    }
}

TEST_CASE("GPT: the plan equals the engine's ledger at every stage") {
  auto world = comm::make_mpi_communicator();
  for (auto compute : {GptCompute::bf16, GptCompute::fp32})
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t bucket : {std::int64_t{0}, std::int64_t{1}}) {
        Run r{compute == GptCompute::bf16 ? Precision::bf16 : Precision::fp32, compute, stage};
        r.steps = 2;
        r.bucket = bucket;
        const Result got = train(*world, r);
        const MemoryReport& m = got.memory;
        INFO("stage " << stage << ", " << name_of(compute) << ", bucket " << bucket << "\n"
                      << explain(got.plan) << describe(m.ledger));
        CHECK(got.plan.device.activations == m.activations);
        CHECK(got.plan.device.model_states() == m.model_states());
        CHECK(got.plan.device.buffers == m.buffers);
        CHECK(got.plan.peak_total == m.peak_total);
      }
}

TEST_CASE("GPT: recomputation gives bitwise the weights without it, its fewer bytes as planned") {
  auto world = comm::make_mpi_communicator();
  for (auto compute : {GptCompute::bf16, GptCompute::fp32})
    for (int stage = 0; stage <= 3; ++stage)
      for (std::int64_t accum : {1, 2}) {
        Run r{compute == GptCompute::bf16 ? Precision::bf16 : Precision::fp32, compute, stage,
              accum};
        const Result base = train(*world, r);
        r.recompute = true;
        const Result got = train(*world, r);
        INFO("stage " << stage << ", " << name_of(compute) << " compute, accumulation " << accum);
        CHECK(got.checksum == base.checksum);
        CHECK(got.losses == base.losses);
        CHECK(got.memory.activations < base.memory.activations);
        CHECK(got.plan.device.activations == got.memory.activations);
        CHECK(got.plan.peak_total == got.memory.peak_total);
      }
}

TEST_CASE("GPT: the loss falls, bf16 and fp16 with dynamic loss scaling") {
  auto world = comm::make_mpi_communicator();
  for (auto [precision, compute] : {std::pair{Precision::bf16, GptCompute::bf16},
                                    std::pair{Precision::fp16, GptCompute::fp32}}) {
    Run r{precision, compute, 3};
    r.steps = 30;
    const Result got = train(*world, r);
    INFO(name_of(precision) << ": first loss " << got.losses.front() << ", last "
                            << got.losses.back());
    CHECK(got.losses.front() > 3.5);  // ln 64 = 4.16 at the start
    CHECK(got.losses.back() < 0.75 * got.losses.front());
  }
}
