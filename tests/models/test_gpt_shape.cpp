// The GPT's shape (models/gpt_shape.hpp): the presets' parameter counts against the published
// ones, the activation formulas, and shapes too large to plan refused in a sentence.
#include <catch2/catch.hpp>
#include <algorithm>
#include <utility>

#include "base/error.hpp"
#include "models/gpt_shape.hpp"

using namespace zero;
using namespace zero::models;
using Catch::Matchers::Contains;

TEST_CASE("GPT shapes: parameter counts of known models, and activations") {
  auto count = [](const GptShape& s) {
    std::int64_t n = 0;
    for (const auto& u : gpt_units(s))
      for (const auto& p : u.params) {
        std::int64_t k = 1;
        for (auto d : p.shape) k *= d;
        n += k;
      }
    return n;
  };
  CHECK(count(*gpt_preset("gpt2-small")) == 124'439'808);   // Hugging Face's gpt2
  CHECK(count(*gpt_preset("gpt2-xl")) == 1'557'611'200);    // gpt2-xl
  CHECK(count(*gpt_preset("gpt3-175b")) == Approx(174.6e9).epsilon(0.01));
  CHECK_FALSE(gpt_preset("gpt5").has_value());
  CHECK(gpt_preset_names().size() == 14);
  for (const auto& n : gpt_preset_names()) CHECK(gpt_preset(n).has_value());

  GptShape s = *gpt_preset("gpt3-1.3b");
  s.micro_batch = 4;
  const double sbh = 2048.0 * 4 * 2048;
  const double block = sbh * (34 + 5.0 * 16 * 2048 / 2048);
  CHECK(gpt_activation_bytes(s, DType::bf16) ==
        static_cast<std::int64_t>(24 * block + 4.0 * 2048 * 4 * 50257));
  s.recompute = true;
  CHECK(gpt_activation_bytes(s, DType::bf16) ==
        static_cast<std::int64_t>(24 * 2 * sbh + block + 4.0 * 2048 * 4 * 50257));
  s.heads = 7;
  CHECK_THROWS_WITH(gpt_units(s), Contains("heads"));
}

TEST_CASE("The GPT trainer's bytes with recomputation: one block's inner activations, not L") {
  GptShape s = *gpt_preset("gpt2-small");
  s.micro_batch = 2;
  const std::int64_t N = 2 * 1024, C = 768, F = 4 * 768, L = 12, att = N * 12 * 2;
  for (auto [dtype, act] : {std::pair{DType::bf16, 2}, std::pair{DType::f32, 4}}) {
    const std::int64_t all = gpt_trainer_activation_bytes(s, dtype);
    GptShape r = s;
    r.recompute = true;
    // Per block no longer kept: ln1, qkv, the attention output, res2, ln2, fc and its GELU in
    // the compute dtype; two LayerNorms' mean and rstd and attention's two statistics per query
    // row and head in fp32.
    const std::int64_t inner = act * N * (7 * C + 2 * F) + 4 * (4 * N + att);
    CHECK(gpt_trainer_activation_bytes(r, dtype) == all - (L - 1) * inner);
  }
  // The Megatron-style estimate is another function, never reached through these flags.
  GptShape r = s;
  r.recompute = true;
  CHECK(gpt_trainer_activation_bytes(r, DType::bf16) != gpt_activation_bytes(r, DType::bf16));
}

TEST_CASE("The CPU trainer's tiled attention keeps two floats per row; the GPU's, probabilities") {
  GptShape s = *gpt_preset("gpt2-small");
  s.micro_batch = 2;
  const std::int64_t B = 2, T = 1024, N = B * T, C = 768, H = 12, L = 12;
  for (auto [dtype, gemm_out] : {std::pair{DType::bf16, N * 4 * C}, std::pair{DType::f32, 0L}}) {
    const std::int64_t tiled = gpt_trainer_activation_bytes(s, dtype);
    const std::int64_t whole = gpt_trainer_activation_bytes(s, dtype, GptAttention::whole);
    CHECK(tiled == gpt_trainer_activation_bytes(s, dtype, GptAttention::tiled));
    // Per block B·H·T² fp32 probabilities instead of 2·N·H statistics, and one sequence's q, k,
    // v with its T x T scores in the op scratch when that outgrows the bf16 GEMM outputs.
    const std::int64_t scratch = std::max(gemm_out, T * 3 * C + T * T) - gemm_out;
    CHECK(whole - tiled == L * 4 * (B * H * T * T - 2 * N * H) + 4 * scratch);
  }
}

TEST_CASE("A GPT too large to plan is refused in a sentence, never wrapped") {
  GptShape huge;
  huge.layers = 2147483647;
  huge.hidden = 2147483647;
  huge.heads = 1;
  CHECK_THROWS_WITH(gpt_units(huge), Contains("more than 2^63 - 1 parameters"));
  huge.hidden = 1;
  CHECK_THROWS_WITH(gpt_units(huge), Contains("layers is more than the planner handles"));
  GptShape wide = *gpt_preset("gpt2-small");
  wide.seq_len = 2147483647;
  wide.micro_batch = 2147483647;
  CHECK_THROWS_WITH(gpt_activation_bytes(wide, DType::bf16), Contains("too large to plan"));
}
