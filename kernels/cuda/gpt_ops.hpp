// The GPT's operations on DEVICE memory, forward and backward: kernels::cpu::gpt's set
// (kernels/cpu/gpt_ops.hpp) with the same meaning, the same argument order and the same storage
// types (T = float or bf16 for the kept activations and GEMM operands; fp32 for statistics,
// probabilities, the loss and every gradient). The per-element math is kernels/gpt_math.hpp's,
// the functions the CPU tests check; the GEMMs are cuBLASLt's (kernels/cuda/gemm.hpp): bf16 x bf16
// with fp32 accumulation for T = bf16, pedantic fp32 (no TF32) for T = float.
//
// Status: compiled, not verified. It builds for sm_80 and sm_90 and its test
// (tests/kernels/test_cuda_gpt_ops.cpp) compares every op with the CPU loop, but no GPU has run
// it yet (docs/gpu.md).
//
// Where the CPU's Scratch& stands, a device op takes a Workspace& (the cuBLASLt context and device
// scratch the caller sized once with the *_scratch_bytes functions below); ops that need either
// and take no Scratch on the CPU take it just before the stream. Every call only queues work on
// `stream` and returns; none allocates or synchronises the host (cuBLASLt plans its algorithm on
// the host the first time it sees a shape). Pointers are device memory; shapes as on the CPU.
//
// Agreement with the CPU. Embedding forward and backward, GELU forward and backward and the
// residual add are bitwise the CPU's (the same fp32 operations in the same order; GELU's tanh and
// the softmaxes' exponentials are gpt_math.hpp's plain-fp32 exp_element and tanh_element_fast,
// the same bits on both sides). Cross-entropy's logf is CUDA's, not the C library's. The GEMMs
// and every row or column reduction add in another order than the CPU's loop (the note on
// reduction orders in gpt_common.cuh says which); each order is fixed, so repeated runs on one
// device agree bit for bit, and the CPU agrees to a tolerance, not bitwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "precision/bf16.hpp"

namespace zero::kernels::cuda::gpt {

// What the ops borrow: the cuBLASLt context (all calls sharing it on one stream, as gemm.hpp
// requires) and `scratch_bytes` bytes of device scratch at `scratch` (256-byte aligned, as
// cudaMalloc gives), of which each op uses what its *_scratch_bytes function says and overwrites
// it. A call whose need exceeds scratch_bytes throws zero::Error before queuing anything.
struct Workspace {
  GemmContext* gemm = nullptr;
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
};

// Scratch each op needs, in bytes (0 where it needs none); a caller sizes the workspace as the
// maximum over the calls it makes. Host arithmetic, except embedding_backward_scratch_bytes: it
// asks CUB for its sort's temporary storage, which needs the CUDA runtime and a device.
template <class T>
std::size_t matmul_forward_scratch_bytes(int N, int OC);
template <class T>
std::size_t matmul_backward_scratch_bytes(int N, int OC);
template <class T>
std::size_t attention_forward_scratch_bytes(int seq, int C);
template <class T>
std::size_t attention_backward_scratch_bytes(int seq, int C, int NH);
template <class T>
std::size_t logits_backward_scratch_bytes(int N, int V);
std::size_t layernorm_backward_scratch_bytes(int N, int C);
std::size_t embedding_backward_scratch_bytes(int N);
std::size_t crossentropy_scratch_bytes(int N);

// out[n, :] = wte[tokens[n], :] + wpe[n % T, :]. tokens[n] in [0, V), unchecked as on the CPU.
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int N,
                       int seq, int C, StreamRef stream);
// dwte[tokens[n], :] += dout[n, :]; dwpe[n % T, :] += dout[n, :], each row of dwte and dwpe
// receiving its rows n in increasing order, as on the CPU (so bitwise the CPU's): the token
// indices are radix-sorted (stable) and each distinct token's rows are walked in order.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int N, int seq, int C, Workspace& ws, StreamRef stream);

// out = (inp - mean) · rstd · w + b per row; mean and rstd (N each) kept for backward.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                       const float* b, int N, int C, StreamRef stream);
// dinp += ..., dw += ..., db += ... (accumulating, as on the CPU).
template <class T>
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C,
                        Workspace& ws, StreamRef stream);

// out[N, OC] = inp[N, C] · weightᵀ + bias, weight [OC, C]; bias may be null (no bias).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const float* bias, int N, int C, int OC,
                    Workspace& ws, StreamRef stream);
// dinp (= or +=, see accumulate) = dout · weight; dweight = doutᵀ · inp; dbias = Σ_n dout[n, :]
// (dweight and dbias overwritten; dbias may be null).
template <class T>
void matmul_backward(float* dinp, bool accumulate, float* dweight, float* dbias, const float* dout,
                     const T* inp, const T* weight, int N, int C, int OC, Workspace& ws,
                     StreamRef stream);

// Causal self-attention over qkv [B·T, 3C] (as on the CPU): out [B·T, C]; att [B, NH, T, T] the
// softmax probabilities (fp32; zero above the diagonal). C must be a multiple of NH.
template <class T>
void attention_forward(T* out, float* att, const T* qkv, int B, int seq, int C, int NH,
                       Workspace& ws, StreamRef stream);
// dqkv [B·T, 3C] overwritten.
template <class T>
void attention_backward(float* dqkv, const float* dout, const T* qkv, const float* att, int B,
                        int seq, int C, int NH, Workspace& ws, StreamRef stream);

template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n, StreamRef stream);
// dinp = gelu'(inp) · dout (overwritten; dinp may alias dout).
template <class T>
void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n, StreamRef stream);

// out = a + b (rounded once to T). Bitwise the CPU's.
template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n, StreamRef stream);

// The tied output head: logits [N, V] (fp32) = inp [N, C] · wteᵀ, wte [V, C].
template <class T>
void logits_forward(float* logits, const T* inp, const T* wte, int N, int C, int V, Workspace& ws,
                    StreamRef stream);
// dinp = dlogits · wte (overwritten); dwte = dlogitsᵀ · inp (overwritten).
template <class T>
void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                     int N, int C, int V, Workspace& ws, StreamRef stream);

// Softmax cross-entropy over logits [N, V] (fp32) with targets [N] (in [0, V), unchecked): the
// CPU returns Σ_n loss_n; here *loss_sum (a device double) receives it, summed in double with
// rows in order as on the CPU, so the host reads it when it next synchronises. Overwrites logits
// with dlogits = (softmax - onehot) · grad_scale.
void crossentropy_forward_backward(float* logits, const std::int32_t* targets, int N, int V,
                                   float grad_scale, double* loss_sum, Workspace& ws,
                                   StreamRef stream);

}  // namespace zero::kernels::cuda::gpt
