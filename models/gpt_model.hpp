// The GPT trainer's one schedule (internal to models/): every engine call and every op of a
// micro-batch, written once over a backend `Ops` that owns the buffers and runs the ops on the
// CPU (models/gpt.cpp, HostOps) or the GPU (models/gpt_cuda.cpp, DeviceOps), so both paths make
// the same calls in the same order.
//
// Ops provides: Buffer<U> (a typed array in its memory: data(), size(), bytes()), make<U>(n),
// memory (comm::Memory), zero(p, n), widen(view, out) and narrow(in, view) between engine
// views and fp32, tokens(inputs, targets) (the micro-batch's ids where its ops read them),
// crossentropy(...) and take_loss() (the loss sum, read when the micro-batch ends),
// attention_saved_floats(B, heads, T) (what its attention keeps for backward: the CPU's two
// statistics per query row, the GPU's probabilities [B, heads, T, T]), check() (a
// cheap end-of-micro-batch consistency check), scratch_bytes(), recompute_begin() and
// recompute_end() around each block's recomputation and take_recompute_seconds() (their time,
// read after take_loss), and every op of kernels/cpu/gpt_ops.hpp with the same arguments but
// the CPU's Scratch.
//
// With shape.recompute, each block keeps only its input (the previous block's output); its
// inner activations live in one set of buffers that backward refills by running the block's
// forward again from that input, with the same ops in the same order on the same gathered
// parameters, so the gradients, and the weights, are bitwise those of the run without it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/gpt.hpp"

namespace zero::models {

struct GptTrainer::Impl {
  GptShape shape;
  GptCompute compute;
  double compute_seconds = 0;
  double recompute_seconds = 0;  // of compute_seconds: the blocks' forward run again in backward
  const Ledger* recorded_in = nullptr;
  std::function<void(int, std::span<const float>)> grad_hook;
  Impl(const GptShape& s, GptCompute c) : shape(s), compute(c) {}
  virtual ~Impl() = default;
  // One micro-batch; `in_engine` accumulates the seconds spent inside engine calls.
  virtual double micro_batch(Engine& engine, std::span<const std::int32_t> inputs,
                             std::span<const std::int32_t> targets, double& in_engine) = 0;
  virtual std::int64_t bytes() const = 0;
  virtual comm::Memory memory() const = 0;
};

namespace detail {

// The trainer for storage type T (float: fp32 mode, bf16: bf16 mode) on backend Ops.
template <class T, class Ops>
class GptModel final : public GptTrainer::Impl {
  template <class U>
  using Buf = typename Ops::template Buffer<U>;

 public:
  GptModel(const GptShape& s, GptCompute c) : Impl(s, c), ops(s, half) {
    B = s.micro_batch, S = s.seq_len, C = s.hidden, H = s.heads, L = s.layers;
    F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * C;
    V = static_cast<int>(s.vocab);
    N = static_cast<std::int64_t>(B) * S;
    const auto n = static_cast<std::size_t>(N), c1 = static_cast<std::size_t>(C),
               f1 = static_cast<std::size_t>(F);
    encoded = ops.template make<T>(n * c1);
    proj = ops.template make<T>(n * c1);
    lnf = ops.template make<T>(n * c1);
    lnf_mean = ops.template make<float>(n);
    lnf_rstd = ops.template make<float>(n);
    logits = ops.template make<float>(n * static_cast<std::size_t>(V));
    layers.resize(s.recompute ? 1 : static_cast<std::size_t>(L));
    outs.resize(static_cast<std::size_t>(L));
    for (Buf<T>& o : outs) o = ops.template make<T>(n * c1);
    for (Layer& l : layers) {
      for (auto* v : {&l.ln1, &l.atty, &l.res2, &l.ln2}) *v = ops.template make<T>(n * c1);
      l.qkv = ops.template make<T>(3 * n * c1);
      l.fch = ops.template make<T>(n * f1);
      l.fchg = ops.template make<T>(n * f1);
      for (auto* v : {&l.ln1_mean, &l.ln1_rstd, &l.ln2_mean, &l.ln2_rstd})
        *v = ops.template make<float>(n);
      l.att = ops.template make<float>(Ops::attention_saved_floats(B, H, S));
    }
    dres = ops.template make<float>(n * c1);
    dln = ops.template make<float>(n * c1);
    dqkv = ops.template make<float>(3 * n * c1);
    dF = ops.template make<float>(n * f1);
    const std::size_t block = 4 * c1 * c1 + 2 * f1 * c1 + 9 * c1 + f1, block_small = 9 * c1 + f1;
    const std::size_t embed = (static_cast<std::size_t>(V) + static_cast<std::size_t>(S)) * c1;
    widened = ops.template make<float>(half ? block_small : std::max(block, embed));
    grads_embed = ops.template make<float>(embed);
    grads_unit = ops.template make<float>(block);
  }

