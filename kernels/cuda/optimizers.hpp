// Host-callable CUDA kernels of the Lion and LAMB updates over spans of DEVICE memory, as
// kernels/cpu/optimizers.hpp (the same per-element math: kernels/lion_math.hpp,
// kernels/lamb_math.hpp). Each call only queues work on `stream`. An element whose update is
// non-finite keeps its old values and its index is folded into *first_bad (a device u64, may be
// null) by atomicMin, as kernels::cuda::adamw_step.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/cuda/device.hpp"
#include "kernels/lamb_math.hpp"
#include "kernels/lion_math.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::kernels::cuda {

void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, StreamRef stream, unsigned long long* first_bad = nullptr);
void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, std::span<bf16> out, StreamRef stream,
               unsigned long long* first_bad = nullptr);
void lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
               const LionStep& step, std::span<fp16> out, StreamRef stream,
               unsigned long long* first_bad = nullptr);

void lamb_direction(std::span<const float> p, std::span<const float> m, std::span<const float> v,
                    std::span<const float> g, const LambStep& step, std::span<float> u,
                    StreamRef stream);

void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, StreamRef stream,
                unsigned long long* first_bad = nullptr);
void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, std::span<bf16> out,
                StreamRef stream, unsigned long long* first_bad = nullptr);
void lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, float rate, const LambStep& step, std::span<fp16> out,
                StreamRef stream, unsigned long long* first_bad = nullptr);

}  // namespace zero::kernels::cuda
