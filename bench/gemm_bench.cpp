// gemm_bench: zero's sgemm (kernels/cpu/gemm.hpp, OpenBLAS, 1 thread) against this core's
// measured fp32 peak (an FMA loop), interleaved rep by rep, and which OpenBLAS kernels ran.
//
//   gemm_bench [--reps N] [--sizes 512,2048] [--json FILE]   this process's kernels (fixed as
//                                                            the zero command fixes them)
//   gemm_bench --compare [...]   A/B per rep in child processes: A without the fix
//                                (ZERO_NO_BLAS_FIX=1, OPENBLAS_CORETYPE as given), B with it
//                                (OPENBLAS_CORETYPE unset, the fix on)
//   gemm_bench --bf16 [...]      also the BF16 GEMM (kernels/cpu/gemm_bf16.hpp), each backend
//                                in turn within each rep: square 512 and 2048 and GPT-2-small
//                                shapes, against the same fp32 FMA peak
// A weak kernel can be reproduced on a CPU OpenBLAS detects right with OPENBLAS_CORETYPE=Prescott
// (as the --compare A side). docs/blas.md has the figures.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/peak.hpp"
#include "kernels/cpu/gemm_bf16.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace cpu = zero::kernels::cpu;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The FMA peak loop is kernels/cpu/peak.hpp's (the one `zero train` measures MFU against).
struct PeakKernel {
  const char* name;
  bool available;
};

PeakKernel peak_kernel() {
  static const std::string name(cpu::measure_fma_peak(1e-3).kernel);
  return {name.c_str(), name != "none"};
}

// GFLOP/s of the FMA loop over about `target_s` seconds.
double measure_peak(const PeakKernel&, double target_s) {
  return cpu::measure_fma_peak(target_s).flops / 1e9;
}

struct Matrices {
  int n;
  std::vector<float> a, b, c;
  explicit Matrices(int size) : n(size), a(std::size_t(size) * size), b(a.size()), c(a.size()) {
    unsigned x = 12345;
    for (auto* v : {&a, &b})
      for (float& e : *v)
        e = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
  }
  void gemm() {
    cpu::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
};

// GFLOP/s of C = A·B over at least `target_s` seconds (whole calls).
double measure_gemm(Matrices& m, double target_s) {
  const double flops = 2.0 * m.n * m.n * m.n;
  int calls = 0;
  const auto t0 = Clock::now();
  double t = 0;
  do {
    m.gemm();
    ++calls;
  } while ((t = seconds_since(t0)) < target_s);
  return flops * calls / t / 1e9;
}

double quantile(std::vector<double> v, bool median) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return median ? (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]))
                : v.front();
}

struct Options {
  int reps = 5;
  std::vector<int> sizes{512, 2048};
  std::string json;
  bool compare = false;
  bool child = false;  // one rep, results as lines "R <size> <gflops> <peak>"
  bool bf16 = false;
};

int usage(const char* why) {
  if (why) std::cerr << "gemm_bench: " << why << "\n";
  std::cerr
      << "usage: gemm_bench [--reps N] [--sizes 512,2048] [--json FILE] [--compare | --bf16]\n";
  return why ? 2 : 0;
}

// One measured rep: the peak, then each size, then the peak again (the ratio uses their mean,
// so a frequency change in the middle shows up in both).
struct Rep {
  double peak = 0;
  std::vector<double> gflops;
};

Rep run_rep(const PeakKernel& k, std::vector<Matrices>& mats) {
  Rep r;
  const double p0 = measure_peak(k, 0.2);
  for (auto& m : mats) r.gflops.push_back(measure_gemm(m, m.n >= 1024 ? 0.5 : 0.3));
  r.peak = 0.5 * (p0 + measure_peak(k, 0.2));
  return r;
}

struct Series {
  std::string label, kernel, source;
  std::vector<double> peak;
  std::map<int, std::vector<double>> gflops, ratio;
};

void print_series(const Series& s, const std::vector<int>& sizes) {
  std::printf("%-8s kernels %-12s (%s)  peak GFLOP/s min %.1f median %.1f\n", s.label.c_str(),
              s.kernel.c_str(), s.source.c_str(), quantile(s.peak, false), quantile(s.peak, true));
  for (int n : sizes)
    std::printf("%-8s sgemm %5d  GFLOP/s min %6.1f median %6.1f   of peak min %.3f median %.3f\n",
                s.label.c_str(), n, quantile(s.gflops.at(n), false), quantile(s.gflops.at(n), true),
                quantile(s.ratio.at(n), false), quantile(s.ratio.at(n), true));
}

