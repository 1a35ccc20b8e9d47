// Tests of the threads inside a rank (kernels/cpu/thread_pool.hpp): the pool runs every task
// once, and every kernel that splits across it returns the same bits at 1, 2 and 3 threads as
// with no pool at all.
#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <type_traits>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include <cblas.h>

#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gpt_ops.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "precision/convert.hpp"
#include "test_data.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::bits;
using zero::kernels::test::mixed_values;
using zero::kernels::test::uniform_values;

namespace {

// Every output of a kernel as raw bytes, so that runs compare bit for bit (NaNs included), with
// the type of each part kept so that a difference is reported as one element's two values.
struct Part {
  std::size_t offset, count, size;
  std::string (*show)(const unsigned char*);
};
struct Bytes {
  std::vector<unsigned char> data;
  std::vector<Part> parts;
};

template <class T>
std::string show(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  std::ostringstream s;
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, fp16>) {
    s << std::setprecision(9) << to_float(v) << " (0x" << std::hex << v.bits << ')';
  } else if constexpr (std::is_same_v<T, float>) {
    s << std::setprecision(9) << v << " (0x" << std::hex << std::bit_cast<std::uint32_t>(v) << ')';
  } else if constexpr (std::is_floating_point_v<T>) {
    s << std::setprecision(17) << v;
  } else {
    s << +v;
  }
  return s.str();
}

template <class T>
void append_elements(Bytes& out, const T* v, std::size_t count) {
  const auto* p = reinterpret_cast<const unsigned char*>(v);
  out.parts.push_back({out.data.size(), count, sizeof(T), &show<T>});
  out.data.insert(out.data.end(), p, p + count * sizeof(T));
}
template <class T>
void append(Bytes& out, const std::vector<T>& v) {
  append_elements(out, v.data(), v.size());
}
template <class T>
void append_value(Bytes& out, const T& v) {
  append_elements(out, &v, 1);
}

// "" when `got` equals `want` bit for bit; else one short line: the first element that differs
// (which output, its index, both values) and how many differ (Catch would print whole vectors).
std::string difference(const Bytes& got, const Bytes& want) {
  if (got.data == want.data) return "";
  if (got.parts.size() != want.parts.size() || got.data.size() != want.data.size())
    return "the outputs differ in shape: " + std::to_string(got.parts.size()) + " parts of " +
           std::to_string(got.data.size()) + " bytes vs " + std::to_string(want.parts.size()) +
           " of " + std::to_string(want.data.size());
  std::string first;
  std::size_t differ = 0, total = 0;
  for (std::size_t k = 0; k < got.parts.size(); ++k) {
    const Part& part = got.parts[k];
    total += part.count;
    for (std::size_t i = 0; i < part.count; ++i) {
      const std::size_t at = part.offset + i * part.size;
      if (std::memcmp(&got.data[at], &want.data[at], part.size) == 0) continue;
      if (differ++ == 0)
        first = "output " + std::to_string(k) + " element " + std::to_string(i) + ": got " +
                part.show(&got.data[at]) + ", want " + part.show(&want.data[at]);
    }
  }
  return first + "; " + std::to_string(differ) + " of " + std::to_string(total) +
         " elements differ";
}

// run() with no pool (the serial reference), then on pools of 1, 2 and 3 threads: every result
// must equal the reference's bytes.
void same_at_every_count(const std::function<Bytes()>& run) {
  const Bytes reference = run();
  REQUIRE(!reference.data.empty());
  for (int threads : {1, 2, 3}) {
    cpu::ThreadPool pool(threads);
    const cpu::PoolScope scope(&pool);
    CHECK(cpu::current_threads() == threads);
    INFO("threads " << threads);
    CHECK(difference(run(), reference) == "");
  }
}

std::vector<bf16> to_bf16s(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  convert(std::span(x), std::span(out));
  return out;
}

// Sizes across several blocks of every partition, with ragged ends.
constexpr std::size_t kLong = 3 * 32768 + 1234;

}  // namespace

