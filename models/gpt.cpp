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

#include "kernels/cpu/gpt_ops.hpp"
#include "models/common.hpp"

namespace zero::models {
namespace ops = kernels::cpu::gpt;

std::string_view name_of(GptCompute c) { return c == GptCompute::bf16 ? "bf16" : "fp32"; }

void check_gpt_shape(const GptShape& s) {
  (void)gpt_units(s);  // the planner's checks: sizes >= 1, heads dividing hidden
  if (!s.tied_embeddings)
    throw Error("the GPT trainer implements GPT-2's tied output head; an untied head is not "
                "implemented (set tied_embeddings)");
  if (s.recompute) throw Error("the GPT trainer does not implement activation recomputation");
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

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void to_f32(const TensorView& t, float* out) { detail::view_to_f32(t, out, "GPT"); }
void from_f32(const float* in, const TensorView& t) { detail::f32_to_view(in, t, "GPT"); }

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  if (ends_with(n, ".bias")) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  if (n.find("ln") != std::string::npos) {  // ln1, ln2, ln_f weights
    std::fill(out.begin(), out.end(), 1.0f);
    return;
  }
  const bool residual = ends_with(n, "attn.proj.weight") || ends_with(n, "mlp.proj.weight");
  const double sd = residual ? 0.02 / std::sqrt(2.0 * shape.layers) : 0.02;
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(sd * normal(seed, static_cast<std::uint64_t>(param), i));
}

std::vector<ParamGroup> gpt_param_groups() {
  ParamGroup no_decay;
  no_decay.params = {"*.bias", "*.ln1.weight", "*.ln2.weight", "ln_f.weight", "wte.weight",
                     "wpe.weight"};
  no_decay.weight_decay = 0.0;
  return {no_decay};
}

double gpt_flops_per_token(const GptShape& s) {
  const double n = static_cast<double>(count_params(gpt_units(s)));
  return 6.0 * n + 12.0 * s.layers * s.seq_len * static_cast<double>(s.hidden);
}

struct GptTrainer::Impl {
  GptShape shape;
  GptCompute compute;
  double compute_seconds = 0;
  const Ledger* recorded_in = nullptr;
  std::function<void(int, std::span<const float>)> grad_hook;
  Impl(const GptShape& s, GptCompute c) : shape(s), compute(c) {}
  virtual ~Impl() = default;
  virtual double micro_batch(Engine& engine, const std::int32_t* inputs, const std::int32_t* targets,
                             double& in_engine) = 0;
  virtual std::int64_t bytes() const = 0;
};

namespace {

template <class T>
std::int64_t held(const std::vector<T>& v) {
  return static_cast<std::int64_t>(v.capacity() * sizeof(T));
}

// The trainer for storage type T (float: fp32 mode, bf16: bf16 mode).
template <class T>
class Model final : public GptTrainer::Impl {
 public:
  Model(const GptShape& s, GptCompute c) : Impl(s, c) {
    B = s.micro_batch, S = s.seq_len, C = s.hidden, H = s.heads, L = s.layers;
    F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
    V = static_cast<int>(s.vocab);
    N = static_cast<std::int64_t>(B) * S;
    const auto n = static_cast<std::size_t>(N), c1 = static_cast<std::size_t>(C),
               f1 = static_cast<std::size_t>(F);
    encoded.resize(n * c1);
    proj.resize(n * c1);
    lnf.resize(n * c1);
    lnf_mean.resize(n);
    lnf_rstd.resize(n);
    logits.resize(n * static_cast<std::size_t>(V));
    layers.resize(static_cast<std::size_t>(L));
    for (Layer& l : layers) {
      for (auto* v : {&l.ln1, &l.atty, &l.res2, &l.ln2, &l.res3}) v->resize(n * c1);
      l.qkv.resize(3 * n * c1);
      l.fch.resize(n * f1);
      l.fchg.resize(n * f1);
      for (auto* v : {&l.ln1_mean, &l.ln1_rstd, &l.ln2_mean, &l.ln2_rstd}) v->resize(n);
      l.att.resize(static_cast<std::size_t>(B) * H * S * S);
    }
    dres.resize(n * c1);
    dln.resize(n * c1);
    dqkv.resize(3 * n * c1);
    dF.resize(n * f1);
    const std::size_t block = 4 * c1 * c1 + 2 * f1 * c1 + 9 * c1 + f1, block_small = 9 * c1 + f1;
    const std::size_t embed = (static_cast<std::size_t>(V) + static_cast<std::size_t>(S)) * c1;
    widened.resize(half ? block_small : std::max(block, embed));
    grads_embed.resize(embed);
    grads_unit.resize(block);
    const std::size_t wide_out = n * std::max(3 * c1, f1);
    const std::size_t s1 = static_cast<std::size_t>(S);
    scratch.f(std::max(half ? wide_out : 0, s1 * 3 * c1 + s1 * std::max(c1, s1)));
    if (half) scratch.h(std::max(wide_out, n * static_cast<std::size_t>(V)));
    scratch_floats = scratch.floats.size();
    scratch_halves = scratch.halves.size();
    const std::int64_t planned = gpt_trainer_activation_bytes(s, half ? DType::bf16 : DType::f32);
    if (bytes() != planned)
      throw std::logic_error(cat("GPT trainer: its buffers hold ", bytes(), " bytes but "
                                 "gpt_trainer_activation_bytes says ", planned));
  }

