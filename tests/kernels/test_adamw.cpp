// Tests of the fused Adam/AdamW shard update (kernels/adamw_math.hpp, kernels/cpu/adamw.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fixtures/torch_adamw.hpp"
#include "kernels/cpu/adamw.hpp"
#include "precision/simd.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::bits;
using zero::kernels::test::from_bits;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;
using zero::kernels::test::uniform_values;

namespace {

// The textbook algorithm in double, written independently of adamw_math.hpp (bias correction
// applied to m and v, as in the papers, rather than folded into step_size and bc2_sqrt).
// Without bias correction it is DeepSpeed FusedAdam's bias_correction=False:
// p -= lr · m / (sqrt(v) + eps), lr unscaled.
struct Reference {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, const AdamHyper& h, double grad_scale, int t) {
    const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, t) : 1.0;
    const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, t) : 1.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = g[i] * grad_scale;
      if (h.mode == AdamMode::adam_l2)
        gi += h.weight_decay * p[i];
      else
        p[i] -= lr * h.weight_decay * p[i];
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * gi;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * gi * gi;
      p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + h.eps);
    }
  }
};

struct Shard {
  std::vector<float> p, m, v;
};

// The literal per-element loop: adam_element_guarded one element at a time, never vectorised.
// Returns the first element whose update was non-finite, or -1.
std::int64_t scalar_loop(Shard& s, const std::vector<float>& g, const AdamStep& st) {
  std::int64_t first = -1;
  for (std::size_t i = 0; i < s.p.size(); ++i) {
    if (adam_element_guarded(s.p[i], s.m[i], s.v[i], g[i], st) && first < 0)
      first = static_cast<std::int64_t>(i);
    test::scalar_barrier();
  }
  return first;
}

// Runs `steps` steps of float and double side by side and checks the float state against the
// reference after each. Tolerance: fp32 rounds each operation with relative error u = 2^-24
// (6e-8). Per step, p takes two roundings of its own (decay, subtraction: 2u|p|) plus the
// update's, whose ~10 roundings cost ~10u of lr·|m̂/(√v̂+eps)| (at most a few lr here). Errors
// add over steps: after K = 5 steps, |Δp| <= ~10u|p| + ~150u·lr. We allow 1e-6|p| + 1e-4·lr
// (about 17u|p| + 1700u·lr) for slack, while a wrong formula moves p by O(lr·wd·|p|) = 1e-3|p|
// (decay) or O(lr) (bias correction, eps placement with eps comparable to |g|): 10x to 1000x
// the tolerance. m and v get 1e-6 of their scale (max |g|, max g²) for the same reason.
void check_against_reference(const AdamHyper& h, double lr, float grad_scale, float g_scale,
                             int steps) {
  const std::size_t n = 1000;
  Shard s{uniform_values(n, 1), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  Reference r;
  r.p.assign(s.p.begin(), s.p.end());
  r.m.assign(n, 0.0);
  r.v.assign(n, 0.0);
  std::vector<bf16> out(n);
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> g = uniform_values(n, 100 + t, g_scale);
    cpu::adamw_step(s.p, s.m, s.v, g, make_adam_step(h, lr, t, grad_scale), out);
    r.step(g, lr, h, grad_scale, t);
    double gmax = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double ge = g[i] * static_cast<double>(grad_scale);
      if (h.mode == AdamMode::adam_l2) ge += h.weight_decay * r.p[i];
      gmax = std::max(gmax, std::abs(ge));
    }
    for (std::size_t i = 0; i < n; ++i) {
      INFO("step " << t << " element " << i);
      REQUIRE(std::abs(s.p[i] - r.p[i]) <= 1e-6 * std::abs(r.p[i]) + 1e-4 * lr);
      REQUIRE(std::abs(s.m[i] - r.m[i]) <= 1e-6 * gmax);
      REQUIRE(std::abs(s.v[i] - r.v[i]) <= 1e-6 * gmax * gmax);
    }
  }
}

