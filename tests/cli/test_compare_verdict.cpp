// zero compare's verdict (cli/compare_verdict.hpp): each stage's mean step time and its 95%
// interval over repetitions, "no clear winner" whenever the fastest stage's interval overlaps
// another's, the recommendation within --budget, and exposed communication never above comm.
#include <catch2/catch.hpp>

#include <vector>

#include "cli/compare_verdict.hpp"

using namespace zero::cli;
using Catch::Matchers::Contains;
using Catch::Matchers::WithinAbs;

namespace {

Candidate row(const char* label, std::vector<double> seconds, std::int64_t peak) {
  return {label, interval_of(seconds), peak};
}

}  // namespace

TEST_CASE("the interval is the mean plus or minus Student's t times the standard error") {
  const TimeInterval t = interval_of(std::vector<double>{1.0, 2.0, 3.0});
  // s = 1, n = 3, t(2) = 4.303: half-width 4.303 / sqrt(3) = 2.484
  CHECK_THAT(t.mean, WithinAbs(2.0, 1e-12));
  CHECK_THAT(t.high, WithinAbs(2.0 + 4.303 / 1.7320508075688772, 1e-9));
  CHECK(t.low == 0.0);  // a time is never below zero
  CHECK(t.known());
  const TimeInterval tight = interval_of(std::vector<double>{0.100, 0.101, 0.099, 0.100});
  CHECK(tight.low > 0.098);
  CHECK(tight.high < 0.102);
}

TEST_CASE("one repetition has no interval: it overlaps every other") {
  const TimeInterval one = interval_of(std::vector<double>{0.5});
  CHECK_FALSE(one.known());
  CHECK(overlap(one, interval_of(std::vector<double>{10.0, 10.1, 9.9})));
}

TEST_CASE("separated intervals name the fastest stage as a clear winner") {
  const std::vector<Candidate> rows = {row("stage 0", {0.200, 0.201, 0.199, 0.200}, 300),
                                       row("stage 2", {0.100, 0.101, 0.099, 0.100}, 200),
                                       row("stage 3", {0.150, 0.151, 0.149, 0.150}, 100)};
  const Verdict v = decide(rows, std::nullopt);
  CHECK(v.fastest == 1);
  CHECK(v.clear);
  CHECK(v.recommended == 1);
  CHECK(v.recommended_clear);
  const std::string text = verdict_lines(rows, v, std::nullopt, "");
  CHECK_THAT(text, Contains("fastest: stage 2, 100.00 ms"));
  CHECK_THAT(text, Contains("recommendation: stage 2, the fastest (no --budget)"));
}

TEST_CASE("overlapping intervals give no clear winner, however far apart the means") {
  // Means 100 and 110 ms, but each stage's runs spread over both.
  const std::vector<Candidate> rows = {row("stage 1", {0.060, 0.140, 0.100}, 200),
                                       row("stage 2", {0.070, 0.150, 0.110}, 150),
                                       row("stage 3", {0.400, 0.401, 0.399}, 100)};
  const Verdict v = decide(rows, std::nullopt);
  CHECK(v.fastest == 0);
  CHECK_FALSE(v.clear);
  CHECK(v.tied == std::vector<int>{0, 1});
  // Time cannot separate stages 1 and 2: the one with less memory is recommended.
  CHECK(v.recommended == 1);
  CHECK_FALSE(v.recommended_clear);
  const std::string text = verdict_lines(rows, v, std::nullopt, "");
  CHECK_THAT(text,
             Contains("fastest: no clear winner: the 95% intervals of stages 1 and 2 overlap"));
  CHECK_THAT(text, Contains("recommendation: stage 2, the least memory per rank"));
}

TEST_CASE("--budget rules out the stages whose peak does not fit") {
  const std::vector<Candidate> rows = {row("stage 0", {0.100, 0.101, 0.099}, 400),
                                       row("stage 2", {0.150, 0.151, 0.149}, 200),
                                       row("stage 3", {0.300, 0.301, 0.299}, 100)};
  const Verdict v = decide(rows, std::int64_t{250});
  CHECK(v.fastest == 0);  // the fastest of all, which does not fit
  CHECK(v.clear);
  CHECK(v.fitting == std::vector<int>{1, 2});
  CHECK(v.recommended == 1);
  CHECK(v.recommended_clear);
  CHECK_THAT(verdict_lines(rows, v, std::int64_t{250}, "250B"),
             Contains("recommendation: stage 2, the fastest that fits --budget 250B"));
  const Verdict none = decide(rows, std::int64_t{50});
  CHECK(none.recommended == -1);
  CHECK_THAT(verdict_lines(rows, none, std::int64_t{50}, "50B"),
             Contains("recommendation: none: no row fits --budget 50B"));
}

TEST_CASE("comm is never below exposed, whichever of in-flight and exposed is larger") {
  CHECK(comm_seconds(0.030, 0.010) == 0.030);  // overlap hid 20 ms
  // Exposed also counts the calling thread's packing and waking, which in-flight time misses.
  CHECK(comm_seconds(0.010, 0.030) == 0.030);
  for (double in_flight : {0.0, 0.005, 0.02})
    for (double exposed : {0.0, 0.01, 0.04}) CHECK(comm_seconds(in_flight, exposed) >= exposed);
}
