// The engine's options that must act, multi-rank: clipping, overlap, stage 3's persistence (and
// the warning when it leaves nothing sharded), the learning-rate schedules, bias_correction:
// false, an fp32 run's reduce dtype, and stage 0 on one rank, which reduces nothing. Each test
// here fails with its feature switched off (see the notes at each).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "tests/zero/engine_checks.hpp"

using namespace zero;
using namespace zero::testing::checks;
using zero::testing::run_mlp;
using zero::testing::RunSpec;

TEST_CASE("Clipping triggers and matches the reference's clipped update, with the global norm") {
  // Without clipping (or with a per-rank norm) the coefficients differ, and with eps comparable
  // to the clipped gradient the weights move by a different amount: both are checked.
  auto w = world();
  RunSpec spec;
  spec.precision = Precision::fp32;
  spec.stage = 2;
  spec.steps = 8;
  spec.clip = 0.01;
  spec.eps = 1e-4;
  std::vector<double> norms;
  const auto ref = zero::testing::reference_fp64(spec, &norms);
  const auto r = run_mlp(*w, spec);
  REQUIRE(norms.size() == r.reports.size());
  for (std::size_t s = 0; s < norms.size(); ++s) {
    INFO("step " << s << ", norm " << norms[s]);
    REQUIRE(norms[s] > 2 * spec.clip);  // clipping really acts at every step
    CHECK(r.reports[s].grad_norm == Approx(norms[s]).epsilon(1e-4));
    CHECK(r.reports[s].clip_coefficient == Approx(spec.clip / (norms[s] + 1e-6)).epsilon(1e-4));
  }
  const double diff = zero::testing::max_rel_diff(r.master, ref);
  WARN("clipped fp32 vs fp64: max relative difference " << diff);
  CHECK(diff < 2e-4);
  // The reference itself tells clipped from unclipped training apart by far more than that.
  RunSpec unclipped = spec;
  unclipped.clip = 0;
  CHECK(zero::testing::max_rel_diff(r.master, zero::testing::reference_fp64(unclipped)) > 1e-2);
}

TEST_CASE("With overlap_comm each reduction runs while the trainer computes the next unit") {
  auto w = world();
  for (int stage = 0; stage <= 3; ++stage) {
    // One bucket per unit (a one-element limit), then one bucket for the whole model (the
    // default, 5e8 elements): a collective per unit, or one per micro-batch.
    for (std::int64_t bucket : {std::int64_t{1}, std::int64_t{0}}) {
      INFO("stage " << stage << ", reduce_bucket_size " << bucket);
      RunSpec spec;
      spec.stage = stage;
      spec.accumulation = 2;
      spec.steps = 3;
      spec.reduce_bucket = bucket;
      const std::int64_t units = spec.shape.layers;
      spec.overlap = true;
      const EngineStats on = run_mlp(*w, spec).stats;
      CHECK(on.reductions == units * spec.accumulation * spec.steps);
      CHECK(on.reduce_collectives == (bucket == 1 ? on.reductions : spec.accumulation * spec.steps));
      // Every collective but each step's last (finished by step() itself) was still in flight
      // when the trainer next asked for a unit, and never more than one at a time.
      CHECK(on.reductions_overlapped == on.reduce_collectives - spec.steps);
      CHECK(on.max_reductions_in_flight == 1);
      spec.overlap = false;
      const EngineStats off = run_mlp(*w, spec).stats;
      CHECK(off.reductions == on.reductions);
      CHECK(off.reduce_collectives == on.reduce_collectives);
      CHECK(off.reductions_overlapped == 0);
      CHECK(off.max_reductions_in_flight == 0);
    }
  }
}

TEST_CASE("Stage 3 keeps units below the persistence threshold gathered and releases the others") {
  auto w = world();
  Config c;
  c.zero.stage = 3;
  c.precision = Precision::bf16;
  c.zero.stage3_param_persistence_threshold = 100;
  Engine e(c, *w,
           {UnitSpec{"small", {ParamSpec{"small.w", {10}}}},
            UnitSpec{"big", {ParamSpec{"big.w", {1000}}}}});
  e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 0.5f); });
  const Layout& L = e.layout();
  REQUIRE(L.units[0].persistent);
  REQUIRE_FALSE(L.units[1].persistent);
  auto params_bytes = [&] {
    return e.ledger().snapshot(comm::Memory::host)[Category::params].current;
  };
  auto gathered_bytes = [&] {
    return e.ledger().snapshot(comm::Memory::host)[Category::gathered].current;
  };
  // The shard of every unit, plus the small unit in full; nothing gathered.
  const std::int64_t persistent_bytes = 2 * L.units[0].padded_numel;
  CHECK(params_bytes() == 2 * L.shard_numel + persistent_bytes);
  CHECK(gathered_bytes() == 0);
  for (int s = 0; s < 2; ++s) {
    INFO("step " << s);
    CHECK(e.unit_state(0) == UnitState::gathered);
    CHECK(e.unit_state(1) == UnitState::sharded);
    for (int u : {0, 1}) e.gather(u);
    CHECK(e.unit_state(1) == UnitState::gathered);
    CHECK(gathered_bytes() == 2 * L.units[1].padded_numel);
    for (int u : {1, 0}) {
      e.release(u);
      e.grad(u);
      e.reduce_grads(u);
    }
    CHECK(e.unit_state(0) == UnitState::gathered);  // released, but persistent: stays
    CHECK(e.unit_state(1) == UnitState::sharded);
    CHECK(gathered_bytes() == 0);
    e.step();
    CHECK(params_bytes() == 2 * L.shard_numel + persistent_bytes);
  }
}

