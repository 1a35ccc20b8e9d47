// The GPT's device operations (kernels/cuda/gpt_ops.hpp) against kernels::cpu::gpt's CPU loops,
// for both storage types (float, bf16), and every device result again from the same inputs,
// bit for bit. Exits 77 (meson: skipped) when no CUDA device is present.
//
// Tolerances. Bitwise where the device does the CPU's fp32 operations in the CPU's order:
// embedding forward and backward, GELU forward and backward (kernels/gpt_math.hpp's own exp and
// tanh, the same bits on both sides), the residual add. Elsewhere the sums are ordered
// differently (cuBLASLt's blocking; the warp, block and chunk trees of
// kernels/cuda/gpt_common.cuh) and the cross-entropy's logf is CUDA's, so:
//   fp32 results (statistics, probabilities, logits, every gradient, both modes):
//       max |gpu - cpu| <= 1e-5 · max |cpu| over the tensor;
//   bf16 results (the kept activations): per element
//       |gpu - cpu| <= 2 bf16 ulps of |cpu| + 1e-5 · max |cpu|
//     (the fp32 value before rounding moves within the fp32 bound, and its rounding to bf16 by
//     at most one ulp more);
//   the loss: |gpu - cpu| <= 1e-5 · |cpu|.
#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gpt_ops.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gpt_ops.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/bf16.hpp"
#include "attention_reference.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels;
using cuda::DeviceBuffer;
using zero::kernels::test::uniform_values;
namespace cg = zero::kernels::cuda::gpt;
namespace hg = zero::kernels::cpu::gpt;

namespace {

struct Shape {
  int B, T, C, NH, V;
  int N() const { return B * T; }
};
// Odd sequence lengths and vocabularies, rows both under and over one 32-row chunk, head sizes
// 12, 32 and 32.
const std::vector<Shape> kShapes = {{2, 33, 48, 4, 97}, {3, 64, 64, 2, 300}, {1, 7, 96, 3, 1000}};

std::size_t sz(std::initializer_list<int> dims) {
  std::size_t n = 1;
  for (int d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

template <class T>
std::vector<T> stored(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = narrow<T>(x[i]);
  return out;
}
template <class T>
std::vector<T> values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  return stored<T>(uniform_values(n, seed, scale));
}
std::vector<std::int32_t> tokens(std::size_t n, int V, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, V - 1);
  std::vector<std::int32_t> t(n);
  for (auto& e : t) e = pick(rng);
  return t;
}

// A device copy of host data, uploaded and downloaded in the order of `stream`.
template <class T>
struct Dev {
  DeviceBuffer buf;
  std::size_t n;
  explicit Dev(std::size_t count) : buf(std::max<std::size_t>(count, 1) * sizeof(T)), n(count) {}
  Dev(const std::vector<T>& host, cuda::StreamRef s) : Dev(host.size()) { put(host, s); }
  void put(const std::vector<T>& host, cuda::StreamRef s) {
    buf.upload_async(host.data(), host.size() * sizeof(T), s);
  }
  T* ptr() const { return buf.as<T>(); }
  std::vector<T> get(const cuda::Stream& s) const {
    std::vector<T> out(n);
    buf.download_async(out.data(), n * sizeof(T), s);
    s.synchronize();
    return out;
  }
};

// The cuBLASLt context and scratch enough for every op on `shape` (matmuls up to OC columns).
template <class T>
struct Ws {
  cuda::GemmContext gemm;
  DeviceBuffer buf;
  cg::Workspace ws;
  Ws(const Shape& s, int OC)
      : buf(std::max({cg::matmul_forward_scratch_bytes<T>(s.N(), OC),
                      cg::matmul_backward_scratch_bytes<T>(s.N(), OC),
                      cg::attention_forward_scratch_bytes<T>(s.T, s.C),
                      cg::attention_backward_scratch_bytes<T>(s.T, s.C, s.NH),
                      cg::logits_backward_scratch_bytes<T>(s.N(), s.V),
                      cg::layernorm_backward_scratch_bytes(s.N(), s.C),
                      cg::embedding_backward_scratch_bytes(s.N()),
                      cg::crossentropy_scratch_bytes(s.N()), std::size_t{256}})) {
    ws = cg::Workspace{&gemm, buf.data(), buf.bytes()};
  }
};

// "" when the two agree bit for bit, else the first difference.
template <class U>
std::string bitwise(const std::vector<U>& gpu, const std::vector<U>& cpu) {
  if (gpu.size() != cpu.size()) return cat("sizes differ: ", gpu.size(), " vs ", cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i)
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(U)) != 0)
      return cat("element ", i, ": ", widen(gpu[i]), " vs ", widen(cpu[i]));
  return "";
}
std::string bitwise(const std::vector<double>& a, const std::vector<double>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0 && a.size() == b.size()
             ? ""
             : "doubles differ";
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The fp32 rule: max |gpu - cpu| <= 1e-5 · max |cpu|.
std::string close(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  if (gpu.size() != cpu.size()) return cat("sizes differ: ", gpu.size(), " vs ", cpu.size());
  const double bound = 1e-5 * max_abs(cpu);
  for (std::size_t i = 0; i < gpu.size(); ++i)
    if (!(std::fabs(static_cast<double>(gpu[i]) - cpu[i]) <= bound))
      return cat("element ", i, ": GPU ", gpu[i], ", CPU ", cpu[i], " (bound ", bound, ")");
  return "";
}
// The bf16 rule: |gpu - cpu| <= 2 ulps of cpu + 1e-5 · max |cpu|, per element.
std::string close(const std::vector<bf16>& gpu, const std::vector<bf16>& cpu) {
  if (gpu.size() != cpu.size()) return cat("sizes differ: ", gpu.size(), " vs ", cpu.size());
  std::vector<float> wide(cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) wide[i] = to_float(cpu[i]);
  const double floor = 1e-5 * max_abs(wide);
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const int e = (cpu[i].bits >> 7) & 0xff;
    const double ulp = std::ldexp(1.0, std::max(e, 1) - 134);  // 2^(exponent - 7)
    if (!(std::fabs(static_cast<double>(to_float(gpu[i])) - wide[i]) <= 2 * ulp + floor))
      return cat("element ", i, ": GPU ", to_float(gpu[i]), ", CPU ", wide[i]);
  }
  return "";
}

