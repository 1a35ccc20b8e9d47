// Which OpenBLAS core kernel runs, which one this CPU can run, and the fix when they differ.
// Debian 12's OpenBLAS 0.3.21 misdetects some recent CPUs and falls back to weaker kernels
// (Prescott's SSE3, or Haswell's AVX2 on AVX-512 CPUs): sgemm then runs at a fraction of the
// core's peak. OpenBLAS reads OPENBLAS_CORETYPE once, when the library loads, so the only fix
// from inside a process is to set it and exec the program again (docs/blas.md).
#pragma once

#include <string>
#include <string_view>

#include "precision/simd.hpp"  // CpuFeatures: what decides which kernels can run

namespace zero::kernels::cpu {

// The strongest OpenBLAS core this CPU can run, as OPENBLAS_CORETYPE spells it (names that
// OpenBLAS 0.3.21 accepts): "Cooperlake" (AVX-512 F/CD/BW/DQ/VL + BF16), "SkylakeX" (AVX-512),
// "Haswell" (AVX2 + FMA), "Sandybridge" (AVX); empty below AVX (no opinion).
std::string_view best_coretype(const CpuFeatures& f);

// The OPENBLAS_CORETYPE that would make OpenBLAS, now running `corename`'s kernels, run this
// CPU's best ones: best_coretype(f) when corename's kernels are of a weaker class; empty when
// they are as strong (e.g. "Zen" on an AVX2 CPU) or corename is a name this table does not know
// (then zero leaves OpenBLAS alone).
std::string_view recommended_coretype(const CpuFeatures& f, std::string_view corename);

// Who chose the core OpenBLAS runs.
enum class CoretypeSource {
  detected,  // OpenBLAS's own detection (OPENBLAS_CORETYPE unset)
  user,      // OPENBLAS_CORETYPE set by the user (respected, never changed)
  zero,      // set by fix_blas_coretype, which then re-executed the program
};

// What fix_blas_coretype sees in the environment.
struct BlasFixEnv {
  bool coretype_set = false;  // OPENBLAS_CORETYPE is set
  bool reexeced = false;      // ZERO_BLAS_FIX_APPLIED is set: this process is the re-exec
  bool disabled = false;      // ZERO_NO_BLAS_FIX is set to anything but "" or "0"
};

// The OPENBLAS_CORETYPE to set before re-executing, or empty for "run on as we are": only when
// the user set none, the fix is not disabled, this is not already the re-executed process (no
// loops), and `recommended` is not empty.
std::string_view coretype_to_set(const BlasFixEnv& env, std::string_view recommended);

// The BLAS in this process, as `zero info` reports it.
struct BlasCoreStatus {
  std::string library;      // e.g. "OpenBLAS 0.3.21"
  std::string running;      // openblas_get_corename(): the kernels this process runs
  std::string best;         // best_coretype(this CPU)
  std::string recommended;  // recommended_coretype(this CPU, running); empty when they match
  CoretypeSource source = CoretypeSource::detected;
  bool fix_disabled = false;  // ZERO_NO_BLAS_FIX
  std::string warning;        // one sentence when `recommended` is not empty, else empty
};

BlasCoreStatus blas_core_status();

std::string_view name_of(CoretypeSource s);

// Call first thing in main, before any BLAS call and before starting threads or MPI: when
// OpenBLAS runs weaker kernels than this CPU can, OPENBLAS_CORETYPE is unset and ZERO_NO_BLAS_FIX
// is not set, sets OPENBLAS_CORETYPE (and the marker ZERO_BLAS_FIX_APPLIED) and execs
// /proc/self/exe with the same argv; the new process keeps the environment, so processes it
// starts (mpirun ranks) inherit the choice. Returns when nothing needs doing, or when the exec
// failed (then after one line on stderr). The `zero` command calls it; trainers embedding libzero
// may too.
void fix_blas_coretype(int argc, char** argv);

}  // namespace zero::kernels::cpu