  std::int64_t bytes() const override {
    std::int64_t b = encoded.bytes() + proj.bytes() + lnf.bytes() + lnf_mean.bytes() +
                     lnf_rstd.bytes() + logits.bytes() + dres.bytes() + dln.bytes() + dqkv.bytes() +
                     dF.bytes() + widened.bytes() + grads_embed.bytes() + grads_unit.bytes() +
                     ops.scratch_bytes();
    for (const Layer& l : layers)
      b += l.ln1.bytes() + l.qkv.bytes() + l.atty.bytes() + l.res2.bytes() + l.ln2.bytes() +
           l.fch.bytes() + l.fchg.bytes() + l.ln1_mean.bytes() + l.ln1_rstd.bytes() +
           l.ln2_mean.bytes() + l.ln2_rstd.bytes() + l.att.bytes();
    for (const Buf<T>& o : outs) b += o.bytes();
    return b;
  }
  comm::Memory memory() const override { return Ops::memory; }

  double micro_batch(Engine& e, std::span<const std::int32_t> inputs,
                     std::span<const std::int32_t> targets, double& in_engine) override {
    engine = &e;
    engine_seconds = &in_engine;
    const auto [in, tg] = ops.tokens(inputs, targets);
    const int fin = L + 1;
    const int n = static_cast<int>(N);
    const std::int64_t nc = N * C;

    // Forward.
    call([&] { e.gather(0); });
    Unit u0 = load(0);
    ops.embedding_forward(encoded.data(), in, u0.t[0], u0.t[1], n, S, C);
    call([&] { e.release(0); });
    const T* x = encoded.data();
    for (int l = 0; l < L; ++l) {
      call([&] { e.gather(1 + l); });
      const Unit p = load(1 + l);
      block_forward(inner(l), x, p);
      ops.matmul_forward(proj.data(), inner(l).fchg.data(), p.t[10], p.f[11], n, F, C);
      ops.residual_forward(out(l), inner(l).res2.data(), proj.data(), nc);
      call([&] { e.release(1 + l); });
      x = out(l);
    }
    call([&] { e.gather(fin); });
    Unit pf = load(fin);
    ops.layernorm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), x, pf.f[0], pf.f[1], n, C);
    call([&] { e.release(fin); });

    // The tied head and the loss; the head's backward at once, while the embedding is here.
    call([&] { e.gather(0); });
    Unit head = load(0);
    ops.logits_forward(logits.data(), lnf.data(), head.t[0], n, C, V);
    const float grad_scale = static_cast<float>(e.loss_scale() / static_cast<double>(N));
    ops.crossentropy(logits.data(), tg, n, V, grad_scale);
    ops.logits_backward(dln.data(), grads_embed.data(), logits.data(), lnf.data(), head.t[0], n, C,
                        V);
    call([&] { e.release(0); });

    // Backward, last unit first; dres carries the residual stream's gradient.
    call([&] { e.gather(fin); });
    pf = load(fin);
    ops.zero(dres.data(), dres.size());
    ops.zero(grads_unit.data(), 2 * static_cast<std::size_t>(C));
    ops.layernorm_backward(dres.data(), grads_unit.data(), grads_unit.data() + C, dln.data(), x,
                           pf.f[0], lnf_mean.data(), lnf_rstd.data(), n, C);
    store_grads(fin, grads_unit.data());
    call([&] {
      e.release(fin);
      e.reduce_grads(fin);
    });
    for (int l = L - 1; l >= 0; --l) {
      const T* xin = l == 0 ? encoded.data() : out(l - 1);
      call([&] { e.gather(1 + l); });
      const Unit p = load(1 + l);
      // The block's inner activations again, from its kept input; the last block's are still
      // in the shared set from forward.
      if (shape.recompute && l != L - 1) {
        ops.recompute_begin();
        block_forward(inner(l), xin, p);
        ops.recompute_end();
      }
      block_backward(1 + l, inner(l), xin, p);
      store_grads(1 + l, grads_unit.data());
      call([&] {
        e.release(1 + l);
        e.reduce_grads(1 + l);
      });
    }
    call([&] { e.gather(0); });
    const std::int64_t vc = static_cast<std::int64_t>(V) * C;
    ops.zero(grads_embed.data() + vc, static_cast<std::size_t>(S) * C);  // dwpe; dwte: the head's
    ops.embedding_backward(grads_embed.data(), grads_embed.data() + vc, dres.data(), in, n, S, C);
    store_grads(0, grads_embed.data());
    call([&] {
      e.release(0);
      e.reduce_grads(0);
    });
    ops.check();
    const double loss = ops.take_loss() / static_cast<double>(N);
    recompute_seconds += ops.take_recompute_seconds();
    return loss;
  }

 private:
  static constexpr bool half = std::is_same_v<T, bf16>;

  // A block's inner activations, kept for its backward: one per block, or (recomputation) one
  // set that every block's forward fills in turn.
  struct Layer {
    Buf<T> ln1, qkv, atty, res2, ln2, fch, fchg;
    Buf<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    Buf<float> att;  // what attention keeps for its backward (Ops::attention_saved_floats)
  };
  // A gathered unit's tensors: t[i] as a GEMM operand (type T), f[i] as fp32 (the 1-D tensors
  // always; every tensor in the fp32 mode, where t[i] == f[i]).
  struct Unit {
    const T* t[12] = {};
    const float* f[12] = {};
  };

