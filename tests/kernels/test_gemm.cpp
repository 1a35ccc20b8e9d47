// Tests of the OpenBLAS GEMM wrapper (kernels/cpu/gemm.hpp).
#include <cblas.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using zero::kernels::cpu::gemm;
using zero::kernels::test::uniform_values;

namespace {

// C = alpha·op(A)·op(B) + beta·C, row-major, in double, one multiply-add at a time.
void naive(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<float>& A, int lda,
           const std::vector<float>& B, int ldb, float beta, std::vector<double>& C, int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l) {
        const double a = ta ? A[l * lda + i] : A[i * lda + l];
        const double b = tb ? B[j * ldb + l] : B[l * ldb + j];
        s += a * b;
      }
      C[i * ldc + j] = alpha * s + beta * C[i * ldc + j];
    }
}

}  // namespace

TEST_CASE("gemm matches a naive triple loop for all four transpose combinations") {
  // Non-square, non-multiple-of-8 shapes and leading dimensions larger than the rows they hold.
  const int m = 13, n = 7, k = 29, pad = 3;
  const float alpha = 0.75f, beta = -0.5f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << ", trans_b " << tb);
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      const std::vector<float> A = uniform_values(static_cast<std::size_t>((ta ? k : m) * lda), 71);
      const std::vector<float> B = uniform_values(static_cast<std::size_t>((tb ? n : k) * ldb), 72);
      std::vector<float> C = uniform_values(static_cast<std::size_t>(m * ldc), 73);
      std::vector<double> want(C.begin(), C.end());
      naive(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, want, ldc);
      gemm(ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
      // fp32 accumulation over k = 29 products of magnitude <= 1: error <= ~k·2^-24 per entry.
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < ldc; ++j) {
          INFO("C[" << i << "][" << j << "]");
          REQUIRE(C[i * ldc + j] == Approx(want[i * ldc + j]).margin(1e-5));
        }
    }
  }
}

TEST_CASE("gemm with k = 0 only scales C by beta") {
  std::vector<float> C = {1, 2, 3, 4};
  const float unused = 0;
  gemm(false, false, 2, 2, 0, 1.0f, &unused, 1, &unused, 2, 0.5f, C.data(), 2);
  CHECK(C == std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f});
}

TEST_CASE("gemm with beta = 0 gives OpenBLAS's own beta = 0 bits and never reads C") {
  // gemm zeroes C's rows itself and asks OpenBLAS for beta = 1: the same sums, bit for bit, at
  // the trainer's shapes (row pieces, k up to 512) and odd ones; NaN in C must not leak in, and
  // the padding columns past n must stay as they were.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Shape {
    int m, n, k;
  };
  for (const Shape sh : {Shape{13, 7, 29}, Shape{200, 128, 512}, Shape{2048, 96, 128}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("m " << sh.m << " n " << sh.n << " k " << sh.k << " ta " << ta << " tb " << tb);
        const int pad = 3, lda = (ta ? sh.m : sh.k) + pad, ldb = (tb ? sh.k : sh.n) + pad;
        const int ldc = sh.n + pad;
        const auto A = uniform_values(static_cast<std::size_t>((ta ? sh.k : sh.m) * lda), 81);
        const auto B = uniform_values(static_cast<std::size_t>((tb ? sh.n : sh.k) * ldb), 82);
        std::vector<float> want(static_cast<std::size_t>(sh.m) * ldc, nan);
        std::vector<float> got = want;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    sh.m, sh.n, sh.k, 0.75f, A.data(), lda, B.data(), ldb, 0.0f, want.data(), ldc);
        gemm(ta, tb, sh.m, sh.n, sh.k, 0.75f, A.data(), lda, B.data(), ldb, 0.0f, got.data(), ldc);
        int differ = 0, padding_changed = 0;
        for (int i = 0; i < sh.m; ++i)
          for (int j = 0; j < ldc; ++j) {
            const float g = got[static_cast<std::size_t>(i) * ldc + j];
            if (j >= sh.n)
              padding_changed += !std::isnan(g);
            else
              differ += std::memcmp(&g, &want[static_cast<std::size_t>(i) * ldc + j], 4) != 0;
          }
        CHECK(differ == 0);
        CHECK(padding_changed == 0);
      }
    }
  }
}

TEST_CASE("gemm rejects negative sizes and leading dimensions too small for the shape") {
  std::vector<float> A(64), B(64), C(64);
  CHECK_THROWS_AS(gemm(false, false, -1, 2, 2, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2), Error);
  CHECK_THROWS_AS(gemm(false, false, 2, 2, 4, 1, A.data(), 3, B.data(), 2, 0, C.data(), 2), Error);
  CHECK_THROWS_AS(gemm(true, false, 4, 2, 2, 1, A.data(), 3, B.data(), 2, 0, C.data(), 2), Error);
  CHECK_THROWS_AS(gemm(false, false, 2, 3, 2, 1, A.data(), 2, B.data(), 3, 0, C.data(), 2), Error);
}
