// The dynamic loss scaler against DeepSpeed's rule (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler.update_scale), step by step, plus its static mode, errors and checkpoints.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "precision/loss_scaler.hpp"
#include "base/error.hpp"

using namespace zero;

namespace {

struct Step {
  bool overflow;
  float scale_used;
  float next_scale;
  int hysteresis_after;
};

void replay(LossScaler& s, const std::vector<Step>& script) {
  for (std::size_t i = 0; i < script.size(); ++i) {
    const Step& want = script[i];
    INFO("iteration " << i << (want.overflow ? " (overflow)" : " (clean)"));
    const StepDecision d = s.update(want.overflow);
    CHECK(d.skip == want.overflow);
    CHECK(d.scale_used == want.scale_used);
    CHECK(d.next_scale == want.next_scale);
    CHECK(s.scale() == want.next_scale);
    CHECK(s.state().cur_hysteresis == want.hysteresis_after);
    CHECK(s.state().cur_iter == static_cast<std::int64_t>(i + 1));
  }
}

LossScalerConfig small(int window, int hysteresis) {
  LossScalerConfig c;
  c.initial_scale_power = 4;  // 16
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  return c;
}

constexpr bool O = true, C = false;  // overflow, clean

}  // namespace

TEST_CASE("a scripted overflow sequence reproduces DeepSpeed's trajectory step by step",
          "[loss_scaler]") {
  // Scale 16, window 3, hysteresis 2, min 1. DeepSpeed's rule: on overflow, if hysteresis is 1
  // the scale halves (floored at min), else hysteresis drops by one; last_overflow_iter = iter.
  // On a clean step with s = iter - last_overflow_iter - 1: if s > 0 and s % 3 == 0 the scale
  // doubles and hysteresis refills. last_overflow_iter starts at -1.
  LossScaler s(small(3, 2));
  replay(s, {
                {C, 16, 16, 2},  // it 0: s = 0
                {C, 16, 16, 2},  // it 1: s = 1
                {C, 16, 16, 2},  // it 2: s = 2 (the legacy rule would double here)
                {O, 16, 16, 1},  // it 3: hysteresis 2 -> 1, last = 3
                {C, 16, 16, 1},  // it 4: s = 0
                {O, 16, 8, 1},   // it 5: hysteresis is 1: halve; last = 5
                {O, 8, 4, 1},    // it 6: halve; last = 6
                {O, 4, 2, 1},    // it 7: halve; last = 7
                {C, 2, 2, 1},    // it 8: s = 0
                {C, 2, 2, 1},    // it 9: s = 1
                {C, 2, 2, 1},    // it 10: s = 2
                {C, 2, 4, 2},    // it 11: s = 3: double, hysteresis refilled
                {C, 4, 4, 2},    // it 12: s = 4
                {C, 4, 4, 2},    // it 13: s = 5
                {O, 4, 4, 1},    // it 14: hysteresis 2 -> 1; last = 14
                {C, 4, 4, 1},    // it 15: s = 0 (no refill without consecutive_hysteresis)
                {C, 4, 4, 1},    // it 16: s = 1
                {O, 4, 2, 1},    // it 17: hysteresis is 1: halve
                {O, 2, 1, 1},    // it 18: halve to the minimum
            });
}

TEST_CASE("the legacy window rule reproduces older DeepSpeed's trajectory step by step",
          "[loss_scaler]") {
  // Older DynamicLossScaler: double on a clean step when (iter - last_overflow_iter) % 3 == 0.
  LossScalerConfig c = small(3, 2);
  c.window_rule = ScaleWindowRule::deepspeed_legacy;
  LossScaler s(c);
  replay(s, {
                {C, 16, 16, 2},  // it 0: (0 + 1) % 3
                {C, 16, 16, 2},  // it 1: 2 % 3
                {C, 16, 32, 2},  // it 2: 3 % 3 == 0: double
                {O, 32, 32, 1},  // it 3: hysteresis 2 -> 1, last = 3
                {C, 32, 32, 1},  // it 4: 1 % 3
                {O, 32, 16, 1},  // it 5: halve, last = 5
                {O, 16, 8, 1},   // it 6
                {O, 8, 4, 1},    // it 7: last = 7
                {C, 4, 4, 1},    // it 8: 1
                {C, 4, 4, 1},    // it 9: 2
                {C, 4, 8, 2},    // it 10: 3: double, refill
                {C, 8, 8, 2},    // it 11: 4
                {C, 8, 8, 2},    // it 12: 5
                {C, 8, 16, 2},   // it 13: 6: double
                {O, 16, 16, 1},  // it 14: last = 14
                {C, 16, 16, 1},  // it 15
                {C, 16, 16, 1},  // it 16
                {O, 16, 8, 1},   // it 17
                {O, 8, 4, 1},    // it 18
            });
}

