// build_info(): versions of what zero was built with, and what it finds on this machine.
#include "zero/build_info.hpp"

#include <mpi.h>

#include <boost/json.hpp>
#include <sstream>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/cuda/device.hpp"
#include "precision/simd.hpp"
#include "zero_build_config.hpp"

#if ZERO_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace zero {
namespace {

#if ZERO_HAVE_CUDA  // the CUDA libraries' versions only
std::string dotted(int v, int major_div, int minor_div, int minor_mod) {
  std::ostringstream s;
  s << v / major_div << '.' << (v / minor_div) % minor_mod;
  return s.str();
}
#endif

std::string mpi_library() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(buf, &len);  // allowed before MPI_Init
  std::string s(buf, static_cast<std::size_t>(len));
  if (auto nl = s.find_first_of("\r\n"); nl != std::string::npos) s.resize(nl);
  if (auto comma = s.find(','); comma != std::string::npos) s.resize(comma);
  return s;
}

// The vector paths zero's kernels dispatch to at run time, best first.
std::vector<std::string> simd_paths(const CpuFeatures& f) {
  std::vector<std::string> paths;
  if (f.avx512f && f.avx512bw && f.avx512bf16) paths.push_back("avx512-bf16");
  if (f.avx512f && f.avx512bw) paths.push_back("avx512");
  if (f.avx2 && f.fma && f.f16c) paths.push_back("avx2");
  paths.push_back("scalar");
  return paths;
}

void find_gpus(BuildInfo& info) {
#if ZERO_HAVE_CUDA
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  info.cuda_runtime_version = dotted(rt, 1000, 10, 100);
  int drv = 0;
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
    info.cuda_driver_version = dotted(drv, 1000, 10, 100);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.gpu_note = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error so later CUDA calls are not poisoned
    return;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    info.gpus.push_back(GpuInfo{i, p.name, static_cast<std::uint64_t>(p.totalGlobalMem),
                                p.major * 10 + p.minor, p.multiProcessorCount});
  }
  if (n == 0) info.gpu_note = "the CUDA driver reports no device";
#else
  info.gpu_note = "built without CUDA";
#endif
}

}  // namespace

BuildInfo build_info() {
  BuildInfo info;
  info.version = ZERO_VERSION;
#if defined(__clang__)
  info.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info.compiler = std::string("g++ ") + __VERSION__;
#endif
  info.build_type = ZERO_BUILD_TYPE;
  info.cuda_compiled = ZERO_HAVE_CUDA;
  info.cuda_archs = ZERO_CUDA_ARCHS;
#if ZERO_HAVE_CUDA
  int nv = 0;
  ncclGetVersion(&nv);
  info.nccl_version = dotted(nv, 10000, 100, 100) + '.' + std::to_string(nv % 100);
  info.cublaslt_version = dotted(static_cast<int>(cublasLtGetVersion()), 10000, 100, 100);
#endif
  info.mpi_library = mpi_library();
  const BlasCore blas = blas_core();
  info.blas = "OpenBLAS (" + blas.running + ")";
  info.blas_library = blas.library;
  info.blas_core = blas.running;
  info.blas_core_best = blas.best;
  info.blas_core_source = blas.source;
  info.blas_warning = blas.warning;
  info.simd_paths = simd_paths(cpu_features());
  find_gpus(info);
  return info;
}

std::vector<GpuInfo> find_gpus() {
  std::vector<GpuInfo> out;
  for (const kernels::cuda::DeviceInfo& d : kernels::cuda::describe_devices())
    out.push_back(GpuInfo{d.index, d.name, static_cast<std::uint64_t>(d.memory_bytes),
                          d.compute_capability, d.multiprocessors});
  return out;
}

GpuPeak gpu_bf16_peak(const GpuInfo& gpu) {
  const kernels::cuda::Bf16Peak p = kernels::cuda::bf16_peak(gpu.name, gpu.compute_capability);
  return {p.tflops, p.source};
}

CorePeak measure_core_peak(double seconds, int tries) {
  const kernels::cpu::FmaPeak p = kernels::cpu::measure_fma_peak(seconds, tries);
  return {std::string(p.kernel), p.flops};
}

