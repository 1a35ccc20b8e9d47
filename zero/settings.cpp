// resolve_settings (zero/settings.hpp): every rule that turns a Config into a decision.
#include "zero/settings.hpp"

#include "base/error.hpp"
#include "zero/compression_read.hpp"

namespace zero {
namespace {

// The dtypes: what the precision trains in and what the gradients are reduced in.
void resolve_dtypes(const Config& c, Settings& s) {
  s.precision = c.precision;
  s.work_dtype = working_dtype(c.precision);
  // fp32 training reduces in fp32 whatever communication_data_type asks.
  s.reduce_dtype = c.precision == Precision::fp32 ? DType::f32 : c.communication_data_type;
  if (s.reduce_dtype != DType::f32 && s.reduce_dtype != s.work_dtype)
    throw Error(cat("expected fp32 or the training dtype (", name_of(s.work_dtype), "), got ",
                    name_of(s.reduce_dtype)),
                {.key = "communication_data_type"});
  if (s.reduce_dtype != c.communication_data_type)
    s.notes.push_back(cat("communication_data_type ", name_of(c.communication_data_type),
                          " has no effect with fp32 training: gradients are reduced in fp32"));
  s.params_alias_master =
      s.work_dtype == DType::f32 && s.policy.after_step != ParamsAfterStep::all_gather;
  s.reduced_aliases_grads = s.policy.gather_grads && s.reduce_dtype == s.work_dtype;
}

// The sizes in elements: none may be negative, and a bucket holds at least one element.
void check_sizes(const ZeroConfig& z) {
  auto at_least = [](std::int64_t v, std::int64_t least, const char* key, const char* what) {
    if (v < least)
      throw Error(cat("expected >= ", least, least == 1 ? " element" : " elements", " ", what,
                      ", got ", v),
                  {.key = cat("zero_optimization.", key)});
  };
  at_least(z.reduce_bucket_size, 1, "reduce_bucket_size", "per bucket");
  at_least(z.allgather_bucket_size, 1, "allgather_bucket_size", "per bucket");
  at_least(z.stage3_prefetch_bucket_size, 0, "stage3_prefetch_bucket_size", "gathered ahead");
  at_least(z.stage3_max_live_parameters, 0, "stage3_max_live_parameters", "gathered at once");
  at_least(z.stage3_param_persistence_threshold, 0, "stage3_param_persistence_threshold",
           "below which a unit stays gathered");
}

// ZeRO-Offload: acts on a device run; a CPU run's optimizer is in host memory already (said once).
// The offloaded master is a buffer of its own, so the working params never alias it.
void resolve_offload(const Config& c, bool device, Settings& s) {
  const bool optimizer = c.zero.offload_optimizer_device == OffloadDevice::cpu;
  const bool params = c.zero.offload_param_device == OffloadDevice::cpu && s.policy.shard_params;
  if (optimizer && !s.policy.shard_optimizer)
    throw Error("optimizer offload needs stage 1, 2 or 3 (stage 0 keeps the full optimizer state "
                "on every rank)",
                {.key = "zero_optimization.offload_optimizer.device"});
  if ((optimizer || params) && !device) {
    s.notes.push_back(cat(optimizer ? "offload_optimizer" : "offload_param",
                          " device cpu: this run's ranks compute on the CPU, so the master weights,"
                          " the optimizer state and its update are in host memory already; nothing"
                          " moves and the memory is that of the run without offload"));
    return;
  }
  s.offload = optimizer;
  s.offload_params = params;
  if (optimizer || params) s.params_alias_master = false;
}

}  // namespace

void check_groups(const ZeroConfig& z, int world) {
  if (world < 1) throw Error(cat("the world size must be at least 1, got ", world));
  const int shard_size = z.mics_shard_size > 0 ? z.mics_shard_size : world;
  if (world % shard_size != 0)
    throw Error(cat("the shard size ", shard_size, " does not divide the world size ", world,
                    ": shard groups must tile the ranks"),
                {.key = "zero_optimization.mics_shard_size"});
  const int hpz = z.zero_hpz_partition_size;
  if (hpz < 1 || world % hpz != 0)
    throw Error(cat(hpz, " does not divide the world size ", world),
                {.key = "zero_optimization.zero_hpz_partition_size"});
  if (hpz > 1 && shard_size < world)
    throw Error("zero_hpz_partition_size and mics_shard_size cannot both be set: hpZ keeps a "
                "secondary copy inside the node of params sharded over every rank; MiCS shards "
                "them over the group already",
                {.key = "zero_optimization.zero_hpz_partition_size"});
}

Settings resolve_settings(const Config& c, int world, std::int64_t align_elements, bool device) {
  Settings s;
  check_groups(c.zero, world);
  s.world = world;
  s.shard_size = c.zero.mics_shard_size > 0 ? c.zero.mics_shard_size : world;
  s.replicas = world / s.shard_size;
  if (c.zero.stage < 0 || c.zero.stage > 3)
    throw Error(cat("expected 0..3, got ", c.zero.stage), {.key = "zero_optimization.stage"});
  if (c.gradient_accumulation_steps < 1)
    throw Error(cat("expected >= 1, got ", c.gradient_accumulation_steps),
                {.key = "gradient_accumulation_steps"});
  check_sizes(c.zero);
  s.stage = c.zero.stage;
  s.policy = kStagePolicy[s.stage];
  resolve_dtypes(c, s);
  resolve_offload(c, device, s);
  s.accumulation = c.gradient_accumulation_steps;
  s.overlap = c.zero.overlap_comm;
  s.layout.shard_ranks = s.shard_size;
  s.layout.align_elements = align_elements;
  s.layout.persistence_threshold =
      s.policy.shard_params ? c.zero.stage3_param_persistence_threshold : 0;
  s.layout.bucket_elements = c.zero.reduce_bucket_size;
  s.allgather_bucket = c.zero.allgather_bucket_size;
  // Below stage 3 there is no on-demand gather to keep inside the node (config_read warns).
  const int hpz = c.zero.zero_hpz_partition_size;
  s.secondary_size = s.policy.shard_params && hpz > 1 && hpz < world ? hpz : 1;
  s.prefetch_window = c.zero.stage3_prefetch_bucket_size;
  s.max_live = c.zero.stage3_max_live_parameters;
  s.compression = resolve_compression(c, s.policy.shard_params);
  return s;
}

}  // namespace zero
