// CPU loops of the fused Adam/AdamW update (kernels/cpu/adamw.hpp).
#include "kernels/cpu/adamw.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

// Out = void: no 16-bit copy. The step is copied into a local of the loop's own function so the
// loop reads its fields from registers, not through a reference (or the lambda's capture) that
// might alias the arrays: through the capture, GCC 12 leaves the guarded loop scalar. Returns
// the index of the first element whose update was non-finite (adam_element_guarded kept it
// unchanged), or -1.
template <class Out>
std::int64_t run(std::span<float> p_, std::span<float> m_, std::span<float> v_,
                 std::span<const float> g_, const AdamStep& step, Out* out, SimdPath path) {
  const std::size_t n = p_.size();
  std::int64_t first_bad = -1;
  detail::dispatch(path, [&]() ZERO_LOOP {
    const AdamStep s = step;
    float* __restrict p = p_.data();
    float* __restrict m = m_.data();
    float* __restrict v = v_.data();
    const float* __restrict g = g_.data();
    for (std::size_t b = 0; b < n; b += kChunk) {
      const std::size_t e = std::min(n, b + kChunk);
      // The first bad element of the chunk as a 32-bit min-reduction over chunk offsets (AVX2
      // has no 64-bit unsigned min). Written so that GCC vectorises it: locals and
      // unconditional stores (a store skipped for a bad element would be control flow), and
      // the offset masked arithmetically (offset | (bad - 1): itself if bad, else UINT32_MAX)
      // rather than with a conditional, which GCC 12 does not vectorise here.
      std::uint32_t first = UINT32_MAX;
      for (std::size_t i = b; i < e; ++i) {
        float pi = p[i], mi = m[i], vi = v[i];
        const unsigned bad = adam_element_guarded(pi, mi, vi, g[i], s);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        const std::uint32_t at = static_cast<std::uint32_t>(i - b) | (bad - 1u);
        first = first < at ? first : at;
      }
      if (first != UINT32_MAX && first_bad < 0) first_bad = static_cast<std::int64_t>(b + first);
      if constexpr (!std::is_void_v<Out>)
        convert(std::span<const float>(p + b, e - b), std::span<Out>(out + b, e - b), path);
    }
  });
  return first_bad;
}

}  // namespace

std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step, SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), 0, false);
  return run<void>(p, m, v, g, step, nullptr, path);
}

std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step, std::span<bf16> out,
                        SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  return run<bf16>(p, m, v, g, step, out.data(), path);
}

std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step, std::span<fp16> out,
                        SimdPath path) {
  check_sizes(p.size(), m.size(), v.size(), g.size(), out.size(), true);
  return run<fp16>(p, m, v, g, step, out.data(), path);
}

}  // namespace zero::kernels::cpu
