// The SVG plot and the small helpers of `zero plan` (cli/plan_plot.hpp).
#include "cli/plan_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/error.hpp"

namespace zero::cli {

const char* const kStageNames[4] = {"stage 0 (DDP)", "stage 1 (P_os)", "stage 2 (P_os+g)",
                                       "stage 3 (P_os+g+p)"};

std::string optimizer_name(PlanOptimizer o) {
  const char* names[] = {"Adam", "SGD+momentum", "LAMB", "Lion", "Muon"};
  return names[static_cast<int>(o)];
}

std::string human_count(std::int64_t n) {
  const char* suffix[] = {"", "k", "M", "B", "T"};
  double v = static_cast<double>(n);
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, ++i;
  char s[32];
  std::snprintf(s, sizeof s, i == 0 ? "%.0f" : "%.3g%s", v, suffix[i]);
  return s;
}

std::optional<int> shard_at(int shard_size, int ranks) {
  if (shard_size == 0 || ranks <= shard_size) return 0;
  if (ranks % shard_size != 0) return std::nullopt;
  return shard_size;
}

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// 2^e bytes as a tick label: "512 MiB", "64 GiB".
std::string pow2_label(int e) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const int u = std::clamp(e / 10, 0, 6);
  return cat(std::int64_t{1} << (e - 10 * u), ' ', unit[u]);
}

}  // namespace

