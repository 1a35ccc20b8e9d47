// The reference GPT (models/gpt.hpp): init, parameter groups, and the trainer's forward and
// backward over kernels/cpu/gpt_ops.hpp, driven through the engine unit by unit.
#include "models/gpt.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cpu/gpt_ops.hpp"
#include "models/common.hpp"
#include "models/gpt_model.hpp"

namespace zero::models {
namespace ops = kernels::cpu::gpt;

std::string_view name_of(GptCompute c) {
  return c == GptCompute::bf16 ? "bf16" : "fp32";
}

void check_gpt_shape(const GptShape& s) {
  (void)gpt_units(s);  // the planner's checks: sizes >= 1, heads dividing hidden
  if (!s.tied_embeddings)
    throw Error(
        "the GPT trainer implements GPT-2's tied output head; an untied head is not "
        "implemented (set tied_embeddings)");
  const std::int64_t f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * std::int64_t{s.hidden};
  const std::int64_t n = std::int64_t{s.micro_batch} * s.seq_len;
  if (s.vocab > INT_MAX || f > INT_MAX || n > INT_MAX || 3 * std::int64_t{s.hidden} > INT_MAX)
    throw Error(cat("GPT shape: vocab ", s.vocab, ", ffn ", f, " or micro-batch x seq_len ", n,
                    " exceeds the GEMM's int sizes"));
}

namespace {

double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {  // (0, 1]
  const std::uint64_t h = detail::hash(seed, stream, index);
  return (static_cast<double>(h >> 11) + 1.0) / 9007199254740992.0;
}
// A standard normal by Box-Muller from two uniforms of the same counter.
double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double u1 = uniform01(seed, stream, 2 * index), u2 = uniform01(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void to_f32(const TensorView& t, float* out) {
  detail::view_to_f32(t, out, "GPT");
}
void from_f32(const float* in, const TensorView& t) {
  detail::f32_to_view(in, t, "GPT");
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void gpt_init(const GptShape& shape, std::uint64_t seed, int param, std::span<float> out) {
  const std::vector<UnitSpec> units = gpt_units(shape);
  const ParamSpec* spec = nullptr;
  int p = 0;
  for (const auto& u : units)
    for (const auto& ps : u.params)
      if (p++ == param) spec = &ps;
  if (!spec) throw Error(cat("gpt_init: no param ", param, " in a GPT of ", p, " params"));
  const std::string& n = spec->name;
  if (n.ends_with(".bias")) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  if (n.find("ln") != std::string::npos) {  // ln1, ln2, ln_f weights
    std::fill(out.begin(), out.end(), 1.0f);
    return;
  }
  const bool residual = n.ends_with("attn.proj.weight") || n.ends_with("mlp.proj.weight");
  const double sd = residual ? 0.02 / std::sqrt(2.0 * shape.layers) : 0.02;
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(sd * normal(seed, static_cast<std::uint64_t>(param), i));
}

std::vector<ParamGroup> gpt_param_groups() {
  ParamGroup no_decay;
  no_decay.params = {"*.bias",      "*.ln1.weight", "*.ln2.weight",
                     "ln_f.weight", "wte.weight",   "wpe.weight"};
  no_decay.weight_decay = 0.0;
  return {no_decay};
}

double gpt_flops_per_token(const GptShape& s) {
  const double n = static_cast<double>(count_params(gpt_units(s)));
  return 6.0 * n + 12.0 * s.layers * s.seq_len * static_cast<double>(s.hidden);
}

namespace {

// The CPU backend of the schedule (models/gpt_model.hpp): host vectors, kernels/cpu/gpt_ops.
class HostOps {
 public:
  template <class U>
  struct Buffer {
    std::vector<U> v;
    U* data() { return v.data(); }
    const U* data() const { return v.data(); }
    std::size_t size() const { return v.size(); }
    std::int64_t bytes() const { return static_cast<std::int64_t>(v.capacity() * sizeof(U)); }
  };
  static constexpr comm::Memory memory = comm::Memory::host;

  // Presizes the op scratch to the most any op asks for this shape (docs/memory.md), so that
  // the trainer's bytes are known before the first micro-batch and never grow.
  HostOps(const GptShape& s, bool half) {
    const auto n = static_cast<std::size_t>(s.micro_batch) * static_cast<std::size_t>(s.seq_len);
    const auto c = static_cast<std::size_t>(s.hidden);
    const std::size_t f = s.ffn_hidden > 0 ? static_cast<std::size_t>(s.ffn_hidden) : 4 * c;
    const std::size_t wide_out = n * std::max(3 * c, f);
    if (half) scratch_.f(wide_out);
    if (half) scratch_.h(std::max(wide_out, n * static_cast<std::size_t>(s.vocab)));
    floats_ = scratch_.floats.size();
    halves_ = scratch_.halves.size();
  }
  template <class U>
  Buffer<U> make(std::size_t n) {
    return Buffer<U>{std::vector<U>(n)};
  }
  std::int64_t scratch_bytes() const {
    return static_cast<std::int64_t>(scratch_.floats.capacity() * sizeof(float) +
                                     scratch_.halves.capacity() * sizeof(bf16));
  }
  void zero(float* p, std::size_t n) { kernels::cpu::zero(std::span(p, n)); }
  void widen(const TensorView& v, float* out) { to_f32(v, out); }
  void narrow(const float* in, const TensorView& v) { from_f32(in, v); }
  template <class F>
  void inspect(const float* g, std::size_t n, F&& f) {
    f(std::span(g, n));
  }
  std::pair<const std::int32_t*, const std::int32_t*> tokens(std::span<const std::int32_t> in,
                                                             std::span<const std::int32_t> tg) {
    return {in.data(), tg.data()};
  }
  void crossentropy(float* logits, const std::int32_t* tg, int n, int v, float grad_scale) {
    loss_ = ops::crossentropy_forward_backward(logits, tg, n, v, grad_scale);
  }
  double take_loss() { return loss_; }
  void recompute_begin() { recompute_start_ = Clock::now(); }
  void recompute_end() { recompute_seconds_ += since(recompute_start_); }
  double take_recompute_seconds() { return std::exchange(recompute_seconds_, 0.0); }
  void check() const {
    if (scratch_.floats.size() != floats_ || scratch_.halves.size() != halves_)
      throw std::logic_error("GPT trainer: an op grew its scratch past the planned size");
  }

  template <class T>
  void embedding_forward(T* out, const std::int32_t* tok, const T* wte, const T* wpe, int n,
                         int seq, int c) {
    ops::embedding_forward(out, tok, wte, wpe, n, seq, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tok,
                          int n, int seq, int c) {
    ops::embedding_backward(dwte, dwpe, dout, tok, n, seq, c);
  }
  template <class T>
  void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                         const float* b, int n, int c) {
    ops::layernorm_forward(out, mean, rstd, inp, w, b, n, c);
  }
  template <class T>
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                          const float* w, const float* mean, const float* rstd, int n, int c) {
    ops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, n, c);
  }
  template <class T>
  void matmul_forward(T* out, const T* inp, const T* w, const float* b, int n, int c, int oc) {
    ops::matmul_forward(out, inp, w, b, n, c, oc, scratch_);
  }
  template <class T>
  void matmul_backward(float* dinp, bool acc, float* dw, float* db, const float* dout, const T* inp,
                       const T* w, int n, int c, int oc) {
    ops::matmul_backward(dinp, acc, dw, db, dout, inp, w, n, c, oc, scratch_);
  }
  // Tiled attention keeps two floats per query row, not the probabilities
  // (kernels/cpu/attention.hpp); its tile scratch is per thread.
  static std::size_t attention_saved_floats(int b, int h, int seq) {
    return ops::attention_saved_floats(b, h, seq);
  }
  template <class T>
  void attention_forward(T* out, float* saved, const T* qkv, int b, int seq, int c, int h) {
    ops::attention_forward(out, saved, qkv, b, seq, c, h);
  }
  template <class T>
  void attention_backward(float* dqkv, const float* dout, const T* qkv, const T* out,
                          const float* saved, int b, int seq, int c, int h) {
    ops::attention_backward(dqkv, dout, qkv, out, saved, b, seq, c, h);
  }
  template <class T>
  void gelu_forward(T* out, const T* inp, std::int64_t n) {
    ops::gelu_forward(out, inp, n);
  }
  template <class T>
  void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n) {
    ops::gelu_backward(dinp, inp, dout, n);
  }
  template <class T>
  void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
    ops::residual_forward(out, a, b, n);
  }
  template <class T>
  void logits_forward(float* logits, const T* inp, const T* wte, int n, int c, int v) {
    ops::logits_forward(logits, inp, wte, n, c, v);
  }
  template <class T>
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                       int n, int c, int v) {
    ops::logits_backward(dinp, dwte, dlogits, inp, wte, n, c, v, scratch_);
  }

