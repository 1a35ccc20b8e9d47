// What a run compresses on the wire, as the configuration gives it: the gradient reduction's
// encoding (blockwise int8 or int4, ZeRO++'s qgZ; or TopK with error feedback) and stage 3's
// parameter gathers (blockwise int8, ZeRO++'s qwZ). zero's own top-level key "compression";
// DeepSpeed's zero_quantized_gradients and zero_quantized_weights select the ZeRO++ pair.
// docs/compression.md says what each one sends and what it costs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace zero {

enum class GradCompression : std::uint8_t { none, int8, int4, topk };
enum class WeightCompression : std::uint8_t { none, int8 };

// The default block: ZeRO++'s quantisation group is of the same order (thousands of values).
inline constexpr std::int64_t kDefaultQuantBlock = 2048;

// compression {...}.
struct CompressionConfig {
  GradCompression gradients = GradCompression::none;    // the gradient reduction's encoding
  WeightCompression weights = WeightCompression::none;  // stage 3's forward/backward gathers
  std::int64_t block_size = kDefaultQuantBlock;         // values per fp32 scale (int8, int4)
  double topk_ratio = 0.01;                             // TopK: the fraction of each segment sent
  bool error_feedback = true;  // TopK: what was not sent is added next step
  friend bool operator==(const CompressionConfig&, const CompressionConfig&) = default;
};

std::string_view name_of(GradCompression g);    // "none", "int8", "int4", "topk"
std::string_view name_of(WeightCompression w);  // "none", "int8"
std::optional<GradCompression> parse_grad_compression(std::string_view text);
std::optional<WeightCompression> parse_weight_compression(std::string_view text);

// What a run does, resolved once (Settings::compression): the ZeRO++ keys folded in, the weight
// gathers compressed only where there are any (stage 3), error feedback only with TopK.
struct WireCompression {
  GradCompression gradients = GradCompression::none;
  bool weights_int8 = false;
  std::int64_t block = kDefaultQuantBlock;
  double topk_ratio = 0.01;
  bool error_feedback = false;
  bool any() const { return gradients != GradCompression::none || weights_int8; }
  int grad_bits() const { return gradients == GradCompression::int8 ? 8 : 4; }
};

}  // namespace zero
