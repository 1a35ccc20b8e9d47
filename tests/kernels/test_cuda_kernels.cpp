// GPU vs CPU, bit for bit, for every CUDA kernel (kernels/cuda/kernels.hpp), on odd sizes and
// misaligned offsets. Exits 77 (meson: skipped) when no CUDA device is present.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/kernels.hpp"
#include "test_data.hpp"

using namespace zero;
using namespace zero::kernels;
using cuda::DeviceBuffer;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;

namespace {

// Sizes around the vector widths (4, 8) and the norm block (1024), and element offsets 0..3 so
// that arrays start misaligned, alone and relative to each other.
const std::vector<std::size_t> kSizes = {1, 3, 7, 8, 1023, 1025, 4099, 100003};
const std::vector<std::size_t> kOffsets = {0, 1, 2, 3};

// A device copy of host data starting `offset` elements into its allocation.
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
  std::vector<T> get() const {
    std::vector<T> out(n);
    buf.download(out.data(), n * sizeof(T), offset * sizeof(T));
    return out;
  }
};

template <class T>
std::span<const T> cspan(DeviceArray<T>& a) {
  return a.span();
}

int read_flag(DeviceArray<int>& f) {
  return f.get()[0];
}

void require_same(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    INFO("element " << i);
    REQUIRE(same(gpu[i], cpu[i]));
  }
}

template <class T>
void require_same16(const std::vector<T>& gpu, const std::vector<T>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    INFO("element " << i);
    REQUIRE(gpu[i].bits == cpu[i].bits);
  }
}

}  // namespace

TEST_CASE("the GPU AdamW and Adam updates and their bf16/fp16 copies equal the CPU's bitwise") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      for (AdamMode mode : {AdamMode::adamw, AdamMode::adam_l2}) {
        INFO("n " << n << ", offset " << off << ", mode " << static_cast<int>(mode));
        AdamHyper h;
        h.weight_decay = 0.05;
        h.mode = mode;
        const AdamStep st = make_adam_step(h, 3e-3, 4, 0.5f);
        std::vector<float> p = mixed_values(n, 1), m = mixed_values(n, 2),
                           v = mixed_values(n, 3, true);
        const std::vector<float> g = mixed_values(n, 4);
        // The 16-bit copy starts at a different misalignment (off + 1) than the fp32 arrays
        // half the time, which must force the scalar path and still be right.
        DeviceArray<float> dp(p, off), dm(m, off), dv(v, off), dg(g, off);
        DeviceArray<bf16> ob(n, off % 2 ? off : off + 1);
        DeviceArray<unsigned long long> first(std::vector<unsigned long long>{~0ull}, 0);
        cuda::adamw_step(dp.span(), dm.span(), dv.span(), cspan(dg), st, ob.span(), stream,
                         first.buf.as<unsigned long long>());
        DeviceArray<float> hp(p, off), hm(m, off), hv(v, off);
        DeviceArray<fp16> oh(n, off);
        cuda::adamw_step(hp.span(), hm.span(), hv.span(), cspan(dg), st, oh.span(), stream);
        DeviceArray<float> np(p, off), nm(m, off), nv(v, off);
        cuda::adamw_step(np.span(), nm.span(), nv.span(), cspan(dg), st, stream);
        stream.synchronize();

        std::vector<bf16> cb(n);
        std::vector<fp16> ch(n);
        std::vector<float> p2 = p, m2 = m, v2 = v;
        const std::int64_t cpu_first = cpu::adamw_step(p, m, v, g, st, cb);
        cpu::adamw_step(p2, m2, v2, g, st, ch);
        // The first element whose update was non-finite (kept unchanged), or none.
        const unsigned long long gpu_first = first.get()[0];
        CHECK(gpu_first == (cpu_first < 0 ? ~0ull : static_cast<unsigned long long>(cpu_first)));
        require_same(dp.get(), p);
        require_same(dm.get(), m);
        require_same(dv.get(), v);
        require_same16(ob.get(), cb);
        require_same(hp.get(), p);
        require_same16(oh.get(), ch);
        require_same(np.get(), p);
        require_same(nv.get(), v);
      }
    }
  }
}

