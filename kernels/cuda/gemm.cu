// cuBLASLt GEMM (kernels/cuda/gemm.hpp).
//
// Note: row-major through the transpose identity. cuBLASLt's default order is column-major, and
// a row-major r×c matrix with row stride ld is, byte for byte, the column-major c×r matrix (its
// transpose) with leading dimension ld. So for C = op(A)·op(B) we ask cuBLASLt for
//     Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m),
// passing the caller's B as cuBLASLt's first operand and the caller's A as its second, each with
// the caller's own transpose flag and stride: nothing is copied or transposed. (Row-order layouts,
// CUBLASLT_ORDER_ROW, would say the same, but fewer kernels accept them.) In this view the bias,
// one value per column of row-major C, is one value per row of Cᵀ: exactly the vector the BIAS
// epilogue broadcasts, so the epilogue fuses for every shape.
#include "kernels/cuda/gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.hpp"
#include "base/error.hpp"

namespace zero::kernels::cuda {
namespace {

enum class DType : std::uint8_t { f32, bf16 };

cudaDataType_t cuda_type(DType t) {
  return t == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
}
const char* dtype_name(DType t) {
  return t == DType::f32 ? "fp32" : "bf16";
}

// The largest power of two, up to 256 (what cuBLASLt assumes unless told), dividing the address.
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t r = 256;
  while (r > 1 && a % r != 0) r /= 2;
  return r;
}

// Everything the choice of algorithm depends on. Pointer alignments are part of it because an
// algorithm planned for 256-byte-aligned operands may use vector loads a sub-view cannot take.
struct Key {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  DType ab = DType::f32, c = DType::f32;
  bool bias = false;
  std::uint32_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;
  auto operator<=>(const Key&) const = default;
};

std::string describe(const Key& key) {
  return cat("cuda::gemm(", key.trans_a ? 'T' : 'N', key.trans_b ? 'T' : 'N', ", m=", key.m,
             ", n=", key.n, ", k=", key.k, ", lda=", key.lda, ", ldb=", key.ldb, ", ldc=", key.ldc,
             ", ", dtype_name(key.ab), " inputs, ", dtype_name(key.c), " C",
             key.bias ? ", bias" : "", ")");
}

void lt_check(cublasStatus_t s, const char* call, const std::string& where) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(cat(where, ": ", call, " failed: ", cublasLtGetStatusName(s), ": ",
                    cublasLtGetStatusString(s)));
}
// Describes the key only on failure, so the success path builds no string.
#define ZERO_LT_CHECK(call, key)                                                                   \
  do {                                                                                             \
    const cublasStatus_t zero_lt_status_ = (call);                                                 \
    if (zero_lt_status_ != CUBLAS_STATUS_SUCCESS) lt_check(zero_lt_status_, #call, describe(key)); \
  } while (false)

// RAII for cuBLASLt's descriptors (host objects: creating one touches no device).
template <class Handle, cublasStatus_t (*Destroy)(Handle)>
struct LtDeleter {
  void operator()(Handle h) const { Destroy(h); }
};
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>,
                                   LtDeleter<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>>;
using Layout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                               LtDeleter<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>>;
using Preference =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    LtDeleter<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>>;

// A planned key: descriptors built once and the algorithm the heuristic chose for them.
struct Plan {
  MatmulDesc desc;
  Layout first, second, out;  // cuBLASLt's A (the caller's B), B (the caller's A), C and D
  cublasLtMatmulAlgo_t algo{};
  bool fused_bias = false;  // else the bias is added by epilogue_kernel after the GEMM
};

template <class T>
void set_desc(const Plan& p, cublasLtMatmulDescAttributes_t attr, const T& value, const Key& key) {
  ZERO_LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc.get(), attr, &value, sizeof value), key);
}
template <class T>
void set_pref(const Preference& p, cublasLtMatmulPreferenceAttributes_t attr, const T& value,
              const Key& key) {
  ZERO_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(p.get(), attr, &value, sizeof value), key);
}

Layout make_layout(DType t, int rows, int cols, int ld, const Key& key) {
  cublasLtMatrixLayout_t l = nullptr;
  ZERO_LT_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), static_cast<std::uint64_t>(rows),
                                           static_cast<std::uint64_t>(cols), ld),
                key);
  return Layout(l);
}

