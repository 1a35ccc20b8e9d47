// CPU feature detection through CPUID and XGETBV (x86-64); other architectures report none.
#include "precision/simd.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace zero {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0 says which register states the OS saves. Inline asm rather than _xgetbv, which would need
// the xsave target enabled for this whole file.
std::uint64_t xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = (c >> 20) & 1;
  const bool osxsave = (c >> 27) & 1;
  const bool cpu_avx = (c >> 28) & 1;
  const bool cpu_fma = (c >> 12) & 1;
  const bool cpu_f16c = (c >> 29) & 1;
  const std::uint64_t xcr = osxsave ? xcr0() : 0;
  const bool os_ymm = (xcr & 0x6) == 0x6;    // SSE and AVX state
  const bool os_zmm = (xcr & 0xe6) == 0xe6;  // plus opmask, ZMM0-15 upper halves, ZMM16-31
  f.avx = cpu_avx && os_ymm;
  f.fma = cpu_fma && f.avx;
  f.f16c = cpu_f16c && f.avx;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned ebx7 = b, edx7 = d;
  f.avx2 = f.avx && ((ebx7 >> 5) & 1);
  const bool zmm = f.avx && os_zmm;
  f.avx512f = zmm && ((ebx7 >> 16) & 1);
  f.avx512cd = f.avx512f && ((ebx7 >> 28) & 1);
  f.avx512bw = f.avx512f && ((ebx7 >> 30) & 1);
  f.avx512dq = f.avx512f && ((ebx7 >> 17) & 1);
  f.avx512vl = f.avx512f && ((ebx7 >> 31) & 1);
  f.avx512fp16 = f.avx512f && ((edx7 >> 23) & 1);
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
  return f;
}
#else
CpuFeatures detect() {
  return {};
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string describe(const CpuFeatures& f) {
  const std::pair<const char*, bool> all[] = {{"sse4.2", f.sse42},
                                              {"avx", f.avx},
                                              {"avx2", f.avx2},
                                              {"fma", f.fma},
                                              {"f16c", f.f16c},
                                              {"avx512f", f.avx512f},
                                              {"avx512cd", f.avx512cd},
                                              {"avx512bw", f.avx512bw},
                                              {"avx512dq", f.avx512dq},
                                              {"avx512vl", f.avx512vl},
                                              {"avx512bf16", f.avx512bf16},
                                              {"avx512fp16", f.avx512fp16}};
  std::string found, absent;
  for (const auto& [name, have] : all) {
    std::string& to = have ? found : absent;
    if (!to.empty()) to += ' ';
    to += name;
  }
  if (found.empty()) found = "none";
  return absent.empty() ? found : found + " (absent: " + absent + ")";
}

std::string_view name_of(SimdPath p) {
  switch (p) {
    case SimdPath::scalar:
      return "scalar";
    case SimdPath::avx2:
      return "avx2";
    case SimdPath::avx512:
      return "avx512";
  }
  return "?";
}

bool available(SimdPath p, const CpuFeatures& f) {
  switch (p) {
    case SimdPath::scalar:
      return true;
#if defined(__x86_64__)
    case SimdPath::avx2:
      return f.avx2 && f.f16c && f.fma;
    case SimdPath::avx512:
      return f.avx512f && f.avx512bw;
#endif
    default:
      return false;
  }
}

std::vector<SimdPath> available_paths(const CpuFeatures& f) {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::avx512, SimdPath::avx2, SimdPath::scalar})
    if (available(p, f)) paths.push_back(p);
  return paths;
}

SimdPath best_path() {
  static const SimdPath best = available_paths().front();
  return best;
}

}  // namespace zero
