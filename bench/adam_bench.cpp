// adam_bench: zero's fp32 AdamW shard update (kernels/cpu/adamw.hpp) against the memory bound it
// lives under, interleaved variant by variant in every rep (A/B/A/B), min and median.
//
//   adam_bench [--elements 16M,64M] [--reps N] [--threads N] [--path avx512|avx2|scalar]
//              [--variants adamw,adamw_bf16,copy,copy_bf16,copy_bf16_nt,triad] [--json FILE]
//
// Variants, with the bytes each moves per element (the figure GB/s is computed from; a store to
// a line not in cache also reads it first, which no figure here counts):
//   adamw       zero's update without a 16-bit copy: reads p, m, v, g, writes p, m, v     28 B
//   adamw_bf16  the same plus the bf16 copy of the new p that the all-gather sends       30 B
//   copy        a kernel with adamw's traffic and no math: reads 4 float arrays, writes 3  28 B
//   copy_bf16   copy plus a 16-bit write, adamw_bf16's traffic: the real bound            30 B
//   copy_bf16_nt  copy_bf16 with the 16-bit write as non-temporal (streaming) stores, which
//               skip reading the destination line first: the bound for a kernel that does so  30 B
//   triad       STREAM's triad a = b + s*c over three other arrays                        12 B
// "of bound" is the bound's time over zero's: 1.0 means zero runs at the speed of the copy.
// --threads N splits every array into N contiguous pieces, one per thread (first touched by it).
// Arrays come from zero::HostAllocator, as the engine's shards do: huge pages at these sizes.
// Sizes take K, M, G suffixes as powers of two (16M = 16777216 elements, as PyTorch counts).
#include <immintrin.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/adamw.hpp"
#include "precision/simd.hpp"
#include "zero/ledger.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace cpu = zero::kernels::cpu;
using zero::bf16;
using zero::SimdPath;

// ---- the bound kernels: no math, the same loads and stores as the update ----
// One plain loop each, compiled three times like zero's kernels (kernels/cpu/dispatch.hpp), so
// the bound is measured with the same vector width as the update it bounds.

#define ZERO_BENCH_LOOP __attribute__((always_inline)) inline
#define ZERO_BENCH_CLONES(name, params, args)                             \
  __attribute__((target("avx512f,avx512bw"))) void name##_avx512 params { \
    name##_body args;                                                     \
  }                                                                       \
  __attribute__((target("avx2"))) void name##_avx2 params {               \
    name##_body args;                                                     \
  }                                                                       \
  void name##_scalar params {                                             \
    name##_body args;                                                     \
  }

