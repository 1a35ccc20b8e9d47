// Causal multi-head self-attention on the CPU without the T x T matrix: flash attention's scheme
// (scores, softmax and P·V a tile of query rows at a time; backward, in FlashAttention-2's one
// pass over tiles of keys, recomputes the probabilities from q, k and two statistics per row),
// with the exact max of each row (its scores against all its keys are in one tile) rather than
// an online running max.
//
// Layout: qkv [B·T, 3C] (q, k, v side by side; head h uses columns h·C/NH .. (h+1)·C/NH of
// each), out [B·T, C] with the heads concatenated. Storage type T is float or bf16 (widened
// exactly to fp32: every product and sum is fp32, as in kernels/cpu/gpt_ops.hpp).
//
// Threads: the (sequence, head) pairs are the tasks of the calling thread's pool
// (kernels/cpu/thread_pool.hpp). A pair's arithmetic runs on one thread in the order one thread
// would run it, and its tile scratch is that thread's own (kept per thread between calls:
// 2·kAttentionTile·T + T floats, and (3·T + 8)·C/NH more for a head's widened q, k, v and rows
// of out in bf16), so the results never depend on the thread count.
#pragma once

#include <cstddef>

#include "precision/bf16.hpp"

namespace zero::kernels::cpu::gpt {

// Query rows (forward, backward's first pass) or keys (its second pass) per tile. A fixed
// constant: the tiles' GEMM shapes, and so the bits, depend on T alone.
inline constexpr int kAttentionTile = 64;

// What forward keeps per (sequence, head, query row) for backward: the row's largest scaled score
// and 1 / Σ_j exp(score_j - max), two floats; `saved` holds B·NH·T of them, [B, NH, T, 2].
std::size_t attention_saved_floats(int B, int NH, int seq);

// out = softmax(q·kᵀ / √(C/NH), causal) · v per head; `saved` as above.
template <class T>
void attention_forward(T* out, float* saved, const T* qkv, int B, int seq, int C, int NH);

// dqkv [B·T, 3C] overwritten with the gradient of out (dout [B·T, C]) with respect to qkv; `out`
// and `saved` are what attention_forward gave for this qkv.
template <class T>
void attention_backward(float* dqkv, const float* dout, const T* qkv, const T* out,
                        const float* saved, int B, int seq, int C, int NH);

}  // namespace zero::kernels::cpu::gpt
