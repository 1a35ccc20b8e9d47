// The reference MLP: data, teacher, forward and backward on OpenBLAS, driven through the engine.
#include "models/mlp.hpp"


#include <cmath>
#include <cstring>
#include <string>

namespace zero::models {
namespace {

// A counter-based generator: the value depends only on (seed, stream, index), so every rank
// and every rank count sees the same weights and the same samples.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {  // [-1, 1)
  std::uint64_t h = mix(mix(seed * 0x100000001b3ull + stream) ^ index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

constexpr std::uint64_t kTeacherStream = 1u << 20, kDataStream = 1u << 21;

void to_f32(const TensorView& t, float* out) {
  switch (t.dtype) {
    case DType::f32: std::memcpy(out, t.data, static_cast<std::size_t>(t.numel) * 4); break;
    case DType::bf16: convert(t.as<const bf16>(), std::span(out, t.numel)); break;
    case DType::f16: convert(t.as<const fp16>(), std::span(out, t.numel)); break;
    default: throw Error("MLP parameters must be fp32, bf16 or fp16");
  }
}
void from_f32(const float* in, const TensorView& t) {
  switch (t.dtype) {
    case DType::f32: std::memcpy(t.data, in, static_cast<std::size_t>(t.numel) * 4); break;
    case DType::bf16: convert(std::span(in, t.numel), t.as<bf16>()); break;
    case DType::f16: convert(std::span(in, t.numel), t.as<fp16>()); break;
    default: throw Error("MLP gradients must be fp32, bf16 or fp16");
  }
}

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

void mlp_sample(const MlpShape& s, std::int64_t index, std::span<float> x, std::span<float> y) {
  const auto w = static_cast<std::size_t>(s.width);
  for (std::size_t j = 0; j < w; ++j)
    x[j] = uniform(s.seed, kDataStream, static_cast<std::uint64_t>(index) * w + j);
  // Teacher: y = tanh(T x) with T fixed by the seed, scaled so that tanh is not saturated.
  const double scale = 1.5 / std::sqrt(static_cast<double>(w));
  for (std::size_t i = 0; i < w; ++i) {
    double acc = 0;
    for (std::size_t j = 0; j < w; ++j)
      acc += static_cast<double>(uniform(s.seed, kTeacherStream, i * w + j)) * x[j];
    y[i] = static_cast<float>(std::tanh(scale * acc));
  }
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
    : shape_(shape), batch_(micro_batch) {
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

double MlpTrainer::micro_batch(Engine& engine, std::int64_t first) {
  const int L = shape_.layers, W = shape_.width, B = static_cast<int>(batch_);
  if (recorded_in_ != &engine.ledger()) {
    engine.ledger().record_external(Category::activations, mlp_activation_bytes(shape_, batch_),
                                    device_ ? comm::Memory::device : comm::Memory::host);
    recorded_in_ = &engine.ledger();
  }
  // The samples come from the host generator on both paths, so they train on the same data.
  for (int i = 0; i < B; ++i)
    mlp_sample(shape_, first + i, std::span(acts_[0]).subspan(i * W, W),
               std::span(target_).subspan(i * W, W));
  if (device_) return device_micro_batch(*device_, engine, acts_[0], target_);
  std::vector<float> bias(static_cast<std::size_t>(W)), dbias(static_cast<std::size_t>(W));

  // Forward: acts[l+1] = act(acts[l] W^T + b), tanh except after the last layer.
  for (int l = 0; l < L; ++l) {
    engine.gather(l);
    to_f32(engine.param(2 * l), w_.data());
    to_f32(engine.param(2 * l + 1), bias.data());
    engine.release(l);
    float* out = acts_[l + 1].data();
    for (int i = 0; i < B; ++i) std::memcpy(out + i * W, bias.data(), sizeof(float) * W);
    kernels::cpu::gemm(false, true, B, W, W, 1.0f, acts_[l].data(), W, w_.data(), W, 1.0f, out, W);
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

  // Backward, last layer first: dW = dZ^T X, db = sum_rows dZ, dX = dZ W.
  for (int l = L - 1; l >= 0; --l) {
    engine.gather(l);
    to_f32(engine.param(2 * l), w_.data());
    kernels::cpu::gemm(true, false, W, W, B, 1.0f, dz_.data(), W, acts_[l].data(), W, 0.0f,
                       dw_.data(), W);
    for (int j = 0; j < W; ++j) dbias[j] = 0;
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < W; ++j) dbias[j] += dz_[i * W + j];
    if (l > 0) {
      kernels::cpu::gemm(false, false, B, W, W, 1.0f, dz_.data(), W, w_.data(), W, 0.0f,
                         dprev_.data(), W);
      const float* a = acts_[l].data();  // tanh output of the previous layer
      for (int i = 0; i < B * W; ++i) dz_[i] = dprev_[i] * (1.0f - a[i] * a[i]);
    }
    // The documented order: gradients written while the unit is gathered, then release.
    from_f32(dw_.data(), engine.grad(2 * l));
    from_f32(dbias.data(), engine.grad(2 * l + 1));
    engine.release(l);
    engine.reduce_grads(l);
  }
  return loss;
}

}  // namespace zero::models
