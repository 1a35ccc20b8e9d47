// The cuBLASLt GEMM (kernels/cuda/gemm.hpp) against an fp64 host reference and the CPU gemm, on
// all four transpose combinations, odd shapes, padded strides, misaligned pointers, bias on and
// off. Exits 77 (meson: skipped) when no CUDA device is present.
//
// Tolerance. With S = |alpha|·Σ|a·b| + |beta·c| + |bias| for an output element, an fp32
// accumulation of k products (exact for bf16 inputs, rounded once for fp32 inputs) followed by
// the alpha, beta and bias steps commits at most (k + 3)·u·S with u = 2^-24 (the standard bound
// of recursive or blocked summation). We allow (k + 4)·2u·S: a factor 2 for tensor-core adders
// that truncate rather than round. A bf16 C is then rounded to nearest (relative error 2^-8),
// twice when the bias is added by a separate kernel, which the bound below covers.
#define CATCH_CONFIG_RUNNER
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "precision/bf16.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels;
using cuda::DeviceBuffer;
using cuda::GemmOut;
using zero::kernels::test::uniform_values;

namespace {

enum class Kind { bf16_to_f32, bf16_to_bf16, f32 };

struct Case {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  bool bias = false;
  bool misalign = false;  // A, B, C and bias start one element past a 256-byte boundary
  float alpha = 0.75f, beta = -0.5f;
};

// Odd shapes from {1, 7, 33, 257, 1000}, each size in each role, small enough for an fp64
// reference on the host.
const std::vector<std::array<int, 3>> kShapes = {
    {1, 1, 1},     {7, 33, 257},    {257, 7, 33},  {33, 257, 7},   {1, 1000, 257},
    {1000, 1, 33}, {257, 33, 1000}, {33, 1000, 7}, {1000, 257, 1}, {7, 7, 1000},
};

// Device copy of host data, `off` elements into its allocation.
template <class T>
struct Dev {
  DeviceBuffer buf;
  std::size_t off = 0;
  Dev(const std::vector<T>& host, std::size_t offset)
      : buf((host.size() + offset) * sizeof(T)), off(offset) {
    buf.upload(host.data(), host.size() * sizeof(T), off * sizeof(T));
  }
  T* ptr() const { return buf.as<T>() + off; }
  std::vector<T> get(std::size_t n) const {
    std::vector<T> out(n);
    buf.download(out.data(), n * sizeof(T), off * sizeof(T));
    return out;
  }
};

std::vector<float> bf16_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> x = uniform_values(n, seed);
  for (float& e : x) e = to_float(to_bf16(e));
  return x;
}
std::vector<bf16> to_bf16_vec(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = to_bf16(x[i]);
  return out;
}

struct Reference {
  std::vector<double> no_bias, want, mag;  // m×n, dense
};

// alpha·op(A)·op(B) + beta·C (+ bias) in double from the exact input values, and S per element.
Reference reference(const Case& c, const std::vector<float>& A, int lda,
                    const std::vector<float>& B, int ldb, const std::vector<float>& C0, int ldc,
                    const std::vector<float>& bias) {
  Reference r;
  const auto mn = static_cast<std::size_t>(c.m) * c.n;
  r.no_bias.resize(mn);
  r.want.resize(mn);
  r.mag.resize(mn);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double s = 0, mag = 0;
      for (int l = 0; l < c.k; ++l) {
        const double a = c.ta ? A[l * lda + i] : A[i * lda + l];
        const double b = c.tb ? B[j * ldb + l] : B[l * ldb + j];
        s += a * b;
        mag += std::fabs(a * b);
      }
      const double cterm = c.beta == 0.0f ? 0.0 : static_cast<double>(c.beta) * C0[i * ldc + j];
      const double bj = c.bias ? bias[j] : 0.0;
      const std::size_t e = static_cast<std::size_t>(i) * c.n + j;
      r.no_bias[e] = c.alpha * s + cterm;
      r.want[e] = r.no_bias[e] + bj;
      r.mag[e] = std::fabs(c.alpha) * mag + std::fabs(cterm) + std::fabs(bj);
    }
  return r;
}

double accumulation_tol(const Case& c, double mag) {
  return (c.k + 4) * std::ldexp(1.0, -23) * mag;
}

