// Initial weights from a safetensors file (`zero train --init FILE`): zero's own parameter names,
// as `zero ckpt export --names zero` writes them, or Hugging Face GPT-2's (models/gpt_hf_names).
#pragma once

#include <functional>
#include <span>
#include <string>

#include "zero/zero.hpp"

namespace zero::cli {

// A fill for Engine::init_params that reads each parameter of `layout` from the safetensors file
// `path` when asked (F32, BF16 or F16, widened exactly to fp32), transposing GPT-2's [in, out]
// weights back to zero's [out, in]. Before it returns it checks the whole file against the
// layout: every parameter present under one of its names with its shape, and no tensor the model
// has no parameter for (the attention masks GPT-2 files carry, attn.bias and attn.masked_bias,
// are let through). GPT-2's head, lm_head.weight, is tied to wte: for a model without a
// "head.weight" of its own it is let through when it holds bitwise wte's values, stands for wte
// when the file has no wte (safetensors.torch.save_model keeps one of two tied tensors), and is
// refused when it differs (an untied head, which the model would drop). Any mismatch throws
// zero::Error: one sentence naming the file and the tensor. The fill keeps the file open; it
// reads one parameter at a time (a transposed one through a copy of the parameter).
std::function<void(int param, std::span<float> out)> safetensors_fill(const std::string& path,
                                                                      const Layout& layout);

}  // namespace zero::cli