  std::int64_t bytes() const override {
    std::int64_t b = held(encoded) + held(proj) + held(lnf) + held(lnf_mean) + held(lnf_rstd) +
                     held(logits) + held(dres) + held(dln) + held(dqkv) + held(dF) +
                     held(widened) + held(grads_embed) + held(grads_unit) +
                     held(scratch.floats) + held(scratch.halves);
    for (const Layer& l : layers)
      b += held(l.ln1) + held(l.qkv) + held(l.atty) + held(l.res2) + held(l.ln2) + held(l.fch) +
           held(l.fchg) + held(l.res3) + held(l.ln1_mean) + held(l.ln1_rstd) + held(l.ln2_mean) +
           held(l.ln2_rstd) + held(l.att);
    return b;
  }

  double micro_batch(Engine& e, const std::int32_t* in, const std::int32_t* tg,
                     double& in_engine) override {
    engine = &e;
    engine_seconds = &in_engine;
    const int fin = L + 1;
    const int n = static_cast<int>(N);
    const std::int64_t nc = N * C;

    // Forward.
    call([&] { e.gather(0); });
    Unit u0 = load(0);
    ops::embedding_forward(encoded.data(), in, u0.t[0], u0.t[1], n, S, C);
    call([&] { e.release(0); });
    const T* x = encoded.data();
    for (int l = 0; l < L; ++l) {
      Layer& a = layers[static_cast<std::size_t>(l)];
      call([&] { e.gather(1 + l); });
      Unit p = load(1 + l);
      ops::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p.f[0], p.f[1], n, C);
      ops::matmul_forward(a.qkv.data(), a.ln1.data(), p.t[2], p.f[3], n, C, 3 * C, scratch);
      ops::attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, S, C, H, scratch);
      ops::matmul_forward(proj.data(), a.atty.data(), p.t[4], p.f[5], n, C, C, scratch);
      ops::residual_forward(a.res2.data(), x, proj.data(), nc);
      ops::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p.f[6], p.f[7], n, C);
      ops::matmul_forward(a.fch.data(), a.ln2.data(), p.t[8], p.f[9], n, C, F, scratch);
      ops::gelu_forward(a.fchg.data(), a.fch.data(), N * F);
      ops::matmul_forward(proj.data(), a.fchg.data(), p.t[10], p.f[11], n, F, C, scratch);
      ops::residual_forward(a.res3.data(), a.res2.data(), proj.data(), nc);
      call([&] { e.release(1 + l); });
      x = a.res3.data();
    }
    call([&] { e.gather(fin); });
    Unit pf = load(fin);
    ops::layernorm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), x, pf.f[0], pf.f[1], n, C);
    call([&] { e.release(fin); });

    // The tied head and the loss; the head's backward at once, while the embedding is here.
    call([&] { e.gather(0); });
    Unit head = load(0);
    ops::logits_forward(logits.data(), lnf.data(), head.t[0], n, C, V);
    const float grad_scale = static_cast<float>(e.loss_scale() / static_cast<double>(N));
    const double loss = ops::crossentropy_forward_backward(logits.data(), tg, n, V, grad_scale) /
                        static_cast<double>(N);
    ops::logits_backward(dln.data(), grads_embed.data(), logits.data(), lnf.data(), head.t[0], n,
                         C, V, scratch);
    call([&] { e.release(0); });

    // Backward, last unit first; dres carries the residual stream's gradient.
    call([&] { e.gather(fin); });
    pf = load(fin);
    std::fill(dres.begin(), dres.end(), 0.0f);
    std::fill(grads_unit.begin(), grads_unit.begin() + 2 * C, 0.0f);
    ops::layernorm_backward(dres.data(), grads_unit.data(), grads_unit.data() + C, dln.data(), x,
                            pf.f[0], lnf_mean.data(), lnf_rstd.data(), n, C);
    store_grads(fin, grads_unit.data());
    call([&] {
      e.release(fin);
      e.reduce_grads(fin);
    });
    for (int l = L - 1; l >= 0; --l) {
      Layer& a = layers[static_cast<std::size_t>(l)];
      const T* xin = l == 0 ? encoded.data() : layers[static_cast<std::size_t>(l) - 1].res3.data();
      call([&] { e.gather(1 + l); });
      Unit p = load(1 + l);
      std::fill(grads_unit.begin(), grads_unit.end(), 0.0f);
      float* g[12];
      grad_slots(1 + l, grads_unit.data(), g);
      // res3 = res2 + mlp.proj(gelu(mlp.fc(ln2(res2))))
      ops::matmul_backward(dF.data(), false, g[10], g[11], dres.data(), a.fchg.data(), p.t[10], n, F, C, scratch);
      ops::gelu_backward(dF.data(), a.fch.data(), dF.data(), N * F);
      ops::matmul_backward(dln.data(), false, g[8], g[9], dF.data(), a.ln2.data(), p.t[8], n, C, F, scratch);
      ops::layernorm_backward(dres.data(), g[6], g[7], dln.data(), a.res2.data(), p.f[6],
                              a.ln2_mean.data(), a.ln2_rstd.data(), n, C);
      // res2 = xin + attn.proj(attention(attn.qkv(ln1(xin))))
      ops::matmul_backward(dln.data(), false, g[4], g[5], dres.data(), a.atty.data(), p.t[4], n, C, C, scratch);
      ops::attention_backward(dqkv.data(), dln.data(), a.qkv.data(), a.att.data(), B, S, C, H, scratch);
      ops::matmul_backward(dln.data(), false, g[2], g[3], dqkv.data(), a.ln1.data(), p.t[2], n, C, 3 * C, scratch);
      ops::layernorm_backward(dres.data(), g[0], g[1], dln.data(), xin, p.f[0], a.ln1_mean.data(),
                              a.ln1_rstd.data(), n, C);
      store_grads(1 + l, grads_unit.data());
      call([&] {
        e.release(1 + l);
        e.reduce_grads(1 + l);
      });
    }
    call([&] { e.gather(0); });
    const std::int64_t vc = static_cast<std::int64_t>(V) * C;
    std::fill(grads_embed.begin() + vc, grads_embed.end(), 0.0f);  // dwpe; dwte holds the head's
    ops::embedding_backward(grads_embed.data(), grads_embed.data() + vc, dres.data(), in, n, S, C);
    store_grads(0, grads_embed.data());
    call([&] {
      e.release(0);
      e.reduce_grads(0);
    });
    if (scratch.floats.size() != scratch_floats || scratch.halves.size() != scratch_halves)
      throw std::logic_error("GPT trainer: an op grew its scratch past the planned size");
    return loss;
  }

 private:
  static constexpr bool half = std::is_same_v<T, bf16>;

  struct Layer {
    std::vector<T> ln1, qkv, atty, res2, ln2, fch, fchg, res3;
    std::vector<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, att;
  };
  // A gathered unit's tensors: t[i] as a GEMM operand (type T), f[i] as fp32 (the 1-D tensors
  // always; every tensor in the fp32 mode, where t[i] == f[i]).
  struct Unit {
    const T* t[12] = {};
    const float* f[12] = {};
  };

  template <class F>
  void call(F&& f) {
    const auto t = Clock::now();
    f();
    *engine_seconds += since(t);
  }

  Unit load(int u) {
    const UnitLayout& ul = engine->layout().units[static_cast<std::size_t>(u)];
    Unit out;
    std::size_t at = 0;
    for (int i = 0; i < ul.param_count; ++i) {
      const TensorView v = engine->param(ul.first_param + i);
      const bool small = v.shape.size() == 1;
      if constexpr (half) {
        if (!small) {
          out.t[i] = v.as<const bf16>().data();
          continue;
        }
      }
      float* w = widened.data() + at;
      to_f32(v, w);
      at += static_cast<std::size_t>(v.numel);
      out.f[i] = w;
      if constexpr (!half) out.t[i] = w;
    }
    return out;
  }

  // Where each param of unit u has its fp32 gradient in `base` (consecutive, unpadded).
  void grad_slots(int u, float* base, float** slots) const {
    const Layout& lay = engine->layout();
    const UnitLayout& ul = lay.units[static_cast<std::size_t>(u)];
    std::int64_t at = 0;
    for (int i = 0; i < ul.param_count; ++i) {
      slots[i] = base + at;
      at += lay.params[static_cast<std::size_t>(ul.first_param + i)].numel;
    }
  }

  void store_grads(int u, const float* base) {
    const Layout& lay = engine->layout();
    const UnitLayout& ul = lay.units[static_cast<std::size_t>(u)];
    std::int64_t at = 0;
    for (int i = 0; i < ul.param_count; ++i) {
      const int p = ul.first_param + i;
      const std::int64_t numel = lay.params[static_cast<std::size_t>(p)].numel;
      if (grad_hook) grad_hook(p, std::span(base + at, static_cast<std::size_t>(numel)));
      TensorView g;
      call([&] { g = engine->grad(p); });
      from_f32(base + at, g);
      at += g.numel;
    }
  }

  int B = 0, S = 0, C = 0, H = 0, L = 0, F = 0, V = 0;
  std::int64_t N = 0;
  std::vector<T> encoded, proj, lnf;
  std::vector<float> lnf_mean, lnf_rstd, logits;
  std::vector<Layer> layers;
  std::vector<float> dres, dln, dqkv, dF;
  std::vector<float> widened, grads_embed, grads_unit;
  ops::Scratch scratch;
  std::size_t scratch_floats = 0, scratch_halves = 0;
  Engine* engine = nullptr;
  double* engine_seconds = nullptr;
};

}  // namespace