TEST_CASE("a pool runs every task exactly once, on more than one thread", "[threads]") {
  cpu::ThreadPool pool(3);
  REQUIRE(pool.size() == 3);
  for (int rep = 0; rep < 200; ++rep) {  // back-to-back jobs: no task of one leaks into the next
    const std::size_t tasks = 1 + static_cast<std::size_t>(rep % 37);
    std::vector<std::atomic<int>> runs(tasks);
    pool.run(tasks, [&](std::size_t t) { runs[t].fetch_add(1); });
    for (auto& r : runs) REQUIRE(r.load() == 1);
  }
  std::atomic<int> seen_other{0};
  const auto caller = std::this_thread::get_id();
  for (int rep = 0; rep < 50 && seen_other.load() == 0; ++rep)
    pool.run(64, [&](std::size_t) {
      if (std::this_thread::get_id() != caller) seen_other.store(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  CHECK(seen_other.load() == 1);
}

TEST_CASE("an exception in a task reaches the caller after every task ran", "[threads]") {
  cpu::ThreadPool pool(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(pool.run(10,
                             [&](std::size_t t) {
                               ran.fetch_add(1);
                               if (t == 3) throw std::runtime_error("task 3 failed");
                             }),
                    "task 3 failed");
  CHECK(ran.load() == 10);
  pool.run(4, [&](std::size_t) { ran.fetch_add(1); });  // still usable
  CHECK(ran.load() == 14);
  CHECK_THROWS_WITH(cpu::ThreadPool(0), Catch::Contains("at least 1 thread"));
}

TEST_CASE("the partition's blocks depend on the size only, and a scope installs the pool",
          "[threads]") {
  auto blocks = [] {
    std::vector<std::pair<std::size_t, std::size_t>> out(4);
    cpu::for_blocks(10, 3, [&](std::size_t b, std::size_t e) { out[b / 3] = {b, e}; });
    return out;
  };
  const auto serial = blocks();
  CHECK(serial == std::vector<std::pair<std::size_t, std::size_t>>{{0, 3}, {3, 6}, {6, 9}, {9, 10}});
  CHECK(cpu::current_pool() == nullptr);
  {
    cpu::ThreadPool pool(3);
    const cpu::PoolScope scope(&pool);
    CHECK(cpu::current_pool() == &pool);
    CHECK(blocks() == serial);
    std::thread other([] { CHECK(cpu::current_pool() == nullptr); });  // per thread
    other.join();
  }
  CHECK(cpu::current_pool() == nullptr);
}

TEST_CASE("element-wise kernels are bitwise independent of the thread count", "[threads]") {
  const std::vector<float> x = mixed_values(kLong, 1), g = mixed_values(kLong, 2);
  const std::vector<bf16> gb = to_bf16s(g);
  std::vector<fp16> gh(kLong);
  const std::vector<float> gh_wide = uniform_values(kLong, 3);
  convert(std::span(gh_wide), std::span(gh));
  same_at_every_count([&] {
    Bytes out;
    std::vector<float> acc = x;
    cpu::accumulate(acc, g);
    cpu::accumulate(acc, gb);
    cpu::accumulate(acc, gh);
    append(out, acc);
    std::vector<float> u = x;
    append_value(out, cpu::unscale(u, 0.37f));
    append(out, u);
    std::vector<bf16> b(kLong);
    std::vector<fp16> h(kLong);
    std::vector<float> w(kLong);
    cpu::cast(x, b);
    cpu::cast(x, h);
    append(out, b);
    append(out, h);
    cpu::cast(std::span<const bf16>(b), w);
    append(out, w);
    cpu::cast(std::span<const fp16>(h), w);
    append(out, w);
    std::vector<float> bad = x;
    bad[kLong - 5] = std::numeric_limits<float>::quiet_NaN();
    append_value(out, cpu::all_finite(std::span<const float>(x)));
    append_value(out, cpu::all_finite(std::span<const float>(bad)));
    append_value(out, cpu::unscale(bad, 2.0f));
    // The engine's whole-buffer copy and fill: memcpy's and memset's bytes, ragged ends included.
    std::vector<float> c(kLong, 1.1f);  // 0x3f8ccccd: no zero byte
    cpu::copy_bytes(c.data(), x.data(), (kLong - 3) * sizeof(float));
    CHECK(std::memcmp(c.data(), x.data(), (kLong - 3) * sizeof(float)) == 0);
    CHECK((c[kLong - 3] == 1.1f && c[kLong - 1] == 1.1f));
    append(out, c);
    auto* raw = reinterpret_cast<unsigned char*>(c.data());
    cpu::zero_bytes(raw + 5, kLong * sizeof(float) - 11);
    CHECK((bits(c[0]) == bits(x[0]) && c[kLong - 1] == 1.1f));  // the bytes around untouched
    CHECK(std::all_of(raw + 5, raw + kLong * sizeof(float) - 6, [](unsigned char b) { return b == 0; }));
    append(out, c);
    return out;
  });
}

TEST_CASE("the squared norm and AdamW are bitwise independent of the thread count", "[threads]") {
  const std::size_t n = 40 * 1024 + 17;  // partial blocks of the norm and of AdamW's tasks
  const std::vector<float> x = mixed_values(n, 4), p0 = uniform_values(n, 5),
                           g = uniform_values(n, 6, 3.0f);
  const std::vector<float> v0 = mixed_values(n, 7, true, 0.01f);
  AdamHyper h;
  h.weight_decay = 0.1;
  const AdamStep step = make_adam_step(h, 1e-3, 3);
  same_at_every_count([&] {
    Bytes out;
    append_value(out, cpu::squared_norm(x));
    append_value(out, cpu::squared_norm(std::span(x).first(1000)));
    std::vector<float> p = p0, m(n, 0.01f), v = v0, gg = g;
    gg[n - 3] = std::numeric_limits<float>::infinity();  // the first bad one, in the last task
    gg[n - 1] = std::numeric_limits<float>::quiet_NaN();
    std::vector<bf16> copy(n);
    append_value(out, cpu::adamw_step(p, m, v, gg, step, copy));
    append(out, p);
    append(out, m);
    append(out, v);
    append(out, copy);
    append_value(out, cpu::adamw_step(p, m, v, g, step));
    append(out, p);
    return out;
  });
}

namespace {

// The GPT's ops outside attention and the GEMMs' sums, forward and backward, on storage T.
template <class T>
Bytes gpt_ops_once(int N, int C, int V) {
  using namespace zero::kernels::cpu::gpt;
  const int seq = 16;
  auto store = [](const std::vector<float>& x) {
    if constexpr (std::is_same_v<T, float>)
      return x;
    else
      return to_bf16s(x);
  };
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) tokens[static_cast<std::size_t>(n)] = (n * 7 + n / 5) % V;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const auto wte = store(uniform_values(static_cast<std::size_t>(V) * C, 10));
  const auto wpe = store(uniform_values(static_cast<std::size_t>(seq) * C, 11));
  const auto inp = store(uniform_values(NC, 12, 2.0f));
  const std::vector<float> w = uniform_values(static_cast<std::size_t>(C), 13),
                           b = uniform_values(static_cast<std::size_t>(C), 14),
                           dout = uniform_values(NC, 15);
  Bytes out;
  std::vector<T> y(NC);
  embedding_forward<T>(y.data(), tokens.data(), wte.data(), wpe.data(), N, seq, C);
  append(out, y);
  std::vector<float> dwte(static_cast<std::size_t>(V) * C, 0.5f), dwpe(static_cast<std::size_t>(seq) * C);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), N, seq, C);
  append(out, dwte);
  append(out, dwpe);
  std::vector<float> mean(static_cast<std::size_t>(N)), rstd(static_cast<std::size_t>(N));
  layernorm_forward<T>(y.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  append(out, y);
  append(out, mean);
  append(out, rstd);
  std::vector<float> dinp(NC, 0.25f), dw(static_cast<std::size_t>(C), 1.0f), db(static_cast<std::size_t>(C));
  layernorm_backward<T>(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                        mean.data(), rstd.data(), N, C);
  append(out, dinp);
  append(out, dw);
  append(out, db);
  gelu_forward<T>(y.data(), inp.data(), static_cast<std::int64_t>(NC));
  append(out, y);
  gelu_backward<T>(dinp.data(), inp.data(), dout.data(), static_cast<std::int64_t>(NC));
  append(out, dinp);
  residual_forward<T>(y.data(), inp.data(), y.data(), static_cast<std::int64_t>(NC));
  append(out, y);
  // A linear layer C -> C: the bias add (and bf16 rounding) forward, dbias backward.
  Scratch scratch;
  const auto weight = store(uniform_values(static_cast<std::size_t>(C) * C, 16, 0.05f));
  matmul_forward<T>(y.data(), inp.data(), weight.data(), b.data(), N, C, C, scratch);
  append(out, y);
  std::vector<float> dweight(static_cast<std::size_t>(C) * C), dbias(static_cast<std::size_t>(C));
  matmul_backward<T>(dinp.data(), true, dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), N, C, C, scratch);
  append(out, dinp);
  append(out, dbias);
  std::vector<float> logits = uniform_values(static_cast<std::size_t>(N) * V, 17, 4.0f);
  append_value(out, crossentropy_forward_backward(logits.data(), tokens.data(), N, V, 0.125f));
  append(out, logits);
  return out;
}

}  // namespace

TEST_CASE("the GPT's element-wise ops, LayerNorm and the loss are bitwise independent of the "
          "thread count",
          "[threads]") {
  // 64 rows of 768: several row blocks (21 rows each) and column blocks (256 each), ragged.
  same_at_every_count([] { return gpt_ops_once<float>(64, 768, 300); });
  same_at_every_count([] { return gpt_ops_once<bf16>(64, 768, 300); });
  same_at_every_count([] { return gpt_ops_once<float>(5, 40, 7); });  // one block each
}

TEST_CASE("a GEMM split in row blocks gives the whole call's bits at every thread count",
          "[threads]") {
  // OpenBLAS, single-threaded in each block, gives the rows of a block the bits one call gives
  // them when the cuts are multiples of its row walk (GemmRowCuts::kUnit); its own threads do not.
  const int shapes[][3] = {{512, 384, 128}, {500, 1000, 128}, {256, 768, 3072}, {1700, 96, 64},
                           {200, 50, 300}, {128, 384, 128}, {1024, 768, 96}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int m = s[0], n = s[1], k = s[2];
        const int lda = ta ? m : k, ldb = tb ? k : n;
        const std::vector<float> A = uniform_values(static_cast<std::size_t>(m) * k, 20),
                                 B = uniform_values(static_cast<std::size_t>(k) * n, 21),
                                 C0 = uniform_values(static_cast<std::size_t>(m) * n, 22);
        INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb);
        // The whole product as one single-threaded OpenBLAS call.
        cpu::set_blas_threads(1);
        std::vector<float> whole = C0;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, whole.data(), n);
        auto blocked = [&] {
          std::vector<float> c = C0;
          cpu::gemm(ta, tb, m, n, k, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, c.data(), n);
          Bytes out;
          append(out, c);
          return out;
        };
        Bytes one;
        append(one, whole);
        CHECK(difference(blocked(), one) == "");
        same_at_every_count(blocked);
      }
}