// Runs one GEMM of the given kind on the GPU and checks every element of C against the fp64
// reference (and, for fp32, against the CPU gemm), and that the padding columns are untouched.
void check_case(cuda::GemmContext& ctx, cuda::Stream& stream, const Case& c, Kind kind) {
  INFO("trans " << c.ta << c.tb << " m " << c.m << " n " << c.n << " k " << c.k << " bias "
                << c.bias << " misaligned " << c.misalign << " beta " << c.beta << " kind "
                << static_cast<int>(kind));
  const int pad = 3;
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = c.n + pad;
  const std::size_t off = c.misalign ? 1 : 0;
  const bool in16 = kind != Kind::f32, out16 = kind == Kind::bf16_to_bf16;
  const auto a_size = static_cast<std::size_t>(a_rows) * lda;
  const auto b_size = static_cast<std::size_t>(b_rows) * ldb;
  const auto c_size = static_cast<std::size_t>(c.m) * ldc;
  const std::vector<float> A = in16 ? bf16_values(a_size, 11) : uniform_values(a_size, 11);
  const std::vector<float> B = in16 ? bf16_values(b_size, 12) : uniform_values(b_size, 12);
  const std::vector<float> C0 = out16 ? bf16_values(c_size, 13) : uniform_values(c_size, 13);
  const std::vector<float> bias = uniform_values(static_cast<std::size_t>(c.n), 14);
  const Reference ref = reference(c, A, lda, B, ldb, C0, ldc, bias);

  Dev<float> dbias(bias, off);
  const float* bias_ptr = c.bias ? dbias.ptr() : nullptr;
  std::vector<float> got(c_size);
  if (kind == Kind::f32) {
    Dev<float> dA(A, off), dB(B, off), dC(C0, off);
    cuda::gemm(ctx, c.ta, c.tb, c.m, c.n, c.k, c.alpha, dA.ptr(), lda, dB.ptr(), ldb, c.beta,
               dC.ptr(), ldc, bias_ptr, stream);
    stream.synchronize();
    got = dC.get(c_size);
  } else {
    Dev<bf16> dA(to_bf16_vec(A), off), dB(to_bf16_vec(B), off);
    if (out16) {
      Dev<bf16> dC(to_bf16_vec(C0), off);
      cuda::gemm(ctx, c.ta, c.tb, c.m, c.n, c.k, c.alpha, dA.ptr(), lda, dB.ptr(), ldb, c.beta,
                 dC.ptr(), GemmOut::bf16, ldc, bias_ptr, stream);
      stream.synchronize();
      const std::vector<bf16> h = dC.get(c_size);
      for (std::size_t i = 0; i < c_size; ++i) got[i] = to_float(h[i]);
    } else {
      Dev<float> dC(C0, off);
      cuda::gemm(ctx, c.ta, c.tb, c.m, c.n, c.k, c.alpha, dA.ptr(), lda, dB.ptr(), ldb, c.beta,
                 dC.ptr(), GemmOut::f32, ldc, bias_ptr, stream);
      stream.synchronize();
      got = dC.get(c_size);
    }
  }

  std::vector<float> cpu;
  if (kind == Kind::f32) {  // the CPU gemm has no bias: add it after, as the MLP's loop does
    cpu = C0;
    kernels::cpu::gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                       cpu.data(), ldc);
    if (c.bias)
      for (int i = 0; i < c.m; ++i)
        for (int j = 0; j < c.n; ++j) cpu[i * ldc + j] += bias[j];
  }
  // Checked without a Catch assertion per element (millions of them); the first bad element is
  // reported.
  std::string bad;
  for (int i = 0; i < c.m && bad.empty(); ++i) {
    for (int j = 0; j < ldc && bad.empty(); ++j) {
      const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
      if (j >= c.n) {  // padding between rows: never written
        if (test::bits(got[at]) != test::bits(C0[at]))
          bad = cat("padding C[", i, "][", j, "] was overwritten with ", got[at]);
        continue;
      }
      const std::size_t e = static_cast<std::size_t>(i) * c.n + j;
      const double want = ref.want[e], acc = accumulation_tol(c, ref.mag[e]);
      const double tol = out16 ? 2 * acc + std::ldexp(1.0 + std::ldexp(1.0, -6), -8) *
                                               (std::fabs(want) + std::fabs(ref.no_bias[e]))
                               : acc;
      if (!(std::fabs(got[at] - want) <= tol))
        bad = cat("C[", i, "][", j, "] = ", got[at], ", want ", want, " +- ", tol);
      else if (kind == Kind::f32 && !(std::fabs(got[at] - cpu[at]) <= 2 * acc))
        bad = cat("C[", i, "][", j, "] = ", got[at], ", the CPU gemm gives ", cpu[at], " (+- ",
                  2 * acc, ")");
    }
  }
  INFO(bad);
  REQUIRE(bad.empty());
}

void check_all(Kind kind) {
  cuda::GemmContext ctx;
  cuda::Stream stream;
  int index = 0;
  for (const auto& s : kShapes) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool bias : {false, true}) {
          Case c;
          c.ta = ta;
          c.tb = tb;
          c.m = s[0];
          c.n = s[1];
          c.k = s[2];
          c.bias = bias;
          c.misalign = index % 3 == 1;  // every third case: sub-256-byte alignment
          c.beta = index % 2 == 0 ? -0.5f : 0.0f;
          check_case(ctx, stream, c, kind);
          ++index;
        }
  }
}

}  // namespace

TEST_CASE("bf16 GEMM into fp32 matches an fp64 reference for every transpose, shape and bias") {
  check_all(Kind::bf16_to_f32);
}

TEST_CASE(
    "bf16 GEMM into bf16 matches the fp64 reference within accumulation and output rounding") {
  check_all(Kind::bf16_to_bf16);
}

TEST_CASE("fp32 GEMM matches the fp64 reference and the CPU gemm") {
  check_all(Kind::f32);
}

