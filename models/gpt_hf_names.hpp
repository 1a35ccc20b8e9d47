// The GPT's parameter names (gpt_units, models/gpt_shape.hpp) beside Hugging Face GPT-2's, as the `gpt2`
// repository's model.safetensors names them, both ways, with the orientation of each weight.
//
// zero stores every linear weight [out, in] (y = W x, torch.nn.Linear's layout); GPT-2's Conv1D
// stores [in, out], so attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are transposed. The
// embeddings are [vocab, h] and [seq, h] on both sides. qkv needs no reordering: zero's qkv
// weight rows are q (rows 0..h-1), k (h..2h-1), v (2h..3h-1), head i using rows i·h/heads ..
// (i+1)·h/heads of each block (kernels/cpu/gpt_ops.cpp, attention_forward), and GPT-2 splits
// c_attn's output columns into q, k, v of h each (split(h, dim=2)) and each of those into heads
// by contiguous columns (_split_heads: view(..., heads, h/heads)): the same order, so c_attn is
// qkv transposed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace zero::models {

struct HfName {
  std::string name;
  bool transpose = false;  // the 2-D tensor is stored [in, out] on the Hugging Face side
};

// "block3.attn.qkv.weight" -> {"h.3.attn.c_attn.weight", transpose}; nullopt for a name that is
// not one of the GPT's. The untied head (head.weight) maps to "lm_head.weight".
std::optional<HfName> gpt_name_to_hf(std::string_view zero_name);

// "h.3.attn.c_attn.weight" (or "transformer.h.3...", as GPT2LMHeadModel saves it) -> zero's name
// and whether the file's tensor is transposed; nullopt for a tensor zero's GPT has no parameter
// for (the attention masks attn.bias and attn.masked_bias, or a name that is not GPT-2's).
std::optional<HfName> gpt_name_from_hf(std::string_view hf_name);

}  // namespace zero::models
