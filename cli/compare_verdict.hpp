// zero compare's verdict: each stage's step time as a mean and a 95% interval over repeated
// runs, the fastest stage only where its interval overlaps no other's ("no clear winner"
// otherwise), and one recommendation: the fastest stage whose memory per rank fits a budget.
// Pure arithmetic on the measured figures (docs/compare.md, "The verdict").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zero::cli {

// A step time over repetitions: their mean and its two-sided 95% Student t interval. With one
// repetition the interval is unknown: low 0 and high infinite, so it overlaps every other.
struct TimeInterval {
  double mean = 0, low = 0, high = 0;
  int repetitions = 0;
  bool known() const { return repetitions >= 2; }
};
TimeInterval interval_of(std::span<const double> repetitions);

// Whether two intervals share a point: then neither stage is clearly faster.
bool overlap(const TimeInterval& a, const TimeInterval& b);

// The communication a step spent in all, at least the larger of the collectives' in-flight time
// (issue to completion, summed) and the exposed time (the calling thread inside engine calls
// that communicate: blocked on collectives, but also packing, unpacking and waking, which
// in-flight time does not see). Never below exposed, so "exposed <= comm" holds by definition.
double comm_seconds(double in_flight, double exposed);

// One row to decide between: a stage (under one config), its time and its peak memory per rank.
struct Candidate {
  std::string label;  // "stage 2", "stage 1 (bf16red)"
  TimeInterval time;
  std::int64_t peak_bytes = 0;  // the highest ledger peak of any rank
};

struct Verdict {
  int fastest = -1;          // the lowest mean of all rows; -1 when there are none
  bool clear = false;        // its interval overlaps no other row's
  std::vector<int> tied;     // the rows whose intervals overlap the fastest's (it included)
  std::vector<int> fitting;  // the rows within the budget (every row without one)
  int recommended = -1;      // the fastest fitting row, or the least memory of those tied with
                             // it; -1 when none fits
  bool recommended_clear = false;  // the recommended row beats every other fitting row clearly
};
Verdict decide(std::span<const Candidate> rows, std::optional<std::int64_t> budget);

// The two lines the table ends with: "fastest: ..." and "recommendation: ...".
std::string verdict_lines(std::span<const Candidate> rows, const Verdict& v,
                          std::optional<std::int64_t> budget, const std::string& budget_text);

}  // namespace zero::cli
