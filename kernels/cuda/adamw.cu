// CUDA kernel of the fused Adam/AdamW update (kernels/cuda/kernels.hpp); the per-element math is
// kernels/adamw_math.hpp, the very function the CPU loop calls.
#include <type_traits>

#include "kernels/adamw_math.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.hpp"

namespace zero::kernels::cuda {
namespace {

// Four elements per vector: a float4 from each of p, m, v, g (16 bytes) and 8 bytes of the
// 16-bit copy. About 30 bytes move per element, so the kernel is bound by memory bandwidth and
// wide loads are what matter.
constexpr int kVec = 4;

// Out = void: no 16-bit copy.
template <class Out>
struct AdamOp {
  float* p;
  float* m;
  float* v;
  const float* g;
  Out* out;
  AdamStep s;
  unsigned long long* first_bad = nullptr;  // atomicMin of the index of each non-finite update
  int* flag = nullptr;  // elementwise_kernel's flag: unused, first_bad says more

  __device__ void note_bad(std::size_t i) const {
    if (first_bad != nullptr) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }

  // Each returns whether an element's update was non-finite (adam_element_guarded kept it).
  __device__ bool scalar(std::size_t i) const {
    float pi = p[i], mi = m[i], vi = v[i];
    const bool bad = adam_element_guarded(pi, mi, vi, g[i], s);
    if (bad) note_bad(i);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (!std::is_void_v<Out>) out[i] = narrow<Out>(pi);
    return bad;
  }

  __device__ bool vector(std::size_t i) const {
    using detail::load_pack;
    using detail::Pack;
    Pack<float, kVec> P = load_pack<float, kVec>(p + i);
    Pack<float, kVec> M = load_pack<float, kVec>(m + i);
    Pack<float, kVec> V = load_pack<float, kVec>(v + i);
    const Pack<float, kVec> G = load_pack<float, kVec>(g + i);
    bool bad = false;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const bool b = adam_element_guarded(P.v[k], M.v[k], V.v[k], G.v[k], s);
      bad |= b;
      if (b) note_bad(i + k);
    }
    detail::store_pack(p + i, P);
    detail::store_pack(m + i, M);
    detail::store_pack(v + i, V);
    if constexpr (!std::is_void_v<Out>) {
      Pack<Out, kVec> O;
#pragma unroll
      for (int k = 0; k < kVec; ++k) O.v[k] = narrow<Out>(P.v[k]);
      detail::store_pack(out + i, O);
    }
    return bad;
  }
};

void check_sizes(std::size_t p, std::size_t m, std::size_t v, std::size_t g, std::size_t out,
                 bool has_out) {
  if (m != p || v != p || g != p || (has_out && out != p))
    throw Error(cat("cuda::adamw_step: shard spans differ in length (p ", p, ", m ", m, ", v ", v,
                    ", g ", g, has_out ? cat(", out ", out) : std::string(), ")"));
}

template <class Out>
void run(std::span<float> p, std::span<float> m, std::span<float> v, std::span<const float> g,
         const AdamStep& step, Out* out, StreamRef stream, unsigned long long* first_bad) {
  const AdamOp<Out> op{p.data(), m.data(), v.data(), g.data(), out, step, first_bad};
  const char* name = "adamw_step kernel";
  if constexpr (std::is_void_v<Out>) {
    detail::launch_elementwise<kVec>(
        name, p.size(), {{p.data(), 4}, {m.data(), 4}, {v.data(), 4}, {g.data(), 4}}, op, stream);
  } else {
    detail::launch_elementwise<kVec>(
        name, p.size(),
        {{p.data(), 4}, {m.data(), 4}, {v.data(), 4}, {g.data(), 4}, {out, sizeof(Out)}}, op,
        stream);
  }
}

}  // namespace

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, StreamRef stream,
                unsigned long long* first_bad) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), 0, false);
  run<void>(p, m, v, g, step, nullptr, stream, first_bad);
}

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<bf16> out,
                StreamRef stream, unsigned long long* first_bad) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  run<bf16>(p, m, v, g, step, out.data(), stream, first_bad);
}

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<fp16> out,
                StreamRef stream, unsigned long long* first_bad) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  run<fp16>(p, m, v, g, step, out.data(), stream, first_bad);
}

}  // namespace zero::kernels::cuda
