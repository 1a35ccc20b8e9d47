// Tests of the BF16 GEMM (kernels/cpu/gemm_bf16.hpp): each backend against an fp64 reference of
// the same bf16 inputs, the two backends against each other, the bf16 output, and the rule that
// picks a backend. Where oneDNN has no bf16 matmul (below AVX-512 with oneDNN 2.x), its backend's
// code is still run, with fp32 sources (gemm_bf16_onednn_f32): the same descriptors, strides,
// output scale, sum post-op and cache.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_bf16.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels::cpu;
using zero::kernels::test::uniform_values;

namespace {

// Unit roundoff of fp32.
constexpr double kU = 0x1p-24;

std::vector<bf16> bf16_values(std::size_t n, std::uint32_t seed) {
  std::vector<bf16> out;
  for (float x : uniform_values(n, seed)) out.push_back(to_bf16(x));
  return out;
}

// The fp64 reference of the bf16 inputs and, per element, the bound fp32 may miss it by. Each
// product of two bf16 (8-bit significands) is exact in fp32 (24 bits), so all the error is in the
// sums: fp32 summation of k terms in any order (blocked, FMA or not) errs by at most
// (k - 1)·u·Σ|a·b|, and scaling by alpha and adding beta·C two more roundings of the result:
// tol = (k + 2)·u·(|alpha|·Σ|a·b| + |beta·C|), u = 2^-24. An element of exact zeros must be exact.
struct Reference {
  std::vector<double> want, tol;
};

Reference reference(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<bf16>& A,
                    int lda, const std::vector<bf16>& B, int ldb, float beta,
                    const std::vector<float>& C, int ldc) {
  Reference r{std::vector<double>(C.begin(), C.end()), std::vector<double>(C.size(), 0.0)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0, abs_sum = 0;
      for (int l = 0; l < k; ++l) {
        const double a = to_float(ta ? A[l * lda + i] : A[i * lda + l]);
        const double b = to_float(tb ? B[j * ldb + l] : B[l * ldb + j]);
        s += a * b;
        abs_sum += std::fabs(a * b);
      }
      const double c = beta == 0 ? 0.0 : static_cast<double>(beta) * C[i * ldc + j];
      r.want[i * ldc + j] = alpha * s + c;
      r.tol[i * ldc + j] = (k + 2) * kU * (std::fabs(alpha) * abs_sum + std::fabs(c));
    }
  return r;
}

using Run = std::function<void(bool, bool, int, int, int, float, const bf16*, int, const bf16*, int,
                               float, float*, int)>;

struct Backend {
  std::string name;
  Run run;
};

bool onednn_has_bf16() {
  return !onednn_bf16_probe().impl.empty();
}

// Every backend this machine can run, plus oneDNN's code with fp32 sources.
std::vector<Backend> backends() {
  std::vector<Backend> b{
      {"widen", [](auto... a) { gemm_bf16_widen(a...); }},
      {"oneDNN with fp32 sources", [](auto... a) { gemm_bf16_onednn_f32(a...); }}};
  if (onednn_has_bf16())
    b.push_back({"oneDNN bf16 (" + onednn_bf16_probe().impl + ")",
                 [](auto... a) { gemm_bf16_onednn(a...); }});
  else if (static bool said = false; !said) {
    said = true;
    WARN("oneDNN " << onednn_bf16_probe().version << " has no bf16 matmul on this CPU ("
                   << onednn_bf16_probe().isa << "); its bf16 backend is not run here");
  }
  return b;
}

constexpr float kSentinel = 12345.0f;  // in C's padding columns, which no backend may touch

// One call checked against the reference, padding included.
void check_call(const Backend& be, bool ta, bool tb, int m, int n, int k, float alpha, float beta,
                int pad, std::uint32_t seed) {
  const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  const std::vector<bf16> A = bf16_values(static_cast<std::size_t>((ta ? k : m) * lda), seed);
  const std::vector<bf16> B = bf16_values(static_cast<std::size_t>((tb ? n : k) * ldb), seed + 1);
  std::vector<float> C = uniform_values(static_cast<std::size_t>(m * ldc), seed + 2);
  for (int i = 0; i < m; ++i)
    for (int j = n; j < ldc; ++j) C[i * ldc + j] = kSentinel;
  const Reference ref = reference(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  be.run(ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < ldc; ++j) {
      const std::size_t e = static_cast<std::size_t>(i) * ldc + j;
      if (j >= n) {
        if (C[e] != kSentinel) FAIL("C[" << i << "][" << j << "], padding, was written");
        continue;
      }
      if (std::fabs(C[e] - ref.want[e]) > ref.tol[e])
        FAIL(be.name << ": C[" << i << "][" << j << "] = " << C[e] << ", want " << ref.want[e]
                     << " within " << ref.tol[e]);
    }
}

}  // namespace

TEST_CASE(
    "Every backend matches an fp64 reference: all transposes, odd sizes, padded rows, "
    "alpha and beta") {
  const int sizes[] = {1, 7, 33, 130};
  const float alphas[] = {1.0f, -0.75f};
  const float betas[] = {0.0f, 1.0f, 0.5f};
  for (const Backend& be : backends()) {
    INFO("backend " << be.name);
    int variant = 0;
    for (int m : sizes)
      for (int n : sizes)
        for (int k : sizes)
          for (bool ta : {false, true})
            for (bool tb : {false, true}) {
              // Each (alpha, beta) pair meets every shape and transpose pattern in turn.
              const float alpha = alphas[variant % 2], beta = betas[(variant / 2) % 3];
              ++variant;
              INFO("m " << m << " n " << n << " k " << k << " trans_a " << ta << " trans_b " << tb
                        << " alpha " << alpha << " beta " << beta);
              check_call(be, ta, tb, m, n, k, alpha, beta, 3, static_cast<std::uint32_t>(variant));
            }
  }
}

TEST_CASE("Calls of one shape with another alpha or beta get their own (cached) primitive") {
  // oneDNN 2.6 fixes alpha and beta when a primitive is created: the cache's key must hold them.
  struct Scale {
    float alpha, beta;
  };
  for (const Backend& be : backends())
    for (const Scale sc : {Scale{1, 0}, Scale{1, 1}, Scale{1, 0.5f}, Scale{2, 0.5f}, Scale{1, 0}}) {
      INFO("backend " << be.name << " alpha " << sc.alpha << " beta " << sc.beta);
      check_call(be, false, true, 7, 33, 130, sc.alpha, sc.beta, 1, 7);
    }
}

TEST_CASE("Leading dimensions equal to the row lengths (unpadded) work on every backend") {
  for (const Backend& be : backends())
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("backend " << be.name << " trans_a " << ta << " trans_b " << tb);
        check_call(be, ta, tb, 33, 130, 7, 0.5f, 0.5f, 0, 5);
      }
}

