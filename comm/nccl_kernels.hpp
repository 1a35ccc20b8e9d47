// The one kernel of the NCCL backend: widening bf16 or fp16 to fp32 on the device, so that a
// reduce-scatter into an fp32 output can run (and sum) in fp32. Internal to comm/'s CUDA build.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "precision/dtype.hpp"

namespace zero::comm::nccl {

// Queues out[i] = in[i] widened to fp32 (exact) for i < n on `stream`; `type` is bf16 or fp16.
// Returns the launch's error (cudaSuccess, or cudaErrorInvalidValue for another type).
cudaError_t widen_to_f32(const void* in, DType type, std::size_t n, float* out,
                         cudaStream_t stream);

}  // namespace zero::comm::nccl
