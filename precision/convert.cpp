// Bulk conversions: argument checks, path selection, and the scalar path (plain loops over the
// ZERO_HD functions, which the vector paths must match bit for bit).
#include "precision/convert.hpp"

#include "precision/convert_kernels.hpp"
#include "precision/random.hpp"
#include "base/error.hpp"

namespace zero {
namespace {

void f32_to_bf16(const float* src, bf16* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}
void f32_to_fp16(const float* src, fp16* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_fp16(src[i]);
}
void bf16_to_f32(const bf16* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
void fp16_to_f32(const fp16* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
void f32_to_bf16_sr(const float* src, bf16* dst, std::size_t n, std::uint64_t seed,
                    std::uint64_t offset) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16_sr(src[i], random_bits(seed, offset + i));
}
void f32_to_fp16_sr(const float* src, fp16* dst, std::size_t n, std::uint64_t seed,
                    std::uint64_t offset) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_fp16_sr(src[i], random_bits(seed, offset + i));
}

constexpr detail::ConvertKernels scalar_kernels{f32_to_bf16, f32_to_fp16,    bf16_to_f32,
                                                fp16_to_f32, f32_to_bf16_sr, f32_to_fp16_sr};

const detail::ConvertKernels& kernels_for(SimdPath path) {
  if (!available(path))
    throw Error(cat("the ", name_of(path),
                    " conversion path needs CPU features this machine lacks (",
                    describe(cpu_features()), "); use best_path() or SimdPath::scalar"));
  const detail::ConvertKernels* k = nullptr;
  switch (path) {
    case SimdPath::scalar:
      k = &scalar_kernels;
      break;
    case SimdPath::avx2:
      k = detail::avx2_kernels();
      break;
    case SimdPath::avx512:
      k = detail::avx512_kernels();
      break;
  }
  if (k == nullptr) throw Error(cat("the ", name_of(path), " conversion path is not compiled in"));
  return *k;
}

void check_sizes(std::size_t src, std::size_t dst, const char* what) {
  if (src != dst)
    throw Error(cat(what, ": source has ", src, " elements but destination has ", dst,
                    "; they must be equal"));
}

}  // namespace

void convert(std::span<const float> src, std::span<bf16> dst, SimdPath path) {
  check_sizes(src.size(), dst.size(), "convert float -> bf16");
  kernels_for(path).f32_to_bf16(src.data(), dst.data(), src.size());
}
void convert(std::span<const float> src, std::span<fp16> dst, SimdPath path) {
  check_sizes(src.size(), dst.size(), "convert float -> fp16");
  kernels_for(path).f32_to_fp16(src.data(), dst.data(), src.size());
}
void convert(std::span<const bf16> src, std::span<float> dst, SimdPath path) {
  check_sizes(src.size(), dst.size(), "convert bf16 -> float");
  kernels_for(path).bf16_to_f32(src.data(), dst.data(), src.size());
}
void convert(std::span<const fp16> src, std::span<float> dst, SimdPath path) {
  check_sizes(src.size(), dst.size(), "convert fp16 -> float");
  kernels_for(path).fp16_to_f32(src.data(), dst.data(), src.size());
}
void convert_sr(std::span<const float> src, std::span<bf16> dst, std::uint64_t seed,
                std::uint64_t offset, SimdPath path) {
  check_sizes(src.size(), dst.size(), "stochastic convert float -> bf16");
  kernels_for(path).f32_to_bf16_sr(src.data(), dst.data(), src.size(), seed, offset);
}
void convert_sr(std::span<const float> src, std::span<fp16> dst, std::uint64_t seed,
                std::uint64_t offset, SimdPath path) {
  check_sizes(src.size(), dst.size(), "stochastic convert float -> fp16");
  kernels_for(path).f32_to_fp16_sr(src.data(), dst.data(), src.size(), seed, offset);
}

void convert(std::span<const float> src, std::span<bf16> dst) {
  convert(src, dst, best_path());
}
void convert(std::span<const float> src, std::span<fp16> dst) {
  convert(src, dst, best_path());
}
void convert(std::span<const bf16> src, std::span<float> dst) {
  convert(src, dst, best_path());
}
void convert(std::span<const fp16> src, std::span<float> dst) {
  convert(src, dst, best_path());
}
void convert_sr(std::span<const float> src, std::span<bf16> dst, std::uint64_t seed,
                std::uint64_t offset) {
  convert_sr(src, dst, seed, offset, best_path());
}
void convert_sr(std::span<const float> src, std::span<fp16> dst, std::uint64_t seed,
                std::uint64_t offset) {
  convert_sr(src, dst, seed, offset, best_path());
}

}  // namespace zero
