// The wire settings `zero compare --compress` runs side by side: each a named change of how a
// run's gradients and weights travel (dense, a reduction dtype, qgZ int8/int4 blocks, TopK with
// or without error feedback, qwZ, hpZ, joined by +), parsed once before ranks start, put into a
// row's config, and refused in one sentence where a stage cannot run it (docs/compare.md,
// "Compression settings side by side").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zero/zero.hpp"

namespace zero::cli {

// One setting of --compress. What it does not name is the run's own: the reduction dtype
// (--reduce-dtype, the config), --quant-block, --topk-ratio, --error-feedback, --hpz.
struct WireSetting {
  std::string name;                           // as the list gives it
  std::optional<DType> reduce;                // fp32, bf16 or fp16: the reduction's dtype
  GradCompression gradients = GradCompression::none;
  std::optional<double> topk_ratio;           // topk:R, topk-P%
  std::optional<bool> error_feedback;         // topk:R:ef / :noef, topk-P%-ef / -noef
  bool weights_int8 = false;                  // qwZ: stage 3's gathers as int8 blocks
  int hpz = 0;                                // hpZ[:H]: the secondary group's ranks; 0: not named
  // Whether it changes what travels from dense (qwZ, qgZ, TopK; hpZ moves dense bytes elsewhere).
  bool compresses() const {
    return gradients != GradCompression::none || weights_int8;
  }
};

// hpZ without a size: the smallest secondary group (2 ranks, as on 2 GPUs a node).
inline constexpr int kDefaultHpz = 2;

// "dense,int8,int4,topk:0.01,topk:0.01:noef,qwZ+qgZ+hpZ", or bench/compression_cluster.py's
// names (dense-fp32, dense-bf16, qgZ-int8, qgZ-int4, topk-1%-ef, topk-1%-noef, qwZ,
// qwZ+qgZ+hpZ). A bad item is one zero::Error naming it.
std::vector<WireSetting> parse_wire_settings(std::string_view list);

// Why `stage` at `ranks` ranks cannot run the setting, in one sentence; empty when it can.
std::string cannot_run(const WireSetting& s, int stage, int ranks);

// The row's config: `base` with the setting's wire in place of its compression (DeepSpeed's
// zero_quantized_* keys folded into the setting: off unless it names them).
Config with_setting(Config base, const WireSetting& s);

// Equal for two rows exactly when they send the same encodings and sum in the same dtype, so
// their weights and losses must agree bit for bit (the compression partitions are the same at
// every stage: docs/compression.md, "Determinism and the stages").
std::string wire_key(const Config& config, int stage, int ranks);

}  // namespace zero::cli