#define REQUIRE_EMPTY(expr)        \
  do {                             \
    const std::string d_ = (expr); \
    INFO(#expr << ": " << d_);     \
    REQUIRE(d_.empty());           \
  } while (false)

}  // namespace

TEMPLATE_TEST_CASE("GPU embedding forward and backward equal the CPU's bitwise, run after run",
                   "[gpt]", float, bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (const Shape& s : kShapes)
    for (int V : {s.V, 5}) {  // 5: long runs of one token in the backward's walk
      INFO("B " << s.B << " T " << s.T << " C " << s.C << " V " << V);
      Ws<T> w(s, s.C);
      const int N = s.N();
      const auto tok = tokens(sz({N}), V, 1);
      const auto wte = values<T>(sz({V, s.C}), 2), wpe = values<T>(sz({s.T, s.C}), 3);
      const auto dout = uniform_values(sz({N, s.C}), 4);
      const auto dwte0 = uniform_values(sz({V, s.C}), 5), dwpe0 = uniform_values(sz({s.T, s.C}), 6);

      std::vector<T> out(sz({N, s.C}));
      hg::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), N, s.T, s.C);
      std::vector<float> dwte = dwte0, dwpe = dwpe0;
      hg::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), N, s.T, s.C);

      Dev<std::int32_t> d_tok(tok, stream);
      Dev<T> d_wte(wte, stream), d_wpe(wpe, stream), d_out(out.size());
      Dev<float> d_dout(dout, stream), d_dwte(dwte.size()), d_dwpe(dwpe.size());
      for (int run = 0; run < 2; ++run) {
        d_dwte.put(dwte0, stream);
        d_dwpe.put(dwpe0, stream);
        cg::embedding_forward(d_out.ptr(), d_tok.ptr(), d_wte.ptr(), d_wpe.ptr(), N, s.T, s.C,
                              stream);
        cg::embedding_backward(d_dwte.ptr(), d_dwpe.ptr(), d_dout.ptr(), d_tok.ptr(), N, s.T, s.C,
                               w.ws, stream);
        REQUIRE_EMPTY(bitwise(d_out.get(stream), out));
        REQUIRE_EMPTY(bitwise(d_dwte.get(stream), dwte));
        REQUIRE_EMPTY(bitwise(d_dwpe.get(stream), dwpe));
      }
    }
}

