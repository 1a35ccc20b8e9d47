// gpu_bench: how close the two hot device paths come to the GPU's peak. The fused AdamW shard
// update is memory-bound, so it is measured in GB/s against the peak memory bandwidth; the bf16
// cuBLASLt GEMM is compute-bound, measured in TFLOP/s against the peak dense bf16 rate.
//
//   gpu_bench [--adam-elems 256M] [--iters 20] [--peak-gbs X] [--peak-tflops X] [--json FILE]
//
// Each figure is the median of --iters runs (after 3 warm-ups) timed with CUDA events on one
// stream, no host synchronisation in between. AdamW bytes = 30 per element: p, m, v read and
// written (24), g read (4), the bf16 copy written (2). GEMM flops = 2·m·n·k.
// Peak bandwidth: 2 × memory clock × bus width from the device attributes, else a table by device
// name, else --peak-gbs (which also overrides). Peak bf16: a table by name and compute
// capability (dense, no sparsity), or --peak-tflops. Exits 77 without a GPU. About 10 s on an H200.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/adamw_math.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/kernels.hpp"
#include "precision/bf16.hpp"
#include "base/error.hpp"

namespace {

using namespace zero;
using namespace zero::kernels;

struct Config {
  std::size_t adam_elems = std::size_t{256} << 20;
  int iters = 20;
  int warmup = 3;
  double peak_gbs = 0;     // 0: from the device
  double peak_tflops = 0;  // 0: from the table
  std::string json;
};

std::size_t parse_count(const std::string& s) {
  std::size_t end = 0;
  const double v = std::stod(s, &end);
  const std::string unit = s.substr(end);
  const double mult = unit == "K"   ? 1024.0
                      : unit == "M" ? 1048576.0
                      : unit == "G" ? 1073741824.0
                                    : 1.0;
  if (!unit.empty() && mult == 1.0) throw Error(cat("bad count '", s, "' (use e.g. 256M)"));
  return static_cast<std::size_t>(v * mult);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(cat(a, " needs a value"));
      return argv[++i];
    };
    if (a == "--adam-elems")
      c.adam_elems = parse_count(next());
    else if (a == "--iters")
      c.iters = std::max(1, std::stoi(next()));
    else if (a == "--peak-gbs")
      c.peak_gbs = std::stod(next());
    else if (a == "--peak-tflops")
      c.peak_tflops = std::stod(next());
    else if (a == "--json")
      c.json = next();
    else
      throw Error(cat("unknown option ", a,
                      " (options: --adam-elems N --iters N --peak-gbs X --peak-tflops X "
                      "--json FILE)"));
  }
  return c;
}

struct Peak {
  double value = 0;  // 0: unknown
  std::string source;
};

bool has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// Data-sheet figures, for when the driver does not report the memory clock.
Peak bandwidth_table(const std::string& name) {
  if (has(name, "H200")) return {4800, "table: H200"};
  if (has(name, "H100") && has(name, "PCIe")) return {2000, "table: H100 PCIe"};
  if (has(name, "H100")) return {3350, "table: H100 SXM"};
  if (has(name, "A100") && has(name, "80GB")) return {2039, "table: A100 80GB"};
  if (has(name, "A100")) return {1555, "table: A100 40GB"};
  return {};
}

Peak peak_bandwidth(int device, const std::string& name, double flag) {
  if (flag > 0) return {flag, "--peak-gbs"};
  // cudaDeviceProp lost memoryClockRate in CUDA 13, but the attribute remains (driver_types.h).
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess &&
      clock_khz > 0 && bus_bits > 0)
    return {2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9,
            cat("2 x ", clock_khz / 1000, " MHz x ", bus_bits, "-bit bus")};
  cudaGetLastError();  // clear a failed query's error
  return bandwidth_table(name);
}

// Dense bf16 tensor-core peak (no sparsity): kernels/cuda/device.hpp's table, or the flag.
Peak peak_bf16(const std::string& name, int cc, double flag) {
  if (flag > 0) return {flag, "--peak-tflops"};
  const auto p = zero::kernels::cuda::bf16_peak(name, cc);
  return {p.tflops, p.tflops > 0 ? p.source : ""};
}

