// The GPT's shape: its dimensions, the named presets, the units it registers with the engine and
// the activation bytes it holds, for the planner (`zero plan`) and for the trainer (models/gpt.hpp).
// The planner takes only what these give (units and activation bytes): zero/ knows no model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "precision/dtype.hpp"
#include "zero/layout.hpp"

namespace zero::models {

// A GPT-style decoder (pre-LayerNorm, learned positions, GELU MLP of ffn_hidden, tied or untied
// output head). Units: the embeddings, one per transformer block, the final LayerNorm (+ the
// head when untied), as Megatron and DeepSpeed group them.
struct GptShape {
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  std::int64_t vocab = 50257;
  int seq_len = 1024;
  int ffn_hidden = 0;           // 0: 4 * hidden
  bool tied_embeddings = true;  // output head shares the token embedding
  int micro_batch = 1;          // sequences per micro-batch per rank
  bool recompute = false;       // full activation recomputation (keep only each block's input)
};

// Named sizes: gpt2-small .. gpt2-xl and gpt3-125m .. gpt3-175b (the GPT-3 paper's table).
// Empty when the name is unknown.
std::optional<GptShape> gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

// The units a GPT of this shape registers (names and shapes, as a trainer would). Throws
// zero::Error for a shape no trainer can build or the planner cannot lay out.
std::vector<UnitSpec> gpt_units(const GptShape& shape);
// Activation bytes per rank held at the peak of backward, Korthikanti et al. (2022), eq. 2,
// without tensor/sequence parallelism: per block s·b·h·(34 + 5·a·s/h) bytes at 16-bit, or
// 2·s·b·h with full recomputation (+ one block's full set while it is recomputed); plus the
// logits (4·s·b·V fp32 for the loss). Documented term by term in docs/memory.md.
std::int64_t gpt_activation_bytes(const GptShape& shape, DType work_dtype);
// The bytes zero's reference GPT trainer on the CPU (models/gpt.hpp) holds per rank for one
// micro-batch, exactly: every activation it keeps for backward (compute_dtype: bf16 or fp32),
// its fp32 LayerNorm statistics, attention's two statistics per query row and head (its tiled
// attention keeps no probabilities) and logits, its backward buffers, the widened parameters
// and gradients of one unit (and the tied embedding's gradient, kept across the backward) and
// its op scratch; with shape.recompute, each block's input and one block's inner activations
// instead of every block's. Term by term in docs/memory.md; the trainer checks that its buffers
// add up to this. Less than gpt_activation_bytes's estimate for the same shape is expected: no
// dropout masks, one buffer per tensor, no s x s term.
//
// `attention` names the attention whose state is counted: tiled (the CPU trainer's) or whole,
// the probabilities [B, heads, T, T] per kept block and one sequence's s x s scratch, which is
// what the GPU trainer (models/gpt_cuda.cpp) keeps (its own workspace is not counted exactly).
enum class GptAttention { tiled, whole };
std::int64_t gpt_trainer_activation_bytes(const GptShape& shape, DType compute_dtype,
                                          GptAttention attention = GptAttention::tiled);

}  // namespace zero::models