// The inputs of bench/peers/make_adamw_fixture.py, rebuilt in the same integer steps: splitmix64,
// then a 24-bit signed integer times 2^(e - 23), exact in float; about 1 in 85 is an exact zero.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<float> fixture_values(std::uint64_t seed, int n, int e_lo, int e_hi) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::uint64_t h = splitmix64((seed << 32) ^ static_cast<std::uint64_t>(i));
    if ((h & 0xFF) < 3) {
      out[i] = 0.0f;
      continue;
    }
    const auto k = static_cast<std::int32_t>(h >> 40) - (1 << 23);
    const int e =
        e_lo + static_cast<int>(((h >> 8) & 0xFF) % static_cast<unsigned>(e_hi - e_lo + 1));
    out[i] = std::ldexp(static_cast<float>(k), e - 23);
  }
  return out;
}

std::vector<float> fixture_floats(const char* hex, int n) {
  const std::string s(hex);
  REQUIRE(s.size() == static_cast<std::size_t>(n) * 8);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    out[i] = from_bits(static_cast<std::uint32_t>(std::stoul(s.substr(i * 8, 8), nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE(
    "AdamW and Adam equal torch.optim.AdamW/Adam(fused=True) on the CPU bitwise, on every SIMD "
    "path") {
  // tests/kernels/fixtures/torch_adamw.hpp: p, exp_avg and exp_avg_sq that torch 2.15 left after
  // six steps from the inputs fixture_values rebuilds (bench/peers/make_adamw_fixture.py made it).
  // Cases: AdamW with decay; AdamW with beta1 = 0.3, whose lerp weight 0.7 takes ATen's other
  // lerp formula, and eps = 1e-3; Adam with L2 decay. The bf16 copy of the last step must be
  // to_bf16 of the final p.
  namespace fx = zero::kernels::test::torch_fixture;
  int index = 0;
  for (const fx::Case& c : fx::cases) {
    const std::vector<float> want_p = fixture_floats(c.p, c.n), want_m = fixture_floats(c.m, c.n),
                             want_v = fixture_floats(c.v, c.n);
    AdamHyper h;
    h.beta1 = c.beta1;
    h.beta2 = c.beta2;
    h.eps = c.eps;
    h.weight_decay = c.weight_decay;
    h.mode = c.mode;
    for (SimdPath path : available_paths()) {
      for (bool copy : {false, true}) {
        INFO("case " << c.name << ", path " << name_of(path) << (copy ? ", bf16 copy" : ""));
        std::vector<float> p = fixture_values(1000 + index, c.n, -2, 1), m(c.n, 0.0f), v(c.n, 0.0f);
        std::vector<bf16> out(c.n);
        for (int t = 1; t <= c.steps; ++t) {
          const std::vector<float> g = fixture_values(2000 + 100 * index + t, c.n, -14, 0);
          const AdamStep st = make_adam_step(h, c.lr, t);
          const std::int64_t bad = copy ? cpu::adamw_step(p, m, v, g, st, out, path)
                                        : cpu::adamw_step(p, m, v, g, st, path);
          REQUIRE(bad == -1);
        }
        int differ = 0, first = -1;
        for (int i = 0; i < c.n; ++i)
          if (bits(p[i]) != bits(want_p[i]) || bits(m[i]) != bits(want_m[i]) ||
              bits(v[i]) != bits(want_v[i])) {
            ++differ;
            if (first < 0) first = i;
          }
        INFO(differ << " of " << c.n << " elements differ from torch, the first at " << first);
        if (first >= 0)
          INFO("there p " << p[first] << " vs " << want_p[first] << ", m " << m[first] << " vs "
                          << want_m[first] << ", v " << v[first] << " vs " << want_v[first]);
        CHECK(differ == 0);
        if (copy)
          for (int i = 0; i < c.n; ++i) REQUIRE(out[i].bits == to_bf16(want_p[i]).bits);
      }
    }
    ++index;
  }
}

TEST_CASE(
    "make_adam_step folds the bias corrections 1 - beta^t of steps 1, 2 and 10 into its scalars") {
  AdamHyper h;
  h.beta1 = 0.9;
  h.beta2 = 0.99;
  for (int t : {1, 2, 10}) {
    const AdamStep s = make_adam_step(h, 1e-3, t);
    INFO("step " << t);
    CHECK(s.step_size == static_cast<float>(1e-3 / (1.0 - std::pow(0.9, t))));
    CHECK(s.bc2_sqrt == static_cast<float>(std::sqrt(1.0 - std::pow(0.99, t))));
  }
  CHECK(make_adam_step(h, 1e-3, 1).step_size == Approx(1e-2));  // 1 - 0.9 = 0.1
  CHECK(make_adam_step(h, 1e-3, 1).bc2_sqrt == Approx(0.1));    // sqrt(1 - 0.99)
}

TEST_CASE("make_adam_step rejects step 0, betas outside [0, 1), eps <= 0 and non-finite scalars") {
  AdamHyper h;
  CHECK_THROWS_AS(make_adam_step(h, 1e-3, 0), Error);
  AdamHyper b = h;
  b.beta2 = 1.0;
  CHECK_THROWS_AS(make_adam_step(b, 1e-3, 1), Error);
  AdamHyper e = h;
  e.eps = 0;
  CHECK_THROWS_AS(make_adam_step(e, 1e-3, 1), Error);
  CHECK_THROWS_AS(make_adam_step(h, INFINITY, 1), Error);
  CHECK_THROWS_AS(make_adam_step(h, 1e-3, 1, NAN), Error);
}

TEST_CASE("AdamW matches an independent double-precision reference over five steps") {
  AdamHyper h;
  h.weight_decay = 0.1;
  h.mode = AdamMode::adamw;
  check_against_reference(h, 1e-2, 1.0f, 1.0f, 5);
}

TEST_CASE("Adam with L2 weight decay matches an independent double-precision reference") {
  AdamHyper h;
  h.weight_decay = 0.1;
  h.mode = AdamMode::adam_l2;
  check_against_reference(h, 1e-2, 1.0f, 1.0f, 5);
}

TEST_CASE(
    "eps is added to the bias-corrected sqrt(v), as the reference does, when eps is comparable to "
    "g") {
  AdamHyper h;
  h.eps = 1e-3;
  h.weight_decay = 0.01;
  check_against_reference(h, 1e-2, 1.0f, 1e-3f, 5);
}

TEST_CASE("Without bias correction Adam matches DeepSpeed's bias_correction=False reference") {
  // Steps 1-5 are where the correction matters most (1 - 0.9^1 = 0.1: a 10x larger step with
  // it at step 1), so a correction left on moves p by O(lr), 100x the tolerance.
  for (AdamMode mode : {AdamMode::adamw, AdamMode::adam_l2}) {
    INFO("mode " << static_cast<int>(mode));
    AdamHyper h;
    h.weight_decay = 0.1;
    h.mode = mode;
    h.bias_correction = false;
    check_against_reference(h, 1e-2, 1.0f, 1.0f, 5);
    const AdamStep s = make_adam_step(h, 1e-2, 3);
    CHECK(s.step_size == 1e-2f);  // lr unscaled
    CHECK(s.bc2_sqrt == 1.0f);
  }
}

TEST_CASE("An update that would be non-finite keeps the element's old values and is reported") {
  // lr = 1e38: step 1's step size lr / (1 - 0.9) overflows to inf, so every update is non-finite
  // (inf·(m/d), or inf·0 = NaN where g = 0). A finite lr with one huge gradient: only that
  // element's v (g² ~ 1e60) overflows.
  const std::size_t n = 5000;  // more than two 2048-element chunks
  const std::vector<float> p0 = uniform_values(n, 11), g = uniform_values(n, 12);
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    std::vector<bf16> out(n);
    CHECK(cpu::adamw_step(p, m, v, g, make_adam_step(AdamHyper{}, 1e38, 1), out, path) == 0);
    CHECK(p == p0);
    for (std::size_t i = 0; i < n; ++i) REQUIRE((m[i] == 0.0f && v[i] == 0.0f));
    CHECK(out[7].bits == to_bf16(p0[7]).bits);  // the 16-bit copy is of the kept value

    std::vector<float> g2 = g;
    g2[4321] = 1e30f;
    g2[4400] = 1e30f;
    std::vector<float> q = p0, mq(n, 0.0f), vq(n, 0.0f);
    CHECK(cpu::adamw_step(q, mq, vq, g2, make_adam_step(AdamHyper{}, 1e-3, 1), path) == 4321);
    CHECK(q[4321] == p0[4321]);
    CHECK(vq[4321] == 0.0f);
    CHECK(q[4400] == p0[4400]);
    CHECK(q[0] != p0[0]);  // the others took the step
    CHECK(cpu::adamw_step(q, mq, vq, g, make_adam_step(AdamHyper{}, 1e-3, 2), path) == -1);
  }
}

TEST_CASE(
    "the bf16 copy made in the update loop is to_bf16 of the kept p, infinities and NaN payloads "
    "included, on every SIMD path") {
  // An infinite or NaN p makes its own update non-finite, so the guard keeps it, and the copy,
  // made in the same vectorised loop, must round that kept value as to_bf16 does (a NaN keeps
  // its sign and top payload bits, quieted). 37 elements: a vector body and a remainder.
  using test::from_bits;
  const std::size_t n = 37;
  std::vector<float> p0 = uniform_values(n, 31);
  p0[3] = from_bits(0x7fa12345u);   // signalling NaN with a payload
  p0[17] = from_bits(0xffc00001u);  // negative quiet NaN
  p0[20] = INFINITY;
  p0[36] = -INFINITY;
  const std::vector<float> g = uniform_values(n, 32);
  AdamHyper h;
  h.weight_decay = 0.1;
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    std::vector<bf16> out(n);
    CHECK(cpu::adamw_step(p, m, v, g, make_adam_step(h, 1e-3, 1), out, path) == 3);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(out[i].bits == to_bf16(p[i]).bits);
    }
    CHECK(bits(p[3]) == 0x7fa12345u);
    CHECK(out[3].bits == 0x7fe1);
    CHECK(out[17].bits == 0xffc0);
    CHECK(out[20].bits == 0x7f80);
    CHECK(out[36].bits == 0xff80);
  }
}

TEST_CASE("a non-power-of-two grad_scale matches the reference that scales g first") {
  AdamHyper h;
  h.weight_decay = 0.1;
  check_against_reference(h, 1e-2, 0.37f, 3.0f, 5);
}

TEST_CASE("adamw_step equals the literal scalar per-element loop bitwise on every SIMD path") {
  // Odd length: every vector path has a remainder; values include subnormals, huge gradients
  // (g² overflows to inf), signed zeros and bf16 rounding ties.
  const std::size_t n = 4099;
  const std::vector<float> g = mixed_values(n, 7);
  const Shard start{mixed_values(n, 8), mixed_values(n, 9), mixed_values(n, 10, true)};
  for (AdamMode mode : {AdamMode::adamw, AdamMode::adam_l2}) {
    AdamHyper h;
    h.weight_decay = 0.05;
    h.mode = mode;
    const AdamStep st = make_adam_step(h, 3e-3, 3, 0.5f);
    Shard want = start;
    const std::int64_t first_bad = scalar_loop(want, g, st);
    for (SimdPath path : available_paths()) {
      INFO("path " << name_of(path) << ", mode " << static_cast<int>(mode));
      Shard a = start, b = start, c = start;
      std::vector<bf16> ob(n);
      std::vector<fp16> oh(n);
      CHECK(cpu::adamw_step(a.p, a.m, a.v, g, st, path) == first_bad);
      CHECK(cpu::adamw_step(b.p, b.m, b.v, g, st, ob, path) == first_bad);
      CHECK(cpu::adamw_step(c.p, c.m, c.v, g, st, oh, path) == first_bad);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("element " << i);
        for (const Shard* s : {&a, &b, &c}) {
          REQUIRE(same(s->p[i], want.p[i]));
          REQUIRE(same(s->m[i], want.m[i]));
          REQUIRE(same(s->v[i], want.v[i]));
        }
        REQUIRE(ob[i].bits == to_bf16(want.p[i]).bits);
        REQUIRE(oh[i].bits == to_fp16(want.p[i]).bits);
      }
    }
  }
}

