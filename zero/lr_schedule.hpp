// Learning-rate schedules: the learning rate of an optimizer step as a pure function of the
// step number, matching DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR formulas.
#pragma once

#include <cstdint>

#include "zero/config.hpp"

namespace zero {

// The learning rate for optimizer step `step`, counted from 0 = the first optimizer step.
// base_lr is optimizer.params.lr: the constant rate, the warmup target when warmup_max_lr is
// unset, and the rate that WarmupCosineLR's ratios multiply.
//
// lr_at(s) is DeepSpeed's get_lr() at last_batch_iteration = s. DeepSpeed steps its scheduler
// after the optimizer, so its k-th optimizer step uses get_lr() at k - 1 (and its first two
// steps both run at the warmup start); zero applies lr_at(k) to step k. Throws zero::Error for
// a negative step, or a decaying schedule without total_num_steps.
double lr_at(const SchedulerConfig& schedule, double base_lr, std::int64_t step);

}  // namespace zero
