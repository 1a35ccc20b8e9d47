// The peak a run's CPU math is measured against, and its per-machine cache (zero/build_info.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "kernels/cpu/peak.hpp"
#include "precision/simd.hpp"
#include "zero/build_info.hpp"

namespace zero {
namespace {

namespace fs = std::filesystem;

// The cache file, or empty for none.
std::string cache_path() {
  if (const char* given = std::getenv("ZERO_PEAK_CACHE"))
    return std::string(given) == "off" ? std::string() : std::string(given);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/zero/cpu-peaks";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/zero/cpu-peaks";
  return {};
}

// What a cached figure must match: the host, the CPU's model and the kernel (tabs removed).
std::string machine_key(std::string_view kernel) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1);
      break;
    }
  std::string key = std::string(host) + '\t' + model + '\t' + std::string(kernel);
  for (std::size_t i = 0; i + 1 < key.size(); ++i)
    if (key[i] == '\n') key[i] = ' ';
  return key;
}

// The cache's lines; unreadable or missing: none.
std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// The figure of `key` in `lines` (0: none), and where it is (lines.size(): nowhere).
std::pair<double, std::size_t> find(const std::vector<std::string>& lines, const std::string& key) {
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].size() > key.size() + 1 && lines[i].compare(0, key.size(), key) == 0 &&
        lines[i][key.size()] == '\t') {
      const double v = std::strtod(lines[i].c_str() + key.size() + 1, nullptr);
      return {v > 0 ? v : 0, i};
    }
  return {0, lines.size()};
}

// Writes the lines to a temporary file of this process beside `path` and renames it over: a
// run beside this one reads the old cache or the new, never half of one. Any failure leaves the
// cache as it was (a cache is never worth failing a run for).
void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec)) &&
      !fs::is_regular_file(fs::symlink_status(path, ec)))
    return;  // something else than the cache is there: leave it
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
    if (!out.flush()) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

bool peak_is_bf16_dot(bool bf16_math, const std::string& gemm_bf16_backend, bool cpu_bf16_dot) {
  return bf16_math && gemm_bf16_backend == "onednn" && cpu_bf16_dot;
}

CpuPeak cpu_peak(bool bf16_math, double seconds, int tries) {
  const bool dot = peak_is_bf16_dot(bf16_math, bf16_math ? gemm_bf16_backend().backend : "",
                                    cpu_features().avx512bf16);
  const kernels::cpu::FmaPeak m = dot ? kernels::cpu::measure_bf16_dot_peak(seconds, tries)
                                      : kernels::cpu::measure_fma_peak(seconds, tries);
  CpuPeak out{{std::string(m.kernel), m.flops}, "measured now"};
  const std::string path = cache_path();
  if (path.empty() || m.flops <= 0) return out;
  const std::string key = machine_key(m.kernel);
  std::vector<std::string> lines = read_lines(path);
  const auto [cached, at] = find(lines, key);
  if (cached >= m.flops) {
    out.core.flops = cached;
    out.source = "the best measured on this machine (" + path + ")";
    return out;
  }
  char figure[32];
  std::snprintf(figure, sizeof figure, "%.17g", m.flops);
  const std::string line = key + '\t' + figure;
  if (at < lines.size())
    lines[at] = line;
  else
    lines.push_back(line);
  write_lines(path, lines);
  return out;
}

}  // namespace zero
