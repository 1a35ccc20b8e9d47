// Helpers of `zero plan` (cli/cmd_plan.cpp): stage labels, parameter counts at a glance, the
// shard group at a rank count, and the SVG plot of memory per rank against the rank count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/planner.hpp"

namespace zero::cli {

extern const char* const kStageNames[4];

// "Adam" or "SGD+momentum".
std::string optimizer_name(PlanOptimizer o);

// 1.32B, 175B, 350M: a parameter count at a glance.
std::string human_count(std::int64_t n);

// The shard group at `ranks` for a requested hierarchical shard size (0 = all ranks): all of
// them up to the size; nullopt where the size does not divide the ranks (left out of the plot).
std::optional<int> shard_at(int shard_size, int ranks);

// Peak device memory per rank against the rank count (1, 2, 4, ... on a log2 axis; memory on a
// log2 axis too, so that a stage's 1/N terms fall as straight lines), one polyline per stage,
// the budget as a dashed line. Hand-written SVG: no plotting library to install.
std::string plot_svg(PlanInput in, const std::vector<int>& stages,
                     std::optional<std::int64_t> budget);

}  // namespace zero::cli
