// CPU loops of the fused Adam/AdamW update (kernels/cpu/adamw.hpp).
#include "kernels/cpu/adamw.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include "kernels/cpu/dispatch.hpp"
#include "precision/convert.hpp"
#include "zero/error.hpp"

namespace zero::kernels::cpu {
namespace {

void check_sizes(std::size_t p, std::size_t m, std::size_t v, std::size_t g, std::size_t out,
                 bool has_out) {
  if (m != p || v != p || g != p || (has_out && out != p))
    throw Error(cat("adamw_step: shard spans differ in length (p ", p, ", m ", m, ", v ", v, ", g ",
                    g, has_out ? cat(", out ", out) : std::string(), ")"));
}

// Elements per chunk: the update writes a chunk of p, and the 16-bit copy of that chunk is made
// at once, while it is still in L1 (4 arrays x 8 KiB), so memory is still swept only once.
// The copy goes through precision/'s bulk convert, whose vector paths return exactly
// to_bf16 / to_fp16 (the functions the GPU kernel calls): GCC cannot vectorise those branchy
// scalar functions itself, and a scalar copy would halve the loop's speed.
constexpr std::size_t kChunk = 2048;

// Out = void: no 16-bit copy. The step is copied into a local so the loop reads its fields from
// registers, not through a reference that might alias the arrays.
template <class Out>
void run(std::span<float> p_, std::span<float> m_, std::span<float> v_, std::span<const float> g_,
         const AdamStep& step, Out* out, SimdPath path) {
  const AdamStep s = step;
  const std::size_t n = p_.size();
  detail::dispatch(path, [&]() ZERO_LOOP {
    float* __restrict p = p_.data();
    float* __restrict m = m_.data();
    float* __restrict v = v_.data();
    const float* __restrict g = g_.data();
    for (std::size_t b = 0; b < n; b += kChunk) {
      const std::size_t e = std::min(n, b + kChunk);
      for (std::size_t i = b; i < e; ++i) adam_element(p[i], m[i], v[i], g[i], s);
      if constexpr (!std::is_void_v<Out>)
        convert(std::span<const float>(p + b, e - b), std::span<Out>(out + b, e - b), path);
    }
  });
}

}  // namespace

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), 0, false);
  run<void>(p, m, v, g, step, nullptr, path);
}

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<bf16> out,
                SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  run<bf16>(p, m, v, g, step, out.data(), path);
}

void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<fp16> out,
                SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  run<fp16>(p, m, v, g, step, out.data(), path);
}

}  // namespace zero::kernels::cpu
