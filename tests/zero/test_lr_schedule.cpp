// Learning-rate schedules against numbers worked by hand from DeepSpeed's formulas
// (deepspeed/runtime/lr_schedules.py): step s here is DeepSpeed's last_batch_iteration = s.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "zero/lr_schedule.hpp"

using zero::lr_at;
using zero::SchedulerConfig;
using zero::ScheduleType;
using zero::WarmupType;

namespace {

SchedulerConfig warmup(WarmupType type, double min_lr, double max_lr, std::int64_t steps) {
  SchedulerConfig s;
  s.type = ScheduleType::warmup;
  s.warmup_type = type;
  s.warmup_min_lr = min_lr;
  s.warmup_max_lr = max_lr;
  s.warmup_num_steps = steps;
  return s;
}

// Approx with a relative margin tight enough to catch an off-by-one step.
Approx near(double x) {
  return Approx(x).epsilon(1e-12).margin(1e-18);
}

}  // namespace

TEST_CASE("The constant schedule is the base learning rate at every step") {
  SchedulerConfig s;
  CHECK(lr_at(s, 3e-4, 0) == 3e-4);
  CHECK(lr_at(s, 3e-4, 123456) == 3e-4);
}

TEST_CASE("Linear warmup rises from warmup_min_lr by step / warmup_num_steps, then holds") {
  // gamma = step / 10; lr = 0 + (1e-3 - 0) * gamma
  const SchedulerConfig s = warmup(WarmupType::linear, 0.0, 1e-3, 10);
  CHECK(lr_at(s, 99.0, 0) == 0.0);          // 0/10: the first step trains at the minimum
  CHECK(lr_at(s, 99.0, 5) == near(5e-4));   // 5/10
  CHECK(lr_at(s, 99.0, 9) == near(9e-4));   // 9/10: the last warmup step is below the max
  CHECK(lr_at(s, 99.0, 10) == near(1e-3));  // end of warmup: gamma = 1
  CHECK(lr_at(s, 99.0, 1'000'000) == near(1e-3));
}

TEST_CASE("Log warmup rises by log(step + 1) / log(warmup_num_steps), DeepSpeed's default") {
  // lr = 1e-4 + 9e-4 * ln(step + 1) / ln(100)
  const SchedulerConfig s = warmup(WarmupType::log, 1e-4, 1e-3, 100);
  CHECK(lr_at(s, 99.0, 0) == near(1e-4));    // ln 1 = 0
  CHECK(lr_at(s, 99.0, 9) == near(5.5e-4));  // ln 10 / ln 100 = 1/2: 1e-4 + 4.5e-4
  CHECK(lr_at(s, 99.0, 99) == near(1e-3));   // ln 100 / ln 100 = 1, one step before the end
  CHECK(lr_at(s, 99.0, 100) == near(1e-3));  // past the warmup: held
  CHECK(lr_at(s, 99.0, 5000) == near(1e-3));
}

TEST_CASE("Without warmup_max_lr the warmup rises to the optimizer's learning rate") {
  SchedulerConfig s = warmup(WarmupType::linear, 0.0, 0.0, 4);
  s.warmup_max_lr.reset();
  CHECK(lr_at(s, 2e-3, 2) == near(1e-3));  // 2/4 of 2e-3
  CHECK(lr_at(s, 2e-3, 4) == near(2e-3));
}

TEST_CASE("A warmup of one step behaves as two, as in DeepSpeed, instead of dividing by log 1") {
  const SchedulerConfig s = warmup(WarmupType::log, 0.0, 1e-3, 1);
  CHECK(lr_at(s, 1.0, 0) == 0.0);         // ln 1 / ln 2 = 0
  CHECK(lr_at(s, 1.0, 1) == near(1e-3));  // ln 2 / ln 2 = 1
  CHECK(lr_at(s, 1.0, 2) == near(1e-3));
}

