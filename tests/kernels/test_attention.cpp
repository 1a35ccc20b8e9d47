// Tests of the tiled causal attention (kernels/cpu/attention.hpp): against the whole-matrix
// attention it replaces (kept below as the reference: scores [T, T] per head from one GEMM, the
// masked half zeroed, the probabilities kept for backward), and bitwise independent of the
// thread count.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "attention_reference.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/gpt_math.hpp"
#include "precision/convert.hpp"
#include "test_data.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::uniform_values;
using zero::kernels::test::whole_backward;
using zero::kernels::test::whole_forward;

namespace {

using I = std::int64_t;

// ---- runs --------------------------------------------------------------------------------------

struct Shape {
  int B, T, C, NH;
};

template <class T>
struct Result {
  std::vector<T> out;
  std::vector<float> saved, dqkv;
};

template <class T>
std::vector<T> stored(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<bf16> h(x.size());
    convert(std::span(x), std::span(h));
    return h;
  }
}

template <class T>
struct Inputs {
  std::vector<T> qkv;
  std::vector<float> dout;
  explicit Inputs(const Shape& s)
      : qkv(stored<T>(uniform_values(static_cast<std::size_t>(s.B) * s.T * 3 * s.C, 41, 2.0f))),
        dout(uniform_values(static_cast<std::size_t>(s.B) * s.T * s.C, 42)) {}
};

template <class T>
Result<T> tiled(const Shape& s, const Inputs<T>& in) {
  Result<T> r;
  const auto n = static_cast<std::size_t>(s.B) * s.T;
  r.out.resize(n * s.C);
  r.saved.resize(cpu::gpt::attention_saved_floats(s.B, s.NH, s.T));
  r.dqkv.assign(n * 3 * s.C, std::nanf(""));  // every element written
  cpu::gpt::attention_forward<T>(r.out.data(), r.saved.data(), in.qkv.data(), s.B, s.T, s.C, s.NH);
  cpu::gpt::attention_backward<T>(r.dqkv.data(), in.dout.data(), in.qkv.data(), r.out.data(),
                                  r.saved.data(), s.B, s.T, s.C, s.NH);
  return r;
}

template <class T>
Result<T> whole(const Shape& s, const Inputs<T>& in) {
  Result<T> r;
  const auto n = static_cast<std::size_t>(s.B) * s.T;
  r.out.resize(n * s.C);
  r.saved.resize(static_cast<std::size_t>(s.B) * s.NH * s.T * s.T);  // the probabilities
  r.dqkv.resize(n * 3 * s.C);
  whole_forward<T>(r.out.data(), r.saved.data(), in.qkv.data(), s.B, s.T, s.C, s.NH);
  whole_backward<T>(r.dqkv.data(), in.dout.data(), in.qkv.data(), r.saved.data(), s.B, s.T, s.C,
                    s.NH);
  return r;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

float wide(float x) {
  return x;
}
float wide(bf16 x) {
  return to_float(x);
}

// The largest |a - b| over one output (every `stride`-th run of `width` values from `offset`:
// one of q, k, v in dqkv), relative to the largest |b| there.
template <class T>
double relative_error(const std::vector<T>& a, const std::vector<T>& b, std::size_t stride,
                      std::size_t offset, std::size_t width) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((i % stride) < offset || (i % stride) >= offset + width) continue;
    diff = std::max(diff, static_cast<double>(std::fabs(wide(a[i]) - wide(b[i]))));
    scale = std::max(scale, static_cast<double>(std::fabs(wide(b[i]))));
  }
  return scale > 0 ? diff / scale : diff;
}

// The bound tiled attention keeps against the whole-matrix one: every fp32 result (out in the
// fp32 mode; dq, dk, dv) within 2^-20 of the largest magnitude of the same result. Measured with
// OpenBLAS 0.3.21's Zen kernels: at most 4.8·10^-7 (about 2^-21), at T = 300 and 1024.
constexpr double kBound = 1.0 / (1 << 20);

// In bf16 storage, backward's per-row D_t = dy_t·o_t reads o as stored, rounded to bf16 (the
// whole-matrix attention sums p·dp from its fp32 probabilities): dq and dk, which take D_t, within
// 2^-8 of their largest magnitude, a bf16 step at that magnitude, the rounding they get where
// they enter the next GEMM. Measured: at most 1.7·10^-3 (about 2^-9.2).
constexpr double kBoundBf16Dqk = 1.0 / (1 << 8);

}  // namespace

