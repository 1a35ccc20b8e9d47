// The rule that ends a run applying no update (cli/no_update.hpp).
#include "cli/no_update.hpp"

#include "precision/loss_scaler.hpp"

namespace zero::cli {

NoUpdateRule::NoUpdateRule(const Config& config)
    : limit_(config.max_consecutive_skipped_steps),
      static_fp16_scale_(config.precision == Precision::fp16 ? config.fp16.loss_scale : 0),
      dynamic_min_scale_(config.precision == Precision::fp16 && config.fp16.loss_scale == 0
                             ? config.fp16.min_loss_scale
                             : -1) {}

bool NoUpdateRule::step(const StepReport& rep, std::int64_t step) {
  last_ = step;
  // The dynamic scaler lowering its scale from 2^initial_scale_power: a start, not a failure.
  const bool finding_range =
      rep.skipped && dynamic_min_scale_ >= 0 && rep.loss_scale > dynamic_min_scale_;
  const bool zero = !rep.skipped && rep.grad_norm == 0;
  if (finding_range || (!rep.skipped && !zero)) {
    in_a_row_ = 0;
    return false;
  }
  if (in_a_row_++ == 0) row_start_ = step;
  if (zero) {
    ++zero_gradient_;
  } else {
    ++skipped_;
    // "non-finite gradient (norm nan): step skipped" -> "non-finite gradient (norm nan)"
    last_skip_reason_ = rep.skip_reason.substr(0, rep.skip_reason.rfind(": step skipped"));
  }
  stopped_ = limit_ > 0 && in_a_row_ >= limit_;
  return stopped_;
}

std::string NoUpdateRule::summary_text(std::int64_t skipped) const {
  return zero_gradient_ > 0
             ? cat("(", skipped, " skipped, ", zero_gradient_, " with every gradient zero)")
             : cat("(", skipped, " skipped)");
}

std::string NoUpdateRule::cause() const {
  std::string what;
  if (skipped_ > 0) what = cat(skipped_, " skipped (the last for: ", last_skip_reason_, ")");
  if (zero_gradient_ > 0)
    what += cat(what.empty() ? "" : ", ", zero_gradient_, " with every gradient zero");
  if (zero_gradient_ >= skipped_)
    return what + (static_fp16_scale_ > 0
                       ? cat(": the static fp16 loss_scale ", loss_scale_text(static_fp16_scale_),
                             " flushes every gradient to zero; raise it, or set it to 0 for "
                             "dynamic scaling")
                       : std::string(": the loss does not reach the parameters"));
  return what + ": lower the learning rate (--lr), or check the data and the loss";
}

std::string NoUpdateRule::verdict(std::int64_t steps) const {
  if (stopped_)
    return cat("steps ", row_start_, "-", last_, " applied no update, ", in_a_row_,
               " in a row (max_consecutive_skipped_steps is ", limit_, "): ", cause(),
               "; the run stops at step ", last_);
  if (2 * no_update() > steps)
    return cat(no_update(), " of the run's ", steps,
               " steps applied no update (more than half): ", cause());
  return {};
}

}  // namespace zero::cli
