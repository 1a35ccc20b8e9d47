// Per-element math of the reference MLP's activation and loss (models/mlp.cpp), shared by CPU
// loops and the CUDA kernels (kernels/cuda/model_ops.cu), so the CPU tests check what the GPU runs.
#pragma once

#include <cmath>

#include "precision/hd.hpp"

namespace zero::kernels {

// tanh. Not bitwise portable: the host calls the C library's tanhf, the device CUDA's (within
// 2 ulp of the exact value); every other function here is plain IEEE arithmetic, which
// agrees bit for bit on both once FMA contraction is off (-ffp-contract=off, nvcc -fmad=false).
ZERO_HD float tanh_element(float x) {
  return tanhf(x);
}

// Gradient through tanh given its output a = tanh(z): dprev · (1 - a²).
ZERO_HD float tanh_backward_element(float dprev, float a) {
  return dprev * (1.0f - a * a);
}

// Loss 0.5·(out - target)², summed. The difference d is rounded to float once; the gradient is
// d · grad_scale (grad_scale = loss scale / element count), rounded once more.
ZERO_HD float mse_diff_element(float out, float target) {
  return out - target;
}
ZERO_HD float mse_grad_element(float d, float grad_scale) {
  return d * grad_scale;
}

// One loss term, 0.5·d² in double. EXACT: d has a 24-bit significand, d² needs at most 48 bits
// and a double holds 53, and halving only moves the exponent (d² >= 2^-298, far from double's
// subnormals). So a sum of these terms in a fixed order is 0.5 times the same-order sum of the
// d² leaves of kernels/norm_order.hpp, bit for bit: the GPU loss is computed that way.
ZERO_HD double mse_loss_term(float d) {
  return 0.5 * static_cast<double>(d) * static_cast<double>(d);
}

}  // namespace zero::kernels
