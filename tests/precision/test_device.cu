// The precision/ functions run on the GPU give the same bits as on the CPU: widening of every
// bf16/fp16 pattern, round-to-nearest-even and stochastic rounding (Philox stream included) of
// ties, boundaries and random floats. Exits 77 (skipped) on a machine without a GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "precision/bf16.hpp"
#include "precision/fp16.hpp"
#include "precision/random.hpp"

namespace {

__global__ void widen(const std::uint16_t* in, float* b, float* h, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  b[i] = zero::to_float(zero::bf16{in[i]});
  h[i] = zero::to_float(zero::fp16{in[i]});
}

__global__ void narrow(const float* in, std::uint16_t* out, int n, unsigned long long seed) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t r = zero::random_bits(seed, static_cast<std::uint64_t>(i));
  out[4 * i + 0] = zero::to_bf16(in[i]).bits;
  out[4 * i + 1] = zero::to_fp16(in[i]).bits;
  out[4 * i + 2] = zero::to_bf16_sr(in[i], r).bits;
  out[4 * i + 3] = zero::to_fp16_sr(in[i], r).bits;
}

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }

  std::vector<std::uint16_t> patterns(65536);
  for (int i = 0; i < 65536; ++i) patterns[i] = static_cast<std::uint16_t>(i);
  // Floats: every pattern's value and the midpoints around it, 2^20 random bit patterns, and
  // 2^20 random floats within the fp16 range.
  std::vector<float> in;
  for (int i = 0; i < 65536; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(i) << 16;
    for (std::uint32_t d : {0u, 0x7fffu, 0x8000u, 0x8001u}) {
      float x;
      const std::uint32_t v = u | d;
      std::memcpy(&x, &v, 4);
      in.push_back(x);
    }
  }
  std::mt19937 gen(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(gen());
    const std::uint32_t v[2] = {u, (u & 0x807fffffu) | ((90u + u % 56u) << 23)};
    for (std::uint32_t w : v) {
      float x;
      std::memcpy(&x, &w, 4);
      in.push_back(x);
    }
  }
  const int n = static_cast<int>(in.size());
  const unsigned long long seed = 0x5eed5eed12345678ull;

  std::uint16_t *d_pat = nullptr, *d_out = nullptr;
  float *d_b = nullptr, *d_h = nullptr, *d_in = nullptr;
  std::vector<float> b(65536), h(65536);
  std::vector<std::uint16_t> out(4 * in.size());
  const bool good =
      ok(cudaMalloc(&d_pat, 65536 * 2), "cudaMalloc") &&
      ok(cudaMalloc(&d_b, 65536 * 4), "cudaMalloc") &&
      ok(cudaMalloc(&d_h, 65536 * 4), "cudaMalloc") &&
      ok(cudaMalloc(&d_in, in.size() * 4), "cudaMalloc") &&
      ok(cudaMalloc(&d_out, out.size() * 2), "cudaMalloc") &&
      ok(cudaMemcpy(d_pat, patterns.data(), 65536 * 2, cudaMemcpyHostToDevice), "copy in") &&
      ok(cudaMemcpy(d_in, in.data(), in.size() * 4, cudaMemcpyHostToDevice), "copy in") &&
      (widen<<<65536 / 256, 256>>>(d_pat, d_b, d_h, 65536), ok(cudaGetLastError(), "widen")) &&
      (narrow<<<(n + 255) / 256, 256>>>(d_in, d_out, n, seed), ok(cudaGetLastError(), "narrow")) &&
      ok(cudaMemcpy(b.data(), d_b, 65536 * 4, cudaMemcpyDeviceToHost), "copy out") &&
      ok(cudaMemcpy(h.data(), d_h, 65536 * 4, cudaMemcpyDeviceToHost), "copy out") &&
      ok(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), "copy out");
  cudaFree(d_pat), cudaFree(d_b), cudaFree(d_h), cudaFree(d_in), cudaFree(d_out);
  if (!good) return 1;

  long long wrong = 0;
  for (int i = 0; i < 65536; ++i) {
    const bool bad = bits(b[i]) != bits(zero::to_float(zero::bf16{patterns[i]})) ||
                     bits(h[i]) != bits(zero::to_float(zero::fp16{patterns[i]}));
    if (bad && wrong++ < 5) std::printf("widening 0x%04x differs\n", i);
  }
  for (int i = 0; i < n; ++i) {
    const std::uint32_t r = zero::random_bits(seed, static_cast<std::uint64_t>(i));
    const std::uint16_t want[4] = {zero::to_bf16(in[i]).bits, zero::to_fp16(in[i]).bits,
                                   zero::to_bf16_sr(in[i], r).bits,
                                   zero::to_fp16_sr(in[i], r).bits};
    for (int k = 0; k < 4; ++k) {
      if (out[4 * i + k] != want[k] && wrong++ < 5)
        std::printf("float 0x%08x, conversion %d: device 0x%04x, host 0x%04x\n", bits(in[i]), k,
                    out[4 * i + k], want[k]);
    }
  }
  const long long checks = 2 * 65536 + 4LL * n;
  std::printf("%lld passed, %lld failed\n", checks - wrong, wrong);
  return wrong == 0 ? 0 : 1;
}