TEST_CASE("k = 0 makes C = beta·C + bias, and beta = 0 does not read C") {
  cuda::GemmContext ctx;
  cuda::Stream stream;
  const int m = 3, n = 5;
  const std::vector<float> bias = {1, 2, 3, 4, 5};
  std::vector<float> C0(m * n, 2.0f);
  C0[7] = std::nanf("");  // only read when beta != 0
  Dev<float> dC(C0, 0), dbias(bias, 0);
  const bf16* none = nullptr;
  cuda::gemm(ctx, false, false, m, n, 0, 1.0f, none, 1, none, n, 0.0f, dC.ptr(), GemmOut::f32, n,
             dbias.ptr(), stream);
  stream.synchronize();
  std::vector<float> got = dC.get(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) REQUIRE(got[i * n + j] == bias[j]);
  cuda::gemm(ctx, false, false, m, n, 0, 1.0f, none, 1, none, n, -0.5f, dC.ptr(), GemmOut::f32, n,
             nullptr, stream);
  stream.synchronize();
  got = dC.get(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) REQUIRE(got[i * n + j] == -0.5f * bias[j]);
  REQUIRE(ctx.cached_algorithms() == 0);  // nothing to plan without a product
}

TEST_CASE("the algorithm is planned once per shape, and repeated GEMMs agree bitwise") {
  cuda::GemmContext ctx(4u << 20);
  REQUIRE(ctx.workspace_bytes() == (4u << 20));
  REQUIRE(ctx.cached_algorithms() == 0);
  cuda::Stream stream;
  const int m = 257, n = 1000, k = 1000;
  Dev<bf16> A(to_bf16_vec(bf16_values(static_cast<std::size_t>(m) * k, 1)), 0);
  Dev<bf16> B(to_bf16_vec(bf16_values(static_cast<std::size_t>(k) * n, 2)), 0);
  Dev<float> bias(uniform_values(n, 3), 0);
  Dev<bf16> C1(std::vector<bf16>(static_cast<std::size_t>(m) * n), 0);
  Dev<bf16> C2(std::vector<bf16>(static_cast<std::size_t>(m) * n), 0);
  auto run = [&](const Dev<bf16>& C, int rows) {
    cuda::gemm(ctx, false, false, rows, n, k, 1.0f, A.ptr(), k, B.ptr(), n, 0.0f, C.ptr(),
               GemmOut::bf16, n, bias.ptr(), stream);
  };
  run(C1, m);
  REQUIRE(ctx.cached_algorithms() == 1);
  run(C2, m);  // same shape, other (equally aligned) output: no new plan
  REQUIRE(ctx.cached_algorithms() == 1);
  run(C2, 7);  // another shape
  REQUIRE(ctx.cached_algorithms() == 2);
  run(C2, m);
  REQUIRE(ctx.cached_algorithms() == 2);
  stream.synchronize();
  const std::vector<bf16> a = C1.get(static_cast<std::size_t>(m) * n),
                          b = C2.get(static_cast<std::size_t>(m) * n);
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].bits == b[i].bits);

  cuda::GemmContext moved = std::move(ctx);
  REQUIRE(moved.cached_algorithms() == 2);
  REQUIRE_THROWS_AS(run(C1, m), Error);  // ctx was moved from
}

TEST_CASE("bad sizes, too-small leading dimensions and null pointers throw naming the shape") {
  cuda::GemmContext ctx;
  cuda::Stream stream;
  Dev<float> buf(std::vector<float>(64, 0.0f), 0);
  float* p = buf.ptr();
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_WITH(
      cuda::gemm(ctx, false, false, -1, 4, 4, 1.0f, p, 4, p, 4, 0.0f, p, 4, nullptr, stream),
      Contains("m=-1") && Contains("negative"));
  // op(A) is 4×5 stored untransposed: a row holds 5 values, so lda = 4 is too small.
  REQUIRE_THROWS_WITH(
      cuda::gemm(ctx, false, false, 4, 4, 5, 1.0f, p, 4, p, 4, 0.0f, p, 4, nullptr, stream),
      Contains("lda=4") && Contains("leading dimension"));
  // Both transposed: A is stored k×m = 5×4, so lda = 4 is enough; B is stored n×k = 4×5, so a
  // row holds 5 values and ldb = 4 is too small.
  REQUIRE_THROWS_WITH(
      cuda::gemm(ctx, true, true, 4, 4, 5, 1.0f, p, 4, p, 4, 0.0f, p, 4, nullptr, stream),
      Contains("ldb=4"));
  REQUIRE_THROWS_WITH(
      cuda::gemm(ctx, false, false, 2, 6, 2, 1.0f, p, 2, p, 6, 0.0f, p, 5, nullptr, stream),
      Contains("ldc=5"));
  const bf16* none = nullptr;
  REQUIRE_THROWS_WITH(cuda::gemm(ctx, false, false, 2, 2, 2, 1.0f, none, 2, none, 2, 0.0f, p,
                                 GemmOut::f32, 2, nullptr, stream),
                      Contains("null") && Contains("bf16 inputs"));
  REQUIRE(ctx.cached_algorithms() == 0);
}

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::cout << "no CUDA device (or driver): the GPU GEMM tests are skipped\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
