// The GPT's operations on the CPU, forward and backward, over row-major activations of N = B·T
// rows (llm.c's set: embeddings, LayerNorm, linear layers, causal multi-head attention, GELU,
// residual add, softmax cross-entropy; attention has its own kernels/cpu/attention.hpp). The
// per-element math is kernels/gpt_math.hpp's.
//
// Storage type T is float (the fp32 mode, for tight checks) or bf16 (the bf16 mode): the type of
// the activations kept for backward and of the GEMM weights, so the linear layers run as bf16 x
// bf16 products accumulated in fp32 (kernels/cpu/gemm_bf16.hpp). Everything else computes in
// fp32: LayerNorm statistics, softmax probabilities, the loss, and every gradient (activation
// gradients are fp32 buffers; in the bf16 mode they are rounded to bf16 only where they enter a
// GEMM). Small parameters (LayerNorm weights, biases) are always fp32 here.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "precision/bf16.hpp"

namespace zero::kernels::cpu::gpt {

// Scratch a caller lends to the ops that need it (GEMM outputs and rounded inputs in the bf16
// mode): grows to the largest request and is reused, so a step allocates nothing. `floats` are
// fp32 slots, `halves` bf16 slots.
struct Scratch {
  std::vector<float> floats;
  std::vector<bf16> halves;
  float* f(std::size_t n);
  bf16* h(std::size_t n);
};

// out[n, :] = wte[tokens[n], :] + wpe[n % T, :]
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int N,
                       int seq, int C);
// dwte[tokens[n], :] += dout[n, :]; dwpe[n % T, :] += dout[n, :] (rows in order n = 0..N-1).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int N, int seq, int C);

// out = (inp - mean) · rstd · w + b per row; mean and rstd (N each) kept for backward.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                       const float* b, int N, int C);
// dinp += ..., dw += ..., db += ... (accumulating: the residual stream's gradient flows on).
template <class T>
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C);

// out[N, OC] = inp[N, C] · weightᵀ + bias, weight [OC, C] (torch.nn.Linear's layout).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const float* bias, int N, int C, int OC,
                    Scratch& scratch);
// dinp (= or +=, see accumulate) = dout · weight; dweight = doutᵀ · inp; dbias = Σ_n dout[n, :]
// (dweight and dbias overwritten).
template <class T>
void matmul_backward(float* dinp, bool accumulate, float* dweight, float* dbias, const float* dout,
                     const T* inp, const T* weight, int N, int C, int OC, Scratch& scratch);

// Causal self-attention: kernels/cpu/attention.hpp (included above).

template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n);
// dinp = gelu'(inp) · dout (overwritten).
template <class T>
void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n);

// out = a + b (rounded once to T).
template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n);

// The tied output head: logits [N, V] (fp32) = inp [N, C] · wteᵀ, wte [V, C].
template <class T>
void logits_forward(float* logits, const T* inp, const T* wte, int N, int C, int V);
// dinp = dlogits · wte (overwritten); dwte = dlogitsᵀ · inp (overwritten).
template <class T>
void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                     int N, int C, int V, Scratch& scratch);

// Softmax cross-entropy over logits [N, V] (fp32) with targets [N]: returns Σ_n loss_n (in
// double, rows in order) and overwrites logits with dlogits = (softmax - onehot) · grad_scale.
double crossentropy_forward_backward(float* logits, const std::int32_t* targets, int N, int V,
                                     float grad_scale);

}  // namespace zero::kernels::cpu::gpt
