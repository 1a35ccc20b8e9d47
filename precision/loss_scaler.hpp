// The dynamic loss scaler of fp16 training, as pure logic (no ranks, no memory): DeepSpeed's
// rule for when to skip a step, halve the scale and grow it again, plus a static mode.
#pragma once

#include <cstdint>
#include <string>

namespace zero {

// When a run of clean steps doubles the scale. DeepSpeed changed this once; both are kept so
// that a trajectory can be matched against either version.
enum class ScaleWindowRule : std::uint8_t {
  // DeepSpeed today (DynamicLossScaler, and FP16_Optimizer in every release): with
  // s = cur_iter - last_overflow_iter - 1, grow when s > 0 and s % scale_window == 0, i.e. on
  // the (scale_window + 1)-th clean step after an overflow or the start, then every window.
  deepspeed,
  // Older DeepSpeed DynamicLossScaler (the ZeRO optimizers of earlier releases): grow when
  // (cur_iter - last_overflow_iter) % scale_window == 0, i.e. on the scale_window-th clean step.
  deepspeed_legacy,
};

// The fp16 section of a DeepSpeed config, under the same names.
struct LossScalerConfig {
  // fp16.loss_scale: > 0 is a static scale that never changes; 0 means dynamic scaling.
  float loss_scale = 0;
  // fp16.initial_scale_power: a dynamic run starts at 2^initial_scale_power.
  int initial_scale_power = 16;
  // fp16.loss_scale_window: clean steps before the scale grows (see ScaleWindowRule).
  int loss_scale_window = 1000;
  // fp16.hysteresis: overflows absorbed before the scale starts to drop.
  int hysteresis = 2;
  // fp16.consecutive_hysteresis: every clean step refills the hysteresis, not only a growth.
  bool consecutive_hysteresis = false;
  // fp16.min_loss_scale: the scale never drops below this.
  float min_loss_scale = 1;
  // The factor of each drop and growth (fixed at 2 in DeepSpeed).
  float scale_factor = 2;
  // An overflow at min_loss_scale with hysteresis spent throws instead of skipping forever.
  bool raise_error_at_min_scale = true;
  ScaleWindowRule window_rule = ScaleWindowRule::deepspeed;
};

// What one step should do, and why.
struct StepDecision {
  // Overflow: drop this step's update.
  bool skip = false;
  // The scale this step's gradients were computed with.
  float scale_used = 0;
  // The scale for the next step.
  float next_scale = 0;
  // A sentence for the log when the step is skipped or the scale changes; else empty.
  std::string reason;
};

// Everything a checkpoint must keep to resume the same trajectory (DeepSpeed's field names).
struct LossScalerState {
  float cur_scale = 0;
  std::int64_t cur_iter = 0;
  std::int64_t last_overflow_iter = -1;
  int cur_hysteresis = 0;
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

// The scale as a step line prints it: a power of two 2^k as its integer for 0 <= k <= 52
// ("65536"), else as "2^k" ("2^100", "2^-100"); any other integer below 2^53 as itself, any
// other value in %g ("0.3", "1e+30"). Exact for every float scale, never negative.
std::string loss_scale_text(double scale);

class LossScaler {
 public:
  // Throws zero::Error naming the config key for values DeepSpeed would reject.
  explicit LossScaler(const LossScalerConfig& config = {});

  // The scale to multiply this step's loss by.
  float scale() const { return state_.cur_scale; }
  bool dynamic() const { return config_.loss_scale <= 0; }
  const LossScalerConfig& config() const { return config_; }

  // Record whether this step's gradients overflowed (any inf or NaN, on any rank) and decide.
  // Throws zero::Error, leaving the state unchanged, when an overflow arrives at the minimum
  // scale with hysteresis spent and config().raise_error_at_min_scale is set.
  StepDecision update(bool overflow);

  LossScalerState state() const { return state_; }
  // Resume from a checkpoint. Throws zero::Error for an inconsistent state. A static scaler keeps
  // its configured scale (the config wins over the checkpoint) and takes only the counters.
  void restore(const LossScalerState& s);

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

}  // namespace zero