TEST_CASE("the scale doubles after each window of clean steps, first on step window + 1",
          "[loss_scaler]") {
  LossScaler s;  // DeepSpeed's defaults: 2^16, window 1000, hysteresis 2, min 1
  CHECK(s.scale() == 65536.0f);
  for (int i = 0; i < 1000; ++i) REQUIRE(s.update(false).next_scale == 65536.0f);
  const StepDecision grow = s.update(false);  // iteration 1000: s = 1000
  CHECK(grow.next_scale == 131072.0f);
  CHECK_FALSE(grow.skip);
  CHECK(grow.reason == "1001 steps without overflow: scale doubled to 131072");
  for (int i = 0; i < 999; ++i) REQUIRE(s.update(false).next_scale == 131072.0f);
  CHECK(s.update(false).next_scale == 262144.0f);  // iteration 2000

  // DeepSpeed's own unit test (test_no_overflow: scale 2^8, window 2): after each step, the
  // scale doubles for the next one whenever cur_iter % 2 == 0.
  LossScalerConfig c;
  c.initial_scale_power = 8;
  c.loss_scale_window = 2;
  LossScaler t(c);
  float expected = 256;
  for (int i = 0; i < 10; ++i) {
    t.update(false);
    CHECK(t.scale() == expected);
    if (t.state().cur_iter % 2 == 0) expected *= 2;
  }

  LossScalerConfig legacy;
  legacy.window_rule = ScaleWindowRule::deepspeed_legacy;
  LossScaler l(legacy);
  for (int i = 0; i < 999; ++i) REQUIRE(l.update(false).next_scale == 65536.0f);
  CHECK(l.update(false).next_scale == 131072.0f);  // iteration 999: the 1000th clean step
}

TEST_CASE("hysteresis absorbs overflows before the scale starts to drop", "[loss_scaler]") {
  // DeepSpeed's test_hysteresis: hysteresis 3, scale 2^8, four overflows.
  LossScalerConfig c;
  c.initial_scale_power = 8;
  c.hysteresis = 3;
  LossScaler s(c);
  std::vector<float> scales;
  for (int i = 0; i < 4; ++i) scales.push_back(s.update(true).next_scale);
  CHECK(scales == std::vector<float>{256, 256, 128, 64});

  LossScaler d(LossScalerConfig{});
  StepDecision first = d.update(true);
  CHECK(first.skip);
  CHECK(first.reason ==
        "overflow in gradients at loss scale 65536: step skipped, hysteresis 2 -> 1 (the scale "
        "stays)");
  StepDecision second = d.update(true);
  CHECK(second.reason ==
        "overflow in gradients at loss scale 65536: step skipped, scale halved to 32768");
}

