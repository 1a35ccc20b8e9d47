// CPU loops of the Lion and LAMB updates (kernels/cpu/optimizers.hpp). Plain loops in chunks:
// the first non-finite element is found per chunk, and the 16-bit copy of a chunk is made right
// after it, from L1, through precision/'s bulk convert (as kernels/cpu/adamw.cpp does).
#include "kernels/cpu/optimizers.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include "base/error.hpp"
#include "precision/convert.hpp"

namespace zero::kernels::cpu {
namespace {

constexpr std::size_t kChunk = 512;

void check_sizes(const char* what, std::size_t p, std::size_t m, std::size_t v, std::size_t g,
                 std::size_t out) {
  if (m != p || v != p || g != p || out != p)
    throw Error(cat(what, ": shard spans differ in length (p ", p, ", m ", m, ", v ", v, ", g ", g,
                    ", out ", out, ")"));
}

// Runs body(b, e) over chunks, each returning its first bad index or -1, converts each chunk's
// new p to Out (void: none), and returns the first bad index overall.
template <class Out, class Body>
std::int64_t chunked(float* p, Out* out, std::size_t n, Body&& body) {
  std::int64_t first_bad = -1;
  for (std::size_t b = 0; b < n; b += kChunk) {
    const std::size_t e = std::min(n, b + kChunk);
    const std::int64_t bad = body(b, e);
    if constexpr (!std::is_void_v<Out>)
      convert(std::span<const float>(p + b, e - b), std::span<Out>(out + b, e - b));
    if (bad >= 0 && first_bad < 0) first_bad = bad;
  }
  return first_bad;
}

template <class Out>
std::int64_t lion(std::span<float> p, std::span<float> m, std::span<const float> g,
                  const LionStep& step, Out* out) {
  const LionStep s = step;
  float* __restrict pp = p.data();
  float* __restrict mm = m.data();
  const float* __restrict gg = g.data();
  return chunked<Out>(pp, out, p.size(), [&](std::size_t b, std::size_t e) {
    std::int64_t bad = -1;
    for (std::size_t i = b; i < e; ++i) {
      float pi = pp[i], mi = mm[i];
      const bool x = lion_element_guarded(pi, mi, gg[i], s);
      pp[i] = pi;
      mm[i] = mi;
      if (x && bad < 0) bad = static_cast<std::int64_t>(i);
    }
    return bad;
  });
}

template <class Out>
std::int64_t lamb(std::span<float> p, std::span<float> m, std::span<float> v,
                  std::span<const float> g, float rate, const LambStep& step, Out* out) {
  const LambStep s = step;
  float* __restrict pp = p.data();
  float* __restrict mm = m.data();
  float* __restrict vv = v.data();
  const float* __restrict gg = g.data();
  return chunked<Out>(pp, out, p.size(), [&](std::size_t b, std::size_t e) {
    std::int64_t bad = -1;
    for (std::size_t i = b; i < e; ++i) {
      float pi = pp[i], mi = mm[i], vi = vv[i];
      const bool x = lamb_element_guarded(pi, mi, vi, gg[i], rate, s);
      pp[i] = pi;
      mm[i] = mi;
      vv[i] = vi;
      if (x && bad < 0) bad = static_cast<std::int64_t>(i);
    }
    return bad;
  });
}

}  // namespace

std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step) {
  check_sizes("lion_step", p.size(), m.size(), p.size(), g.size(), p.size());
  return lion<void>(p, m, g, step, nullptr);
}
std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step, std::span<bf16> out) {
  check_sizes("lion_step", p.size(), m.size(), p.size(), g.size(), out.size());
  return lion<bf16>(p, m, g, step, out.data());
}
std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step, std::span<fp16> out) {
  check_sizes("lion_step", p.size(), m.size(), p.size(), g.size(), out.size());
  return lion<fp16>(p, m, g, step, out.data());
}

void lamb_direction(std::span<const float> p, std::span<const float> m, std::span<const float> v,
                    std::span<const float> g, const LambStep& step, std::span<float> u) {
  check_sizes("lamb_direction", p.size(), m.size(), v.size(), g.size(), u.size());
  const LambStep s = step;
  for (std::size_t i = 0; i < p.size(); ++i) {
    float mi = m[i], vi = v[i];
    u[i] = kernels::lamb_direction(p[i], mi, vi, g[i], s);
  }
}

std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step) {
  check_sizes("lamb_apply", p.size(), m.size(), v.size(), g.size(), p.size());
  return lamb<void>(p, m, v, g, rate, step, nullptr);
}
std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step,
                        std::span<bf16> out) {
  check_sizes("lamb_apply", p.size(), m.size(), v.size(), g.size(), out.size());
  return lamb<bf16>(p, m, v, g, rate, step, out.data());
}
std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step,
                        std::span<fp16> out) {
  check_sizes("lamb_apply", p.size(), m.size(), v.size(), g.size(), out.size());
  return lamb<fp16>(p, m, v, g, rate, step, out.data());
}

}  // namespace zero::kernels::cpu
