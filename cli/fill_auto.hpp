// Filling a config's "auto" values (Hugging Face Trainer placeholders, Config::auto_keys) the way
// the Trainer would, for `zero train` and `zero plan`, which stand in the Trainer's place.
//
// Two passes, because flags must win over the fills and some fills depend on what the flags set:
// fill_auto_defaults before the flags are applied (the command's own defaults: its lr, clipping,
// precision), fill_auto_from_model after them and after Config::resolve_batch (HF's rules that
// depend on the model's hidden size, and the learning rate the scheduler ends its warmup at).
// auto_fill_lines then says what every "auto" key ended up as, one line per key.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "zero/config.hpp"

namespace zero::cli {

// The command's defaults for the keys a Trainer fills from its arguments.
struct AutoDefaults {
  double lr = 1e-3;                         // optimizer.params.lr
  double clip = 0.0;                        // gradient_clipping
  Precision precision = Precision::bf16;    // fp16.enabled / bf16.enabled
  std::optional<std::int64_t> total_steps;  // scheduler.params.total_num_steps (the run's steps)
};

inline bool is_auto(const Config& c, std::string_view key) {
  for (const auto& k : c.auto_keys)
    if (k == key) return true;
  return false;
}

inline void fill_auto_defaults(Config& c, const AutoDefaults& d) {
  if (is_auto(c, "optimizer.params.lr")) c.optimizer.lr = d.lr;
  if (is_auto(c, "gradient_clipping")) c.gradient_clipping = d.clip;
  if (is_auto(c, "fp16.enabled") || is_auto(c, "bf16.enabled") || is_auto(c, "bfloat16.enabled"))
    c.precision = d.precision;
  // HF: warmup steps from the Trainer's arguments (0 by default); zero's smallest warmup is 1.
  if (is_auto(c, "scheduler.params.warmup_num_steps")) c.scheduler.warmup_num_steps = 1;
  if (is_auto(c, "scheduler.params.total_num_steps") && d.total_steps)
    c.scheduler.total_num_steps = *d.total_steps;
  if (is_auto(c, "scheduler.params.warmup_min_lr")) c.scheduler.warmup_min_lr = 0.0;
}

// `hidden`: the model's hidden size (the MLP's width, a GPT's hidden); nullopt when the model has
// none (zero plan --params), in which case zero's defaults stay.
inline void fill_auto_from_model(Config& c, std::optional<std::int64_t> hidden) {
  if (is_auto(c, "scheduler.params.warmup_max_lr")) c.scheduler.warmup_max_lr = c.optimizer.lr;
  if (!hidden) return;
  const std::int64_t h = *hidden;
  // Hugging Face's rules (transformers' integrations/deepspeed.py, hidden_size = h).
  if (is_auto(c, "zero_optimization.reduce_bucket_size")) c.zero.reduce_bucket_size = h * h;
  if (is_auto(c, "zero_optimization.stage3_prefetch_bucket_size"))
    c.zero.stage3_prefetch_bucket_size = static_cast<std::int64_t>(0.9 * double(h) * double(h));
  if (is_auto(c, "zero_optimization.stage3_param_persistence_threshold"))
    c.zero.stage3_param_persistence_threshold = 10 * h;
}

// The value an "auto" key holds now, as it would be written in the JSON.
inline std::string auto_value(const Config& c, std::string_view key) {
  std::ostringstream o;
  if (key == "train_batch_size")
    o << (c.train_batch_size ? *c.train_batch_size : 0);
  else if (key == "train_micro_batch_size_per_gpu")
    o << c.train_micro_batch_size_per_gpu;
  else if (key == "gradient_accumulation_steps")
    o << c.gradient_accumulation_steps;
  else if (key == "gradient_clipping")
    o << c.gradient_clipping;
  else if (key == "optimizer.params.lr")
    o << c.optimizer.lr;
  else if (key == "optimizer.params.betas")
    o << '[' << c.optimizer.beta1 << ", " << c.optimizer.beta2 << ']';
  else if (key == "optimizer.params.eps")
    o << c.optimizer.eps;
  else if (key == "optimizer.params.weight_decay")
    o << c.optimizer.weight_decay;
  else if (key == "scheduler.params.warmup_min_lr")
    o << c.scheduler.warmup_min_lr;
  else if (key == "scheduler.params.warmup_max_lr")
    o << c.scheduler.warmup_max_lr.value_or(c.optimizer.lr);
  else if (key == "scheduler.params.warmup_num_steps")
    o << c.scheduler.warmup_num_steps;
  else if (key == "scheduler.params.total_num_steps") {
    if (c.scheduler.total_num_steps)
      o << *c.scheduler.total_num_steps;
    else
      o << "unset";
  } else if (key == "fp16.enabled")
    o << (c.precision == Precision::fp16 ? "true" : "false");
  else if (key == "bf16.enabled" || key == "bfloat16.enabled")
    o << (c.precision == Precision::bf16 ? "true" : "false");
  else if (key == "zero_optimization.stage")
    o << c.zero.stage;
  else if (key == "zero_optimization.reduce_bucket_size")
    o << c.zero.reduce_bucket_size;
  else if (key == "zero_optimization.stage3_prefetch_bucket_size")
    o << c.zero.stage3_prefetch_bucket_size;
  else if (key == "zero_optimization.stage3_param_persistence_threshold")
    o << c.zero.stage3_param_persistence_threshold;
  else if (key == "zero_optimization.offload_optimizer.device" ||
           key == "zero_optimization.offload_param.device")
    o << "\"none\"";
  else
    o << "zero's default";
  return o.str();
}

// "<command>: filled optimizer.params.lr = 0.003 (was "auto")", one per "auto" key, in text order.
inline std::vector<std::string> auto_fill_lines(const Config& c, std::string_view command) {
  std::vector<std::string> lines;
  for (const auto& k : c.auto_keys)
    lines.push_back(std::string(command) + ": filled " + k + " = " + auto_value(c, k) +
                    " (was \"auto\")");
  return lines;
}

}  // namespace zero::cli