TEMPLATE_TEST_CASE("tiled attention agrees with the whole-matrix attention within 2^-20",
                   "[attention]", float, bf16) {
  using T = TestType;
  // gpt-micro's and gpt-nano's heads, lengths that are no multiple of the tile, one row, and
  // heads of 64 (gpt2's) at T = 300 and T = 1024.
  const Shape shapes[] = {{2, 64, 64, 4},   {2, 128, 128, 4}, {1, 100, 96, 3},  {3, 1, 32, 2},
                          {1, 300, 128, 2}, {1, 49, 16, 1},   {1, 1024, 128, 2}};
  for (const Shape& s : shapes) {
    INFO("B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
    const Inputs<T> in(s);
    const Result<T> a = tiled(s, in), b = whole(s, in);
    const auto C = static_cast<std::size_t>(s.C);
    if constexpr (std::is_same_v<T, float>) {
      CHECK(relative_error(a.out, b.out, C, 0, C) <= kBound);
    } else {
      // bf16: the fp32 result, within the bound, rounds to the same bf16 or to a neighbour.
      float scale = 0;
      for (const bf16 y : b.out) scale = std::max(scale, std::fabs(to_float(y)));
      for (std::size_t i = 0; i < a.out.size(); ++i) {
        const float x = to_float(a.out[i]), y = to_float(b.out[i]);
        if (x != y) REQUIRE(std::fabs(x - y) <= std::fabs(y) / 128.0f + kBound * scale);
      }
    }
    for (int part = 0; part < 3; ++part) {
      INFO("d"
           << "qkv"[part]);
      const bool reads_o = std::is_same_v<T, bf16> && part < 2;
      CHECK(relative_error(a.dqkv, b.dqkv, 3 * C, part * C, C) <=
            (reads_o ? kBoundBf16Dqk : kBound));
    }
  }
}

TEST_CASE("tiled attention keeps each row's max and 1/sum, not the T x T probabilities",
          "[attention]") {
  const Shape s{2, 100, 64, 4};
  const int hs = s.C / s.NH;
  REQUIRE(cpu::gpt::attention_saved_floats(s.B, s.NH, s.T) == 2u * 4 * 100 * 2);
  const Inputs<float> in(s);
  const Result<float> a = tiled(s, in);
  // Each row's scaled scores, summed here in double: the saved max is the largest of them, and
  // 1/sum normalises the row's exponentials.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* q = in.qkv.data() + (static_cast<I>(b) * s.T + t) * 3 * s.C + h * hs;
        std::vector<double> score(static_cast<std::size_t>(t) + 1);
        for (int j = 0; j <= t; ++j) {
          const float* k = in.qkv.data() + (static_cast<I>(b) * s.T + j) * 3 * s.C + s.C + h * hs;
          double d = 0;
          for (int i = 0; i < hs; ++i) d += static_cast<double>(q[i]) * k[i];
          score[static_cast<std::size_t>(j)] = d * scale;
        }
        const float* st = a.saved.data() + ((static_cast<I>(b) * s.NH + h) * s.T + t) * 2;
        const double mx = *std::max_element(score.begin(), score.end());
        REQUIRE(std::fabs(st[0] - mx) <= 1e-5 * std::max(1.0, std::fabs(mx)));
        double sum = 0;
        for (const double x : score) sum += std::exp(x - st[0]);
        REQUIRE(std::fabs(st[1] * sum - 1.0) <= 1e-5);
      }
}