TEST_CASE(
    "bias correction makes steps 1, 2 and 10 each move p by lr·|g|/(|g|+eps) under a constant "
    "gradient") {
  // With a constant g, m_t = (1 - b1^t)·g and v_t = (1 - b2^t)·g², so the corrected moments are
  // exactly g and g² at every step; without correction step 1 would move by 0.1/sqrt(0.001) ≈ 3x.
  AdamHyper h;  // defaults: 0.9, 0.999, 1e-8, no decay
  const double lr = 1e-3;
  const float g0 = 0.25f;
  const std::size_t n = 33;
  std::vector<float> p(n, 0.0f), m(n, 0.0f), v(n, 0.0f), g(n, g0);
  const double per_step = lr * g0 / (g0 + h.eps);
  for (int t = 1; t <= 10; ++t) {
    const float before = p[0];
    cpu::adamw_step(p, m, v, g, make_adam_step(h, lr, t));
    if (t == 1 || t == 2 || t == 10) {
      INFO("step " << t);
      CHECK(before - p[0] == Approx(per_step).epsilon(1e-4));
    }
  }
  CHECK(p[n - 1] == p[0]);
}

TEST_CASE(
    "AdamW decays weights independently of the gradient while Adam adds wd·p to the gradient") {
  const std::size_t n = 17;
  const std::vector<float> p0 = uniform_values(n, 3);
  const std::vector<float> zero_g(n, 0.0f);
  AdamHyper h;
  h.weight_decay = 0.1;
  const double lr = 1e-2;

  h.mode = AdamMode::adamw;  // g = 0: only the decay moves p, by exactly one float multiply
  std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
  cpu::adamw_step(p, m, v, zero_g, make_adam_step(h, lr, 1));
  const float decay = static_cast<float>(1.0 - lr * 0.1);
  for (std::size_t i = 0; i < n; ++i) CHECK(p[i] == p0[i] * decay);
  for (float x : m) CHECK(x == 0.0f);

  h.mode = AdamMode::adam_l2;  // g = 0: the L2 term is the gradient; step 1 moves p by ~lr·sign(p)
  std::vector<float> q = p0, mq(n, 0.0f), vq(n, 0.0f);
  cpu::adamw_step(q, mq, vq, zero_g, make_adam_step(h, lr, 1));
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(mq[i] == static_cast<float>(0.1) * (static_cast<float>(0.1) * p0[i]));
    const double g = 0.1 * p0[i];  // corrected moments at step 1: g and g²
    CHECK(q[i] == Approx(p0[i] - lr * g / (std::abs(g) + h.eps)).margin(1e-6));
  }
}