TEMPLATE_TEST_CASE("GPU LayerNorm forward and backward agree with the CPU and with themselves",
                   "[gpt]", float, bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (const Shape& s : kShapes) {
    INFO("N " << s.N() << " C " << s.C);
    Ws<T> w(s, s.C);
    const int N = s.N(), C = s.C;
    std::vector<float> x = uniform_values(sz({N, C}), 11);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>(i / C % 5) - 2.0f;
    const auto inp = stored<T>(x);
    std::vector<float> weight = uniform_values(sz({C}), 12, 0.2f);
    for (float& e : weight) e += 1.0f;
    const auto bias = uniform_values(sz({C}), 13), dout = uniform_values(sz({N, C}), 14);
    const auto dinp0 = uniform_values(sz({N, C}), 15), dw0 = uniform_values(sz({C}), 16),
               db0 = uniform_values(sz({C}), 17);

    std::vector<T> out(sz({N, C}));
    std::vector<float> mean(sz({N})), rstd(sz({N}));
    hg::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                          bias.data(), N, C);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    hg::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                           weight.data(), mean.data(), rstd.data(), N, C);

    Dev<T> d_inp(inp, stream), d_out(out.size());
    Dev<float> d_w(weight, stream), d_b(bias, stream), d_dout(dout, stream), d_mean(mean.size()),
        d_rstd(rstd.size()), d_cmean(mean, stream), d_crstd(rstd, stream), d_dinp(dinp.size()),
        d_dw(dw.size()), d_db(db.size());
    std::vector<T> first_out;
    std::vector<float> first_dinp, first_dw, first_db;
    for (int run = 0; run < 2; ++run) {
      d_dinp.put(dinp0, stream);
      d_dw.put(dw0, stream);
      d_db.put(db0, stream);
      cg::layernorm_forward(d_out.ptr(), d_mean.ptr(), d_rstd.ptr(), d_inp.ptr(), d_w.ptr(),
                            d_b.ptr(), N, C, stream);
      // The backward from the CPU's statistics, so that it sees the CPU's inputs exactly.
      cg::layernorm_backward(d_dinp.ptr(), d_dw.ptr(), d_db.ptr(), d_dout.ptr(), d_inp.ptr(),
                             d_w.ptr(), d_cmean.ptr(), d_crstd.ptr(), N, C, w.ws, stream);
      const auto g_out = d_out.get(stream);
      const auto g_dinp = d_dinp.get(stream), g_dw = d_dw.get(stream), g_db = d_db.get(stream);
      REQUIRE_EMPTY(close(g_out, out));
      REQUIRE_EMPTY(close(d_mean.get(stream), mean));
      REQUIRE_EMPTY(close(d_rstd.get(stream), rstd));
      REQUIRE_EMPTY(close(g_dinp, dinp));
      REQUIRE_EMPTY(close(g_dw, dw));
      REQUIRE_EMPTY(close(g_db, db));
      if (run == 0) {
        first_out = g_out, first_dinp = g_dinp, first_dw = g_dw, first_db = g_db;
      } else {
        REQUIRE_EMPTY(bitwise(g_out, first_out));
        REQUIRE_EMPTY(bitwise(g_dinp, first_dinp));
        REQUIRE_EMPTY(bitwise(g_dw, first_dw));
        REQUIRE_EMPTY(bitwise(g_db, first_db));
      }
    }
  }
}