std::string series_json(const Series& s, const std::vector<int>& sizes) {
  std::ostringstream o;
  o << "{\"label\":\"" << s.label << "\",\"kernel\":\"" << s.kernel << "\",\"source\":\""
    << s.source << "\",\"peak_gflops\":{\"min\":" << quantile(s.peak, false)
    << ",\"median\":" << quantile(s.peak, true) << "},\"sgemm\":[";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const int n = sizes[i];
    o << (i ? "," : "") << "{\"n\":" << n
      << ",\"gflops\":{\"min\":" << quantile(s.gflops.at(n), false)
      << ",\"median\":" << quantile(s.gflops.at(n), true)
      << "},\"ratio_to_peak\":{\"min\":" << quantile(s.ratio.at(n), false)
      << ",\"median\":" << quantile(s.ratio.at(n), true) << "}}";
  }
  o << "]}";
  return o.str();
}

void add(Series& s, const Rep& r, const std::vector<int>& sizes) {
  s.peak.push_back(r.peak);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    s.gflops[sizes[i]].push_back(r.gflops[i]);
    s.ratio[sizes[i]].push_back(r.gflops[i] / r.peak);
  }
}

// Runs this program as a child with one rep in the environment of side A or B; fills `s`.
bool run_child(bool fixed, const Options& o, Series& s) {
  std::string sizes;
  for (int n : o.sizes) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(n);
  }
  std::string cmd;
  if (fixed)
    cmd = "env -u OPENBLAS_CORETYPE -u ZERO_NO_BLAS_FIX -u ZERO_BLAS_FIX_APPLIED ";
  else
    cmd = "env -u ZERO_BLAS_FIX_APPLIED ZERO_NO_BLAS_FIX=1 ";
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return false;
  cmd += std::string("'") + self + "' --child --sizes " + sizes;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  char line[512];
  Rep r;
  while (std::fgets(line, sizeof line, p)) {
    char kernel[128] = {}, source[32] = {};
    double g = 0, peak = 0;
    int n = 0;
    if (std::sscanf(line, "K %127s %31s", kernel, source) == 2) {
      s.kernel = kernel;
      s.source = source;
    } else if (std::sscanf(line, "R %d %lf %lf", &n, &g, &peak) == 3) {
      r.gflops.push_back(g);
      r.peak = peak;
    }
  }
  if (pclose(p) != 0 || r.gflops.size() != o.sizes.size()) return false;
  add(s, r, o.sizes);
  return true;
}

// ---- the BF16 GEMM ------------------------------------------------------------------------

// GPT-2 small's linear layers at 1024 tokens (B·T) and width 768, as the GPT trainer calls them
// (weights stored out × in, as llm.c): the MLP's up-projection forward (N·T), its weight
// gradient (Tᵀ·N), and one head's attention scores at T = 256 (64-wide heads, N·T).
struct Bf16Case {
  std::string label;
  bool ta, tb;
  int m, n, k;
};
const std::vector<Bf16Case>& bf16_cases() {
  static const std::vector<Bf16Case> cases{
      {"512^3 NN", false, false, 512, 512, 512},
      {"2048^3 NN", false, false, 2048, 2048, 2048},
      {"fc fwd 1024x3072x768 NT", false, true, 1024, 3072, 768},
      {"fc dW 3072x768x1024 TN", true, false, 3072, 768, 1024},
      {"attn 256x256x64 NT", false, true, 256, 256, 64},
  };
  return cases;
}

// sgemm: the same shape on fp32 copies of the inputs, so that widen's cost of widening shows.
enum class Bf16Side { sgemm, widen, onednn, onednn_f32 };
const char* side_name(Bf16Side s) {
  switch (s) {
    case Bf16Side::sgemm:
      return "sgemm";
    case Bf16Side::widen:
      return "widen";
    case Bf16Side::onednn:
      return "onednn";
    case Bf16Side::onednn_f32:
      return "onednn-f32";
  }
  return "";
}

struct Bf16Operands {
  Bf16Case c;
  std::vector<zero::bf16> a, b;
  std::vector<float> a32, b32, out;
  explicit Bf16Operands(const Bf16Case& cs)
      : c(cs),
        a(std::size_t(cs.m) * cs.k),
        b(std::size_t(cs.k) * cs.n),
        out(std::size_t(cs.m) * cs.n) {
    unsigned x = 6789;
    for (auto* v : {&a, &b})
      for (auto& e : *v)
        e = zero::to_bf16(static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f -
                          0.5f);
    for (auto e : a) a32.push_back(zero::to_float(e));
    for (auto e : b) b32.push_back(zero::to_float(e));
  }
  // Row strides of A and B as stored (op(A) m×k, op(B) k×n), packed.
  std::string run(Bf16Side s) {
    const int lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
    switch (s) {
      case Bf16Side::sgemm:
        cpu::gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a32.data(), lda, b32.data(), ldb, 0.0f,
                  out.data(), c.n);
        return "OpenBLAS " + cpu::blas_core_status().running + ", fp32 inputs";
      case Bf16Side::widen:
        cpu::gemm_bf16_widen(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                             out.data(), c.n);
        return "fp32 widen + OpenBLAS " + cpu::blas_core_status().running;
      case Bf16Side::onednn:
        return cpu::gemm_bf16_onednn(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb,
                                     0.0f, out.data(), c.n);
      case Bf16Side::onednn_f32:
        return cpu::gemm_bf16_onednn_f32(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(),
                                         ldb, 0.0f, out.data(), c.n);
    }
    return "";
  }
};

