// The GPT's shape (models/gpt_shape.hpp): presets, units and the activation formulas.
#include "models/gpt_shape.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "base/error.hpp"
#include "zero/planner.hpp"

namespace zero::models {

std::optional<GptShape> gpt_preset(std::string_view name) {
  auto gpt = [](int layers, int hidden, int heads, int seq, std::int64_t vocab = 50257) {
    GptShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.seq_len = seq;
    s.vocab = vocab;
    return s;
  };
  // GPT-2 (Radford et al. 2019) and the GPT-3 paper's Table 2.1 (Brown et al. 2020). The 13B
  // row's d_model is printed as 5140 there, which 40 heads do not divide; 5120 is what was meant.
  // gpt-micro and gpt-nano: byte-level (vocab 256) models that train on 2 CPU cores in a minute
  // (`zero data` makes their token files), for tests and the README's run.
  static const std::map<std::string, GptShape, std::less<>> presets = {
      {"gpt-micro", gpt(2, 64, 4, 64, 256)},    {"gpt-nano", gpt(4, 128, 4, 128, 256)},
      {"gpt2-small", gpt(12, 768, 12, 1024)},   {"gpt2-medium", gpt(24, 1024, 16, 1024)},
      {"gpt2-large", gpt(36, 1280, 20, 1024)},  {"gpt2-xl", gpt(48, 1600, 25, 1024)},
      {"gpt3-125m", gpt(12, 768, 12, 2048)},    {"gpt3-350m", gpt(24, 1024, 16, 2048)},
      {"gpt3-760m", gpt(24, 1536, 16, 2048)},   {"gpt3-1.3b", gpt(24, 2048, 16, 2048)},
      {"gpt3-2.7b", gpt(32, 2560, 32, 2048)},   {"gpt3-6.7b", gpt(32, 4096, 32, 2048)},
      {"gpt3-13b", gpt(40, 5120, 40, 2048)},    {"gpt3-175b", gpt(96, 12288, 96, 2048)},
  };
  auto it = presets.find(name);
  if (it == presets.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> gpt_preset_names() {
  return {"gpt-micro", "gpt-nano",  "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl",
          "gpt3-125m", "gpt3-350m", "gpt3-760m",  "gpt3-1.3b",   "gpt3-2.7b",  "gpt3-6.7b",
          "gpt3-13b",  "gpt3-175b"};
}

namespace {

void check_gpt(const GptShape& s) {
  auto need = [](bool ok, const char* what, std::int64_t v) {
    if (!ok) throw Error(cat("GPT shape: ", what, " must be >= 1, got ", v));
  };
  need(s.layers >= 1, "layers", s.layers);
  need(s.hidden >= 1, "hidden", s.hidden);
  need(s.heads >= 1, "heads", s.heads);
  need(s.vocab >= 1, "vocab", s.vocab);
  need(s.seq_len >= 1, "seq_len", s.seq_len);
  need(s.micro_batch >= 1, "micro_batch", s.micro_batch);
  if (s.ffn_hidden < 0) throw Error(cat("GPT shape: ffn_hidden must be >= 0, got ", s.ffn_hidden));
  if (s.hidden % s.heads != 0)
    throw Error(cat("GPT shape: heads (", s.heads, ") must divide hidden (", s.hidden, ")"));
  // The parameter count in closed form, before any unit is built: embeddings (V + S)·h, per
  // block 4h² + 2fh + 9h + f, the final LayerNorm 2h, and the untied head V·h.
  const std::int64_t h = s.hidden, f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * h;
  bool over = false;
  auto mul = [&](std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    over |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&](std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    over |= __builtin_add_overflow(a, b, &r);
    return r;
  };
  const std::int64_t block = add(add(mul(4 * h, h), mul(2 * f, h)), 9 * h + f);
  std::int64_t n = add(mul(add(s.vocab, s.seq_len), h), mul(s.layers, block));
  n = add(n, s.tied_embeddings ? 2 * h : add(2 * h, mul(s.vocab, h)));
  if (over)
    throw Error(cat("GPT shape: ", s.layers, " layers of hidden ", s.hidden, " (ffn ", f,
                    ", vocab ", s.vocab, ") have more than 2^63 - 1 parameters: too large to "
                    "plan"));
  const std::int64_t tensors = 12 * std::int64_t{s.layers} + 4;
  if (s.layers + std::int64_t{2} > kMaxPlanUnits || tensors > kMaxPlanTensors)
    throw Error(cat("GPT shape: ", s.layers, " layers is more than the planner handles (at most ",
                    (kMaxPlanTensors - 4) / 12, ": it builds the engine's layout, an entry per "
                    "tensor)"));
}

}  // namespace

std::vector<UnitSpec> gpt_units(const GptShape& s) {
  check_gpt(s);
  const std::int64_t h = s.hidden, f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * h;
  std::vector<UnitSpec> units;
  units.push_back({"embeddings", {{"wte.weight", {s.vocab, h}}, {"wpe.weight", {s.seq_len, h}}}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "block" + std::to_string(l) + ".";
    units.push_back({"block" + std::to_string(l),
                     {{b + "ln1.weight", {h}},
                      {b + "ln1.bias", {h}},
                      {b + "attn.qkv.weight", {3 * h, h}},
                      {b + "attn.qkv.bias", {3 * h}},
                      {b + "attn.proj.weight", {h, h}},
                      {b + "attn.proj.bias", {h}},
                      {b + "ln2.weight", {h}},
                      {b + "ln2.bias", {h}},
                      {b + "mlp.fc.weight", {f, h}},
                      {b + "mlp.fc.bias", {f}},
                      {b + "mlp.proj.weight", {h, f}},
                      {b + "mlp.proj.bias", {h}}}});
  }
  UnitSpec last{"final", {{"ln_f.weight", {h}}, {"ln_f.bias", {h}}}};
  if (!s.tied_embeddings) last.params.push_back({"head.weight", {s.vocab, h}});
  units.push_back(std::move(last));
  return units;
}

std::int64_t gpt_activation_bytes(const GptShape& s, DType work) {
  check_gpt(s);
  const double sq = s.seq_len, b = s.micro_batch, h = s.hidden, a = s.heads, v = s.vocab;
  // Korthikanti et al. 2022, eq. 2: bytes per block with 16-bit activations and 1-byte dropout
  // masks. fp32 activations double the 16-bit part; the masks are a small share, so x2 is used.
  const double per_block = sq * b * h * (34.0 + 5.0 * a * sq / h) * (size_of(work) / 2.0);
  const double block_input = 2.0 * sq * b * h * (size_of(work) / 2.0);
  const double logits = 4.0 * sq * b * v;  // fp32 logits for the softmax cross-entropy
  const double total = s.recompute ? s.layers * block_input + per_block + logits
                                   : s.layers * per_block + logits;
  if (!(total < 9.2e18))  // llround of a value past int64 is undefined
    throw Error(cat("too large to plan: the activations of this GPT (", s.layers, " layers, "
                       "hidden ", s.hidden, ", seq ", s.seq_len, ", micro-batch ", s.micro_batch,
                       ") would need ", total, " bytes per rank, more than 2^63 - 1 (8 EiB)"));
  return static_cast<std::int64_t>(std::llround(total));
}

std::int64_t gpt_trainer_activation_bytes(const GptShape& s, DType compute,
                                          GptAttention attention) {
  check_gpt(s);
  if (compute != DType::f32 && compute != DType::bf16)
    throw Error(cat("the GPT trainer computes in fp32 or bf16, not ", name_of(compute)));
  using I = __int128;  // exact; every term is a product of a few int-sized factors
  const I N = I{s.micro_batch} * s.seq_len, T = s.seq_len, C = s.hidden, V = s.vocab,
          L = s.layers, H = s.heads, F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * I{s.hidden};
  const bool half = compute == DType::bf16;
  const I act = half ? 2 : 4;  // bytes of a kept activation
  // Blocks whose inner activations are kept: every block, or with recomputation one set that
  // each block's forward fills in turn (in forward, and again in its backward).
  const I inner = s.recompute ? 1 : L;
  // Kept for backward, in the compute dtype: the embedding output and each block's output (the
  // next block's input); per kept block ln1, qkv, the attention output, the residual after
  // attention, ln2, the fc output and its GELU; ln_f; and one projection output reused by every
  // layer before its residual add.
  const I kept = act * N * (C + L * C + inner * (7 * C + 2 * F) + 2 * C);
  // fp32: per kept block two LayerNorms' mean and rstd and what attention keeps for backward
  // (tiled: two statistics per (sequence, head, query row), [B, heads, T, 2], kernels/cpu/
  // attention.hpp; whole: the probabilities [B, heads, T, T]); ln_f's statistics; the logits
  // [N, V] (overwritten by their gradient).
  const bool whole = attention == GptAttention::whole;
  const I saved = whole ? I{s.micro_batch} * H * T * T : N * H * 2;
  const I stats = 4 * (inner * (4 * N + saved) + 2 * N + N * V);
  // Backward, fp32: the residual stream's gradient, an LN output's gradient, d(qkv), d(fc).
  const I backward = 4 * N * (5 * C + F);
  // One unit's parameters widened to fp32 (fp32 mode: every tensor of the largest unit; bf16
  // mode: only its 1-D tensors, the GEMM weights being used as they are) and its fp32
  // gradients; the embeddings' gradients have their own buffer, held from the head's backward
  // to the embeddings' (the tied weight's two parts summed in fp32 before the engine sees it).
  const I block = 4 * C * C + 2 * F * C + 9 * C + F, block_small = 9 * C + F;
  const I embed = (V + T) * C;
  const I widened = 4 * (half ? block_small : std::max(block, embed));
  const I grads = 4 * (embed + block);
  // Op scratch: fp32 GEMM outputs before the bias and the rounding (bf16 mode), and for the
  // whole-matrix attention one sequence's widened q, k, v with its output or d(att) (the tiled
  // one's tiles are its threads' own); bf16 copies of a gradient entering a GEMM (bf16 mode: a
  // linear layer's output gradient, or the logits' [N, V]).
  const I wide_out = std::max(3 * C, F);
  const I floats =
      std::max(half ? N * wide_out : I{0}, whole ? T * 3 * C + T * std::max(C, T) : I{0});
  const I halves = half ? std::max(N * wide_out, N * V) : I{0};
  const I total = kept + stats + backward + widened + grads + 4 * floats + 2 * halves;
  if (total > I{std::numeric_limits<std::int64_t>::max()})
    throw Error(cat("too large to plan: the GPT trainer's buffers for ", s.layers, " layers, "
                       "hidden ", s.hidden, ", seq ", s.seq_len, ", micro-batch ", s.micro_batch,
                       " would need more than 2^63 - 1 bytes per rank"));
  return static_cast<std::int64_t>(total);
}

}  // namespace zero::models
