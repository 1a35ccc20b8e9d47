// The time model's compression terms (zero/time_model.hpp): the codec's per-value rates of a
// profile and the seconds a step spends encoding and decoding, counted from the plan's
// compressed collectives.
#include <algorithm>
#include <cmath>

#include "zero/time_model.hpp"

namespace zero {

CodecRates codec_rates(const ClusterProfile& c) {
  const double hbm = c.hbm_bandwidth * c.hbm_efficiency;
  auto rate = [&](double measured, double bytes) { return measured > 0 ? measured : bytes / hbm; };
  return {rate(c.quantize, 5), rate(c.dequantize_add, 9), rate(c.dequantize, 3),
          rate(c.topk_select, 16), rate(c.topk_sort, 16)};
}

CodecTime codec_seconds(const Plan& plan, const ClusterProfile& c) {
  const WireCompression& w = plan.settings.compression;
  CodecTime t;
  if (!w.any()) return t;
  const CodecRates r = codec_rates(c);
  const double block = static_cast<double>(std::max<std::int64_t>(1, w.block));
  const double G = std::max(1, plan.shard_size);
  // The gradients: the compressed reduce-scatters are the shard group's all-to-alls.
  const OpCount& grads = plan.phases.reductions.shard.all_to_all;
  if (grads.calls > 0 && w.gradients == GradCompression::topk) {
    const double pairs = static_cast<double>(grads.payload_bytes) / 8;
    const double segments = static_cast<double>(grads.calls) * G;
    const double k = pairs / segments;
    const double values = pairs / std::max(w.topk_ratio, 1e-12);
    t.backward += values * r.topk_select +
                  segments * k * std::log2(std::max(2.0, k)) * r.topk_sort +
                  pairs * r.dequantize_add;
  } else if (grads.calls > 0 && w.gradients != GradCompression::none) {
    const double per_value = w.grad_bits() / 8.0 + 4 / block;
    const double values = static_cast<double>(grads.payload_bytes) / per_value;
    t.backward += values * (r.quantize + r.dequantize_add);
  }
  // qwZ: the shard group's gathers (hpZ's from the secondary copy stay dense).
  if (w.weights_int8) {
    auto gathers = [&](const GroupedOps& phase) {
      const double values =
          static_cast<double>(phase.shard.all_gather.payload_bytes) / (1 + 4 / block);
      return values / G * r.quantize + values * r.dequantize;
    };
    t.forward += gathers(plan.phases.forward);
    t.backward += gathers(plan.phases.backward_gathers);
  }
  return t;
}

}  // namespace zero
