// The fp32 FMA peak of one core, measured: what GEMM efficiency and MFU on the CPU are
// fractions of (bench/gemm_bench, `zero train --model gpt`).
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

}  // namespace zero::kernels::cpu
