// The CPU loops of Lion and LAMB (kernels/cpu/optimizers.hpp): each element is exactly the
// per-element math of kernels/lion_math.hpp / kernels/lamb_math.hpp, the 16-bit copy is the RNE
// of the new weight, and a non-finite update leaves the element as it was and is reported.
// (The values themselves are checked against the single-rank reference in
// tests/zero/test_optimizers.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/optimizers.hpp"
#include "precision/bf16.hpp"

using namespace zero;
using namespace zero::kernels;

namespace {

std::vector<float> ramp(int n, float scale, float shift) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * std::sin(0.37f * i + shift);
  return v;
}

}  // namespace

TEST_CASE("Lion's loop is its per-element math, with the bf16 copy, and keeps a non-finite element") {
  const int n = 1500;  // several chunks and a remainder
  std::vector<float> p = ramp(n, 0.5f, 0.1f), m = ramp(n, 0.01f, 0.7f), g = ramp(n, 0.2f, 1.3f);
  g[3] = 0.0f, m[3] = 0.0f;  // c = 0: does not move
  g[700] = std::numeric_limits<float>::infinity();
  const LionStep s = make_lion_step({0.9, 0.99, 0.1}, 1e-3, 0.5f);
  std::vector<float> pe = p, me = m;
  for (int i = 0; i < n; ++i) lion_element_guarded(pe[i], me[i], g[i], s);
  std::vector<bf16> out(n);
  const std::vector<float> p0 = p, m0 = m;
  CHECK(cpu::lion_step(p, m, g, s, out) == 700);
  CHECK(p == pe);
  CHECK(m == me);
  CHECK(p[700] == p0[700]);
  CHECK(m[700] == m0[700]);
  CHECK(p[3] == static_cast<float>(p0[3] * s.decay));
  for (int i = 0; i < n; ++i) CHECK(out[i].bits == to_bf16(p[i]).bits);
}

TEST_CASE("LAMB's passes are its per-element math: the direction, then the update at one rate") {
  const int n = 1100;
  std::vector<float> p = ramp(n, 0.5f, 0.2f), m = ramp(n, 0.01f, 0.4f),
                     v = ramp(n, 0.001f, 0.9f), g = ramp(n, 0.2f, 2.1f);
  for (float& x : v) x = std::fabs(x);
  const LambStep s = make_lamb_step({0.9, 0.999, 1e-6, 0.01, true, 10.0, 0.01}, 1e-2, 3, 1.0f);
  std::vector<float> u(n);
  const std::vector<float> m0 = m, v0 = v;
  cpu::lamb_direction(p, m, v, g, s, u);
  CHECK(m == m0);  // the first pass writes nothing but u
  CHECK(v == v0);
  double w2 = 0, u2 = 0;
  for (int i = 0; i < n; ++i) {
    float mi = m[i], vi = v[i];
    CHECK(u[i] == lamb_direction(p[i], mi, vi, g[i], s));
    w2 += double(p[i]) * p[i];
    u2 += double(u[i]) * u[i];
  }
  const float trust = lamb_trust(w2, u2, s);
  CHECK(trust > s.min_coeff);
  CHECK(trust < s.max_coeff);
  const float rate = s.step_size * trust;
  std::vector<float> pe = p, me = m, ve = v;
  for (int i = 0; i < n; ++i) lamb_element_guarded(pe[i], me[i], ve[i], g[i], rate, s);
  g[1000] = std::numeric_limits<float>::quiet_NaN();
  const float keep = p[1000], p5 = p[5];
  CHECK(cpu::lamb_apply(p, m, v, g, rate, s) == 1000);
  CHECK(p[1000] == keep);
  pe[1000] = keep, me[1000] = m0[1000], ve[1000] = v0[1000];
  CHECK(p == pe);
  CHECK(m == me);
  CHECK(v == ve);
  // The second pass recomputes the first pass's direction: p - rate * u, bit for bit.
  const float step5 = rate * u[5];
  CHECK(p[5] == p5 - step5);
}

TEST_CASE("LAMB's trust ratio is 1 for a zero norm and clamped otherwise") {
  const LambStep s = make_lamb_step({0.9, 0.999, 1e-6, 0.0, true, 0.3, 0.01}, 1e-2, 1);
  CHECK(lamb_trust(0.0, 4.0, s) == 1.0f);
  CHECK(lamb_trust(4.0, 0.0, s) == 1.0f);
  CHECK(lamb_trust(100.0, 1.0, s) == s.max_coeff);
  CHECK(lamb_trust(1e-8, 1.0, s) == s.min_coeff);
  CHECK(lamb_trust(0.01, 1.0, s) == static_cast<float>(0.1));
}
