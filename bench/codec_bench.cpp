// codec_bench: the per-element cost of compression's CPU loops (kernels/cpu/quant.hpp) on this
// machine, as the time model's profile keys (docs/time.md, "Encoding and decoding"):
//
//   codec_bench [--elements 64K,256K,1M] [--block 2048] [--ratios 0.01,0.1] [--reps N]
//               [--json FILE]
//
// Each loop runs as the engine runs it on one segment of n values (zero/wire_compress.cpp):
//   quantize        the segment read into fp32 (load_to_f32), then quantize_blocks (int8, int4)
//   dequantize-add  the owner's sum: one payload added into an fp32 segment (dequantize_add)
//   dequantize      qwZ's write: one payload decoded and stored (dequantize, store_from_f32)
//   topk            error feedback's residual add, then topk_select of k = ceil(ratio n)
// Each figure is the median of --reps timings (each of calls enough to read a clock well): the
// median, not the best, so that a run sharing the cores with others reads what sharing costs.
// TopK is not linear in a simple way: nth_element's pass over the n values, then the sort of the
// k kept indices. The fit t = a n + b k log2 k over every size and ratio gives topk_select_ns (a)
// and topk_sort_ns (b). Run it as many times at once as the training runs ranks on the machine
// (mpirun -n 4 ... on a machine that time-shares its cores), so that each rank's figure holds
// what sharing the cores costs; bench/compression_cluster.py does.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant.hpp"

namespace {

namespace cpu = zero::kernels::cpu;
using Clock = std::chrono::steady_clock;

std::vector<std::int64_t> sizes_of(const std::string& list) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (at < list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string s = list.substr(at, end - at);
    std::int64_t scale = 1;
    if (!s.empty() && (s.back() == 'K' || s.back() == 'M')) {
      scale = s.back() == 'K' ? 1024 : 1048576;
      s.pop_back();
    }
    out.push_back(std::stoll(s) * scale);
    at = end + 1;
  }
  return out;
}