// The plan for `key`, with the bias fused through the epilogue when `fuse_bias`; nullopt when
// cuBLASLt has no algorithm for it (so the caller can retry without the epilogue).
std::optional<Plan> try_plan(cublasLtHandle_t handle, const Key& key, bool fuse_bias,
                             const float* bias, std::size_t workspace_bytes) {
  Plan p;
  cublasLtMatmulDesc_t d = nullptr;
  ZERO_LT_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), key);
  p.desc.reset(d);
  // cuBLASLt's first operand is the caller's B, so it takes trans_b (see the note at the top).
  const std::int32_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::int32_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p, CUBLASLT_MATMUL_DESC_TRANSA, op_first, key);
  set_desc(p, CUBLASLT_MATMUL_DESC_TRANSB, op_second, key);
  if (fuse_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const std::int32_t bias_type = CUDA_R_32F;  // our bias is fp32 whatever C is
    const void* bias_ptr = bias;  // the heuristic reads its alignment from the pointer itself
    set_desc(p, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, key);
    set_desc(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, key);
    set_desc(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr, key);
  }
  // Stored row-major shapes: A is k×m when transposed, else m×k; B is n×k or k×n. A row-major
  // rows×cols matrix is a column-major cols×rows one with the same leading dimension.
  const int a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  const int b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  p.first = make_layout(key.ab, b_cols, b_rows, key.ldb, key);
  p.second = make_layout(key.ab, a_cols, a_rows, key.lda, key);
  p.out = make_layout(key.c, key.n, key.m, key.ldc, key);

  cublasLtMatmulPreference_t pr = nullptr;
  ZERO_LT_CHECK(cublasLtMatmulPreferenceCreate(&pr), key);
  const Preference pref(pr);
  const std::uint64_t ws = workspace_bytes;
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws, key);
  // Split-K partial sums: only in the compute type (fp32), in the workspace. INPLACE and
  // OUTPUT_TYPE would add them up in C's type, i.e. in bf16 for a bf16 C, which is not fp32
  // accumulation. Algorithms without split-K (scheme NONE) always pass the mask.
  const std::uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction, key);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b, key);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a, key);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, key);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c, key);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc.get(), p.first.get(), p.second.get(),
                                     p.out.get(), p.out.get(), pref.get(), 1, &result, &found);
  // With the epilogue, any refusal (NOT_SUPPORTED, or INVALID_VALUE for an fp32 bias this cuBLASLt
  // does not take with a bf16 C) only means "add the bias separately".
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s != CUBLAS_STATUS_SUCCESS && fuse_bias))
    return std::nullopt;
  if (s != CUBLAS_STATUS_SUCCESS) lt_check(s, "cublasLtMatmulAlgoGetHeuristic", describe(key));
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  p.algo = result.algo;
  p.fused_bias = fuse_bias;
  return p;
}

// C = beta·C + bias (k = 0: no product at all) or C += bias (the bias when not fused), over the
// m×n block of a row-major C. beta = 0 writes without reading, as BLAS does.
template <class T>
__global__ void epilogue_kernel(T* c, int m, int n, int ldc, bool scale, float beta,
                                const float* bias) {
  const std::size_t total = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += stride) {
    const std::size_t i = e / static_cast<std::size_t>(n), j = e % static_cast<std::size_t>(n);
    T& x = c[i * static_cast<std::size_t>(ldc) + j];
    float v = 0.0f;
    if (!scale)
      v = widen(x);
    else if (beta != 0.0f)
      v = beta * widen(x);
    if (bias != nullptr) v = v + bias[j];
    x = narrow<T>(v);
  }
}

void launch_epilogue(const Key& key, void* c, bool scale, float beta, const float* bias,
                     cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(key.m) * static_cast<std::size_t>(key.n);
  const int blocks = detail::grid_for(total);
  if (key.c == DType::f32)
    epilogue_kernel<float><<<blocks, detail::kThreads, 0, stream>>>(
        static_cast<float*>(c), key.m, key.n, key.ldc, scale, beta, bias);
  else
    epilogue_kernel<bf16><<<blocks, detail::kThreads, 0, stream>>>(
        static_cast<bf16*>(c), key.m, key.n, key.ldc, scale, beta, bias);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) detail::check(e, "cuda::gemm epilogue kernel", describe(key).c_str());
}

}  // namespace

struct GemmContext::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  std::map<Key, Plan> plans;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();  // descriptors before the handle
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

GemmContext::Impl& impl_of(GemmContext& ctx) {
  if (!ctx.impl_) throw Error("cuda::gemm: the GemmContext was moved from");
  return *ctx.impl_;
}

GemmContext::GemmContext(std::size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  const cublasStatus_t s = cublasLtCreate(&impl_->handle);
  if (s != CUBLAS_STATUS_SUCCESS) lt_check(s, "cublasLtCreate", "cuda::GemmContext");
  impl_->workspace = DeviceBuffer(workspace_bytes);
}