TEST_CASE("StepReport::lr follows WarmupLR, WarmupDecayLR and WarmupCosineLR through the engine") {
  auto w = world();
  struct Case {
    const char* name;
    SchedulerConfig sched;
    std::vector<double> want;  // lr of applied steps 0..9, from DeepSpeed's definitions
  };
  std::vector<Case> cases;
  {  // WarmupDecayLR, linear: 0.01·s/4 for s < 4, then 0.01·(10 - s)/6
    SchedulerConfig s;
    s.type = ScheduleType::warmup_linear_decay;
    s.warmup_max_lr = 0.01;
    s.warmup_num_steps = 4;
    s.warmup_type = WarmupType::linear;
    s.total_num_steps = 10;
    cases.push_back({"WarmupDecayLR",
                     s,
                     {0.0, 0.0025, 0.005, 0.0075, 0.01, 0.01 * 5 / 6, 0.01 * 4 / 6, 0.005,
                      0.01 * 2 / 6, 0.01 / 6}});
  }
  {  // WarmupLR, log (DeepSpeed's default): 0.001 + 0.009·ln(s + 1)/ln(5) for s < 5, then 0.01
    SchedulerConfig s;
    s.type = ScheduleType::warmup;
    s.warmup_min_lr = 0.001;
    s.warmup_max_lr = 0.01;
    s.warmup_num_steps = 5;
    std::vector<double> want;
    for (int k = 0; k < 10; ++k)
      want.push_back(k < 5 ? 0.001 + 0.009 * std::log(k + 1.0) / std::log(5.0) : 0.01);
    cases.push_back({"WarmupLR", s, want});
  }
  {  // WarmupCosineLR on lr 0.02: ratio s/4 for s < 4, then 0.1 + 0.9·(1 + cos(π(s - 3)/6))/2
    SchedulerConfig s;
    s.type = ScheduleType::warmup_cosine;
    s.warmup_num_steps = 4;
    s.warmup_type = WarmupType::linear;
    s.total_num_steps = 10;
    s.cos_min_ratio = 0.1;
    std::vector<double> want;
    const double pi = 3.14159265358979323846;
    for (int k = 0; k < 10; ++k)
      want.push_back(0.02 * (k < 4 ? k / 4.0 : 0.1 + 0.9 * (1 + std::cos(pi * (k - 3) / 6.0)) / 2));
    cases.push_back({"WarmupCosineLR", s, want});
  }
  for (const Case& k : cases) {
    INFO(k.name);
    Config c;
    c.zero.stage = 1;
    c.precision = Precision::fp32;
    c.optimizer.lr = std::string(k.name) == "WarmupCosineLR" ? 0.02 : 0.05;
    c.scheduler = k.sched;
    EngineOptions o;
    o.log = [](const std::string&) {};
    Engine e(c, *w, two_units(), o);
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    std::vector<double> got;
    for (int s = 0; s < 11; ++s) {
      // A skipped step (the 4th call) does not advance the schedule, as in DeepSpeed.
      const StepReport r = train_step(e, 0.1f, s == 3);
      if (!r.skipped) got.push_back(r.lr);
    }
    REQUIRE(got.size() == k.want.size());
    for (std::size_t s = 0; s < got.size(); ++s) {
      INFO("applied step " << s);
      CHECK(got[s] == Approx(k.want[s]).epsilon(1e-12).margin(1e-15));
    }
  }
  // The rate is applied, not only reported: at lr 0 (WarmupDecayLR's step 0) only weight decay
  // could move the weights, and there is none, so step 0 leaves them; step 1 moves them.
  Config c;
  c.zero.stage = 3;
  c.precision = Precision::fp32;
  c.scheduler = cases[0].sched;
  Engine e(c, *w, two_units());
  e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
  const auto start = all_master(e);
  train_step(e, 0.1f);
  CHECK(all_master(e) == start);
  train_step(e, 0.1f);
  CHECK(all_master(e)[0][0] == Approx(1.0 - 0.0025).epsilon(1e-5));  // lr·m̂/sqrt(v̂) = lr
}

