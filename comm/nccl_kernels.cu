// The widening kernel of the NCCL backend (see nccl_kernels.hpp). It calls precision/'s
// to_float, the same function the MPI backend widens with on the host.
#include "comm/nccl_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::comm::nccl {
namespace {

constexpr int kThreads = 256;
// A grid-stride loop covers any n; more blocks than this only queue behind the resident ones.
constexpr std::size_t kMaxBlocks = 4096;

template <class T>
__global__ void widen(const T* __restrict__ in, float* __restrict__ out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = to_float(in[i]);
}

}  // namespace

cudaError_t widen_to_f32(const void* in, DType type, std::size_t n, float* out,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
  if (type == DType::bf16)
    widen<<<blocks, kThreads, 0, stream>>>(static_cast<const bf16*>(in), out, n);
  else if (type == DType::f16)
    widen<<<blocks, kThreads, 0, stream>>>(static_cast<const fp16*>(in), out, n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace zero::comm::nccl
