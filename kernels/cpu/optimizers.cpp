// CPU loops of the Lion and LAMB updates (kernels/cpu/optimizers.hpp). Plain loops in chunks:
// the first non-finite element is found per chunk, and the 16-bit copy of a chunk is made right
// after it, from L1, through precision/'s bulk convert (as kernels/cpu/adamw.cpp does).
#include "kernels/cpu/optimizers.hpp"

#include <algorithm>
#include <cmath>
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

// Muon (kernels/muon_math.hpp). The products below keep each output element's sum in index
// order: the inner loop runs over the output's columns (vectorised across them), the middle one
// over the summed index, so every element adds its terms one at a time, in order.
namespace zero::kernels::cpu {
namespace {

// c (r x q) = a (r x s) b (s x q), row-major.
void matmul(const float* __restrict a, const float* __restrict b, float* __restrict c,
            std::int64_t r, std::int64_t s, std::int64_t q) {
  for (std::int64_t i = 0; i < r; ++i) {
    float* __restrict ci = c + i * q;
    for (std::int64_t j = 0; j < q; ++j) ci[j] = 0.0f;
    for (std::int64_t l = 0; l < s; ++l) {
      const float ail = a[i * s + l];
      const float* __restrict bl = b + l * q;
      for (std::int64_t j = 0; j < q; ++j) ci[j] = ci[j] + ail * bl[j];
    }
  }
}

void transpose(const float* __restrict x, float* __restrict t, std::int64_t r, std::int64_t q) {
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < q; ++j) t[j * r + i] = x[i * q + j];
}

template <class Out>
std::int64_t muon(std::span<float> p, std::span<float> m, std::span<const float> g,
                  std::int64_t rows, std::int64_t cols, const MuonStep& s,
                  std::span<float> scratch, Out* out) {
  const std::int64_t n = rows * cols;
  if (static_cast<std::int64_t>(p.size()) != n || m.size() != p.size() || g.size() != p.size())
    throw Error(cat("muon_step: a ", rows, " x ", cols, " matrix needs ", n,
                    " elements in p, m and g, got ", p.size(), ", ", m.size(), ", ", g.size()));
  if (static_cast<std::int64_t>(scratch.size()) < muon_scratch_floats(rows, cols))
    throw Error(cat("muon_step: scratch of ", scratch.size(), " floats, needs ",
                    muon_scratch_floats(rows, cols)));
  float* m_new = scratch.data();
  float* u = m_new + n;   // the direction, then (transposed when rows > cols) X
  float* x = u + n;
  float* work = x + n;
  for (std::int64_t i = 0; i < n; ++i) m_new[i] = muon_momentum(m[i], g[i], s, u[i]);
  // Newton-Schulz on the wide orientation (k = min(rows, cols) rows): X X^T is k x k.
  const bool tall = rows > cols;
  if (tall)
    transpose(u, x, rows, cols);
  else
    std::copy(u, u + n, x);
  newton_schulz(x, std::min(rows, cols), std::max(rows, cols), work);
  if (tall)
    transpose(x, u, cols, rows);
  else
    std::copy(x, x + n, u);
  float* __restrict pp = p.data();
  float* __restrict mm = m.data();
  return chunked<Out>(pp, out, p.size(), [&](std::size_t b, std::size_t e) {
    std::int64_t bad = -1;
    for (std::size_t i = b; i < e; ++i) {
      float pi = pp[i], mi = mm[i];
      const bool x_bad = muon_apply_guarded(pi, mi, m_new[i], u[i], s);
      pp[i] = pi;
      mm[i] = mi;
      if (x_bad && bad < 0) bad = static_cast<std::int64_t>(i);
    }
    return bad;
  });
}

}  // namespace

void newton_schulz(float* x, std::int64_t k, std::int64_t n, float* work) {
  float* xt = work;        // n x k
  float* a = xt + n * k;   // k x k
  float* aa = a + k * k;
  float* b = aa + k * k;
  float* y = b + k * k;    // k x n
  double sq = 0.0;
  for (std::int64_t i = 0; i < k * n; ++i) sq += static_cast<double>(x[i]) * x[i];
  const auto denom = static_cast<float>(std::sqrt(sq) + kMuonEps);
  for (std::int64_t i = 0; i < k * n; ++i) x[i] = x[i] / denom;
  for (int step = 0; step < kMuonSteps; ++step) {
    transpose(x, xt, k, n);
    matmul(x, xt, a, k, n, k);
    matmul(a, a, aa, k, k, k);
    for (std::int64_t i = 0; i < k * k; ++i) b[i] = kMuonB * a[i] + kMuonC * aa[i];
    matmul(b, x, y, k, k, n);
    for (std::int64_t i = 0; i < k * n; ++i) x[i] = kMuonA * x[i] + y[i];
  }
}

std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch) {
  return muon<void>(p, m, g, rows, cols, step, scratch, nullptr);
}
std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch, std::span<bf16> out) {
  if (out.size() != p.size()) throw Error("muon_step: out and p differ in length");
  return muon<bf16>(p, m, g, rows, cols, step, scratch, out.data());
}
std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch, std::span<fp16> out) {
  if (out.size() != p.size()) throw Error("muon_step: out and p differ in length");
  return muon<fp16>(p, m, g, rows, cols, step, scratch, out.data());
}

}  // namespace zero::kernels::cpu
