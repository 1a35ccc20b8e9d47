// A DeepSpeed config for the config tests (tests/zero/test_config*.cpp): the parse helpers and
// a user's stage-3 file.
#pragma once

#include <string>

#include "base/error.hpp"
#include "zero/config.hpp"

namespace zero::testing {

using zero::Config;
using zero::parse_config;

inline Config parse(const std::string& text) {
  return parse_config(text, "test.json");
}

// The message parse_config throws for `text`, or "" when it parses.
inline std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "";
}

inline bool has_warning(const Config& c, const std::string& text) {
  for (const auto& w : c.warnings)
    if (w == text) return true;
  return false;
}

// A user's ds_config.json for a stage-3 bf16 run, "auto"-free, as DeepSpeed's docs write them.
inline constexpr const char* kDeepSpeedStage3 = R"({
  "train_batch_size": 256,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 8,
  "gradient_clipping": 1.0,
  "steps_per_print": 50,
  "wall_clock_breakdown": false,
  "optimizer": {
    "type": "AdamW",
    "params": {
      "lr": 3e-4,
      "betas": [0.9, 0.95],
      "eps": 1e-8,
      "weight_decay": 0.1
    }
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {
      "warmup_min_lr": 0,
      "warmup_max_lr": 3e-4,
      "warmup_num_steps": 2000,
      "warmup_type": "linear",
      "total_num_steps": 100000
    }
  },
  "bf16": { "enabled": true },
  "communication_data_type": "bf16",
  "zero_optimization": {
    "stage": 3,
    "overlap_comm": true,
    "contiguous_gradients": true,
    "reduce_bucket_size": 5e8,
    "allgather_bucket_size": 2e8,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e6,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": true,
    "sub_group_size": 1e9,
    "offload_optimizer": { "device": "none" },
    "offload_param": { "device": "none" },
    "zero_hpz_partition_size": 8
  }
})";

}  // namespace zero::testing
