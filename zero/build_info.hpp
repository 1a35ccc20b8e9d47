// What this build of zero is and what it finds on the machine it runs on (`zero info`).
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

}  // namespace zero
