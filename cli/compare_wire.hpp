// What `zero compare --compress` adds to the report: the bytes each row's rank 0 sent a step in
// each process group (shard, replicate, hpZ's secondary, world), the error-feedback residual,
// the first and final loss, and the check that every row started alike (the first step's loss
// bit for bit); their --json.
#pragma once

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "cli/compare_chart.hpp"

namespace zero::cli {

// The traffic of each group between two readings of the engine's accounting, summed over the
// ops (not yet divided by the steps).
std::array<GroupTraffic, kTrafficGroups> traffic_between(const Engine::GroupAccounting& before,
                                                         const Engine::GroupAccounting& after);

// "same start: ..." : whether every row's first step had the same loss bit for bit (the rows
// whose forward reads int8 weights apart, which are said). `*equal`: that check.
std::string same_start(const std::vector<StageResult>& rs, bool* equal = nullptr);

// The table of wire bytes by group, residual and losses, and the same-start line (rank 0).
void print_wire_table(const std::vector<StageResult>& rs, int key_width);

// A row's "traffic_by_group" ({"shard": {"payload_bytes", "wire_bytes"}, ...}).
boost::json::object traffic_json(const StageResult& r);
// The total a row's rank 0 sent a step, every group.
std::uint64_t wire_total(const StageResult& r);

}  // namespace zero::cli
