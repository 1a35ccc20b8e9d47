// The engine's promises that a silent failure would break, multi-rank: non-finite values never
// enter (initial parameters, updates), a gradient that never becomes finite ends the run, and
// clipping, overlap, persistence, the learning-rate schedule and bias_correction: false act.
// Each test here fails with its feature switched off (see the notes at each).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "tests/zero/engine_harness.hpp"

using namespace zero;
using zero::testing::run_mlp;
using zero::testing::RunSpec;

namespace {

std::unique_ptr<comm::Communicator> world() {
  return comm::make_mpi_communicator();
}

// Two units of 40 and 37 elements: uneven shards at 2-4 ranks, and padding in each unit.
std::vector<UnitSpec> two_units() {
  return {UnitSpec{"a", {ParamSpec{"a.w", {40}}}},
          UnitSpec{"b", {ParamSpec{"b.w", {30}}, ParamSpec{"b.b", {7}}}}};
}

// Writes `value` into every gradient element of every param, in the training dtype; with
// `poison`, element 3 of param 0 is NaN instead.
void write_grads(Engine& e, float value, bool poison = false) {
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p) {
    TensorView g = e.grad(p);
    for (std::int64_t i = 0; i < g.numel; ++i) {
      const float x = poison && p == 0 && i == 3 ? std::numeric_limits<float>::quiet_NaN() : value;
      switch (g.dtype) {
        case DType::f32:
          g.as<float>()[i] = x;
          break;
        case DType::bf16:
          g.as<bf16>()[i] = to_bf16(x);
          break;
        case DType::f16:
          g.as<fp16>()[i] = to_fp16(x);
          break;
        default:
          FAIL("unexpected dtype");
      }
    }
  }
}

// Every unit's reduce_grads, in backward order.
void reduce_all(Engine& e) {
  for (int u = static_cast<int>(e.layout().units.size()) - 1; u >= 0; --u) e.reduce_grads(u);
}

StepReport train_step(Engine& e, float value, bool poison = false) {
  write_grads(e, value, poison);
  reduce_all(e);
  return e.step();
}

std::vector<std::vector<float>> all_master(Engine& e) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < static_cast<int>(e.layout().params.size()); ++p)
    out.push_back(e.gather_master(p));
  return out;
}

}  // namespace

TEST_CASE(
    "init_params refuses a NaN, an infinity or values that differ between ranks, on every rank") {
  auto w = world();
  const int last = w->size() - 1;
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Config c;
    c.zero.stage = stage;
    c.precision = Precision::bf16;
    Engine e(c, *w, two_units());
    // Only the last rank's fill is bad: every rank must still throw (none may wait in the
    // all-gather of a persistent unit for a rank that has thrown).
    auto fill = [&](float bad) {
      return [&, bad](int p, std::span<float> x) {
        std::fill(x.begin(), x.end(), 0.5f);
        if (p == 1 && w->rank() == last) x[5] = bad;
      };
    };
    CHECK_THROWS_WITH(e.init_params(fill(std::numeric_limits<float>::quiet_NaN())),
                      Catch::Contains("param 1 'b.w'") && Catch::Contains("element 5") &&
                          Catch::Contains("not finite"));
    CHECK_THROWS_WITH(e.init_params(fill(-std::numeric_limits<float>::infinity())),
                      Catch::Contains("param 1 'b.w'"));
    // A finite value of the last rank's own: at stage 0 its replica would drift from the
    // others' (and its step's non-finite check, which asks no other rank, could disagree), at
    // stages 1-3 the model would be a mix of shards no rank ever held. -0 against +0 is the
    // same: a replica is the same bits.
    if (w->size() > 1) {
      CHECK_THROWS_WITH(
          e.init_params(fill(0.25f)),
          Catch::Contains("param 1 'b.w'") &&
              Catch::Contains(cat("has other values on rank ", last, " than on rank 0")));
      CHECK_THROWS_WITH(e.init_params([&](int, std::span<float> x) {
        std::fill(x.begin(), x.end(), w->rank() == last ? -0.0f : 0.0f);
      }),
                        Catch::Contains("param 0 'a.w'"));
    }
    CHECK_NOTHROW(e.init_params(fill(0.5f)));
  }
}

