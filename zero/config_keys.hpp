// DeepSpeed's configuration keys that zero accepts without acting on them, per JSON object,
// each with what zero does instead when that is worth saying. Reading one adds a warning to
// Config::warnings; its value is not checked. When DeepSpeed adds a key, add it here and to
// docs/config.md. (zero's own keys are listed where config.cpp reads them.)
#pragma once

#include "zero/json_reader.hpp"

namespace zero::detail {

inline constexpr Inert kTopLevelInert[] = {
    {"wall_clock_breakdown"},
    {"memory_breakdown"},
    {"prescale_gradients"},
    {"gradient_predivide_factor"},
    {"sparse_gradients"},
    {"amp", "use bf16 or fp16 for mixed precision"},
    {"aio"},
    {"zero_allow_untested_optimizer", "zero implements its optimizers itself"},
    {"zero_force_ds_cpu_optimizer"},
    {"activation_checkpointing"},
    {"sparse_attention"},
    {"data_efficiency"},
    {"curriculum_learning"},
    {"flops_profiler"},
    {"tensorboard"},
    {"wandb"},
    {"csv_monitor"},
    {"comet"},
    {"elasticity"},
    {"autotuning"},
    {"comms_logger"},
    {"compression_training"},
    {"checkpoint"},
    {"data_types", "gradients are always accumulated in fp32"},
    {"dump_state"},
    {"dataloader_drop_last"},
    {"disable_allgather"},
    {"seq_parallel_communication_data_type"},
    {"pipeline"},
    {"progressive_layer_drop"},
    {"eigenvalue"},
    {"quantize_training"},
    {"vocabulary_size"},
    {"graph_harvesting"},
    {"timers"},
    {"weight_quantization"},
    {"hybrid_engine"},
    {"nebula"},
    {"use_data_before_expert_parallelism"},
    {"compile"},
    {"tensor_parallel"},
    {"torch_autocast"}};

inline constexpr Inert kOptimizerInert[] = {{"legacy_fusion"}};

// FusedAdam's and torch.optim's switches that do not change the update zero computes.
inline constexpr Inert kOptimizerParamsInert[] = {
    {"torch_adam", "zero always runs its own AdamW kernel"},
    {"set_grad_none"},
    {"fused"},
    {"foreach"},
    {"capturable"},
    {"differentiable"}};

inline constexpr Inert kSchedulerParamsInert[] = {
    {"last_batch_iteration", "the step comes from the engine (and its checkpoint)"}};

inline constexpr Inert kBf16Inert[] = {
    {"immediate_grad_update"},
    {"check_grad_overflow"},
    {"bf16_master_weights_and_grads", "master weights are always fp32"},
    {"bf16_optimizer_states", "optimizer state is always fp32"}};

inline constexpr Inert kFp16Inert[] = {
    {"auto_cast", "the trainer's forward chooses its input types"},
    {"fused_mode"},
    {"fp16_master_weights_and_grads", "master weights are always fp32"}};

inline constexpr Inert kZeroInert[] = {
    {"contiguous_gradients", "gradients always live in contiguous buffers planned by the layout"},
    {"reduce_scatter", "gradients are always reduce-scattered"},
    {"allgather_partitions", "updated parameters are always all-gathered"},
    {"round_robin_gradients"},
    {"sub_group_size"},
    {"stage3_gather_16bit_weights_on_model_save"},
    {"stage3_gather_fp16_weights_on_model_save"},
    {"use_multi_rank_bucket_allreduce"},
    {"load_from_fp32_weights"},
    {"elastic_checkpoint"},
    {"stage3_model_persistence_threshold"},
    {"stage3_module_granularity_threshold"},
    {"stage3_use_all_reduce_for_fetch_params"},
    {"stage3_allgather_sequential"},
    {"stage3_partition_stream_chunk_size"},
    {"ignore_unused_parameters"},
    {"legacy_stage1"},
    {"zero_quantized_weights"},
    {"zero_quantized_nontrainable_weights"},
    {"zero_quantized_gradients"},
    {"zeropp_loco_param"},
    {"mics_shard_size"},
    {"mics_hierarchical_params_gather"},
    {"memory_efficient_linear"},
    {"pipeline_loading_checkpoint"},
    {"override_module_apply"},
    {"log_trace_cache_warnings"},
    {"enable_sanity_checks"},
    {"cpu_offload_use_pin_memory"},
    {"leaf_module"},
    {"zenflow"},
    {"save_muon_momentum_buffer_in_memory"}};

// The offload blocks' tuning keys; only "device" is read (and only "none" accepted).
inline constexpr Inert kOffloadOptimizerInert[] = {
    {"pin_memory"},          {"nvme_path"},         {"buffer_count"}, {"pipeline_read"},
    {"pipeline_write"},      {"fast_init"},         {"ratio"},        {"super_offload"},
    {"convert_grad_on_cpu"}, {"cpuadam_cores_perc"}};

inline constexpr Inert kOffloadParamInert[] = {
    {"pin_memory"}, {"nvme_path"}, {"buffer_count"}, {"buffer_size"}, {"max_in_cpu"}};

}  // namespace zero::detail
