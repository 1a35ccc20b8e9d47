// BF16 GEMM: oneDNN's matmul or fp32 widening + OpenBLAS, chosen once (kernels/cpu/gemm_bf16.hpp).
#include "kernels/cpu/gemm_bf16.hpp"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <compare>
#include <cstdint>
#include <cstdlib>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_widen.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "precision/convert.hpp"
#include "base/error.hpp"

// Debian's oneDNN runs its parallel regions on OpenMP (libgomp, which meson links beside it):
// the number of threads is the calling thread's OpenMP setting, which the oneDNN backend sets
// around each call to what OpenBLAS may use, and restores.
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);
#endif

namespace zero::kernels::cpu {
namespace {

// The checks and messages of gemm (kernels/cpu/gemm.cpp), made before any element is read.
void check_args(bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc) {
  if (m < 0 || n < 0 || k < 0)
    throw Error(cat("gemm_bf16: negative size m=", m, " n=", n, " k=", k));
  const int a_cols = ta ? m : k;
  const int b_cols = tb ? k : n;
  if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
    throw Error(cat("gemm_bf16: leading dimension too small (lda=", lda, " for ", a_cols,
                    " columns, ldb=", ldb, " for ", b_cols, ", ldc=", ldc, " for ", n, ")"));
}

float widen_one(float x) {
  return x;
}
float widen_one(bf16 x) {
  return to_float(x);
}
void store_one(float& out, float x) {
  out = x;
}
void store_one(bf16& out, float x) {
  out = to_bf16(x);
}

// The shapes no backend needs to see: nothing to write (m or n is 0), or no products (k = 0),
// where C = beta·C and beta = 0 writes zeros without reading C. True when the call is done.
template <class Out>
bool trivial(bool ta, bool tb, int m, int n, int k, int lda, int ldb, float beta, Out* C, int ldc) {
  check_args(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      Out& c = C[static_cast<std::size_t>(i) * ldc + j];
      store_one(c, beta == 0 ? 0.0f : beta * widen_one(c));
    }
  return true;
}

// The elements a row-major rows×cols matrix with row stride ld spans (the last row ends at cols).
std::size_t extent(int rows, int cols, int ld) {
  return static_cast<std::size_t>(rows - 1) * ld + cols;
}


// ---- the oneDNN backend ------------------------------------------------------------------

using dt = dnnl::memory::data_type;

// One primitive per shape. oneDNN 2.6 fixes the output scale (alpha) and the sum post-op's scale
// (beta) when the primitive is created, so both are part of the key, bit for bit.
struct Key {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  std::uint32_t alpha, beta;
  dt src, dst;
  auto operator<=>(const Key&) const = default;
};

struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// A caller whose shapes change every call would grow the cache without bound; past this many
// it starts again (primitive creation costs about a millisecond, JIT included).
constexpr std::size_t kMaxCached = 256;

// Per thread: a oneDNN stream is not to be shared between threads, and the trainer's GEMMs
// run on one.
struct OnednnState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
};
OnednnState& onednn_state() {
  thread_local OnednnState s;
  return s;
}

// Row-major op(X) as oneDNN strides: a transposed operand is the stored matrix read by columns.
dnnl::matmul::primitive_desc make_pd(const Key& key, const dnnl::engine& engine) {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc a({key.m, key.k}, key.src, key.ta ? dims{1, key.lda} : dims{key.lda, 1});
  const dnnl::memory::desc b({key.k, key.n}, key.src, key.tb ? dims{1, key.ldb} : dims{key.ldb, 1});
  const dnnl::memory::desc c({key.m, key.n}, key.dst, dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  const float alpha = std::bit_cast<float>(key.alpha), beta = std::bit_cast<float>(key.beta);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});  // dst = alpha · (A·B) ...
  if (beta != 0.0f) {                                     // ... + beta · dst
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine);
}

// gemm's first call sets OpenBLAS's one-thread default (and prints its kernel warning), and the
// oneDNN backend takes its thread count from OpenBLAS: make that first call if nothing has.
void blas_defaults_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    float a = 0, b = 0, c = 0;
    gemm(false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  });
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return cat(v->major, '.', v->minor, '.', v->patch);
}

std::string isa_name(dnnl::cpu_isa isa) {
  switch (static_cast<dnnl_cpu_isa_t>(isa)) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    default:
      return cat("isa 0x", std::hex, static_cast<unsigned>(isa));
  }
}

// OpenMP's thread count for this thread's parallel regions, set for one oneDNN call and restored.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    before_ = omp_get_max_threads();
    omp_set_num_threads(threads);
#endif
  }
  ~OmpThreads() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
    omp_set_num_threads(before_);
#endif
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int before_ = 1;
};

