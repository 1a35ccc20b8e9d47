// CPU feature detection and the SIMD paths that precision/ (and kernels/) dispatch to at run
// time, so that one portable x86-64 binary uses the widest vectors the machine has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

// What this CPU and operating system can run. A vector extension counts only if the OS also
// saves its registers on a context switch (XGETBV), since CPUID alone would lie in VMs and
// on kernels that disable AVX-512.
struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512cd = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
};

// Detected once per process (CPUID is slow in VMs) and cached.
const CpuFeatures& cpu_features();

// "sse4.2 avx avx2 fma f16c (absent: avx512f avx512bw ...)": every field, found or not.
std::string describe(const CpuFeatures& f);

// The code paths of the bulk conversions (precision/convert.hpp). Every path returns the same
// bits as the scalar functions for every input; they differ only in speed.
enum class SimdPath : std::uint8_t {
  scalar,  // plain C++ loops over the ZERO_HD functions; runs anywhere
  avx2,    // AVX2 + F16C + FMA (every AVX2 CPU has both)
  avx512,  // AVX-512 F + BW
};

std::string_view name_of(SimdPath p);

// Whether this machine can run path `p` (scalar: always).
bool available(SimdPath p, const CpuFeatures& f = cpu_features());

// The available paths, widest first; scalar always last.
std::vector<SimdPath> available_paths(const CpuFeatures& f = cpu_features());

// The widest available path: what the conversions use when no path is named.
SimdPath best_path();

}  // namespace zero
