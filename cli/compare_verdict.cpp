// zero compare's verdict (cli/compare_verdict.hpp).
#include "cli/compare_verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace zero::cli {
namespace {

// Student's t, 0.975 quantile, for 1..30 degrees of freedom; beyond, 1.96 + 2.5/df is within
// 0.002 of it.
double t975(int df) {
  static constexpr double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                     2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                     2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                     2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  return df <= 30 ? table[df - 1] : 1.96 + 2.5 / df;
}

std::string ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", 1e3 * seconds);
  return b;
}

std::string mib(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return b;
}

// "20.48 ms [19.80..21.10]" (or "20.48 ms [one run: no interval]").
std::string time_text(const TimeInterval& t) {
  return ms(t.mean) + " ms [" +
         (t.known() ? ms(t.low) + ".." + ms(t.high) : "one run: no interval") + "]";
}

// The lowest mean among `among`; -1 when it is empty.
int lowest(std::span<const Candidate> rows, const std::vector<int>& among) {
  int best = -1;
  for (int i : among)
    if (best < 0 || rows[i].time.mean < rows[best].time.mean) best = i;
  return best;
}

// The rows of `among` whose intervals overlap row `of`'s, it included.
std::vector<int> tied_with(std::span<const Candidate> rows, const std::vector<int>& among, int of) {
  std::vector<int> out;
  for (int i : among)
    if (i == of || overlap(rows[i].time, rows[of].time)) out.push_back(i);
  return out;
}

// "stages 1, 2 and 3" (plain stages), else "stage 1 (a), stage 3 (a) and stage 1 (b)".
std::string labels(std::span<const Candidate> rows, const std::vector<int>& which) {
  const std::string stage = "stage ";
  bool plain = which.size() > 1;
  for (int i : which)
    plain &= rows[i].label.rfind(stage, 0) == 0 &&
             rows[i].label.find(' ', stage.size()) == std::string::npos;
  std::string out = plain ? "stages " : "";
  for (std::size_t k = 0; k < which.size(); ++k)
    out += (k == 0                  ? ""
            : k + 1 == which.size() ? " and "
                                    : ", ") +
           rows[which[k]].label.substr(plain ? stage.size() : 0);
  return out;
}

}  // namespace

TimeInterval interval_of(std::span<const double> xs) {
  TimeInterval t;
  t.repetitions = static_cast<int>(xs.size());
  if (xs.empty()) return t;
  double sum = 0;
  for (double x : xs) sum += x;
  t.mean = sum / static_cast<double>(xs.size());
  if (xs.size() < 2) {
    t.high = std::numeric_limits<double>::infinity();
    return t;
  }
  double squares = 0;
  for (double x : xs) squares += (x - t.mean) * (x - t.mean);
  const double n = static_cast<double>(xs.size());
  const double half = t975(t.repetitions - 1) * std::sqrt(squares / (n - 1) / n);
  t.low = std::max(0.0, t.mean - half);
  t.high = t.mean + half;
  return t;
}

bool overlap(const TimeInterval& a, const TimeInterval& b) {
  return a.low <= b.high && b.low <= a.high;
}

double comm_seconds(double in_flight, double exposed) {
  return std::max(in_flight, exposed);
}

Verdict decide(std::span<const Candidate> rows, std::optional<std::int64_t> budget) {
  Verdict v;
  std::vector<int> all;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    all.push_back(i);
    if (!budget || rows[i].peak_bytes <= *budget) v.fitting.push_back(i);
  }
  v.fastest = lowest(rows, all);
  if (v.fastest < 0) return v;
  v.tied = tied_with(rows, all, v.fastest);
  v.clear = v.tied.size() == 1;
  const int best = lowest(rows, v.fitting);
  if (best < 0) return v;
  const std::vector<int> close = tied_with(rows, v.fitting, best);
  v.recommended_clear = close.size() == 1;
  // Where time cannot separate them, the one that leaves the most memory free.
  v.recommended = *std::min_element(close.begin(), close.end(), [&](int a, int b) {
    return rows[a].peak_bytes != rows[b].peak_bytes ? rows[a].peak_bytes < rows[b].peak_bytes
                                                    : rows[a].time.mean < rows[b].time.mean;
  });
  return v;
}

std::string verdict_lines(std::span<const Candidate> rows, const Verdict& v,
                          std::optional<std::int64_t> budget, const std::string& budget_text) {
  if (v.fastest < 0) return "";
  const Candidate& f = rows[v.fastest];
  std::string out = "fastest: ";
  if (v.clear) {
    out +=
        f.label + ", " + time_text(f.time) + " a step, its 95% interval clear of every other's\n";
  } else {
    std::string each;
    for (int i : v.tied)
      each += (each.empty() ? "" : ", ") + rows[i].label + " " + time_text(rows[i].time);
    out += "no clear winner: the 95% intervals of " + labels(rows, v.tied) + " overlap (" + each +
           ")\n";
  }
  const std::string within =
      budget ? " --budget " + budget_text + " (" + mib(*budget) + ") per rank" : std::string();
  out += "recommendation: ";
  if (v.recommended < 0) {
    int least = 0;
    for (int i = 1; i < static_cast<int>(rows.size()); ++i)
      if (rows[i].peak_bytes < rows[least].peak_bytes) least = i;
    return out + "none: no row fits" + within + "; the least memory: " + rows[least].label + ", " +
           mib(rows[least].peak_bytes) + " per rank\n";
  }
  const Candidate& r = rows[v.recommended];
  if (v.recommended_clear)
    return out + r.label + ", the fastest" + (budget ? " that fits" + within : " (no --budget)") +
           ": " + ms(r.time.mean) + " ms a step, peak " + mib(r.peak_bytes) + " per rank\n";
  std::vector<int> close = tied_with(rows, v.fitting, lowest(rows, v.fitting));
  return out + r.label + ", the least memory per rank (" + mib(r.peak_bytes) + ") of " +
         labels(rows, close) + ", which no clear winner separates on time" +
         (budget ? ", within" + within : std::string()) + "\n";
}

}  // namespace zero::cli
