// The reference MLP's element-wise operations on DEVICE memory (the CPU math is models/mlp.cpp;
// the per-element functions are kernels/model_math.hpp). Like kernels.hpp, every call only queues
// work on `stream` and returns; none synchronises the host.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/cuda/device.hpp"

namespace zero::kernels::cuda {

// x[i] = tanhf(x[i]), in place. CUDA's tanhf, so not bitwise the CPU's (see model_math.hpp).
void tanh_forward(std::span<float> x, StreamRef stream);

// dz[i] = dprev[i] · (1 - a[i]²), with a the forward tanh output. Bitwise the CPU loop.
// Spans must be equally long (zero::Error otherwise); dz may alias dprev.
void tanh_backward(std::span<const float> dprev, std::span<const float> a, std::span<float> dz,
                   StreamRef stream);

// Doubles of device scratch that mse_loss_grad needs for n elements.
std::size_t mse_loss_scratch(std::size_t n);

// With d = out - target (rounded to float): dz[i] = d · grad_scale, and *loss_sum (a device
// double) = the sum of 0.5·d² in the fixed order of kernels/norm_order.hpp, so repeated runs agree
// bitwise, and it equals 0.5 · kernels::cpu::squared_norm(d) bit for bit. Not divided by the
// count: the caller owns the mean. Spans must be equally long; scratch.size() >=
// mse_loss_scratch(n) (zero::Error otherwise). dz may alias out or target.
void mse_loss_grad(std::span<const float> out, std::span<const float> target, float grad_scale,
                   std::span<float> dz, double* loss_sum, std::span<double> scratch,
                   StreamRef stream);

// out[j] = sum over rows i = 0, 1, ..., rows-1 of x[i·cols + j], one fp32 add at a time from
// +0.0f: exactly the CPU loop's order (the bias gradient), so bitwise equal to it.
// x is rows×cols row-major (dense), out holds cols floats.
void column_sums(const float* x, int rows, int cols, float* out, StreamRef stream);

// out[i·cols + j] = row[j] for every row i < rows (the bias copied into each row of a linear
// layer's output before a GEMM with beta = 1).
void broadcast_rows(const float* row, int rows, int cols, float* out, StreamRef stream);

}  // namespace zero::kernels::cuda