GemmContext::~GemmContext() = default;
GemmContext::GemmContext(GemmContext&&) noexcept = default;
GemmContext& GemmContext::operator=(GemmContext&&) noexcept = default;

std::size_t GemmContext::workspace_bytes() const {
  return impl_ ? impl_->workspace.bytes() : 0;
}

std::size_t GemmContext::cached_algorithms() const {
  return impl_ ? impl_->plans.size() : 0;
}

namespace {

void run(GemmContext::Impl& ctx, const Key& key, float alpha, const void* A, const void* B,
         float beta, void* C, const float* bias, StreamRef stream) {
  if (key.m < 0 || key.n < 0 || key.k < 0) throw Error(cat(describe(key), ": negative size"));
  // Row-major: a stored row holds the columns of the stored matrix (as kernels::cpu::gemm).
  const int a_cols = key.trans_a ? key.m : key.k;
  const int b_cols = key.trans_b ? key.k : key.n;
  if (key.lda < std::max(1, a_cols) || key.ldb < std::max(1, b_cols) ||
      key.ldc < std::max(1, key.n))
    throw Error(cat(describe(key), ": leading dimension too small (lda needs >= ", a_cols,
                    ", ldb >= ", b_cols, ", ldc >= ", key.n, ")"));
  if (key.m == 0 || key.n == 0) return;
  if (C == nullptr) throw Error(cat(describe(key), ": C is null"));
  const cudaStream_t s = detail::native(stream);
  if (key.k == 0) {  // no product: cuBLASLt layouts cannot be empty, and there is nothing to plan
    launch_epilogue(key, C, true, beta, bias, s);
    return;
  }
  if (A == nullptr || B == nullptr) throw Error(cat(describe(key), ": A or B is null"));

  const std::size_t ws = ctx.workspace.bytes();
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) {
    // The epilogue is tried only for a 16-byte-aligned bias: some cuBLASLt kernels assume it.
    std::optional<Plan> plan;
    if (bias != nullptr && key.align_bias >= 16) plan = try_plan(ctx.handle, key, true, bias, ws);
    if (!plan) plan = try_plan(ctx.handle, key, false, nullptr, ws);
    if (!plan) throw Error(cat(describe(key), ": cuBLASLt has no algorithm for this GEMM"));
    it = ctx.plans.emplace(key, std::move(*plan)).first;
  }
  Plan& p = it->second;
  auto matmul = [&] {
    if (p.fused_bias) {  // same alignment class as planned (it is in the key), new address
      const void* bias_ptr = bias;
      set_desc(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr, key);
    }
    // alpha and beta are host floats (the default pointer mode), read during this call.
    return cublasLtMatmul(ctx.handle, p.desc.get(), &alpha, B, p.first.get(), A, p.second.get(),
                          &beta, C, p.out.get(), C, p.out.get(), &p.algo, ctx.workspace.data(), ws,
                          s);
  };
  cublasStatus_t status = matmul();
  if (p.fused_bias &&
      (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
    // A fused plan the heuristic offered but cuBLASLt refuses to run. Both are validation
    // refusals, returned before anything is queued, so running again is safe: plan once more
    // without the epilogue, for this call and every later one.
    std::optional<Plan> plain = try_plan(ctx.handle, key, false, nullptr, ws);
    if (plain) {
      p = std::move(*plain);
      status = matmul();
    }
  }
  if (status != CUBLAS_STATUS_SUCCESS) lt_check(status, "cublasLtMatmul", describe(key));
  if (bias != nullptr && !p.fused_bias) launch_epilogue(key, C, false, 1.0f, bias, s);
}

Key make_key(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda, const void* B,
             int ldb, const void* C, int ldc, DType ab, DType c, const float* bias) {
  Key key;
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.ab = ab;
  key.c = c;
  key.bias = bias != nullptr;
  key.align_a = alignment(A);
  key.align_b = alignment(B);
  key.align_c = alignment(C);
  key.align_bias = bias != nullptr ? alignment(bias) : 0;
  return key;
}

}  // namespace

void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, void* C, GemmOut c_type,
          int ldc, const float* bias, StreamRef stream) {
  const DType c = c_type == GemmOut::f32 ? DType::f32 : DType::bf16;
  run(impl_of(ctx),
      make_key(trans_a, trans_b, m, n, k, A, lda, B, ldb, C, ldc, DType::bf16, c, bias), alpha, A,
      B, beta, C, bias, stream);
}

void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
          const float* bias, StreamRef stream) {
  run(impl_of(ctx),
      make_key(trans_a, trans_b, m, n, k, A, lda, B, ldb, C, ldc, DType::f32, DType::f32, bias),
      alpha, A, B, beta, C, bias, stream);
}

}  // namespace zero::kernels::cuda