TEST_CASE("a GEMM's row pieces are cut at multiples of OpenBLAS's row walk, one a thread",
          "[threads]") {
  for (int threads : {1, 2, 3, 4, 16})
    for (int m : {1, 23, 24, 100, 128, 200, 500, 1024, 1536, 1700, 4096, 50257}) {
      INFO("m " << m << ", " << threads << " threads");
      const cpu::GemmRowCuts cuts = cpu::gemm_row_cuts(m, threads);
      const std::size_t units = (static_cast<std::size_t>(m) + 23) / 24;
      CHECK(cuts.pieces == std::min<std::size_t>(static_cast<std::size_t>(threads), units));
      CHECK(cuts.begin(0) == 0);
      CHECK(cuts.begin(cuts.pieces) == static_cast<std::size_t>(m));
      std::size_t smallest = static_cast<std::size_t>(m), largest = 0;
      for (std::size_t p = 0; p < cuts.pieces; ++p) {
        CHECK(cuts.begin(p) % 24 == 0);
        CHECK(cuts.begin(p) < cuts.begin(p + 1));
        const std::size_t rows = cuts.begin(p + 1) - cuts.begin(p);
        if (p + 1 < cuts.pieces) smallest = std::min(smallest, rows);
        largest = std::max(largest, rows);
      }
      // The full pieces within one unit of each other.
      if (cuts.pieces > 2) CHECK(largest - smallest <= 24);
    }
  // gpt-nano's micro-batch of one sequence (128 rows) at two threads: 72 + 56, not 96 + 32.
  CHECK(cpu::gemm_row_cuts(128, 2).pieces == 2);
  CHECK(cpu::gemm_row_cuts(128, 2).begin(1) == 72);
}