TEST_CASE("An lr that would make the weights infinite stops the step on every rank, weights kept") {
  auto w = world();
  for (Precision prec : {Precision::bf16, Precision::fp32}) {
    for (int stage = 0; stage <= 3; ++stage) {
      INFO("stage " << stage << ", " << name_of(prec));
      Config c;
      c.zero.stage = stage;
      c.precision = prec;
      c.optimizer.lr = 1e38;  // step 1's step size lr / (1 - 0.9) overflows: every update is inf
      Engine e(c, *w, two_units());
      e.init_params(
          [](int p, std::span<float> x) { std::fill(x.begin(), x.end(), 0.25f * (p + 1)); });
      const auto before = all_master(e);
      // Stage 0: every rank applied the same update to the same replica and finds the element
      // itself (no exchange after the update); stages 1-3 agree on the lowest (unit, offset),
      // rank 0's first element here.
      CHECK_THROWS_WITH(
          train_step(e, 1.0f),
          Catch::Contains("step 1:") && Catch::Contains("non-finite") &&
              Catch::Contains("param 0 'a.w'") &&
              Catch::Contains(stage == 0 ? "on every rank (each holds the same replica)"
                                         : "on rank 0,"));
      // Every element's update was non-finite, so every element kept its value.
      CHECK(all_master(e) == before);
    }
  }
}

TEST_CASE("A huge gradient on one element stops the step naming that param, the rest updated") {
  auto w = world();
  Config c;
  c.zero.stage = 2;
  c.precision = Precision::fp32;
  c.optimizer.lr = 1e-3;
  Engine e(c, *w, two_units());
  e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
  for (int p = 0; p < 3; ++p) {
    auto g = e.grad(p).as<float>();
    std::fill(g.begin(), g.end(), 0.5f);
    // 1e30: its square (1e60) is finite in the double norm, but v = 0.001·g² overflows in fp32.
    if (p == 2) g[4] = w->rank() == 0 ? 1e30f : 0.0f;
  }
  e.reduce_grads(1);
  e.reduce_grads(0);
  CHECK_THROWS_WITH(e.step(), Catch::Contains("param 2 'b.b'") && Catch::Contains("element 4"));
  const auto m = all_master(e);
  CHECK(m[2][4] == 1.0f);  // kept
  CHECK(m[0][0] < 1.0f);   // updated
}

TEST_CASE(
    "A gradient that is never finite stops bf16 and fp32 after K skipped steps, each logged") {
  auto w = world();
  for (Precision prec : {Precision::bf16, Precision::fp32}) {
    INFO(name_of(prec));
    Config c;
    c.zero.stage = 1;
    c.precision = prec;
    c.max_consecutive_skipped_steps = 4;
    std::vector<std::string> logged;
    EngineOptions o;
    o.log = [&](const std::string& line) { logged.push_back(line); };
    o.log_all_ranks = true;
    Engine e(c, *w, two_units(), o);
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    const bool mine = w->rank() == w->size() - 1;  // the NaN is on one rank only
    // Three skips, then a good step: the run of skips starts again.
    for (int s = 0; s < 3; ++s) CHECK(train_step(e, 0.1f, mine).skipped);
    CHECK_FALSE(train_step(e, 0.1f).skipped);
    for (int s = 0; s < 3; ++s) {
      const StepReport r = train_step(e, 0.1f, mine);
      CHECK(r.skipped);
      CHECK(e.stats().consecutive_skipped_steps == s + 1);
    }
    CHECK_THROWS_WITH(train_step(e, 0.1f, mine), Catch::Contains("step 8:") &&
                                                     Catch::Contains("4 steps in a row") &&
                                                     Catch::Contains("non-finite gradient"));
    // Every skipped step logged its reason: 3 + 4.
    REQUIRE(logged.size() == 7);
    for (const auto& l : logged) CHECK_THAT(l, Catch::Contains("skipped: non-finite gradient"));
    CHECK_THAT(logged.back(), Catch::StartsWith("step 8:"));
  }
}

