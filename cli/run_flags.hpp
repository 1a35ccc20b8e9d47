// The flags `zero train` and `zero plan` both read, defined once with their help and defaults, so
// that `zero plan` with a run's flags plans that very run: the device, the batch sizes and their
// defaults, the GPT's compute dtype and recomputation.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "models/gpt.hpp"
#include "zero/config.hpp"

namespace zero::cli {

// --device: cpu, cuda, auto (train's default: cuda when every rank has a GPU of its own) or
// emulated (the device code path on host memory: cli/run_device.hpp).
void add_device_option(boost::program_options::options_description& opts, std::string& device);
void check_device_flag(const std::string& device);

// --device as `zero plan` resolves it: "cuda" and "cpu" as given, "emulated" a device (with
// MPI's staging: PlanInput::emulated_device, set by the caller); "auto" as `zero train` would
// decide on this machine: cuda when this build has CUDA and the machine a GPU for each of
// `ranks_per_node` ranks (`zero plan --cluster` plans the profile's GPUs). `why` says how "auto"
// decided ("" for a device given).
bool plan_device_is_gpu(const std::string& device, int ranks_per_node, std::string& why);

// --global-batch, --micro-batch and --accum, bound to the given targets.
struct BatchTargets {
  std::int64_t* global_batch;
  std::int64_t* micro_batch;
  std::int64_t* accum;
};
void add_batch_options(boost::program_options::options_description& opts, BatchTargets t);
void check_batch_flags(const boost::program_options::variables_map& vm, std::int64_t global_batch,
                       std::int64_t micro_batch, std::int64_t accum);

// The batch keys the flags set, as if the config had given them (DeepSpeed's rule then derives
// the rest in Config::resolve_batch).
void apply_batch_flags(const boost::program_options::variables_map& vm, std::int64_t global_batch,
                       std::int64_t micro_batch, std::int64_t accum, Config& config);

// The global batch when neither a flag nor the config gives one: 64 samples of the MLP, 16
// sequences of the GPT, rounded up to a multiple of the ranks x the accumulation (so that every
// rank count has one). `world` < 1 (not known yet): left unset.
std::int64_t default_global_batch(bool gpt, int world, std::int64_t accumulation);
void apply_default_batch(Config& config, bool gpt, int world);

// --compute, the GPT's math: bf16 or fp32; by default bf16 with bf16 params, else fp32.
void add_compute_option(boost::program_options::options_description& opts, std::string& compute);
void check_compute_flag(const boost::program_options::variables_map& vm, const std::string& compute);
models::GptCompute resolve_compute(const boost::program_options::variables_map& vm,
                                   const std::string& compute, Precision precision);

// --recompute: the GPT's full activation recomputation (each block keeps only its input and
// runs its forward again in backward).
void add_recompute_option(boost::program_options::options_description& opts);

}  // namespace zero::cli
