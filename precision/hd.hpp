// ZERO_HD marks per-element math that both the host compiler and nvcc compile, so that the CPU
// loop and the CUDA kernel call the same function and the CPU tests check what the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define ZERO_HD __host__ __device__ __forceinline__
#else
#define ZERO_HD inline
#endif