// Median of `iters` timed runs of f() on `stream`, after `warmup` untimed ones.
template <class F>
double median_ms(const Config& c, cuda::Stream& stream, F&& f) {
  for (int i = 0; i < c.warmup; ++i) f();
  std::vector<cuda::Event> start, stop;
  for (int i = 0; i < c.iters; ++i) {
    start.emplace_back(true);
    stop.emplace_back(true);
  }
  for (int i = 0; i < c.iters; ++i) {
    start[i].record(stream);
    f();
    stop[i].record(stream);
  }
  stop.back().synchronize();
  std::vector<double> ms;
  for (int i = 0; i < c.iters; ++i) ms.push_back(stop[i].elapsed_ms(start[i]));
  std::sort(ms.begin(), ms.end());
  const std::size_t h = ms.size() / 2;
  return ms.size() % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
}

std::string fraction(double value, const Peak& peak) {
  return peak.value > 0 ? cat(value / peak.value) : std::string("null");
}

struct AdamResult {
  double ms = 0, gbs = 0;
};

AdamResult bench_adamw(const Config& c, cuda::Stream& stream) {
  const std::size_t n = c.adam_elems;
  cuda::DeviceBuffer p(n * 4), m(n * 4), v(n * 4), g(n * 4), out(n * 2);
  const std::span<float> P(p.as<float>(), n), M(m.as<float>(), n), V(v.as<float>(), n),
      G(g.as<float>(), n);
  cuda::fill(P, 0.5f, stream);
  cuda::fill(M, 0.0f, stream);
  cuda::fill(V, 0.0f, stream);
  cuda::fill(G, 1e-3f, stream);
  AdamHyper h;
  h.weight_decay = 0.01;
  const AdamStep st = make_adam_step(h, 1e-4, 1);
  const std::span<bf16> O(out.as<bf16>(), n);
  AdamResult r;
  r.ms = median_ms(c, stream, [&] { cuda::adamw_step(P, M, V, G, st, O, stream); });
  r.gbs = 30.0 * static_cast<double>(n) / (r.ms * 1e-3) / 1e9;
  return r;
}

struct GemmShape {
  const char* name;
  bool ta, tb;
  int m, n, k;
  bool bias;
  cuda::GemmOut out;
};

// Squares, and one transformer-style linear layer of 8192 tokens, 4096 -> 4096 (and its 4x
// MLP up-projection): forward Y = X Wᵀ + b, backward dX = dY W and dW = dYᵀ X (fp32, as
// gradients are accumulated).
const GemmShape kGemms[] = {
    {"square 4096", false, false, 4096, 4096, 4096, false, cuda::GemmOut::bf16},
    {"square 8192", false, false, 8192, 8192, 8192, false, cuda::GemmOut::bf16},
    {"linear fwd 8192x4096 -> 4096, bias", false, true, 8192, 4096, 4096, true,
     cuda::GemmOut::bf16},
    {"linear dX 8192x4096 <- 4096", false, false, 8192, 4096, 4096, false, cuda::GemmOut::bf16},
    {"linear dW 4096x4096 over 8192 tokens", true, false, 4096, 4096, 8192, false,
     cuda::GemmOut::f32},
    {"mlp up 8192x4096 -> 16384, bias", false, true, 8192, 16384, 4096, true, cuda::GemmOut::bf16},
};

// bf16 values in [-1, 1) from a fixed xorshift: not zeros, which would flatter the tensor cores
// (less switching, less power, higher clocks).
cuda::DeviceBuffer random_bf16(std::size_t n, std::uint32_t seed) {
  std::vector<bf16> h(n);
  std::uint32_t x = seed | 1u;
  for (auto& e : h) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    e = to_bf16(static_cast<float>(x >> 8) / 8388608.0f - 1.0f);
  }
  cuda::DeviceBuffer d(n * sizeof(bf16));
  d.upload(h.data(), n * sizeof(bf16));
  return d;
}