TEST_CASE("The widen backend splits large operands into panels and still matches the reference") {
  // Panels hold at most 2^22 floats (kernels/cpu/gemm_bf16.cpp): k = 9,000 is split in two
  // (k-panels of 8,192), 600 rows or columns of k = 8,192 in two (512 fit).
  const Backend widen{"widen", [](auto... a) { gemm_bf16_widen(a...); }};
  struct Shape {
    int m, n, k;
  };
  for (const Shape sh : {Shape{3, 5, 9000}, Shape{600, 3, 8192}, Shape{3, 600, 8192}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO("m " << sh.m << " n " << sh.n << " k " << sh.k << " trans_a " << ta << " trans_b "
                  << tb);
        check_call(widen, ta, tb, sh.m, sh.n, sh.k, -0.75f, 0.5f, 3, 51);
      }
}

TEST_CASE("A bf16 C too large for one fp32 panel is computed panel by panel, rounded once") {
  // 2,000 × 2,100 fp32 values do not fit one panel (2^22): two column panels.
  const int m = 2000, n = 2100, k = 7, ldc = n + 1;
  const std::vector<bf16> A = bf16_values(m * k, 61), B = bf16_values(k * n, 62);
  const std::vector<bf16> C0 = bf16_values(static_cast<std::size_t>(m) * ldc, 63);
  std::vector<float> c32;
  for (bf16 c : C0) c32.push_back(to_float(c));
  const Reference ref = reference(false, false, m, n, k, 1.0f, A, k, B, n, 0.5f, c32, ldc);
  std::vector<bf16> C = C0;
  gemm_bf16_widen(false, false, m, n, k, 1.0f, A.data(), k, B.data(), n, 0.5f, C.data(), ldc);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < ldc; ++j) {
      const std::size_t e = static_cast<std::size_t>(i) * ldc + j;
      if (j == n) {
        if (C[e].bits != C0[e].bits) FAIL("padding C[" << i << "][" << j << "] was written");
        continue;
      }
      const double got = to_float(C[e]), want = ref.want[e];
      if (std::fabs(got - want) > ref.tol[e] + 0x1p-8 * (std::fabs(want) + ref.tol[e]))
        FAIL("C[" << i << "][" << j << "] = " << got << ", want " << want);
    }
}