TEST_CASE(
    "fp16 startup's halving is not stopped, but overflow at min_loss_scale or a static scale is") {
  auto w = world();
  Config c;
  c.zero.stage = 2;
  c.precision = Precision::fp16;
  c.max_consecutive_skipped_steps = 3;
  c.fp16.initial_scale_power = 6;  // 64: 1 hysteresis skip + 6 halvings to 1, then min scale
  c.fp16.hysteresis = 2;
  EngineOptions o;
  o.log = [](const std::string&) {};
  {
    Engine e(c, *w, two_units(), o);
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    // 7 overflows in a row (more than K = 3) while the scale falls from 64 to 1: not stopped.
    for (int s = 0; s < 7; ++s) CHECK(train_step(e, 0.0f, true).skipped);
    CHECK(e.loss_scale() == 1);
    CHECK(e.stats().consecutive_skipped_steps == 0);
    // At the minimum scale with hysteresis spent, the next overflow ends the run.
    CHECK_THROWS_WITH(train_step(e, 0.0f, true), Catch::Contains("minimum loss scale"));
  }
  {
    c.fp16.loss_scale = 128;  // static: every overflow counts
    Engine e(c, *w, two_units(), o);
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); });
    for (int s = 0; s < 2; ++s) CHECK(train_step(e, 0.0f, true).skipped);
    CHECK_THROWS_WITH(train_step(e, 0.0f, true), Catch::Contains("3 steps in a row"));
  }
}

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

TEST_CASE(
    "step(loss) reports the ranks' mean loss, the same bits on every rank, at no extra call") {
  auto w = world();
  const int n = w->size();
  // Values whose sum depends on its order at 3 ranks and more: 1 + 2^-53 rounds back to 1, so
  // in rank order the small ones vanish one by one, while summed first they add up.
  auto loss_of = [](int r) { return r == 0 ? 1.0 : 0x1p-53; };
  double expected = 0;
  for (int r = 0; r < n; ++r) expected += loss_of(r);
  expected /= n;
  auto calls = [](const comm::Accounting& a) {
    std::uint64_t c = 0;
    for (const comm::OpStats& op : a.ops) c += op.calls;
    return c;
  };
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    Config c;
    c.zero.stage = stage;
    c.precision = Precision::bf16;
    Engine e(c, *w, two_units());
    e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 0.5f); });
    const std::uint64_t c0 = calls(e.comm_accounting());
    const StepReport without = train_step(e, 0.25f);
    const std::uint64_t c1 = calls(e.comm_accounting());
    CHECK_FALSE(without.loss.has_value());

    write_grads(e, 0.25f);
    reduce_all(e);
    const StepReport with = e.step(loss_of(w->rank()));
    const std::uint64_t c2 = calls(e.comm_accounting());
    REQUIRE(with.loss.has_value());
    CHECK(*with.loss == expected);  // exactly: rank order, then one division
    CHECK(c2 - c1 == c1 - c0);      // the loss rode with the step's own collectives

    // The same bits on every rank.
    std::vector<double> all(static_cast<std::size_t>(n));
    w->all_gather(comm::ConstView{&*with.loss, 1, DType::f64},
                  comm::View{all.data(), all.size(), DType::f64});
    for (int r = 0; r < n; ++r) CHECK(std::memcmp(&all[r], &all[0], sizeof(double)) == 0);
  }
}

TEST_CASE("A loss passed to step() on some ranks only is one error on every rank, naming both") {
  auto w = world();
  Config c;
  c.zero.stage = 1;
  Engine e(c, *w, two_units());
  e.init_params([](int, std::span<float> x) { std::fill(x.begin(), x.end(), 0.5f); });
  write_grads(e, 0.25f);
  reduce_all(e);
  if (w->size() == 1) {  // no rank without one: the loss comes back as passed
    CHECK(e.step(2.0).loss == 2.0);
    return;
  }
  const int last = w->size() - 1;
  std::optional<double> loss;
  if (w->rank() == last) loss = 2.0;
  CHECK_THROWS_WITH(e.step(loss), Catch::Contains("step(loss): rank " + std::to_string(last) +
                                                  " passed a loss and rank 0 did not"));
}
