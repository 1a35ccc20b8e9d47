// The time model tests' shared fixtures: a cluster of round figures, so that every expected value
// can be worked out on paper, and short ways to cost a collective or plan a bare model.
#pragma once

#include <cstdint>

#include "zero/time_model.hpp"

namespace zero::test {

// Round figures, so that every expected value below can be worked out on paper.
inline ClusterProfile paper_cluster() {
  ClusterProfile c;
  c.name = "paper";
  c.peak_flops = 100e12;
  c.compute_efficiency = 0.5;
  c.memory_bytes = 80LL << 30;
  c.hbm_bandwidth = 2000e9;
  c.hbm_efficiency = 0.5;
  c.gpus_per_node = 8;
  c.intra_bandwidth = 100e9;
  c.inter_bandwidth = 50e9;
  c.intra_latency = 1e-6;
  c.inter_latency = 5e-6;
  c.call_latency = 10e-6;
  return c;
}

inline GroupPlacement in_node(int n) {
  return {n, 1, n, 1};
}

inline double seconds(comm::Op op, std::int64_t calls, double bytes, const GroupPlacement& g,
               Algorithm a = Algorithm::ring) {
  return collective_seconds(op, {calls, static_cast<std::int64_t>(bytes)}, g, paper_cluster(), a);
}

inline PlanInput bare_model(double params, int ranks, int stage) {
  PlanInput in;
  in.units = uniform_units(static_cast<std::int64_t>(params), 32);
  in.ranks = ranks;
  in.config.zero.stage = stage;
  in.config.precision = Precision::bf16;
  return in;
}

inline TimeInput time_on(const ClusterProfile& c, double params, double tokens) {
  TimeInput t;
  t.cluster = c;
  t.tokens_per_step = tokens;
  t.flops_per_step = 6 * params * tokens;
  return t;
}

}  // namespace zero::test
