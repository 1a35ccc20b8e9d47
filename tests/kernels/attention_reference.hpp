// The whole-matrix causal attention the CPU trainer ran before its tiled one
// (kernels/cpu/attention.hpp), kept as the tests' reference: per (sequence, head) the scores
// [T, T] from one GEMM, the masked half zeroed, the softmax probabilities kept [B, NH, T, T] for
// backward, P·v and the backward's four GEMMs over the whole matrix.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/gpt_math.hpp"
#include "precision/bf16.hpp"

namespace zero::kernels::test {

template <class T>
const float* widened_sequence(const T* qkv, int seq, int C, std::vector<float>& w) {
  if constexpr (std::is_same_v<T, float>) {
    return qkv;
  } else {
    w.resize(static_cast<std::size_t>(seq) * 3 * C);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = to_float(qkv[i]);
    return w.data();
  }
}

template <class T>
void whole_forward(T* out, float* att, const T* qkv, int B, int seq, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t tt = static_cast<std::int64_t>(seq) * seq;
  std::vector<float> widened, y(static_cast<std::size_t>(seq) * C);
  for (int b = 0; b < B; ++b) {
    const float* s =
        widened_sequence(qkv + static_cast<std::int64_t>(b) * seq * C3, seq, C, widened);
    for (int h = 0; h < NH; ++h) {
      float* a = att + (static_cast<std::int64_t>(b) * NH + h) * tt;
      cpu::gemm(false, true, seq, seq, hs, scale, s + h * hs, C3, s + C + h * hs, C3, 0.0f, a, seq);
      for (int t = 0; t < seq; ++t) {
        float* row = a + static_cast<std::int64_t>(t) * seq;
        float mx = row[0];
        for (int j = 1; j <= t; ++j) mx = std::max(mx, row[j]);
        for (int j = 0; j <= t; ++j) row[j] = exp_element(row[j] - mx);
        float sum = 0;
        for (int j = 0; j <= t; ++j) sum += row[j];
        const float inv = 1.0f / sum;
        for (int j = 0; j <= t; ++j) row[j] *= inv;
        for (int j = t + 1; j < seq; ++j) row[j] = 0.0f;
      }
      cpu::gemm(false, false, seq, hs, seq, 1.0f, a, seq, s + 2 * C + h * hs, C3, 0.0f,
                y.data() + h * hs, C);
    }
    T* o = out + static_cast<std::int64_t>(b) * seq * C;
    for (std::size_t i = 0; i < y.size(); ++i) {
      if constexpr (std::is_same_v<T, float>)
        o[i] = y[i];
      else
        o[i] = to_bf16(y[i]);
    }
  }
}

template <class T>
void whole_backward(float* dqkv, const float* dout, const T* qkv, const float* att, int B, int seq,
                    int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t tt = static_cast<std::int64_t>(seq) * seq;
  std::vector<float> widened, datt(static_cast<std::size_t>(tt));
  for (int b = 0; b < B; ++b) {
    const float* s =
        widened_sequence(qkv + static_cast<std::int64_t>(b) * seq * C3, seq, C, widened);
    const float* dy = dout + static_cast<std::int64_t>(b) * seq * C;
    float* dseq = dqkv + static_cast<std::int64_t>(b) * seq * C3;
    for (int h = 0; h < NH; ++h) {
      const float* q = s + h * hs;
      const float* k = s + C + h * hs;
      const float* v = s + 2 * C + h * hs;
      const float* a = att + (static_cast<std::int64_t>(b) * NH + h) * tt;
      cpu::gemm(false, true, seq, seq, hs, 1.0f, dy + h * hs, C, v, C3, 0.0f, datt.data(), seq);
      cpu::gemm(true, false, seq, hs, seq, 1.0f, a, seq, dy + h * hs, C, 0.0f,
                dseq + 2 * C + h * hs, C3);
      for (int t = 0; t < seq; ++t) {
        const float* p = a + static_cast<std::int64_t>(t) * seq;
        float* d = datt.data() + static_cast<std::int64_t>(t) * seq;
        float dot = 0;
        for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
        for (int j = 0; j <= t; ++j) d[j] = softmax_input_grad(p[j], d[j], dot);
        for (int j = t + 1; j < seq; ++j) d[j] = 0.0f;
      }
      cpu::gemm(false, false, seq, hs, seq, scale, datt.data(), seq, k, C3, 0.0f, dseq + h * hs,
                C3);
      cpu::gemm(true, false, seq, hs, seq, scale, datt.data(), seq, q, C3, 0.0f, dseq + C + h * hs,
                C3);
    }
  }
}

}  // namespace zero::kernels::test
