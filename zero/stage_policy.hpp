// The ZeRO stages as a table of policy: which buffers exist in full and which as shards, which
// collectives move them, where the new params go after the step. The engine and the planner read
// one row; there is no per-stage code and no test of a stage number outside this table.
#pragma once

#include <cstdint>

namespace zero {

// Where the step's new working params go.
enum class ParamsAfterStep : std::uint8_t {
  update_full,   // the full buffer, written by the update in place (stage 0)
  all_gather,    // each rank's new shard, all-gathered into the full buffer (stages 1-2)
  update_shard,  // the param shard, written in place; units gathered on demand (stage 3; its
                 // persistent units, always gathered, take the all-gather)
};

struct StagePolicy {
  bool shard_optimizer;  // fp32 master, m, v: each rank keeps its shard (else the full buffers)
  bool shard_grads;      // gradients: reduced into a shard, unit buffers exist only in flight
                         // (else a full gradient buffer lives from backward to step)
  bool shard_params;     // working params: a shard, each unit all-gathered before use; units
                         // below stage3_param_persistence_threshold stay gathered (stage 3)
  bool gather_grads;     // reduced gradients are all-gathered back to full (stage 0: the
                         // all-reduce as reduce-scatter + all-gather, summing as stages 1-3 do)
  ParamsAfterStep after_step;
  // The reduced gradient shard is a buffer of its own (stage 1: the full gradient buffer is the
  // ZeRO "grads" term); at stages 2-3 the shard is that term; stage 0 reduces in full.
  bool reduced_shard_is_buffer() const { return shard_optimizer && !shard_grads; }
};

// Rows 0..3. See docs/design.md, "Stages", for the buffers and byte counts each row implies.
inline constexpr StagePolicy kStagePolicy[4] = {
    //  shard_optimizer shard_grads shard_params gather_grads after_step
    {false, false, false, true, ParamsAfterStep::update_full},    // 0: data parallel
    {true, false, false, false, ParamsAfterStep::all_gather},     // 1: optimizer states sharded
    {true, true, false, false, ParamsAfterStep::all_gather},      // 2: + gradients sharded
    {true, true, true, false, ParamsAfterStep::update_shard},     // 3: + parameters sharded
};

}  // namespace zero