std::string plot_svg(PlanInput in, const std::vector<int>& stages,
                     std::optional<std::int64_t> budget) {
  const int ranks = in.ranks, per_node = in.ranks_per_node;
  const int shard_size = std::max(0, in.config.zero.mics_shard_size);  // 0: all ranks
  // Up to max(64, 4N) in powers of two, in 64 bits (4N overflows an int), at most 2^30.
  int max_ranks = 1;
  while (max_ranks < (1 << 30) && max_ranks < std::max<std::int64_t>(64, 4 * std::int64_t{ranks}))
    max_ranks *= 2;
  // The rank counts: powers of two, the count asked for, and multiples of a shard group.
  std::vector<int> counts{ranks};
  for (std::int64_t r = 1; r <= max_ranks; r *= 2) counts.push_back(int(r));
  for (long r = shard_size; shard_size > 0 && r <= max_ranks; r *= 2) counts.push_back(int(r));
  std::erase_if(counts, [&](int r) { return !shard_at(shard_size, r); });
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<std::vector<std::pair<double, double>>> lines;  // per stage: (log2 ranks, bytes)
  double lo = budget ? double(*budget) : HUGE_VAL, hi = budget ? double(*budget) : 0;
  for (int s : stages) {
    auto& line = lines.emplace_back();
    for (int r : counts) {
      in.config.zero.stage = s, in.ranks = r, in.ranks_per_node = std::min(per_node, r);
      const int group = *shard_at(shard_size, r);
      in.config.zero.mics_shard_size = group > 0 ? group : -1;
      std::int64_t peak = 0;
      try {
        peak = plan_memory(in).peak_total;
      } catch (const Error&) {
        continue;  // a rank count the model's padding makes too large to plan: no point
      }
      const double y = double(std::max<std::int64_t>(1, peak));
      line.emplace_back(std::log2(r), y), lo = std::min(lo, y), hi = std::max(hi, y);
    }
  }
  int e_lo = int(std::floor(std::log2(lo))), e_hi = int(std::ceil(std::log2(hi)));
  if (e_hi <= e_lo) ++e_hi;
  const int step = std::max(1, (e_hi - e_lo + 7) / 8);  // at most ~8 memory ticks
  e_lo -= ((e_lo % step) + step) % step;
  e_hi += (step - ((e_hi - e_lo) % step)) % step;
  const int x_max = int(std::log2(max_ranks));
  const double W = 800, H = 480, left = 90, right = 190, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  auto X = [&](double x) { return left + pw * x / x_max; };
  auto Y = [&](double bytes) { return top + ph * (e_hi - std::log2(bytes)) / (e_hi - e_lo); };
  const char* colour[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
  const bool params_in_name = in.model_name.ends_with(" params");

  std::ostringstream o;
  o.setf(std::ios::fixed), o.precision(1);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << ' ' << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left + pw / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">"
    << xml_escape(
           cat(in.model_name,
               params_in_name ? "" : cat(" (", human_count(count_params(in.units)), " params)"),
               shard_size > 0 ? cat(", shard groups of ", shard_size) : std::string(), ", ",
               name_of(in.config.precision), ", ", optimizer_name(in.optimizer),
               ": peak device memory per rank"))
    << "</text>\n<g stroke=\"#e4e4e4\">\n";
  for (int e = e_lo; e <= e_hi; e += step)
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(std::ldexp(1.0, e))
      << "\" y2=\"" << Y(std::ldexp(1.0, e)) << "\"/>\n";
  for (int x = 0; x <= x_max; ++x)
    o << "<line x1=\"" << X(x) << "\" x2=\"" << X(x) << "\" y1=\"" << top << "\" y2=\"" << top + ph
      << "\"/>\n";
  o << "</g>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (int e = e_lo; e <= e_hi; e += step)
    o << "<text x=\"" << left - 6 << "\" y=\"" << Y(std::ldexp(1.0, e)) + 4
      << "\" text-anchor=\"end\">" << pow2_label(e) << "</text>\n";
  for (int x = 0; x <= x_max; ++x)
    o << "<text x=\"" << X(x) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\""
      << ((1 << x) == ranks ? " font-weight=\"bold\"" : "") << '>' << (1 << x) << "</text>\n";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 16
    << "\" text-anchor=\"middle\">data-parallel ranks N (log scale)</text>\n"
    << "<text transform=\"translate(20 " << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">memory per rank (log scale)</text>\n";
  if (ranks > 1)  // the rank count asked for (its tick in bold when it has one)
    o << "<line x1=\"" << X(std::log2(ranks)) << "\" x2=\"" << X(std::log2(ranks)) << "\" y1=\""
      << top << "\" y2=\"" << top + ph << "\" stroke=\"#999\" stroke-dasharray=\"2 3\"/>\n";
  if (budget)
    o << "<line id=\"budget\" x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\""
      << Y(double(*budget)) << "\" y2=\"" << Y(double(*budget))
      << "\" stroke=\"#000\" stroke-width=\"1.5\" "
      << "stroke-dasharray=\"8 5\"/>\n";
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const char* c = colour[stages[i]];
    o << "<polyline id=\"stage-" << stages[i] << "\" fill=\"none\" stroke=\"" << c
      << "\" stroke-width=\"2\" points=\"";
    for (auto [x, y] : lines[i]) o << X(x) << ',' << Y(y) << ' ';
    o << "\"/>\n";
    for (auto [x, y] : lines[i])
      o << "<circle cx=\"" << X(x) << "\" cy=\"" << Y(y) << "\" r=\"3\" fill=\"" << c << "\"/>\n";
  }
  // Legend, right of the plot.
  double ly = top + 10;
  auto legend = [&](const std::string& colour_, const char* dash, const std::string& label) {
    o << "<line x1=\"" << left + pw + 14 << "\" x2=\"" << left + pw + 40 << "\" y1=\"" << ly
      << "\" y2=\"" << ly << "\" stroke=\"" << colour_ << "\" stroke-width=\"2\"" << dash << "/>\n"
      << "<text x=\"" << left + pw + 46 << "\" y=\"" << ly + 4 << "\">" << xml_escape(label)
      << "</text>\n";
    ly += 20;
  };
  for (int s : stages) legend(colour[s], "", kStageNames[s]);
  if (budget) legend("#000", " stroke-dasharray=\"8 5\"", "budget " + format_bytes(*budget));
  o << "</svg>\n";
  return o.str();
}


}  // namespace zero::cli
