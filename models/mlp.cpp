// The reference MLP: data, teacher, forward and backward on OpenBLAS, driven through the engine.
#include "models/mlp.hpp"

#include "models/common.hpp"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

namespace zero::models {
namespace {

float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {  // [-1, 1)
  const std::uint64_t h = detail::hash(seed, stream, index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

constexpr std::uint64_t kTeacherStream = 1u << 20, kDataStream = 1u << 21;

void to_f32(const TensorView& t, float* out) { detail::view_to_f32(t, out, "MLP"); }
void from_f32(const float* in, const TensorView& t) { detail::f32_to_view(in, t, "MLP"); }

}  // namespace

std::vector<UnitSpec> mlp_units(const MlpShape& s) {
  if (s.layers < 1 || s.width < 1 || s.global_batch < 1)
    throw Error(cat("MLP needs layers, width and global batch >= 1, got ", s.layers, ", ", s.width,
                    ", ", s.global_batch));
  std::vector<UnitSpec> units;
  for (int l = 0; l < s.layers; ++l) {
    std::string n = "layer" + std::to_string(l);
    units.push_back(UnitSpec{n, {ParamSpec{n + ".weight", {s.width, s.width}},
                                 ParamSpec{n + ".bias", {s.width}}}});
  }
  return units;
}

void mlp_init(const MlpShape& s, int param, std::span<float> out) {
  // Uniform in +-1/sqrt(fan_in) for weights and biases, as torch.nn.Linear does.
  const float bound = 1.0f / std::sqrt(static_cast<float>(s.width));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = bound * uniform(s.seed, static_cast<std::uint64_t>(param), i);
}

MlpTeacher::MlpTeacher(const MlpShape& s) : shape_(s) {
  if (s.width < 1) throw Error(cat("MLP needs width >= 1, got ", s.width));
  const auto w = static_cast<std::size_t>(s.width);
  t_.resize(w * w);
  for (std::size_t k = 0; k < t_.size(); ++k) t_[k] = uniform(s.seed, kTeacherStream, k);
}

namespace {

// out[b * w + i] = tanh(scale * <row i of t, x_b>) for the n samples in x (xd: the same in fp64).
// Each dot product runs in fp64 over 8 fixed lanes (element j into lane j % 8, the lanes summed
// in a fixed tree): a float x float product is exact in fp64 and the lanes need no reassociation
// to vectorise, so the value is the same on every SIMD path and for any n or blocking. Row-outer
// and four samples at a time, so that a teacher row is read and widened once per four samples.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void teacher_outputs(const float* t, const double* xd, std::size_t n, std::size_t w, float* out) {
  constexpr std::size_t kLanes = 8, kBlock = 4;
  const double scale = 1.5 / std::sqrt(static_cast<double>(w));  // keeps tanh unsaturated
  const std::size_t body = w / kLanes * kLanes;
  auto finish = [&](const double* acc, std::size_t b, std::size_t i, const float* row) {
    double a[kLanes];
    for (std::size_t k = 0; k < kLanes; ++k) a[k] = acc[k];
    for (std::size_t j = body; j < w; ++j) a[j % kLanes] += static_cast<double>(row[j]) * xd[b * w + j];
    const double sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    out[b * w + i] = static_cast<float>(std::tanh(scale * sum));
  };
  for (std::size_t i = 0; i < w; ++i) {
    const float* row = t + i * w;
    std::size_t b = 0;
    for (; b + kBlock <= n; b += kBlock) {
      double acc[kBlock][kLanes] = {};
      for (std::size_t j = 0; j < body; j += kLanes)
        for (std::size_t k = 0; k < kLanes; ++k) {
          const double r = row[j + k];
          for (std::size_t q = 0; q < kBlock; ++q) acc[q][k] += r * xd[(b + q) * w + j + k];
        }
      for (std::size_t q = 0; q < kBlock; ++q) finish(acc[q], b + q, i, row);
    }
    for (; b < n; ++b) {
      double acc[kLanes] = {};
      for (std::size_t j = 0; j < body; j += kLanes)
        for (std::size_t k = 0; k < kLanes; ++k) acc[k] += static_cast<double>(row[j + k]) * xd[b * w + j + k];
      finish(acc, b, i, row);
    }
  }
}

}  // namespace

void MlpTeacher::samples(std::int64_t first, std::int64_t count, std::span<float> x,
                         std::span<float> y) const {
  const auto w = static_cast<std::size_t>(shape_.width), n = static_cast<std::size_t>(count);
  if (count < 0 || x.size() < n * w || y.size() < n * w)
    throw Error(cat("MlpTeacher::samples: ", count, " samples of width ", w, " need ", n * w,
                    " floats in x and y, got ", x.size(), " and ", y.size()));
  const auto base = static_cast<std::uint64_t>(first) * w;
  for (std::size_t k = 0; k < n * w; ++k) x[k] = uniform(shape_.seed, kDataStream, base + k);
  const std::vector<double> xd(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n * w));
  teacher_outputs(t_.data(), xd.data(), n, w, y.data());
}

void MlpTeacher::sample(std::int64_t index, std::span<float> x, std::span<float> y) const {
  samples(index, 1, x, y);
}

void mlp_sample(const MlpShape& s, std::int64_t index, std::span<float> x, std::span<float> y) {
  MlpTeacher(s).sample(index, x, y);
}

std::int64_t mlp_activation_bytes(const MlpShape& s, std::int64_t micro_batch) {
  const std::int64_t w = s.width, b = micro_batch;
  const std::int64_t floats = (s.layers + 1) * b * w  // acts_: every layer's input, and the output
                              + 2 * w * w             // w_, dw_: one layer's weight and gradient
                              + 3 * b * w             // dz_, dprev_, target_
                              + 2 * w;                // bias, dbias
  return floats * static_cast<std::int64_t>(sizeof(float));
}

MlpTrainer::MlpTrainer(const MlpShape& shape, std::int64_t micro_batch, comm::Memory where)
    : shape_(shape), batch_(micro_batch), teacher_(shape) {
  if (batch_ < 1) throw Error(cat("micro-batch must be >= 1, got ", batch_));
  const auto w = static_cast<std::size_t>(shape.width), b = static_cast<std::size_t>(batch_);
  target_.resize(b * w);
  if (where == comm::Memory::device) {  // the host holds only the samples it generates
    device_ = make_device(shape, micro_batch);
    acts_.assign(1, std::vector<float>(b * w));
    return;
  }
  acts_.assign(static_cast<std::size_t>(shape.layers) + 1, std::vector<float>(b * w));
  w_.resize(w * w);
  dw_.resize(w * w);
  dz_.resize(b * w);
  dprev_.resize(b * w);
}

MlpTrainer::~MlpTrainer() = default;
MlpTrainer::MlpTrainer(MlpTrainer&&) noexcept = default;
MlpTrainer& MlpTrainer::operator=(MlpTrainer&&) noexcept = default;

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

double MlpTrainer::micro_batch(Engine& engine, std::int64_t first) {
  const auto start = Clock::now();
  if (recorded_in_ != &engine.ledger()) {
    engine.ledger().record_external(Category::activations, mlp_activation_bytes(shape_, batch_),
                                    device_ ? comm::Memory::device : comm::Memory::host);
    recorded_in_ = &engine.ledger();
  }
  // The samples come from the host generator on both paths, so they train on the same data.
  const int B = static_cast<int>(batch_);
  teacher_.samples(first, B, acts_[0], target_);
  const double data = since(start);
  times_.data_seconds += data;
  if (device_) {
    // The GPU path's engine calls are not timed one by one: its compute is what the call took
    // beyond the engine's waits (the engine's own bookkeeping counts as compute here).
    const auto t = Clock::now();
    const double waited = engine.stats().wait_seconds;
    const double loss = device_micro_batch(*device_, engine, acts_[0], target_);
    times_.compute_seconds += std::max(0.0, since(t) - (engine.stats().wait_seconds - waited));
    return loss;
  }
  // Time inside engine calls is the engine's (its waits, its bookkeeping), not compute.
  double in_engine = 0;
  auto call = [&](auto&& f) {
    const auto t = Clock::now();
    f();
    in_engine += since(t);
  };
  const double loss = host_micro_batch(engine, call);
  times_.compute_seconds += std::max(0.0, since(start) - data - in_engine);
  return loss;
}

template <class Call>
double MlpTrainer::host_micro_batch(Engine& engine, Call& call) {
  const int L = shape_.layers, W = shape_.width, B = static_cast<int>(batch_);
  std::vector<float> bias(static_cast<std::size_t>(W)), dbias(static_cast<std::size_t>(W));

  // fp32 params are read where the engine keeps them; 16-bit ones are widened into w_ first.
  auto weights = [&](const TensorView& t) -> const float* {
    if (t.dtype == DType::f32) return t.as<const float>().data();
    to_f32(t, w_.data());
    return w_.data();
  };

  // Forward: acts[l+1] = act(acts[l] W^T + b), tanh except after the last layer.
  for (int l = 0; l < L; ++l) {
    call([&] { engine.gather(l); });
    const float* w = weights(engine.param(2 * l));
    to_f32(engine.param(2 * l + 1), bias.data());
    float* out = acts_[l + 1].data();
    for (int i = 0; i < B; ++i) std::memcpy(out + i * W, bias.data(), sizeof(float) * W);
    kernels::cpu::gemm(false, true, B, W, W, 1.0f, acts_[l].data(), W, w, W, 1.0f, out, W);
    call([&] { engine.release(l); });
    if (l + 1 < L)
      for (int i = 0; i < B * W; ++i) out[i] = std::tanh(out[i]);
  }

  // Loss 0.5 * mean((out - y)^2); its gradient, scaled by the loss scale (fp16).
  const float* out = acts_[L].data();
  double loss = 0;
  const float g = static_cast<float>(engine.loss_scale() / (static_cast<double>(B) * W));
  for (int i = 0; i < B * W; ++i) {
    const float d = out[i] - target_[i];
    loss += 0.5 * static_cast<double>(d) * d;
    dz_[i] = d * g;
  }
  loss /= static_cast<double>(B) * W;

  // Backward, last layer first: dW = dZ^T X, db = sum_rows dZ, dX = dZ W. The documented order:
  // gradients written while the unit is gathered, then release. fp32 gradients are computed
  // straight into the engine's buffer; 16-bit ones into dw_, then narrowed into it.
  for (int l = L - 1; l >= 0; --l) {
    call([&] { engine.gather(l); });
    TensorView gw, gb;
    call([&] {
      gw = engine.grad(2 * l);
      gb = engine.grad(2 * l + 1);
    });
    const float* w = weights(engine.param(2 * l));
    float* dw = gw.dtype == DType::f32 ? gw.as<float>().data() : dw_.data();
    kernels::cpu::gemm(true, false, W, W, B, 1.0f, dz_.data(), W, acts_[l].data(), W, 0.0f, dw, W);
    for (int j = 0; j < W; ++j) dbias[j] = 0;
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < W; ++j) dbias[j] += dz_[i * W + j];
    if (l > 0) {
      kernels::cpu::gemm(false, false, B, W, W, 1.0f, dz_.data(), W, w, W, 0.0f, dprev_.data(), W);
      const float* a = acts_[l].data();  // tanh output of the previous layer
      for (int i = 0; i < B * W; ++i) dz_[i] = dprev_[i] * (1.0f - a[i] * a[i]);
    }
    if (gw.dtype != DType::f32) from_f32(dw_.data(), gw);
    from_f32(dbias.data(), gb);
    call([&] {
      engine.release(l);
      engine.reduce_grads(l);
    });
  }
  return loss;
}

}  // namespace zero::models
