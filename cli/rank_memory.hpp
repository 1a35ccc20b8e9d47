// `zero train`'s memory per rank: every rank's ledger by category, in the order of the planned vs
// measured table (params, grads, master, optimizer, buffers, activations), adding up to the peak;
// and the legend of the collectives table's columns.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "zero/zero.hpp"

namespace zero::cli {

// The keys of one rank's row, in the planned vs measured order; the first six add up to the
// seventh (MemoryReport::buffers is what else was held at the peak).
inline constexpr const char* kRankMemoryKeys[] = {
    "params", "grads", "master", "optimizer", "buffers", "activations", "peak_total"};
inline constexpr std::size_t kRankMemoryColumns = std::size(kRankMemoryKeys);

// Every rank's row, kRankMemoryColumns a rank, gathered to all (each rank's ledger is its own).
std::vector<std::int64_t> gather_rank_memory(const World& world, const MemoryReport& mine);

// The table (rank 0): a row per rank, then the model states' bytes per parameter on rank 0.
void print_rank_memory(std::span<const std::int64_t> all, double params,
                       std::string (*human_bytes)(double));

// --json's "memory_bytes": an object per rank, keyed by kRankMemoryKeys.
boost::json::array rank_memory_json(std::span<const std::int64_t> all);

// A row of the planned vs measured table: a memory category as the planner predicted it for
// this run and as the ledger measured it (rank 0's).
struct MemoryRow {
  const char* name;
  std::int64_t planned, measured;
};

// Offload's host memory beside the device's (docs/offload.md): rows "host params", "host grads",
// "host master", "host optimizer", "host buffers" (stage 1's reduced shard and the staging of
// the copies at its peak) and "host peak" (their sum: the engine's host memory, the trainer's
// own not included), from the plan's host space and the ledger's. None when the plan keeps
// nothing on the host (no offload, or CPU ranks, whose state is in host memory already and in
// the device rows).
std::vector<MemoryRow> host_memory_rows(const Plan& plan, const LedgerSnapshot& host);

// One line under the collectives table: what its payload, wire and in-flight columns count.
void print_collectives_legend();

}  // namespace zero::cli
