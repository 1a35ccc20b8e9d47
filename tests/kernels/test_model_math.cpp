// Tests of the reference MLP's per-element math (kernels/model_math.hpp), the functions the CUDA
// model ops run: that each is the models/mlp.cpp expression, and the exactness the GPU loss
// relies on.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/model_math.hpp"
#include "kernels/norm_order.hpp"
#include "test_data.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::bits;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;
using zero::kernels::test::uniform_values;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Each step stored to a volatile float, so the reference is rounded exactly as written whatever
// the optimiser would like to fuse.
float stepwise_tanh_backward(float dprev, float a) {
  volatile float sq = a * a;
  volatile float one_minus = 1.0f - sq;
  return dprev * one_minus;
}

}  // namespace

TEST_CASE("tanh_element is the C library's tanh of a float, as the CPU MLP calls it") {
  std::vector<float> x = mixed_values(10000, 1, false, 4.0f);
  x.insert(x.end(), {0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, kInf, -kInf, kNaN});
  for (float e : x) {
    INFO("x " << e);
    REQUIRE(same(tanh_element(e), std::tanh(e)));
  }
  REQUIRE(bits(tanh_element(-0.0f)) == bits(-0.0f));
  REQUIRE(tanh_element(kInf) == 1.0f);
  REQUIRE(tanh_element(-kInf) == -1.0f);
}

TEST_CASE("tanh_backward_element is dprev·(1 - a²) rounded step by step") {
  const std::vector<float> dprev = mixed_values(10000, 2), a = uniform_values(10000, 3);
  for (std::size_t i = 0; i < dprev.size(); ++i) {
    INFO("dprev " << dprev[i] << ", a " << a[i]);
    REQUIRE(same(tanh_backward_element(dprev[i], a[i]), stepwise_tanh_backward(dprev[i], a[i])));
  }
  // Where tanh is flat (a = 0) the gradient passes unchanged; where it saturates it stops.
  REQUIRE(tanh_backward_element(3.25f, 0.0f) == 3.25f);
  REQUIRE(tanh_backward_element(3.25f, 1.0f) == 0.0f);
  REQUIRE(tanh_backward_element(2.0f, 0.5f) == 1.5f);
  REQUIRE(bits(tanh_backward_element(-2.0f, -1.0f)) == bits(-0.0f));
}

TEST_CASE("the MSE gradient is the difference rounded to float, times the scale") {
  const std::vector<float> out = mixed_values(10000, 4), target = uniform_values(10000, 5);
  const float g = 65536.0f / 3000.0f;
  for (std::size_t i = 0; i < out.size(); ++i) {
    volatile float d = out[i] - target[i];
    INFO("out " << out[i] << ", target " << target[i]);
    REQUIRE(same(mse_diff_element(out[i], target[i]), d));
    REQUIRE(same(mse_grad_element(d, g), d * g));
  }
  REQUIRE(mse_diff_element(1.5f, 0.25f) == 1.25f);
  REQUIRE(mse_grad_element(1.25f, 0.5f) == 0.625f);
}

TEST_CASE("an MSE loss term 0.5·d² is exact in double, and is half the norm leaf") {
  std::vector<float> d = mixed_values(10000, 6);
  d.insert(d.end(), {1.0f + 0x1p-23f, std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::max(), -0.0f});
  for (float e : d) {
    INFO("d " << e);
    // long double (x87: 64-bit significand) holds d² exactly too; equal means no rounding.
    const long double exact = 0.5L * static_cast<long double>(e) * static_cast<long double>(e);
    REQUIRE(static_cast<long double>(mse_loss_term(e)) == exact);
    REQUIRE(same(mse_loss_term(e), 0.5 * norm_leaf(e)));
  }
  // (1 + 2^-23)² = 1 + 2^-22 + 2^-46: 47 significant bits, kept whole.
  REQUIRE(mse_loss_term(1.0f + 0x1p-23f) == 0.5 * (1.0 + 0x1p-22 + 0x1p-46));
}

TEST_CASE("a sum of loss terms is half the same-order sum of norm leaves, bit for bit") {
  // Why the GPU loss may be 0.5 × the deterministic squared norm: halving every term halves every
  // partial sum exactly (a power-of-two scale commutes with rounding away from the subnormals),
  // whatever the order. Checked here in sequential order, on values spanning 1e-39 to 1e18.
  const std::vector<float> d = mixed_values(100003, 7);
  double loss = 0, norm = 0;
  for (float e : d) {
    loss += mse_loss_term(e);
    norm += norm_leaf(e);
  }
  REQUIRE(same(loss, 0.5 * norm));
}