  Layer& inner(int l) { return layers[shape.recompute ? 0 : static_cast<std::size_t>(l)]; }
  T* out(int l) { return outs[static_cast<std::size_t>(l)].data(); }

  // A block's forward from its input x up to the MLP's GELU: every activation its backward
  // reads (the MLP's projection and the residual after it, which backward does not read,
  // follow in micro_batch).
  void block_forward(Layer& a, const T* x, const Unit& p) {
    const int n = static_cast<int>(N);
    ops.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p.f[0], p.f[1],
                          n, C);
    ops.matmul_forward(a.qkv.data(), a.ln1.data(), p.t[2], p.f[3], n, C, 3 * C);
    ops.attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, S, C, H);
    ops.matmul_forward(proj.data(), a.atty.data(), p.t[4], p.f[5], n, C, C);
    ops.residual_forward(a.res2.data(), x, proj.data(), N * C);
    ops.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                          p.f[6], p.f[7], n, C);
    ops.matmul_forward(a.fch.data(), a.ln2.data(), p.t[8], p.f[9], n, C, F);
    ops.gelu_forward(a.fchg.data(), a.fch.data(), N * F);
  }

  // Unit u's (a block's) backward: its gradients into grads_unit, dres carried through.
  void block_backward(int u, Layer& a, const T* xin, const Unit& p) {
    const int n = static_cast<int>(N);
    ops.zero(grads_unit.data(), grads_unit.size());
    float* g[12];
    grad_slots(u, grads_unit.data(), g);
    // out = res2 + mlp.proj(gelu(mlp.fc(ln2(res2))))
    ops.matmul_backward(dF.data(), false, g[10], g[11], dres.data(), a.fchg.data(), p.t[10], n, F,
                        C);
    ops.gelu_backward(dF.data(), a.fch.data(), dF.data(), N * F);
    ops.matmul_backward(dln.data(), false, g[8], g[9], dF.data(), a.ln2.data(), p.t[8], n, C, F);
    ops.layernorm_backward(dres.data(), g[6], g[7], dln.data(), a.res2.data(), p.f[6],
                           a.ln2_mean.data(), a.ln2_rstd.data(), n, C);
    // res2 = xin + attn.proj(attention(attn.qkv(ln1(xin))))
    ops.matmul_backward(dln.data(), false, g[4], g[5], dres.data(), a.atty.data(), p.t[4], n, C,
                        C);
    ops.attention_backward(dqkv.data(), dln.data(), a.qkv.data(), a.atty.data(), a.att.data(), B, S,
                           C, H);
    ops.matmul_backward(dln.data(), false, g[2], g[3], dqkv.data(), a.ln1.data(), p.t[2], n, C,
                        3 * C);
    ops.layernorm_backward(dres.data(), g[0], g[1], dln.data(), xin, p.f[0], a.ln1_mean.data(),
                           a.ln1_rstd.data(), n, C);
  }

  template <class F>
  void call(F&& f) {
    const auto t = std::chrono::steady_clock::now();
    f();
    *engine_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  Unit load(int u) {
    const UnitLayout& ul = engine->layout().units[static_cast<std::size_t>(u)];
    Unit out;
    std::size_t at = 0;
    for (int i = 0; i < ul.param_count; ++i) {
      const TensorView v = engine->param(ul.first_param + i);
      if (v.memory != Ops::memory)
        throw Error(cat("the GPT trainer computes in ",
                        Ops::memory == comm::Memory::device ? "device" : "host",
                        " memory but the engine keeps its parameters in ",
                        v.memory == comm::Memory::device ? "device" : "host",
                        " memory (give both "
                        "the same: GptTrainer's `where` and EngineOptions::memory)"));
      const bool small = v.shape.size() == 1;
      if constexpr (half) {
        if (!small) {
          out.t[i] = v.as<const bf16>().data();
          continue;
        }
      }
      float* w = widened.data() + at;
      ops.widen(v, w);
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
      if (grad_hook)
        ops.inspect(base + at, static_cast<std::size_t>(numel),
                    [&](std::span<const float> g) { grad_hook(p, g); });
      TensorView g;
      call([&] { g = engine->grad(p); });
      ops.narrow(base + at, g);
      at += numel;
    }
  }

  Ops ops;
  int B = 0, S = 0, C = 0, H = 0, L = 0, F = 0, V = 0;
  std::int64_t N = 0;
  Buf<T> encoded, proj, lnf;
  Buf<float> lnf_mean, lnf_rstd, logits;
  std::vector<Layer> layers;
  std::vector<Buf<T>> outs;  // each block's output: the next block's (or ln_f's) input
  Buf<float> dres, dln, dqkv, dF;
  Buf<float> widened, grads_embed, grads_unit;
  Engine* engine = nullptr;
  double* engine_seconds = nullptr;
};

}  // namespace detail
}  // namespace zero::models
