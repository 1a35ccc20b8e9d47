// The planner's inverse questions (zero/planner.hpp): the largest model, the fewest ranks that
// fit a budget, each by bisection over plan_memory.
#include <optional>

#include "base/error.hpp"
#include "zero/planner.hpp"
#include "zero/planner_detail.hpp"

namespace zero {

using plan_detail::TooLarge;

std::int64_t largest_model(const PlanInput& input, std::int64_t budget, int units) {
  if (budget <= 0) throw Error(cat("budget must be > 0 bytes, got ", budget));
  PlanInput in = input;
  auto fits = [&](std::int64_t n) {
    in.units = uniform_units(n, units);
    try {
      return plan_memory(in).peak_total <= budget;
    } catch (const TooLarge&) {
      return false;  // past 8 EiB per rank: more than any budget
    }
  };
  std::int64_t lo = units;
  in.units = uniform_units(lo, units);
  plan_memory(in);  // bad input is an error, not "nothing fits"
  if (!fits(lo)) return 0;
  std::int64_t hi = lo;
  while (hi < (std::int64_t{1} << 52) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > std::max<std::int64_t>(1, lo / 1000)) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::optional<int> fewest_ranks(const PlanInput& input, std::int64_t budget, int max_ranks) {
  if (budget <= 0) throw Error(cat("budget must be > 0 bytes, got ", budget));
  PlanInput in = input;
  in.config.zero.mics_shard_size = -1;
  auto fits = [&](int n) {
    in.ranks = n;
    in.ranks_per_node = std::min(input.ranks_per_node, n);
    try {
      return plan_memory(in).peak_total <= budget;
    } catch (const TooLarge&) {
      return false;  // past 8 EiB per rank: more than any budget
    }
  };
  // Memory per rank falls with the rank count (padding aside), so double, then bisect.
  int lo = 0, hi = 1;  // lo: known not to fit (0 = none tried)
  while (!fits(hi)) {
    if (hi >= max_ranks) return std::nullopt;
    lo = hi;
    hi = std::min(max_ranks, hi * 2);
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace zero
