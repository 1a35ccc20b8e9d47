// The choice of OpenBLAS core (kernels/cpu/blas_core.hpp): which kernels a CPU can run, when the
// running ones are weaker, and when zero re-executes with OPENBLAS_CORETYPE. Pure functions, so
// the table holds CPUs this machine is not.
#include <catch2/catch.hpp>
#include <string>
#include <string_view>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/gemm.hpp"

using namespace zero::kernels::cpu;
using zero::cpu_features;
using zero::CpuFeatures;

namespace {

CpuFeatures sse_only() {
  return {};
}
CpuFeatures avx_only() {
  CpuFeatures f;
  f.avx = true;
  return f;
}
CpuFeatures avx2_fma() {
  CpuFeatures f = avx_only();
  f.avx2 = f.fma = true;
  return f;
}
CpuFeatures avx512() {  // Skylake-SP, Ice Lake, an AVX-512 VM without BF16
  CpuFeatures f = avx2_fma();
  f.avx512f = f.avx512cd = f.avx512bw = f.avx512dq = f.avx512vl = true;
  return f;
}
CpuFeatures avx512_bf16() {  // Cooper Lake, Sapphire/Emerald Rapids, Zen 4/5
  CpuFeatures f = avx512();
  f.avx512bf16 = true;
  return f;
}
CpuFeatures avx512f_only() {  // Knights Landing-like: F and CD, no BW/DQ/VL
  CpuFeatures f = avx2_fma();
  f.avx512f = f.avx512cd = true;
  return f;
}

}  // namespace

TEST_CASE("The best core is the strongest class of kernels the CPU's features allow") {
  CHECK(best_coretype(avx512_bf16()) == "Cooperlake");
  CHECK(best_coretype(avx512()) == "SkylakeX");
  CHECK(best_coretype(avx512f_only()) == "Haswell");
  CHECK(best_coretype(avx2_fma()) == "Haswell");
  CHECK(best_coretype(avx_only()) == "Sandybridge");
  CHECK(best_coretype(sse_only()).empty());
  CpuFeatures avx2_no_fma = avx2_fma();
  avx2_no_fma.fma = false;
  CHECK(best_coretype(avx2_no_fma) == "Sandybridge");
}

TEST_CASE("A core of a weaker class than the CPU's best is replaced by the best") {
  struct Row {
    CpuFeatures cpu;
    std::string_view running;
    std::string_view recommended;  // empty: leave OpenBLAS alone
  };
  const Row rows[] = {
      // Debian 12's 0.3.21 on Emerald Rapids: the missing break falls through to Prescott.
      {avx512_bf16(), "Prescott", "Cooperlake"},
      {avx512(), "Prescott", "SkylakeX"},
      {avx512(), "Haswell", "SkylakeX"},
      {avx512(), "Zen", "SkylakeX"},
      {avx512_bf16(), "Haswell", "Cooperlake"},
      {avx512_bf16(), "SkylakeX", "Cooperlake"},
      {avx2_fma(), "Prescott", "Haswell"},
      {avx2_fma(), "Nehalem", "Haswell"},
      {avx2_fma(), "Sandybridge", "Haswell"},
      {avx_only(), "Core2", "Sandybridge"},
      // Already right, or stronger than this table's best: nothing to do.
      {avx512_bf16(), "Cooperlake", ""},
      {avx512_bf16(), "SapphireRapids", ""},
      {avx512(), "SkylakeX", ""},
      {avx512(), "Cooperlake", ""},
      {avx2_fma(), "Haswell", ""},
      {avx2_fma(), "Zen", ""},  // AMD's own AVX2 kernels: same class, OpenBLAS's choice
      {avx2_fma(), "Excavator", ""},
      {avx_only(), "Bulldozer", ""},
      {sse_only(), "Prescott", ""},
      // Names this table does not know are left alone.
      {avx512(), "SomeFutureCore", ""},
      {avx512(), "", ""},
      // Case does not matter, as in OpenBLAS's own comparison.
      {avx512(), "prescott", "SkylakeX"},
  };
  for (const Row& r : rows) {
    INFO("running " << r.running << ", best " << best_coretype(r.cpu));
    CHECK(recommended_coretype(r.cpu, r.running) == r.recommended);
  }
}

TEST_CASE("zero re-executes only when the user set no core, the fix is on and it has not yet") {
  struct Row {
    BlasFixEnv env;
    std::string_view recommended;
    std::string_view set;
  };
  const Row rows[] = {
      {{false, false, false}, "SkylakeX", "SkylakeX"},  // the fix
      {{false, false, false}, "", ""},                  // nothing to fix
      {{true, false, false}, "SkylakeX", ""},           // the user's OPENBLAS_CORETYPE wins
      {{false, true, false}, "SkylakeX", ""},           // already re-executed: never loop
      {{false, false, true}, "SkylakeX", ""},           // ZERO_NO_BLAS_FIX
      {{true, true, true}, "SkylakeX", ""},
  };
  for (const Row& r : rows) {
    INFO("coretype_set " << r.env.coretype_set << " reexeced " << r.env.reexeced << " disabled "
                         << r.env.disabled << " recommended " << r.recommended);
    CHECK(coretype_to_set(r.env, r.recommended) == r.set);
  }
}

TEST_CASE("The status names the running core, this CPU's best and the library") {
  const BlasCoreStatus s = blas_core_status();
  CHECK(s.library.rfind("OpenBLAS ", 0) == 0);
  CHECK_FALSE(s.running.empty());
  CHECK(s.best == best_coretype(cpu_features()));
  CHECK(s.recommended == recommended_coretype(cpu_features(), s.running));
  CHECK(s.warning.empty() == s.recommended.empty());
}

// tests/cli/test_blas.py runs this case alone with OpenBLAS on weak kernels and reads stderr for
// the one warning line; here it only has to compute.
TEST_CASE("gemm computes on whatever kernels OpenBLAS runs", "[gemm-warning]") {
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  for (int i = 0; i < 2; ++i) gemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 19);
  CHECK(c[3] == 50);
}