 private:
  ops::Scratch scratch_;
  std::size_t floats_ = 0, halves_ = 0;
  double loss_ = 0;
  Clock::time_point recompute_start_;
  double recompute_seconds_ = 0;
};

}  // namespace

GptTrainer::GptTrainer(const GptShape& shape, GptCompute compute, comm::Memory where) {
  check_gpt_shape(shape);
  if (where == comm::Memory::device) {
    impl_ = make_gpt_device(shape, compute);
    return;
  }
  if (compute == GptCompute::bf16)
    impl_ = std::make_unique<detail::GptModel<bf16, HostOps>>(shape, compute);
  else
    impl_ = std::make_unique<detail::GptModel<float, HostOps>>(shape, compute);
  const std::int64_t planned =
      gpt_trainer_activation_bytes(shape, compute == GptCompute::bf16 ? DType::bf16 : DType::f32);
  if (impl_->bytes() != planned)
    throw std::logic_error(cat("GPT trainer: its buffers hold ", impl_->bytes(),
                               " bytes but "
                               "gpt_trainer_activation_bytes says ",
                               planned));
}
GptTrainer::~GptTrainer() = default;
GptTrainer::GptTrainer(GptTrainer&&) noexcept = default;
GptTrainer& GptTrainer::operator=(GptTrainer&&) noexcept = default;