TEST_CASE("the GPU update without bias correction, or one that would be non-finite, is the CPU's") {
  cuda::Stream stream;
  const std::size_t n = 4099;
  const std::vector<float> p0 = mixed_values(n, 21), g = mixed_values(n, 22);
  AdamHyper h;
  h.weight_decay = 0.01;
  h.bias_correction = false;
  for (double lr : {1e-3, 1e38}) {  // 1e38 without correction: lr·m/d overflows for large m/d
    INFO("lr " << lr);
    const AdamStep st = make_adam_step(h, lr, 1);
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    DeviceArray<float> dp(p, 1), dm(m, 1), dv(v, 1), dg(g, 1);
    DeviceArray<unsigned long long> first(std::vector<unsigned long long>{~0ull}, 0);
    cuda::adamw_step(dp.span(), dm.span(), dv.span(), cspan(dg), st, stream,
                     first.buf.as<unsigned long long>());
    stream.synchronize();
    const std::int64_t cpu_first = cpu::adamw_step(p, m, v, g, st);
    CHECK(first.get()[0] == (cpu_first < 0 ? ~0ull : static_cast<unsigned long long>(cpu_first)));
    require_same(dp.get(), p);
    require_same(dm.get(), m);
    require_same(dv.get(), v);
  }
}

TEST_CASE("GPU casts equal the CPU casts bitwise") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      const std::vector<float> x = mixed_values(n, 5, false, 1e5f);
      std::vector<bf16> cb(n);
      std::vector<fp16> ch(n);
      std::vector<float> wb(n), wh(n);
      cpu::cast(x, cb);
      cpu::cast(x, ch);
      cpu::cast(std::span<const bf16>(cb), wb);
      cpu::cast(std::span<const fp16>(ch), wh);

      DeviceArray<float> dx(x, off);
      DeviceArray<bf16> db(n, off);
      DeviceArray<fp16> dh(n, (off + 2) % 4);
      cuda::cast(cspan(dx), db.span(), stream);
      cuda::cast(cspan(dx), dh.span(), stream);
      DeviceArray<float> dwb(n, (off + 1) % 4), dwh(n, off);
      cuda::cast(cspan(db), dwb.span(), stream);
      cuda::cast(cspan(dh), dwh.span(), stream);
      stream.synchronize();
      require_same16(db.get(), cb);
      require_same16(dh.get(), ch);
      require_same(dwb.get(), wb);
      require_same(dwh.get(), wh);
    }
  }
}

TEST_CASE("GPU accumulate of fp32, bf16 and fp16 gradients equals the CPU's bitwise") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      std::vector<float> acc = mixed_values(n, 6);
      const std::vector<float> g = mixed_values(n, 7, false, 50.0f);
      std::vector<bf16> gb(n);
      std::vector<fp16> gh(n);
      cpu::cast(g, gb);
      cpu::cast(g, gh);
      DeviceArray<float> a(acc, off), b(acc, off), c(acc, (off + 1) % 4);
      DeviceArray<float> dg(g, off);
      DeviceArray<bf16> dgb(gb, off);
      DeviceArray<fp16> dgh(gh, off);
      cuda::accumulate(a.span(), cspan(dg), stream);
      cuda::accumulate(b.span(), cspan(dgb), stream);
      cuda::accumulate(c.span(), cspan(dgh), stream);
      stream.synchronize();
      std::vector<float> ca = acc, cb = acc, cc = acc;
      cpu::accumulate(ca, g);
      cpu::accumulate(cb, gb);
      cpu::accumulate(cc, gh);
      require_same(a.get(), ca);
      require_same(b.get(), cb);
      require_same(c.get(), cc);
    }
  }
}

