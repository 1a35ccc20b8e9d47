// What this build of zero is and what it finds on the machine it runs on (`zero info`), and the
// machine facts a trainer reports beside its figures: the peaks MFU is measured against, which
// BLAS kernels and which BF16 GEMM run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero {

struct GpuInfo {
  int index = 0;                       // CUDA device ordinal
  std::string name;                    // e.g. "NVIDIA H200"
  std::uint64_t memory_bytes = 0;      // total device memory
  int compute_capability = 0;          // e.g. 90 for 9.0
  int multiprocessors = 0;             // SM count
};

struct BuildInfo {
  std::string version;                 // zero's version
  std::string compiler;                // host compiler and version
  std::string build_type;              // meson buildtype
  bool cuda_compiled = false;          // CUDA kernels, NCCL and cuBLASLt compiled in
  std::string cuda_archs;              // architectures compiled for, e.g. "80,90"
  std::string cuda_runtime_version;    // empty unless cuda_compiled
  std::string cuda_driver_version;     // empty when no driver is present
  std::string nccl_version;            // empty unless cuda_compiled
  std::string cublaslt_version;        // empty unless cuda_compiled
  std::string mpi_library;             // MPI_Get_library_version, first line
  std::string blas;                    // the CPU BLAS and its core, e.g. "OpenBLAS (SkylakeX)"
  std::string blas_library;            // e.g. "OpenBLAS 0.3.21"
  std::string blas_core;               // the core kernels running (openblas_get_corename)
  std::string blas_core_best;          // the strongest core this CPU can run (docs/blas.md)
  std::string blas_core_source;        // who chose blas_core: "detected", "user" or "zero"
  std::string blas_warning;            // one sentence when blas_core is weaker, else empty
  std::vector<std::string> simd_paths; // SIMD paths this CPU supports, best first
  std::vector<GpuInfo> gpus;           // GPUs found (empty without a GPU or a driver)
  std::string gpu_note;                // why no GPU was found, if none was
};

// Gathers the above. Safe to call before MPI_Init and on machines without a GPU or driver.
BuildInfo build_info();

std::string to_text(const BuildInfo& info);
std::string to_json(const BuildInfo& info);

// The GPUs this process sees, as build_info().gpus lists them; empty without a GPU, a driver or
// CUDA in this build. Never throws.
std::vector<GpuInfo> find_gpus();

// A GPU's dense bf16 tensor-core peak (no sparsity), from the data sheets by name, else by compute
// capability; tflops 0 when unknown. What GPU MFU is measured against, as llm.c counts it.
struct GpuPeak {
  double tflops = 0;
  std::string source = "unknown";  // which table row said it
};
GpuPeak gpu_bf16_peak(const GpuInfo& gpu);

// The fp32 FMA peak of one CPU core, measured: an FMA loop on the calling thread for about
// `seconds`, `tries` times, the best kept (another process on the core only ever lowers a
// reading). What CPU MFU and GEMM efficiency are fractions of.
struct CorePeak {
  std::string kernel;  // "avx512 fma", "avx2 fma", or "none" (no FMA: flops 0)
  double flops = 0;    // fp32 FLOP/s of one core (an FMA counts 2)
};
CorePeak measure_core_peak(double seconds, int tries = 1);

// The peak a run's CPU math is measured against (docs/gpt.md, "What a user sees"): that of the
// instructions its GEMMs run. bf16 dot products (AVX512-BF16's vdpbf16ps, twice the FLOPs of an
// fp32 FMA an instruction) when the math is bf16, the bf16 GEMM is oneDNN's (which runs them) and
// the CPU has them; fp32 FMA otherwise (OpenBLAS, and the widening bf16 path over it).
bool peak_is_bf16_dot(bool bf16_math, const std::string& gemm_bf16_backend, bool cpu_bf16_dot);

// One core's peak on those instructions, from a stable source: the best of `tries` measurements
// of `seconds` now, and of every such measurement on this machine before, kept in a cache file
// (one line per host, CPU model and kernel; ZERO_PEAK_CACHE names the file, "off" keeps none;
// by default $XDG_CACHE_HOME/zero/cpu-peaks, else ~/.cache/zero/cpu-peaks). A measurement on
// busy cores is low, never high, so the best one is the peak; a cache that cannot be read or
// written is ignored. Throws only what gemm_bf16_backend() throws (when bf16_math).
struct CpuPeak {
  CorePeak core;       // the kernel and one core's FLOP/s
  std::string source;  // "measured now" or "the best measured on this machine (<cache file>)"
};
CpuPeak cpu_peak(bool bf16_math, double seconds = 0.05, int tries = 4);

// The OpenBLAS kernels this process runs, without the rest of build_info (docs/blas.md).
struct BlasCore {
  std::string library;  // e.g. "OpenBLAS 0.3.21"
  std::string running;  // the core kernels running (openblas_get_corename)
  std::string best;     // the strongest core this CPU can run
  std::string source;   // who chose `running`: "detected", "user" or "zero"
  std::string warning;  // one sentence when `running` is weaker than `best`, else empty
};
BlasCore blas_core();

// Call first thing in main, before any BLAS call, thread or MPI: when OpenBLAS runs weaker
// kernels than this CPU can and neither OPENBLAS_CORETYPE nor ZERO_NO_BLAS_FIX is set, sets
// OPENBLAS_CORETYPE and execs the program again with the same argv (docs/blas.md). Returns when
// nothing needs doing, or when the exec failed (then after one line on stderr).
void fix_blas_coretype(int argc, char** argv);

// The CPU BF16 GEMM this process runs (oneDNN's matmul or fp32 widening + OpenBLAS) and why.
// Throws zero::Error (one sentence) when ZERO_GEMM_BF16 names no backend, or names onednn where
// oneDNN has no bf16 matmul.
struct GemmBf16 {
  std::string name;            // "oneDNN brg:avx512_core_bf16" or "fp32 widen + OpenBLAS Zen"
  std::string backend;         // "onednn" or "widen"
  std::string reason;          // one sentence: why this backend
  std::string onednn_version;  // e.g. "2.6.3"
  std::string onednn_impl;     // oneDNN's bf16 matmul implementation here; empty when none
};
GemmBf16 gemm_bf16_backend();

}  // namespace zero