double GptTrainer::micro_batch(Engine& engine, std::span<const std::int32_t> inputs,
                               std::span<const std::int32_t> targets) {
  const auto start = Clock::now();
  Impl& m = *impl_;
  const GptShape& s = m.shape;
  const auto n = static_cast<std::size_t>(s.micro_batch) * static_cast<std::size_t>(s.seq_len);
  if (inputs.size() != n || targets.size() != n)
    throw Error(cat("GPT micro-batch: expected ", s.micro_batch, " x ", s.seq_len, " = ", n,
                    " input and target tokens, got ", inputs.size(), " and ", targets.size()));
  for (std::size_t i = 0; i < n; ++i)
    for (const auto* v : {&inputs, &targets})
      if ((*v)[i] < 0 || (*v)[i] >= s.vocab)
        throw Error(cat("GPT micro-batch: ", v == &inputs ? "input" : "target", " token ", i,
                        " is ", (*v)[i], ", outside the vocabulary [0, ", s.vocab, ")"));
  if (m.compute == GptCompute::bf16 && engine.config().precision != Precision::bf16)
    throw Error(cat("the GPT's bf16 compute needs bf16 parameters; this engine trains in ",
                    name_of(engine.config().precision),
                    " (enable bf16 in the config, or "
                    "compute in fp32)"));
  if (m.recorded_in != &engine.ledger()) {
    engine.ledger().record_external(Category::activations, m.bytes(), m.memory());
    m.recorded_in = &engine.ledger();
  }
  double in_engine = 0;
  const double loss = m.micro_batch(engine, inputs, targets, in_engine);
  m.compute_seconds += std::max(0.0, since(start) - in_engine);
  return loss;
}

void GptTrainer::set_grad_hook(std::function<void(int, std::span<const float>)> hook) {
  impl_->grad_hook = std::move(hook);
}

double GptTrainer::compute_seconds() const {
  return impl_->compute_seconds;
}
double GptTrainer::recompute_seconds() const {
  return impl_->recompute_seconds;
}
const GptShape& GptTrainer::shape() const {
  return impl_->shape;
}
GptCompute GptTrainer::compute() const {
  return impl_->compute;
}
std::int64_t GptTrainer::activation_bytes() const {
  return impl_->bytes();
}

}  // namespace zero::models