TEST_CASE("GPU unscale scales like the CPU and raises the device flag for inf or NaN anywhere") {
  cuda::Stream stream;
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      std::vector<float> x = mixed_values(n, 8);
      DeviceArray<int> flag(1);
      cuda::zero_flag(flag.span().data(), stream);
      DeviceArray<float> dx(x, off);
      cuda::unscale(dx.span(), 0.25f, flag.span().data(), stream);
      stream.synchronize();
      const bool cpu_bad = cpu::unscale(x, 0.25f);
      CHECK_FALSE(cpu_bad);
      CHECK(read_flag(flag) == 0);
      require_same(dx.get(), x);

      for (std::size_t pos : {std::size_t{0}, n / 2, n - 1}) {
        INFO("inf at " << pos);
        std::vector<float> y = mixed_values(n, 9);
        y[pos] = inf;
        DeviceArray<float> dy(y, off);
        cuda::zero_flag(flag.span().data(), stream);
        cuda::unscale(dy.span(), 0.5f, flag.span().data(), stream);
        // A clean buffer afterwards must not clear it: one flag serves a whole step.
        DeviceArray<float> clean(x, off);
        cuda::unscale(clean.span(), 1.0f, flag.span().data(), stream);
        stream.synchronize();
        CHECK(read_flag(flag) == 1);
        CHECK(cpu::unscale(y, 0.5f));
        require_same(dy.get(), y);
      }
    }
  }
}

TEST_CASE("GPU check_finite raises the device flag exactly when the CPU all_finite is false") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      INFO("n " << n << ", offset " << off);
      std::vector<float> x = mixed_values(n, 10);
      x[n - 1] = std::numeric_limits<float>::quiet_NaN();
      std::vector<bf16> xb(n);
      cpu::cast(x, xb);
      DeviceArray<float> dx(x, off);
      DeviceArray<bf16> dxb(xb, off);
      DeviceArray<int> f1(1), f2(1);
      cuda::zero_flag(f1.span().data(), stream);
      cuda::zero_flag(f2.span().data(), stream);
      cuda::check_finite(cspan(dx), f1.span().data(), stream);
      cuda::check_finite(cspan(dxb), f2.span().data(), stream);
      stream.synchronize();
      CHECK(read_flag(f1) == (cpu::all_finite(x) ? 0 : 1));
      CHECK(read_flag(f2) == (cpu::all_finite(std::span<const bf16>(xb)) ? 0 : 1));
    }
  }
}

TEST_CASE("GPU squared_norm equals the CPU's bitwise, including the multi-level outer tree") {
  cuda::Stream stream;
  std::vector<std::size_t> sizes = kSizes;
  sizes.push_back(0);
  sizes.push_back(4097 * 1024 + 5);  // > 4096 block sums: the grid-wide level kernels run
  sizes.push_back(9000 * 1024 + 3);
  for (std::size_t n : sizes) {
    for (std::size_t off : {std::size_t{0}, std::size_t{3}}) {
      INFO("n " << n << ", offset " << off);
      const std::vector<float> x = mixed_values(n, 11, false, 4.0f);
      DeviceArray<float> dx(x, off);
      DeviceArray<double> scratch(cuda::squared_norm_scratch(n));
      DeviceArray<double> result(1);
      cuda::squared_norm(cspan(dx), result.span().data(), scratch.span(), stream);
      const double first = [&] {
        stream.synchronize();
        return result.get()[0];
      }();
      CHECK(same(first, cpu::squared_norm(x)));
      cuda::squared_norm(cspan(dx), result.span().data(), scratch.span(), stream);
      stream.synchronize();
      CHECK(same(result.get()[0], first));  // and again: bitwise repeatable
    }
  }
}

TEST_CASE("GPU fill and zero set every element") {
  cuda::Stream stream;
  DeviceArray<float> x(1003, 1);
  cuda::fill(x.span(), 2.5f, stream);
  stream.synchronize();
  for (float e : x.get()) REQUIRE(e == 2.5f);
  cuda::zero(x.span(), stream);
  stream.synchronize();
  for (float e : x.get()) REQUIRE(test::bits(e) == 0u);
}

TEST_CASE("describe_devices reports every device with its memory and SM count") {
  const auto devices = cuda::describe_devices();
  REQUIRE(static_cast<int>(devices.size()) == cuda::device_count());
  for (const auto& d : devices) {
    CHECK(!d.name.empty());
    CHECK(d.memory_bytes > 0);
    CHECK(d.compute_capability >= 50);
    CHECK(d.multiprocessors > 0);
  }
}

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::cout << "no CUDA device (or driver): the GPU kernel tests are skipped\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
