// DeepSpeed's dynamic loss scaling rule (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler.update_scale), step for step, with the decisions explained in sentences.
#include "precision/loss_scaler.hpp"

#include <cmath>
#include <cstdio>

#include "base/error.hpp"

namespace zero {
namespace {

// Scales are powers of two in practice: print 65536, not 65536.000000 or 6.5536e+04.
std::string show(double x) {
  char buf[64];
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else
    std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

void require(bool ok, const char* key, const std::string& what) {
  if (ok) return;
  Error::Where where;
  where.key = key;
  throw Error(what, where);
}

}  // namespace

std::string loss_scale_text(double scale) {
  char buf[64];
  int e = 0;
  const double m = std::isfinite(scale) && scale > 0 ? std::frexp(scale, &e) : 0;
  if (m == 0.5 && (e - 1 < 0 || e - 1 > 52))  // scale == 2^(e - 1)
    std::snprintf(buf, sizeof buf, "2^%d", e - 1);
  else if (m != 0 && scale == std::floor(scale) && scale < 0x1p53)
    std::snprintf(buf, sizeof buf, "%.0f", scale);
  else
    std::snprintf(buf, sizeof buf, "%g", scale);
  return buf;
}

LossScaler::LossScaler(const LossScalerConfig& c) : config_(c) {
  require(std::isfinite(c.loss_scale) && c.loss_scale >= 0, "fp16.loss_scale",
          cat("must be 0 (dynamic scaling) or a positive static scale, got ", c.loss_scale));
  require(c.initial_scale_power >= -126 && c.initial_scale_power <= 127, "fp16.initial_scale_power",
          cat("2^", c.initial_scale_power, " is outside the range of a float; use -126..127"));
  require(c.loss_scale_window >= 1, "fp16.loss_scale_window",
          cat("must be at least 1, got ", c.loss_scale_window));
  require(c.hysteresis >= 1, "fp16.hysteresis", cat("must be at least 1, got ", c.hysteresis));
  require(std::isfinite(c.min_loss_scale) && c.min_loss_scale > 0, "fp16.min_loss_scale",
          cat("must be a positive number, got ", c.min_loss_scale));
  require(std::isfinite(c.scale_factor) && c.scale_factor > 1, "fp16.scale_factor",
          cat("must be greater than 1, got ", c.scale_factor));
  state_.cur_scale = dynamic() ? std::ldexp(1.0f, c.initial_scale_power) : c.loss_scale;
  state_.cur_iter = 0;
  state_.last_overflow_iter = -1;
  state_.cur_hysteresis = c.hysteresis;
}

StepDecision LossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  StepDecision d;
  d.skip = overflow;
  d.scale_used = s.cur_scale;

  if (!dynamic()) {
    if (overflow)
      d.reason = cat("overflow in gradients at the static loss scale ", show(s.cur_scale),
                     ": step skipped (a static scale never changes)");
    ++s.cur_iter;
    d.next_scale = s.cur_scale;
    return d;
  }

  const LossScalerConfig& c = config_;
  if (overflow) {
    if (c.hysteresis == 1 || s.cur_hysteresis == 1) {
      if (s.cur_scale == c.min_loss_scale && c.raise_error_at_min_scale)
        throw Error(cat("gradient overflow persists at the minimum loss scale ", show(s.cur_scale),
                        " (step ", s.cur_iter,
                        ", hysteresis spent), so no step can be taken; "
                        "lower the learning rate, use bf16, or lower min_loss_scale"));
      const float next = std::fmax(s.cur_scale / c.scale_factor, c.min_loss_scale);
      std::string what;
      if (next == s.cur_scale)
        what = cat("the scale stays at its minimum ", show(next));
      else if (next == s.cur_scale / c.scale_factor)
        what = c.scale_factor == 2
                   ? cat("scale halved to ", show(next))
                   : cat("scale divided by ", show(c.scale_factor), " to ", show(next));
      else
        what = cat("scale lowered to its minimum ", show(next));
      d.reason =
          cat("overflow in gradients at loss scale ", show(s.cur_scale), ": step skipped, ", what);
      s.cur_scale = next;
    } else {
      d.reason = cat("overflow in gradients at loss scale ", show(s.cur_scale),
                     ": step skipped, hysteresis ", s.cur_hysteresis, " -> ", s.cur_hysteresis - 1,
                     " (the scale stays)");
      --s.cur_hysteresis;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    if (c.consecutive_hysteresis) s.cur_hysteresis = c.hysteresis;
    const std::int64_t clean = s.cur_iter - s.last_overflow_iter;  // clean steps, this one included
    const bool grow = c.window_rule == ScaleWindowRule::deepspeed
                          ? clean - 1 > 0 && (clean - 1) % c.loss_scale_window == 0
                          : clean % c.loss_scale_window == 0;
    if (grow) {
      if (!c.consecutive_hysteresis) s.cur_hysteresis = c.hysteresis;
      // DeepSpeed's Python float would go past 2^127; a float scale stops there instead.
      const float next = s.cur_scale * c.scale_factor;
      if (std::isfinite(next)) {
        d.reason = cat(clean, " steps without overflow: scale ",
                       c.scale_factor == 2 ? "doubled" : "raised", " to ", show(next));
        s.cur_scale = next;
      }
    }
  }
  ++s.cur_iter;
  d.next_scale = s.cur_scale;
  return d;
}

void LossScaler::restore(const LossScalerState& in) {
  require(in.cur_iter >= 0, "loss scaler checkpoint",
          cat("cur_iter must not be negative, got ", in.cur_iter));
  require(in.last_overflow_iter >= -1 && in.last_overflow_iter < in.cur_iter,
          "loss scaler checkpoint",
          cat("last_overflow_iter ", in.last_overflow_iter, " must lie in [-1, cur_iter ",
              in.cur_iter, ")"));
  LossScalerState s = in;
  if (dynamic()) {
    require(std::isfinite(in.cur_scale) && in.cur_scale > 0, "loss scaler checkpoint",
            cat("cur_scale must be a positive number, got ", in.cur_scale));
    require(in.cur_hysteresis >= 1, "loss scaler checkpoint",
            cat("cur_hysteresis must be at least 1, got ", in.cur_hysteresis));
  } else {
    s.cur_scale = config_.loss_scale;
    s.cur_hysteresis = config_.hysteresis;
  }
  state_ = s;
}

}  // namespace zero
