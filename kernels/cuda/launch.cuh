// Internal to kernels/cuda: launch geometry, aligned vector loads, and the one grid-stride
// element-wise kernel that every element-wise operation instantiates with its own Op.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"

namespace zero::kernels::cuda::detail {

constexpr int kThreads = 256;
// Enough resident blocks to hide memory latency (8 × 256 = 2048 threads, the per-SM maximum on
// sm_80/sm_90); a grid-stride loop covers the rest, so the grid never grows with n.
constexpr int kBlocksPerSm = 8;

inline cudaStream_t native(StreamRef s) {
  return static_cast<cudaStream_t>(s.handle);
}

// Blocks for `items` work items: ceil(items / kThreads), capped at SM count · kBlocksPerSm.
// The attribute query is a cheap host-side lookup, done per launch so that no device state is
// cached in a global and a caller may switch devices freely.
inline int grid_for(std::size_t items) {
  int dev = 0, sms = 0;
  ZERO_CUDA_CHECK(cudaGetDevice(&dev));
  ZERO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const std::size_t need = (items + kThreads - 1) / kThreads;
  const std::size_t cap = static_cast<std::size_t>(sms) * kBlocksPerSm;
  return static_cast<int>(std::max<std::size_t>(1, std::min(need, cap)));
}

inline void check_launch(const char* kernel) {
  ZERO_CUDA_CHECK_NAMED(cudaGetLastError(), kernel);
}

// [0, n) cut into a scalar head, `vecs` aligned vectors of V elements, and a scalar tail. The
// head is the smallest h < V that aligns every array at once; arrays whose misalignments
// disagree (or n too small) get no vector body and run entirely scalar: slower, never wrong.
template <int V>
struct Split {
  std::size_t n = 0, head = 0, vecs = 0;
  __host__ __device__ std::size_t tail_begin() const { return head + vecs * V; }
  __host__ __device__ std::size_t scalars() const { return n - vecs * V; }
  // The j-th scalar element: the head first, then the tail.
  __host__ __device__ std::size_t scalar_index(std::size_t j) const {
    return j < head ? j : tail_begin() + (j - head);
  }
};

struct ArrayAddr {
  const void* ptr;
  std::size_t elem_bytes;
};

// A vector of V elements is loaded in 16-byte pieces (or one 8/4-byte piece when smaller), so
// each array needs that much alignment at the vector start.
constexpr std::size_t piece_bytes(std::size_t vector_bytes) {
  return vector_bytes < 16 ? vector_bytes : 16;
}

template <int V>
Split<V> split(std::size_t n, std::initializer_list<ArrayAddr> arrays) {
  Split<V> s;
  s.n = n;
  s.head = n;  // all scalar unless an aligning head exists
  for (std::size_t h = 0; h < static_cast<std::size_t>(V) && h < n; ++h) {
    bool ok = true;
    for (const ArrayAddr& a : arrays) {
      const auto addr = reinterpret_cast<std::uintptr_t>(a.ptr) + h * a.elem_bytes;
      ok = ok && addr % piece_bytes(V * a.elem_bytes) == 0;
    }
    if (ok) {
      s.head = h;
      s.vecs = (n - h) / V;
      break;
    }
  }
  return s;
}

// V elements of T in registers.
template <class T, int V>
struct Pack {
  T v[V];
};

// Aligned vector load/store of a Pack through 16-, 8- or 4-byte words: one LDG.128 per 16 bytes.
// (memcpy between registers compiles to moves; it is how to reinterpret without UB.)
template <class T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  constexpr int kBytes = sizeof(T) * V;
  Pack<T, V> r;
  if constexpr (kBytes % 16 == 0) {
    uint4 w[kBytes / 16];
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) w[k] = reinterpret_cast<const uint4*>(p)[k];
    memcpy(&r, w, kBytes);
  } else if constexpr (kBytes == 8) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    memcpy(&r, &w, kBytes);
  } else {
    static_assert(kBytes == 4, "vector packs are 4, 8 or a multiple of 16 bytes");
    const unsigned w = *reinterpret_cast<const unsigned*>(p);
    memcpy(&r, &w, kBytes);
  }
  return r;
}

template <class T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& r) {
  constexpr int kBytes = sizeof(T) * V;
  if constexpr (kBytes % 16 == 0) {
    uint4 w[kBytes / 16];
    memcpy(w, &r, kBytes);
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) reinterpret_cast<uint4*>(p)[k] = w[k];
  } else if constexpr (kBytes == 8) {
    uint2 w;
    memcpy(&w, &r, kBytes);
    *reinterpret_cast<uint2*>(p) = w;
  } else {
    static_assert(kBytes == 4, "vector packs are 4, 8 or a multiple of 16 bytes");
    unsigned w;
    memcpy(&w, &r, kBytes);
    *reinterpret_cast<unsigned*>(p) = w;
  }
}

// The element-wise kernel. Op supplies
//   bool vector(std::size_t i)  elements i .. i+V-1, all arrays aligned there
//   bool scalar(std::size_t i)  element i
// each returning true if it saw a non-finite value, and `int* flag` (may be null): if any
// thread saw one, it stores 1 there. Every such thread stores the same value, so a plain store
// is race-free in effect and no atomic is needed; the flag is never cleared here.
template <int V, class Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Split<V> s, Op op) {
  const std::size_t tid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (std::size_t j = tid; j < s.vecs; j += stride) bad |= op.vector(s.head + j * V);
  const std::size_t scalars = s.scalars();
  for (std::size_t j = tid; j < scalars; j += stride) bad |= op.scalar(s.scalar_index(j));
  if (bad && op.flag != nullptr) *op.flag = 1;
}

// Queues elementwise_kernel for n elements of the given arrays.
template <int V, class Op>
void launch_elementwise(const char* name, std::size_t n, std::initializer_list<ArrayAddr> arrays,
                        const Op& op, StreamRef stream) {
  if (n == 0) return;
  const Split<V> s = split<V>(n, arrays);
  const std::size_t items = std::max(s.vecs, s.scalars());
  elementwise_kernel<V, Op><<<grid_for(items), kThreads, 0, native(stream)>>>(s, op);
  check_launch(name);
}

}  // namespace zero::kernels::cuda::detail