TEST_CASE("beta = 0 never reads C: a NaN there does not survive") {
  for (const Backend& be : backends()) {
    INFO("backend " << be.name);
    const std::vector<bf16> A = bf16_values(7 * 9, 1), B = bf16_values(9 * 5, 2);
    std::vector<float> C(7 * 5, std::nanf(""));
    be.run(false, false, 7, 5, 9, 1.0f, A.data(), 9, B.data(), 5, 0.0f, C.data(), 5);
    for (float c : C) REQUIRE(std::isfinite(c));
  }
}

TEST_CASE("With k = 0 C becomes beta·C, and zeros for beta = 0, on every backend") {
  for (const Backend& be : backends()) {
    INFO("backend " << be.name);
    const bf16 unused{};
    std::vector<float> C = {1, 2, 3, 4};
    be.run(false, false, 2, 2, 0, 1.0f, &unused, 1, &unused, 2, 0.5f, C.data(), 2);
    CHECK(C == std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f});
    C.assign(4, std::nanf(""));
    be.run(false, false, 2, 2, 0, 1.0f, &unused, 1, &unused, 2, 0.0f, C.data(), 2);
    CHECK(C == std::vector<float>{0, 0, 0, 0});
  }
}

TEST_CASE("oneDNN and widen agree within twice the tolerance at a GPT-like shape") {
  // A projection of 130 tokens × 768 features onto 96 outputs, and its weight gradient
  // (trans_a, k = tokens), beta = 1 as when gradients accumulate.
  struct Shape {
    bool ta, tb;
    int m, n, k;
  };
  for (const Shape s : {Shape{false, true, 130, 96, 768}, Shape{true, false, 96, 768, 130}}) {
    INFO("trans_a " << s.ta << " trans_b " << s.tb << " m " << s.m << " n " << s.n << " k " << s.k);
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    const std::vector<bf16> A = bf16_values(static_cast<std::size_t>((s.ta ? s.k : s.m) * lda), 9);
    const std::vector<bf16> B = bf16_values(static_cast<std::size_t>((s.tb ? s.n : s.k) * ldb), 10);
    const std::vector<float> C0 = uniform_values(static_cast<std::size_t>(s.m * ldc), 11);
    const Reference ref = reference(s.ta, s.tb, s.m, s.n, s.k, 1.0f, A, lda, B, ldb, 1.0f, C0, ldc);
    std::vector<float> widened = C0;
    gemm_bf16_widen(s.ta, s.tb, s.m, s.n, s.k, 1.0f, A.data(), lda, B.data(), ldb, 1.0f,
                    widened.data(), ldc);
    for (const Backend& be : backends()) {
      if (be.name == "widen") continue;
      INFO("backend " << be.name);
      std::vector<float> other = C0;
      be.run(s.ta, s.tb, s.m, s.n, s.k, 1.0f, A.data(), lda, B.data(), ldb, 1.0f, other.data(),
             ldc);
      for (std::size_t e = 0; e < other.size(); ++e)
        if (std::fabs(other[e] - widened[e]) > 2 * ref.tol[e])
          FAIL("element " << e << ": " << other[e] << " vs widen's " << widened[e]);
    }
  }
}

TEST_CASE("The bf16 output is the fp32 result rounded once to nearest even") {
  const int m = 33, n = 7, k = 130, ldc = n + 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        INFO("trans_a " << ta << " trans_b " << tb << " beta " << beta);
        const int lda = ta ? m : k, ldb = tb ? k : n;
        const std::vector<bf16> A = bf16_values(static_cast<std::size_t>((ta ? k : m) * lda), 21);
        const std::vector<bf16> B = bf16_values(static_cast<std::size_t>((tb ? n : k) * ldb), 22);
        const std::vector<bf16> C0 = bf16_values(static_cast<std::size_t>(m * ldc), 23);
        std::vector<float> c32;
        for (bf16 c : C0) c32.push_back(to_float(c));
        const Reference ref = reference(ta, tb, m, n, k, -0.75f, A, lda, B, ldb, beta, c32, ldc);
        gemm_bf16_widen(ta, tb, m, n, k, -0.75f, A.data(), lda, B.data(), ldb, beta, c32.data(),
                        ldc);
        std::vector<bf16> widen16 = C0;
        gemm_bf16_widen(ta, tb, m, n, k, -0.75f, A.data(), lda, B.data(), ldb, beta, widen16.data(),
                        ldc);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < ldc; ++j) {
            const std::size_t e = static_cast<std::size_t>(i) * ldc + j;
            // The padding keeps its bits; the rest is the widen backend's fp32 result, rounded.
            const bf16 want = j < n ? to_bf16(c32[e]) : C0[e];
            if (widen16[e].bits != want.bits)
              FAIL("widen: C[" << i << "][" << j << "] bits " << widen16[e].bits << ", want "
                               << want.bits);
          }
        if (!onednn_has_bf16()) continue;
        std::vector<bf16> onednn16 = C0;
        gemm_bf16_onednn(ta, tb, m, n, k, -0.75f, A.data(), lda, B.data(), ldb, beta,
                         onednn16.data(), ldc);
        // Rounding to bf16 (unit roundoff 2^-8) adds at most 2^-8 of the magnitude.
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            const std::size_t e = static_cast<std::size_t>(i) * ldc + j;
            const double got = to_float(onednn16[e]), want = ref.want[e];
            REQUIRE(std::fabs(got - want) <= ref.tol[e] + 0x1p-8 * (std::fabs(want) + ref.tol[e]));
          }
      }
}

