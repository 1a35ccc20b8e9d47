// Settings: everything a run's Config decides, resolved once, in one place (the way FSDP2
// resolves its mixed-precision policy), for a world of a given size. The engine, the planner,
// the time model and both commands read these values instead of re-deriving them from the
// Config: the dtypes, the stage's row of the policy table, which buffers alias which, the
// groups, the layout's options, the bucket, prefetch and live limits, offload. Every rule that
// turns a Config into a decision is in resolve_settings, and nowhere else. What the resolution
// overrides is said in `notes`, one sentence each, for the caller to print once.
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
  // ZeRO-Offload (offload_optimizer.device cpu, stages 1-3, a device run): the fp32 master, the
  // optimizer state, the fp32 reduced gradient shard and the update live in host memory and run
  // on the CPU kernels (docs/offload.md). A CPU run's state is in host memory already: false.
  bool offload = false;
  // What travels compressed (zero/compression.hpp): the gradient reduction's encoding, stage 3's
  // gathers.
  WireCompression compression;
  // offload_param.device cpu at stage 3 on a device run: the 16-bit param shards in host memory,
  // uploaded for each gather.
  bool offload_params = false;
  std::vector<std::string> notes;               // what was overridden, one sentence each

  // Stage 3's prefetch rule, the engine's: gather a unit of `padded` elements ahead of use when
  // the window, already holding `ahead` elements, and the gathered units, `live` elements, both
  // stay within their limits. A window or live limit smaller than a unit prefetches nothing.
  bool prefetches(std::int64_t ahead, std::int64_t live, std::int64_t padded) const {
    return ahead + padded <= prefetch_window && live + padded <= max_live;
  }
};

// Resolves `config` for a world of `world` ranks. Throws zero::Error naming the key on a value no
// stage can run: a stage outside 0..3, accumulation < 1, a reduce dtype that is neither fp32 nor
// the training dtype, a group rule broken (check_groups), a bucket under one element, a negative
// prefetch, live or persistence limit, optimizer offload at stage 0. `device`: the engine keeps
// its state in device memory (a GPU, or the emulated device); offload acts only there.
Settings resolve_settings(const Config& config, int world,
                          std::int64_t align_elements = kDefaultAlignElements, bool device = true);

// The group rules, for a world of `world` ranks: the shard group (mics_shard_size) and the hpZ
// group (zero_hpz_partition_size) divide the world, and not both are set. resolve_settings
// applies them; Config::validate_world too, so that the batch's resolution refuses them early.
void check_groups(const ZeroConfig& zero, int world);

}  // namespace zero