TEMPLATE_TEST_CASE("GPU linear layers agree with the CPU and with themselves", "[gpt]", float,
                   bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (const Shape& s : kShapes)
    for (auto [C, OC] : {std::pair{s.C, 3 * s.C}, std::pair{s.C + 5, 2 * s.C + 3}})
      for (bool with_bias : {true, false})
        for (bool accumulate : {false, true}) {
          const int N = s.N();
          INFO("N " << N << " C " << C << " OC " << OC << " bias " << with_bias << " accumulate "
                    << accumulate);
          Ws<T> w(s, OC);
          const auto inp = values<T>(sz({N, C}), 21), weight = values<T>(sz({OC, C}), 22, 0.3f);
          const auto bias = with_bias ? uniform_values(sz({OC}), 23) : std::vector<float>(sz({OC}));
          const auto dout = uniform_values(sz({N, OC}), 24), dinp0 = uniform_values(sz({N, C}), 25);

          hg::Scratch scratch;
          std::vector<T> out(sz({N, OC}));
          hg::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC, scratch);
          std::vector<float> dinp = dinp0, dweight(sz({OC, C})), dbias(sz({OC}));
          hg::matmul_backward(dinp.data(), accumulate, dweight.data(), dbias.data(), dout.data(),
                              inp.data(), weight.data(), N, C, OC, scratch);

          Dev<T> d_inp(inp, stream), d_weight(weight, stream), d_out(out.size());
          Dev<float> d_bias(bias, stream), d_dout(dout, stream), d_dinp(dinp.size()),
              d_dweight(dweight.size()), d_dbias(dbias.size());
          std::vector<T> first_out;
          std::vector<float> first_dinp, first_dweight, first_dbias;
          for (int run = 0; run < 2; ++run) {
            d_dinp.put(dinp0, stream);
            // A null bias on the device against a zero bias on the CPU.
            cg::matmul_forward(d_out.ptr(), d_inp.ptr(), d_weight.ptr(),
                               with_bias ? d_bias.ptr() : nullptr, N, C, OC, w.ws, stream);
            cg::matmul_backward(d_dinp.ptr(), accumulate, d_dweight.ptr(), d_dbias.ptr(),
                                d_dout.ptr(), d_inp.ptr(), d_weight.ptr(), N, C, OC, w.ws, stream);
            const auto g_out = d_out.get(stream);
            const auto g_dinp = d_dinp.get(stream), g_dweight = d_dweight.get(stream),
                       g_dbias = d_dbias.get(stream);
            REQUIRE_EMPTY(close(g_out, out));
            REQUIRE_EMPTY(close(g_dinp, dinp));
            REQUIRE_EMPTY(close(g_dweight, dweight));
            REQUIRE_EMPTY(close(g_dbias, dbias));
            if (run == 0) {
              first_out = g_out, first_dinp = g_dinp, first_dweight = g_dweight,
              first_dbias = g_dbias;
            } else {
              REQUIRE_EMPTY(bitwise(g_out, first_out));
              REQUIRE_EMPTY(bitwise(g_dinp, first_dinp));
              REQUIRE_EMPTY(bitwise(g_dweight, first_dweight));
              REQUIRE_EMPTY(bitwise(g_dbias, first_dbias));
            }
          }
        }
}

TEMPLATE_TEST_CASE("GPU causal attention agrees with the CPU and with itself", "[gpt]", float,
                   bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (const Shape& s : kShapes) {
    INFO("B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
    Ws<T> w(s, s.C);
    const int N = s.N(), C = s.C;
    const auto qkv = values<T>(sz({N, 3 * C}), 31, 1.5f);
    const auto dout = uniform_values(sz({N, C}), 32);

    std::vector<T> out(sz({N, C})), whole_out(sz({N, C}));
    std::vector<float> saved(hg::attention_saved_floats(s.B, s.NH, s.T)), dqkv(sz({N, 3 * C}));
    hg::attention_forward(out.data(), saved.data(), qkv.data(), s.B, s.T, C, s.NH);
    hg::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), saved.data(), s.B, s.T,
                           C, s.NH);
    // The CPU's tiled attention keeps no probabilities: the whole-matrix one's, for the GPU's.
    std::vector<float> att(sz({s.B, s.NH, s.T, s.T}));
    test::whole_forward(whole_out.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH);

    Dev<T> d_qkv(qkv, stream), d_out(out.size());
    Dev<float> d_att(att.size()), d_catt(att, stream), d_dout(dout, stream), d_dqkv(dqkv.size());
    std::vector<T> first_out;
    std::vector<float> first_att, first_dqkv;
    for (int run = 0; run < 2; ++run) {
      cg::attention_forward(d_out.ptr(), d_att.ptr(), d_qkv.ptr(), s.B, s.T, C, s.NH, w.ws, stream);
      cg::attention_backward(d_dqkv.ptr(), d_dout.ptr(), d_qkv.ptr(), d_catt.ptr(), s.B, s.T, C,
                             s.NH, w.ws, stream);
      const auto g_out = d_out.get(stream);
      const auto g_att = d_att.get(stream), g_dqkv = d_dqkv.get(stream);
      REQUIRE_EMPTY(close(g_out, out));
      REQUIRE_EMPTY(close(g_att, att));
      REQUIRE_EMPTY(close(g_dqkv, dqkv));
      if (run == 0) {
        first_out = g_out, first_att = g_att, first_dqkv = g_dqkv;
      } else {
        REQUIRE_EMPTY(bitwise(g_out, first_out));
        REQUIRE_EMPTY(bitwise(g_att, first_att));
        REQUIRE_EMPTY(bitwise(g_dqkv, first_dqkv));
      }
    }
  }
}

