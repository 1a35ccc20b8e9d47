// Settings: everything a run's Config decides, resolved once, in one place (the way FSDP2
// resolves its mixed-precision policy), for a world of a given size. The engine, the planner
// and both commands read these values instead of re-deriving them from the Config: the dtypes,
// the stage's row of the policy table, which buffers alias which, the layout's options, the
// bucket, prefetch and live limits. What the resolution overrides is said in `notes`, one
// sentence each, for the caller to print once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "precision/dtype.hpp"
#include "zero/config.hpp"
#include "zero/layout.hpp"
#include "zero/stage_policy.hpp"

namespace zero {

struct Settings {
  int stage = 0;
  StagePolicy policy{};             // kStagePolicy[stage]
  Precision precision = Precision::fp32;
  DType work_dtype = DType::f32;    // params and gradients as the trainer sees them
  DType reduce_dtype = DType::f32;  // the reduced gradient (communication_data_type)
  // fp32 training where the working params are the fp32 master buffer itself (full at stage 0,
  // the shard at stage 3), updated in place: no copy is allocated.
  bool params_alias_master = false;
  // Stage 0 reducing in the working dtype: the reduced gradient lands in the gradient buffer.
  bool reduced_aliases_grads = false;
  std::int64_t accumulation = 1;    // gradient_accumulation_steps
  bool overlap = false;             // overlap_comm
  // Hierarchical sharding (mics_shard_size): the states are sharded over groups of shard_size
  // consecutive ranks and replicated `replicas` times; flat ZeRO is one group of every rank.
  int world = 1;
  int shard_size = 1;
  int replicas = 1;
  // ZeRO++ hpZ (zero_hpz_partition_size, stage 3): a secondary copy of each unit's params,
  // sharded over groups of this many consecutive ranks (a node), made from the forward gather,
  // so that the backward gather stays inside the group. 1: off.
  int secondary_size = 1;
  // Ranks that share the shards (shard_size), alignment, stage 3's persistence threshold (0
  // below stage 3), the reduce bucket.
  LayoutOptions layout;
  std::int64_t allgather_bucket = kDefaultBucketElements;  // elements per all-gather after the step
  std::int64_t prefetch_window = 0;             // stage 3: elements gathered ahead
  std::int64_t max_live = 0;                    // stage 3: gathered elements at once
  std::vector<std::string> notes;               // what was overridden, one sentence each
};

// Resolves `config` for a world of `world` ranks. Throws zero::Error naming the key on a value no
// stage can run: a stage outside 0..3, accumulation < 1, a reduce dtype that is neither fp32 nor
// the training dtype, a shard group that does not divide the world, hpZ with shard groups.
Settings resolve_settings(const Config& config, int world, std::int64_t align_elements = 64);

}  // namespace zero
