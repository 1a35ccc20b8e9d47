// The engine's promises that a silent failure would break, multi-rank: non-finite values never
// enter (initial parameters, updates), a gradient that never becomes finite ends the run, and
// the ranks agree on what step() reports (the mean loss; one error when they disagree). The
// options that must act are in test_engine_options.cpp. Each test here fails with its feature
// switched off (see the notes at each).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "tests/zero/engine_checks.hpp"

using namespace zero;
using namespace zero::testing::checks;
using zero::testing::run_mlp;
using zero::testing::RunSpec;

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
