// The "compression" key and the ZeRO++ switches: names, reading, writing and their resolution
// (zero/compression.hpp, zero/compression_read.hpp).
#include <array>
#include <utility>

#include "base/error.hpp"
#include "zero/compression_read.hpp"

namespace zero {

namespace {

constexpr std::array<std::pair<std::string_view, GradCompression>, 4> kGradNames{
    {{"none", GradCompression::none},
     {"int8", GradCompression::int8},
     {"int4", GradCompression::int4},
     {"topk", GradCompression::topk}}};
constexpr std::array<std::pair<std::string_view, WeightCompression>, 2> kWeightNames{
    {{"none", WeightCompression::none}, {"int8", WeightCompression::int8}}};

// Blocks of more than 2^24 values would let one scale cover more than a float counts exactly.
constexpr std::int64_t kMaxQuantBlock = std::int64_t{1} << 24;

}  // namespace

std::string_view name_of(GradCompression g) {
  for (auto [name, v] : kGradNames)
    if (v == g) return name;
  return "?";
}
std::string_view name_of(WeightCompression w) {
  for (auto [name, v] : kWeightNames)
    if (v == w) return name;
  return "?";
}
std::optional<GradCompression> parse_grad_compression(std::string_view text) {
  for (auto [name, v] : kGradNames)
    if (text == name) return v;
  return std::nullopt;
}
std::optional<WeightCompression> parse_weight_compression(std::string_view text) {
  for (auto [name, v] : kWeightNames)
    if (text == name) return v;
  return std::nullopt;
}

void read_compression(const detail::ObjectReader& top, Config& c) {
  const boost::json::value* v = top.get("compression");
  if (!v) return;
  const detail::ObjectReader s(
      *v, "compression", {"gradients", "weights", "block_size", "topk_ratio", "error_feedback"}, {},
      top.log());
  CompressionConfig& k = c.compression;
  s.choice("gradients", k.gradients, kGradNames);
  s.choice("weights", k.weights, kWeightNames);
  s.integer("block_size", k.block_size, 1, kMaxQuantBlock);
  if (s.number("topk_ratio", k.topk_ratio, detail::Num::unit_closed) && k.topk_ratio <= 0)
    detail::fail_expected(s.path_of("topk_ratio"), "a number in (0, 1]", *s.get("topk_ratio"));
  s.flag("error_feedback", k.error_feedback);
}

void read_zeropp_switches(const detail::ObjectReader& z, ZeroConfig& zc) {
  // Both act (zero/compression.hpp): ZeRO++'s qgZ (int4 gradient reduction) and qwZ (int8
  // gathers of the working params at stage 3).
  z.flag("zero_quantized_gradients", zc.zero_quantized_gradients);
  if (z.flag("zero_quantized_weights", zc.zero_quantized_weights) && zc.zero_quantized_weights &&
      zc.stage != 3)
    z.warnings().push_back(cat(z.path_of("zero_quantized_weights"),
                               " has an effect only at stage 3 (below it no gather precedes use)"));
}

void write_compression(const Config& c, boost::json::object& root, boost::json::object& zero) {
  if (c.zero.zero_quantized_gradients) zero["zero_quantized_gradients"] = true;
  if (c.zero.zero_quantized_weights) zero["zero_quantized_weights"] = true;
  const CompressionConfig& k = c.compression;
  if (k == CompressionConfig{}) return;
  root["compression"] = boost::json::object{{"gradients", name_of(k.gradients)},
                                            {"weights", name_of(k.weights)},
                                            {"block_size", k.block_size},
                                            {"topk_ratio", k.topk_ratio},
                                            {"error_feedback", k.error_feedback}};
}

WireCompression resolve_compression(const Config& c, bool stage3) {
  const CompressionConfig& k = c.compression;
  WireCompression w;
  w.gradients = k.gradients;
  if (c.zero.zero_quantized_gradients) {
    if (k.gradients != GradCompression::none && k.gradients != GradCompression::int4)
      throw Error(cat("zero_quantized_gradients asks for int4 gradients (ZeRO++ qgZ) but "
                      "compression.gradients is \"",
                      name_of(k.gradients), "\": set one of them"),
                  {.key = "zero_optimization.zero_quantized_gradients"});
    w.gradients = GradCompression::int4;
  }
  const bool weights = k.weights == WeightCompression::int8 || c.zero.zero_quantized_weights;
  w.weights_int8 = weights && stage3;
  w.block = k.block_size;
  w.topk_ratio = k.topk_ratio;
  w.error_feedback = w.gradients == GradCompression::topk && k.error_feedback;
  if (w.error_feedback && c.precision == Precision::fp16)
    throw Error(
        "TopK's error feedback with fp16 would carry gradients scaled by an old loss "
        "scale (and a skipped step's overflow) into later steps: train in bf16 or fp32, "
        "or set compression.error_feedback to false",
        {.key = "compression.error_feedback"});
  return w;
}

}  // namespace zero