GptTrainer::GptTrainer(const GptShape& shape, GptCompute compute) {
  check_gpt_shape(shape);
  if (compute == GptCompute::bf16)
    impl_ = std::make_unique<Model<bf16>>(shape, compute);
  else
    impl_ = std::make_unique<Model<float>>(shape, compute);
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
                    name_of(engine.config().precision), " (enable bf16 in the config, or "
                    "compute in fp32)"));
  if (m.recorded_in != &engine.ledger()) {
    engine.ledger().record_external(Category::activations, m.bytes(), comm::Memory::host);
    m.recorded_in = &engine.ledger();
  }
  double in_engine = 0;
  const double loss = m.micro_batch(engine, inputs.data(), targets.data(), in_engine);
  m.compute_seconds += std::max(0.0, since(start) - in_engine);
  return loss;
}

void GptTrainer::set_grad_hook(std::function<void(int, std::span<const float>)> hook) {
  impl_->grad_hook = std::move(hook);
}

double GptTrainer::compute_seconds() const { return impl_->compute_seconds; }
const GptShape& GptTrainer::shape() const { return impl_->shape; }
GptCompute GptTrainer::compute() const { return impl_->compute; }
std::int64_t GptTrainer::activation_bytes() const { return impl_->bytes(); }

}  // namespace zero::models