TEST_CASE(
    "with consecutive hysteresis a clean step refills it, so isolated overflows never "
    "lower the scale",
    "[loss_scaler]") {
  // Scale 16, window 3, hysteresis 2. Same flags, both variants.
  LossScalerConfig c = small(3, 2);
  c.consecutive_hysteresis = true;
  LossScaler with(c);
  replay(with, {
                   {O, 16, 16, 1},  // it 0: 2 -> 1
                   {C, 16, 16, 2},  // it 1: refilled by the clean step
                   {O, 16, 16, 1},  // it 2
                   {C, 16, 16, 2},  // it 3
                   {O, 16, 16, 1},  // it 4
                   {O, 16, 8, 1},   // it 5: two in a row: halve; last = 5
                   {C, 8, 8, 2},    // it 6: s = 0
                   {C, 8, 8, 2},    // it 7
                   {C, 8, 8, 2},    // it 8
                   {C, 8, 16, 2},   // it 9: s = 3: double
                   {O, 16, 16, 1},  // it 10
                   {O, 16, 8, 1},   // it 11
               });
  LossScaler without(small(3, 2));
  replay(without, {
                      {O, 16, 16, 1},  // it 0: 2 -> 1
                      {C, 16, 16, 1},  // it 1: not refilled
                      {O, 16, 8, 1},   // it 2: halve
                      {C, 8, 8, 1},    // it 3
                      {O, 8, 4, 1},    // it 4
                      {O, 4, 2, 1},    // it 5: last = 5
                      {C, 2, 2, 1},    // it 6
                      {C, 2, 2, 1},    // it 7
                      {C, 2, 2, 1},    // it 8
                      {C, 2, 4, 2},    // it 9: double, refilled
                      {O, 4, 4, 1},    // it 10
                      {O, 4, 2, 1},    // it 11
                  });
}

TEST_CASE(
    "halving is floored at the minimum scale, and an overflow there with hysteresis spent "
    "is an error",
    "[loss_scaler]") {
  LossScalerConfig c;
  c.initial_scale_power = 3;  // 8
  c.min_loss_scale = 3;
  c.hysteresis = 1;
  LossScaler s(c);
  CHECK(s.update(true).next_scale == 4);
  const StepDecision floor = s.update(true);  // 4 / 2 = 2 < 3
  CHECK(floor.next_scale == 3);
  CHECK(floor.reason ==
        "overflow in gradients at loss scale 4: step skipped, scale lowered to its minimum 3");
  const LossScalerState before = s.state();
  try {
    s.update(true);
    FAIL("an overflow at the minimum scale with hysteresis spent must throw");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("gradient overflow persists at the minimum loss scale 3"));
    CHECK_THAT(what, Catch::Contains("lower the learning rate, use bf16, or lower min_loss_scale"));
  }
  CHECK(s.state() == before);  // nothing changed, as in DeepSpeed, which raises first

  // With hysteresis 2 the floor is reached, then one more overflow is absorbed, then it throws.
  LossScalerConfig h;
  h.initial_scale_power = 2;  // 4
  LossScaler t(h);
  CHECK(t.update(true).next_scale == 4);  // 2 -> 1
  CHECK(t.update(true).next_scale == 2);
  CHECK(t.update(true).next_scale == 1);
  CHECK_THROWS_AS(t.update(true), Error);
}

TEST_CASE("with raising turned off, overflows at the minimum scale keep skipping steps",
          "[loss_scaler]") {
  LossScalerConfig c;
  c.initial_scale_power = 1;
  c.hysteresis = 1;
  c.raise_error_at_min_scale = false;
  LossScaler s(c);
  CHECK(s.update(true).next_scale == 1);
  for (int i = 0; i < 5; ++i) {
    const StepDecision d = s.update(true);
    CHECK(d.skip);
    CHECK(d.next_scale == 1);
    CHECK(d.reason ==
          "overflow in gradients at loss scale 1: step skipped, the scale stays at its minimum 1");
  }
}

TEST_CASE("a static loss scale never changes, but an overflow still skips the step",
          "[loss_scaler]") {
  LossScalerConfig c;
  c.loss_scale = 128;
  c.loss_scale_window = 1;
  LossScaler s(c);
  CHECK_FALSE(s.dynamic());
  for (int i = 0; i < 50; ++i) {
    const bool overflow = i % 3 == 0;
    const StepDecision d = s.update(overflow);
    CHECK(d.skip == overflow);
    CHECK(d.scale_used == 128);
    CHECK(d.next_scale == 128);
    CHECK(d.reason.empty() == !overflow);
  }
  CHECK(s.state().cur_iter == 50);
}