BlasCore blas_core() {
  const kernels::cpu::BlasCoreStatus s = kernels::cpu::blas_core_status();
  return {s.library, s.running, s.best, std::string(kernels::cpu::name_of(s.source)), s.warning};
}

void fix_blas_coretype(int argc, char** argv) {
  kernels::cpu::fix_blas_coretype(argc, argv);
}

GemmBf16 gemm_bf16_backend() {
  const kernels::cpu::GemmBf16Info g = kernels::cpu::gemm_bf16_info();
  return {g.name, std::string(kernels::cpu::name_of(g.backend)), g.reason, g.onednn_version,
          g.onednn_impl};
}

std::string to_text(const BuildInfo& i) {
  std::ostringstream s;
  auto row = [&](const char* k, const std::string& v) {
    s << "  " << k << std::string(14 - std::string(k).size(), ' ') << (v.empty() ? "-" : v)
      << '\n';
  };
  s << "zero " << i.version << '\n';
  row("compiler", i.compiler);
  row("build type", i.build_type);
  row("CUDA", i.cuda_compiled ? "compiled (archs " + i.cuda_archs + ", runtime " +
                                    i.cuda_runtime_version + ")"
                              : "not compiled");
  if (i.cuda_compiled) {
    row("CUDA driver", i.cuda_driver_version.empty() ? "none found" : i.cuda_driver_version);
    row("NCCL", i.nccl_version);
    row("cuBLASLt", i.cublaslt_version);
  }
  row("MPI", i.mpi_library);
  row("BLAS", i.blas_library);
  const std::string chosen = i.blas_core_source == "user"   ? "OPENBLAS_CORETYPE set by the user"
                             : i.blas_core_source == "zero" ? "OPENBLAS_CORETYPE set by zero"
                                                            : "detected by OpenBLAS";
  row("BLAS kernels", i.blas_core + " (" + chosen + "); this CPU's best: " +
                          (i.blas_core_best.empty() ? "-" : i.blas_core_best));
  if (!i.blas_warning.empty()) row("BLAS warning", i.blas_warning);
  std::string simd;
  for (const auto& p : i.simd_paths) simd += (simd.empty() ? "" : ", ") + p;
  row("SIMD", simd);
  if (i.gpus.empty()) {
    row("GPUs", "none (" + i.gpu_note + ")");
  } else {
    for (const auto& g : i.gpus) {
      std::ostringstream d;
      d << "[" << g.index << "] " << g.name << ", " << g.memory_bytes / (1ull << 30) << " GiB, sm_"
        << g.compute_capability << ", " << g.multiprocessors << " SMs";
      row("GPU", d.str());
    }
  }
  return s.str();
}

std::string to_json(const BuildInfo& i) {
  boost::json::array gpus;
  for (const auto& g : i.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_capability", g.compute_capability},
                    {"multiprocessors", g.multiprocessors}});
  boost::json::array simd;
  for (const auto& p : i.simd_paths) simd.push_back(boost::json::string(p));
  boost::json::object o{{"version", i.version},
                        {"compiler", i.compiler},
                        {"build_type", i.build_type},
                        {"cuda_compiled", i.cuda_compiled},
                        {"cuda_archs", i.cuda_archs},
                        {"cuda_runtime_version", i.cuda_runtime_version},
                        {"cuda_driver_version", i.cuda_driver_version},
                        {"nccl_version", i.nccl_version},
                        {"cublaslt_version", i.cublaslt_version},
                        {"mpi_library", i.mpi_library},
                        {"blas", i.blas},
                        {"blas_library", i.blas_library},
                        {"blas_core", i.blas_core},
                        {"blas_core_best", i.blas_core_best},
                        {"blas_core_source", i.blas_core_source},
                        {"blas_warning", i.blas_warning},
                        {"simd_paths", simd},
                        {"gpus", gpus},
                        {"gpu_note", i.gpu_note}};
  return boost::json::serialize(o);
}

}  // namespace zero