double measure_bf16(Bf16Operands& o, Bf16Side s, double target_s) {
  const double flops = 2.0 * o.c.m * o.c.n * o.c.k;
  int calls = 0;
  const auto t0 = Clock::now();
  double t = 0;
  do {
    o.run(s);
    ++calls;
  } while ((t = seconds_since(t0)) < target_s);
  return flops * calls / t / 1e9;
}

struct Bf16Series {
  std::string impl;  // per case: what ran
  std::vector<double> gflops, ratio;
};

// --bf16: each rep is the peak, every case on every side (the sides' order flips on odd reps,
// so neither always runs on a warmer cache or clock), the peak again; the ratio uses their mean.
int run_bf16(const PeakKernel& k, const Options& o) {
  std::vector<Bf16Side> sides{Bf16Side::sgemm, Bf16Side::widen};
  const cpu::OnednnBf16Probe& probe = cpu::onednn_bf16_probe();
  if (!probe.impl.empty()) sides.push_back(Bf16Side::onednn);
  sides.push_back(Bf16Side::onednn_f32);
  std::vector<Bf16Operands> ops;
  for (const auto& c : bf16_cases()) ops.emplace_back(c);
  std::map<std::pair<int, int>, Bf16Series> series;  // (case, side)
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (Bf16Side s : sides) series[{int(i), int(s)}].impl = ops[i].run(s);  // warm up, JIT
  std::vector<double> peaks;
  for (int rep = 0; rep < o.reps; ++rep) {
    const double p0 = measure_peak(k, 0.2);
    std::map<std::pair<int, int>, double> g;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::vector<Bf16Side> order = sides;
      if (rep % 2) std::reverse(order.begin(), order.end());
      for (Bf16Side s : order)
        g[{int(i), int(s)}] = measure_bf16(ops[i], s, ops[i].c.m >= 1024 ? 0.5 : 0.3);
    }
    const double peak = 0.5 * (p0 + measure_peak(k, 0.2));
    peaks.push_back(peak);
    for (auto& [key, v] : g) {
      series[key].gflops.push_back(v);
      series[key].ratio.push_back(v / peak);
    }
  }
  const cpu::GemmBf16Info info = cpu::gemm_bf16_info();
  std::printf(
      "gemm_bench --bf16: 1 thread, %d reps (each: peak, every case on every side, peak);"
      " peak by %s\n",
      o.reps, k.name);
  std::printf("  peak GFLOP/s min %.1f median %.1f: the fp32 FMA peak; %s\n",
              quantile(peaks, false), quantile(peaks, true),
              __builtin_cpu_supports("avx512bf16")
                  ? "this CPU also has AVX512-BF16 dot products (vdpbf16ps: 2 products per fp32 "
                    "lane), which the ratio does not credit"
                  : "this CPU has no bf16 FMA, so bf16 products run on the fp32 FMA units");
  std::printf("  oneDNN %s, ISA %s, bf16 matmul: %s\n", probe.version.c_str(), probe.isa.c_str(),
              probe.impl.empty() ? ("none (" + probe.error + ")").c_str() : probe.impl.c_str());
  std::printf("  gemm_bf16 in this process: %s; %s\n", info.name.c_str(), info.reason.c_str());
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (Bf16Side s : sides) {
      const Bf16Series& r = series.at({int(i), int(s)});
      std::printf(
          "bf16 %-24s %-10s GFLOP/s min %6.1f median %6.1f   of peak min %.3f median %.3f"
          "   (%s)\n",
          ops[i].c.label.c_str(), side_name(s), quantile(r.gflops, false), quantile(r.gflops, true),
          quantile(r.ratio, false), quantile(r.ratio, true), r.impl.c_str());
    }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"bench\":\"gemm_bf16\",\"onednn\":\"" << probe.version << "\",\"onednn_isa\":\""
      << probe.isa << "\",\"onednn_bf16_impl\":\"" << probe.impl << "\",\"chosen\":\"" << info.name
      << "\",\"peak_kernel\":\"" << k.name
      << "\",\"peak_gflops\":{\"min\":" << quantile(peaks, false)
      << ",\"median\":" << quantile(peaks, true) << "},\"reps\":" << o.reps << ",\"rows\":[";
    bool first = true;
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (Bf16Side s : sides) {
        const Bf16Series& r = series.at({int(i), int(s)});
        f << (first ? "" : ",") << "{\"case\":\"" << ops[i].c.label << "\",\"side\":\""
          << side_name(s) << "\",\"impl\":\"" << r.impl
          << "\",\"gflops\":{\"min\":" << quantile(r.gflops, false)
          << ",\"median\":" << quantile(r.gflops, true)
          << "},\"ratio_to_peak\":{\"min\":" << quantile(r.ratio, false)
          << ",\"median\":" << quantile(r.ratio, true) << "}}";
        first = false;
      }
    f << "]}\n";
    if (!f) {
      std::cerr << "gemm_bench: could not write " << o.json << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cpu::fix_blas_coretype(argc, argv);  // as the zero command does; ZERO_NO_BLAS_FIX=1: without
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
      if (o.reps < 1) return usage("--reps needs a positive count");
    } else if (a == "--sizes") {
      o.sizes.clear();
      std::stringstream ss(value());
      for (std::string t; std::getline(ss, t, ',');)
        if (int n = std::atoi(t.c_str()); n > 0)
          o.sizes.push_back(n);
        else
          return usage("--sizes needs positive sizes separated by commas, e.g. 512,2048");
      if (o.sizes.empty()) return usage("--sizes needs at least one size");
    } else if (a == "--json") {
      o.json = value();
      if (o.json.empty()) return usage("--json needs a file name");
    } else if (a == "--compare") {
      o.compare = true;
    } else if (a == "--bf16") {
      o.bf16 = true;
    } else if (a == "--child") {
      o.child = true;
    } else if (a == "-h" || a == "--help") {
      return usage(nullptr);
    } else {
      return usage(("unknown option '" + a + "'").c_str());
    }
  }
  const PeakKernel k = peak_kernel();
  if (!k.available) {
    std::cerr << "gemm_bench: this CPU has neither AVX-512 nor AVX2+FMA; no peak to compare\n";
    return 77;
  }
  if (o.bf16) {
    if (o.compare)
      return usage(
          "--bf16 measures this process's kernels; it does not combine "
          "with --compare");
    return run_bf16(k, o);
  }
  std::vector<Series> series;
  if (o.compare) {
    series = {Series{"without", "", "", {}, {}, {}}, Series{"with", "", "", {}, {}, {}}};
    for (int rep = 0; rep < o.reps; ++rep)
      for (int side = 0; side < 2; ++side)
        if (!run_child(side == 1, o, series[side])) {
          std::cerr << "gemm_bench: a child run failed\n";
          return 1;
        }
  } else {
    std::vector<Matrices> mats;
    for (int n : o.sizes) mats.emplace_back(n);
    for (auto& m : mats) m.gemm();  // warm up: pages, OpenBLAS's buffers
    const cpu::BlasCoreStatus st = cpu::blas_core_status();
    Series s{"this", st.running, std::string(cpu::name_of(st.source)), {}, {}, {}};
    for (int rep = 0; rep < (o.child ? 1 : o.reps); ++rep) {
      const Rep r = run_rep(k, mats);
      if (o.child) {
        std::printf("K %s %s\n", s.kernel.c_str(), s.source.c_str());
        for (std::size_t i = 0; i < o.sizes.size(); ++i)
          std::printf("R %d %.6f %.6f\n", o.sizes[i], r.gflops[i], r.peak);
        return 0;
      }
      add(s, r, o.sizes);
    }
    series.push_back(s);
  }
  const cpu::BlasCoreStatus st = cpu::blas_core_status();
  std::printf(
      "gemm_bench: %s, 1 thread, peak by %s, %d reps (each: peak, sizes, peak); "
      "this CPU's best core: %s\n",
      st.library.c_str(), k.name, o.reps, st.best.c_str());
  for (const auto& s : series) print_series(s, o.sizes);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"bench\":\"gemm\",\"library\":\"" << st.library << "\",\"best_core\":\"" << st.best
      << "\",\"peak_kernel\":\"" << k.name << "\",\"reps\":" << o.reps << ",\"series\":[";
    for (std::size_t i = 0; i < series.size(); ++i)
      f << (i ? "," : "") << series_json(series[i], o.sizes);
    f << "]}\n";
    if (!f) {
      std::cerr << "gemm_bench: could not write " << o.json << "\n";
      return 1;
    }
  }
  return 0;
}
