// The reference MLP's device operations (kernels/cuda/model_ops.hpp) against the CPU loops of
// models/mlp.cpp, bit for bit where the math is plain IEEE arithmetic, on odd sizes and
// misaligned offsets. Exits 77 (meson: skipped) when no CUDA device is present.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/norm.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/model_ops.hpp"
#include "kernels/model_math.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels;
using cuda::DeviceBuffer;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;
using zero::kernels::test::uniform_values;

namespace {

const std::vector<std::size_t> kSizes = {1, 3, 7, 8, 1023, 1025, 4099, 100003};
const std::vector<std::size_t> kOffsets = {0, 1, 3};

template <class T>
struct DeviceArray {
  DeviceBuffer buf;
  std::size_t offset, n;
  DeviceArray(const std::vector<T>& host, std::size_t off)
      : buf((host.size() + off) * sizeof(T)), offset(off), n(host.size()) {
    buf.upload(host.data(), n * sizeof(T), offset * sizeof(T));
  }
  explicit DeviceArray(std::size_t count, std::size_t off = 0)
      : buf((count + off) * sizeof(T)), offset(off), n(count) {}
  std::span<T> span() { return {buf.as<T>() + offset, n}; }
  std::span<const T> cspan() { return span(); }
  T* ptr() { return buf.as<T>() + offset; }
  std::vector<T> get() const {
    std::vector<T> out(n);
    buf.download(out.data(), n * sizeof(T), offset * sizeof(T));
    return out;
  }
};

// The first element where the GPU and CPU disagree in bits, or "" (one Catch assertion per
// array, not per element).
std::string first_difference(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  if (gpu.size() != cpu.size()) return cat("sizes differ: ", gpu.size(), " vs ", cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i)
    if (!same(gpu[i], cpu[i]))
      return cat("element ", i, ": GPU ", gpu[i], " (0x", std::hex, test::bits(gpu[i]), "), CPU ",
                 cpu[i], " (0x", test::bits(cpu[i]), ")");
  return "";
}

#define REQUIRE_SAME(gpu, cpu)                                \
  do {                                                        \
    const std::string diff_ = first_difference((gpu), (cpu)); \
    INFO(diff_);                                              \
    REQUIRE(diff_.empty());                                   \
  } while (false)

// Distance in units in the last place between two finite floats of the same sign.
std::int64_t ulps(float a, float b) {
  auto key = [](float x) {
    const std::uint32_t u = test::bits(x);
    return (u & 0x80000000u) ? -static_cast<std::int64_t>(u & 0x7fffffffu)
                             : static_cast<std::int64_t>(u);
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

}  // namespace

TEST_CASE("GPU tanh forward is within CUDA's 2 ulp of the exact tanh") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    INFO("n " << n);
    std::vector<float> x = mixed_values(n, 21, false, 4.0f);
    DeviceArray<float> dx(x, 1);
    cuda::tanh_forward(dx.span(), stream);
    stream.synchronize();
    const std::vector<float> got = dx.get();
    std::int64_t worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // The exact value, rounded once: within half an ulp, so 2 ulp + 1/2 rounds to 3 here.
      const auto want = static_cast<float>(std::tanh(static_cast<double>(x[i])));
      const std::int64_t u = ulps(got[i], want);
      if (u > worst) {
        worst = u;
        at = i;
      }
    }
    INFO("worst at element " << at << ": x " << x[at] << ", GPU " << got[at]);
    REQUIRE(worst <= 3);
  }
}

TEST_CASE("GPU tanh backward equals the CPU loop bitwise") {
  cuda::Stream stream;
  for (std::size_t n : kSizes)
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      const std::vector<float> dprev = mixed_values(n, 31), a = uniform_values(n, 32);
      DeviceArray<float> dd(dprev, off), da(a, off + 1), dz(n, off);
      cuda::tanh_backward(dd.cspan(), da.cspan(), dz.span(), stream);
      cuda::tanh_backward(dd.cspan(), da.cspan(), dd.span(), stream);  // in place over dprev
      stream.synchronize();
      std::vector<float> cpu(n);
      for (std::size_t i = 0; i < n; ++i) {
        cpu[i] = dprev[i] * (1.0f - a[i] * a[i]);  // models/mlp.cpp's loop
        test::scalar_barrier();
      }
      REQUIRE_SAME(dz.get(), cpu);
      REQUIRE_SAME(dd.get(), cpu);
    }
}

