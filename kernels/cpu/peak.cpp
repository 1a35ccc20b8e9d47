// The FMA peak loop (kernels/cpu/peak.hpp).
#include "kernels/cpu/peak.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace zero::kernels::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// 16 independent accumulators cover a 4-cycle latency on two FMA ports with room to spare;
// acc = acc * a + b converges (a < 1), so no overflow or denormals slow it down.
constexpr int kAcc = 16;

// Every lane of every accumulator summed: what the loop returns, so that it is not optimised away.
__attribute__((target("avx512f"))) float sum_lanes(const __m512 (&acc)[kAcc]) {
  __m512 s = acc[0];
  for (int j = 1; j < kAcc; ++j) s = _mm512_add_ps(s, acc[j]);
  float out[16];
  _mm512_storeu_ps(out, s);
  float t = 0;
  for (float v : out) t += v;
  return t;
}

__attribute__((target("avx512f"))) float fma_avx512(long iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  return sum_lanes(acc);
}

constexpr int kAcc2 = 12;  // of 16 ymm registers, leaving a and b

__attribute__((target("avx2,fma"))) float fma_avx2(long iters) {
  __m256 acc[kAcc2];
  for (int j = 0; j < kAcc2; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc2; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  __m256 s = acc[0];
  for (int j = 1; j < kAcc2; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  float t = 0;
  for (float v : out) t += v;
  return t;
}

// acc += a·b over pairs of bf16 (1 and 2^-14): each lane grows by 2^-13 an instruction, so
// even 10^9 iterations stay far from overflow, and no value is a denormal.
__attribute__((target("avx512f,avx512bf16"))) float dot_bf16_avx512(long iters) {
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3880);  // 2^-14
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  return sum_lanes(acc);
}

volatile float g_sink;

struct Loop {
  float (*run)(long) = nullptr;
  double flops_per_iter = 0;
  std::string_view kernel = "none";
};

Loop fma_loop() {
  if (__builtin_cpu_supports("avx512f")) return {fma_avx512, kAcc * 16 * 2.0, "avx512 fma"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {fma_avx2, kAcc2 * 8 * 2.0, "avx2 fma"};
  return {};
}

Loop bf16_dot_loop() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"))
    return {dot_bf16_avx512, kAcc * 32 * 2.0, "avx512_bf16 dot"};
  return {};
}

FmaPeak measure_once(const Loop& loop, double seconds) {
  FmaPeak out;
  out.kernel = loop.kernel;
  if (!loop.run) return out;
  float (*run)(long) = loop.run;
  const double per_iter = loop.flops_per_iter;
  long iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink = run(iters);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (t >= seconds) {
      out.flops = per_iter * static_cast<double>(iters) / t;
      return out;
    }
    iters = static_cast<long>(static_cast<double>(iters) *
                              std::max(2.0, 1.2 * seconds / std::max(t, 1e-9)));
  }
}

FmaPeak measure_best(const Loop& loop, double seconds, int tries) {
  FmaPeak best = measure_once(loop, seconds);
  for (int i = 1; i < tries; ++i) {
    const FmaPeak p = measure_once(loop, seconds);
    if (p.flops > best.flops) best = p;
  }
  return best;
}

}  // namespace

FmaPeak measure_fma_peak(double seconds, int tries) {
  return measure_best(fma_loop(), seconds, tries);
}

FmaPeak measure_bf16_dot_peak(double seconds, int tries) {
  return measure_best(bf16_dot_loop(), seconds, tries);
}

}  // namespace zero::kernels::cpu
