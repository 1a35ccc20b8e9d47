// DeepSpeed's configuration keys that zero accepts without acting on them, per JSON object,
// each with what zero does instead when that is worth saying, and the value at which DeepSpeed
// behaves as zero does (no warning then; see Inert). Reading one set to another value adds a
// warning to Config::warnings; its value is not checked. When DeepSpeed adds a key, add it here
// and to docs/config.md. (zero's own keys are listed where config_read.cpp reads them.)
#pragma once

#include "zero/json_reader.hpp"

namespace zero::detail {

inline constexpr Inert kTopLevelInert[] = {
    {"wall_clock_breakdown", {}, "false"},
    {"memory_breakdown", {}, "false"},
    {"prescale_gradients", "gradients are averaged after the reduction", "false"},
    {"gradient_predivide_factor", "gradients are averaged after the reduction", "1"},
    {"sparse_gradients", "gradients are dense", "false"},
    {"amp", "use bf16 or fp16 for mixed precision"},
    {"aio", {}, "*"},
    {"zero_allow_untested_optimizer", {}, "*"},
    {"zero_force_ds_cpu_optimizer", {}, "*"},
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
    {"dataloader_drop_last", "the trainer feeds the batches", "false"},
    {"disable_allgather", {}, "false"},
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
    {"torch_autocast"},
    {"expert_parallel"},
    {"sequence_parallel_size", {}, "1"},
    {"zenflow"}};

inline constexpr Inert kOptimizerInert[] = {{"legacy_fusion", {}, "false"}};

// FusedAdam's and torch.optim's switches that do not change the update zero computes.
inline constexpr Inert kOptimizerParamsInert[] = {
    {"torch_adam", "zero always runs its own AdamW kernel", "false"},
    {"set_grad_none", {}, "*"},
    {"fused", {}, "*"},
    {"foreach", {}, "*"},
    {"capturable", {}, "*"},
    {"differentiable", {}, "false"}};

inline constexpr Inert kSchedulerParamsInert[] = {
    {"last_batch_iteration", "the step comes from the engine (and its checkpoint)", "-1"}};

inline constexpr Inert kBf16Inert[] = {
    {"immediate_grad_update", {}, "false"},
    {"check_grad_overflow", {}, "false"},
    {"bf16_master_weights_and_grads", "master weights are always fp32", "false"},
    {"bf16_optimizer_states", "optimizer state is always fp32", "false"}};

inline constexpr Inert kFp16Inert[] = {
    {"auto_cast", "the trainer's forward chooses its input types", "false"},
    {"fused_mode", {}, "*"},
    {"fp16_master_weights_and_grads", "master weights are always fp32", "false"}};

inline constexpr Inert kZeroInert[] = {
    {"contiguous_gradients", "gradients always live in contiguous buffers planned by the layout",
     "true"},
    {"reduce_scatter", "gradients are always reduce-scattered", "true"},
    {"allgather_partitions", "updated parameters are always all-gathered", "true"},
    {"round_robin_gradients", {}, "false"},
    {"sub_group_size", "the optimizer steps each unit's shard at once", "1e9"},
    {"stage3_gather_16bit_weights_on_model_save", "zero does not save models", "false"},
    {"stage3_gather_fp16_weights_on_model_save", "zero does not save models", "false"},
    {"use_multi_rank_bucket_allreduce", {}, "*"},
    {"load_from_fp32_weights", {}, "true"},
    {"elastic_checkpoint", {}, "false"},
    {"stage3_model_persistence_threshold"},
    {"stage3_module_granularity_threshold"},
    {"stage3_use_all_reduce_for_fetch_params"},
    {"stage3_allgather_sequential"},
    {"stage3_partition_stream_chunk_size"},
    {"ignore_unused_parameters", {}, "*"},
    {"legacy_stage1", {}, "false"},
    {"zero_quantized_nontrainable_weights", {}, "false"},
    {"zeropp_loco_param"},
    {"mics_hierarchical_params_gather", {}, "false"},
    {"memory_efficient_linear", {}, "*"},
    {"pipeline_loading_checkpoint", {}, "false"},
    {"override_module_apply", {}, "*"},
    {"log_trace_cache_warnings", {}, "false"},
    {"enable_sanity_checks", {}, "false"},
    {"cpu_offload_use_pin_memory", {}, "*"},
    {"leaf_module"},
    {"zenflow"},
    {"save_muon_momentum_buffer_in_memory"}};

// The offload blocks' keys zero does not act on ("device", "pin_memory" and the optimizer's
// "ratio" are read in config_read.cpp): the NVMe tier's (refused with device nvme), and tuning
// keys of DeepSpeed's own CPU optimizer and schedule, which DeepSpeed reads only when
// offloading: no warning. docs/config.md, "Offload".
inline constexpr Inert kOffloadOptimizerInert[] = {{"nvme_path", {}, "*"},
                                                   {"buffer_count", {}, "*"},
                                                   {"pipeline_read", {}, "*"},
                                                   {"pipeline_write", {}, "*"},
                                                   {"fast_init", {}, "*"},
                                                   {"super_offload", "zero runs ZeRO-Offload's schedule", "false"},
                                                   {"convert_grad_on_cpu", {}, "*"},
                                                   {"cpuadam_cores_perc", {}, "*"}};

inline constexpr Inert kOffloadParamInert[] = {{"nvme_path", {}, "*"},
                                               {"buffer_count", {}, "*"},
                                               {"buffer_size", {}, "*"},
                                               {"max_in_cpu", {}, "*"}};

}  // namespace zero::detail
