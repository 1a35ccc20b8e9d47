// The ZeRO stages as a table of policy: which buffers exist in full and which as shards, and
// which collectives move them. The engine reads one row; there is no per-stage engine code.
#pragma once

namespace zero {

struct StagePolicy {
  bool shard_optimizer;  // fp32 master, m, v: each rank keeps its shard (else the full buffers)
  bool shard_grads;      // gradients: reduced into a shard, unit buffers exist only in flight
                         // (else a full gradient buffer lives from backward to step)
  bool shard_params;     // working params: a shard, each unit all-gathered before use (stage 3)
  bool gather_grads;     // reduced gradients are all-gathered back to full (stage 0: the
                         // all-reduce as reduce-scatter + all-gather, summing as stages 1-3 do)
  bool gather_params;    // new params are all-gathered after the step (stages 1, 2)
};

// Rows 0..3. See docs/design.md, "Stages", for the buffers and byte counts each row implies.
inline constexpr StagePolicy kStagePolicy[4] = {
    //  shard_optimizer shard_grads shard_params gather_grads gather_params
    {false, false, false, true, false},  // 0: data parallel
    {true, false, false, false, true},   // 1: optimizer states sharded
    {true, true, false, false, true},    // 2: + gradients sharded
    {true, true, true, false, false},    // 3: + parameters sharded, gathered on demand
};

}  // namespace zero
