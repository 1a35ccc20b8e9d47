// The planner's text (zero/planner.hpp): reading counts and sizes, writing bytes, the table
// and the terms.
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <string>

#include "zero/planner_detail.hpp"

namespace zero {

using plan_detail::with_commas;

std::string plan_detail::with_commas(std::int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

namespace {

double parse_number(std::string_view text, std::string_view whole, const char* what) {
  std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw Error(cat("cannot read '", whole, "' as ", what));
  return v;
}

}  // namespace

std::int64_t parse_count(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  double mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': mult = 1e3; break;
      case 'm': case 'M': mult = 1e6; break;
      case 'b': case 'B': case 'g': case 'G': mult = 1e9; break;
      case 't': case 'T': mult = 1e12; break;
      default: break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  const double v = parse_number(t, text, "a count (e.g. 7.5e9, 13B, 350M)") * mult;
  if (v < 0) throw Error(cat("a count cannot be negative: '", text, "'"));
  if (v >= 9.2e18) throw Error(cat("'", text, "' is too large"));
  if (v != std::floor(v)) throw Error(cat("'", text, "' is not a whole number"));
  return static_cast<std::int64_t>(v);
}

std::int64_t parse_bytes(std::string_view text) {
  static const std::pair<std::string_view, double> units[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
      {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1}};
  std::string_view t = text;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  for (const auto& [suffix, mult] : units) {
    if (t.size() > suffix.size() && t.substr(t.size() - suffix.size()) == suffix) {
      std::string_view num = t.substr(0, t.size() - suffix.size());
      while (!num.empty() && num.back() == ' ') num.remove_suffix(1);
      const double v = parse_number(num, text, "a size (e.g. 80GiB, 80GB)") * mult;
      if (v <= 0) throw Error(cat("a memory size must be > 0: '", text, "'"));
      if (v >= 9.2e18) throw Error(cat("'", text, "' is too large"));
      return static_cast<std::int64_t>(v);
    }
  }
  throw Error(cat("'", text, "' has no unit: write GiB (2^30 bytes) or GB (10^9 bytes), e.g. 80GiB"));
}

std::string format_bytes(std::int64_t bytes) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double b = static_cast<double>(bytes < 0 ? -bytes : bytes);
  int i = 0;
  while (b >= 1024 && i < 5) b /= 1024, ++i;
  char s[40];
  std::snprintf(s, sizeof s, i == 0 ? "%s%.0f %s" : "%s%.2f %s", bytes < 0 ? "-" : "", b, unit[i]);
  return s;
}

std::string describe(const std::vector<Plan>& plans) {
  std::ostringstream o;
  o << std::left << std::setw(22) << "per rank";
  for (const auto& p : plans) o << std::right << std::setw(14) << cat("stage ", p.stage);
  o << '\n';
  auto row = [&](const char* name, auto get) {
    o << std::left << std::setw(22) << name;
    for (const auto& p : plans) o << std::right << std::setw(14) << format_bytes(get(p));
    o << '\n';
  };
  row("params", [](const Plan& p) { return p.device.params; });
  row("grads", [](const Plan& p) { return p.device.grads; });
  row("master", [](const Plan& p) { return p.device.master; });
  row("optimizer", [](const Plan& p) { return p.device.optimizer; });
  row("  model states", [](const Plan& p) { return p.device.model_states(); });
  row("buffers", [](const Plan& p) { return p.device.buffers; });
  row("activations", [](const Plan& p) { return p.device.activations; });
  row("  total", [](const Plan& p) { return p.device.total(); });
  row("  predicted peak", [](const Plan& p) { return p.peak_total; });
  bool any_host = false;
  for (const auto& p : plans) any_host |= p.host.total() > 0;
  if (any_host) row("host (offloaded)", [](const Plan& p) { return p.host.total(); });
  // Muon: Newton-Schulz's FLOPs per step on the busiest rank, and that over the mean rank's.
  bool any_ns = false;
  for (const auto& p : plans) any_ns |= p.newton_schulz_flops_max > 0;
  if (!any_ns) return o.str();
  auto ns_row = [&](const char* name, const char* format, auto get) {
    o << std::left << std::setw(22) << name;
    char b[32];
    for (const auto& p : plans) {
      std::snprintf(b, sizeof b, format, get(p));
      o << std::right << std::setw(14) << b;
    }
    o << '\n';
  };
  ns_row("Newton-Schulz FLOPs", "%.3g", [](const Plan& p) { return p.newton_schulz_flops_max; });
  ns_row("  busiest / mean", "%.3f", [](const Plan& p) {
    return p.newton_schulz_flops_mean > 0 ? p.newton_schulz_flops_max / p.newton_schulz_flops_mean
                                          : 1.0;
  });
  return o.str();
}

std::string explain(const Plan& p) {
  std::ostringstream o;
  o << "stage " << p.stage << ", " << p.ranks << " rank(s), shard group " << p.shard_size
    << ": Ψ = " << with_commas(p.numel) << " params, Ψp = " << with_commas(p.padded_numel)
    << " padded, Ψs = Ψp / " << p.shard_size << " = " << with_commas(p.padded_numel / p.shard_size)
    << " per shard\n";
  for (const auto& t : p.terms)
    o << "  " << std::left << std::setw(12) << t.category << std::setw(56)
      << (t.name + (t.host ? " [host]" : "")) << std::right << std::setw(12)
      << format_bytes(t.bytes) << "   " << t.formula << '\n';
  o << "  " << std::left << std::setw(68) << "model states" << std::right << std::setw(12)
    << format_bytes(p.device.model_states()) << '\n';
  o << "  " << std::left << std::setw(68) << "total (device)" << std::right << std::setw(12)
    << format_bytes(p.device.total()) << '\n';
  o << "  " << std::left << std::setw(68) << "predicted peak (device)" << std::right
    << std::setw(12) << format_bytes(p.peak_total) << '\n';
  if (p.host.total() > 0)
    o << "  " << std::left << std::setw(68) << "host (offloaded)" << std::right << std::setw(12)
      << format_bytes(p.host.total()) << '\n';
  o << "  traffic per step per rank (payload, counted by the engine's run): inside the shard group "
    << format_bytes(p.traffic.shard) << ", across shard groups " << format_bytes(p.traffic.replicate)
    << ", inside the hpZ group " << format_bytes(p.traffic.secondary) << ", over all ranks "
    << format_bytes(p.traffic.world) << '\n';
  return o.str();
}


}  // namespace zero