TEST_CASE("gemm_bf16 runs the chosen backend, bit for bit") {
  const std::vector<bf16> A = bf16_values(33 * 130, 31), B = bf16_values(130 * 7, 32);
  std::vector<float> direct(33 * 7, 0.0f), chosen(33 * 7, 0.0f);
  gemm_bf16(false, false, 33, 7, 130, 1.0f, A.data(), 130, B.data(), 7, 0.0f, chosen.data(), 7);
  if (gemm_bf16_info().backend == GemmBf16Backend::onednn)
    gemm_bf16_onednn(false, false, 33, 7, 130, 1.0f, A.data(), 130, B.data(), 7, 0.0f,
                     direct.data(), 7);
  else
    gemm_bf16_widen(false, false, 33, 7, 130, 1.0f, A.data(), 130, B.data(), 7, 0.0f, direct.data(),
                    7);
  CHECK(chosen == direct);
}

TEST_CASE("gemm_bf16 rejects negative sizes and leading dimensions too small for the shape") {
  std::vector<bf16> A(64), B(64);
  std::vector<float> C(64);
  for (const Backend& be : backends()) {
    INFO("backend " << be.name);
    CHECK_THROWS_AS(be.run(false, false, -1, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2),
                    Error);
    CHECK_THROWS_AS(be.run(false, false, 2, 2, 4, 1, A.data(), 3, B.data(), 2, 0, C.data(), 2),
                    Error);
    CHECK_THROWS_AS(be.run(true, false, 4, 2, 2, 1, A.data(), 3, B.data(), 2, 0, C.data(), 2),
                    Error);
    CHECK_THROWS_AS(be.run(false, false, 2, 3, 2, 1, A.data(), 2, B.data(), 3, 0, C.data(), 2),
                    Error);
  }
}

TEST_CASE("Where oneDNN has no bf16 matmul, its backend says so instead of computing") {
  if (onednn_has_bf16()) return;
  std::vector<bf16> A(4), B(4);
  std::vector<float> C(4);
  CHECK_THROWS_WITH(
      gemm_bf16_onednn(false, false, 2, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2),
      Catch::Contains("has no bf16 matmul"));
}

namespace {

OnednnBf16Probe probe(std::string isa, bool native, std::string impl) {
  return OnednnBf16Probe{"2.6.3", std::move(isa), native, std::move(impl), ""};
}

}  // namespace

TEST_CASE(
    "The rule runs oneDNN only on bf16 instructions (AVX512-BF16 or AMX), not emulated or "
    "reference code") {
  const GemmBf16Info bf16 =
      choose_gemm_bf16("", probe("avx512_core_bf16", true, "brg:avx512_core_bf16"), "Cooperlake");
  CHECK(bf16.backend == GemmBf16Backend::onednn);
  CHECK(bf16.name == "oneDNN brg:avx512_core_bf16");
  CHECK(bf16.onednn_version == "2.6.3");
  CHECK(choose_gemm_bf16("", probe("avx512_core_amx", true, "brg:avx512_core_amx"), "SkylakeX")
            .backend == GemmBf16Backend::onednn);
  // oneDNN 2.x on AVX-512 without BF16 emulates it: the widen backend.
  const GemmBf16Info emulated =
      choose_gemm_bf16("", probe("avx512_core", false, "gemm:jit"), "SkylakeX");
  CHECK(emulated.backend == GemmBf16Backend::widen);
  CHECK(emulated.name == "fp32 widen + OpenBLAS SkylakeX");
  CHECK_THAT(emulated.reason, Catch::Contains("emulates"));
  CHECK(choose_gemm_bf16("", probe("avx512_core_bf16", true, "ref:any"), "Cooperlake").backend ==
        GemmBf16Backend::widen);
  // Below AVX-512 oneDNN 2.x has none (this AMD Zen 3 machine, 2026).
  const GemmBf16Info none = choose_gemm_bf16("", probe("avx2", false, ""), "Zen");
  CHECK(none.backend == GemmBf16Backend::widen);
  CHECK(none.name == "fp32 widen + OpenBLAS Zen");
  CHECK(none.reason == "oneDNN 2.6.3 has no bf16 matmul on this CPU (avx2)");
}

