// CUDA element-wise kernels (kernels/cuda/kernels.hpp): casts, accumulate, unscale, finite
// check, fill. The per-element math is kernels/elementwise_math.hpp, shared with the CPU loops.
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.hpp"

namespace zero::kernels::cuda {
namespace {

using detail::load_pack;
using detail::Pack;
using detail::store_pack;

void check_same(const char* what, std::size_t a, std::size_t b) {
  if (a != b) throw Error(cat("cuda::", what, ": spans differ in length (", a, " and ", b, ")"));
}

// Eight elements per vector, so that the 16-bit side moves a full 16 bytes too.
constexpr int kWide = 8;
// Four per vector where every array is fp32 (one float4 each).
constexpr int kNarrow = 4;

template <class From, class To>
struct CastOp {
  const From* src;
  To* dst;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    dst[i] = narrow<To>(widen(src[i]));
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<From, kWide> a = load_pack<From, kWide>(src + i);
    Pack<To, kWide> b;
#pragma unroll
    for (int k = 0; k < kWide; ++k) b.v[k] = narrow<To>(widen(a.v[k]));
    store_pack(dst + i, b);
    return false;
  }
};

template <class T>
struct AccumulateOp {
  float* acc;
  const T* g;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    acc[i] = accumulate_element(acc[i], g[i]);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    Pack<float, kWide> a = load_pack<float, kWide>(acc + i);
    const Pack<T, kWide> b = load_pack<T, kWide>(g + i);
#pragma unroll
    for (int k = 0; k < kWide; ++k) a.v[k] = accumulate_element(a.v[k], b.v[k]);
    store_pack(acc + i, a);
    return false;
  }
};

struct UnscaleOp {
  float* x;
  float scale;
  int* flag;
  __device__ bool scalar(std::size_t i) const {
    const float y = unscale_element(x[i], scale);
    x[i] = y;
    return !is_finite(y);
  }
  __device__ bool vector(std::size_t i) const {
    Pack<float, kNarrow> a = load_pack<float, kNarrow>(x + i);
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kNarrow; ++k) {
      a.v[k] = unscale_element(a.v[k], scale);
      bad |= !is_finite(a.v[k]);
    }
    store_pack(x + i, a);
    return bad;
  }
};

template <class T>
struct FiniteOp {
  const T* x;
  int* flag;
  __device__ bool scalar(std::size_t i) const { return !is_finite(x[i]); }
  __device__ bool vector(std::size_t i) const {
    const Pack<T, kWide> a = load_pack<T, kWide>(x + i);
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kWide; ++k) bad |= !is_finite(a.v[k]);
    return bad;
  }
};

struct FillOp {
  float* x;
  float value;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    x[i] = value;
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    Pack<float, kNarrow> a;
#pragma unroll
    for (int k = 0; k < kNarrow; ++k) a.v[k] = value;
    store_pack(x + i, a);
    return false;
  }
};

template <class From, class To>
void cast_impl(std::span<const From> src, std::span<To> dst, StreamRef stream) {
  check_same("cast", src.size(), dst.size());
  detail::launch_elementwise<kWide>("cast kernel", src.size(),
                                    {{src.data(), sizeof(From)}, {dst.data(), sizeof(To)}},
                                    CastOp<From, To>{src.data(), dst.data()}, stream);
}

template <class T>
void accumulate_impl(std::span<float> acc, std::span<const T> g, StreamRef stream) {
  check_same("accumulate", acc.size(), g.size());
  detail::launch_elementwise<kWide>("accumulate kernel", acc.size(),
                                    {{acc.data(), sizeof(float)}, {g.data(), sizeof(T)}},
                                    AccumulateOp<T>{acc.data(), g.data()}, stream);
}

template <class T>
void check_finite_impl(std::span<const T> x, int* flag, StreamRef stream) {
  if (flag == nullptr) throw Error("cuda::check_finite: the flag pointer is null");
  detail::launch_elementwise<kWide>("check_finite kernel", x.size(), {{x.data(), sizeof(T)}},
                                    FiniteOp<T>{x.data(), flag}, stream);
}

template <class T>
void zero_impl(std::span<T> x, StreamRef stream) {
  if (x.empty()) return;
  ZERO_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.size_bytes(), detail::native(stream)));
}

}  // namespace

void cast(std::span<const float> src, std::span<bf16> dst, StreamRef s) {
  cast_impl(src, dst, s);
}
void cast(std::span<const float> src, std::span<fp16> dst, StreamRef s) {
  cast_impl(src, dst, s);
}
void cast(std::span<const bf16> src, std::span<float> dst, StreamRef s) {
  cast_impl(src, dst, s);
}
void cast(std::span<const fp16> src, std::span<float> dst, StreamRef s) {
  cast_impl(src, dst, s);
}

void accumulate(std::span<float> acc, std::span<const float> g, StreamRef s) {
  accumulate_impl(acc, g, s);
}
void accumulate(std::span<float> acc, std::span<const bf16> g, StreamRef s) {
  accumulate_impl(acc, g, s);
}
void accumulate(std::span<float> acc, std::span<const fp16> g, StreamRef s) {
  accumulate_impl(acc, g, s);
}

void unscale(std::span<float> x, float scale, int* overflow, StreamRef stream) {
  if (overflow == nullptr) throw Error("cuda::unscale: the overflow flag pointer is null");
  detail::launch_elementwise<kNarrow>("unscale kernel", x.size(), {{x.data(), sizeof(float)}},
                                      UnscaleOp{x.data(), scale, overflow}, stream);
}

void check_finite(std::span<const float> x, int* f, StreamRef s) {
  check_finite_impl(x, f, s);
}
void check_finite(std::span<const bf16> x, int* f, StreamRef s) {
  check_finite_impl(x, f, s);
}
void check_finite(std::span<const fp16> x, int* f, StreamRef s) {
  check_finite_impl(x, f, s);
}

void zero_flag(int* flag, StreamRef stream) {
  ZERO_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), detail::native(stream)));
}

void fill(std::span<float> x, float value, StreamRef stream) {
  detail::launch_elementwise<kNarrow>("fill kernel", x.size(), {{x.data(), sizeof(float)}},
                                      FillOp{x.data(), value}, stream);
}

void zero(std::span<float> x, StreamRef s) {
  zero_impl(x, s);
}
void zero(std::span<bf16> x, StreamRef s) {
  zero_impl(x, s);
}
void zero(std::span<fp16> x, StreamRef s) {
  zero_impl(x, s);
}

}  // namespace zero::kernels::cuda
