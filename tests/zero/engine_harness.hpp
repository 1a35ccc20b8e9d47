// Runs the reference MLP through the engine for the multi-rank engine tests, and an independent
// fp64 re-implementation of the same training (model, data, AdamW, clipping) to compare with.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "models/mlp.hpp"
#include "zero/zero.hpp"

namespace zero::testing {

struct RunSpec {
  int stage = 0;
  Precision precision = Precision::bf16;
  DType reduce = DType::f32;
  std::int64_t accumulation = 1;
  std::int64_t steps = 20;
  bool overlap = false;
  double clip = 1.0;
  double lr = 1e-2;
  double eps = 1e-8;
  bool bias_correction = true;
  std::int64_t persistence_threshold = 0;  // 0: every stage-3 unit is sharded and gathered
  // A parameter group as a transformer trainer sets one: biases without weight decay, at half
  // the learning rate (param_groups [{"params": ["*.bias"], "weight_decay": 0, "lr_scale": 0.5}]).
  bool bias_group = false;
  std::int64_t reduce_bucket = 0;        // reduce_bucket_size in elements (0: the default)
  std::int64_t allgather_bucket = 0;     // allgather_bucket_size in elements (0: the default)
  int shard_size = -1;                   // mics_shard_size (-1: flat, one group of all ranks)
  int hpz = 1;                           // zero_hpz_partition_size (1: off)
  models::MlpShape shape{3, 24, 48, 7};  // layers, width, global batch, seed
};

struct RunResult {
  std::uint64_t checksum = 0;
  std::vector<std::vector<float>> master;  // every param's fp32 master weights, in full
  std::vector<StepReport> reports;
  std::vector<double> losses;
  MemoryReport memory;
  comm::Accounting per_step;                     // accounting of the last step alone
  Engine::GroupAccounting per_step_groups;       // the same, by process group
  std::vector<std::int64_t> bucket_allocations;  // the ledger's count of bucket buffers made,
                                                 // after each step
  std::int64_t padded = 0;                       // Ψ with padding (the layout's padded_numel)
  EngineStats stats;
};

// Engine options that keep the engine's log lines (skipped steps, scale changes) out of a test.
inline EngineOptions quiet() {
  EngineOptions o;
  o.log = [](const std::string&) {};
  return o;
}

inline Config make_config(const RunSpec& s) {
  Config c;
  c.zero.stage = s.stage;
  c.precision = s.precision;
  c.communication_data_type = s.reduce;
  c.gradient_accumulation_steps = s.accumulation;
  c.gradient_clipping = s.clip;
  c.optimizer.lr = s.lr;
  c.optimizer.weight_decay = 0.01;
  c.optimizer.eps = s.eps;
  c.optimizer.bias_correction = s.bias_correction;
  c.zero.overlap_comm = s.overlap;
  if (s.reduce_bucket > 0) c.zero.reduce_bucket_size = s.reduce_bucket;
  if (s.allgather_bucket > 0) c.zero.allgather_bucket_size = s.allgather_bucket;
  c.zero.mics_shard_size = s.shard_size;
  c.zero.zero_hpz_partition_size = s.hpz;
  c.zero.stage3_param_persistence_threshold = s.persistence_threshold;
  if (s.bias_group) c.param_groups.push_back({{"*.bias"}, 0.0, 0.5});
  return c;
}

inline RunResult run_mlp(comm::Communicator& world, const RunSpec& spec) {
  const int n = world.size(), r = world.rank();
  const std::int64_t G = spec.shape.global_batch, micro = G / (n * spec.accumulation);
  Engine engine(make_config(spec), world, models::mlp_units(spec.shape));
  engine.init_params([&](int p, std::span<float> out) { models::mlp_init(spec.shape, p, out); });
  models::MlpTrainer trainer(spec.shape, micro);
  RunResult out;
  for (std::int64_t s = 0; s < spec.steps; ++s) {
    if (s + 1 == spec.steps) engine.reset_comm_accounting();
    double loss = 0;
    for (std::int64_t k = 0; k < spec.accumulation; ++k)
      loss += trainer.micro_batch(engine, s * G + r * (G / n) + k * micro);
    out.reports.push_back(engine.step());
    out.losses.push_back(loss);
    out.bucket_allocations.push_back(
        engine.ledger().snapshot(engine.memory().ledger.memory)[Category::buckets].allocations);
  }
  out.per_step = engine.comm_accounting();
  out.per_step_groups = engine.comm_accounting_by_group();
  out.memory = engine.memory();
  out.padded = engine.layout().padded_numel;
  out.stats = engine.stats();
  for (int p = 0; p < static_cast<int>(engine.layout().params.size()); ++p)
    out.master.push_back(engine.gather_master(p));
  out.checksum = engine.master_checksum();
  return out;
}

// The same training in fp64 on one process, written from the definitions (not from the engine):
// y = W x + b per layer, tanh between layers, loss 0.5 * mean squared error, the gradient of the
// mean over the global batch, global-norm clipping, AdamW (decoupled decay, bias correction
// unless spec.bias_correction is false: then p -= lr · m / (sqrt(v) + eps), as DeepSpeed's
// FusedAdam with bias_correction=False).
inline std::vector<std::vector<double>> reference_fp64(const RunSpec& spec,
                                                       std::vector<double>* norms = nullptr) {
  const auto& S = spec.shape;
  const int L = S.layers, W = S.width;
  std::vector<std::vector<double>> p(2 * L), m(2 * L), v(2 * L), g(2 * L);
  for (int i = 0; i < 2 * L; ++i) {
    std::vector<float> init(i % 2 == 0 ? std::size_t(W) * W : std::size_t(W));
    models::mlp_init(S, i, init);
    p[i].assign(init.begin(), init.end());
    m[i].assign(init.size(), 0.0);
    v[i].assign(init.size(), 0.0);
  }
  std::vector<float> xf(W), yf(W);
  const double b1 = 0.9, b2 = 0.999, eps = spec.eps, wd = 0.01;
  for (std::int64_t s = 0; s < spec.steps; ++s) {
    for (auto& gi : g) gi.assign(gi.empty() ? 0 : gi.size(), 0.0);
    for (int i = 0; i < 2 * L; ++i) g[i].assign(p[i].size(), 0.0);
    for (std::int64_t i = 0; i < S.global_batch; ++i) {
      models::mlp_sample(S, s * S.global_batch + i, xf, yf);
      std::vector<std::vector<double>> a(L + 1, std::vector<double>(W));
      for (int j = 0; j < W; ++j) a[0][j] = xf[j];
      for (int l = 0; l < L; ++l)
        for (int o = 0; o < W; ++o) {
          double z = p[2 * l + 1][o];
          for (int j = 0; j < W; ++j) z += p[2 * l][std::size_t(o) * W + j] * a[l][j];
          a[l + 1][o] = l + 1 < L ? std::tanh(z) : z;
        }
      std::vector<double> dz(W), dprev(W);
      for (int o = 0; o < W; ++o) dz[o] = (a[L][o] - yf[o]) / (double(W) * S.global_batch);
      for (int l = L - 1; l >= 0; --l) {
        for (int o = 0; o < W; ++o) {
          g[2 * l + 1][o] += dz[o];
          for (int j = 0; j < W; ++j) g[2 * l][std::size_t(o) * W + j] += dz[o] * a[l][j];
        }
        if (l == 0) break;
        for (int j = 0; j < W; ++j) {
          double acc = 0;
          for (int o = 0; o < W; ++o) acc += dz[o] * p[2 * l][std::size_t(o) * W + j];
          dprev[j] = acc * (1 - a[l][j] * a[l][j]);
        }
        dz = dprev;
      }
    }
    double sq = 0;
    for (auto& gi : g)
      for (double x : gi) sq += x * x;
    const double norm = std::sqrt(sq);
    if (norms) norms->push_back(norm);
    const double coef =
        spec.clip > 0 && spec.clip / (norm + 1e-6) < 1 ? spec.clip / (norm + 1e-6) : 1;
    const double t = double(s + 1);
    const double bc1 = spec.bias_correction ? 1 - std::pow(b1, t) : 1.0;
    const double bc2 = spec.bias_correction ? 1 - std::pow(b2, t) : 1.0;
    for (int i = 0; i < 2 * L; ++i) {
      const bool bias = i % 2 == 1;  // params alternate layer{l}.weight, layer{l}.bias
      const double decay = spec.bias_group && bias ? 0.0 : wd;
      const double lr = spec.bias_group && bias ? 0.5 * spec.lr : spec.lr;
      for (std::size_t k = 0; k < p[i].size(); ++k) {
        const double gk = g[i][k] * coef;
        p[i][k] *= 1 - lr * decay;
        m[i][k] = b1 * m[i][k] + (1 - b1) * gk;
        v[i][k] = b2 * v[i][k] + (1 - b2) * gk * gk;
        p[i][k] -= lr / bc1 * m[i][k] / (std::sqrt(v[i][k]) / std::sqrt(bc2) + eps);
      }
    }
  }
  return p;
}

// The largest |a - b| / (|b| + floor) over every weight.
inline double max_rel_diff(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<double>>& b, double floor = 1e-2) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k)
      worst = std::max(worst, std::abs(a[i][k] - b[i][k]) / (std::abs(b[i][k]) + floor));
  return worst;
}

// ||a - b|| / ||b|| over all weights together.
inline double rel_l2_diff(const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<double>>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      num += (a[i][k] - b[i][k]) * (a[i][k] - b[i][k]);
      den += b[i][k] * b[i][k];
    }
  return std::sqrt(num / den);
}

}  // namespace zero::testing