// p, m, v each take g added: 4 float reads, 3 float writes, and (Out = bf16) the upper half of
// the new p, a 16-bit write.
template <bool Bf16>
ZERO_BENCH_LOOP void copy_body(float* __restrict p, float* __restrict m, float* __restrict v,
                               const float* __restrict g, std::uint16_t* __restrict out,
                               std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i], pi = p[i] + gi;
    p[i] = pi;
    m[i] = m[i] + gi;
    v[i] = v[i] + gi;
    if constexpr (Bf16) {
      std::uint32_t u;
      std::memcpy(&u, &pi, 4);
      out[i] = static_cast<std::uint16_t>(u >> 16);
    }
  }
}
ZERO_BENCH_LOOP void copy7_body(float* p, float* m, float* v, const float* g, std::size_t n) {
  copy_body<false>(p, m, v, g, nullptr, n);
}
ZERO_BENCH_LOOP void copy8_body(float* p, float* m, float* v, const float* g, std::uint16_t* out,
                                std::size_t n) {
  copy_body<true>(p, m, v, g, out, n);
}
ZERO_BENCH_LOOP void triad_body(float* __restrict a, const float* __restrict b,
                                const float* __restrict c, float s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

ZERO_BENCH_CLONES(copy7, (float* p, float* m, float* v, const float* g, std::size_t n),
                  (p, m, v, g, n))
ZERO_BENCH_CLONES(copy8,
                  (float* p, float* m, float* v, const float* g, std::uint16_t* out, std::size_t n),
                  (p, m, v, g, out, n))
ZERO_BENCH_CLONES(triad, (float* a, const float* b, const float* c, float s, std::size_t n),
                  (a, b, c, s, n))

// copy_bf16 with streaming stores for the 16-bit copy, written with intrinsics: GCC emits no
// non-temporal store by itself. Elements before a 64-byte boundary of out and a tail shorter
// than 32 take the plain loop.
__attribute__((target("avx512f,avx512bw"))) void copy8nt_avx512(float* p, float* m, float* v,
                                                                const float* g, std::uint16_t* out,
                                                                std::size_t n) {
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 63u) != 0) ++i;
  copy8_avx512(p, m, v, g, out, i);
  alignas(64) std::uint16_t odd[32];  // the upper 16-bit halves of 32 floats in two vectors
  for (int k = 0; k < 32; ++k) odd[k] = static_cast<std::uint16_t>(2 * k + 1);
  const __m512i upper = _mm512_load_si512(odd);
  for (; i + 32 <= n; i += 32) {
    __m512i h[2];
    for (int k = 0; k < 2; ++k) {
      const std::size_t j = i + 16 * k;
      const __m512 gj = _mm512_loadu_ps(g + j), pj = _mm512_add_ps(_mm512_loadu_ps(p + j), gj);
      _mm512_storeu_ps(p + j, pj);
      _mm512_storeu_ps(m + j, _mm512_add_ps(_mm512_loadu_ps(m + j), gj));
      _mm512_storeu_ps(v + j, _mm512_add_ps(_mm512_loadu_ps(v + j), gj));
      h[k] = _mm512_castps_si512(pj);
    }
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                        _mm512_permutex2var_epi16(h[0], upper, h[1]));
  }
  copy8_avx512(p + i, m + i, v + i, g + i, out + i, n - i);
  _mm_sfence();
}
__attribute__((target("avx2"))) void copy8nt_avx2(float* p, float* m, float* v, const float* g,
                                                  std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  while (i < n && (reinterpret_cast<std::uintptr_t>(out + i) & 31u) != 0) ++i;
  copy8_avx2(p, m, v, g, out, i);
  for (; i + 16 <= n; i += 16) {
    __m256i h[2];
    for (int k = 0; k < 2; ++k) {
      const std::size_t j = i + 8 * k;
      const __m256 gj = _mm256_loadu_ps(g + j), pj = _mm256_add_ps(_mm256_loadu_ps(p + j), gj);
      _mm256_storeu_ps(p + j, pj);
      _mm256_storeu_ps(m + j, _mm256_add_ps(_mm256_loadu_ps(m + j), gj));
      _mm256_storeu_ps(v + j, _mm256_add_ps(_mm256_loadu_ps(v + j), gj));
      h[k] = _mm256_srli_epi32(_mm256_castps_si256(pj), 16);
    }
    // packus works per 128-bit lane; the permute puts the four 64-bit quarters back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xd8);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  copy8_avx2(p + i, m + i, v + i, g + i, out + i, n - i);
  _mm_sfence();
}

template <class F512, class F2, class F1>
auto pick(SimdPath path, F512 f512, F2 f2, F1 f1) {
  return path == SimdPath::avx512 ? f512 : path == SimdPath::avx2 ? f2 : f1;
}

// ---- memory and threads ----

// Every array comes from the engine's host allocator, as the shards it updates do (huge pages
// for large buffers, zero/ledger.hpp), for zero's kernel and the bound kernels alike.
struct HostFree {
  std::size_t bytes = 0;
  void operator()(void* p) const { zero::HostAllocator().deallocate(p, bytes); }
};
template <class T>
using Buffer = std::unique_ptr<T[], HostFree>;

template <class T>
Buffer<T> allocate(std::size_t n) {
  const std::size_t bytes = n * sizeof(T);
  return Buffer<T>(static_cast<T*>(zero::HostAllocator().allocate_unset(bytes)), HostFree{bytes});
}

// The calling thread is worker 0; the others wait on a barrier for the next job.
class Pool {
 public:
  explicit Pool(int n) : n_(n), start_(n), done_(n) {
    for (int t = 1; t < n; ++t) threads_.emplace_back([this, t] { loop(t); });
  }
  ~Pool() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  int size() const { return n_; }
  // Runs job(t) on every worker t and returns when all have finished.
  void run(const std::function<void(int)>& job) {
    job_ = &job;
    start_.arrive_and_wait();
    job(0);
    done_.arrive_and_wait();
  }

 private:
  void loop(int t) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      (*job_)(t);
      done_.arrive_and_wait();
    }
  }
  int n_;
  std::barrier<> start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  bool stop_ = false;
};

