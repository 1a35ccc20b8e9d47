// Internal to kernels/cpu: runs one loop body compiled for the requested SIMD path
// (zero::SimdPath, precision/simd.hpp: the project's one list of CPU paths).
//
// A loop is written once as a lambda marked ZERO_LOOP (always_inline); dispatch() inlines it into
// a function compiled with target("avx2,fma") or target("avx512f,avx512bw"), so GCC
// auto-vectorises the same source three times. Explicit intrinsics would give no more speed on a
// memory-bound loop and would be a second copy of the math, which is what this project avoids
// (kernels/*_math.hpp). No path may change results: vectorising an element-wise loop reorders no
// operation; -ffp-contract=off forbids contracting a*b + c into an FMA, while an explicit fmaf
// (kernels/adamw_math.hpp) is exact everywhere and, with FMA in the targets, one instruction
// rather than a libm call that keeps the loop scalar; and -fno-math-errno (kernels only) merely
// lets sqrtf become the correctly rounded sqrt instruction instead of a call that may set errno.
#pragma once

#include "precision/simd.hpp"
#include "base/error.hpp"

#define ZERO_LOOP __attribute__((always_inline))

namespace zero::kernels::cpu::detail {

#if defined(__x86_64__) && defined(__GNUC__)
template <class F>
__attribute__((target("avx2,fma"))) void on_avx2(F& f) {
  f();
}
template <class F>
__attribute__((target("avx512f,avx512bw"))) void on_avx512(F& f) {
  f();
}
#endif

// Throws zero::Error for a path this CPU cannot run, rather than dying of SIGILL.
template <class F>
void dispatch(SimdPath path, F&& f) {
  if (!available(path))
    throw Error(cat("this CPU cannot run the ", name_of(path), " path of zero's kernels"));
  switch (path) {
#if defined(__x86_64__) && defined(__GNUC__)
    case SimdPath::avx512:
      on_avx512(f);
      return;
    case SimdPath::avx2:
      on_avx2(f);
      return;
#endif
    default:
      f();
      return;
  }
}

}  // namespace zero::kernels::cpu::detail