TEST_CASE("ZERO_GEMM_BF16 forces a backend, and anything but onednn or widen is an error") {
  const OnednnBf16Probe native = probe("avx512_core_bf16", true, "brg:avx512_core_bf16");
  const OnednnBf16Probe emulated = probe("avx512_core", false, "gemm:jit");
  CHECK(choose_gemm_bf16("widen", native, "Cooperlake").backend == GemmBf16Backend::widen);
  CHECK(choose_gemm_bf16("widen", native, "Cooperlake").reason == "ZERO_GEMM_BF16=widen");
  CHECK(choose_gemm_bf16("onednn", emulated, "SkylakeX").backend == GemmBf16Backend::onednn);
  CHECK_THROWS_WITH(choose_gemm_bf16("onednn", probe("avx2", false, ""), "Zen"),
                    "ZERO_GEMM_BF16=onednn, but oneDNN 2.6.3 has no bf16 matmul on this CPU "
                    "(avx2): unset it or set ZERO_GEMM_BF16=widen");
  CHECK_THROWS_WITH(choose_gemm_bf16("OneDNN", native, "Cooperlake"),
                    "ZERO_GEMM_BF16='OneDNN' names no BF16 GEMM backend: set onednn or widen, or "
                    "unset it to let zero choose");
  CHECK_THROWS_AS(choose_gemm_bf16("blas", native, "Cooperlake"), Error);
}

// Also run by meson with ZERO_GEMM_BF16 set to widen, onednn and a bad value (tests/kernels/
// meson.build): the process reads the variable it was given.
TEST_CASE("This process's choice names a backend and follows ZERO_GEMM_BF16", "[env]") {
  const char* env_c = std::getenv("ZERO_GEMM_BF16");
  const std::string env = env_c ? env_c : "";
  INFO("ZERO_GEMM_BF16='" << env << "'");
  const OnednnBf16Probe& p = onednn_bf16_probe();
  CHECK(!p.version.empty());
  CHECK(!p.isa.empty());
  const bool bad =
      !(env.empty() || env == "widen" || env == "onednn") || (env == "onednn" && p.impl.empty());
  if (bad) {
    CHECK_THROWS_AS(gemm_bf16_info(), Error);
    std::vector<bf16> A(4), B(4);
    std::vector<float> C(4);
    CHECK_THROWS_AS(gemm_bf16(false, false, 2, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2),
                    Error);
    return;
  }
  const GemmBf16Info info = gemm_bf16_info();
  CHECK((info.name.rfind("oneDNN ", 0) == 0 || info.name.rfind("fp32 widen + OpenBLAS ", 0) == 0));
  CHECK(!info.reason.empty());
  CHECK(info.onednn_version == p.version);
  if (env == "widen") CHECK(info.backend == GemmBf16Backend::widen);
  if (env == "onednn") CHECK(info.backend == GemmBf16Backend::onednn);
  if (env.empty()) CHECK(info.backend == choose_gemm_bf16("", p, "any").backend);
}

TEST_CASE("Where oneDNN runs bf16 natively, a GPT-shaped call runs its native code, not ref") {
  const OnednnBf16Probe& p = onednn_bf16_probe();
  if (p.impl.empty() || !p.native_bf16) return;  // the widen backend's machine
  const int m = 256, n = 768, k = 768;
  const std::vector<bf16> A = bf16_values(m * k, 41), B = bf16_values(n * k, 42);
  std::vector<float> C(m * n);
  const std::string impl =
      gemm_bf16_onednn(false, true, m, n, k, 1.0f, A.data(), k, B.data(), k, 0.0f, C.data(), n);
  INFO("oneDNN ran " << impl << " on " << p.isa);
  CHECK(impl.rfind("ref", 0) != 0);
}