TEMPLATE_TEST_CASE("GPU GELU and the residual add equal the CPU's bitwise, run after run", "[gpt]",
                   float, bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4099}}) {
    INFO("n " << n);
    const auto x = values<T>(n, 41, 4.0f), y = values<T>(n, 42);
    const auto dout = uniform_values(n, 43);
    std::vector<T> g(n), r(n);
    std::vector<float> dx(n);
    hg::gelu_forward(g.data(), x.data(), static_cast<std::int64_t>(n));
    hg::gelu_backward(dx.data(), x.data(), dout.data(), static_cast<std::int64_t>(n));
    hg::residual_forward(r.data(), x.data(), y.data(), static_cast<std::int64_t>(n));

    Dev<T> d_x(x, stream), d_y(y, stream), d_g(n), d_r(n);
    Dev<float> d_dout(n), d_dx(n);
    for (int run = 0; run < 2; ++run) {  // equal to the CPU both times: repeatable too
      d_dout.put(dout, stream);
      const auto m = static_cast<std::int64_t>(n);
      cg::gelu_forward(d_g.ptr(), d_x.ptr(), m, stream);
      cg::gelu_backward(d_dx.ptr(), d_x.ptr(), d_dout.ptr(), m, stream);
      cg::gelu_backward(d_dout.ptr(), d_x.ptr(), d_dout.ptr(), m, stream);  // in place
      cg::residual_forward(d_r.ptr(), d_x.ptr(), d_y.ptr(), m, stream);
      const auto g_g = d_g.get(stream);
      const auto g_dx = d_dx.get(stream);
      REQUIRE_EMPTY(bitwise(g_g, g));
      REQUIRE_EMPTY(bitwise(g_dx, dx));
      REQUIRE_EMPTY(bitwise(d_dout.get(stream), g_dx));
      REQUIRE_EMPTY(bitwise(d_r.get(stream), r));
    }
  }
}

