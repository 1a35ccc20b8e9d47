// CPU loops of the fused Adam/AdamW update (kernels/cpu/adamw.hpp).
#include "kernels/cpu/adamw.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "precision/convert.hpp"
#include "base/error.hpp"

namespace zero::kernels::cpu {
namespace {

void check_sizes(std::size_t p, std::size_t m, std::size_t v, std::size_t g, std::size_t out,
                 bool has_out) {
  if (m != p || v != p || g != p || (has_out && out != p))
    throw Error(cat("adamw_step: shard spans differ in length (p ", p, ", m ", m, ", v ", v, ", g ",
                    g, has_out ? cat(", out ", out) : std::string(), ")"));
}

// Elements per chunk: the first bad element is found per chunk (a 32-bit reduction), and the
// 16-bit copy of a chunk is made right after it, while the chunk's new p is still in L1 (4 arrays
// x 2 KiB). Short chunks also keep the memory streams busy while the copy computes: at 64M
// elements, 1 thread, AdamW with its bf16 copy took 46.5-47.3 ms with 2048-element chunks,
// 41.0-43.2 with 1024, 39.1-42.3 with 512 (4 interleaved runs; 256 no better).
constexpr std::size_t kChunk = 512;

// One chunk of n elements of the update. Returns the chunk's first bad offset, or UINT32_MAX: a
// 32-bit min-reduction over chunk offsets (AVX2 has no 64-bit unsigned min), written so that GCC
// vectorises it: locals and unconditional stores (a store skipped for a bad element would be
// control flow), and the offset masked arithmetically (offset | (bad - 1): itself if bad, else
// UINT32_MAX) rather than with a conditional, which GCC 12 does not vectorise here.
template <AdamMode Mode>
ZERO_LOOP inline std::uint32_t chunk(float* __restrict p, float* __restrict m, float* __restrict v,
                                     const float* __restrict g, const AdamStep& s,
                                     std::uint32_t n) {
  std::uint32_t first = UINT32_MAX;
  for (std::uint32_t i = 0; i < n; ++i) {  // a 32-bit index: GCC keeps it in 32-bit lanes
    float pi = p[i], mi = m[i], vi = v[i];
    const unsigned bad = adam_element_guarded_in<Mode>(pi, mi, vi, g[i], s);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    const std::uint32_t at = i | (bad - 1u);
    first = first < at ? first : at;
  }
  return first;
}

// The mode is fixed here, outside the loop (adam_element_guarded_in<Mode>: tested per element,
// it keeps GCC 12 from vectorising the loop). The step is copied into a local of the loop's
// own function so the loop reads its fields from registers, not through a reference (or the
// lambda's capture) that might alias the arrays: through the capture, GCC 12 leaves the guarded
// loop scalar. The 16-bit copy is made chunk by chunk, from L1, through precision/'s bulk convert
// (whose vector paths return exactly to_bf16 / to_fp16, the functions the GPU kernel calls):
// to_fp16 is too branchy for GCC to vectorise inside the update loop, and to_bf16 inside it, a
// fifth stream in the loop, ran at 0.84-0.94 of the same-traffic copy kernel where the pass from
// L1 runs at 0.90-1.01 (bench/adam_bench, interleaved builds, docs/benchmarks.md). Returns the
// index of the first element whose update was non-finite (adam_element_guarded kept it unchanged),
// or -1.
template <AdamMode Mode, class Out>
ZERO_LOOP inline std::int64_t loop(float* __restrict p, float* __restrict m, float* __restrict v,
                                   const float* __restrict g, const AdamStep& step, Out* out,
                                   std::size_t n, SimdPath path) {
  const AdamStep s = step;
  std::int64_t first_bad = -1;
  for (std::size_t b = 0; b < n; b += kChunk) {
    const std::size_t e = std::min(n, b + kChunk);
    const std::uint32_t first =
        chunk<Mode>(p + b, m + b, v + b, g + b, s, static_cast<std::uint32_t>(e - b));
    if constexpr (!std::is_void_v<Out>)
      convert(std::span<const float>(p + b, e - b), std::span<Out>(out + b, e - b), path);
    if (first != UINT32_MAX && first_bad < 0) first_bad = static_cast<std::int64_t>(b + first);
  }
  return first_bad;
}

// Out = void: no 16-bit copy. n elements from offset 0 of each pointer.
template <class Out>
std::int64_t run_block(float* p, float* m, float* v, const float* g, const AdamStep& step, Out* out,
                       std::size_t n, SimdPath path) {
  std::int64_t first_bad = -1;
  detail::dispatch(path, [&]() ZERO_LOOP {
    if (step.mode == AdamMode::adam_l2)
      first_bad = loop<AdamMode::adam_l2>(p, m, v, g, step, out, n, path);
    else
      first_bad = loop<AdamMode::adamw>(p, m, v, g, step, out, n, path);
  });
  return first_bad;
}

// Elements per task of the rank's threads (kernels/cpu/thread_pool.hpp): a multiple of kChunk,
// so the chunks are those of one thread; every element's update is its own, and the first bad
// index is the first block's that has one. 8192 elements (about 10 us of work): a unit of a small
// model still splits into enough tasks to keep every thread busy.
constexpr std::size_t kBlock = 16 * kChunk;

template <class Out>
std::int64_t run(std::span<float> p, std::span<float> m, std::span<float> v,
                 std::span<const float> g, const AdamStep& step, Out* out, SimdPath path) {
  const std::size_t n = p.size();
  std::vector<std::int64_t> first((n + kBlock - 1) / kBlock, -1);
  for_blocks(n, kBlock, [&](std::size_t b, std::size_t e) {
    Out* o = nullptr;
    if constexpr (!std::is_void_v<Out>) o = out + b;
    const std::int64_t bad = run_block<Out>(p.data() + b, m.data() + b, v.data() + b,
                                            g.data() + b, step, o, e - b, path);
    first[b / kBlock] = bad < 0 ? -1 : static_cast<std::int64_t>(b) + bad;
  });
  for (const std::int64_t f : first)
    if (f >= 0) return f;
  return -1;
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