// Runs the cached primitive for `key` (creating it on first use) on raw pointers.
// The threads oneDNN's parallel regions take inside that scope: what its OpenMP runtime
// answers there (oneDNN asks the same omp_get_max_threads), 1 for a sequential build.
int onednn_threads_in_scope() {
  const OmpThreads threads(openblas_get_num_threads());
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  return omp_get_max_threads();
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_SEQ
  return 1;
#else
  return -1;
#endif
}

const Entry& run_onednn(const Key& key, const void* a, const void* b, void* c) {
  blas_defaults_once();
  OnednnState& st = onednn_state();
  auto it = st.cache.find(key);
  if (it == st.cache.end()) {
    if (st.cache.size() >= kMaxCached) st.cache.clear();
    dnnl::matmul::primitive_desc pd;
    try {
      pd = make_pd(key, st.engine);
    } catch (const dnnl::error& e) {
      throw Error(cat("gemm_bf16: oneDNN ", onednn_version(), " has no ",
                      key.src == dt::bf16 ? "bf16" : "f32", " matmul for m=", key.m, " n=", key.n,
                      " k=", key.k, " (trans_a ", key.ta, ", trans_b ", key.tb, ", lda ", key.lda,
                      ", ldb ", key.ldb, ", ldc ", key.ldc, ") on this CPU (",
                      isa_name(dnnl::get_effective_cpu_isa()), "): ", e.what()));
    }
    it = st.cache.emplace(key, Entry{pd, dnnl::matmul(pd)}).first;
  }
  const Entry& e = it->second;
  dnnl::memory am(e.pd.src_desc(), st.engine, const_cast<void*>(a));
  dnnl::memory bm(e.pd.weights_desc(), st.engine, const_cast<void*>(b));
  dnnl::memory cm(e.pd.dst_desc(), st.engine, c);
  const OmpThreads threads(openblas_get_num_threads());
  e.prim.execute(st.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  st.stream.wait();
  return e;
}

Key key_of(bool ta, bool tb, int m, int n, int k, float alpha, int lda, int ldb, float beta,
           int ldc, dt src, dt dst) {
  return Key{ta, tb, m, n, k, lda, ldb, ldc, std::bit_cast<std::uint32_t>(alpha),
             std::bit_cast<std::uint32_t>(beta == 0.0f ? 0.0f : beta), src, dst};
}

OnednnBf16Probe probe_onednn() {
  OnednnBf16Probe p;
  p.version = onednn_version();
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  p.isa = isa_name(isa);
  // The ISA values are bit sets: every ISA with AVX512-BF16 (AMX included) holds its bits.
  const auto bf16_bits = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  p.native_bf16 = (static_cast<unsigned>(isa) & bf16_bits) == bf16_bits;
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    p.impl =
        make_pd(key_of(false, false, 128, 128, 128, 1.0f, 128, 128, 0.0f, 128, dt::bf16, dt::f32),
                engine)
            .impl_info_str();
  } catch (const dnnl::error& e) {
    p.error = e.what();
  }
  return p;
}

const GemmBf16Info& chosen() {
  static const GemmBf16Info info = [] {
    const char* env = std::getenv("ZERO_GEMM_BF16");
    return choose_gemm_bf16(env ? env : "", onednn_bf16_probe(), blas_core_status().running);
  }();
  return info;
}

}  // namespace

std::string_view name_of(GemmBf16Backend b) {
  return b == GemmBf16Backend::onednn ? "onednn" : "widen";
}

const OnednnBf16Probe& onednn_bf16_probe() {
  static const OnednnBf16Probe p = probe_onednn();
  return p;
}

GemmBf16Info choose_gemm_bf16(std::string_view env, const OnednnBf16Probe& probe,
                              std::string_view blas_core) {
  GemmBf16Info info;
  info.onednn_version = probe.version;
  info.onednn_isa = probe.isa;
  info.onednn_impl = probe.impl;
  const std::string onednn = "oneDNN " + probe.version;
  const bool has_bf16 = !probe.impl.empty();
  const bool reference = probe.impl.rfind("ref", 0) == 0;
  if (env == "onednn") {
    if (!has_bf16)
      throw Error(cat("ZERO_GEMM_BF16=onednn, but ", onednn, " has no bf16 matmul on this CPU (",
                      probe.isa, "): unset it or set ZERO_GEMM_BF16=widen"));
    info.backend = GemmBf16Backend::onednn;
    info.reason = "ZERO_GEMM_BF16=onednn";
  } else if (env == "widen") {
    info.backend = GemmBf16Backend::widen;
    info.reason = "ZERO_GEMM_BF16=widen";
  } else if (!env.empty()) {
    throw Error(cat("ZERO_GEMM_BF16='", env,
                    "' names no BF16 GEMM backend: set onednn or widen, or unset it to let zero "
                    "choose"));
  } else if (has_bf16 && probe.native_bf16 && !reference) {
    info.backend = GemmBf16Backend::onednn;
    info.reason = cat(onednn, " runs bf16 on this CPU's bf16 instructions (", probe.isa, ")");
  } else {
    info.backend = GemmBf16Backend::widen;
    info.reason = !has_bf16   ? cat(onednn, " has no bf16 matmul on this CPU (", probe.isa, ")")
                  : reference ? cat(onednn, "'s only bf16 matmul here is its reference code (",
                                    probe.impl, ")")
                              : cat(onednn, "'s bf16 matmul here (", probe.impl,
                                    ") emulates bf16: ", probe.isa, " has no bf16 instructions");
  }
  info.name = info.backend == GemmBf16Backend::onednn
                  ? "oneDNN " + probe.impl
                  : "fp32 widen + OpenBLAS " + std::string(blas_core);
  return info;
}