TEMPLATE_TEST_CASE("GPU tied head and cross-entropy agree with the CPU and with themselves",
                   "[gpt]", float, bf16) {
  using T = TestType;
  cuda::Stream stream;
  for (const Shape& s : kShapes) {
    INFO("N " << s.N() << " C " << s.C << " V " << s.V);
    Ws<T> w(s, s.C);
    const int N = s.N(), C = s.C, V = s.V;
    const auto inp = values<T>(sz({N, C}), 51), wte = values<T>(sz({V, C}), 52, 0.5f);
    const auto tgt = tokens(sz({N}), V, 53);
    const float grad_scale = 1024.0f / static_cast<float>(N);

    hg::Scratch scratch;
    std::vector<float> logits(sz({N, V})), dinp(sz({N, C})), dwte(sz({V, C}));
    hg::logits_forward(logits.data(), inp.data(), wte.data(), N, C, V);
    const std::vector<float> logits_cpu = logits;
    const double loss =
        hg::crossentropy_forward_backward(logits.data(), tgt.data(), N, V, grad_scale);
    hg::logits_backward(dinp.data(), dwte.data(), logits.data(), inp.data(), wte.data(), N, C, V,
                        scratch);

    Dev<T> d_inp(inp, stream), d_wte(wte, stream);
    Dev<std::int32_t> d_tgt(tgt, stream);
    Dev<float> d_logits(logits.size()), d_dl(logits.size()), d_dinp(dinp.size()),
        d_dwte(dwte.size());
    Dev<double> d_loss(1);
    std::vector<float> first_logits, first_dl, first_dinp, first_dwte;
    std::vector<double> first_loss;
    for (int run = 0; run < 2; ++run) {
      cg::logits_forward(d_logits.ptr(), d_inp.ptr(), d_wte.ptr(), N, C, V, w.ws, stream);
      const auto g_logits = d_logits.get(stream);
      // The loss and the head's backward from the CPU's logits and dlogits.
      d_dl.put(logits_cpu, stream);
      cg::crossentropy_forward_backward(d_dl.ptr(), d_tgt.ptr(), N, V, grad_scale, d_loss.ptr(),
                                        w.ws, stream);
      const auto g_dl = d_dl.get(stream);
      const auto g_loss = d_loss.get(stream);
      d_dl.put(logits, stream);
      cg::logits_backward(d_dinp.ptr(), d_dwte.ptr(), d_dl.ptr(), d_inp.ptr(), d_wte.ptr(), N, C, V,
                          w.ws, stream);
      const auto g_dinp = d_dinp.get(stream), g_dwte = d_dwte.get(stream);
      REQUIRE_EMPTY(close(g_logits, logits_cpu));
      REQUIRE_EMPTY(close(g_dl, logits));
      INFO("loss GPU " << g_loss[0] << ", CPU " << loss);
      REQUIRE(std::fabs(g_loss[0] - loss) <= 1e-5 * std::fabs(loss));
      REQUIRE_EMPTY(close(g_dinp, dinp));
      REQUIRE_EMPTY(close(g_dwte, dwte));
      if (run == 0) {
        first_logits = g_logits, first_dl = g_dl, first_dinp = g_dinp, first_dwte = g_dwte;
        first_loss = g_loss;
      } else {
        REQUIRE_EMPTY(bitwise(g_logits, first_logits));
        REQUIRE_EMPTY(bitwise(g_dl, first_dl));
        REQUIRE_EMPTY(bitwise(g_loss, first_loss));
        REQUIRE_EMPTY(bitwise(g_dinp, first_dinp));
        REQUIRE_EMPTY(bitwise(g_dwte, first_dwte));
      }
    }
  }
}

TEST_CASE("GPT device ops refuse a short workspace and a bad head count, queuing nothing") {
  cuda::Stream stream;
  cuda::GemmContext gemm;
  Dev<bf16> a(64 * 64);
  Dev<float> f(3 * 64 * 64), att(64 * 64);
  cg::Workspace none{&gemm, nullptr, 0};
  REQUIRE(cg::matmul_forward_scratch_bytes<float>(64, 64) == 0);
  REQUIRE(cg::matmul_forward_scratch_bytes<bf16>(64, 64) >= 64 * 64 * sizeof(float));
  REQUIRE_THROWS_AS(
      cg::matmul_forward(a.ptr(), a.ptr(), a.ptr(), nullptr, 64, 64, 64, none, stream), Error);
  REQUIRE_THROWS_AS(cg::layernorm_backward(f.ptr(), f.ptr(), f.ptr(), f.ptr(), f.ptr(), f.ptr(),
                                           f.ptr(), f.ptr(), 64, 64, none, stream),
                    Error);
  cg::Workspace no_gemm{nullptr, nullptr, 0};
  REQUIRE_THROWS_AS(cg::logits_forward(f.ptr(), f.ptr(), f.ptr(), 8, 8, 8, no_gemm, stream), Error);
  REQUIRE_THROWS_AS(cg::attention_forward(f.ptr(), att.ptr(), f.ptr(), 1, 8, 30, 4, none, stream),
                    Error);
  REQUIRE_THROWS_AS(
      cg::crossentropy_forward_backward(f.ptr(), nullptr, 4, 4, 1.0f, nullptr, none, stream),
      Error);
  stream.synchronize();
}

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::cout << "no CUDA device (or driver): the GPU GPT-op tests are skipped\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