TEST_CASE("bias_correction false trains as DeepSpeed's FusedAdam with bias_correction=False") {
  auto w = world();
  RunSpec spec;
  spec.precision = Precision::fp32;
  spec.stage = 3;
  spec.steps = 10;
  spec.lr = 1e-3;
  spec.bias_correction = false;
  const auto r = run_mlp(*w, spec);
  const auto ref = zero::testing::reference_fp64(spec);
  const double diff = zero::testing::max_rel_diff(r.master, ref);
  WARN("fp32 without bias correction vs fp64: max relative difference " << diff);
  CHECK(diff < 2e-4);
  // Bias correction left on would be far from this reference (step 1 alone moves 3x further).
  RunSpec corrected = spec;
  corrected.bias_correction = true;
  CHECK(zero::testing::max_rel_diff(r.master, zero::testing::reference_fp64(corrected)) > 1e-2);
}

TEST_CASE("An fp32 run asked to reduce in bf16 reduces in fp32 and says so once, on rank 0") {
  auto w = world();
  Config c;
  c.precision = Precision::fp32;
  c.communication_data_type = DType::bf16;
  c.zero.stage = 1;  // a reduce-scatter at every world size (one rank at stage 0 moves nothing)
  std::vector<std::string> lines;
  EngineOptions o;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  Engine e(c, *w, {UnitSpec{"a", {ParamSpec{"a.w", {64}}}}}, o);
  if (w->rank() == 0) {
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "warning: communication_data_type bf16 has no effect with fp32 training: "
                      "gradients are reduced in fp32");
  } else {
    CHECK(lines.empty());
  }
  // And it does: the gradient's reduce-scatter moves fp32 (4 bytes an element on the wire).
  e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 0.25f); });
  e.reset_comm_accounting();
  e.grad(0);
  e.reduce_grads(0);
  e.step();
  CHECK(e.comm_accounting()[comm::Op::reduce_scatter].payload_bytes == 4 * 64 * std::uint64_t(w->size()));
  lines.clear();
  c.communication_data_type = DType::f32;
  Engine quiet(c, *w, {UnitSpec{"a", {ParamSpec{"a.w", {64}}}}}, o);
  CHECK(lines.empty());
}

TEST_CASE("Stage 3 that shards no unit (all under the persistence threshold) says so once, on rank 0") {
  auto w = world();
  Config c;
  c.zero.stage = 3;  // the threshold's default, 1e5 elements, is above both units
  std::vector<std::string> lines;
  EngineOptions o;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  const std::vector<UnitSpec> small = {UnitSpec{"a", {ParamSpec{"a.w", {64}}}},
                                       UnitSpec{"b", {ParamSpec{"b.w", {1000}}}}};
  Engine e(c, *w, small, o);
  // CHECK, not REQUIRE: a rank that left the test early would leave the others' collectives
  // waiting for it.
  const std::vector<std::string> said = {
      "warning: stage 3 shards no parameter: every unit has fewer elements than "
      "stage3_param_persistence_threshold (100000), so each stays gathered on every rank; set it "
      "lower (0 shards every unit)"};
  CHECK(lines == (w->rank() == 0 ? said : std::vector<std::string>{}));
  // One unit sharded, or another stage: nothing to say.
  lines.clear();
  c.zero.stage3_param_persistence_threshold = 500;
  Engine one_sharded(c, *w, small, o);
  c.zero.stage3_param_persistence_threshold = 100000;
  c.zero.stage = 2;
  Engine stage2(c, *w, small, o);
  CHECK(lines.empty());
}

TEST_CASE("One rank at stage 0 reduces nothing: no collective, no bucket, stage 1's weights") {
  auto w = world();
  auto alone_world = w->split(w->rank(), 0);  // every rank a world of one
  RunSpec spec;
  spec.steps = 2;
  for (const auto& [precision, reduce, alone] : {std::tuple{Precision::fp32, DType::f32, true},
                                                 std::tuple{Precision::bf16, DType::bf16, true},
                                                 std::tuple{Precision::bf16, DType::f32, false}}) {
    for (const std::int64_t accum : {1, 2}) {
      spec.precision = precision;
      spec.reduce = reduce;
      spec.accumulation = accum;
      spec.stage = 0;
      const auto r = run_mlp(*alone_world, spec);
      spec.stage = 1;
      const auto one = run_mlp(*alone_world, spec);
      INFO(name_of(precision) << " reduced in " << name_of(reduce) << ", accumulation " << accum);
      CHECK(r.checksum == one.checksum);
      CHECK(r.losses == one.losses);
      // In the working dtype the gradient buffer is the sum; in another, each micro-batch's is
      // converted by its reduction.
      CHECK((r.per_step[comm::Op::reduce_scatter].calls == 0) == alone);
      CHECK((r.memory.ledger[Category::buckets].peak == 0) == alone);
      CHECK(
          r.per_step[comm::Op::all_gather].payload_bytes ==
          (alone ? agreement_bytes(0) : agreement_bytes(0) + 4 * std::uint64_t(r.padded * accum)));
    }
  }
}
