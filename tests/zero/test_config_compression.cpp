// The "compression" key and DeepSpeed's ZeRO++ switches (zero/compression.hpp): read, written
// back, resolved into Settings, and every bad value one sentence naming the key.
#include <catch2/catch.hpp>

#include "zero/zero.hpp"

using Catch::Matchers::Contains;
using zero::GradCompression;

TEST_CASE("the compression block reads every key and writes them back", "[config][compression]") {
  const zero::Config c = zero::parse_config(
      R"({"compression": {"gradients": "topk", "weights": "int8", "block_size": 256,
          "topk_ratio": 0.05, "error_feedback": false},
          "zero_optimization": {"stage": 3}})",
      "<string>");
  CHECK(c.compression.gradients == GradCompression::topk);
  CHECK(c.compression.weights == zero::WeightCompression::int8);
  CHECK(c.compression.block_size == 256);
  CHECK(c.compression.topk_ratio == 0.05);
  CHECK(!c.compression.error_feedback);
  CHECK(c.warnings.empty());
  CHECK(zero::parse_config(zero::to_json(c), "<json>") == c);
  const zero::Settings s = zero::resolve_settings(c, 4);
  CHECK(s.compression.gradients == GradCompression::topk);
  CHECK(s.compression.weights_int8);
  CHECK(!s.compression.error_feedback);
}

TEST_CASE("DeepSpeed's ZeRO++ switches act: int4 gradients, int8 gathers at stage 3",
          "[config][compression]") {
  const zero::Config c = zero::parse_config(
      R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
          "zero_quantized_weights": true}})",
      "<string>");
  CHECK(c.warnings.empty());
  CHECK(zero::parse_config(zero::to_json(c), "<json>") == c);
  const zero::Settings s = zero::resolve_settings(c, 2);
  CHECK(s.compression.gradients == GradCompression::int4);
  CHECK(s.compression.weights_int8);
  // Below stage 3 the weights switch has nothing to act on: warned, and off.
  const zero::Config c2 = zero::parse_config(
      R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": true}})", "<string>");
  REQUIRE(c2.warnings.size() == 1);
  CHECK_THAT(c2.warnings[0], Contains("zero_quantized_weights") && Contains("only at stage 3"));
  CHECK(!zero::resolve_settings(c2, 2).compression.weights_int8);
}

TEST_CASE("bad compression values are one sentence naming the key", "[config][compression]") {
  auto fails = [](const char* text, const char* key) {
    CHECK_THROWS_WITH(zero::parse_config(text, "<string>"), Contains(key));
  };
  fails(R"({"compression": {"gradients": "int2"}})", "compression.gradients");
  fails(R"({"compression": {"weights": "int4"}})", "compression.weights");
  fails(R"({"compression": {"block_size": 0}})", "compression.block_size");
  fails(R"({"compression": {"topk_ratio": 0}})", "compression.topk_ratio");
  fails(R"({"compression": {"topk_ratio": 1.5}})", "compression.topk_ratio");
  fails(R"({"compression": {"bits": 4}})", "bits");
  zero::Config both = zero::parse_config(
      R"({"zero_optimization": {"zero_quantized_gradients": true},
          "compression": {"gradients": "topk"}})",
      "<string>");
  CHECK_THROWS_WITH(zero::resolve_settings(both, 2), Contains("set one of them"));
  zero::Config fp16 = zero::parse_config(
      R"({"fp16": {"enabled": true}, "compression": {"gradients": "topk"}})", "<string>");
  CHECK_THROWS_WITH(zero::resolve_settings(fp16, 2), Contains("compression.error_feedback"));
}
