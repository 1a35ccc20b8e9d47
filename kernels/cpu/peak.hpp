// The peaks of one core, measured: fp32 FMA, and bf16 dot products (AVX512-BF16's vdpbf16ps)
// where the CPU has them; what GEMM efficiency and MFU on the CPU are fractions of
// (bench/gemm_bench, `zero train --model gpt`).
#pragma once

#include <string_view>

namespace zero::kernels::cpu {

struct FmaPeak {
  std::string_view kernel;  // "avx512 fma", "avx2 fma", or "none" (no FMA: flops 0)
  double flops = 0;         // fp32 FLOP/s of one core (an FMA counts 2)
};

// Runs an FMA loop of independent accumulators for about `seconds` on the calling thread,
// `tries` times, and keeps the best: another process on the core only ever lowers a reading.
FmaPeak measure_fma_peak(double seconds, int tries = 1);

// The same over vdpbf16ps (each 512-bit instruction: 32 bf16 products summed into 16 fp32
// lanes, 64 FLOPs): kernel "avx512_bf16 dot", or "none" with flops 0 on a CPU without
// AVX512-BF16.
FmaPeak measure_bf16_dot_peak(double seconds, int tries = 1);

}  // namespace zero::kernels::cpu