TEMPLATE_TEST_CASE("no query row of tiled attention sees a later key", "[attention]", float, bf16) {
  using T = TestType;
  // Rows from t0 on changed (q, k and v, every head): the outputs before t0 keep their bits, and
  // with dout zero from t0 on, so do dq, dk, dv before t0 (they depend on no later row).
  const Shape s{2, 150, 64, 2};
  for (int t0 : {1, 63, 64, 100, 149}) {
    INFO("t0 " << t0);
    const Inputs<T> in(s);
    Inputs<T> changed = in;
    const std::vector<T> other = stored<T>(uniform_values(changed.qkv.size(), 77, 3.0f));
    const auto C3 = static_cast<std::size_t>(3 * s.C), C = static_cast<std::size_t>(s.C);
    for (int b = 0; b < s.B; ++b)
      for (int t = t0; t < s.T; ++t)
        for (std::size_t c = 0; c < C3; ++c) {
          const std::size_t i = (static_cast<std::size_t>(b) * s.T + t) * C3 + c;
          changed.qkv[i] = other[i];
        }
    Inputs<T> quiet = in;
    for (int b = 0; b < s.B; ++b)
      for (int t = t0; t < s.T; ++t)
        for (std::size_t c = 0; c < C; ++c) {
          quiet.dout[(static_cast<std::size_t>(b) * s.T + t) * C + c] = 0.0f;
          changed.dout[(static_cast<std::size_t>(b) * s.T + t) * C + c] = 0.0f;
        }
    const Result<T> a = tiled(s, quiet), b = tiled(s, changed);
    for (int bb = 0; bb < s.B; ++bb) {
      const std::size_t row0 = static_cast<std::size_t>(bb) * s.T;
      const std::size_t rows = static_cast<std::size_t>(t0);
      CHECK(std::memcmp(a.out.data() + row0 * C, b.out.data() + row0 * C, rows * C * sizeof(T)) ==
            0);
      CHECK(std::memcmp(a.dqkv.data() + row0 * C3, b.dqkv.data() + row0 * C3,
                        rows * C3 * sizeof(float)) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("tiled attention is bitwise independent of the thread count", "[attention]",
                   float, bf16) {
  using T = TestType;
  // The (sequence, head) pairs are the tasks: 12 of them over 1..3 threads, long enough that
  // the threads overlap, and one alone (its GEMMs then split their rows across the pool).
  for (const Shape& s : {Shape{2, 300, 192, 6}, Shape{1, 200, 32, 1}}) {
    INFO("B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH);
    const Inputs<T> in(s);
    const Result<T> reference = tiled(s, in);
    for (int threads : {1, 2, 3}) {
      cpu::ThreadPool pool(threads);
      const cpu::PoolScope scope(&pool);
      INFO("threads " << threads);
      const Result<T> r = tiled(s, in);
      CHECK(same_bits(r.out, reference.out));
      CHECK(same_bits(r.saved, reference.saved));
      CHECK(same_bits(r.dqkv, reference.dqkv));
    }
  }
}

TEMPLATE_TEST_CASE("the measured distance of tiled attention from the whole-matrix one",
                   "[.measure]", float, bf16) {
  using T = TestType;
  const Shape shapes[] = {{2, 64, 64, 4}, {2, 128, 128, 4}, {1, 300, 128, 2}, {1, 1024, 128, 2}};
  for (const Shape& s : shapes) {
    const Inputs<T> in(s);
    const Result<T> a = tiled(s, in), b = whole(s, in);
    const auto C = static_cast<std::size_t>(s.C);
    std::printf("%s B %d T %d C %d NH %d: out %.3g dq %.3g dk %.3g dv %.3g\n",
                std::is_same_v<T, float> ? "fp32" : "bf16", s.B, s.T, s.C, s.NH,
                relative_error(a.out, b.out, C, 0, C), relative_error(a.dqkv, b.dqkv, 3 * C, 0, C),
                relative_error(a.dqkv, b.dqkv, 3 * C, C, C),
                relative_error(a.dqkv, b.dqkv, 3 * C, 2 * C, C));
  }
}

TEMPLATE_TEST_CASE("tiled and whole-matrix attention timed", "[.time]", float, bf16) {
  using T = TestType;
  const Shape shapes[] = {{8, 64, 64, 4}, {8, 128, 128, 4}, {1, 1024, 768, 12}};
  for (const Shape& s : shapes) {
    const Inputs<T> in(s);
    double t_tiled = 1e30, t_whole = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      (void)tiled(s, in);
      auto t1 = std::chrono::steady_clock::now();
      (void)whole(s, in);
      auto t2 = std::chrono::steady_clock::now();
      t_tiled = std::min(t_tiled, std::chrono::duration<double>(t1 - t0).count());
      t_whole = std::min(t_whole, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("B %d T %d C %d NH %d: tiled %.2f ms, whole %.2f ms\n", s.B, s.T, s.C, s.NH,
                1e3 * t_tiled, 1e3 * t_whole);
  }
}
