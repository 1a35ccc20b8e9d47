// CUDA kernels of the Lion and LAMB updates (kernels/cuda/optimizers.hpp); the per-element math
// is kernels/lion_math.hpp and kernels/lamb_math.hpp, the very functions the CPU loops call.
// One element per step of the loop (vector() walks its V elements one by one): these updates
// are rarer than AdamW's, and the plain form keeps them easy to check against the CPU.
#include <string>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/optimizers.hpp"
#include "kernels/elementwise_math.hpp"

namespace zero::kernels::cuda {
namespace {

constexpr int kVec = 4;

__device__ void note_bad(unsigned long long* first_bad, std::size_t i) {
  if (first_bad != nullptr) atomicMin(first_bad, static_cast<unsigned long long>(i));
}

template <class Out>
struct LionOp {
  float* p;
  float* m;
  const float* g;
  Out* out;
  LionStep s;
  unsigned long long* first_bad = nullptr;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    float pi = p[i], mi = m[i];
    const bool bad = lion_element_guarded(pi, mi, g[i], s);
    if (bad) note_bad(first_bad, i);
    p[i] = pi;
    m[i] = mi;
    if constexpr (!std::is_void_v<Out>) out[i] = narrow<Out>(pi);
    return bad;
  }
  __device__ bool vector(std::size_t i) const {
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kVec; ++k) bad |= scalar(i + k);
    return bad;
  }
};

struct LambDirectionOp {
  const float* p;
  const float* m;
  const float* v;
  const float* g;
  float* u;
  LambStep s;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    float mi = m[i], vi = v[i];
    u[i] = lamb_direction(p[i], mi, vi, g[i], s);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
#pragma unroll
    for (int k = 0; k < kVec; ++k) scalar(i + k);
    return false;
  }
};

template <class Out>
struct LambApplyOp {
  float* p;
  float* m;
  float* v;
  const float* g;
  Out* out;
  float rate;
  LambStep s;
  unsigned long long* first_bad = nullptr;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    float pi = p[i], mi = m[i], vi = v[i];
    const bool bad = lamb_element_guarded(pi, mi, vi, g[i], rate, s);
    if (bad) note_bad(first_bad, i);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (!std::is_void_v<Out>) out[i] = narrow<Out>(pi);
    return bad;
  }
  __device__ bool vector(std::size_t i) const {
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kVec; ++k) bad |= scalar(i + k);
    return bad;
  }
};

void check_sizes(const char* what, std::size_t p, std::size_t m, std::size_t v, std::size_t g,
                 std::size_t out) {
  if (m != p || v != p || g != p || out != p)
    throw Error(cat(what, ": shard spans differ in length (p ", p, ", m ", m, ", v ", v, ", g ", g,
                    ", out ", out, ")"));
}

template <class Out>
void lion(std::span<float> p, std::span<float> m, std::span<const float> g, const LionStep& step,
          Out* out, StreamRef stream, unsigned long long* first_bad) {
  const LionOp<Out> op{p.data(), m.data(), g.data(), out, step, first_bad};
  detail::launch_elementwise<kVec>("lion_step kernel", p.size(),
                                   {{p.data(), 4}, {m.data(), 4}, {g.data(), 4}}, op, stream);
}

template <class Out>
void lamb(std::span<float> p, std::span<float> m, std::span<float> v, std::span<const float> g,
          float rate, const LambStep& step, Out* out, StreamRef stream,
          unsigned long long* first_bad) {
  const LambApplyOp<Out> op{p.data(), m.data(), v.data(), g.data(), out, rate, step, first_bad};
  detail::launch_elementwise<kVec>("lamb_apply kernel", p.size(),
                                   {{p.data(), 4}, {m.data(), 4}, {v.data(), 4}, {g.data(), 4}},
                                   op, stream);
}

}  // namespace

void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, StreamRef stream, unsigned long long* first_bad) {
  check_sizes("cuda::lion_step", p.size(), m.size(), p.size(), g.size(), p.size());
  lion<void>(p, m, g, step, nullptr, stream, first_bad);
}
void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, std::span<bf16> out, StreamRef stream,
               unsigned long long* first_bad) {
  check_sizes("cuda::lion_step", p.size(), m.size(), p.size(), g.size(), out.size());
  lion<bf16>(p, m, g, step, out.data(), stream, first_bad);
}
void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, std::span<fp16> out, StreamRef stream,
               unsigned long long* first_bad) {
  check_sizes("cuda::lion_step", p.size(), m.size(), p.size(), g.size(), out.size());
  lion<fp16>(p, m, g, step, out.data(), stream, first_bad);
}

void lamb_direction(std::span<const float> p, std::span<const float> m, std::span<const float> v,
                    std::span<const float> g, const LambStep& step, std::span<float> u,
                    StreamRef stream) {
  check_sizes("cuda::lamb_direction", p.size(), m.size(), v.size(), g.size(), u.size());
  const LambDirectionOp op{p.data(), m.data(), v.data(), g.data(), u.data(), step};
  detail::launch_elementwise<kVec>(
      "lamb_direction kernel", p.size(),
      {{p.data(), 4}, {m.data(), 4}, {v.data(), 4}, {g.data(), 4}, {u.data(), 4}}, op, stream);
}

void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, StreamRef stream,
                unsigned long long* first_bad) {
  check_sizes("cuda::lamb_apply", p.size(), m.size(), v.size(), g.size(), p.size());
  lamb<void>(p, m, v, g, rate, step, nullptr, stream, first_bad);
}
void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, std::span<bf16> out,
                StreamRef stream, unsigned long long* first_bad) {
  check_sizes("cuda::lamb_apply", p.size(), m.size(), v.size(), g.size(), out.size());
  lamb<bf16>(p, m, v, g, rate, step, out.data(), stream, first_bad);
}
void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, std::span<fp16> out,
                StreamRef stream, unsigned long long* first_bad) {
  check_sizes("cuda::lamb_apply", p.size(), m.size(), v.size(), g.size(), out.size());
  lamb<fp16>(p, m, v, g, rate, step, out.data(), stream, first_bad);
}

}  // namespace zero::kernels::cuda
