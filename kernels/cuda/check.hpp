// Internal to kernels/cuda: turns a failed CUDA runtime call into a zero::Error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "base/error.hpp"

namespace zero::kernels::cuda::detail {

inline void check(cudaError_t e, const char* call, const char* context = nullptr) {
  if (e != cudaSuccess)
    throw Error(cat(call, context ? cat(" (", context, ")") : std::string(),
                    " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

}  // namespace zero::kernels::cuda::detail

// ZERO_CUDA_CHECK(cudaMalloc(&p, n)) throws "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation:
// ..."
#define ZERO_CUDA_CHECK(call) ::zero::kernels::cuda::detail::check((call), #call)
// The same, naming what the call was for: ZERO_CUDA_CHECK_NAMED(cudaGetLastError(), "adamw
// kernel").
#define ZERO_CUDA_CHECK_NAMED(call, context) \
  ::zero::kernels::cuda::detail::check((call), #call, (context))