TEST_CASE("a scaler restored from its state continues the same trajectory", "[loss_scaler]") {
  LossScalerConfig c = small(5, 3);
  c.raise_error_at_min_scale = false;
  std::mt19937 gen(5);
  std::vector<bool> flags(400);
  for (std::size_t i = 0; i < flags.size(); ++i) flags[i] = gen() % 4 == 0;
  LossScaler a(c);
  for (std::size_t i = 0; i < 137; ++i) a.update(flags[i]);
  const LossScalerState saved = a.state();
  LossScaler b(c);
  b.restore(saved);
  CHECK(b.state() == saved);
  for (std::size_t i = 137; i < flags.size(); ++i) {
    const StepDecision x = a.update(flags[i]), y = b.update(flags[i]);
    REQUIRE(x.scale_used == y.scale_used);
    REQUIRE(x.next_scale == y.next_scale);
    REQUIRE(x.reason == y.reason);
  }
  CHECK(a.state() == b.state());

  // DeepSpeed's test_hysteresis_survives_a_checkpoint: one overflow already spent.
  LossScalerConfig h;
  h.initial_scale_power = 8;
  h.hysteresis = 3;
  LossScaler before(h);
  before.update(true);
  LossScaler after(h);
  after.restore(before.state());
  CHECK(after.state().cur_hysteresis == 2);
}

TEST_CASE("bad settings and inconsistent checkpoints are refused with a sentence naming the key",
          "[loss_scaler]") {
  auto refused = [](LossScalerConfig c, const char* key) {
    try {
      LossScaler s(c);
      FAIL("accepted a bad " << key);
    } catch (const Error& e) {
      CHECK(e.where().key == key);
    }
  };
  LossScalerConfig c;
  c.loss_scale_window = 0;
  refused(c, "fp16.loss_scale_window");
  c = {};
  c.hysteresis = 0;
  refused(c, "fp16.hysteresis");
  c = {};
  c.min_loss_scale = 0;
  refused(c, "fp16.min_loss_scale");
  c = {};
  c.loss_scale = -1;
  refused(c, "fp16.loss_scale");
  c = {};
  c.initial_scale_power = 128;
  refused(c, "fp16.initial_scale_power");
  c = {};
  c.scale_factor = 1;
  refused(c, "fp16.scale_factor");

  LossScaler s;
  LossScalerState bad = s.state();
  bad.cur_hysteresis = 0;
  CHECK_THROWS_AS(s.restore(bad), Error);
  bad = s.state();
  bad.last_overflow_iter = 0;  // cannot have overflowed at an iteration not yet run
  CHECK_THROWS_AS(s.restore(bad), Error);
  bad = s.state();
  bad.cur_scale = NAN;
  CHECK_THROWS_AS(s.restore(bad), Error);
}

TEST_CASE("the scale stops growing at the largest power of two a float holds", "[loss_scaler]") {
  LossScalerConfig c;
  c.initial_scale_power = 126;
  c.loss_scale_window = 1;
  LossScaler s(c);
  for (int i = 0; i < 10; ++i) s.update(false);
  CHECK(s.scale() == std::ldexp(1.0f, 127));
}

TEST_CASE("the printed scale is exact and never negative, whatever its size", "[loss_scaler]") {
  CHECK(loss_scale_text(65536) == "65536");  // 2^16, as step lines have always shown it
  CHECK(loss_scale_text(1) == "1");
  CHECK(loss_scale_text(0x1p52) == "4503599627370496");
  CHECK(loss_scale_text(0x1p53) == "2^53");
  // A static scale of 1e30 is stored as a float: not a power of two, and past any integer type.
  CHECK(loss_scale_text(static_cast<float>(1e30)) == "1e+30");
  CHECK(loss_scale_text(0x1p100) == "2^100");
  CHECK(loss_scale_text(0x1p127) == "2^127");
  CHECK(loss_scale_text(0x1p-100) == "2^-100");
  CHECK(loss_scale_text(0.5) == "2^-1");
  CHECK(loss_scale_text(static_cast<float>(1e-30)) == "1e-30");
  CHECK(loss_scale_text(1000) == "1000");
  CHECK(loss_scale_text(0.3) == "0.3");
  CHECK(loss_scale_text(1000.5) == "1000.5");
  for (int k = -149; k <= 127; ++k) {
    CAPTURE(k);
    CHECK(loss_scale_text(std::ldexp(1.0, k)).find('-') == (k < 0 ? 2u : std::string::npos));
  }
}