TEST_CASE("GPU MSE gradient equals the CPU loop and its loss is deterministic, 0.5 x the norm") {
  cuda::Stream stream;
  for (std::size_t n : kSizes)
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      const std::vector<float> out = mixed_values(n, 41), target = uniform_values(n, 42);
      const float g = 65536.0f / 3000.0f;  // loss scale / element count: not a power of two
      DeviceArray<float> dout(out, off), dt(target, off), dz(n, off + 2);
      DeviceArray<double> loss(2), scratch(cuda::mse_loss_scratch(n));
      cuda::mse_loss_grad(dout.cspan(), dt.cspan(), g, dz.span(), loss.ptr(), scratch.span(),
                          stream);
      cuda::mse_loss_grad(dout.cspan(), dt.cspan(), g, dz.span(), loss.ptr() + 1, scratch.span(),
                          stream);
      stream.synchronize();
      const std::vector<double> sums = loss.get();

      std::vector<float> d(n), cpu(n);
      for (std::size_t i = 0; i < n; ++i) {
        d[i] = out[i] - target[i];  // models/mlp.cpp's loop
        cpu[i] = d[i] * g;
        test::scalar_barrier();
      }
      REQUIRE_SAME(dz.get(), cpu);
      REQUIRE(same(sums[0], sums[1]));
      REQUIRE(same(sums[0], 0.5 * cpu::squared_norm(d)));

      // In place: dz over out.
      cuda::mse_loss_grad(dout.cspan(), dt.cspan(), g, dout.span(), loss.ptr(), scratch.span(),
                          stream);
      stream.synchronize();
      REQUIRE_SAME(dout.get(), cpu);
      REQUIRE(same(loss.get()[0], sums[0]));
    }
}

TEST_CASE("GPU column sums add the rows in order, bitwise as the CPU bias-gradient loop") {
  cuda::Stream stream;
  for (int rows : {0, 1, 7, 1000})
    for (int cols : {1, 33, 257, 1000}) {
      INFO("rows " << rows << ", cols " << cols);
      const auto total = static_cast<std::size_t>(rows) * cols;
      const std::vector<float> x = mixed_values(total, 51);
      DeviceArray<float> dx(x, 1), dout(static_cast<std::size_t>(cols), 3);
      cuda::column_sums(dx.ptr(), rows, cols, dout.ptr(), stream);
      stream.synchronize();
      std::vector<float> cpu(static_cast<std::size_t>(cols));
      for (int j = 0; j < cols; ++j) cpu[j] = 0;  // models/mlp.cpp's loop
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          cpu[j] += x[static_cast<std::size_t>(i) * cols + j];
          test::scalar_barrier();
        }
      REQUIRE_SAME(dout.get(), cpu);
    }
}

TEST_CASE("GPU broadcast_rows copies the row into every row") {
  cuda::Stream stream;
  for (int rows : {1, 7, 1000})
    for (int cols : {1, 33, 1000}) {
      INFO("rows " << rows << ", cols " << cols);
      const std::vector<float> row = mixed_values(static_cast<std::size_t>(cols), 61);
      DeviceArray<float> drow(row, 2), dout(static_cast<std::size_t>(rows) * cols, 1);
      cuda::broadcast_rows(drow.ptr(), rows, cols, dout.ptr(), stream);
      stream.synchronize();
      std::vector<float> cpu;
      for (int i = 0; i < rows; ++i) cpu.insert(cpu.end(), row.begin(), row.end());
      REQUIRE_SAME(dout.get(), cpu);
    }
}

TEST_CASE("model ops reject mismatched lengths, short scratch and bad shapes") {
  cuda::Stream stream;
  DeviceArray<float> a(10), b(11);
  DeviceArray<double> loss(1), scratch(1);
  REQUIRE_THROWS_AS(cuda::tanh_backward(a.cspan(), b.cspan(), a.span(), stream), Error);
  REQUIRE_THROWS_AS(
      cuda::mse_loss_grad(a.cspan(), b.cspan(), 1.0f, a.span(), loss.ptr(), scratch.span(), stream),
      Error);
  REQUIRE_THROWS_AS(
      cuda::mse_loss_grad(a.cspan(), a.cspan(), 1.0f, a.span(), nullptr, scratch.span(), stream),
      Error);
  DeviceArray<float> big(5000);
  REQUIRE(cuda::mse_loss_scratch(5000) > 1);
  REQUIRE_THROWS_AS(cuda::mse_loss_grad(big.cspan(), big.cspan(), 1.0f, big.span(), loss.ptr(),
                                        scratch.span(), stream),
                    Error);
  REQUIRE_THROWS_AS(cuda::column_sums(a.ptr(), -1, 2, b.ptr(), stream), Error);
  REQUIRE_THROWS_AS(cuda::broadcast_rows(nullptr, 2, 2, b.ptr(), stream), Error);
}

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::cout << "no CUDA device (or driver): the GPU model-op tests are skipped\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
