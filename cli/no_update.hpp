// The rule that ends a `zero train` run whose steps apply no update (docs/config.md, "Runs that
// apply no update"): a step applies none when the engine skipped it for a non-finite gradient,
// or when its gradient is zero everywhere (global norm exactly 0: a static fp16 loss scale so
// small that every gradient flushes to zero, a loss that does not reach the parameters). Skips
// of a dynamic fp16 loss scale still above min_loss_scale are the scaler finding its range, its
// normal start, and count as neither. The run ends, after its summary, with one sentence and a
// non-zero status when
//  - max_consecutive_skipped_steps steps in a row applied no update (the run stops there; the
//    engine itself stops a run of that many skips alone), or
//  - at its end, more than half of its steps applied no update.
// Nothing is deleted: the checkpoints saved before the end stay.
#pragma once

#include <cstdint>
#include <string>

#include "zero/zero.hpp"

namespace zero::cli {

class NoUpdateRule {
 public:
  NoUpdateRule() = default;
  explicit NoUpdateRule(const Config& config);
  // After each step; `step` counts from 1 (the loop's step number). True when the run must stop
  // now.
  bool step(const StepReport& rep, std::int64_t step);
  std::int64_t no_update() const { return skipped_ + zero_gradient_; }  // steps applying none
  std::int64_t zero_gradient() const { return zero_gradient_; }  // of which: gradients all zero
  // The summary's "(N skipped)", and the steps with all-zero gradients when there were any.
  std::string summary_text(std::int64_t skipped) const;
  // The sentence that ends a run of `steps` steps (those it took), empty when the run trained.
  std::string verdict(std::int64_t steps) const;

 private:
  std::string cause() const;  // what the steps without update were, and what to do
  std::int64_t limit_ = 0;
  double static_fp16_scale_ = 0;   // > 0: the static fp16 loss scale
  double dynamic_min_scale_ = -1;  // >= 0: dynamic fp16 scaling's min_loss_scale
  std::int64_t zero_gradient_ = 0, skipped_ = 0;
  std::int64_t in_a_row_ = 0, row_start_ = 0, last_ = 0;
  bool stopped_ = false;
  std::string last_skip_reason_;
};

}  // namespace zero::cli