GemmBf16Info gemm_bf16_info() {
  return chosen();
}

OnednnThreads onednn_threads() {
  blas_defaults_once();
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  const char* runtime = "OpenMP";
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_TBB
  const char* runtime = "TBB";
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_SEQ
  const char* runtime = "sequential";
#else
  const char* runtime = "threadpool";
#endif
  return {onednn_threads_in_scope(), runtime};
}

void gemm_bf16_widen(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
                     const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (trivial(ta, tb, m, n, k, lda, ldb, beta, C, ldc)) return;
  detail::widen_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_widen(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
                     const bf16* B, int ldb, float beta, bf16* C, int ldc) {
  if (trivial(ta, tb, m, n, k, lda, ldb, beta, C, ldc)) return;
  detail::widen_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// gemm's partition (kernels/cpu/gemm.hpp): blocks of gemm_block_rows(m) rows of C, each one
// oneDNN call on one thread, on the calling thread's pool; the bits depend on m, never on the
// thread count. Returns the first block's implementation.
template <class Out>
std::string onednn_blocks(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A,
                          int lda, const bf16* B, int ldb, float beta, Out* C, int ldc) {
  const dt out = std::is_same_v<Out, bf16> ? dt::bf16 : dt::f32;
  std::string impl;
  const std::size_t rows = gemm_block_rows(m);
  for_blocks(static_cast<std::size_t>(m), rows, [&](std::size_t r0, std::size_t r1) {
    const bf16* a = ta ? A + r0 : A + r0 * static_cast<std::size_t>(lda);
    const Entry& e = run_onednn(key_of(ta, tb, static_cast<int>(r1 - r0), n, k, alpha, lda, ldb,
                                       beta, ldc, dt::bf16, out),
                                a, B, C + r0 * static_cast<std::size_t>(ldc));
    if (r0 == 0) impl = e.pd.impl_info_str();
  });
  return impl;
}

}  // namespace

std::string gemm_bf16_onednn(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A,
                             int lda, const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (trivial(ta, tb, m, n, k, lda, ldb, beta, C, ldc)) return "";
  return onednn_blocks(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string gemm_bf16_onednn(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A,
                             int lda, const bf16* B, int ldb, float beta, bf16* C, int ldc) {
  if (trivial(ta, tb, m, n, k, lda, ldb, beta, C, ldc)) return "";
  return onednn_blocks(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string gemm_bf16_onednn_f32(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A,
                                 int lda, const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (trivial(ta, tb, m, n, k, lda, ldb, beta, C, ldc)) return "";
  // Widened as stored, padding included, so that oneDNN sees the caller's strides.
  detail::WidenScratch& s = detail::widen_scratch();
  const std::size_t a_n = extent(ta ? k : m, ta ? m : k, lda);
  const std::size_t b_n = extent(tb ? n : k, tb ? k : n, ldb);
  float* a = detail::WidenScratch::at_least(s.a, a_n);
  float* b = detail::WidenScratch::at_least(s.b, b_n);
  convert(std::span(A, a_n), std::span(a, a_n));
  convert(std::span(B, b_n), std::span(b, b_n));
  return run_onednn(key_of(ta, tb, m, n, k, alpha, lda, ldb, beta, ldc, dt::f32, dt::f32), a, b, C)
      .pd.impl_info_str();
}

void gemm_bf16(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (chosen().backend == GemmBf16Backend::onednn)
    gemm_bf16_onednn(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm_bf16_widen(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, bf16* C, int ldc) {
  if (chosen().backend == GemmBf16Backend::onednn)
    gemm_bf16_onednn(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm_bf16_widen(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace zero::kernels::cpu
