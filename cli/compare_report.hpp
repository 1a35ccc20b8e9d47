// What `zero compare` prints and writes once every stage has run: the table (time with its 95%
// interval over repetitions, throughput, the step split, communication, memory), the memory by
// category beside the plan, the traffic, whether the weights agree bitwise, the verdict and the
// recommendation, and --json.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/compare_chart.hpp"
#include "cli/train_setup.hpp"

namespace zero::cli {

// Whether the runs of each config agree bitwise across the stages (and each stage's repetitions
// among themselves), a line per config.
std::string agreement(const std::vector<StageResult>& rs, bool* all_same = nullptr);

// The rows as the verdict sees them: a label, the time interval, the highest peak of any rank.
std::vector<Candidate> candidates(const std::vector<StageResult>& rs);

// The tables, the agreement, the verdict and the footnotes (rank 0). `tokens`: the throughput
// column is tokens/s (the GPT), else samples/s.
void print_compare(const std::vector<StageResult>& rs, const std::string& title, const Peak& peak,
                   bool tokens, std::optional<std::int64_t> budget, const std::string& budget_text);

// One row of --json's "stages".
boost::json::object to_json(const StageResult& r);

}  // namespace zero::cli
