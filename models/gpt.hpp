// The reference GPT: GPT-2's architecture (token + learned position embeddings, pre-LayerNorm
// blocks of causal multi-head self-attention and a GELU (tanh) MLP, residuals, a final LayerNorm,
// the output head tied to the token embedding), of any shape, trained through the engine at any
// ZeRO stage. Written only against zero's public header, as a user's trainer would be.
//
// Units are gpt_units(shape) (models/gpt_shape.hpp): the embeddings, one per block, the final LayerNorm, so the
// planner (zero/planner.hpp) plans exactly this model. At stage 3 each unit is gathered just
// before use and released after, in forward and in backward; the tied head gathers the
// embeddings once more between the two (PlanInput::tied_head).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "models/gpt_shape.hpp"
#include "zero/zero.hpp"

namespace zero::models {

// How the model computes. fp32: every activation and GEMM in fp32 (16-bit parameters are
// widened first): the mode for tight checks against a reference. bf16: GEMM inputs in bf16
// (the engine's bf16 parameters as they are, activations rounded to bf16) with fp32
// accumulation, the activations kept for backward in bf16; LayerNorm statistics, softmax, the
// loss and every gradient in fp32 (kernels/cpu/gpt_ops.hpp). Needs bf16 parameters.
enum class GptCompute { fp32, bf16 };
std::string_view name_of(GptCompute compute);

// Checks that models/gpt implements this shape (tied head, heads dividing the hidden size, sizes
// that fit its int indexing); throws zero::Error naming what does not. shape.recompute: each
// block keeps only its input and backward runs its forward again (gpt_model.hpp).
void check_gpt_shape(const GptShape& shape);

// Initial value of param p (GPT-2's: weights N(0, 0.02), the residual projections
// N(0, 0.02/√(2·layers)), biases 0, LayerNorm weights 1 and biases 0), from the seed by a
// counter-based generator: the same on every rank and at every rank count.
void gpt_init(const GptShape& shape, std::uint64_t seed, int param, std::span<float> out);

// Parameter groups that exempt the biases, the LayerNorm parameters and the embeddings from
// weight decay (the 2-D weights of the blocks take the optimizer's decay), as nanoGPT and
// Megatron configure AdamW. Set them as Config::param_groups.
std::vector<ParamGroup> gpt_param_groups();

class GptTrainer {
 public:
  // shape.micro_batch sequences of shape.seq_len tokens per micro-batch. Allocates every buffer
  // of a micro-batch now (gpt_trainer_activation_bytes(shape, compute), checked equal).
  // `where`: the memory the engine keeps its state in (EngineOptions::memory); device runs the
  // same schedule on the GPU (models/gpt_cuda.cpp: kernels/cuda/gpt_ops, cuBLASLt), compiled
  // but never run on a GPU yet; a build without CUDA throws.
  GptTrainer(const GptShape& shape, GptCompute compute, comm::Memory where = comm::Memory::host);
  ~GptTrainer();
  GptTrainer(GptTrainer&&) noexcept;
  GptTrainer& operator=(GptTrainer&&) noexcept;

  // One micro-batch through `engine`: inputs and targets are micro_batch x seq_len token ids
  // (row-major, each < vocab). Forward, the tied head and the loss, backward with reduce_grads
  // per unit (last first). Returns the mean cross-entropy over its tokens (unscaled); gradients
  // are of that mean times the engine's loss scale. The first call with an engine records the
  // trainer's buffers in its ledger (Category::activations).
  double micro_batch(Engine& engine, std::span<const std::int32_t> inputs,
                     std::span<const std::int32_t> targets);

  // Called with each param's fp32 gradient of a micro-batch (of its mean loss times the loss
  // scale) just before the trainer writes it into engine.grad(param): for tests and gradient
  // inspection. Empty: none.
  void set_grad_hook(std::function<void(int param, std::span<const float> grad)> hook);

  // Wall time, seconds, in micro_batch since construction outside engine calls (the model's
  // math: GEMMs, LayerNorm, attention, the loss, the casts to and from the engine's dtype).
  double compute_seconds() const;
  // Of compute_seconds: the blocks' forward run again in backward (0 without shape.recompute).
  double recompute_seconds() const;
  const GptShape& shape() const;
  GptCompute compute() const;
  // Bytes of the buffers it holds (what it records in the ledger).
  std::int64_t activation_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The GPU trainer (models/gpt_cuda.cpp; a build without CUDA throws, models/gpt_none.cpp).
std::unique_ptr<GptTrainer::Impl> make_gpt_device(const GptShape& shape, GptCompute compute);

// Model FLOPs per token of one training step (forward + backward), as in the PaLM paper's
// appendix B and llm.c: 6·N (N: the parameters, embeddings included, as llm.c counts them) plus
// attention's 12·layers·seq_len·hidden (half of it with a causal mask is still counted, as both
// do). MFU = tokens/s x this / peak FLOP/s.
double gpt_flops_per_token(const GptShape& shape);

}  // namespace zero::models