TEST_CASE("WarmupDecayLR decays linearly from the end of warmup to zero at total_num_steps") {
  // Warmup 10 linear steps to 1e-3, then gamma = (110 - step) / (110 - 10).
  SchedulerConfig s = warmup(WarmupType::linear, 0.0, 1e-3, 10);
  s.type = ScheduleType::warmup_linear_decay;
  s.total_num_steps = 110;
  CHECK(lr_at(s, 1.0, 0) == 0.0);           // warmup start
  CHECK(lr_at(s, 1.0, 5) == near(5e-4));    // mid-warmup: 5/10
  CHECK(lr_at(s, 1.0, 10) == near(1e-3));   // end of warmup: (110 - 10) / 100 = 1
  CHECK(lr_at(s, 1.0, 60) == near(5e-4));   // mid-decay: (110 - 60) / 100 = 0.5
  CHECK(lr_at(s, 1.0, 109) == near(1e-5));  // last decaying step: 1/100
  CHECK(lr_at(s, 1.0, 110) == 0.0);         // end: 0/100
  CHECK(lr_at(s, 1.0, 200) == 0.0);         // past the end: max(0, -90/100)
}

TEST_CASE("WarmupCosineLR warms up by ratio, then follows a cosine down to cos_min_ratio") {
  // base 1e-3; warmup 10 linear steps from ratio 0.1; then, with t = step - 10 + 1,
  // ratio = 0.01 + 0.99 * (1 + cos(pi * min(1, t / 100))) / 2.
  SchedulerConfig s;
  s.type = ScheduleType::warmup_cosine;
  s.warmup_type = WarmupType::linear;
  s.warmup_num_steps = 10;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  s.total_num_steps = 110;
  const double lr = 1e-3;
  CHECK(lr_at(s, lr, 0) == near(1e-4));    // 0.1 + 0/10 * 0.9 = 0.1
  CHECK(lr_at(s, lr, 5) == near(5.5e-4));  // 0.1 + 5/10 * 0.9 = 0.55
  CHECK(lr_at(s, lr, 9) == near(9.1e-4));  // 0.1 + 9/10 * 0.9 = 0.91
  // End of warmup, t = 1: (1 + cos(pi/100)) / 2 = 1 - sin^2(pi/200) = 0.99975328...
  // ratio = 0.01 + 0.99 * 0.999753280 = 0.999755748
  CHECK(lr_at(s, lr, 10) == Approx(9.99755748e-4).epsilon(1e-9));
  CHECK(lr_at(s, lr, 59) == near(5.05e-4));  // mid-decay, t = 50: 0.01 + 0.99 * 0.5 = 0.505
  CHECK(lr_at(s, lr, 109) == near(1e-5));    // end, t = 100: cos(pi) = -1, ratio 0.01
  CHECK(lr_at(s, lr, 500) == near(1e-5));    // past the end: progress clamped to 1
}

TEST_CASE("WarmupCosineLR's log warmup uses the same log ramp as WarmupLR") {
  SchedulerConfig s;
  s.type = ScheduleType::warmup_cosine;
  s.warmup_num_steps = 100;
  s.warmup_min_ratio = 0.2;
  s.total_num_steps = 1000;
  // step 9: ln 10 / ln 100 = 0.5; ratio = 0.2 + 0.5 * 0.8 = 0.6
  CHECK(lr_at(s, 2e-3, 9) == near(1.2e-3));
}

TEST_CASE("A decay that ends before the warmup does holds the floor after the warmup") {
  SchedulerConfig s;
  s.type = ScheduleType::warmup_cosine;
  s.warmup_num_steps = 10;
  s.total_num_steps = 5;  // max(1, 5 - 10) = 1, so t / 1 >= 1 right away
  CHECK(lr_at(s, 1.0, 10) == near(1e-4));
  s.type = ScheduleType::warmup_linear_decay;
  CHECK(lr_at(s, 1.0, 10) == 0.0);  // max(0, (5 - 10) / 1)
}

TEST_CASE("A negative step or a decay without total_num_steps is an error") {
  SchedulerConfig s;
  CHECK_THROWS_WITH(lr_at(s, 1.0, -1), "learning-rate step must be >= 0, got -1");
  s.type = ScheduleType::warmup_linear_decay;
  CHECK_THROWS_WITH(lr_at(s, 1.0, 0),
                    "scheduler.params.total_num_steps: missing; WarmupDecayLR needs the step at "
                    "which the decay ends");
}