// Worker t's piece [begin, end) of n elements: contiguous, multiples of 1024 elements (4 KiB of
// floats) except the last.
std::pair<std::size_t, std::size_t> piece(std::size_t n, int t, int parts) {
  const std::size_t blocks = (n + 1023) / 1024;
  const std::size_t b0 = blocks * t / parts, b1 = blocks * (t + 1) / parts;
  return {std::min(n, b0 * 1024), std::min(n, b1 * 1024)};
}

// ---- the benchmark ----

struct Variant {
  std::string name;
  double bytes_per_element;
  std::vector<double> seconds;
};

struct Options {
  std::vector<std::size_t> elements{16u << 20, 64u << 20};
  int reps = 7;
  int threads = 1;
  SimdPath path = zero::best_path();
  std::vector<std::string> variants{"adamw",     "adamw_bf16",   "copy",
                                    "copy_bf16", "copy_bf16_nt", "triad"};
  std::string json;
};

double quantile(std::vector<double> v, bool median) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return median ? (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]))
                : v.front();
}

struct Result {
  std::size_t n = 0;
  std::vector<Variant> variants;
  const Variant* find(const std::string& name) const {
    for (const auto& v : variants)
      if (v.name == name) return &v;
    return nullptr;
  }
};

Result run_size(std::size_t n, const Options& o, Pool& pool) {
  const bool want_triad =
      std::find(o.variants.begin(), o.variants.end(), "triad") != o.variants.end();
  auto p = allocate<float>(n), m = allocate<float>(n), v = allocate<float>(n),
       g = allocate<float>(n);
  auto out = allocate<bf16>(n);
  Buffer<float> ta, tb, tc;
  if (want_triad) {
    ta = allocate<float>(n);
    tb = allocate<float>(n);
    tc = allocate<float>(n);
  }
  const int T = pool.size();
  // First touch by the thread that will use the piece. Values: p ~ [-1, 1), g ~ 1e-3 scale, so
  // every step is finite and nothing turns subnormal.
  pool.run([&](int t) {
    auto [b, e] = piece(n, t, T);
    std::uint32_t x = 12345u + static_cast<std::uint32_t>(b);
    for (std::size_t i = b; i < e; ++i) {
      x = x * 1664525u + 1013904223u;
      const float r = static_cast<float>(x >> 8) * 0x1p-24f;  // [0, 1)
      p[i] = 2.0f * r - 1.0f;
      g[i] = (r - 0.5f) * 2e-3f;
      m[i] = 0.0f;
      v[i] = 0.0f;
      out[i] = bf16{};
      if (want_triad) {
        ta[i] = 0.0f;
        tb[i] = r;
        tc[i] = 1.0f - r;
      }
    }
  });

  zero::kernels::AdamHyper h;
  h.weight_decay = 0.01;
  std::int64_t step = 0;
  const SimdPath path = o.path;
  auto copy7 = pick(path, copy7_avx512, copy7_avx2, copy7_scalar);
  auto copy8 = pick(path, copy8_avx512, copy8_avx2, copy8_scalar);
  auto copy8nt = pick(path, copy8nt_avx512, copy8nt_avx2, copy8_scalar);  // scalar: plain stores
  auto triad = pick(path, triad_avx512, triad_avx2, triad_scalar);

  auto run_variant = [&](const std::string& name) {
    std::function<void(int)> job;
    if (name == "adamw" || name == "adamw_bf16") {
      const zero::kernels::AdamStep s = zero::kernels::make_adam_step(h, 1e-3, ++step);
      const bool copy = name == "adamw_bf16";
      job = [&, s, copy](int t) {
        auto [b, e] = piece(n, t, T);
        std::span<float> P(p.get() + b, e - b), M(m.get() + b, e - b), V(v.get() + b, e - b);
        std::span<const float> G(g.get() + b, e - b);
        if (copy)
          cpu::adamw_step(P, M, V, G, s, std::span<bf16>(out.get() + b, e - b), path);
        else
          cpu::adamw_step(P, M, V, G, s, path);
      };
    } else if (name == "copy" || name == "copy_bf16" || name == "copy_bf16_nt") {
      const int copy = name == "copy_bf16" ? 1 : name == "copy_bf16_nt" ? 2 : 0;
      job = [&, copy](int t) {
        auto [b, e] = piece(n, t, T);
        if (copy)
          (copy == 2 ? copy8nt : copy8)(p.get() + b, m.get() + b, v.get() + b, g.get() + b,
                                        reinterpret_cast<std::uint16_t*>(out.get()) + b, e - b);
        else
          copy7(p.get() + b, m.get() + b, v.get() + b, g.get() + b, e - b);
      };
    } else {  // triad
      job = [&](int t) {
        auto [b, e] = piece(n, t, T);
        triad(ta.get() + b, tb.get() + b, tc.get() + b, 3.0f, e - b);
      };
    }
    const auto t0 = Clock::now();
    pool.run(job);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  Result r;
  r.n = n;
  for (const auto& name : o.variants) {
    const double bpe = name == "triad" ? 12 : name == "adamw" || name == "copy" ? 28 : 30;
    r.variants.push_back({name, bpe, {}});
  }
  for (const auto& name : o.variants) run_variant(name);  // warm up: pages, caches, frequency
  for (int rep = 0; rep < o.reps; ++rep)
    for (auto& var : r.variants) var.seconds.push_back(run_variant(var.name));
  return r;
}

int usage(const char* why) {
  if (why) std::cerr << "adam_bench: " << why << "\n";
  std::cerr << "usage: adam_bench [--elements 16M,64M] [--reps N] [--threads N]\n"
               "                  [--path avx512|avx2|scalar]\n"
               "                  [--variants adamw,adamw_bf16,copy,copy_bf16,copy_bf16_nt,triad]\n"
               "                  [--json FILE]\n";
  return why ? 2 : 0;
}

bool parse_count(const std::string& s, std::size_t& n) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(s.c_str(), &end, 10);
  std::size_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1u << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mul = 1u << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mul = 1u << 30, ++end;
  if (end == s.c_str() || *end != '\0' || x == 0) return false;
  n = static_cast<std::size_t>(x) * mul;
  return true;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

double gbps(const Variant& v, std::size_t n, bool median) {
  return v.bytes_per_element * static_cast<double>(n) / quantile(v.seconds, median) * 1e-9;
}

// bound's time over zero's (1.0: as fast as the bound), from the min times and the median times.
struct Ratio {
  std::string name, num, den;
};
const std::vector<Ratio> kRatios = {
    {"adamw_bf16_of_copy_bf16", "copy_bf16", "adamw_bf16"},
    {"adamw_bf16_of_copy_bf16_nt", "copy_bf16_nt", "adamw_bf16"},
    {"adamw_of_copy", "copy", "adamw"},
    {"adamw_of_adamw_bf16", "adamw_bf16", "adamw"},  // < 1: the share the 16-bit copy costs
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--elements") {
      o.elements.clear();
      for (const auto& t : split(value())) {
        std::size_t n = 0;
        if (!parse_count(t, n)) return usage("--elements needs counts such as 16M,64M");
        o.elements.push_back(n);
      }
      if (o.elements.empty()) return usage("--elements needs at least one count");
    } else if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
      if (o.reps < 1) return usage("--reps needs a positive count");
    } else if (a == "--threads") {
      o.threads = std::atoi(value().c_str());
      if (o.threads < 1) return usage("--threads needs a positive count");
    } else if (a == "--path") {
      const std::string p = value();
      const SimdPath paths[] = {SimdPath::avx512, SimdPath::avx2, SimdPath::scalar};
      const auto* named = std::find_if(std::begin(paths), std::end(paths),
                                       [&](SimdPath s) { return p == zero::name_of(s); });
      if (named == std::end(paths)) return usage("--path is avx512, avx2 or scalar");
      o.path = *named;
      if (!zero::available(o.path)) {
        std::cerr << "adam_bench: this CPU cannot run the " << p << " path\n";
        return 77;
      }
    } else if (a == "--variants") {
      o.variants = split(value());
      for (const auto& v : o.variants)
        if (v != "adamw" && v != "adamw_bf16" && v != "copy" && v != "copy_bf16" &&
            v != "copy_bf16_nt" && v != "triad")
          return usage(("unknown variant '" + v + "'").c_str());
      if (o.variants.empty()) return usage("--variants needs at least one variant");
    } else if (a == "--json") {
      o.json = value();
      if (o.json.empty()) return usage("--json needs a file name");
    } else if (a == "-h" || a == "--help") {
      return usage(nullptr);
    } else {
      return usage(("unknown option '" + a + "'").c_str());
    }
  }
  Pool pool(o.threads);
  std::vector<Result> results;
  std::printf(
      "adam_bench: %s path, %d thread%s, %d reps interleaved (each rep runs every variant "
      "once), after one warm-up run each\n",
      std::string(zero::name_of(o.path)).c_str(), o.threads, o.threads == 1 ? "" : "s", o.reps);
  for (std::size_t n : o.elements) {
    results.push_back(run_size(n, o, pool));
    const Result& r = results.back();
    std::printf("%zu elements (%.0fM)\n", n, static_cast<double>(n) / (1 << 20));
    for (const auto& v : r.variants)
      std::printf(
          "  %-11s %2.0f B/elem  ms min %8.3f median %8.3f   GB/s best %6.2f median %6.2f\n",
          v.name.c_str(), v.bytes_per_element, quantile(v.seconds, false) * 1e3,
          quantile(v.seconds, true) * 1e3, gbps(v, n, false), gbps(v, n, true));
    for (const auto& q : kRatios) {
      const Variant *a = r.find(q.num), *b = r.find(q.den);
      if (a && b)
        std::printf("  %-24s min %.3f median %.3f\n", q.name.c_str(),
                    quantile(a->seconds, false) / quantile(b->seconds, false),
                    quantile(a->seconds, true) / quantile(b->seconds, true));
    }
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f.precision(9);
    f << "{\"bench\":\"adam\",\"path\":\"" << zero::name_of(o.path)
      << "\",\"threads\":" << o.threads << ",\"reps\":" << o.reps << ",\"sizes\":[";
    for (std::size_t k = 0; k < results.size(); ++k) {
      const Result& r = results[k];
      f << (k ? "," : "") << "{\"elements\":" << r.n << ",\"variants\":{";
      for (std::size_t j = 0; j < r.variants.size(); ++j) {
        const Variant& v = r.variants[j];
        f << (j ? "," : "") << "\"" << v.name << "\":{\"bytes_per_element\":" << v.bytes_per_element
          << ",\"seconds\":[";
        for (std::size_t i = 0; i < v.seconds.size(); ++i) f << (i ? "," : "") << v.seconds[i];
        f << "],\"min_s\":" << quantile(v.seconds, false)
          << ",\"median_s\":" << quantile(v.seconds, true)
          << ",\"gbps_best\":" << gbps(v, r.n, false) << ",\"gbps_median\":" << gbps(v, r.n, true)
          << "}";
      }
      f << "},\"ratios\":{";
      bool first = true;
      for (const auto& q : kRatios) {
        const Variant *a = r.find(q.num), *b = r.find(q.den);
        if (!a || !b) continue;
        f << (first ? "" : ",") << "\"" << q.name
          << "\":{\"min\":" << quantile(a->seconds, false) / quantile(b->seconds, false)
          << ",\"median\":" << quantile(a->seconds, true) / quantile(b->seconds, true) << "}";
        first = false;
      }
      f << "}}";
    }
    f << "]}\n";
    if (!f) {
      std::cerr << "adam_bench: could not write " << o.json << "\n";
      return 1;
    }
  }
  return 0;
}