std::vector<double> ratios_of(const std::string& list) {
  std::vector<double> out;
  std::size_t at = 0;
  while (at < list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    out.push_back(std::stod(list.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

// Seconds per call of f: the median of `reps` timings of enough calls to take about 5 ms.
template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm the caches and the pages
  int calls = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 5e-3 || calls > (1 << 20)) break;
    calls *= 2;
  }
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::int64_t n;
  double quant8, quant4, deq_add8, deq_add4, deq8;  // seconds per element
  std::vector<double> topk;                         // seconds per call, one per ratio
};

Row measure(std::int64_t n, std::int64_t block, const std::vector<double>& ratios, int reps) {
  std::mt19937 gen(1234 + static_cast<unsigned>(n));
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> grad(n), scratch(n), acc(n), v(n);
  for (float& x : grad) x = normal(gen);
  std::vector<std::byte> p8(cpu::quant_payload_bytes(n, block, 8)),
      p4(cpu::quant_payload_bytes(n, block, 4));
  const double N = static_cast<double>(n);
  Row row{n, 0, 0, 0, 0, 0, {}};
  auto quantize = [&](int bits, std::vector<std::byte>& p) {
    std::memcpy(scratch.data(), grad.data(), 4 * n);  // load_to_f32 of an fp32 gradient
    cpu::quantize_blocks(scratch, block, bits, p);
  };
  row.quant8 = median_seconds(reps, [&] { quantize(8, p8); }) / N;
  row.quant4 = median_seconds(reps, [&] { quantize(4, p4); }) / N;
  row.deq_add8 = median_seconds(reps, [&] { cpu::dequantize_add(p8, block, 8, acc); }) / N;
  row.deq_add4 = median_seconds(reps, [&] { cpu::dequantize_add(p4, block, 4, acc); }) / N;
  row.deq8 = median_seconds(reps,
                            [&] {
                              cpu::dequantize(p8, block, 8, scratch);
                              std::memcpy(acc.data(), scratch.data(), 4 * n);  // store_from_f32
                            }) /
             N;
  std::vector<std::uint32_t> idx(n);
  for (double ratio : ratios) {
    const std::int64_t k = cpu::topk_count(n, ratio);
    std::vector<std::byte> pk(cpu::topk_payload_bytes(k));
    // A residual that holds what the last selection left (the steady state of error feedback).
    std::memcpy(v.data(), grad.data(), 4 * n);
    row.topk.push_back(median_seconds(reps, [&] {
      for (std::int64_t i = 0; i < n; ++i) v[i] += grad[i];  // residual + gradient
      cpu::topk_select(v, k, idx, pk);
    }));
  }
  return row;
}

// Least squares t = a n + b k log2 k over every (size, ratio): {a, b}, each >= 0.
std::pair<double, double> fit_topk(const std::vector<Row>& rows,
                                   const std::vector<double>& ratios) {
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  for (const Row& r : rows)
    for (std::size_t j = 0; j < ratios.size(); ++j) {
      const double k = static_cast<double>(cpu::topk_count(r.n, ratios[j]));
      const double x = static_cast<double>(r.n), y = k * std::log2(std::max(2.0, k));
      const double t = r.topk[j];
      // Weighted by 1/t^2: a relative fit, so the small sizes count as much as the large.
      const double w = 1 / (t * t);
      sxx += w * x * x, sxy += w * x * y, syy += w * y * y, sxt += w * x * t, syt += w * y * t;
    }
  const double det = sxx * syy - sxy * sxy;
  double a = det != 0 ? (sxt * syy - syt * sxy) / det : sxt / sxx;
  double b = det != 0 ? (sxx * syt - sxy * sxt) / det : 0;
  if (b < 0) b = 0, a = sxt / sxx;
  if (a < 0) a = 0, b = syy > 0 ? syt / syy : 0;
  return {a, b};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes = "64K,256K,1M", ratios_text = "0.01,0.1", json;
  std::int64_t block = 2048;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--elements")
      sizes = value();
    else if (a == "--block")
      block = std::stoll(value());
    else if (a == "--ratios")
      ratios_text = value();
    else if (a == "--reps")
      reps = std::stoi(value());
    else if (a == "--json")
      json = value();
    else {
      std::cerr << "usage: codec_bench [--elements 64K,256K,1M] [--block 2048] [--ratios "
                   "0.01,0.1] [--reps N] [--json FILE]\n";
      return 2;
    }
  }
  const std::vector<double> ratios = ratios_of(ratios_text);
  if (block < 1 || reps < 1 || ratios.empty()) {
    std::cerr << "codec_bench: --block and --reps must be >= 1 and --ratios not empty\n";
    return 2;
  }
  std::vector<Row> rows;
  std::printf("| elements | quantize int8 | int4 | dequantize-add int8 | int4 | dequantize int8 |");
  for (double r : ratios) std::printf(" topk %g |", r);
  std::printf("  (ns per element)\n|---|---|---|---|---|---|");
  for (std::size_t j = 0; j < ratios.size(); ++j) std::printf("---|");
  std::printf("\n");
  for (std::int64_t n : sizes_of(sizes)) {
    rows.push_back(measure(n, block, ratios, reps));
    const Row& r = rows.back();
    std::printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.3f |", static_cast<long long>(n),
                1e9 * r.quant8, 1e9 * r.quant4, 1e9 * r.deq_add8, 1e9 * r.deq_add4, 1e9 * r.deq8);
    for (double t : r.topk) std::printf(" %.3f |", 1e9 * t / static_cast<double>(n));
    std::printf("\n");
  }
  // The profile's figures: the median over the sizes; int8 and int4 averaged (the model prices
  // both with one figure each way: their loops differ by the nibble packing only).
  std::vector<double> q, d, w;
  for (const Row& r : rows) {
    q.push_back((r.quant8 + r.quant4) / 2);
    d.push_back((r.deq_add8 + r.deq_add4) / 2);
    w.push_back(r.deq8);
  }
  const auto [sel, sort] = fit_topk(rows, ratios);
  char out[512];
  std::snprintf(out, sizeof out,
                "{\"quantize_ns\": %.4f, \"dequantize_add_ns\": %.4f, \"dequantize_ns\": %.4f, "
                "\"topk_select_ns\": %.4f, \"topk_sort_ns\": %.4f}",
                1e9 * median(q), 1e9 * median(d), 1e9 * median(w), 1e9 * sel, 1e9 * sort);
  std::printf("profile keys: %s\n", out);
  if (!json.empty()) {
    std::ofstream f(json);
    f << out << "\n";
    if (!f) {
      std::cerr << "codec_bench: cannot write " << json << "\n";
      return 1;
    }
  }
  return 0;
}