double bench_gemm(const Config& c, cuda::Stream& stream, cuda::GemmContext& ctx,
                  const GemmShape& s) {
  const auto mk = static_cast<std::size_t>(s.m) * s.k, kn = static_cast<std::size_t>(s.k) * s.n,
             mn = static_cast<std::size_t>(s.m) * s.n;
  const cuda::DeviceBuffer A = random_bf16(mk, 1), B = random_bf16(kn, 2);
  const std::size_t c_elem = s.out == cuda::GemmOut::f32 ? 4 : 2;
  cuda::DeviceBuffer C(mn * c_elem), bias(static_cast<std::size_t>(s.n) * 4);
  cuda::fill(std::span<float>(bias.as<float>(), static_cast<std::size_t>(s.n)), 0.25f, stream);
  // Stored row strides: A is k×m when transposed, B is n×k when transposed.
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  return median_ms(c, stream, [&] {
    cuda::gemm(ctx, s.ta, s.tb, s.m, s.n, s.k, 1.0f, A.as<const bf16>(), lda, B.as<const bf16>(),
               ldb, 0.0f, C.data(), s.out, s.n, s.bias ? bias.as<const float>() : nullptr, stream);
  });
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

int run(const Config& c) {
  const std::vector<cuda::DeviceInfo> devices = cuda::describe_devices();
  if (devices.empty()) {
    std::printf("no CUDA device (or driver): nothing to measure\n");
    return 77;
  }
  const cuda::DeviceInfo& dev = devices.front();
  cuda::set_device(dev.index);
  const Peak bw = peak_bandwidth(dev.index, dev.name, c.peak_gbs);
  const Peak fl = peak_bf16(dev.name, dev.compute_capability, c.peak_tflops);
  std::printf("device %d: %s (compute capability %d.%d, %d SMs)\n", dev.index, dev.name.c_str(),
              dev.compute_capability / 10, dev.compute_capability % 10, dev.multiprocessors);
  std::printf("peak memory bandwidth: %s\n", bw.value > 0
                                                 ? cat(bw.value, " GB/s (", bw.source, ")").c_str()
                                                 : "unknown (pass --peak-gbs)");
  std::printf("peak dense bf16:       %s\n\n",
              fl.value > 0 ? cat(fl.value, " TFLOP/s (", fl.source, ")").c_str()
                           : "unknown (pass --peak-tflops)");

  cuda::Stream stream;
  const AdamResult adam = bench_adamw(c, stream);
  std::printf("adamw_step + bf16 copy, %zu elements x 30 B: %.3f ms, %.0f GB/s, %s of peak\n\n",
              c.adam_elems, adam.ms, adam.gbs, fraction(adam.gbs, bw).c_str());

  cuda::GemmContext ctx;
  std::string gemm_json;
  std::printf("%-40s %-5s %-5s %10s %10s %8s\n", "bf16 GEMM (fp32 accumulate)", "op", "C", "ms",
              "TFLOP/s", "of peak");
  for (const GemmShape& s : kGemms) {
    const double ms = bench_gemm(c, stream, ctx, s);
    const double tflops = 2.0 * s.m * static_cast<double>(s.n) * s.k / (ms * 1e-3) / 1e12;
    const char* op = s.ta ? (s.tb ? "TT" : "TN") : (s.tb ? "NT" : "NN");
    const char* out = s.out == cuda::GemmOut::f32 ? "fp32" : "bf16";
    std::printf("%-40s %-5s %-5s %10.3f %10.1f %8s\n", s.name, op, out, ms, tflops,
                fraction(tflops, fl).c_str());
    gemm_json += cat(gemm_json.empty() ? "" : ",\n", "    {\"name\": ", json_string(s.name),
                     ", \"op\": \"", op, "\", \"m\": ", s.m, ", \"n\": ", s.n, ", \"k\": ", s.k,
                     ", \"bias\": ", s.bias ? "true" : "false", ", \"c\": \"", out,
                     "\", \"median_ms\": ", ms, ", \"tflops\": ", tflops,
                     ", \"fraction_of_peak\": ", fraction(tflops, fl), "}");
  }

  if (!c.json.empty()) {
    std::FILE* f = std::fopen(c.json.c_str(), "w");
    if (f == nullptr) throw Error(cat("cannot write ", c.json));
    const std::string doc =
        cat("{\n  \"device\": ", json_string(dev.name),
            ",\n  \"compute_capability\": ", dev.compute_capability,
            ",\n  \"peak_gbs\": ", bw.value > 0 ? cat(bw.value) : "null",
            ",\n  \"peak_gbs_source\": ", json_string(bw.source),
            ",\n  \"peak_bf16_tflops\": ", fl.value > 0 ? cat(fl.value) : "null",
            ",\n  \"peak_bf16_source\": ", json_string(fl.source),
            ",\n  \"adamw\": {\"elements\": ", c.adam_elems, ", \"bytes_per_element\": 30",
            ", \"median_ms\": ", adam.ms, ", \"gbs\": ", adam.gbs,
            ", \"fraction_of_peak\": ", fraction(adam.gbs, bw), "}", ",\n  \"gemm\": [\n",
            gemm_json, "\n  ]\n}\n");
    const bool ok = std::fputs(doc.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !ok) throw Error(cat("cannot write ", c.json));
    std::printf("\nwrote %s\n", c.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
