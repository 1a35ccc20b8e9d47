// Learning-rate schedules (see lr_schedule.hpp). The formulas follow DeepSpeed's
// deepspeed/runtime/lr_schedules.py: WarmupLR._get_gamma, WarmupDecayLR._get_gamma and
// WarmupCosineLR.get_lr_ratio, including its quirks, so that a DeepSpeed user's schedule gives
// the same numbers here:
//   - warmup_num_steps is raised to at least 2 (log warmup divides by log(warmup_num_steps));
//   - log warmup reaches only log(N)/log(N) = 1 at step N - 1, linear warmup (N-1)/N;
//   - WarmupDecayLR's decay divides by max(1, total - warmup) and stops at 0;
//   - WarmupCosineLR's cosine progress is clamped to 1, so past the end it stays at
//     cos_min_ratio (the clamp of current DeepSpeed; older releases oscillated back up).
#include "zero/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/error.hpp"

namespace zero {
namespace {

// Fraction of the warmup done at `step` (< warmup steps), in [0, 1).
double warmup_fraction(const SchedulerConfig& s, std::int64_t step, std::int64_t warmup) {
  if (s.warmup_type == WarmupType::log)
    return std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(warmup));
  return static_cast<double>(step) / static_cast<double>(warmup);
}

std::int64_t total_steps(const SchedulerConfig& s) {
  if (!s.total_num_steps) {
    Error::Where where;
    where.key = "scheduler.params.total_num_steps";
    throw Error(cat("missing; ", name_of(s.type), " needs the step at which the decay ends"),
                where);
  }
  return *s.total_num_steps;
}

}  // namespace

double lr_at(const SchedulerConfig& s, double base_lr, std::int64_t step) {
  if (step < 0) throw Error(cat("learning-rate step must be >= 0, got ", step));
  if (s.type == ScheduleType::constant) return base_lr;
  const std::int64_t warmup = std::max<std::int64_t>(2, s.warmup_num_steps);
  // Checked at every step, not only after the warmup, so a bad schedule fails on step 0.
  const std::int64_t total = s.type == ScheduleType::warmup ? 0 : total_steps(s);

  if (s.type == ScheduleType::warmup_cosine) {
    double ratio;
    if (step < warmup) {
      ratio = s.warmup_min_ratio + warmup_fraction(s, step, warmup) * (1.0 - s.warmup_min_ratio);
    } else {
      const double progress =
          std::min(1.0, static_cast<double>(step - warmup + 1) /
                            static_cast<double>(std::max<std::int64_t>(1, total - warmup)));
      const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
    return base_lr * ratio;
  }

  // WarmupLR and WarmupDecayLR: min_lr + (max_lr - min_lr) * gamma.
  const double min_lr = s.warmup_min_lr;
  const double max_lr = s.warmup_max_lr.value_or(base_lr);
  double gamma = 1.0;
  if (step < warmup) {
    gamma = warmup_fraction(s, step, warmup);
  } else if (s.type == ScheduleType::warmup_linear_decay) {
    gamma = std::max(0.0, static_cast<double>(total - step) /
                              static_cast<double>(std::max<std::int64_t>(1, total - warmup)));
  }
  return min_lr + (max_lr - min_lr) * gamma;
}

}  // namespace zero