TEST_CASE("grad_scale multiplies the gradient before the moments") {
  const std::size_t n = 1001;
  const std::vector<float> g = uniform_values(n, 5, 1e3f);
  std::vector<float> g_pre(n);
  for (std::size_t i = 0; i < n; ++i) g_pre[i] = g[i] * 0.0009765625f;  // 2^-10: exact
  const std::vector<float> p0 = uniform_values(n, 6);
  AdamHyper h;
  h.weight_decay = 0.01;
  std::vector<float> a = p0, am(n, 0.0f), av(n, 0.0f), b = p0, bm(n, 0.0f), bv(n, 0.0f);
  cpu::adamw_step(a, am, av, g, make_adam_step(h, 1e-3, 1, 0.0009765625f));
  cpu::adamw_step(b, bm, bv, g_pre, make_adam_step(h, 1e-3, 1, 1.0f));
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(same(a[i], b[i]));
    REQUIRE(same(am[i], bm[i]));
    REQUIRE(same(av[i], bv[i]));
    REQUIRE(am[i] == static_cast<float>(0.1) * g_pre[i]);  // m_1 = (1 - b1)·scaled g
  }
}

TEST_CASE("the bf16 and fp16 copies are the round-to-nearest-even of the new fp32 parameters") {
  // lr = 0 and no decay leave p as it is, so crafted values reach the copy unchanged.
  using test::from_bits;
  // clang-format off
  const std::vector<float> p0 = {
      // value                    bf16                              fp16
      1.0f + 0x1p-8f,             // tie 1 | 1+2^-7: even, 1 (3f80)  exact (3c04)
      1.0f + 3 * 0x1p-8f,         // tie: even, 1+2^-6 (3f82)        exact (3c0c)
      1.0f + 0x1p-8f + 0x1p-20f,  // above the tie: up (3f81)        down to 1+2^-8 (3c04)
      from_bits(0x7f7fffffu),     // fp32 max: up to inf (7f80)      inf (7c00)
      -0.0f,                      // sign kept (8000)                sign kept (8000)
      65520.0f,                   // up, 65536 (4780)                max + ulp/2, tie: inf (7c00)
      65519.0f,                   // up, 65536 (4780)                below the tie: 65504 (7bff)
      0x1p-25f,                   // exact (3300)                    half of 2^-24, tie: 0 (0000)
      3 * 0x1p-26f,               // exact (3340)                    above the tie: 2^-24 (0001)
      1.0f + 3 * 0x1p-11f,        // below the tie: 1 (3f80)         tie: even, 1+2^-9 (3c02)
  };
  // clang-format on
  const std::vector<std::uint16_t> want_bf16 = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x8000,
                                                0x4780, 0x4780, 0x3300, 0x3340, 0x3f80};
  const std::vector<std::uint16_t> want_fp16 = {0x3c04, 0x3c0c, 0x3c04, 0x7c00, 0x8000,
                                                0x7c00, 0x7bff, 0x0000, 0x0001, 0x3c02};
  const std::size_t n = p0.size();
  AdamHyper h;
  const AdamStep st = make_adam_step(h, 0.0, 1);
  const std::vector<float> g(n, 0.5f);  // positive, so p - 0·(m/d) subtracts +0 and keeps -0
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f), q = p0, mq(n, 0.0f), vq(n, 0.0f);
    std::vector<bf16> ob(n);
    std::vector<fp16> oh(n);
    cpu::adamw_step(p, m, v, g, st, ob, path);
    cpu::adamw_step(q, mq, vq, g, st, oh, path);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(same(p[i], p0[i]));
      CHECK(ob[i].bits == want_bf16[i]);
      CHECK(oh[i].bits == want_fp16[i]);
    }
  }
}

TEST_CASE("adamw_step rejects shard spans of different lengths") {
  std::vector<float> p(8), m(8), v(7), g(8);
  std::vector<bf16> out(9);
  const AdamStep st = make_adam_step(AdamHyper{}, 1e-3, 1);
  CHECK_THROWS_AS(cpu::adamw_step(p, m, v, g, st), Error);
  v.resize(8);
  CHECK_THROWS_AS(cpu::adamw_step(p, m, v, g, st, out), Error);
  out.resize(8);
  CHECK_NOTHROW(cpu::adamw_step(p, m, v, g, st, out));
}
